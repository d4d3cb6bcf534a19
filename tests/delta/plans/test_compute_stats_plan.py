"""compute-stats' decisions from the log alone: its options, which files need statistics and which
columns they must cover, the check without Spark, and the conflict a re-added file meets when a
concurrent writer removed it. Tables are written by delta-rs; statistics are taken away the way a
writer that never collects them leaves a file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.delta.errors import InvalidArgumentError, UnsupportedFeatureError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import ConflictError, Transaction
from airflow_delta_maint.delta.plans.compute_stats import (MISSING_COLUMNS, WITHOUT_STATS, ComputeStatsOptions,
                                                           nothing_to_do, plan_compute_stats, stats_need)
from airflow_delta_maint.delta.protocol.schema import leaf_columns

SCHEMA_COLUMNS = ("id", "s", "flag", "nested")


def batch(start: int, rows: int = 10) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([None if i % 4 == 0 else f"v{i}" for i in ids]),
        "flag": pa.array([i % 2 == 0 for i in ids]),
        "nested": pa.array([{"a": i * 2, "b": f"n{i}"} for i in ids]),
        "part": pa.array(["a", "b"] * (rows // 2)),
    })


def make_table(path: Path, appends: int = 3, configuration: dict[str, str] | None = None) -> Path:
    """``appends`` delta-rs appends of one file per partition (``part`` a and b)."""
    for i in range(appends):
        write_deltalake(str(path), batch(i * 10), mode="append", partition_by=["part"],
                        configuration=configuration if i == 0 else None)
    return path


def rewrite_commit(path: Path, version: int, change) -> None:
    """Rewrite commit ``version``'s actions in place with ``change(action)``."""
    name = path / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in name.read_text().splitlines() if line.strip()]
    for action in actions:
        change(action)
    name.write_text("".join(json.dumps(a) + "\n" for a in actions))


def strip_stats(path: Path, version: int) -> None:
    """The adds of commit ``version`` lose their statistics (a writer that never collects them)."""
    rewrite_commit(path, version, lambda a: a.get("add", {}).pop("stats", None))


def opts(**params) -> ComputeStatsOptions:
    return ComputeStatsOptions.from_mapping(params)


# -- options --------------------------------------------------------------------------------------
def test_options_are_typed_and_checked():
    o = opts(where=" part = 'a' ", columns="id, nested.a,`odd,name`", dry_run="true", max_files="5",
             engine="ignored")
    assert o == ComputeStatsOptions(where="part = 'a'", columns=("id", "nested.a", "`odd,name`"), dry_run=True,
                                    max_files=5)
    assert opts(columns=["id", " s "]).columns == ("id", "s")
    assert opts() == ComputeStatsOptions() and opts(where="", columns="", max_files=None).where is None


@pytest.mark.parametrize("params, message", [
    ({"max_files": 0}, "max_files must be at least 1, got 0"),
    ({"max_files": -3}, "at least 1"),
    ({"max_files": "many"}, "max_files must be a whole number, got 'many'"),
    ({"max_files": 1.5}, "whole number"),
    ({"where": "part = "}, "predicate"),
    ({"where": 5}, "where must be text"),
    ({"columns": "a,`b"}, "back-quote"),
    ({"columns": 7}, "columns must be text or a list"),
])
def test_bad_options_fail_with_one_message(params, message):
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(")):
        opts(**params)


# -- what counts as complete ------------------------------------------------------------------------
def columns(tmp_path: Path):
    return [c for c in leaf_columns(Snapshot.load(str(make_table(tmp_path / "t", 1))).metadata)]


def test_which_statistics_are_complete(tmp_path):
    cols = columns(tmp_path)  # id, s, flag, nested.a, nested.b (part is a partition column)
    assert [c.name for c in cols] == ["id", "s", "flag", "nested.a", "nested.b"]
    full = {"numRecords": 3, "minValues": {"id": 1, "s": "a", "nested": {"a": 1, "b": "x"}},
            "maxValues": {"id": 3, "s": "c", "nested": {"a": 4, "b": "y"}},
            "nullCount": {"id": 0, "s": 0, "flag": 1, "nested": {"a": 0, "b": 0}}}
    assert stats_need(json.dumps(full), cols) is None
    for text in (None, "", "not json", "[]", json.dumps({"minValues": {}}), json.dumps({"numRecords": "3"})):
        assert stats_need(text, cols) == WITHOUT_STATS, text
    # a column left out of nullCount, or without bounds while it has values
    no_b = json.loads(json.dumps(full))
    del no_b["nullCount"]["nested"]["b"]
    assert stats_need(json.dumps(no_b), cols) == MISSING_COLUMNS
    no_max = json.loads(json.dumps(full))
    del no_max["maxValues"]["id"]
    assert stats_need(json.dumps(no_max), cols) == MISSING_COLUMNS
    # every value null: no bounds to give
    all_null = json.loads(json.dumps(full))
    all_null["nullCount"]["s"] = 3
    del all_null["minValues"]["s"], all_null["maxValues"]["s"]
    assert stats_need(json.dumps(all_null), cols) is None
    # a file without rows has nothing to bound
    assert stats_need(json.dumps({"numRecords": 0}), cols) is None
    # numRecords alone: every column missing
    assert stats_need(json.dumps({"numRecords": 3}), cols) == MISSING_COLUMNS


# -- the plan -------------------------------------------------------------------------------------------
def test_plan_selects_files_without_statistics_and_respects_where_and_max_files(tmp_path):
    path = make_table(tmp_path / "t")
    strip_stats(path, 0)
    snap = Snapshot.load(str(path))
    plan = plan_compute_stats(snap, opts())
    assert (plan.num_files_considered, plan.num_files_without_stats, plan.num_files_missing_columns) == (6, 2, 0)
    stripped = {a["path"] for a in snap.add_actions() if not a.get("stats")}
    assert {f["path"] for f in plan.files} == stripped
    one = next(f for f in plan.files)
    live = next(a for a in snap.add_actions() if a["path"] == one["path"])
    assert one == {k: v for k, v in live.items() if v is not None and k != "dataChange"}
    assert [c.name for c in plan.columns] == ["id", "s", "flag", "nested.a", "nested.b"]

    where = plan_compute_stats(snap, opts(where="part = 'a'"))
    assert (where.num_files_considered, where.num_files_without_stats, len(where.files)) == (3, 1, 1)
    assert where.files[0]["partitionValues"] == {"part": "a"}

    limited = plan_compute_stats(snap, opts(max_files=1))
    assert (len(limited.files), limited.num_files_without_stats, limited.num_files_left) == (1, 2, 1)


def test_plan_finds_files_missing_columns_the_table_now_covers(tmp_path):
    path = make_table(tmp_path / "t", configuration={"delta.dataSkippingNumIndexedCols": "1"})
    snap = Snapshot.load(str(path))
    assert plan_compute_stats(snap, opts()).files == []  # id is covered everywhere
    DeltaTable(str(path)).alter.set_table_properties({"delta.dataSkippingStatsColumns": "id,nested.b"})
    plan = plan_compute_stats(Snapshot.load(str(path)), opts())
    assert [c.name for c in plan.columns] == ["id", "nested.b"]
    assert (plan.num_files_without_stats, plan.num_files_missing_columns, len(plan.files)) == (0, 6, 6)
    # --columns asks for more than the table covers
    DeltaTable(str(path)).alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "1",
                                                      "delta.dataSkippingStatsColumns": "id"})
    snap = Snapshot.load(str(path))
    assert plan_compute_stats(snap, opts()).files == []
    asked = plan_compute_stats(snap, opts(columns="s"))
    assert [c.name for c in asked.columns] == ["id", "s"] and asked.num_files_missing_columns == 6


@pytest.mark.parametrize("columns, message", [
    ("nope", "column 'nope' not found"),
    ("flag", "column 'flag' is of type boolean, which statistics do not bound"),
    ("part", "column 'part' is a partition column"),
])
def test_bad_columns_fail_before_anything_is_read(tmp_path, columns, message):
    path = make_table(tmp_path / "t", 1)
    with pytest.raises(InvalidArgumentError, match=message):
        plan_compute_stats(Snapshot.load(str(path)), opts(columns=columns))
    with pytest.raises(InvalidArgumentError, match=message):
        nothing_to_do(str(path), None, opts(columns=columns))


def test_a_refused_feature_names_itself_and_why(tmp_path):
    path = make_table(tmp_path / "t", 1)

    def collations(action):
        if "protocol" in action:
            action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["collations"]}

    rewrite_commit(path, 0, collations)
    with pytest.raises(UnsupportedFeatureError) as refused:
        nothing_to_do(str(path), None, opts())
    assert "cannot run compute-stats on this table: it uses writer feature 'collations'" in str(refused.value)
    assert "the statistics do not follow collations" in str(refused.value)


def test_nothing_to_do_says_why_or_stops_at_the_first_file_that_needs_statistics(tmp_path):
    path = make_table(tmp_path / "t")
    assert nothing_to_do(str(path), None, opts()) == "all 6 live files have statistics of the 5 covered columns"
    assert nothing_to_do(str(path), None, opts(where="part = 'b'")) == \
        "all 3 live files in the partitions \"part = 'b'\" selects have statistics of the 5 covered columns"
    strip_stats(path, 2)
    assert nothing_to_do(str(path), None, opts()) is None
    assert nothing_to_do(str(path), None, opts(where="part = 'zz'")) is not None


# -- committing a re-added file -------------------------------------------------------------------
def test_a_re_added_file_conflicts_with_its_concurrent_removal(tmp_path):
    path = make_table(tmp_path / "t", 2)
    snap = Snapshot.load(str(path))
    DeltaTable(str(path)).delete("id = 0")  # rewrites the file holding id 0 (partition a)
    log = (path / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
    removed = {a["remove"]["path"] for a in map(json.loads, log) if "remove" in a}
    assert len(removed) == 1
    victim = next(a for a in snap.add_actions() if a["path"] in removed)
    other = next(a for a in snap.add_actions() if a["partitionValues"] == {"part": "b"})
    txn = Transaction(snap, "COMPUTE STATS", job="compute-stats")
    txn.add_actions([{"add": {**victim, "dataChange": False}}])
    with pytest.raises(ConflictError) as conflict:
        txn.commit()
    assert conflict.value.kind == "ConcurrentDeleteRead" and conflict.value.winning_version == 2
    # a file nobody removed goes in over the same concurrent commit
    fine = Transaction(snap, "COMPUTE STATS", job="compute-stats")
    fine.add_actions([{"add": {**other, "dataChange": False}}])
    assert fine.commit() == 3


def test_clustering_columns_are_covered_whatever_the_settings(tmp_path):
    path = make_table(tmp_path / "t", 1, configuration={"delta.dataSkippingNumIndexedCols": "1"})

    def clustered(action):
        if "protocol" in action:
            action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7,
                                  "writerFeatures": ["clustering", "domainMetadata"]}

    rewrite_commit(path, 0, clustered)
    name = path / "_delta_log" / f"{0:020d}.json"
    domain = {"domainMetadata": {"domain": "delta.clustering", "removed": False,
                                 "configuration": json.dumps({"clusteringColumns": [["nested", "b"]]})}}
    name.write_text(name.read_text() + json.dumps(domain) + "\n")
    plan = plan_compute_stats(Snapshot.load(str(path)), opts())
    assert [c.name for c in plan.columns] == ["id", "nested.b"]
    assert (plan.num_files_missing_columns, len(plan.files)) == (2, 2)  # delta-rs covered `id` only
