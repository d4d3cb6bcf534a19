"""A checkpoint written in parts from the streamed state holds exactly what the in-memory writer
writes, read back: the same adds and tombstones (retention applied), protocol, metaData, txn and
domainMetadata, on random histories whose source checkpoints are classic, multi-part, V2 with
sidecars or corrupt (the stream then refuses before writing anything)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log import checkpoint_parts
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.checkpoint_parts import write_checkpoint_in_parts
from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.checkpoint_read import read_checkpoint
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_size import checkpointed_files, use_streamed_state
from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state
from airflow_delta_maint.delta.protocol.actions import dv_unique_id
from airflow_delta_maint.delta.storage.store import Storage
from tests.delta.log import test_state_stream as state_stream_tests
from tests.delta.log.test_state_stream import NOW, OLD, histories, write_history

V2_PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors", "v2Checkpoint"],
               "writerFeatures": ["deletionVectors", "v2Checkpoint", "domainMetadata"]}
PLAIN_PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                  "writerFeatures": ["deletionVectors", "domainMetadata"]}


def _with_extras(commits: list[list[dict]], seed: int) -> list[list[dict]]:
    """The history with txn and domainMetadata actions sprinkled over its commits."""
    rnd = random.Random(seed)
    out = []
    for version, actions in enumerate(commits, 1):
        actions = list(actions)
        if rnd.random() < 0.3:
            actions.append({"txn": {"appId": rnd.choice(["app-a", "app-b"]), "version": version,
                                    "lastUpdated": NOW + version}})
        if rnd.random() < 0.3:
            domain = rnd.choice(["delta.clustering", "my.domain"])
            actions.append({"domainMetadata": {"domain": domain, "configuration": json.dumps({"v": version}),
                                               "removed": rnd.random() < 0.3}})
        out.append(actions)
    return out


def _table(root: Path, history, v2: bool, seed: int) -> Path:
    partitioned, target, commits, checkpoints = history
    saved = state_stream_tests.PROTOCOL
    state_stream_tests.PROTOCOL = {"protocol": PLAIN_PROTOCOL}
    try:
        write_history(root, partitioned, target, _with_extras(commits, seed), checkpoints)
    finally:
        state_stream_tests.PROTOCOL = saved
    if v2:  # a last commit turns the v2Checkpoint feature on
        log = root / "_delta_log"
        latest = max(int(p.name[:20]) for p in log.glob("*.json"))
        (log / f"{latest + 1:020d}.json").write_text(
            json.dumps({"commitInfo": {"timestamp": NOW + latest + 1, "operation": "UPGRADE PROTOCOL"}}) + "\n"
            + json.dumps({"protocol": V2_PROTOCOL}) + "\n")
    return root


def _ask_typed_stats(root: Path) -> None:
    """A last commit sets delta.checkpoint.writeStatsAsStruct on the table."""
    log = root / "_delta_log"
    latest = max(int(p.name[:20]) for p in log.glob("*.json"))
    meta = Snapshot.load(str(root)).metadata.raw
    conf = {**(meta.get("configuration") or {}), "delta.checkpoint.writeStatsAsStruct": "true"}
    (log / f"{latest + 1:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": NOW + latest + 1, "operation": "SET TBLPROPERTIES"}}) + "\n"
        + json.dumps({"metaData": {**meta, "configuration": conf}}) + "\n")


def _typed_columns(root: Path, version: int) -> dict[str, str]:
    """Per add path of the checkpoint at ``version``: its typed columns, as JSON."""
    import pyarrow.parquet as pq

    from airflow_delta_maint.delta.log.checkpoint_read import sidecar_key

    storage = Storage(str(root))
    cp = [c for c in list_log(storage, version).checkpoints if c.version == version][0]
    keys = [f.key for f in cp.files if f.key.endswith(".parquet")]
    for key in list(keys):
        table = pq.read_table(root / key)
        if "sidecar" in table.column_names:
            keys += [sidecar_key(s["path"]) for s in table.column("sidecar").to_pylist() if s]
    out: dict[str, str] = {}
    for key in keys:
        table = pq.read_table(root / key)
        if "add" not in table.column_names:
            continue
        for a in table.column("add").to_pylist():
            if a is not None:
                out[a["path"]] = json.dumps({k: a.get(k) for k in ("stats_parsed", "partitionValues_parsed")},
                                            sort_keys=True, default=str)
    return out


def _key(action: dict) -> tuple:
    return action["path"], dv_unique_id(action.get("deletionVector"))


def _read_back(root: Path, version: int) -> dict:
    """The actions of the checkpoint at ``version``, as plain comparable values."""
    storage = Storage(str(root))
    cps = [cp for cp in list_log(storage, version).checkpoints if cp.version == version]
    assert len(cps) == 1, cps
    data = read_checkpoint(storage, cps[0])
    adds = sorted((json.dumps(a, sort_keys=True, default=str) for a in data.adds.to_pylist()))
    removes = sorted((json.dumps(r, sort_keys=True, default=str) for r in data.removes.to_pylist()))
    return {"adds": adds, "removes": removes, "protocol": data.protocol, "metadata": data.metadata,
            "txns": data.txns, "domains": data.domains}


def _clean_checkpoints(root: Path, version: int) -> None:
    log = root / "_delta_log"
    for f in log.glob(f"{version:020d}.checkpoint*"):
        f.unlink()
    (log / "_last_checkpoint").unlink(missing_ok=True)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=histories(), v2=st.booleans(), seed=st.integers(0, 1000), retention_days=st.sampled_from([1, 60]),
       typed=st.booleans())
def test_parts_hold_what_the_in_memory_checkpoint_holds(tmp_path_factory, history, v2, seed, retention_days, typed):
    base = _table(tmp_path_factory.mktemp("t"), history, v2, seed)
    if typed:
        _ask_typed_stats(base)
    version = Snapshot.load(str(base)).version
    _clean_checkpoints(base, version)
    memory, parts = Path(str(base) + "-memory"), Path(str(base) + "-parts")
    shutil.copytree(base, memory)
    shutil.copytree(base, parts)
    now = NOW + retention_days * 86_400_000 - 7 * 86_400_000  # some tombstones expire, some not
    try:
        expected_metrics = write_checkpoint(Snapshot.load(str(memory)), now_ms=now)
    except DeltaError as exc:
        with pytest.raises(type(exc)):
            write_checkpoint_in_parts(open_state(str(parts)), now_ms=now)
        return
    try:
        state = open_state(str(parts))
        got_metrics = write_checkpoint_in_parts(state, now_ms=now)
    except StreamFallback:
        assert Snapshot.load(str(parts)).distrusted, "the stream refused a log the snapshot trusts"
        assert not list(parts.glob("_delta_log/*.checkpoint.*")) or \
            not [cp for cp in list_log(Storage(str(parts))).checkpoints if cp.version == version]
        return
    assert not Snapshot.load(str(memory)).distrusted
    assert _read_back(parts, version) == _read_back(memory, version)
    assert _typed_columns(parts, version) == _typed_columns(memory, version)
    if typed and any(f.get("stats") for f in Snapshot.load(str(memory)).files.to_pylist()):
        # a live file with statistics has them typed in the parts (files without any have none to type)
        assert any('"stats_parsed": null' not in v for v in _typed_columns(parts, version).values())
    assert got_metrics["num_add_files"] == expected_metrics["num_add_files"]
    sidecar_actions = got_metrics["parts"] - 1 if v2 else 0
    assert got_metrics["num_actions"] == expected_metrics["num_actions"] + sidecar_actions
    assert got_metrics["kind"] == ("multipart" if not v2 else "v2")
    # the new checkpoint is the one a reader uses, and reads to the same state
    a, b = Snapshot.load(str(parts)), Snapshot.load(str(memory))
    assert a.segment.checkpoint_version == version and not a.distrusted
    assert sorted(map(_key, a.files.to_pylist())) == sorted(map(_key, b.files.to_pylist()))
    hint = json.loads((parts / "_delta_log" / "_last_checkpoint").read_text())
    assert hint["version"] == version and hint["numOfAddFiles"] == expected_metrics["num_add_files"]
    # a second run finds it and writes nothing
    again = write_checkpoint_in_parts(open_state(str(parts)), now_ms=now)
    assert again["already_existed"] and again["num_add_files"] == expected_metrics["num_add_files"]


def test_slices_of_row_groups_and_many_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_parts, "SLICE_ROWS", 5)
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"f{v}-{i}.parquet", "partitionValues": {}, "size": 10, "modificationTime": OLD,
                         "dataChange": True}} for i in range(20)] for v in range(1, 4)]
    commits.append([{"commitInfo": {"timestamp": NOW, "operation": "DELETE"}},
                    {"remove": {"path": "f1-3.parquet", "deletionTimestamp": NOW, "dataChange": True}}])
    write_history(tmp_path / "t", False, 1000, commits, {3: "classic"})
    root = tmp_path / "t"
    # the source checkpoint in row groups of 7 rows
    import pyarrow.parquet as pq

    src = root / "_delta_log" / f"{3:020d}.checkpoint.parquet"
    table = pq.read_table(src)
    pq.write_table(table, src, row_group_size=7)
    m = write_checkpoint_in_parts(open_state(str(root)), now_ms=NOW)
    assert m["kind"] == "multipart" and m["parts"] > 5 and m["num_add_files"] == 59
    snap = Snapshot.load(str(root))
    assert snap.segment.checkpoint.kind == "multipart" and snap.num_files == 59
    assert sorted(snap.paths) == sorted(Snapshot.load(str(root), version=4).paths)


def test_the_threshold_reads_the_hint_and_the_callers_threshold(tmp_path):
    """The caller passes the threshold (the application's ``stream_min_files`` setting, whose reading from
    ``DELTA_MAINT_STREAM_MIN_FILES`` tests/app/test_settings.py checks); the core reads no environment."""
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"f{v}-{i}.parquet", "partitionValues": {}, "size": 10, "modificationTime": OLD,
                         "dataChange": True}} for i in range(10)] for v in range(1, 3)]
    write_history(tmp_path / "t", False, 1000, commits, {})
    storage = Storage(str(tmp_path / "t"))
    assert checkpointed_files(storage) == 0 and not use_streamed_state(storage)
    write_checkpoint(Snapshot.load(storage), now_ms=NOW)
    assert checkpointed_files(storage) == 20
    assert not use_streamed_state(storage)
    assert use_streamed_state(storage, 20)
    assert not use_streamed_state(storage, 21)
    assert use_streamed_state(storage, 0)  # 0: always streamed
    hint = tmp_path / "t" / "_delta_log" / "_last_checkpoint"
    hint.write_text(json.dumps({**json.loads(hint.read_text()), "version": 99}))
    assert checkpointed_files(storage) > 0  # a hint past the log: the whole log is listed, the checkpoint found
    hint.unlink()
    assert checkpointed_files(storage) > 0  # from the checkpoint's bytes


def test_the_size_is_read_from_the_hint_without_listing_the_log_before_it(tmp_path, monkeypatch):
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"f{v}-{i}.parquet", "partitionValues": {}, "size": 10, "modificationTime": OLD,
                         "dataChange": True}} for i in range(10)] for v in range(1, 6)]
    write_history(tmp_path / "t", False, 1000, commits, {})
    storage = Storage(str(tmp_path / "t"))
    write_checkpoint(Snapshot.load(storage, version=2), now_ms=NOW)
    write_checkpoint(Snapshot.load(storage), now_ms=NOW)
    starts: list[str | None] = []
    listed = Storage.list_from
    monkeypatch.setattr(Storage, "list_from", lambda self, prefix, start_after=None: (
        starts.append(start_after), listed(self, prefix, start_after=start_after))[1])
    assert checkpointed_files(storage) == 50
    assert starts == ["_delta_log/00000000000000000004.zzz"]  # from the checkpoint the hint names on
