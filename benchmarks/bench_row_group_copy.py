"""Row-group copy benchmark (not a test): many one-row-group files made into one file by copying their
row groups byte for byte, against re-encoding the same rows.

``--files`` parquet files (pyarrow, snappy, one row group of about ``--mib`` MiB each: an id, a double,
a low-cardinality string, a timestamp, an int32) are made into one file three ways, each timed in wall
and CPU seconds (CPU of every thread of this process):

1. copy: ``RowGroupCopyWriter`` (``delta/parquet``) alone, and followed by the file's Delta statistics
   from the inputs' footers (``copied_file_stats_reading``: the double column, whose footer bounds pyarrow leaves NaN
   out of, is read back from the output);
2. our rewrite: what OPTIMIZE does today (``app/rewrite/data_files.py``'s ``write_file``: every file
   read into Arrow, written with 128 MiB of Arrow data per row group, statistics collected);
3. pyarrow: a plain read and write of the same rows (``pq.read_table`` then ``ParquetWriter``), the
   CPU baseline of any re-encoding rewrite (delta-rs' included).

The inputs are read from the page cache (just written). Prints a table and writes it to ``--out``.

Usage: python -m benchmarks.bench_row_group_copy [--files 24] [--mib 40] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

OUT = Path(__file__).resolve().parent / "out"  # make bench's outputs (not tracked)
BYTES_PER_ROW = 27  # about, compressed, for the columns below


def make_inputs(work: Path, files: int, mib: int) -> list[str]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = mib * 2**20 // BYTES_PER_ROW
    words = np.array([f"category-{i:04d}" for i in range(2000)])
    paths = []
    for i in range(files):
        rng = np.random.default_rng(i)
        table = pa.table({
            "id": pa.array(np.arange(i * rows, (i + 1) * rows, dtype=np.int64)),
            "x": pa.array(rng.random(rows)),
            "s": pa.array(words[rng.integers(0, len(words), rows)]),
            "ts": pa.array((1_700_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]")),
            "k": pa.array(rng.integers(0, 1000, rows).astype(np.int32)),
        })
        path = work / f"in-{i:03d}.parquet"
        pq.write_table(table, path, compression="snappy", row_group_size=rows)
        paths.append(str(path))
    return paths


def metadata_action(paths: list[str]) -> dict:
    import pyarrow.parquet as pq

    from airflow_delta_maint.delta.protocol.schema import from_arrow_schema

    schema = from_arrow_schema(pq.read_schema(paths[0])).to_json()
    return {"id": "bench", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
            "partitionColumns": [], "configuration": {}}


def copy_only(paths: list[str], work: Path) -> dict:
    from airflow_delta_maint.delta.parquet.footer import read_footer
    from airflow_delta_maint.delta.parquet.row_group_copy import RowGroupCopyWriter

    out = work / "copied.parquet"
    with open(out, "wb") as sink:
        writer = RowGroupCopyWriter(sink, read_footer(paths[0]), "snappy")
        for path in paths:
            writer.add_file(path)
        result = writer.close()
    return {"result": result, "path": str(out)}


def by_copy(paths: list[str], work: Path) -> dict:
    from airflow_delta_maint.delta.protocol.actions import Metadata
    from airflow_delta_maint.delta.protocol.copied_stats import copied_file_stats_reading

    done = copy_only(paths, work)
    return copied_file_stats_reading(done["result"], Metadata.from_action(metadata_action(paths)), done["path"])


def by_our_rewrite(paths: list[str], work: Path) -> dict:
    import pyarrow.parquet as pq

    from airflow_delta_maint.app.rewrite.data_files import RewriteSpec, write_file
    from airflow_delta_maint.delta.storage.store import Storage

    (work / "rewrite").mkdir(exist_ok=True)
    spec = RewriteSpec(storage=Storage(str(work / "rewrite")), metadata_action=metadata_action(paths))
    adds = write_file(spec, "", {}, (pq.read_table(p) for p in paths))
    return json.loads(adds[0]["stats"])


def by_pyarrow(paths: list[str], work: Path) -> dict:
    import pyarrow.parquet as pq

    out = work / "pyarrow.parquet"
    with pq.ParquetWriter(out, pq.read_schema(paths[0]), compression="snappy") as writer:
        for path in paths:
            writer.write_table(pq.read_table(path))
    return {"numRecords": pq.ParquetFile(out).metadata.num_rows}


def timed(fn: Callable[[list[str], Path], dict], paths: list[str], work: Path) -> tuple[float, float, dict]:
    wall, cpu = time.perf_counter(), time.process_time()
    stats = fn(paths, work)
    return time.perf_counter() - wall, time.process_time() - cpu, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--mib", type=int, default=40)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--out", default=str(OUT / "row_group_copy.md"))
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-row-group-copy-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        paths = make_inputs(work, args.files, args.mib)
        size = sum(os.path.getsize(p) for p in paths)
        print(f"{args.files} files, {size / 2**20:.0f} MiB in all, written in {time.perf_counter() - started:.1f}s",
              flush=True)
        results = {}
        for name, fn in (("copy only", copy_only), ("copy (+ stats)", by_copy), ("our rewrite (+ stats)", by_our_rewrite),
                         ("pyarrow read + write", by_pyarrow)):
            results[name] = timed(fn, paths, work)
            print(f"{name}: {results[name][0]:.2f}s wall, {results[name][1]:.2f}s CPU", flush=True)
        copy_stats, rewrite_stats = results["copy (+ stats)"][2], results["our rewrite (+ stats)"][2]
        assert copy_stats == rewrite_stats, "the copy's statistics differ from the rewrite's"
        wall0, cpu0 = results["copy only"][:2]
        lines = [f"Row-group copy: {args.files} files of one row group, {size / 2**20:.0f} MiB (snappy), "
                 "into one file", "", "| way | wall s | CPU s | wall / copy | CPU / copy |", "|---|---|---|---|---|"]
        for name, (wall, cpu, _) in results.items():
            lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {wall / wall0:.1f} | {cpu / cpu0:.1f} |")
        text = "\n".join(lines) + "\n"
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
