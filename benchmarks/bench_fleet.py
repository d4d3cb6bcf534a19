"""Many small tables: the worker's decision for 50 tables, and one fleet application against 10 submissions.

50 small tables are generated with delta-rs (2 partitions, 6 appends of one file per partition);
40 are then compacted by delta-rs, so 10 need OPTIMIZE. The jobs per table are OPTIMIZE and
lite VACUUM (default retention: nothing expired), so exactly those 10 tables have work.

- decision: ``decide()`` over the 50 tables on this process (each job's cheap check, no Spark),
  with 8 threads and with 1;
- end to end: ``MaintainTablesOperator`` over the 50 tables (decision + one spark-submit for the
  10) against 10 ``OptimizeOperator`` tasks, one per table with work (each its check and its own
  spark-submit), on fresh copies of the tables each round; rows are checked unchanged.

Usage: ``python benchmarks/bench_fleet.py [--repeat 3] [--decision-repeat 5] [--out FILE]``
(``--out`` default ``benchmarks/out/fleet.md``). Needs a local Spark (``spark_default`` is set
to ``local[2]`` when not configured).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TABLES = 50
WITH_WORK = 10


def make_tables(folder: Path) -> list[Path]:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    paths = []
    for n in range(TABLES):
        path = folder / f"t{n:02d}"
        for i in range(6):
            ids = list(range(i * 20, (i + 1) * 20))
            write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()),
                                                  "part": [f"p{j % 2}" for j in range(20)],
                                                  "value": [float(x) for x in ids]}),
                            mode="append", partition_by=["part"])
        if n >= WITH_WORK:
            DeltaTable(str(path)).optimize.compact()
        paths.append(path)
    return paths


def rows(path: Path) -> list:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    out = []
    for uri in DeltaTable(str(path)).file_uris():
        out += pq.read_table(uri.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--decision-repeat", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "fleet.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="bench-fleet-airflow-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_delta_maint.app.fleet import FleetJob, FleetSpec, FleetTable, decide
    from airflow_delta_maint.operators.fleet import MaintainTablesOperator
    from airflow_delta_maint.operators.maintenance import OptimizeOperator

    class TI:
        def xcom_push(self, key, value):
            pass

    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    lines = []
    try:
        t0 = time.perf_counter()
        master = make_tables(work / "master")
        print(f"generated {TABLES} tables in {time.perf_counter() - t0:.1f} s", flush=True)
        spec = FleetSpec([FleetTable(str(p), [FleetJob("optimize"), FleetJob("vacuum", ["--mode", "lite"])])
                          for p in master])
        decisions: dict[int, list[float]] = {8: [], 1: []}
        for _ in range(args.decision_repeat):
            for threads in decisions:
                t0 = time.perf_counter()
                decision = decide(spec, threads=threads)
                decisions[threads].append(time.perf_counter() - t0)
                assert len(decision.tables_with_work) == WITH_WORK, decision.tables_with_work
        for threads, times in decisions.items():
            line = (f"decision for {TABLES} tables, {threads} thread(s): median {statistics.median(times):.2f} s "
                    f"(min {min(times):.2f}, max {max(times):.2f}, n={len(times)})")
            print(line, flush=True)
            lines.append(line)

        fleet_times, separate_times = [], []
        for r in range(args.repeat):
            for style in ("fleet", "separate"):
                copy = work / f"{style}{r}"
                shutil.copytree(work / "master", copy)
                paths = sorted(copy.iterdir())
                before = {p: rows(p) for p in paths[:WITH_WORK]}
                t0 = time.perf_counter()
                if style == "fleet":
                    results = MaintainTablesOperator(task_id="fleet", tables=[str(p) for p in paths],
                                                     jobs={"optimize": {}, "vacuum": {"mode": "lite"}}
                                                     ).execute(context={"ti": TI()})
                    assert sum(e["status"] == "committed" for e in results) == WITH_WORK
                else:
                    for p in paths[:WITH_WORK]:
                        m = OptimizeOperator(task_id="o", table_uri=str(p)).execute(context={})
                        assert m["status"] == "committed"
                elapsed = time.perf_counter() - t0
                (fleet_times if style == "fleet" else separate_times).append(elapsed)
                assert {p: rows(p) for p in paths[:WITH_WORK]} == before
                print(f"round {r + 1} {style}: {elapsed:.1f} s", flush=True)
                shutil.rmtree(copy)
        f, s = statistics.median(fleet_times), statistics.median(separate_times)
        for line in (f"one fleet task over {TABLES} tables ({WITH_WORK} with work): median {f:.1f} s "
                     f"({', '.join(f'{t:.1f}' for t in fleet_times)})",
                     f"{WITH_WORK} OptimizeOperator tasks, one submission each: median {s:.1f} s "
                     f"({', '.join(f'{t:.1f}' for t in separate_times)})",
                     f"fleet speed-up: {s / f:.1f}x"):
            print(line, flush=True)
            lines.append(line)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("## Many small tables\n\n" + "\n".join(f"- {x}" for x in lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
