"""The end-to-end demo behind ``make demo``.

1. Writes a Delta table of many small files with delta-rs (4 partitions x 50 small appends).
2. Sets up Airflow in ``.airflow/`` (SQLite, ``airflow db migrate``), with the DAGs folder
   ``dags_example/`` and the ``spark_default`` connection pointing at ``local[*]``.
3. Shows the table's health (``delta-maint inspect``), runs the nightly maintenance DAG with
   ``airflow dags test`` (real spark-submit for every job), prints each task's metrics (its XCom
   value) as JSON, shows the table's health again and checks that no row changed.
4. Every run is recorded in the maintenance history ``.airflow/demo/history``; the demo ends by
   writing the report ``.airflow/demo/report.html`` (``delta-maint report``) and printing its path.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AIRFLOW_HOME = REPO / ".airflow"
TABLE = AIRFLOW_HOME / "demo" / "events"
HISTORY = AIRFLOW_HOME / "demo" / "history"
REPORT = AIRFLOW_HOME / "demo" / "report.html"
DAG_ID = "delta_maintenance_nightly"
BIN = Path(sys.executable).parent


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def make_table(path: Path, partitions: int = 4, appends: int = 50) -> None:
    """A partitioned table of ``partitions x appends`` small files, one append per commit."""
    import pyarrow as pa
    from deltalake import write_deltalake

    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    for i in range(appends):
        for p in range(partitions):
            rows = 100
            table = pa.table({
                "id": pa.array(range(n, n + rows), pa.int64()),
                "region": pa.array([f"r{p}"] * rows),
                "value": pa.array([float(i * rows + j) for j in range(rows)]),
                "note": pa.array([f"event {n + j}" for j in range(rows)]),
            })
            write_deltalake(str(path), table, mode="append", partition_by=["region"])
            n += rows


def row_fingerprint(path: Path) -> tuple[int, int]:
    """(rows, sum of ids) of the table's current version, read through delta-rs' file list."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    rows = total = 0
    for uri in DeltaTable(str(path)).file_uris():
        ids = pq.read_table(uri.removeprefix("file://"), columns=["id"]).column("id")
        rows += len(ids)
        total += sum(ids.to_pylist())
    return rows, total


def airflow_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags_example"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        "AIRFLOW_VAR_DELTA_MAINT_TABLES": json.dumps([str(TABLE)]),
        "AIRFLOW_VAR_DELTA_MAINT_TABLE": str(TABLE),
        "AIRFLOW__DELTA_MAINT__HISTORY_URI": str(HISTORY),
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    })
    return env


def run(cmd: list[str], env: dict[str, str], quiet: bool = False) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, env=env, cwd=REPO, text=True, capture_output=quiet)
    if result.returncode:
        if quiet:
            sys.stdout.write(result.stdout[-5000:])
            sys.stderr.write(result.stderr[-5000:])
        raise SystemExit(f"command failed ({result.returncode}): {' '.join(cmd)}")
    return result


def inspect(env: dict[str, str]) -> None:
    run([str(BIN / "delta-maint"), "inspect", str(TABLE), "--history-uri", str(HISTORY)], env)


def task_results(db: Path, dag_id: str) -> tuple[str, list[dict]]:
    """The latest run of ``dag_id``: its state and each task's state and XCom return value."""
    with sqlite3.connect(db) as conn:
        run_id, state = conn.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
        tis = conn.execute(
            "SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ? "
            "ORDER BY map_index, start_date", (dag_id, run_id)).fetchall()
        xcoms = {
            (task_id, map_index): value
            for task_id, map_index, value in conn.execute(
                "SELECT task_id, map_index, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
                (dag_id, run_id))
        }
    out = []
    for task_id, map_index, ti_state in tis:
        value = xcoms.get((task_id, map_index))
        while isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError:
                break
        out.append({"task_id": task_id, "map_index": map_index, "state": ti_state, "return_value": value})
    return state, out


def main() -> int:
    t0 = time.perf_counter()
    banner(f"creating a demo table of small files: {TABLE}")
    make_table(TABLE)
    shutil.rmtree(HISTORY, ignore_errors=True)  # a new table: a new history
    before = row_fingerprint(TABLE)
    print(f"rows: {before[0]}")

    env = airflow_env()
    banner(f"setting up Airflow in {AIRFLOW_HOME} (SQLite)")
    AIRFLOW_HOME.mkdir(exist_ok=True)
    run([str(BIN / "airflow"), "db", "migrate"], env, quiet=True)
    print("airflow db migrate: done")

    banner("table health before")
    inspect(env)

    banner(f"airflow dags test {DAG_ID} (spark_default -> local[*])")
    conf = {"vacuum_retention_hours": 0, "vacuum_ignore_retention_check": True}
    result = subprocess.run([str(BIN / "airflow"), "dags", "test", DAG_ID, "-c", json.dumps(conf)],
                            env=env, cwd=REPO, text=True, capture_output=True)
    log_path = AIRFLOW_HOME / "demo-dags-test.log"
    log_path.write_text(result.stdout + result.stderr)
    state, tasks = task_results(AIRFLOW_HOME / "airflow.db", DAG_ID)
    print(f"DAG run state: {state} (full log: {log_path})")

    banner("metrics returned by each task (XCom return_value)")
    print(json.dumps(tasks, indent=2, sort_keys=True, default=str))

    banner("table health after")
    inspect(env)

    after = row_fingerprint(TABLE)
    banner("rows")
    print(f"before {before[0]} rows (id sum {before[1]}), after {after[0]} rows (id sum {after[1]}): "
          + ("unchanged" if before == after else "CHANGED"))
    banner("maintenance report")
    run([str(BIN / "delta-maint"), "report", "--history", str(HISTORY), "--out", str(REPORT)], env)
    print(f"\ndemo took {time.perf_counter() - t0:.0f} s")
    failed = [t for t in tasks if t["state"] != "success"]
    if result.returncode or state != "success" or failed or before != after:
        print(result.stdout[-4000:], result.stderr[-4000:], sep="\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
