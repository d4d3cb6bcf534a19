"""A delta-spark writer in a process of its own, for the concurrency tests (``test_concurrency.py``).

Two modes, each with its own delta-spark session (``start_delta_spark``):

``dml``
    A fixed, seeded sequence of statements on a table with columns ``id BIGINT, p STRING,
    v BIGINT`` partitioned by ``p``: INSERT of new ids, DELETE by predicate (deletion vectors
    when the table enables them), MERGE (new values for some existing ids, new ids inserted) and
    UPDATE. The writer keeps a model of the rows in Python: every statement is deterministic
    given the rows before it, which the model knows, so the expected rows after each successful
    statement are known exactly. A statement that fails with a commit conflict is retried once,
    then skipped; the model applies only the statements that committed. Whether an attempt
    committed is read from the log, not guessed: each attempt stamps its commit with a unique
    ``userMetadata``. Every few statements, and at the end, the writer reads the table's latest
    version and compares it with the model (with ``--row-tracking`` it also checks that every
    id keeps the stable row id it was first seen with). The writer never reads an old version:
    VACUUM with a short retention may remove the files of old versions.

``optimize``
    ``OPTIMIZE`` (every other run ``ZORDER BY (v)``) in a loop until ``--stop-file`` exists or
    the deadline passes, racing the maintenance jobs and the ``dml`` writer.

Each attempt appends one JSON line to the outcome file: ``{"kind": "stmt", ...}`` with the
statement, ``ok``, the exception's class and first line when it failed, whether it was a
conflict, the version it committed and its duration. The ``dml`` mode also writes ``check``
lines and, last, a ``done`` line with the model's rows.

Run: ``python tests/delta_spark/writer.py dml TABLE OUTCOMES --seed 7 --statements 60``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

PARTITIONS = ("a", "b", "c", "d")
INITIAL_ROWS = 400
#: delta-spark's commit-conflict exceptions (io.delta.exceptions / DeltaConcurrentModificationException)
CONFLICTS = frozenset({
    "ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException", "MetadataChangedException", "ProtocolChangedException",
    "ConcurrentWriteException", "DeltaConcurrentModificationException",
})
#: small statements on a small table, on a shared 2-core machine
SESSION_CONF = {
    "spark.sql.shuffle.partitions": "2",
    # the MERGE source is a local, deterministic DataFrame: no need to materialise it first
    "spark.databricks.delta.merge.materializeSource": "none",
}
_COMMIT = re.compile(r"^(\d{20})\.json$")


# -- the model (pure Python, shared with the test) ------------------------------------------------
def partition_of(row_id: int) -> str:
    return PARTITIONS[row_id % len(PARTITIONS)]


def initial_rows(seed: int) -> list[tuple[int, str, int]]:
    """The rows the test creates the table with: ids 0..INITIAL_ROWS-1."""
    rng = random.Random(f"initial-{seed}")
    return [(i, partition_of(i), rng.randrange(1000)) for i in range(INITIAL_ROWS)]


class Model:
    """The rows the table must hold: ``id -> (p, v)``."""

    def __init__(self, rows: list[tuple[int, str, int]]):
        self.rows = {i: (p, v) for i, p, v in rows}
        self.next_id = max(self.rows) + 1 if self.rows else 0

    def counter(self) -> Counter:
        return Counter((i, p, v) for i, (p, v) in self.rows.items())

    def sorted_rows(self) -> list[list[Any]]:
        return [[i, p, v] for i, (p, v) in sorted(self.rows.items())]


def _where(stmt: dict, i: int, p: str) -> bool:
    return i % stmt["m"] == stmt["r"] and (stmt["p"] is None or p == stmt["p"])


def _sql_where(stmt: dict) -> str:
    cond = f"id % {stmt['m']} = {stmt['r']}"
    return cond + (f" AND p = '{stmt['p']}'" if stmt["p"] is not None else "")


def next_statement(model: Model, rng: random.Random) -> dict:
    """The next statement of the seeded sequence; ids are never reused, even by statements that fail."""
    kind = rng.choices(("insert", "delete", "merge", "update"), weights=(30, 25, 25, 20))[0]
    if kind == "insert":
        n = rng.randint(8, 24)
        rows = [(model.next_id + k, partition_of(model.next_id + k), rng.randrange(1000)) for k in range(n)]
        model.next_id += n
        return {"op": "insert", "rows": rows}
    if kind in ("delete", "update"):
        # an odd modulus: with a partition (id % 4) in the predicate too, some ids still match
        return {"op": kind, "m": rng.choice((5, 7, 9, 11, 13)), "r": rng.randrange(5),
                "p": rng.choice((None, *PARTITIONS))}
    existing = rng.sample(sorted(model.rows), min(6, len(model.rows)))
    rows = [(i, model.rows[i][0], 2000 + rng.randrange(1000)) for i in sorted(existing)]
    rows += [(model.next_id + k, partition_of(model.next_id + k), 2000 + rng.randrange(1000)) for k in range(3)]
    model.next_id += 3
    return {"op": "merge", "rows": rows}


def apply(model: Model, stmt: dict) -> None:
    """The statement's effect on the model's rows."""
    if stmt["op"] in ("insert", "merge"):
        for i, p, v in stmt["rows"]:
            model.rows[i] = (p, v)
    elif stmt["op"] == "delete":
        model.rows = {i: pv for i, pv in model.rows.items() if not _where(stmt, i, pv[0])}
    elif stmt["op"] == "update":
        model.rows = {i: (p, v + 1000 if _where(stmt, i, p) else v) for i, (p, v) in model.rows.items()}
    else:
        raise ValueError(stmt["op"])


def sql_of(stmt: dict, table: str) -> str:
    if stmt["op"] == "insert":
        values = ", ".join(f"({i}, '{p}', {v})" for i, p, v in stmt["rows"])
        return f"INSERT INTO {table} VALUES {values}"
    if stmt["op"] == "delete":
        return f"DELETE FROM {table} WHERE {_sql_where(stmt)}"
    if stmt["op"] == "update":
        return f"UPDATE {table} SET v = v + 1000 WHERE {_sql_where(stmt)}"
    return (f"MERGE INTO {table} t USING merge_source s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET v = s.v "
            "WHEN NOT MATCHED THEN INSERT (id, p, v) VALUES (s.id, s.p, s.v)")


# -- the log ----------------------------------------------------------------------------------------
def commit_versions(path: str) -> list[int]:
    return sorted(int(m.group(1)) for n in os.listdir(os.path.join(path, "_delta_log")) if (m := _COMMIT.match(n)))


def latest_version(path: str) -> int:
    versions = commit_versions(path)
    return versions[-1] if versions else -1


def commits_tagged(path: str, after: int, tag: str) -> list[int]:
    """The versions after ``after`` whose commitInfo carries ``userMetadata == tag``."""
    found = []
    for v in commit_versions(path):
        if v <= after:
            continue
        with open(os.path.join(path, "_delta_log", f"{v:020d}.json"), encoding="utf-8") as f:
            for line in f:
                if '"commitInfo"' in line:
                    info = json.loads(line).get("commitInfo")
                    if info is not None and info.get("userMetadata") == tag:
                        found.append(v)
                    break
    return found


# -- running statements ------------------------------------------------------------------------------
def exception_class(exc: BaseException) -> str:
    """The simple class name of the JVM exception behind a PySpark error (or the Python one's)."""
    for attr in ("_origin", "java_exception"):
        origin = getattr(exc, attr, None)
        if origin is not None:
            try:
                return str(origin.getClass().getSimpleName())
            except Exception:
                pass
    return type(exc).__name__


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


class Recorder:
    def __init__(self, outcomes: str):
        self.file = open(outcomes, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.file.flush()


def attempt(spark, path: str, sql: str, tag: str, rec: Recorder, base: dict) -> tuple[bool, str | None, Any]:
    """Run one statement stamped with ``tag``; record it. Returns (committed, error class, result rows)."""
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", tag)
    before = latest_version(path)
    started = time.time()
    error: BaseException | None = None
    result = None
    try:
        result = spark.sql(sql).collect()
    except Exception as exc:  # recorded below: conflicts are expected, the test judges the rest
        error = exc
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    duration = round(time.time() - started, 3)
    versions = commits_tagged(path, before, tag)
    record = {"kind": "stmt", **base, "tag": tag, "ok": error is None, "versions": versions,
              "version": versions[-1] if versions else None, "duration_s": duration, "started": started}
    cls = None
    if error is not None:
        cls = exception_class(error)
        record.update(error_class=cls, error=first_line(error), conflict=cls in CONFLICTS)
    rec.write(record)
    return bool(versions), cls, result


def read_rows(spark, path: str, row_tracking: bool) -> list:
    df = spark.read.format("delta").load(path)
    cols = ["id", "p", "v"] + (["_metadata.row_id"] if row_tracking else [])
    return df.select(*cols).collect()


def check(spark, path: str, model: Model, row_tracking: bool, row_ids: dict[int, int], rec: Recorder,
          after: int) -> None:
    """Compare the latest version, read by delta-spark, with the model (and stable row ids)."""
    started = time.time()
    try:
        rows = read_rows(spark, path, row_tracking)
    except Exception as exc:
        rec.write({"kind": "check", "after": after, "ok": False, "error_class": exception_class(exc),
                   "error": first_line(exc)})
        return
    got = Counter((r[0], r[1], r[2]) for r in rows)
    want = model.counter()
    record: dict[str, Any] = {"kind": "check", "after": after, "rows": sum(got.values()),
                              "duration_s": round(time.time() - started, 3)}
    problems = []
    if got != want:
        problems.append({"missing": sorted((want - got).elements())[:10],
                         "unexpected": sorted((got - want).elements())[:10]})
    if row_tracking:
        ids = [r[3] for r in rows]
        if None in ids or len(set(ids)) != len(ids):
            problems.append({"row_ids": f"{len(ids) - len(set(ids))} duplicated, {ids.count(None)} null"})
        moved = [(r[0], row_ids[r[0]], r[3]) for r in rows if r[0] in row_ids and row_ids[r[0]] != r[3]]
        if moved:
            problems.append({"row_id_changed": moved[:10], "count": len(moved)})
        for r in rows:
            row_ids.setdefault(r[0], r[3])
    record.update(ok=not problems, problems=problems)
    rec.write(record)


def run_dml(spark, args: argparse.Namespace, rec: Recorder) -> None:
    path = args.table
    table = f"delta.`{path}`"
    rng = random.Random(f"statements-{args.seed}")
    model = Model(initial_rows(args.seed))
    row_ids: dict[int, int] = {}
    run_id = uuid.uuid4().hex[:8]
    deadline = time.time() + args.deadline_s
    check(spark, path, model, args.row_tracking, row_ids, rec, after=-1)
    for n in range(args.statements):
        if n >= args.min_statements and time.time() > deadline:
            break
        stmt = next_statement(model, rng)
        sql = sql_of(stmt, table)
        if stmt["op"] == "merge":
            source = spark.createDataFrame(stmt["rows"], "id BIGINT, p STRING, v BIGINT")
            source.createOrReplaceTempView("merge_source")
        shown = sql if len(sql) < 160 else sql[:157] + "..."
        for n_try in (1, 2):
            committed, cls, _ = attempt(spark, path, sql, f"{run_id}-{n}-{n_try}", rec,
                                        {"mode": "dml", "n": n, "op": stmt["op"], "attempt": n_try,
                                         "statement": shown})
            if committed or cls is None:
                # A statement that matched no row succeeds without a commit: the model must not
                # change either, which the next check proves.
                apply(model, stmt)
                break
            if cls not in CONFLICTS:
                break  # not a conflict: recorded; the test fails on it
        if args.check_every and (n + 1) % args.check_every == 0:
            check(spark, path, model, args.row_tracking, row_ids, rec, after=n)
    check(spark, path, model, args.row_tracking, row_ids, rec, after=args.statements)
    rec.write({"kind": "done", "mode": "dml", "model": model.sorted_rows(), "row_ids": len(row_ids)})


def run_optimize(spark, args: argparse.Namespace, rec: Recorder) -> None:
    path = args.table
    run_id = uuid.uuid4().hex[:8]
    deadline = time.time() + args.deadline_s
    n = 0
    while time.time() < deadline and not (args.stop_file and os.path.exists(args.stop_file)):
        sql = f"OPTIMIZE delta.`{path}`" + (" ZORDER BY (v)" if n % 2 else "")
        committed, cls, result = attempt(spark, path, sql, f"{run_id}-opt-{n}", rec,
                                         {"mode": "optimize", "n": n, "op": "optimize", "attempt": 1,
                                          "statement": sql})
        if cls is not None and cls not in CONFLICTS:
            break  # recorded; the test fails on it
        n += 1
        time.sleep(args.pause_s)
    rec.write({"kind": "done", "mode": "optimize", "runs": n})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("dml", "optimize"))
    parser.add_argument("table")
    parser.add_argument("outcomes", help="JSON lines are appended here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--statements", type=int, default=60)
    parser.add_argument("--deadline-s", type=float, default=150.0,
                        help="start no statement after this many seconds (once --min-statements ran)")
    parser.add_argument("--min-statements", type=int, default=0)
    parser.add_argument("--check-every", type=int, default=5)
    parser.add_argument("--row-tracking", action="store_true")
    parser.add_argument("--stop-file", help="optimize mode: stop when this file exists")
    parser.add_argument("--pause-s", type=float, default=0.5)
    parser.add_argument("--wait-for", help="start the first statement once this file exists")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import delta.exceptions  # noqa: F401  (delta-spark's conflict exceptions as Python classes)

    from tests.delta_spark_session import start_delta_spark

    spark = start_delta_spark(app_name=f"delta-spark-writer-{args.mode}", **SESSION_CONF)
    rec = Recorder(args.outcomes)
    waited = time.time()
    while args.wait_for and not os.path.exists(args.wait_for):
        if time.time() - waited > 300:
            raise TimeoutError(f"{args.wait_for} did not appear")
        time.sleep(0.1)
    rec.write({"kind": "started", "mode": args.mode, "at": time.time()})
    try:
        (run_dml if args.mode == "dml" else run_optimize)(spark, args, rec)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
