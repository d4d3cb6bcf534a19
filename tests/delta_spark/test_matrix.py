"""Every table delta-spark writes × every job of ours, judged by delta-spark.

Each table gets a copy of its own, and our jobs run on it one after the other in this process (our engine
on the same Spark), as a nightly DAG runs them: each job works on what the ones before it left
(``matrix_jobs.CHAIN``). After every job delta-spark judges (``judge.py``): the job either maintained the
table (delta-spark reads the same rows, row ids, schema, protocol and properties; DESCRIBE DETAIL and
HISTORY agree with our snapshot and commit; it loads our checkpoints and compaction files with the commits
they cover hidden; time travel to the versions the job kept) or refused it with one message and changed
nothing. Last, delta-spark keeps writing on the table (INSERT, MERGE, UPDATE, DELETE, RESTORE where the
history still allows it, its own OPTIMIZE and VACUUM). The results are docs/compatibility.md: each case
compares its result with its cell of the page, so a table's chain can run on any pytest-xdist worker
(``conftest.py`` keeps a chain on one). ``DELTA_MAINT_WRITE_COMPATIBILITY=1`` on a whole run in one process
(``make test-compatibility``) rewrites the page instead. ``DELTA_MAINT_MATRIX=covering`` (CI) runs the chains of
fewer tables that still have every feature, and delta-spark's every statement on some of them
(``matrix_jobs.COVERING``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from airflow_delta_maint.app import cli
from tests.delta_spark import judge
from tests.delta_spark.compatibility import PAGE, expected_cell, parse, render
from tests.delta_spark.matrix_jobs import CHAIN, COVERING, JOBS, covering_tables, every_statement, in_this_run
from tests.delta_spark.tables import FEATURE_LABELS, TABLES

pytestmark = pytest.mark.delta_spark

TABLES_BY_NAME = {t.name: t for t in TABLES}
KEEPS_WRITING = "delta-spark-writes"
# each table's chain, then delta-spark writing on it; then the next table
CASES = [(t.name, job) for t in TABLES for job in [*(j.name for j in CHAIN), KEEPS_WRITING]]
RESULTS: dict[tuple[str, str], dict[str, str]] = {}
WRITE_PAGE = os.environ.get("DELTA_MAINT_WRITE_COMPATIBILITY") == "1"
_CHAINS: dict[str, dict] = {}   # table -> {"path", "state" (delta-spark's last verdict), "start" (version)}


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under the table with its size and modification time."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            full = Path(folder) / name
            st = full.stat()
            out[str(full.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _plant_orphan(path: Path) -> str:
    """A data file no version references, old enough for any retention: full VACUUM must find it."""
    live = next(p for p in sorted(path.rglob("*.parquet")) if "_delta_log" not in p.parts)
    orphan = path / f"orphan-{time.monotonic_ns()}.parquet"
    shutil.copyfile(live, orphan)
    old = time.time() - 30 * 86400
    os.utime(orphan, (old, old))
    return orphan.name


def _fresh_copy(spark, delta_tables, tmp_path_factory, table) -> dict:
    """A copy of the table as delta-spark wrote it, with delta-spark's verdict on it."""
    path = tmp_path_factory.mktemp("matrix") / table.name
    shutil.copytree(delta_tables[table.name], path)
    state = judge.read_state(spark, str(path), row_tracking=table.row_tracking, key=table.key)
    return {"path": path, "state": state, "start": state.version}


def _chain(spark, delta_tables, tmp_path_factory, table) -> dict:
    chain = _CHAINS.get(table.name)
    if chain is None:
        chain = _CHAINS[table.name] = _fresh_copy(spark, delta_tables, tmp_path_factory, table)
    return chain


@contextlib.contextmanager
def _days_later(days: int) -> Iterator[None]:
    """The clock ``days`` days ahead while the job runs: the log cleanup's cut-off is a midnight (UTC), so without
    it the case's result would depend on whether the run crossed a midnight since the kept tables were copied."""
    if not days:
        yield
        return
    real, offset = time.time, days * 86_400
    with mock.patch("time.time", side_effect=lambda: real() + offset):
        yield


def _copy_outcome(metrics: dict) -> str:
    """What the row-group copy did: the row groups copied of all rewritten, and why the others were re-encoded."""
    if "numRowGroupsCopied" not in metrics:  # a rewrite that sorts its rows (clustering) has no copy path
        return f"{metrics['status']}: rewritten without the copy"
    copied, reencoded = metrics["numRowGroupsCopied"], metrics.get("numRowGroupsReencoded", 0)
    outcome = f"{metrics['status']}: {copied} of {copied + reencoded} row groups copied"
    fallbacks = sorted(metrics.get("copyFallbacks") or {})
    return outcome + (f"; re-encoded for {', '.join(fallbacks)}" if fallbacks else "")


def _columns() -> list:
    return [*CHAIN, _KeepsWriting()]


@functools.cache
def _page_cells() -> dict[tuple[str, str], str]:
    """docs/compatibility.md's cells as this process first read them."""
    return parse(PAGE.read_text() if PAGE.exists() else "", _columns())


class _TableChain:
    """One table's chain of jobs, in order, then delta-spark writing on it. A class per table: pytest-xdist's
    ``--dist loadscope`` keeps a class's tests on one worker, in order (``make test-delta-spark``)."""

    table_name = ""

    @pytest.mark.parametrize("job_name", [j.name for j in CHAIN] + [KEEPS_WRITING])
    def test_job(self, spark, delta_tables, tmp_path_factory, job_name):
        """The job maintains the table or refuses it, judged by delta-spark, as docs/compatibility.md says."""
        table_name = self.table_name
        _run_case(spark, delta_tables, tmp_path_factory, table_name, job_name)
        if not WRITE_PAGE:
            got, on_page = expected_cell(RESULTS[(table_name, job_name)]), _page_cells().get((table_name, job_name))
            assert got == on_page, (f"docs/compatibility.md says {on_page!r} for {table_name}/{job_name}, the "
                                    f"run found {got!r} (DELTA_MAINT_WRITE_COMPATIBILITY=1 make "
                                    "test-compatibility rewrites the page)")


for _table in (t for t in TABLES if in_this_run(t.name)):  # TestChain_plain, TestChain_dv_delete_update, ...
    _name = "TestChain_" + _table.name.replace("-", "_")
    globals()[_name] = type(_name, (_TableChain,), {"table_name": _table.name, "__module__": __name__})


def _run_case(spark, delta_tables, tmp_path_factory, table_name: str, job_name: str) -> None:
    table = TABLES_BY_NAME[table_name]
    chain = _chain(spark, delta_tables, tmp_path_factory, table)
    path, before = chain["path"], chain["state"]
    read = dict(row_tracking=table.row_tracking, key=table.key)
    if job_name == KEEPS_WRITING:
        judge.assert_keeps_writing(spark, str(path), before_job_version=chain["start"], kept_versions=[before.version],
                                   key=table.key, row_tracking=table.row_tracking, clustered=table.clustered,
                                   every_statement=every_statement(table_name))
        RESULTS[(table_name, job_name)] = {"verdict": "maintained", "status": "committed"}
        return
    job = next(j for j in JOBS if j.name == job_name)
    if job.own_copy:
        chain = _fresh_copy(spark, delta_tables, tmp_path_factory, table)
        path, before = chain["path"], chain["state"]
    for pre in job.pre:
        code, metrics = cli.run([pre, str(path), "--json"])
        assert code in (0, 2), metrics
        if code == 0:
            before = judge.read_state(spark, str(path), **read)
    orphan = _plant_orphan(path) if job_name in ("vacuum-full", "vacuum-inventory") else None
    promised = [v for v in job.kept(before.version, before.version) if v != before.version]
    old_states = {v: judge.read_state(spark, str(path), version=v, **read) for v in promised}
    files_before = _listing(path)

    with _days_later(job.days_later):
        code, metrics = cli.run([*job.args(table, path, before.version), "--json"])

    if code == 2:  # refused: one message, nothing changed
        reason = metrics["error"].replace(str(path), "<table>")
        assert reason and "\n" not in reason.strip(), metrics
        assert _listing(path) == files_before, "a refused job changed the table"
        if orphan:
            (path / orphan).unlink()
        RESULTS[(table_name, job_name)] = {"verdict": "refused", "reason": reason}
        return
    assert code == 0, metrics
    assert metrics["status"] in ("committed", "skipped"), metrics
    if orphan:
        assert not (path / orphan).exists(), f"{job_name} left an orphan file: {metrics}"

    if _listing(path) == files_before:  # nothing written or deleted: the table is byte for byte what was judged
        assert metrics["status"] == "skipped" or metrics["operation"] == "inspect", metrics
        RESULTS[(table_name, job_name)] = {"verdict": "maintained", "status": metrics["status"]}
        return
    after = judge.read_state(spark, str(path), **read)
    judge.assert_same_table(before, after)
    judge.assert_detail_matches_our_snapshot(spark, str(path), latest=after)
    if metrics["operation"] in ("optimize", "vacuum"):
        judge.assert_history_shows_our_commit(spark, str(path), metrics)
    if job.name in ("checkpoint", "compact-log", "cleanup-log"):
        judge.assert_log_files_load(spark, str(path), after)
    for version, state in old_states.items():  # time travel to what the job promised to keep
        assert judge.read_state(spark, str(path), version=version, **read).rows == state.rows, version
    chain["state"] = after
    status = _copy_outcome(metrics) if job.own_copy else metrics["status"]
    RESULTS[(table_name, job_name)] = {"verdict": "maintained", "status": status}


def test_a_covering_run_keeps_every_feature_of_the_matrix():
    """A covering run (CI) leaves out only tables whose every feature another table of it has."""
    chosen = covering_tables()
    assert len(set(chosen)) == len(chosen) < len(TABLES) and set(chosen) <= set(TABLES_BY_NAME)
    assert {label for name in chosen for label in TABLES_BY_NAME[name].features} == {
        label for t in TABLES for label in t.features}
    if COVERING:
        assert [k for k in globals() if k.startswith("TestChain_")] == [
            "TestChain_" + t.name.replace("-", "_") for t in TABLES if t.name in chosen]


def test_the_compatibility_page_is_the_matrix_results():
    """docs/compatibility.md has a cell for exactly the matrix's cases (each case checks its own cell); with
    DELTA_MAINT_WRITE_COMPATIBILITY=1, a whole run in this process rewrites the page from its results."""
    if WRITE_PAGE:
        assert len(RESULTS) == len(CASES), (f"rewriting docs/compatibility.md needs every case in this process "
                                            f"({len(RESULTS)} of {len(CASES)} ran): make test-compatibility")
        PAGE.write_text(render(RESULTS, TABLES, _columns(), FEATURE_LABELS))
    cells = parse(PAGE.read_text() if PAGE.exists() else "", _columns())
    missing = sorted(f"{t}/{j}" for t, j in CASES if (t, j) not in cells)
    stale = sorted(f"{t}/{j}" for t, j in cells if (t, j) not in set(CASES))
    assert not missing and not stale, json.dumps({"not on the page": missing, "on the page only": stale})[:4000]


class _KeepsWriting:
    name = KEEPS_WRITING
    title = ("delta-spark keeps writing after all of them: INSERT, MERGE, UPDATE, DELETE, RESTORE where the "
             "history still allows it, its own OPTIMIZE and VACUUM")
