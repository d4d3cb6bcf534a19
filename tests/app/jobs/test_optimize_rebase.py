"""OPTIMIZE on a busy table: bins rebased onto the deletion vectors concurrent writers commit
between our plan and our commit, instead of dropped; young files and recently written partitions
left out on request.

The writer (tests/dv_writer.py) commits through the core what delta-spark commits for a DELETE
(a new deletion vector on the same path, or the file removed with its last row), an append and a
copy-on-write rewrite, and keeps a model of the rows. It commits from ``optimize_commit``'s
``BEFORE_COMMIT`` seam: after our rewrite, before each of our commit attempts. Every test
compares the rows (and on row-tracking tables every row's stable Row ID and Row Commit Version)
with the model: the result must be the writer's commits followed by ours.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from urllib.parse import unquote
from typing import Callable, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.rewrite import commit as optimize_commit
from airflow_delta_maint.delta.health.run_log import read_runs
from airflow_delta_maint.delta.log.listing import read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.deletion_vectors import dv_file_key, read_deletion_vector
from airflow_delta_maint.delta.storage.store import Storage
from tests.dv_writer import DVTable, read_rows


@contextlib.contextmanager
def before_commit(hook: Callable[[optimize_commit.CommitAttempt], None],
                  seam: list | None = None) -> Iterator[None]:
    seam = optimize_commit.BEFORE_COMMIT if seam is None else seam
    seam.append(hook)
    try:
        yield
    finally:
        seam.remove(hook)


def left_behind(path: Path) -> set[str]:
    """Data and deletion-vector files on disk that no commit of the log ever referenced."""
    snap = Snapshot.load(str(path))
    referenced: set[str] = set()
    for v in range(snap.version + 1):
        for a in read_commit(snap.storage, v):
            body = a.get("add") or a.get("remove")
            if body is not None:
                referenced.add(unquote(body["path"]))
                if body.get("deletionVector"):
                    referenced.add(dv_file_key(snap.storage, body["deletionVector"]) or "")
    on_disk = {str(f.relative_to(path)) for f in path.glob("**/*") if f.is_file() and "_delta_log" not in f.parts}
    return on_disk - referenced


def optimize_local(path: Path, *args: str) -> dict:
    code, m = run_in_process("optimize", str(path), list(args), spark_allowed=False)
    assert code == 0, m.get("error")
    return m


def ids_in(path: Path, partition: str) -> list[int]:
    return sorted(i for i, (_, p, _) in read_rows(path)[0].items() if p == partition)


def commit_info(path: Path, version: int) -> dict:
    return next(a["commitInfo"] for a in read_commit(Storage(str(path)), version) if "commitInfo" in a)


def check(table: DVTable, ids_before: dict[int, tuple[int, int]] | None = None) -> None:
    """The table holds exactly the model's rows; on row-tracking tables every row that was there
    before keeps its stable Row ID and Row Commit Version."""
    rows, ids = read_rows(table.path)
    assert rows == table.rows
    if ids_before is not None:
        assert {i: ids[i] for i in ids if i in ids_before} == {i: ids_before[i] for i in ids if i in ids_before}


# -- one writer commit between our rewrite and our commit -------------------------------------------
def test_a_concurrent_delete_is_carried_onto_the_output(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "t").create(["a", "b"], 3, 20)
    victims = ids_in(table.path, "a")[3:9:2] + ids_in(table.path, "a")[45:47]
    seen: list[int] = []

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        seen.append(attempt.base_version)
        if len(seen) == 1:
            table.delete(victims)

    history = tmp_path / "history"
    with before_commit(writer):
        m = optimize_local(table.path, "--history-uri", str(history))
    assert m["status"] == "committed" and m["numBinsRebased"] == 1 and m["numDeletionVectorsCarried"] == 1
    assert m["numBinsDroppedByConflicts"] == 0 and m["droppedBins"] == []
    assert seen == [0, 1]  # the second attempt went on top of the writer's commit
    check(table)
    snap = Snapshot.load(str(table.path))
    carried = [a for a in snap.add_actions() if a.get("deletionVector")]
    assert len(carried) == 1 and carried[0]["partitionValues"] == {"p": "a"}
    assert json.loads(carried[0]["stats"])["tightBounds"] is False
    assert json.loads(carried[0]["stats"])["numRecords"] == 60
    assert len(read_deletion_vector(snap.storage, carried[0]["deletionVector"])) == len(victims)
    info = commit_info(table.path, m["version_committed"])
    assert info["operationMetrics"]["numBinsRebased"] == "1"
    assert info["operationMetrics"]["numDeletionVectorsCarried"] == "1"
    assert info["readVersion"] == 1
    recorded = json.loads(read_runs(str(history)).column("metrics")[0].as_py())
    assert recorded["numBinsRebased"] == 1 and recorded["numDeletionVectorsCarried"] == 1


def test_an_input_removed_outright_drops_its_bin_and_says_why(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "t").create(["a", "b"], 3, 20)
    a_files = sorted(a["path"] for a in Snapshot.load(str(table.path)).add_actions() if a["path"].startswith("p=a"))
    everything = sorted(a["path"] for a in Snapshot.load(str(table.path)).add_actions())

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        if attempt.attempt == 1 and len(attempt.bins) == 2:
            table.rewrite_file(everything.index(a_files[1]))

    with before_commit(writer):
        m = optimize_local(table.path)
    assert m["status"] == "committed" and m["numBinsDroppedByConflicts"] == 1 and m["numBinsRebased"] == 0
    [dropped] = m["droppedBins"]
    assert dropped["partition"] == "p=a" and dropped["files"] == 3
    assert "removed by a concurrent commit" in dropped["reason"] and "UPDATE" in dropped["reason"]
    check(table)
    # the other partition is one file; the dropped bin's output is gone
    snap = Snapshot.load(str(table.path))
    assert sorted(len([a for a in snap.add_actions() if a["partitionValues"]["p"] == p]) for p in "ab") == [1, 3]
    assert left_behind(table.path) == set()


def test_a_vector_that_is_not_a_superset_drops_the_bin(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "t").create(["a"], 3, 20)
    table.delete(ids_in(table.path, "a")[:2])  # the first file has a vector when we plan
    snap = Snapshot.load(str(table.path))
    with_dv = next(a for a in snap.add_actions() if a.get("deletionVector"))

    def restore(attempt: optimize_commit.CommitAttempt) -> None:
        if attempt.attempt == 1:  # a writer that puts the file back without its vector
            now = 1_700_000_000_000
            rm = {"path": with_dv["path"], "deletionTimestamp": now, "dataChange": True, "size": with_dv["size"],
                  "deletionVector": with_dv["deletionVector"], "partitionValues": with_dv["partitionValues"]}
            add = {k: v for k, v in with_dv.items() if k != "deletionVector"}
            table._commit("RESTORE", [{"remove": rm}, {"add": {**add, "dataChange": True}}])
            for i in range(2):
                table.rows[i] = (i, "a", (i * 7919) % 1000)

    with before_commit(restore):
        m = optimize_local(table.path)
    assert m["status"] == "skipped" and m["numBinsDroppedByConflicts"] == 1
    assert "does not keep every row deleted" in m["droppedBins"][0]["reason"]
    assert "RESTORE" in m["droppedBins"][0]["reason"]
    check(table)


def test_row_tracking_keeps_every_row_id_through_the_rebase(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "t", row_tracking=True).create(["a", "b"], 3, 20)
    table.delete(ids_in(table.path, "b")[5:8])
    _, ids_before = read_rows(table.path)
    calls = []

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        calls.append(attempt)
        if len(calls) == 1:
            table.delete(ids_in(table.path, "a")[::7] + ids_in(table.path, "b")[::11])
            table.append("a", 5)

    with before_commit(writer):
        m = optimize_local(table.path, "--bins-per-commit", "1")
    assert m["status"] == "committed" and m["numBinsRebased"] == 2 and m["numBinsDroppedByConflicts"] == 0
    check(table, ids_before)
    info = commit_info(table.path, m["version_committed"])
    assert info["tags"]["delta.rowTracking.preserved"] == "true"


def test_even_split_carries_one_inputs_deletions_into_several_outputs(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "t", partitioned=False).create(["x"], 2, 30)
    victims = list(range(5, 55, 4))  # rows of both inputs, which the 3 outputs split across

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        if attempt.attempt == 1:
            table.delete(victims)

    with before_commit(writer):
        m = optimize_local(table.path, "--target-files", "3")
    assert m["status"] == "committed" and m["numBinsRebased"] == 1 and m["numDeletionVectorsCarried"] == 3
    check(table)
    snap = Snapshot.load(str(table.path))
    assert len(snap.add_actions()) == 3
    assert sum(a["deletionVector"]["cardinality"] for a in snap.add_actions()) == len(victims)


def writer_cadence(table: DVTable, commits: int, every_s: float) -> None:
    """``commits`` appends by a writer, dated ``every_s`` apart up to now: a writer at work."""
    first = table.commits + 1
    for i in range(commits):
        table.append("a", 2)
    now = int(time.time() * 1000)
    for n, version in enumerate(range(first, first + commits)):
        log_file = table.path / "_delta_log" / f"{version:020d}.json"
        lines = [json.loads(line) for line in log_file.read_text().splitlines() if line]
        for action in lines:
            if "commitInfo" in action:
                action["commitInfo"]["timestamp"] = now - int((commits - 1 - n) * every_s * 1000)
        log_file.write_text("\n".join(json.dumps(a) for a in lines) + "\n")


def test_a_quiet_table_rewrites_every_bin_at_once(tmp_path: Path) -> None:
    """Unset --bins-per-commit on a table no writer is at work on: one unit of every bin, one commit."""
    quiet = DVTable(tmp_path / "quiet").create(["a", "b", "c"], 3, 10)
    units: list[int] = []
    with before_commit(lambda bins: units.append(len(bins)), optimize_commit.AFTER_REWRITE):
        m = optimize_local(quiet.path)
    assert units == [3]
    assert m["versions_committed"] == [1] and m["numBatches"] == 1
    assert m["rewritePath"] == "quiet" and m["writeCadence"]["writerCommitsInWindow"] == 1
    check(quiet)


def test_a_busy_table_commits_bins_as_they_are_rewritten(tmp_path: Path) -> None:
    """A writer committing every few seconds: bins are rewritten one at a time and wait for each
    other until another writer commits during the run; from then on each goes in at once."""
    busy = DVTable(tmp_path / "busy").create(["a", "b", "c"], 3, 10)
    writer_cadence(busy, 4, 12.0)
    units: list[int] = []

    def writer(bins: list) -> None:
        units.append(len(bins))
        if len(units) == 1:
            busy.append("d", 3)

    with before_commit(writer, optimize_commit.AFTER_REWRITE):
        m = optimize_local(busy.path, "--max-concurrent-bins", "1")
    assert units == [1, 1, 1]
    assert m["status"] == "committed" and m["numBins"] == 3 and len(m["versions_committed"]) == 3
    assert m["rewritePath"] == "busy" and m["writeCadence"]["writerCommitsInWindow"] == 5  # the creation too
    check(busy)


def test_a_quiet_run_turns_busy_once_another_writer_commits(tmp_path: Path) -> None:
    """Quiet at the start (whole batches), a writer commits while the first batch is rewritten: the
    bins left are rewritten one at a time, each committed at once."""
    table = DVTable(tmp_path / "t").create(["a", "b", "c", "d"], 3, 10)
    sizes: dict[str, int] = {}
    for add in Snapshot.load(str(table.path)).add_actions():
        sizes[add["partitionValues"]["p"]] = sizes.get(add["partitionValues"]["p"], 0) + add["size"]
    batch = 2 * max(sizes.values())
    assert 3 * min(sizes.values()) > batch  # two bins a batch
    units: list[int] = []

    def writer(bins: list) -> None:
        units.append(len(bins))
        if len(units) == 1:
            table.append("e", 3)

    with before_commit(writer, optimize_commit.AFTER_REWRITE):
        m = optimize_local(table.path, "--batch-bytes", str(batch), "--max-concurrent-bins", "1")
    assert units == [2, 1, 1]
    assert m["rewritePath"] == "quiet, then busy" and "another writer committed" in m["rewritePathReason"]
    assert m["status"] == "committed" and m["numBins"] == 4 and len(m["versions_committed"]) == 3
    check(table)


def test_bins_per_commit_overrides_the_path(tmp_path: Path) -> None:
    eager = DVTable(tmp_path / "eager").create(["a", "b", "c"], 3, 10)
    m = optimize_local(eager.path, "--bins-per-commit", "2")
    assert m["versions_committed"] == [1, 2] and m["numBatches"] == 2 and "rewritePath" not in m
    check(eager)


# -- sparing the writers ----------------------------------------------------------------------------
def test_wait_for_writer_commits_right_after_the_writers_commit(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "t").create(["a", "b"], 3, 10)
    victims = ids_in(table.path, "a")[:3]
    timers: list[threading.Timer] = []

    def start_writer(bins: list) -> None:
        if not timers:  # the writer commits a second after our first unit is rewritten
            timers.append(threading.Timer(1.0, table.delete, args=(victims,)))
            timers[0].start()

    with before_commit(start_writer, optimize_commit.AFTER_REWRITE):
        m = optimize_local(table.path, "--wait-for-writer", "60")
    timers[0].join()
    assert m["versions_committed"] == [2] and m["numBinsRebased"] == 1  # one commit, after the writer's
    assert commit_info(table.path, 2)["readVersion"] == 1  # rebased before the attempt, not after losing it
    check(table)

    quiet = DVTable(tmp_path / "quiet").create(["a", "b"], 3, 10)
    m = optimize_local(quiet.path, "--wait-for-writer", "0.5")
    assert m["versions_committed"] == [1]  # no writer came: committed when the wait ran out
    check(quiet)


def test_young_files_and_recent_partitions_are_left_out(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "t").create(["a", "b", "c"], 3, 10)
    m = optimize_local(table.path, "--min-file-age", "3600", "--dry-run")
    assert m["status"] == "dry_run" and m["plan"]["num_bins"] == 0
    code, m = run_in_process("optimize", str(table.path), ["--min-file-age", "3600"], spark_allowed=False)
    assert code == 0 and m["status"] == "skipped"

    table.append("a", 4)
    table.delete(ids_in(table.path, "b")[:1])
    m = optimize_local(table.path, "--skip-recent-partitions", "2")
    assert m["status"] == "committed"
    assert m["leftOut"] == {"youngFilesLeftOut": 0, "recentPartitionsLeftOut": ["p=a", "p=b"],
                            "recentPartitionFilesLeftOut": 7}
    snap = Snapshot.load(str(table.path))
    per = {p: len([a for a in snap.add_actions() if a["partitionValues"]["p"] == p]) for p in "abc"}
    assert per == {"a": 4, "b": 3, "c": 1}
    check(table)


# -- random interleavings ---------------------------------------------------------------------------
OPS = st.one_of(
    st.tuples(st.just("delete"), st.lists(st.integers(0, 80), min_size=1, max_size=12)),
    st.tuples(st.just("append"), st.sampled_from("abc"), st.integers(1, 5)),
    st.tuples(st.just("rewrite"), st.integers(0, 30)),
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.lists(OPS, max_size=3), min_size=1, max_size=6),
       layout=st.sampled_from([[], ["--bins-per-commit", "1"], ["--bins-per-commit", "0"], ["--target-files", "2"]]),
       row_tracking=st.booleans(), predelete=st.lists(st.integers(0, 80), max_size=10))
def test_random_interleavings_of_writers_and_bins(tmp_path_factory, rounds, layout, row_tracking, predelete) -> None:
    interleave(tmp_path_factory.mktemp("t"), rounds, layout, row_tracking, predelete, spark=False)


@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.lists(OPS, max_size=3), min_size=1, max_size=4), row_tracking=st.booleans(),
       predelete=st.lists(st.integers(0, 80), max_size=10),
       layout=st.sampled_from([["--bins-per-commit", "0"], ["--bins-per-commit", "1"], []]))
def test_random_interleavings_with_zorder(tmp_path_factory, spark, rounds, row_tracking, predelete, layout) -> None:
    interleave(tmp_path_factory.mktemp("t"), rounds, ["--zorder-by", "v", "--target-file-size", "900", *layout],
               row_tracking, predelete, spark=True)


def interleave(path: Path, rounds: list, layout: list[str], row_tracking: bool, predelete: list[int],
               spark: bool) -> None:
    """Writer commits drawn by the test after each rewritten unit and before each commit attempt."""
    table = DVTable(path, row_tracking=row_tracking).create(["a", "b", "c"], 3, 9)
    table.delete(predelete)
    _, ids_before = read_rows(table.path)
    pending = list(rounds)

    def writer(_: object) -> None:
        if not pending:
            return
        for op in pending.pop(0):
            if op[0] == "delete":
                table.delete(op[1])
            elif op[0] == "append":
                table.append(op[1], op[2])
            else:
                table.rewrite_file(op[1])

    with before_commit(writer), before_commit(writer, optimize_commit.AFTER_REWRITE):
        code, m = run_in_process("optimize", str(table.path), ["--max-concurrent-bins", "1", *layout],
                                 spark_allowed=spark)
    assert code == 0, m.get("error")
    assert m["status"] in ("committed", "skipped")
    event(f"bins rebased: {min(m['numBinsRebased'], 2)}, dropped: {min(m['numBinsDroppedByConflicts'], 1)}, "
          f"commits: {min(len(m['versions_committed']), 2)}")
    assert m["numBinsDroppedByConflicts"] == len(m["droppedBins"])
    for d in m["droppedBins"]:  # only removed inputs drop a bin, and on a quiet run's Z-order new deletions
        quiet_start = str(m.get("rewritePath", "")).startswith("quiet")
        assert d["reason"].startswith("input removed by a concurrent commit") or (
            quiet_start and not row_tracking and d["reason"].startswith("no row map")), (d, m.get("rewritePath"))
    check(table, ids_before)
    assert left_behind(table.path) == set()  # whatever was not committed left no file behind


# -- Z-order: reordered rows mapped through the row map, or the stable row ids ----------------------
@pytest.mark.parametrize("row_tracking", [False, True], ids=["row-map", "row-ids"])
def test_zorder_rebase(tmp_path: Path, spark, row_tracking: bool) -> None:
    table = DVTable(tmp_path / "t", row_tracking=row_tracking).create(["a", "b"], 3, 40)
    table.delete([1, 2, 3])
    _, ids_before = read_rows(table.path)
    victims = [int(i) for i in np.random.default_rng(7).choice(240, 40, replace=False)]

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        if attempt.attempt == 1:
            table.delete(victims)

    with before_commit(writer):  # rewritten at once, and with the row maps a rebase needs
        code, m = cli.run(["optimize", str(table.path), "--json", "--zorder-by", "v,id", "--target-file-size", "1500",
                           "--bins-per-commit", "0"])
    assert code == 0, m.get("error")
    assert m["status"] == "committed" and m["numBinsRebased"] == 2, m
    assert m["numAddedFiles"] > 2  # each partition's rows went into several files
    assert m["numDeletionVectorsCarried"] >= 3
    check(table, ids_before)


def test_a_quiet_zorder_drops_a_bin_its_writer_deleted_from_and_loses_no_row(tmp_path: Path, spark) -> None:
    """A quiet run records no row maps: a bin whose inputs a writer deletes from while it is rewritten
    is dropped (its outputs deleted), the other bins land, and no row is lost or resurrected."""
    table = DVTable(tmp_path / "t").create(["a", "b"], 3, 40)
    victims = ids_in(table.path, "a")[:5]

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        if attempt.attempt == 1:
            table.delete(victims)

    with before_commit(writer):
        code, m = cli.run(["optimize", str(table.path), "--json", "--zorder-by", "v,id", "--target-file-size", "1500"])
    assert code == 0, m.get("error")
    assert m["rewritePath"] == "quiet" and m["status"] == "committed"
    assert [d["partition"] for d in m["droppedBins"]] == ["p=a"]
    assert m["droppedBins"][0]["reason"].startswith("no row map")
    check(table)
    assert left_behind(table.path) == set()
