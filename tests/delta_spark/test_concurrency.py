"""Our maintenance jobs racing delta-spark writers on the same table.

A delta-spark process (``writer.py dml``) appends, DELETEs (deletion vectors), MERGEs and UPDATEs
in a seeded loop and keeps a model of the rows; a second one (``writer.py optimize``) runs
delta-spark's own OPTIMIZE in a loop. Meanwhile this process runs our OPTIMIZE (bin-packing and
Z-order), VACUUM (lite and full), compact-log and checkpoint on the same table, on the fixture's
session, until the writer is done. Whichever side loses a race retries or fails with a named
conflict. Afterwards delta-spark and our own reader see exactly the model's rows (nothing lost,
duplicated or resurrected), and delta-spark can still write to the table.

Why VACUUM runs with a retention of ``RETENTION_S`` seconds and not 0: a delta-spark transaction
writes its data files (and deletion-vector files) first and commits them last. Until it commits,
those files are untracked, and full VACUUM deletes every untracked file older than its cutoff
(``now - retention``); lite VACUUM deletes files that commits older than the cutoff removed,
which a transaction that started before those commits may still be reading. With 0 hours a
concurrent writer's files can be deleted between its write and its commit, so the commit would
reference a file that is gone: the known hazard of a zero retention in every engine (delta-spark's
own VACUUM has it too, which is why it refuses retentions under 7 days by default). A retention
longer than any transaction of the writers closes it: the test times every delta-spark statement
and asserts that no VACUUM run had a cutoff later than the start of a transaction still open when
the run began (``check_retention_covered``); ``test_vacuum_spares_files_younger_than_the_retention``
shows the mechanism on a file written but not yet committed.

delta-spark counts the files a compaction adds as new data for a DML statement that read their
partition: a DELETE, UPDATE or MERGE that overlaps an OPTIMIZE commit (ours or its own) fails with
``ConcurrentAppendException`` ("a concurrent OPTIMIZE added data"), and an OPTIMIZE that overlaps
a DML commit with ``ConcurrentDeleteReadException``. Our OPTIMIZE that finds a DML commit between
its read and its commit carries the rows that commit deleted from its input files onto the files it
wrote as deletion vectors (``numBinsRebased``, ``numDeletionVectorsCarried``), drops the bins it
cannot rebase (``numBinsDroppedByConflicts``) and commits the rest; the rows read afterwards prove
the carried deletion vectors right.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.rewrite.data_files import RewriteSpec, read_data_file
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import commit_actions
from tests.delta_spark import writer as W

WRITER = Path(W.__file__)
SEED = 7
#: VACUUM's retention: longer than any delta-spark transaction here (asserted), so no file a
#: concurrent transaction is about to commit can be older than the cutoff
RETENTION_S = 60
#: the writer starts no statement after this many seconds, once it ran the minimum; longer than
#: the retention, so that VACUUM runs while the writers write find files old enough to delete
DML_DEADLINE_S = 90.0
DML_STATEMENTS = 80
#: between two of our runs, and two of delta-spark's OPTIMIZE runs: the DML writer must get
#: statements through, not only lose races (every OPTIMIZE commit in a partition a DML statement
#: read makes delta-spark's statement fail with ConcurrentAppendException, and the machine has
#: 2 cores for 3 JVMs)
OUR_PAUSE_S = 2.0
DELTA_SPARK_OPTIMIZE_PAUSE_S = 3.0

#: a writer still running this long after the start is stuck (a busy machine takes some 10 minutes)
WRITER_LIMIT_S = 1200.0
#: how long a writer may take to finish its statement and stop once told to
WRITER_STOP_S = 180.0

_RETENTION = ["--retention-hours", str(RETENTION_S / 3600), "--ignore-retention-check"]
#: our jobs in turn; every other OPTIMIZE Z-orders, one partition at a time (Z-order rewrites a
#: partition even when it is one file already, so the whole table each time would make every
#: concurrent DML statement lose)
OUR_JOBS: list[list[str]] = []
for _p in W.PARTITIONS:
    OUR_JOBS += [
        ["optimize"],
        ["vacuum", "--mode", "lite", *_RETENTION],
        ["compact-log", "--interval", "2"],
        ["optimize", "--zorder-by", "id,v", "--where", f"p = '{_p}'"],
        ["vacuum", "--mode", "full", *_RETENTION],
        ["checkpoint"],
    ]


# -- the table -------------------------------------------------------------------------------------
def make_table(spark, path: Path, row_tracking: bool = False) -> None:
    """The model's initial rows in one append of 8 tasks: many small files in each of the 4 partitions."""
    props = "'delta.enableDeletionVectors' = 'true'"
    if row_tracking:
        props += ", 'delta.enableRowTracking' = 'true'"
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, p STRING, v BIGINT) USING delta PARTITIONED BY (p) "
              f"TBLPROPERTIES ({props})")
    spark.createDataFrame(W.initial_rows(SEED), "id BIGINT, p STRING, v BIGINT").repartition(8) \
        .write.format("delta").mode("append").save(str(path))


def rows_delta_spark(spark, path: Path) -> Counter:
    return Counter((r.id, r.p, r.v) for r in spark.read.format("delta").load(str(path)).select("id", "p", "v")
                   .collect())


def rows_ours(path: Path) -> Counter:
    """The rows through our engine's reader (deletion vectors applied); the count must match the log's."""
    snap = Snapshot.load(str(path))
    spec = RewriteSpec(snap.storage, snap.metadata.to_action())
    out: Counter = Counter()
    stated = 0
    for add in snap.add_actions():
        p = (add.get("partitionValues") or {})["p"]
        for r in read_data_file(spec, add).to_pylist():
            out[(r["id"], p, r["v"])] += 1
        stated += json.loads(add["stats"])["numRecords"] - (add.get("deletionVector") or {}).get("cardinality", 0)
    assert sum(out.values()) == stated
    return out


# -- the processes ------------------------------------------------------------------------------------
def start_writer(mode: str, path: Path, work: Path, *args: str) -> tuple[subprocess.Popen, Path, Path]:
    outcomes, log = work / f"{mode}.jsonl", work / f"{mode}.log"
    cmd = [sys.executable, str(WRITER), mode, str(path), str(outcomes), *args]
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, cwd=W.REPO)
    return proc, outcomes, log


def read_outcomes(path: Path) -> list[dict]:
    """The outcome lines written so far (a line still being written is left for later)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def ours(job: str, path: Path, *args: str) -> tuple[int, dict]:
    """One of our jobs in this process, on the fixture's session; its metrics kept, not printed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return cli.run([job, str(path), "--json", *args])


def run_ours_until(path: Path, done, limit_s: float) -> list[dict]:
    """Our jobs in turn, in this process, until ``done()``; each run's metrics with start and end."""
    runs = []
    i = 0
    stop_at = time.time() + limit_s
    while not done() and time.time() < stop_at:
        argv = OUR_JOBS[i % len(OUR_JOBS)]
        started = time.time()
        code, m = ours(argv[0], path, *argv[1:])
        runs.append({"job": " ".join(argv[:1] + (["zorder"] if "--zorder-by" in argv else [])
                                     + ([argv[2]] if argv[0] == "vacuum" else [])),
                     "code": code, "metrics": m, "started": started, "ended": time.time()})
        i += 1
        time.sleep(OUR_PAUSE_S)
    return runs


def conflict_kind(m: dict) -> str:
    return m.get("error", "").split(":", 1)[0]


# -- judging ------------------------------------------------------------------------------------------
def check_our_run(run: dict) -> None:
    """A run either committed, skipped, or failed with a conflict naming the winning version."""
    m = run["metrics"]
    assert run["code"] in (0, 2), f"{run['job']}: unexpected error: {m.get('error')}"
    if m["status"] == "failed":
        assert m.get("error_type") == "ConflictError", f"{run['job']} failed: {m.get('error')}"
        assert " at version " in m["error"], m["error"]
    else:
        assert m["status"] in ("committed", "skipped"), m


def check_statements(records: list[dict]) -> None:
    """Every delta-spark attempt succeeded or lost a race with a named conflict, and committed iff
    it succeeded (no commit behind a failure)."""
    for r in records:
        if r["kind"] != "stmt":
            continue
        if r["ok"]:
            assert len(r["versions"]) <= 1 or r["op"] == "optimize", r
        else:
            assert r["conflict"], f"delta-spark {r['op']} failed without a conflict: {r['error_class']}: {r['error']}"
            assert not r["versions"], f"a failed attempt committed: {r}"


def check_retention_covered(records: list[dict], runs: list[dict]) -> None:
    """No VACUUM run had a cutoff later than the start of a delta-spark transaction still open when
    the run read the table: the files that transaction wrote or read were all younger than the
    cutoff, so the retention covered it (see the module's docstring)."""
    vacuums = [r for r in runs if r["job"].startswith("vacuum") and r["metrics"].get("cutoff_timestamp")]
    for t in (r for r in records if r["kind"] == "stmt"):
        end = t["started"] + t["duration_s"]
        for v in vacuums:
            cutoff = v["metrics"]["cutoff_timestamp"] / 1000
            assert not (cutoff > t["started"] and v["started"] < end), (
                f"delta-spark's {t['op']} ran {t['duration_s']} s, longer than VACUUM's retention of {RETENTION_S} s, "
                f"and a VACUUM ({v['job']}) ran meanwhile: the retention did not cover that transaction")


def log_figures(path: Path) -> dict[str, Counter]:
    """From the log: commits by engine, those that passed conflict checks against concurrent
    commits (read version older than the version before), and deletion vectors written."""
    out: dict[str, Counter] = defaultdict(Counter)
    for v in W.commit_versions(str(path)):
        actions = [json.loads(line) for line in (path / "_delta_log" / f"{v:020d}.json").read_text().splitlines()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        engine = "ours" if info.get("engineInfo", "").startswith("airflow-delta-maint") else "delta-spark"
        out["commits"][engine] += 1
        read = info.get("readVersion")
        if read is not None and read < v - 1:
            out["commits rebased over concurrent commits"][engine] += 1
        out["deletion vectors written"][engine] += sum(1 for a in actions if (a.get("add") or {}).get("deletionVector"))
    return out


def figures(name: str, dml: list[dict], opt: list[dict], runs: list[dict], final_rows: int,
            log: dict[str, Counter]) -> dict[str, Any]:
    stmts = [r for r in dml if r["kind"] == "stmt"]
    by_op: dict[str, Counter] = defaultdict(Counter)
    for r in stmts:
        by_op[r["op"]]["committed" if r["version"] is not None else ("no-op" if r["ok"] else "lost")] += 1
    logical = {r["n"] for r in stmts}
    skipped = {r["n"] for r in stmts if r["attempt"] == 2 and not r["ok"]}
    checks = [r for r in dml if r["kind"] == "check"]
    ours_status = Counter(f"{r['job']}: {r['metrics']['status']}" for r in runs)
    ours_conflicts = Counter(conflict_kind(r["metrics"]) for r in runs if r["metrics"]["status"] == "failed")
    for key, label in (("numBinsDroppedByConflicts", "OPTIMIZE bins dropped (ConcurrentDeleteDelete)"),
                       ("numBinsRebased", "OPTIMIZE bins rebased onto concurrent deletion vectors")):
        n = sum(int(r["metrics"].get(key) or 0) for r in runs)
        if n:
            ours_conflicts[label] = n
    out = {
        "scenario": name,
        "statements": len(logical), "attempts": len(stmts), "skipped after retry": len(skipped),
        "dml by op": {k: dict(v) for k, v in sorted(by_op.items())},
        "delta-spark conflicts (dml)": dict(Counter(r["error_class"] for r in stmts if not r["ok"])),
        "delta-spark OPTIMIZE runs": Counter("committed" if r["version"] is not None else
                                             ("no-op" if r["ok"] else r["error_class"])
                                             for r in opt if r["kind"] == "stmt"),
        "our runs": dict(sorted(ours_status.items())),
        "our conflicts": dict(ours_conflicts),
        "deletion vectors carried onto rewritten files by our OPTIMIZE": sum(
            int(r["metrics"].get("numDeletionVectorsCarried") or 0) for r in runs),
        "deletion vectors purged by our OPTIMIZE": sum(int(r["metrics"].get("numDeletionVectorsRemoved") or 0)
                                                       for r in runs if r["job"].startswith("optimize")),
        "files deleted by our VACUUM": sum(int(r["metrics"].get("numDeletedFiles") or 0)
                                           for r in runs if r["job"].startswith("vacuum")),
        "checks by the writer": len(checks), "rows checked by the writer": sum(c.get("rows", 0) for c in checks),
        "rows at the end (the model's)": final_rows,
        **{k: dict(v) for k, v in log.items()},
    }
    print(f"\n[concurrency figures] {json.dumps(out, indent=1, default=dict)}")
    return out


def race(spark, tmp_path: Path, name: str, row_tracking: bool, delta_spark_optimize: bool,
         deadline_s: float, min_statements: int, vacuum_must_delete: bool = True) -> dict[str, Any]:
    """One scenario: the table, the writers, our jobs until the DML writer is done, then the verdict."""
    t0 = time.time()
    path = tmp_path / "table"
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    common = ["--seed", str(SEED), "--wait-for", str(ready)]
    dml, dml_out, dml_log = start_writer(
        "dml", path, tmp_path, *common, "--statements", str(DML_STATEMENTS), "--deadline-s", str(deadline_s),
        "--min-statements", str(min_statements), *(["--row-tracking"] if row_tracking else []))
    procs, logs = [dml], [dml_log]
    if delta_spark_optimize:
        opt, opt_out, opt_log = start_writer("optimize", path, tmp_path, *common, "--stop-file", str(stop),
                                             "--deadline-s", str(WRITER_LIMIT_S),
                                             "--pause-s", str(DELTA_SPARK_OPTIMIZE_PAUSE_S))
        procs.append(opt)
        logs.append(opt_log)
    try:
        make_table(spark, path, row_tracking)
        ready.touch()
        # our jobs start once the writer has run its first statement
        while not any(r["kind"] == "stmt" for r in read_outcomes(dml_out)) and dml.poll() is None \
                and time.time() < t0 + WRITER_LIMIT_S:
            time.sleep(0.2)
        runs = run_ours_until(path, lambda: dml.poll() is not None, WRITER_LIMIT_S)
        stop.touch()
        for p, log_file in zip(procs, logs):
            try:
                p.wait(timeout=WRITER_STOP_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"a delta-spark writer did not finish in time:\n{tail(log_file)}")
    finally:
        stop.touch()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert dml.returncode == 0, tail(dml_log)
    dml_records = read_outcomes(dml_out)
    opt_records: list[dict] = []
    if delta_spark_optimize:
        assert opt.returncode == 0, tail(opt_log)
        opt_records = read_outcomes(opt_out)
        assert opt_records[-1]["kind"] == "done", tail(opt_log)
    assert dml_records[-1]["kind"] == "done", tail(dml_log)
    model = Counter(tuple(r) for r in dml_records[-1]["model"])
    log = log_figures(path)  # before the verdict's own writes below
    out = figures(name, dml_records, opt_records, runs, sum(model.values()), log)

    # every side behaved: named conflicts only, no failed check while the race ran
    check_statements(dml_records + opt_records)
    check_retention_covered(dml_records + opt_records, runs)
    for run in runs:
        check_our_run(run)
    bad_checks = [c for c in dml_records if c["kind"] == "check" and not c["ok"]]
    assert not bad_checks, bad_checks

    # afterwards: delta-spark and our reader see exactly the model's rows
    seen = rows_delta_spark(spark, path)
    assert seen == model, {"missing": sorted((model - seen).elements())[:20],
                           "unexpected": sorted((seen - model).elements())[:20]}
    assert rows_ours(path) == model
    if row_tracking:
        ids = [r[0] for r in spark.read.format("delta").load(str(path)).select("_metadata.row_id").collect()]
        assert None not in ids and len(set(ids)) == len(ids) == sum(model.values())
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version").collect()
    assert max(r.version for r in history) == W.latest_version(str(path))
    # delta-spark still writes to the table, and reads what it wrote
    extra = (10**9, "a", 1)
    spark.sql(f"INSERT INTO delta.`{path}` VALUES {extra}")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 0")
    after = model + Counter([extra])
    after = Counter({r: n for r, n in after.items() if r[0] != 0})
    assert rows_delta_spark(spark, path) == after

    # the race happened: our jobs committed while the writer was active, and someone lost a race
    stmts = [r for r in dml_records if r["kind"] == "stmt"]
    active = (stmts[0]["started"], stmts[-1]["started"] + stmts[-1]["duration_s"])
    committed_during = [r for r in runs if r["metrics"]["status"] == "committed"
                        and r["started"] < active[1] and r["ended"] > active[0]]
    assert any(r["job"].startswith("optimize") for r in committed_during), [r["job"] for r in committed_during]
    lost_races = (sum(out["delta-spark conflicts (dml)"].values())
                  + sum(n for k, n in out["delta-spark OPTIMIZE runs"].items() if k not in ("committed", "no-op"))
                  + sum(out["our conflicts"].values()))
    assert lost_races > 0, "no race was observed on either side"
    if vacuum_must_delete:  # files become deletable RETENTION_S after a commit removed them
        assert out["files deleted by our VACUUM"] > 0, "VACUUM deleted nothing: it did not race anything"
    assert log["deletion vectors written"]["delta-spark"] > 0, "no delta-spark statement wrote a deletion vector"
    print(f"[concurrency figures] {name}: {time.time() - t0:.0f} s")
    return out


# -- the tests ---------------------------------------------------------------------------------------
def test_jobs_race_delta_spark_dml_and_optimize(spark, tmp_path: Path) -> None:
    """Partitioned table with deletion vectors: delta-spark DML and delta-spark OPTIMIZE against
    our OPTIMIZE, VACUUM, compact-log and checkpoint."""
    out = race(spark, tmp_path, "partitioned, deletion vectors", row_tracking=False, delta_spark_optimize=True,
               deadline_s=DML_DEADLINE_S, min_statements=12)
    assert out["statements"] >= 12


def test_jobs_race_delta_spark_dml_on_row_tracking_table(spark, tmp_path: Path) -> None:
    """Row tracking and deletion vectors: stable row ids stay unique, and each id keeps its row id
    through our rewrites and delta-spark's UPDATEs and MERGEs (the writer checks it every few statements)."""
    out = race(spark, tmp_path, "row tracking, deletion vectors", row_tracking=True, delta_spark_optimize=False,
               deadline_s=40.0, min_statements=8, vacuum_must_delete=False)
    assert out["statements"] >= 8


def test_vacuum_spares_files_younger_than_the_retention(spark, tmp_path: Path) -> None:
    """The hazard the retention covers: a data file written but not yet committed is untracked.
    Full VACUUM with 0 hours would delete it; with a retention longer than the transaction it
    stays, and the commit that then references it reads fine in delta-spark."""
    path = tmp_path / "table"
    make_table(spark, path)
    snap = Snapshot.load(str(path))
    live = next(a for a in snap.add_actions() if a["partitionValues"]["p"] == "a")
    # a concurrent transaction's data file, written and not yet committed: a copy of a live file
    pending = path / "p=a" / "part-00000-pending-0000.c000.snappy.parquet"
    pending.write_bytes((path / live["path"]).read_bytes())
    code, m = ours("vacuum", path, "--mode", "full", "--retention-hours", "0", "--ignore-retention-check", "--dry-run")
    assert code == 0, m
    assert "p=a/" + pending.name in m["files_to_delete"], "with 0 hours the uncommitted file would go"
    code, m = ours("vacuum", path, "--mode", "full", *_RETENTION)
    # the only file no version references is the pending one, younger than the retention: nothing to delete
    assert code == 0 and m["status"] == "skipped" and m["numDeletedFiles"] == 0, m
    assert pending.exists()
    # the transaction commits its file (a blind append) and readers find it
    add = {k: v for k, v in live.items() if k not in ("deletionVector", "baseRowId", "defaultRowCommitVersion")}
    add.update(path="p=a/" + pending.name, dataChange=True)
    commit_actions(Snapshot.load(str(path)), "WRITE", [{"add": add}], job="optimize")
    duplicated = Counter((r["id"], "a", r["v"]) for r in pq.read_table(pending).to_pylist())
    expected = Counter((i, p, v) for i, p, v in W.initial_rows(SEED)) + duplicated
    assert rows_delta_spark(spark, path) == expected
