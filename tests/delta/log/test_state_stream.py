"""The worker's checks streamed in bounded memory answer exactly as the in-memory snapshot does.

The property test draws random histories of a (partitioned or not) table: appends, removes,
deletion-vector updates (remove and add of one path), re-adds of removed paths, OPTIMIZE commits,
and checkpoints written as a classic file, a multi-part checkpoint or a V2 checkpoint with
sidecars (its top-level file parquet or JSON), some of them corrupt (a file live twice). Every
check is then compared: the live files and tombstones the stream yields, OPTIMIZE's skip reason
under several option sets (auto policy, predicate, Z-order, young files, recent partitions,
``target_files``), VACUUM lite's valid-set lookup and log compaction's distrust check.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.app.jobs.optimize import local_rewrite_bytes as rewrite_bytes
from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from
from airflow_delta_maint.delta.plans.optimize_decision import (auto_decision, plan_from_options, plan_outline, skip_reason,
                                                               streamed_plan_outline)
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log import state_stream
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.compaction import _distrusted
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state, path_hashes
from airflow_delta_maint.delta.plans.vacuum_valid import valid_among
from airflow_delta_maint.delta.protocol.actions import dv_unique_id
from airflow_delta_maint.delta.protocol.features import check_supported
from airflow_delta_maint.delta.storage.store import Storage
from tests.delta.log.test_conformance import make_v2_checkpoint, split_checkpoint

NOW = 1_760_000_000_000
OLD = NOW - 30 * 86_400_000
PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                         "writerFeatures": ["deletionVectors"]}}
SCHEMA = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                       {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}
PARTITIONS = ["a", "b", None, "c d"]
SIZES = [10, 40, 60, 100, 500, 900, 2_000]


def metadata(partitioned: bool, target: int) -> dict:
    return {"metaData": {"id": "stream-test", "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps(SCHEMA), "partitionColumns": ["p"] if partitioned else [],
                         "configuration": {"delta.enableDeletionVectors": "true", "delta.targetFileSize": str(target)},
                         "createdTime": 1}}


def _dv(n: int, inline: bool) -> dict:
    if inline:
        return {"storageType": "i", "pathOrInlineDv": f"wi5b=000010000siXQKl0rr91{n % 10}", "offset": None,
                "sizeInBytes": 10 + n, "cardinality": 1 + n % 5}
    return {"storageType": "p", "pathOrInlineDv": f"deletion_vector_{n}.bin", "offset": 1 + n % 3,
            "sizeInBytes": 20, "cardinality": 1 + n % 7}


@st.composite
def histories(draw):
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    partitioned = draw(st.booleans())
    commits: list[list[dict]] = []
    live: dict[str, dict] = {}
    removed: dict[str, dict] = {}
    counter = 0
    checkpoints: dict[int, str] = {}
    for version in range(1, draw(st.integers(3, 14)) + 1):
        actions: list[dict] = []
        kind = rnd.choice(["append", "append", "remove", "dv", "readd", "optimize"])
        operation = "WRITE"
        touched: set[str] = set()

        def new_add(path: str, dv: dict | None = None, data_change: bool = True) -> dict:
            body = {"path": path, "partitionValues": {"p": rnd.choice(PARTITIONS)} if partitioned else {},
                    "size": rnd.choice(SIZES), "modificationTime": rnd.choice([OLD, NOW + 10**9]),
                    "dataChange": data_change}
            if rnd.random() < 0.85:
                body["stats"] = json.dumps({"numRecords": rnd.choice([1, 5, 20, 100])})
            if dv is not None:
                body["deletionVector"] = dv
            return body

        if kind == "append" or not live:
            for _ in range(rnd.randint(1, 4)):
                counter += 1
                path = rnd.choice([f"p{counter}.parquet", f"p={counter % 3}/f{counter}.parquet",
                                   f"part%20{counter}.parquet"])
                body = new_add(path)
                actions.append({"add": body})
                live[path] = body
        elif kind == "remove":
            for path in rnd.sample(sorted(live), min(len(live), rnd.randint(1, 2))):
                body = live.pop(path)
                rem = {"path": path, "deletionTimestamp": rnd.choice([OLD, NOW]), "dataChange": True,
                       "size": body["size"], "partitionValues": body["partitionValues"]}
                if body.get("deletionVector"):
                    rem["deletionVector"] = body["deletionVector"]
                actions.append({"remove": rem})
                removed[path] = body
            operation = "DELETE"
        elif kind == "dv":
            path = rnd.choice(sorted(live))
            body = live[path]
            rem = {"path": path, "deletionTimestamp": NOW, "dataChange": True, "size": body["size"],
                   "partitionValues": body["partitionValues"]}
            if body.get("deletionVector"):
                rem["deletionVector"] = body["deletionVector"]
            counter += 1
            new = dict(body, deletionVector=_dv(counter, rnd.random() < 0.5))
            actions += [{"remove": rem}, {"add": new}]
            live[path] = new
            operation = "DELETE"
        elif kind == "readd" and removed:
            path = rnd.choice(sorted(removed))
            body = new_add(path)
            body["partitionValues"] = removed.pop(path)["partitionValues"]
            actions.append({"add": body})
            live[path] = body
        else:
            group = rnd.sample(sorted(live), min(len(live), rnd.randint(1, 3)))
            part = live[group[0]]["partitionValues"]
            for path in group:
                body = live.pop(path)
                rem = {"path": path, "deletionTimestamp": NOW, "dataChange": False, "size": body["size"],
                       "partitionValues": body["partitionValues"]}
                if body.get("deletionVector"):
                    rem["deletionVector"] = body["deletionVector"]
                actions.append({"remove": rem})
                removed[path] = body
            counter += 1
            body = new_add(f"opt{counter}.parquet", data_change=False)
            body["partitionValues"] = part
            actions.append({"add": body})
            live[body["path"]] = body
            operation = "OPTIMIZE"
        del touched
        actions.insert(0, {"commitInfo": {"timestamp": NOW + version, "operation": operation,
                                          "operationParameters": {"predicate": "[]"}}})
        commits.append(actions)
        if rnd.random() < 0.3:
            checkpoints[version] = rnd.choice(["classic", "multipart", "v2", "v2json", "corrupt"])
    return partitioned, rnd.choice([500, 1_000, 5_000]), commits, checkpoints


def write_history(root: Path, partitioned: bool, target: int, commits: list[list[dict]],
                  checkpoints: dict[int, str], first: list[dict] | None = None) -> None:
    """Commits 0 (``first``, else a table with deletion vectors) to N, with the checkpoints asked for."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    first = first or [{"commitInfo": {"timestamp": NOW, "operation": "CREATE TABLE"}}, PROTOCOL,
                      metadata(partitioned, target)]
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in first))
    for version, actions in enumerate(commits, 1):
        (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
        kind = checkpoints.get(version)
        if kind is None:
            continue
        write_checkpoint(Snapshot.load(str(root), version=version), now_ms=NOW)
        if kind == "multipart":
            split_checkpoint(root, version, 3)
        elif kind in ("v2", "v2json"):
            make_v2_checkpoint(root, version, sidecars=2, json_manifest=kind == "v2json")
        elif kind == "corrupt":
            key = log / f"{version:020d}.checkpoint.parquet"
            table = pq.read_table(key)
            adds = table.filter(table.column("add").is_valid())
            if adds.num_rows:
                pq.write_table(pa.concat_tables([table, adds.slice(0, 1)]), key)


def _file_set(table: pa.Table) -> list[tuple]:
    rows = table.select(["path", "deletionVector", "size"]).to_pylist()
    return sorted((r["path"], dv_unique_id(r["deletionVector"]), r["size"]) for r in rows)


def _streamed_sets(state) -> tuple[list, list]:
    adds, removes = [], []
    for kind, table in state.scan(["size"], ["size"]):
        (adds if kind == "add" else removes).append(table)
    return (sorted(x for t in adds for x in _file_set(t)), sorted(x for t in removes for x in _file_set(t)))


OPTION_SETS = [
    {},
    {"min_file_size": 100, "target_file_size": 160},
    {"min_file_size": 1_000, "target_file_size": 1_000, "dv_ratio": 0.5},
    {"auto": True, "min_num_files": 2},
    {"auto": True, "min_num_files": 1, "max_partitions": 1, "max_deleted_rows_ratio": 0.2},
    {"auto": True, "all_partitions": True, "min_num_files": 3, "min_file_size": 200},
    {"where": "p = 'a'", "min_file_size": 600},
    {"zorder_by": "id"},
    {"min_file_age": 3600, "min_file_size": 600},
    {"skip_recent_partitions": 2, "min_file_size": 600},
    {"min_file_size": -1},
    {"target_files": 2},
    {"target_files": 1, "where": "p = 'a'"},
    {"target_files": 3, "min_file_age": 3600},
    {"target_files": 2, "skip_recent_partitions": 2},
    {"target_files": 2, "auto": True, "min_num_files": 1},
    {"target_files": 0},
    {"rewrite_type_widened": True},
]


def _reference(root: str, params: dict):
    """Today's in-memory check: the whole snapshot, the policy and the plan."""
    snapshot = Snapshot.load(root)
    check_supported(snapshot.protocol, "optimize", snapshot.metadata)
    options = options_from(params)
    decision = auto_decision(snapshot, options)
    return skip_reason(plan_outline(plan_from_options(snapshot, options, decision), decision), options)


def _reference_bytes(root: str, params: dict):
    snapshot = Snapshot.load(root)
    options = options_from(params)
    plan = plan_from_options(snapshot, options, auto_decision(snapshot, options))
    return plan.input_bytes if plan.layout in ("binpack", "even") else None


def worker_check(table: str, params: dict):
    """The operators' check: the options typed, then the core's answer."""
    return nothing_to_do(table, None, options_from(params))


def _answer(fn, *args):
    try:
        result = fn(*args)
    except DeltaError as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", str(result) if result is not None else None, getattr(result, "details", None))


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=histories())
def test_streamed_checks_equal_the_in_memory_ones(tmp_path_factory, history):
    partitioned, target, commits, checkpoints = history
    root = tmp_path_factory.mktemp("t")
    write_history(root, partitioned, target, commits, checkpoints)
    table = str(root)
    snapshot = Snapshot.load(table)
    corrupt_in_use = bool(snapshot.distrusted)

    # the live files and tombstones
    state = open_state(table)
    try:
        adds, removes = _streamed_sets(state)
    except StreamFallback:
        assert corrupt_in_use, "the stream fell back on a log the snapshot trusts"
    else:
        assert not corrupt_in_use, "the stream missed a distrusted checkpoint"
        assert adds == _file_set(snapshot.files)
        assert removes == _file_set(snapshot.tombstones)
        assert state.version == snapshot.version and state.metadata == snapshot.metadata

    # OPTIMIZE's skip check, policy included
    for params in OPTION_SETS:
        params = dict(params, dv_ratio=params.get("dv_ratio", 0.05))
        expected = _answer(_reference, table, params)
        assert _answer(worker_check, table, params) == expected, params
        # the stream itself answers as the plan does (an outline, or the same error for bad input), unless a
        # distrusted checkpoint sent it to the snapshot
        try:
            streamed_plan_outline(open_state(table), options_from(params))
        except StreamFallback:
            assert corrupt_in_use, f"the stream fell back on a log the snapshot trusts: {params}"
        except DeltaError as exc:
            assert ("error", type(exc).__name__, str(exc)) == expected, params
        else:
            assert expected[0] == "ok", (params, expected)
        # the execution choice's bytes to rewrite
        assert _answer(rewrite_bytes, table, None, params) == _answer(_reference_bytes, table, params), params

    # VACUUM lite's lookup of candidates in the valid set
    keys = {p for actions in commits for a in actions for kind in ("add", "remove") if a.get(kind)
            for p in [a[kind]["path"].replace("%20", " ")]}
    keys |= {f"deletion_vector_{n}.bin" for n in range(40)}
    for cutoff in (OLD - 1, NOW, NOW + 1):
        expected = valid_among(Snapshot.load(table, paths_only=True), cutoff, keys)
        try:
            assert valid_among(open_state(table), cutoff, keys) == expected
        except StreamFallback:
            assert corrupt_in_use

    # log compaction's distrust check
    assert _distrusted(Storage(table)) == corrupt_in_use


def test_path_hashes_are_equal_for_equal_strings_and_spread():
    strings = [f"part-{i:05d}-{i * 7919 % 100_003}.snappy.parquet" for i in range(50_000)] + ["", "a", "a"]
    h = path_hashes(pa.array(strings, pa.string()))
    assert h[-1] == h[-2] and h[-3] != h[-2]
    assert len(np.unique(h[:-1])) == len(strings) - 1
    sliced = pa.array(strings, pa.large_string()).slice(10, 20)
    assert (path_hashes(sliced) == h[10:30]).all()


def test_hashes_spill_to_buckets_and_still_catch_a_path_live_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(state_stream, "SPILL_AT", 16)
    monkeypatch.setattr(state_stream, "BATCH_ROWS", 7)
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"f{v}-{i}.parquet", "partitionValues": {}, "size": 10, "modificationTime": OLD,
                         "dataChange": True}} for i in range(20)] for v in range(1, 4)]
    write_history(tmp_path / "ok", False, 1000, commits, {3: "classic"})
    write_history(tmp_path / "bad", False, 1000, commits, {3: "corrupt"})
    ok = open_state(str(tmp_path / "ok"))
    assert len(_streamed_sets(ok)[0]) == 60
    with pytest.raises(StreamFallback):
        _streamed_sets(open_state(str(tmp_path / "bad")))


def test_a_checkpoint_with_a_remove_of_a_live_file_falls_back(tmp_path):
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}},
                {"add": {"path": "x.parquet", "partitionValues": {}, "size": 10, "modificationTime": OLD,
                         "dataChange": True}}]]
    write_history(tmp_path, False, 1000, commits, {1: "classic"})
    key = tmp_path / "_delta_log" / f"{1:020d}.checkpoint.parquet"
    table = pq.read_table(key)
    adds = table.filter(table.column("add").is_valid())
    remove = pa.array([{"path": "x.parquet", "deletionTimestamp": NOW, "dataChange": True}],
                      table.schema.field("remove").type)
    row = adds.set_column(adds.schema.get_field_index("remove"), "remove", remove) \
        .set_column(adds.schema.get_field_index("add"), "add", pa.nulls(1, table.schema.field("add").type))
    pq.write_table(pa.concat_tables([table, row]), key)
    assert Snapshot.load(str(tmp_path)).distrusted
    with pytest.raises(StreamFallback):
        _streamed_sets(open_state(str(tmp_path)))


def test_the_log_size_counts_a_v2_checkpoints_sidecars(tmp_path):
    from airflow_delta_maint.app.execution import log_bytes

    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"f{i}.parquet", "partitionValues": {}, "size": 10, "modificationTime": OLD,
                         "dataChange": True}} for i in range(50)]]
    write_history(tmp_path, False, 1000, commits, {1: "v2"})
    log = tmp_path / "_delta_log"
    sidecars = sum(p.stat().st_size for p in (log / "_sidecars").iterdir())
    top = sum(p.stat().st_size for p in log.glob("*.checkpoint.*.parquet"))
    assert sidecars > 0
    assert log_bytes(str(tmp_path), all_commits=False) == top + sidecars


def _json_v2_table(tmp_path: Path) -> Path:
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"p={i % 3}/f{v}-{i}.parquet", "partitionValues": {"p": str(i % 3)}, "size": 10,
                         "modificationTime": OLD, "dataChange": True}} for i in range(30)] for v in range(1, 3)]
    commits.append([{"commitInfo": {"timestamp": NOW, "operation": "DELETE"}},
                    {"remove": {"path": "p=0/f1-0.parquet", "deletionTimestamp": NOW, "dataChange": True}}])
    write_history(tmp_path, True, 1000, commits, {2: "v2json"})
    return tmp_path


def test_a_json_v2_checkpoint_streams_its_sidecars(tmp_path, monkeypatch):
    root = str(_json_v2_table(tmp_path))
    snapshot = Snapshot.load(root)
    assert snapshot.segment.checkpoint is not None and snapshot.segment.checkpoint.files[0].key.endswith(".json")
    state = open_state(root)
    assert [k.rsplit("/", 2)[-2] for k, _ in state.part_files] == ["_sidecars", "_sidecars"]
    assert state.metadata == snapshot.metadata and state.protocol == snapshot.protocol
    assert _streamed_sets(state) == (_file_set(snapshot.files), _file_set(snapshot.tombstones))

    def no_snapshot(*args, **kwargs):
        raise AssertionError("the check loaded the whole snapshot")

    monkeypatch.setattr(Snapshot, "load", no_snapshot)
    assert nothing_to_do(root, None, options_from({"min_file_size": 5})) is not None
    assert nothing_to_do(root, None, options_from({})) is None


def test_a_json_checkpoint_with_file_actions_of_its_own_falls_back(tmp_path):
    root = _json_v2_table(tmp_path)
    log = root / "_delta_log"
    top = next(log.glob("*.checkpoint.*.json"))
    extra = {"add": {"path": "inline.parquet", "partitionValues": {"p": "1"}, "size": 10, "modificationTime": OLD,
                     "dataChange": False}}
    top.write_text(top.read_text() + json.dumps(extra) + "\n")
    snapshot = Snapshot.load(str(root))
    assert "inline.parquet" in snapshot.paths
    with pytest.raises(StreamFallback):
        open_state(str(root))
    assert _answer(worker_check, str(root), {}) == _answer(_reference, str(root), {})
