"""OPTIMIZE planned in rounds from the streamed state (``optimize_rounds``, ``optimize_large``) makes
exactly the bins of the plan of the whole snapshot, on random histories (deletion vectors,
re-adds, removes, every kind of checkpoint) and option sets, whatever the round size."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.app.jobs.optimize import options_from
from airflow_delta_maint.delta.plans.optimize_decision import auto_decision, plan_from_options, streamed_plan_outline
from airflow_delta_maint.app.jobs.optimize_large import merge_rounds
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state
from airflow_delta_maint.delta.plans import optimize_rounds
from airflow_delta_maint.delta.plans.optimize_rounds import (iter_round_snapshots, live_files_among, partition_rounds,
                                                             spill_rounds)
from airflow_delta_maint.delta.protocol.actions import dv_unique_id
from tests.delta.log.test_state_stream import NOW, histories, write_history

OPTIONS = [
    {},
    {"min_file_size": 100, "target_file_size": 1_000},
    {"min_file_size": 1_000, "target_file_size": 1_200, "dv_ratio": 0.0},
    {"purge": True},
    {"policy": "auto", "min_num_files": 2, "max_partitions": 2},
    {"policy": "auto", "all_partitions": True, "min_num_files": 1},
    {"zorder_by": "id"},
    {"where": "p = 'a' OR p IS NULL"},
    {"min_file_age": 3600.0},
    {"skip_recent_partitions": 2},
]


def _bins(bins) -> list[tuple]:
    return [(sorted((k, v or "") for k, v in b.partition_values.items()),
             [(f["path"], dv_unique_id(f.get("deletionVector")), f["size"]) for f in b.files], b.input_bytes)
            for b in bins]


def _round_bins(root: str, params: dict, max_files: int) -> tuple[list[tuple], int]:
    state = open_state(root)
    options = options_from(params)
    outline = streamed_plan_outline(state, options, keep_scan=True)
    rounds = partition_rounds(outline.scan, outline.selected, outline.layout == "zorder", max_files)
    out: list[tuple] = []
    with spill_rounds(state, rounds, min_file_size=outline.min_file_size, zorder=outline.layout == "zorder") as spill:
        for _, partial in iter_round_snapshots(state, spill):
            out += _bins(plan_from_options(partial, options, outline.decision).bins)
    return out, len(rounds)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=histories(), options=st.sampled_from(OPTIONS), max_files=st.sampled_from([1, 2, 3, 1000]))
def test_rounds_make_the_bins_of_the_whole_plan(tmp_path_factory, monkeypatch, history, options, max_files):
    monkeypatch.setattr(optimize_rounds, "SPILL_BUFFER_ROWS", 2)  # the spill writes while the stream goes on
    root = tmp_path_factory.mktemp("t")
    write_history(root, *history)
    try:
        snapshot = Snapshot.load(str(root))
        typed = options_from(options)
        whole = _bins(plan_from_options(snapshot, typed, auto_decision(snapshot, typed)).bins)
    except DeltaError as exc:  # bad input for this table: the rounds refuse it alike, with the same error
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            _round_bins(str(root), options, max_files)
        return
    try:
        rounds, count = _round_bins(str(root), options, max_files)
    except StreamFallback:
        return  # the run plans on the whole snapshot then
    assert rounds == whole
    partitions = {tuple(b[0]) for b in whole}
    if not whole:
        assert count == 0
    elif max_files == 1:
        assert count == len(partitions)  # a round per partition with work


def test_a_partition_larger_than_a_round_is_one_round(tmp_path):
    import json

    from tests.delta.log.test_state_stream import PROTOCOL, metadata

    commits = [[{"add": {"path": f"p=a/f{i}.parquet", "partitionValues": {"p": "a"}, "size": 10 + i,
                         "modificationTime": NOW, "dataChange": True, "stats": json.dumps({"numRecords": 1})}}
                for i in range(5)],
               [{"add": {"path": f"p=b/f{i}.parquet", "partitionValues": {"p": "b"}, "size": 10 + i,
                         "modificationTime": NOW, "dataChange": True}} for i in range(2)]]
    write_history(tmp_path, True, 1_000, commits, {1: "classic"},
                  first=[{"commitInfo": {"timestamp": NOW}}, PROTOCOL, metadata(True, 1_000)])
    state = open_state(str(tmp_path))
    outline = streamed_plan_outline(state, options_from({}), keep_scan=True)
    rounds = partition_rounds(outline.scan, outline.selected, False, 3)
    assert rounds.partitions == [[(("p", "a"),)], [(("p", "b"),)]] and rounds.files == [5, 2]
    with spill_rounds(state, rounds, min_file_size=outline.min_file_size, zorder=False) as spill:
        folder = spill.folder
        assert [spill.files(n).num_rows for n in range(2)] == [5, 2]
    assert not folder.exists()  # the spill is removed with its rounds


def test_the_rebase_base_holds_the_live_files_among_the_inputs(tmp_path):
    from tests.delta.log.test_state_stream import PROTOCOL, metadata

    adds = [{"add": {"path": f"f{i}.parquet", "partitionValues": {}, "size": 10, "modificationTime": NOW,
                     "dataChange": True}} for i in range(4)]
    dv = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr910", "offset": None, "sizeInBytes": 10,
          "cardinality": 1}
    later = [{"remove": {"path": "f1.parquet", "deletionTimestamp": NOW, "dataChange": True}},
             {"remove": {"path": "f2.parquet", "deletionTimestamp": NOW, "dataChange": True}},
             {"add": {**adds[2]["add"], "deletionVector": dv}}]
    write_history(tmp_path, False, 1_000, [adds, later], {1: "classic"},
                  first=[{"commitInfo": {"timestamp": NOW}}, PROTOCOL, metadata(False, 1_000)])
    from airflow_delta_maint.delta.storage.store import Storage

    base = live_files_among(open_state(Storage(str(tmp_path)), 2), ["f0.parquet", "f1.parquet", "f2.parquet"])
    live = sorted((a["path"], dv_unique_id(a.get("deletionVector"))) for a in base.add_actions())
    assert base.version == 2 and live == [("f0.parquet", ""), ("f2.parquet", dv_unique_id(dv))]


def test_the_rounds_metrics_add_up():
    a = {"status": "committed", "version_read": 5, "numAddedFiles": 1, "numRemovedFiles": 4, "numAddedBytes": 100,
         "numRemovedBytes": 120, "numDeletionVectorsRemoved": 1, "numBins": 1, "numBinsDroppedByConflicts": 0,
         "droppedBins": [], "numBinsRebased": 0, "numDeletionVectorsCarried": 0, "numBatches": 1,
         "versions_committed": [6], "version_committed": 6, "minFileSize": 100, "p25FileSize": 100,
         "p50FileSize": 100, "p75FileSize": 100, "maxFileSize": 100, "totalConsideredFiles": 50,
         "totalFilesSkipped": 46}
    b = {"status": "skipped", "version_read": 5, "reason": "every bin was dropped", "numAddedFiles": 0,
         "numRemovedFiles": 0, "numBins": 2, "numBinsDroppedByConflicts": 2,
         "droppedBins": [{"partition": "p=b", "files": 3, "bytes": 30, "reason": "removed"}] * 2,
         "versions_committed": [], "version_committed": None, "partitionsReservedByOthers": {"p=c": "run-1"}}
    c = {"status": "committed", "version_read": 5, "numAddedFiles": 2, "numRemovedFiles": 6, "numAddedBytes": 50,
         "numRemovedBytes": 60, "numBins": 2, "versions_committed": [8, 7], "version_committed": 8}
    m = merge_rounds([a, b, c], [100, 20, 30], 50)
    assert m["status"] == "committed" and "reason" not in m
    assert (m["numAddedFiles"], m["numRemovedFiles"], m["numAddedBytes"], m["numRemovedBytes"]) == (3, 10, 150, 180)
    assert m["numBins"] == 5 and m["numBinsDroppedByConflicts"] == 2 and len(m["droppedBins"]) == 2
    assert m["versions_committed"] == [6, 7, 8] and m["version_committed"] == 8
    assert (m["minFileSize"], m["p50FileSize"], m["maxFileSize"]) == (20, 30, 100)
    assert m["partitionsReservedByOthers"] == {"p=c": "run-1"}
    assert (m["totalConsideredFiles"], m["totalFilesSkipped"], m["numRounds"]) == (50, 40, 3)
    none = merge_rounds([b, b], [], 50)
    assert none["status"] == "skipped" and none["reason"] == "every bin was dropped"
    assert none["version_committed"] is None and "minFileSize" not in none
    dry = merge_rounds([{"status": "dry_run", "plan": {"num_bins": 1, "num_files_to_rewrite": 2,
                                                       "partitions": {"p=a": {"bins": 1}}}},
                        {"status": "dry_run", "plan": {"num_bins": 2, "num_files_to_rewrite": 5,
                                                       "partitions": {"p=b": {"bins": 2}}}}], [], 9)
    assert dry["plan"]["num_bins"] == 3 and dry["plan"]["num_files_to_rewrite"] == 7
    assert dry["plan"]["partitions"] == {"p=a": {"bins": 1}, "p=b": {"bins": 2}} and dry["numRounds"] == 2


# -- liquid clustering: the plan's new ZCubes, ordered out of core -------------------------------------------
def _clustered_log(root, seed: int, files: int, checkpoint: bool) -> None:
    import json
    import random

    from airflow_delta_maint.delta.log.checkpoint import write_checkpoint

    rnd = random.Random(seed)
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "x", "type": "long", "nullable": True, "metadata": {}}]}
    head = [{"commitInfo": {"timestamp": NOW}},
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                          "writerFeatures": ["domainMetadata", "clustering"]}},
            {"metaData": {"id": "c", "format": {"provider": "parquet", "options": {}},
                          "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                          "createdTime": 1}},
            {"domainMetadata": {"domain": "delta.clustering", "removed": False,
                                "configuration": json.dumps({"clusteringColumns": [["x"]]})}}]
    adds = []
    for i in range(files):
        body = {"path": rnd.choice(["", "a/", "b/", "z/"]) + f"f{rnd.randrange(10**6):06d}-{i}.parquet",
                "partitionValues": {}, "size": rnd.choice([5, 10, 40, 100, 400]),
                "modificationTime": rnd.choice([NOW - 10**8, NOW + 10**9]), "dataChange": True}
        kind = rnd.random()
        if kind < 0.45:
            body["clusteringProvider"] = "liquid"
            body["tags"] = {"ZCUBE_ID": f"cube-{rnd.randrange(6)}",
                            "ZCUBE_ZORDER_BY": rnd.choice(['["x"]', '["x"]', '["id"]'])}
        elif kind < 0.5:
            body["clusteringProvider"] = "other"
        adds.append({"add": body})
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in head + adds))
    if checkpoint:
        write_checkpoint(Snapshot.load(str(root)), now_ms=NOW)
    gone = rnd.sample(adds, min(3, len(adds)))
    (log / f"{1:020d}.json").write_text("".join(
        json.dumps(a) + "\n" for a in [{"commitInfo": {"timestamp": NOW}}] +
        [{"remove": {"path": a["add"]["path"], "deletionTimestamp": NOW, "dataChange": True}} for a in gone]))


CLUSTER_OPTIONS = [
    {"target_cube_size": 150, "min_cube_size": 120},
    {"target_cube_size": 60, "min_cube_size": 10**9},
    {"full": True, "target_cube_size": 200},
    {"target_cube_size": 500, "min_file_age": 3600.0},
    {"policy": "auto", "min_num_files": 1, "target_cube_size": 100},
]


def _cluster_rounds(root: str, params: dict, max_files: int) -> tuple[list[tuple], dict, int]:
    from airflow_delta_maint.delta.plans.clustering_rounds import clustering_order, spill_clustering_rounds
    from airflow_delta_maint.delta.protocol.actions import ADD_SCHEMA

    state = open_state(root)
    outline = streamed_plan_outline(state, options_from(params), keep_scan=True)
    assert outline.layout == "hilbert"
    if outline.is_empty:
        return [], {}, 0
    order = clustering_order(outline.work, max_files)
    spill, group_files = spill_clustering_rounds(state, outline.work, order,
                                                 target_cube_size=int(params["target_cube_size"]),
                                                 max_files=max_files, young_after_ms=outline.young_after_ms)
    groups: dict[int, list[tuple]] = {}
    with spill:
        for n in range(spill.count):
            table = spill.read(n)
            files = table.select(ADD_SCHEMA.names).to_pylist()
            for g, f in zip(table.column("_group").to_pylist(), files):
                groups.setdefault(g, []).append((f["path"], dv_unique_id(f.get("deletionVector")), f["size"]))
    assert [len(groups[g]) for g in sorted(groups)] == group_files
    bins = [({}, groups[g], sum(f[2] for f in groups[g])) for g in sorted(groups)]
    return [([], b[1], b[2]) for b in bins], {"numOutputZCubes": len(group_files)}, spill.count


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), files=st.integers(0, 40), checkpoint=st.booleans(),
       options=st.sampled_from(CLUSTER_OPTIONS), max_files=st.sampled_from([1, 2, 5, 1000]))
def test_clustering_rounds_make_the_zcubes_of_the_whole_plan(tmp_path_factory, monkeypatch, seed, files, checkpoint,
                                                             options, max_files):
    monkeypatch.setattr(optimize_rounds, "SPILL_BUFFER_ROWS", 3)
    root = tmp_path_factory.mktemp("c")
    _clustered_log(root, seed, files, checkpoint)
    snapshot = Snapshot.load(str(root))
    typed = options_from(options)
    plan = plan_from_options(snapshot, typed, auto_decision(snapshot, typed))
    whole = _bins(plan.bins)
    rounds, stats, count = _cluster_rounds(str(root), options, max_files)
    assert rounds == whole
    if whole:
        assert stats["numOutputZCubes"] == plan.clustering_stats["numOutputZCubes"]
        assert count >= 1


def test_the_spill_keeps_each_rounds_rows_in_order_with_a_small_buffer(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_delta_maint.delta.plans.optimize_rounds import SpillWriters

    schema = pa.schema([("n", pa.int64())])
    writers = SpillWriters(lambda r: tmp_path / f"{r}.parquet", schema, buffer_rows=4)
    sent: dict[int, list[int]] = {}
    for i in range(60):
        r = (i * 7) % 5
        rows = list(range(i * 10, i * 10 + i % 3 + 1))
        sent.setdefault(r, []).extend(rows)
        writers.add(r, pa.table({"n": rows}, schema=schema))
        assert writers.buffered <= 4
    writers.close()
    for r, rows in sent.items():
        f = pq.ParquetFile(tmp_path / f"{r}.parquet")
        assert f.read().column("n").to_pylist() == rows
        assert f.metadata.num_row_groups < len(rows)  # buffered pieces go out together
