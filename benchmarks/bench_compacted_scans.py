"""Scans of what OPTIMIZE left: DuckDB over our compacted table against DuckDB over delta-rs's (a benchmark, not a
test), on the tables of ``bench_optimize_copy`` in one run.

Each source table (``medium``: files of one large row group each; ``mixed``: half of those, half tiny files) is
compacted once by delta-rs ``optimize.compact`` (snappy, the inputs' codec) and once by ours (the whole task on
threads, ``copy_row_groups`` ``auto``: the large row groups copied, the tiny files re-encoded into full-size row
groups), both toward 1 GiB. DuckDB's delta extension (delta-kernel-rs, from the ``duckdb-ext-delta`` wheel) then
runs, alternating between the two results, a full scan (an aggregate of every column) and a selective filter (a
range of ``id`` that one input file holds: row groups whose bounds miss it are skipped), best of ``--repeat``.
Both answers must agree. Prints a table and writes it to ``--out``.

Usage: python -m benchmarks.bench_compacted_scans [--medium 24] [--mib 40] [--tiny-mib 1] [--repeat 7]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_optimize_copy import OUT, build, check, delta_rs, fresh, input_facts, ours_local  # noqa: E402

FULL = ("SELECT count(*), sum(id), sum(x), count(DISTINCT s), min(ts), max(ts), sum(k) "
        "FROM delta_scan('{table}')")
SELECTIVE = "SELECT count(*), sum(x), max(s) FROM delta_scan('{table}') WHERE id BETWEEN {lo} AND {hi}"


def delta_extension() -> Path:
    """The delta extension's library, as the ``duckdb-ext-delta`` wheel installs it for this DuckDB."""
    import duckdb

    folder = Path(sysconfig.get_paths()["purelib"]) / "duckdb_ext" / "extensions" / f"v{duckdb.__version__}"
    (library,) = folder.glob("*/delta.duckdb_extension")
    return library


def row_groups(table: Path) -> tuple[int, int]:
    """(files, row groups) of the table's live files."""
    import pyarrow.parquet as pq

    from airflow_delta_maint.delta.log.snapshot import Snapshot

    adds = Snapshot.load(str(table)).add_actions()
    return len(adds), sum(pq.ParquetFile(table / a["path"]).metadata.num_row_groups for a in adds)


def timed(con: Any, sql: str) -> tuple[float, tuple]:
    started = time.perf_counter()
    answer = con.execute(sql).fetchone()
    return time.perf_counter() - started, answer


def same_answer(a: tuple, b: tuple) -> bool:
    """The same answer; sums of doubles only up to the order they were added in."""
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9) if isinstance(x, float) else x == y
                                    for x, y in zip(a, b))


def compare(tables: dict[str, Path], selective: tuple[int, int], repeat: int) -> dict[str, dict[str, float]]:
    """Best seconds of each query on each side, alternating; the answers of both sides must agree."""
    import duckdb

    best: dict[str, dict[str, float]] = {q: {} for q in ("full", "selective")}
    with duckdb.connect() as con:
        con.execute(f"LOAD '{delta_extension()}'")
        for _ in range(repeat):
            for query, sql in (("full", FULL), ("selective", SELECTIVE)):
                answers = []
                for side, table in tables.items():
                    seconds, answer = timed(con, sql.format(table=table, lo=selective[0], hi=selective[1]))
                    answers.append(answer)
                    best[query][side] = min(best[query].get(side, float("inf")), seconds)
                assert same_answer(*answers), (query, answers)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--medium", type=int, default=24)
    parser.add_argument("--mib", type=float, default=40)
    parser.add_argument("--tiny-mib", type=float, default=1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--workdir", default=str(OUT / "optimize_copy"))
    parser.add_argument("--out", default=str(OUT / "compacted_scans.md"))
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    from benchmarks.bench_guard import machine_lock
    from benchmarks.bench_row_group_copy import BYTES_PER_ROW

    rows_per_file = max(1, int(args.mib * 2**20 / BYTES_PER_ROW))
    selective = (5 * rows_per_file + 1000, 5 * rows_per_file + 51_000)  # inside the fifth medium file's ids
    sources = build(work, args.medium, args.mib, args.tiny_mib)
    lines = [f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} cores)", "",
             "| table | compacted by | files / row groups | full scan s | ratio | selective s | ratio |",
             "|---|---|---|---:|---:|---:|---:|"]
    with machine_lock():
        for name, src in sources.items():
            rows = input_facts(src)[2]
            done = {"delta-rs": fresh(src, work / f"scan-rs-{name}"), "ours": fresh(src, work / f"scan-ours-{name}")}
            delta_rs(done["delta-rs"], "snappy")
            ours_local(done["ours"], "auto")
            for table in done.values():
                check(table, rows)
            best = compare(done, selective, args.repeat)
            for side, table in done.items():
                files, groups = row_groups(table)
                full, sel = best["full"][side], best["selective"][side]
                line = (f"| {name} | {side} | {files} / {groups} | {full:.3f} | {full / best['full']['delta-rs']:.2f} "
                        f"| {sel:.3f} | {sel / best['selective']['delta-rs']:.2f} |")
                print(line, flush=True)
                lines.append(line)
    lines.append(f"\nload average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
