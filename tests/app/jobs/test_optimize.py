"""The OPTIMIZE job end to end: every corpus table, Z-order, deletion vectors, concurrent
writers, kill -9, partial progress, dry runs, bad input and commitInfo.

Every test compares the table's rows before and after. Rows are read with delta-rs
(``file_uris`` + pyarrow, never ``to_pyarrow_table`` in-process) where delta-rs can read the
table, else with the job's own reader, whose row count is checked against the log's
``numRecords`` minus deletion-vector cardinalities.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.jobs.optimize_execution import commit_batch, execute_bins
from airflow_delta_maint.delta.plans.optimize_decision import plan_from_options
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions
from airflow_delta_maint.app.rewrite.rewrite_cadence import commit_groups
from airflow_delta_maint.app.rewrite.data_files import RewriteSpec, read_data_file
from airflow_delta_maint.app.runners.tasks import SparkTasks
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log.listing import read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage
from tests.conftest import CORPUS_DV_TABLES, corpus_path, load_manifest, restore_dv_file_names
from tests.data.conformance.expected import (
    changed_partitions, files_per_partition, load_expected, missing_data_files, scrub)

REPO = Path(__file__).resolve().parents[3]
MANIFEST: dict[str, dict] = {t["table"]: t["oracle"] for t in load_manifest()}
# delta-spark's test suites wrote the spark/ DV tables with a test-only DV file name prefix that
# the log does not name; copies get the files at their protocol names (see test_deletion_vectors).


# -- reading rows ------------------------------------------------------------------------------
def _canon(v: Any) -> Any:
    """A hashable value that compares equal across Arrow types (string_view vs string, time zones, ...)."""
    if isinstance(v, dict):
        return tuple(sorted((str(k), _canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_canon(x) for x in v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return ("ts", v.isoformat())
    if isinstance(v, (dt.date, dt.time)):
        return ("d", v.isoformat())
    if isinstance(v, float) and math.isnan(v):
        return ("nan",)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("b", bytes(v).hex())
    if isinstance(v, decimal.Decimal):
        return ("dec", str(v))
    return v


def _add_rows(counter: Counter, table: pa.Table, partition: dict[str, Any], columns: list[str]) -> None:
    for row in table.to_pylist():
        row.update(partition)
        counter[tuple(_canon(row.get(c)) for c in columns)] += 1


def rows_deltars(path: Path, version: int | None = None) -> Counter:
    """The table's rows as a multiset, read by delta-rs: its file list, pyarrow, its partition values."""
    table = DeltaTable(str(path), version=version)
    actions = pa.table(table.get_add_actions(flatten=True))
    part_cols = [c for c in actions.column_names if c.startswith("partition.")]
    by_name: dict[str, dict] = {}
    for a in actions.to_pylist():
        name = os.path.basename(a["path"])
        assert name not in by_name
        by_name[name] = {c[len("partition."):]: a[c] for c in part_cols}
    columns = sorted(set(table.schema().to_arrow().names) if hasattr(table.schema(), "to_arrow")
                     else {f.name for f in table.schema().fields})
    out: Counter = Counter()
    uris = table.file_uris()
    assert len(uris) == len(by_name)
    for uri in uris:
        local = uri[len("file://"):] if uri.startswith("file://") else uri  # a plain path, not escaped
        _add_rows(out, pq.read_table(local), by_name[os.path.basename(local)], columns)
    return out


def rows_ours(path: Path) -> Counter:
    """Rows through the job's reader (deletion vectors applied); the count must match the log."""
    snap = Snapshot.load(str(path))
    spec = RewriteSpec(snap.storage, snap.metadata.to_action())
    columns = sorted(set(spec.write_schema.names) | set(snap.metadata.partition_columns))
    out: Counter = Counter()
    stated = 0
    for add in snap.add_actions():
        _add_rows(out, read_data_file(spec, add), dict(add.get("partitionValues") or {}), columns)
        stats = json.loads(add["stats"]) if add.get("stats") else {}
        if stated is not None and "numRecords" in stats:
            stated += stats["numRecords"] - (add.get("deletionVector") or {}).get("cardinality", 0)
        else:
            stated = None
    if stated is not None:
        assert sum(out.values()) == stated
    return out


def sorted_by_id(path: Path) -> pa.Table:
    """Rows of a table with a unique ``id`` column, via delta-rs's file list, sorted: cheap for big tables."""
    table = DeltaTable(str(path))
    actions = pa.table(table.get_add_actions(flatten=True))
    parts = {os.path.basename(unquote(a["path"])): a.get("partition.p") for a in actions.to_pylist()}
    tables = []
    for uri in table.file_uris():
        t = pq.read_table(uri).select(["id", "x", "y"])
        tables.append(t.append_column("p", pa.array([parts[os.path.basename(unquote(uri))]] * t.num_rows,
                                                    pa.string())))
    out = pa.concat_tables(tables)
    return out.take(pa.compute.sort_indices(out.column("id")))


def listing(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under the table (log included) with its size and modification time; a file gone between the
    folder's read and its own (a running job's temporary file renamed into place) is not listed."""
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            out[os.path.relpath(p, path)] = (st.st_size, st.st_mtime_ns)
    return out


def commit_info(path: Path, version: int) -> dict:
    return next(a["commitInfo"] for a in read_commit(Storage(str(path)), version) if "commitInfo" in a)


def optimize(path: Path, *args: str) -> tuple[int, dict]:
    return cli.run(["optimize", str(path), "--json", *args])


# -- the corpus -----------------------------------------------------------------------------------
# Every corpus table, with the outcome recorded for it in tests/data/conformance/expected.json.
EXPECTED = load_expected("optimize")


def _named(*outcomes: str) -> list[str]:
    return sorted(n for n, e in EXPECTED.items() if e["outcome"] in outcomes)


REWRITTEN, REFUSED, INVALID, LOG_ONLY = (_named("committed", "skipped"), _named("refused"), _named("invalid"),
                                         _named("log-only"))


def copy_corpus(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name.replace("/", "__")
    shutil.copytree(corpus_path(name), dest)
    restore_dv_file_names(dest)
    return dest


def read_rows(path: Path, name: str) -> Counter:
    return rows_deltars(path) if MANIFEST[name].get("readable") else rows_ours(path)


@pytest.mark.parametrize("name", REWRITTEN)
def test_corpus_table(name: str, tmp_path: Path, spark) -> None:
    expected = EXPECTED[name]
    path = copy_corpus(name, tmp_path)
    oracle = MANIFEST[name]
    before = read_rows(path, name)
    assert sum(before.values()) == expected["rows_before"]
    if oracle.get("rows") is not None:
        assert sum(before.values()) == oracle["rows"]
    snap = Snapshot.load(str(path))
    assert (snap.version, snap.num_files) == (expected["version_read"], expected["files_before"])
    files_before = listing(path)
    code, m = optimize(path)
    assert code == 0, m.get("error")
    assert m["status"] == expected["outcome"] and m["version_read"] == expected["version_read"]
    assert (m["numRemovedFiles"], m["numAddedFiles"], m.get("numDeletionVectorsRemoved", 0)) == (
        expected["removed_files"], expected["added_files"], expected["deletion_vectors_removed"])
    assert m.get("version_committed") == expected["version_committed"]
    if expected["outcome"] == "skipped":
        assert m["reason"] == expected["reason"] and m["numAddedFiles"] == 0
        # every file byte-for-byte as before (same sizes and times, log included): the rows are too
        assert listing(path) == files_before
        assert expected["partitions"] == {} and expected["files_after"] == expected["files_before"]
    else:
        assert m["version_committed"] == snap.version + 1
        after_snap = Snapshot.load(str(path))
        assert after_snap.num_files == snap.num_files - m["numRemovedFiles"] + m["numAddedFiles"]
        assert after_snap.num_files == expected["files_after"]
        assert not any(a.get("deletionVector") for a in after_snap.add_actions())
        # each partition's file count, before and after, as recorded (the others keep theirs)
        assert changed_partitions(files_per_partition(snap), files_per_partition(after_snap)) == \
            expected["partitions"]
        info = commit_info(path, m["version_committed"])
        assert info["operation"] == "OPTIMIZE"
        assert info["operationMetrics"]["numAddedFiles"] == str(m["numAddedFiles"])
        if oracle.get("loaded"):
            assert DeltaTable(str(path)).version() == m["version_committed"]
    after = read_rows(path, name)
    assert sum(after.values()) == expected["rows_after"]
    assert after == before


@pytest.mark.parametrize("name", REFUSED)
def test_corpus_unsupported_feature_refused(name: str, tmp_path: Path) -> None:
    path = copy_corpus(name, tmp_path)
    files_before = listing(path)
    code, m = optimize(path)
    assert code == 2 and m["status"] == "failed" and m["error_type"] == "UnsupportedFeatureError"
    assert scrub(m["error"], path) == EXPECTED[name]["reason"]
    assert "feature" in m["error"] or "Version" in m["error"]
    assert listing(path) == files_before


@pytest.mark.parametrize("name", INVALID)
def test_corpus_invalid_log_refused(name: str, tmp_path: Path) -> None:
    path = copy_corpus(name, tmp_path)
    with pytest.raises(DeltaError):
        Snapshot.load(str(path))
    files_before = listing(path)
    code, m = optimize(path)
    assert code == 2 and m["status"] == "failed" and m["error"]
    assert (m["error_type"], scrub(m["error"], path)) == (EXPECTED[name]["error_type"], EXPECTED[name]["error"])
    assert listing(path) == files_before


@pytest.mark.parametrize("name", LOG_ONLY)
def test_corpus_log_only_table_is_missing_data_files(name: str) -> None:
    """A log-only table is not rewritten: the files its log references are (still) not in the corpus."""
    snap = Snapshot.load(str(corpus_path(name)))
    assert (snap.num_files, missing_data_files(snap)) == (EXPECTED[name]["files"], EXPECTED[name]["missing"])
    assert EXPECTED[name]["missing"] > 0




@pytest.mark.parametrize("name", list(CORPUS_DV_TABLES))
def test_deletion_vectors_are_purged(name: str, tmp_path: Path, spark) -> None:
    live, column, deleted = CORPUS_DV_TABLES[name]
    path = copy_corpus(name, tmp_path)
    snap = Snapshot.load(str(path))
    dvs = [a for a in snap.add_actions() if a.get("deletionVector")]
    assert dvs
    before = rows_ours(path)
    assert sum(before.values()) == live
    code, m = optimize(path)
    assert code == 0 and m["status"] == "committed", m.get("error")
    after = Snapshot.load(str(path))
    adds = after.add_actions()
    assert not any(a.get("deletionVector") for a in adds)
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == live
    # on a table with deletion vectors, the new files say their statistics are exact
    written = [a for a in adds if a["path"] not in {b["path"] for b in snap.add_actions()}]
    assert written and all(json.loads(a["stats"])["tightBounds"] is True for a in written)
    assert m["numDeletionVectorsRemoved"] == len(dvs)
    assert rows_ours(path) == before
    # the deleted values are gone: every surviving row's value, minus the deleted ones, is all there is
    spec = RewriteSpec(after.storage, after.metadata.to_action())
    field = next(f for f in after.metadata.schema["fields"] if f["name"] == column)
    physical = field.get("metadata", {}).get("delta.columnMapping.physicalName", column)
    values = Counter(v for a in adds for v in read_data_file(spec, a).column(physical).to_pylist())
    original = Counter(v for a in snap.add_actions()
                       for v in pq.read_table(snap.storage.local_path(snap.storage.key_for_path(a["path"])))
                       .column(physical).to_pylist())
    assert original - values == Counter(deleted)
    info = commit_info(path, m["version_committed"])
    assert info["operationMetrics"]["numDeletionVectorsRemoved"] == str(len(dvs))


# -- tables made here -----------------------------------------------------------------------------
def make_table(path: Path, partitions: list[str] | None, files_per_partition: int, rows_per_file: int,
               seed: int = 0) -> Path:
    """Small files: one delta-rs append per file, ids unique across the table."""
    rng = np.random.default_rng(seed)
    next_id = 0
    for _ in range(files_per_partition):
        for p in partitions or [None]:
            data = {"id": np.arange(next_id, next_id + rows_per_file, dtype=np.int64),
                    "x": rng.random(rows_per_file), "y": rng.random(rows_per_file),
                    "s": pa.array([f"row-{i}" for i in range(next_id, next_id + rows_per_file)])}
            next_id += rows_per_file
            if p is not None:
                data["p"] = pa.array([p] * rows_per_file)
            write_deltalake(str(path), pa.table(data), mode="append", partition_by=["p"] if partitions else None)
    return path


def _overlaps(snap: Snapshot, column: str, lo: float, hi: float) -> int:
    n = 0
    for a in snap.add_actions():
        s = json.loads(a["stats"])
        if s["minValues"][column] <= hi and s["maxValues"][column] >= lo:
            n += 1
    return n


def test_zorder_clusters_and_keeps_rows(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "z", None, 20, 2000)
    before = rows_deltars(path)
    snap = Snapshot.load(str(path))
    # ranges inside one eighth of the values, off the quantile cut points
    assert snap.num_files == 20 and _overlaps(snap, "x", 0.36, 0.37) == _overlaps(snap, "y", 0.36, 0.37) == 20
    code, m = optimize(path, "--zorder-by", "x,y", "--target-file-size", str(snap.size_bytes // 16))
    assert code == 0 and m["status"] == "committed", m.get("error")
    after = Snapshot.load(str(path))
    assert 12 <= after.num_files <= 20 and m["numAddedFiles"] == after.num_files
    assert _overlaps(after, "x", 0.36, 0.37) <= after.num_files // 2
    assert _overlaps(after, "y", 0.36, 0.37) <= after.num_files // 2
    assert rows_deltars(path) == before
    # Z-order rewrites every file of the partition, even large ones: a second run does it again
    code, m = optimize(path, "--zorder-by", "x")
    assert code == 0 and m["status"] == "committed" and rows_deltars(path) == before


def test_zorder_partitioned_with_predicate_and_commit_info(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b", "c"], 4, 500)
    before = rows_deltars(path)
    snap = Snapshot.load(str(path))
    code, m = optimize(path, "--where", "p = 'a' OR p = 'b'", "--zorder-by", "x,y")
    assert code == 0 and m["status"] == "committed", m.get("error")
    assert m["numRemovedFiles"] == 8 and m["numAddedFiles"] == 2
    assert rows_deltars(path) == before
    after = Snapshot.load(str(path))
    assert Counter(a["partitionValues"]["p"] for a in after.add_actions()) == {"a": 1, "b": 1, "c": 4}
    actions = read_commit(Storage(str(path)), m["version_committed"])
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE" and info["readVersion"] == snap.version
    assert info["operationParameters"]["predicate"] == json.dumps(["p = 'a' OR p = 'b'"])
    assert json.loads(info["operationParameters"]["zOrderBy"]) == ["x", "y"]
    metrics = info["operationMetrics"]
    keys = ["numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes", "minFileSize",
            "p25FileSize", "p50FileSize", "p75FileSize", "maxFileSize", "numDeletionVectorsRemoved"]
    for k in keys:
        assert isinstance(metrics[k], str) and metrics[k] == str(m[k]), k
    assert int(metrics["numAddedBytes"]) == sum(a["add"]["size"] for a in actions if "add" in a)
    assert int(metrics["numRemovedBytes"]) == sum(a["remove"]["size"] for a in actions if "remove" in a)
    assert all(a[k]["dataChange"] is False for a in actions for k in ("add", "remove") if k in a)


def test_commit_info_of_bin_packing(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b"], 3, 100)
    before = rows_deltars(path)
    code, m = optimize(path)
    assert code == 0 and m["status"] == "committed"
    info = commit_info(path, m["version_committed"])
    assert info["operationParameters"]["predicate"] == "[]"
    assert info["operationParameters"]["zOrderBy"] == "[]"
    adds = Snapshot.load(str(path)).add_actions()
    assert not any("tightBounds" in json.loads(a["stats"]) for a in adds)  # no deletion vectors here
    sizes = sorted(a["size"] for a in adds)
    assert m["minFileSize"] == sizes[0] and m["maxFileSize"] == sizes[-1] and m["numAddedFiles"] == 2
    for k in ("numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes", "minFileSize",
              "p50FileSize", "maxFileSize", "numDeletionVectorsRemoved"):
        assert info["operationMetrics"][k] == str(m[k])
    assert rows_deltars(path) == before


# -- concurrency ----------------------------------------------------------------------------------
WRITER = textwrap.dedent("""
    import json, sys, time
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    path, n = sys.argv[1], int(sys.argv[2])
    appended, deleted = [], []
    for i in range(n):
        ids = list(range(1_000_000 + i * 10, 1_000_000 + i * 10 + 10))
        write_deltalake(path, pa.table({"id": pa.array(ids, pa.int64()), "x": [0.5] * 10, "y": [0.5] * 10,
                                        "s": [f"new-{j}" for j in ids], "p": ["abcd"[i % 4]] * 10}),
                        mode="append")
        appended += ids
        if i % 2 == 1:
            victim = i * 7
            try:
                DeltaTable(path).delete(f"id = {victim}")
                deleted.append(victim)
            except Exception as exc:  # lost a race with OPTIMIZE: that delete did not happen
                print("delete failed:", type(exc).__name__, file=sys.stderr)
        print("progress", i, file=sys.stderr, flush=True)
    print(json.dumps({"appended": appended, "deleted": deleted}))
""")


def test_concurrent_delta_rs_writer_loses_nothing(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b", "c", "d"], 6, 50)
    initial_ids = Counter(r[0] for r in rows_deltars(path).elements())  # column order: id, p, s, x, y
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "24"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        start = DeltaTable(str(path)).version()
        deadline = time.time() + 60
        while DeltaTable(str(path)).version() < start + 2 and time.time() < deadline:
            time.sleep(0.05)
        results = []
        for _ in range(3):
            code, m = optimize(path, "--batch-bytes", "1")
            assert code == 0 and m["status"] in ("committed", "skipped"), m.get("error")
            results.append(m)
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    done = json.loads(out)
    versions = [v for m in results for v in m.get("versions_committed", [])]
    assert versions
    for v in versions:
        assert commit_info(path, v)["operation"] == "OPTIMIZE"
        assert rows_deltars(path, v) == rows_deltars(path, v - 1), v
    final_ids = Counter(r[0] for r in rows_deltars(path).elements())
    expected = initial_ids + Counter(done["appended"])
    expected.subtract(Counter(done["deleted"]))
    assert final_ids == +expected


def test_concurrent_delete_drops_only_the_bin_it_touched(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b", "c"], 3, 20)
    snap = Snapshot.load(str(path))
    plan = plan_from_options(snap, OptimizeOptions())
    assert len(plan.bins) == 3
    spec = RewriteSpec(snap.storage, snap.metadata.to_action(), target_file_size=plan.target_file_size)
    outputs = execute_bins(SparkTasks(spark), spec, plan.bins, None, "test")
    # id 0 is in the first file of partition a
    victim_bin = next(i for i, b in enumerate(plan.bins) if b.partition_values == {"p": "a"})
    DeltaTable(str(path)).delete("id = 0")
    expected = rows_deltars(path)
    version, dropped = commit_batch(snap, plan, plan.bins, outputs, {"predicate": [], "zOrderBy": []})
    assert dropped == [victim_bin] and version == snap.version + 2
    for i, adds in enumerate(outputs):
        for a in adds:
            assert (path / unquote(a["path"])).exists() == (i != victim_bin)
    assert rows_deltars(path) == expected
    assert not any(r[0] == 0 for r in rows_deltars(path).elements())
    after = Snapshot.load(str(path))
    assert Counter(a["partitionValues"]["p"] for a in after.add_actions()) == {"a": 3, "b": 1, "c": 1}
    info = commit_info(path, version)
    assert info["operationMetrics"]["numRemovedFiles"] == "6"


# -- crashes and partial progress -------------------------------------------------------------------
def _big_table(path: Path) -> Path:
    """About 10 MB in 12 files over 4 partitions: a second or two of work on one core."""
    rng = np.random.default_rng(7)
    n = 80_000
    for i in range(12):
        write_deltalake(str(path), pa.table({
            "id": np.arange(i * n, (i + 1) * n, dtype=np.int64), "x": rng.random(n), "y": rng.random(n),
            "p": pa.array(["abcd"[i % 4]] * n)}), mode="append", partition_by=["p"])
    return path


def test_kill_9_mid_run_changes_nothing_and_rerun_converges(tmp_path: Path, spark) -> None:
    path = _big_table(tmp_path / "big")
    before_files = listing(path)
    log_before = {k: v for k, v in before_files.items() if k.startswith("_delta_log")}
    before = sorted_by_id(path)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "delta-maint"), "optimize", str(path),
                             "--master", "local[1]", "--json"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        new = set()
        while time.time() < deadline and proc.poll() is None:
            new = {k for k in listing(path) if k.endswith(".parquet") and k not in before_files}
            if new:
                break
            time.sleep(0.01)
        assert new, "no output file appeared"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    after_files = listing(path)
    assert {k: v for k, v in after_files.items() if k.startswith("_delta_log")} == log_before
    assert all(after_files[k] == v for k, v in before_files.items())
    assert sorted_by_id(path).equals(before)
    code, m = optimize(path)
    assert code == 0 and m["status"] == "committed" and m["numAddedFiles"] == 4
    assert sorted_by_id(path).equals(before)
    code, m = optimize(path)
    assert code == 0 and m["status"] == "skipped"


def test_small_batches_commit_separately_and_rerun_is_a_no_op(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b", "c", "d"], 3, 50)
    before = rows_deltars(path)
    v0 = DeltaTable(str(path)).version()
    code, m = optimize(path, "--batch-bytes", "1", "--max-concurrent-bins", "1")
    assert code == 0 and m["status"] == "committed"
    assert m["numBatches"] == 4 and m["versions_committed"] == [v0 + 1, v0 + 2, v0 + 3, v0 + 4]
    totals = Counter()
    for v in m["versions_committed"]:
        metrics = commit_info(path, v)["operationMetrics"]
        for k in ("numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes"):
            totals[k] += int(metrics[k])
        assert rows_deltars(path, v) == before
    assert all(totals[k] == m[k] for k in totals)
    files = listing(path)
    code, m = optimize(path)
    assert code == 0 and m["status"] == "skipped" and m["version_committed"] is None
    assert listing(path) == files


def test_rerun_after_first_batch_redoes_no_finished_bin(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b", "c"], 3, 50)
    before = rows_deltars(path)
    snap = Snapshot.load(str(path))
    plan = plan_from_options(snap, OptimizeOptions())
    batches = [[plan.bins[i] for i in group] for group in commit_groups(plan.bins, 1, 0)]
    assert len(batches) == 3
    spec = RewriteSpec(snap.storage, snap.metadata.to_action(), target_file_size=plan.target_file_size)
    first = execute_bins(SparkTasks(spark), spec, batches[0], None, "batch 1/3")
    version, dropped = commit_batch(snap, plan, batches[0], first, {"predicate": [], "zOrderBy": []})
    assert version == snap.version + 1 and not dropped  # then the job dies
    finished = {a["path"] for adds in first for a in adds}
    code, m = optimize(path)
    assert code == 0 and m["status"] == "committed" and m["numRemovedFiles"] == 6
    removed = {a["remove"]["path"] for a in read_commit(Storage(str(path)), m["version_committed"]) if "remove" in a}
    assert not removed & finished
    assert not removed & {f["path"] for f in batches[0][0].files}
    assert rows_deltars(path) == before


def test_predicate_run_then_full_run(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b", "c"], 3, 50)
    before = rows_deltars(path)
    code, m = optimize(path, "--where", "p = 'b'")
    assert code == 0 and m["numRemovedFiles"] == 3 and m["numAddedFiles"] == 1
    done = {a["add"]["path"] for a in read_commit(Storage(str(path)), m["version_committed"]) if "add" in a}
    code, m = optimize(path)
    assert code == 0 and m["numRemovedFiles"] == 6 and m["numAddedFiles"] == 2
    removed = {a["remove"]["path"] for a in read_commit(Storage(str(path)), m["version_committed"]) if "remove" in a}
    assert not removed & done
    assert rows_deltars(path) == before


# -- dry run and bad input ------------------------------------------------------------------------
def test_dry_run_plans_and_writes_nothing(tmp_path: Path) -> None:
    path = make_table(tmp_path / "t", ["a", "b"], 3, 50)
    files = listing(path)
    code, m = optimize(path, "--dry-run")
    assert code == 0 and m["status"] == "dry_run" and m["version_committed"] is None
    plan = m["plan"]
    assert plan["num_partitions"] == 2 and plan["num_bins"] == 2 and plan["num_files_to_rewrite"] == 6
    assert plan["predicted_output_files"] == 2
    assert plan["num_bytes_to_rewrite"] == Snapshot.load(str(path)).size_bytes
    assert set(plan["partitions"]) == {"p=a", "p=b"}
    assert all(p["files"] == 3 and p["bins"] == 1 for p in plan["partitions"].values())
    code, m = optimize(path, "--dry-run", "--zorder-by", "x", "--target-file-size", "1000")
    assert code == 0 and m["plan"]["predicted_output_files"] > 2
    assert listing(path) == files


BAD_INPUTS = [
    (["--zorder-by", "p"], "partition column"),
    (["--zorder-by", "nope"], "nope"),
    (["--zorder-by", "x,X"], "repeat"),
    (["--where", "x > 0.5"], "not a partition column: x"),
    (["--where", "p = "], "invalid predicate"),
    (["--where", "p = 'a' AND"], "invalid predicate"),
    (["--where", "p === 'a'"], "invalid predicate"),
    (["--target-file-size", "0"], "positive"),
    (["--min-file-size", "-1"], "positive"),
    (["--batch-bytes", "0"], "batch_bytes"),
    (["--max-concurrent-bins", "0"], "max_concurrent_bins"),
    (["--dv-ratio", "1.5"], "dv_ratio"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_refused_and_changes_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    path = make_table(tmp_path / "t", ["a", "b"], 2, 10)
    files = listing(path)
    code, m = optimize(path, *args)
    assert code == 2 and m["status"] == "failed" and m["error_type"] == "InvalidArgumentError"
    assert message.lower() in m["error"].lower()
    assert "\n" not in m["error"]
    assert listing(path) == files


def test_missing_table_and_not_a_delta_table(tmp_path: Path) -> None:
    code, m = optimize(tmp_path / "missing")
    assert code == 2 and m["error_type"] == "TableNotFoundError" and "does not exist" in m["error"]
    plain = tmp_path / "plain"
    plain.mkdir()
    pq.write_table(pa.table({"a": [1]}), plain / "x.parquet")
    files = listing(plain)
    code, m = optimize(plain)
    assert code == 2 and m["error_type"] == "NotADeltaTableError"
    assert listing(plain) == files


def test_missing_data_file_fails_cleanly_and_commits_nothing(tmp_path: Path, spark) -> None:
    path = make_table(tmp_path / "t", ["a", "b"], 3, 20)
    snap = Snapshot.load(str(path))
    victim = snap.add_actions()[0]["path"]
    os.remove(path / unquote(victim))
    log_before = sorted(os.listdir(path / "_delta_log"))
    for args in ([], ["--zorder-by", "x"]):
        code, m = optimize(path, *args)
        assert code == 2 and m["error_type"] == "CorruptLogError", m.get("error")
        assert "missing" in m["error"] and victim in m["error"] and "\n" not in m["error"]
        assert sorted(os.listdir(path / "_delta_log")) == log_before
