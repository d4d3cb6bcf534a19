"""compute-stats run as the application runs it: under local execution (the task functions on threads
of this process) and once on Spark. Every run compares the table's rows before and after; the
statistics it writes are compared with those the table's writer wrote before they were taken away."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sysconfig
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import airflow_delta_maint.app.jobs.compute_stats as job
from airflow_delta_maint.app import cli
from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.delta.log.checkpoint_schema import json_value
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.compute_stats import ComputeStatsOptions, plan_compute_stats
from tests.app.jobs.test_optimize import copy_corpus, rows_deltars, rows_ours
from tests.delta.plans.test_compute_stats_plan import make_table, rewrite_commit, strip_stats


def local(path: Path, *args: str) -> tuple[int, dict]:
    return run_in_process("compute-stats", str(path), list(args))


def log_files(path: Path) -> list[str]:
    return sorted(os.listdir(path / "_delta_log"))


def adds_by_path(path: Path) -> dict[str, dict]:
    return {a["path"]: a for a in Snapshot.load(str(path)).add_actions()}


def commit(path: Path, version: int) -> list[dict]:
    return [json.loads(line) for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def as_delta_spark_writes(stats_text: str) -> dict:
    """delta-rs's statistics without the bounds of booleans, which delta-spark (and this job) leave out."""
    stats = json.loads(stats_text)
    for kind in ("minValues", "maxValues"):
        stats.get(kind, {}).pop("flag", None)
    return stats


def test_files_without_statistics_get_the_writers_statistics_back(tmp_path):
    path = make_table(tmp_path / "t")
    written = adds_by_path(path)
    strip_stats(path, 0)
    before, rows = adds_by_path(path), rows_deltars(path)
    stripped = sorted(p for p, a in before.items() if not a.get("stats"))
    assert len(stripped) == 2

    code, m = local(path)
    assert code == 0, m
    assert (m["status"], m["version_read"], m["version_committed"]) == ("committed", 2, 3)
    assert (m["numFilesConsidered"], m["numFilesWithoutStats"], m["numFilesMissingColumns"], m["numFilesUpdated"],
            m["numFilesReadFromData"]) == (6, 2, 0, 2, 0)
    assert rows_deltars(path) == rows
    after = adds_by_path(path)
    for p in stripped:  # the same file, with statistics equal to what delta-rs wrote
        assert json.loads(after[p].pop("stats")) == as_delta_spark_writes(written[p]["stats"])
        assert after[p] == {**{k: v for k, v in before[p].items() if k != "stats"}, "dataChange": False}
    actions = commit(path, 3)
    assert actions[0]["commitInfo"]["operation"] == "COMPUTE STATS"
    assert actions[0]["commitInfo"]["operationMetrics"]["numFilesUpdated"] == "2"
    assert sorted(a["add"]["path"] for a in actions[1:]) == stripped
    assert all(a["add"]["dataChange"] is False for a in actions[1:])

    # converged: the next run and the check without Spark have nothing to do
    code, again = local(path)
    assert (code, again["status"], again["version_committed"]) == (0, "skipped", None)
    assert again["reason"] == job.nothing_to_do(str(path), None, job.options_from({})) == \
        "all 6 live files have statistics of the 5 covered columns"


def test_new_covered_columns_dry_run_and_max_files(tmp_path):
    path = make_table(tmp_path / "t", configuration={"delta.dataSkippingNumIndexedCols": "1"})
    DeltaTable(str(path)).alter.set_table_properties({"delta.dataSkippingStatsColumns": "s,nested.a"})
    rows, listed = rows_deltars(path), log_files(path)

    code, dry = local(path, "--dry-run", "--where", "part = 'a'")
    assert (code, dry["status"], dry["numFilesMissingColumns"], dry["numFilesSelected"]) == (0, "dry_run", 3, 3)
    assert sorted(dry["files"]) == sorted(p for p, a in adds_by_path(path).items() if a["partitionValues"]["part"] == "a")
    assert log_files(path) == listed

    code, first = local(path, "--max-files", "4")
    assert (code, first["status"], first["numFilesUpdated"], first["numFilesLeftForLaterRuns"]) == (0, "committed", 4, 2)
    code, second = local(path)
    assert (second["status"], second["numFilesMissingColumns"], second["numFilesUpdated"]) == ("committed", 2, 2)
    assert rows_deltars(path) == rows
    for add in adds_by_path(path).values():
        stats = json.loads(add["stats"])
        assert set(stats["nullCount"]) == {"s", "nested"} and set(stats["nullCount"]["nested"]) == {"a"}
        assert set(stats["minValues"]) == {"s", "nested"}
    assert local(path)[1]["status"] == "skipped"


def test_a_file_a_writer_removes_meanwhile_is_left_out_of_the_commit(tmp_path, monkeypatch):
    path = make_table(tmp_path / "t")
    strip_stats(path, 0)
    strip_stats(path, 1)
    real = job.compute

    def compute_then_delete(ctx, state, plan):
        out = real(ctx, state, plan)
        DeltaTable(str(path)).delete("id = 0")  # rewrites one selected file (partition a of commit 0)
        return out

    monkeypatch.setattr(job, "compute", compute_then_delete)
    code, m = local(path)
    assert code == 0, m
    assert (m["status"], m["numFilesSelected"], m["numFilesUpdated"], m["numFilesDroppedByConflicts"]) == \
        ("committed", 4, 3, 1)
    assert m["version_committed"] == 4  # after delta-rs's DELETE at version 3
    expected = rows_deltars(path, version=3)  # delta-rs's DELETE left 29 of the 30 rows
    assert rows_deltars(path) == expected and sum(expected.values()) == 29
    removed = {a["remove"]["path"] for a in commit(path, 3) if "remove" in a}
    assert removed and not removed & set(adds_by_path(path))  # not brought back


def test_bad_input_fails_with_one_message_and_writes_nothing(tmp_path):
    path = make_table(tmp_path / "t", 1)
    strip_stats(path, 0)
    listed = log_files(path)
    for args, message in ((["--columns", "flag"], "column 'flag' is of type boolean"),
                          (["--columns", "missing"], "column 'missing' not found"),
                          (["--where", "nope = 1"], "nope"),
                          (["--max-files", "0"], "at least 1")):
        code, m = local(path, *args)
        assert (code, m["status"], m["error_type"]) == (2, "failed", "InvalidArgumentError"), m
        assert message in m["error"]
    assert log_files(path) == listed


def test_deletion_vector_files_count_physical_rows_with_loose_bounds_under_column_mapping(tmp_path):
    path = copy_corpus("spark/table-with-dv-small", tmp_path)  # delta-spark: DV, column mapping, tags
    before = adds_by_path(path)
    (written,) = before.values()
    rewrite_commit(path, 1, lambda a: a.get("add", {}).pop("stats", None))
    rows = rows_ours(path)
    code, m = local(path)
    assert code == 0 and m["numFilesUpdated"] == 1, m
    (after,) = adds_by_path(path).values()
    physical = pq.ParquetFile(path / after["path"]).metadata.num_rows
    stats = json.loads(after.pop("stats"))
    column = "col-4f064e48-f371-433a-b851-9e73c78fa9fc"
    assert stats == {"numRecords": physical, "minValues": {column: 0}, "maxValues": {column: 9},
                     "nullCount": {column: 0}, "tightBounds": False}
    assert physical == 10 and after["deletionVector"]["cardinality"] == 2
    assert after == {k: v for k, v in written.items() if k not in ("stats", "dataChange")} | {"dataChange": False}
    assert rows_ours(path) == rows


def test_on_spark(tmp_path, spark):
    path = make_table(tmp_path / "t")
    written = adds_by_path(path)
    for version in range(3):
        strip_stats(path, version)
    rows = rows_deltars(path)
    with contextlib.redirect_stdout(io.StringIO()):
        code, m = cli.run(["compute-stats", str(path), "--json"])
    assert code == 0 and (m["status"], m["numFilesUpdated"]) == ("committed", 6), m
    assert rows_deltars(path) == rows
    assert {p: json.loads(a["stats"]) for p, a in adds_by_path(path).items()} == \
        {p: as_delta_spark_writes(a["stats"]) for p, a in written.items()}


def test_inspect_counts_the_files_and_the_score_pays_for_them(tmp_path):
    path = make_table(tmp_path / "t", configuration={"delta.dataSkippingNumIndexedCols": "2"})
    strip_stats(path, 0)
    DeltaTable(str(path)).alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "3"})
    report = run_in_process("inspect", str(path), [])[1]
    # commit 0's two files have none; the four others lack `flag`, which the table covers now
    assert (report["num_files_without_stats"], report["num_files_missing_stats_columns"]) == (2, 4)
    part = report["health"]["parts"]["statistics"]
    assert (part["penalty"], part["points_lost"]) == (1.0, 10.0)
    assert local(path)[1]["numFilesUpdated"] == 6
    report = run_in_process("inspect", str(path), [])[1]
    assert (report["num_files_without_stats"], report["num_files_missing_stats_columns"]) == (0, 0)
    assert report["health"]["parts"]["statistics"]["points_lost"] == 0


def test_files_written_before_a_type_was_widened_get_bounds_in_the_new_type(tmp_path):
    import datetime as dt
    from collections import Counter
    from decimal import Decimal

    import pyarrow as pa
    from deltalake import write_deltalake

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({
        "i": pa.array([3, -7, 12], pa.int32()), "dec": pa.array([Decimal("1.23"), Decimal("-4.50"), None],
                                                                 pa.decimal128(5, 2)),
        "day": pa.array([dt.date(2024, 1, 2), dt.date(2023, 12, 31), dt.date(2024, 2, 29)])}))
    widen = {"i": ("integer", "long"), "dec": ("decimal(5,2)", "decimal(7,4)"), "day": ("date", "timestamp_ntz")}

    def widened(action):  # the table as type widening leaves it: new types, the files in the old ones
        if "metaData" in action:
            schema = json.loads(action["metaData"]["schemaString"])
            for field in schema["fields"]:
                old, new = widen[field["name"]]
                field["type"] = new
                field["metadata"] = {"delta.typeChanges": [{"fromType": old, "toType": new}]}
            action["metaData"]["schemaString"] = json.dumps(schema)
        if "protocol" in action:
            action["protocol"] = {"minReaderVersion": 3, "minWriterVersion": 7,
                                  "readerFeatures": ["typeWidening", "timestampNtz"],
                                  "writerFeatures": ["typeWidening", "timestampNtz"]}
        action.get("add", {}).pop("stats", None)

    rewrite_commit(path, 0, widened)
    (add,) = adds_by_path(path).values()
    data = Counter(map(repr, pq.read_table(path / add["path"]).to_pylist()))
    code, m = local(path)
    assert code == 0 and (m["numFilesUpdated"], m["numFilesReadFromData"]) == (1, 1), m
    (after,) = adds_by_path(path).values()
    stats = json.loads(after["stats"], parse_float=Decimal)
    # the footer's decimal bounds are unscaled numbers of scale 2: read at scale 4 they would be 100 times too small
    assert stats == {"numRecords": 3, "nullCount": {"i": 0, "dec": 1, "day": 0},
                     "minValues": {"i": -7, "dec": Decimal("-4.5000"), "day": "2023-12-31T00:00:00.000"},
                     "maxValues": {"i": 12, "dec": Decimal("1.2300"), "day": "2024-02-29T00:00:00.000"}}
    assert Counter(map(repr, pq.read_table(path / after["path"]).to_pylist())) == data  # the file is untouched


def rows_duckdb(path: Path) -> list[tuple]:
    """The rows DuckDB's delta extension (delta-kernel-rs, loaded from the ``duckdb-ext-delta`` wheel) reads, sorted."""
    ext = Path(sysconfig.get_paths()["purelib"]) / "duckdb_ext" / "extensions" / f"v{duckdb.__version__}"
    (library,) = ext.glob("*/delta.duckdb_extension")
    with duckdb.connect() as con:
        con.execute(f"LOAD '{library}'")
        got = con.execute(f"SELECT id, s, flag, nested.a, nested.b, part FROM delta_scan('{path}')").fetchall()
    return sorted(got, key=lambda r: r[0])


def _checkpoint_adds(path: Path, version: int) -> dict[str, dict]:
    """The add rows of the classic checkpoint of ``version``, by path, as the parquet file holds them."""
    table = pq.read_table(path / "_delta_log" / f"{version:020d}.checkpoint.parquet", columns=["add"])
    return {a["path"]: a for a in table.column("add").to_pylist() if a}


def _keep_only_typed_stats(path: Path, version: int) -> None:
    """The checkpoint of ``version`` rewritten as delta-spark writes it with
    ``delta.checkpoint.writeStatsAsJson=false``: ``add.stats`` null, ``add.stats_parsed`` kept."""
    name = path / "_delta_log" / f"{version:020d}.checkpoint.parquet"
    table = pq.read_table(name)
    add = table.column("add").combine_chunks()
    children = [pa.nulls(len(add), pa.string()) if f.name == "stats" else add.field(f.name) for f in add.type]
    typed_only = pa.StructArray.from_arrays(children, fields=list(add.type), mask=add.is_null())
    pq.write_table(table.set_column(table.schema.get_field_index("add"), "add", typed_only), name)


@pytest.mark.parametrize("typed", [True, False], ids=["stats_parsed", "json-only"])
def test_a_checkpoint_written_after_the_job_carries_the_new_statistics(tmp_path, typed):
    path = make_table(tmp_path / "t", configuration={"delta.checkpoint.writeStatsAsStruct": str(typed).lower()})
    written = adds_by_path(path)
    for version in range(3):
        strip_stats(path, version)
    rows, duck = rows_deltars(path), rows_duckdb(path)
    assert len(duck) == 30
    code, m = local(path)
    assert (code, m["numFilesWithoutStats"], m["numFilesUpdated"], m["version_committed"]) == (0, 6, 6, 3), m
    assert rows_duckdb(path) == duck  # from the COMPUTE STATS commit
    code, c = run_in_process("checkpoint", str(path), [])
    assert code == 0, c

    in_checkpoint = _checkpoint_adds(path, 3)
    assert sorted(in_checkpoint) == sorted(written)
    for p, add in in_checkpoint.items():
        assert json.loads(add["stats"]) == as_delta_spark_writes(written[p]["stats"])
        if typed:  # the typed form holds the same statistics
            assert json_value(add["stats_parsed"]) == json.loads(add["stats"])
        else:
            assert "stats_parsed" not in add
    assert rows_deltars(path) == rows
    assert rows_duckdb(path) == duck  # from the checkpoint
    reason = job.nothing_to_do(str(path), None, job.options_from({}))
    assert reason == "all 6 live files have statistics of the 5 covered columns"

    if not typed:
        return
    # a checkpoint holding the statistics only typed: the files have them, the plan (eager and streamed) agrees
    _keep_only_typed_stats(path, 3)
    assert all(a["stats"] is None and a["stats_parsed"] for a in _checkpoint_adds(path, 3).values())
    assert job.nothing_to_do(str(path), None, job.options_from({})) == reason
    assert plan_compute_stats(Snapshot.load(str(path)), ComputeStatsOptions()).files == []
    assert {p: json.loads(a["stats"]) for p, a in adds_by_path(path).items()} == \
        {p: json.loads(a["stats"]) for p, a in in_checkpoint.items()}
    code, again = local(path)
    assert (code, again["status"], again["numFilesWithoutStats"]) == (0, "skipped", 0), again
    assert rows_deltars(path) == rows
    assert rows_duckdb(path) == duck


def test_a_run_is_recorded_in_the_history_and_shown_in_the_report(tmp_path):
    """The job's run goes into the maintenance history like every job's, and the report lists it."""
    from airflow_delta_maint.delta.health.run_log import read_runs

    path = make_table(tmp_path / "t")
    strip_stats(path, 0)
    rows = rows_deltars(path)
    history = tmp_path / "history"
    code, m = local(path, "--history-uri", str(history))
    assert (code, m["status"], m["numFilesUpdated"]) == (0, "committed", 2)
    assert rows_deltars(path) == rows
    runs = read_runs(str(history)).to_pylist()
    assert [(r["operation"], r["status"]) for r in runs] == [("compute-stats", "committed")]
    assert json.loads(runs[0]["metrics"])["numFilesUpdated"] == 2
    out = tmp_path / "report.html"
    with contextlib.redirect_stdout(io.StringIO()):
        code, result = cli.run(["report", "--history", str(history), "--out", str(out)])
    assert code == 0, result
    assert "compute-stats" in out.read_text()
