"""Tables and readers for the tests of OPTIMIZE's row-group copy: delta-rs tables of large files (one
row group above the copy threshold once ``row_group_bytes`` is lowered) and tiny ones, OPTIMIZE run
with options no command-line flag needs to spell, rows read by delta-rs' file list and pyarrow."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app.context import JobContext
from airflow_delta_maint.app.jobs import execute_job, optimize
from airflow_delta_maint.delta.log.snapshot import Snapshot

#: the rewrite's row groups in these tests: 128 KiB of Arrow data, so the copy threshold is 32 KiB
ROW_GROUP_BYTES = 128 << 10
BIG_ROWS = 6_000
SMALL_ROWS = 150


def batch(first: int, n: int, seed: int, extra: bool = False) -> pa.Table:
    """``n`` rows of many types (NaN, nulls, a struct, a list), ids from ``first``. The list's item is
    named ``element`` as delta-rs names it in the files after the first (in the first it keeps the
    name of the data it was given)."""
    rng = np.random.default_rng(seed)
    ids = np.arange(first, first + n, dtype=np.int64)
    v = rng.random(n)
    v[ids % 97 == 0] = np.nan
    cols: dict[str, Any] = {
        "id": pa.array(ids),
        "v": pa.array(v, mask=ids % 89 == 0),
        "s": pa.array([None if i % 13 == 0 else f"text-é-{i % 1009}" for i in ids.tolist()]),
        "ts": pa.array((1_700_000_000_000_000 + ids * 1_234_567).tolist(), pa.timestamp("us", tz="UTC")),
        "n": pa.array([{"a": int(i % 7), "b": str(i % 5)} for i in ids.tolist()],
                      pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "arr": pa.array([None if i % 3 == 0 else [int(i % 11), None] for i in ids.tolist()], pa.list_(pa.field("element", pa.int32()))),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(i % 30)) for i in ids.tolist()]),
    }
    if extra:
        cols["added"] = pa.array((ids * 3).tolist(), pa.int64())
    return pa.table(cols)


def make_table(path: Path, big: int = 3, small: int = 4, partitions: tuple[str, ...] = (),
               storage_options: Mapping[str, str] | None = None, uri: str | None = None) -> None:
    """``big`` files of BIG_ROWS rows (one row group each) and ``small`` files of SMALL_ROWS rows, in
    each of ``partitions`` (unpartitioned when none), interleaved, one append each."""
    sizes: list[int] = []
    for k in range(max(big, small)):
        sizes += ([BIG_ROWS] if k < big else []) + ([SMALL_ROWS] if k < small else [])
    first = 0
    for k, n in enumerate(sizes):
        for p in partitions or ("",):
            data = batch(first, n, seed=k)
            first += n
            if partitions:
                data = data.append_column("p", pa.array([p] * n))
            write_deltalake(uri or str(path), data, mode="append", partition_by=["p"] if partitions else None,
                            storage_options=dict(storage_options or {}) or None)


def run(path: Path | str, storage_options: Mapping[str, str] | None = None, *, local: bool = True,
        **params: Any) -> tuple[int, dict[str, Any]]:
    """OPTIMIZE of ``path`` in this process (threads under ``local``, else the test's SparkSession)."""
    params.setdefault("lease_seconds", 0)
    params.setdefault("row_group_bytes", ROW_GROUP_BYTES)
    ctx = JobContext(table=str(path), storage_options=dict(storage_options or {}), spark_allowed=not local)
    return execute_job("optimize", optimize, argparse.Namespace(**params), ctx)


def copy_of(path: Path, name: str) -> Path:
    out = path.parent / name
    shutil.copytree(path, out)
    return out


def _canon(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _canon(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_canon(x) for x in v)
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def rows(uri: str) -> Counter:
    """The table's rows as a multiset: delta-rs' file list read with pyarrow, partition values added."""
    table = DeltaTable(uri)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    out: Counter = Counter()
    columns = [f.name for f in table.schema().fields]
    for uri_, action in zip(table.file_uris(), actions):
        parts = {k[len("partition."):]: v for k, v in action.items() if k.startswith("partition.")}
        for row in pq.read_table(uri_).to_pylist():
            row = {c: row.get(c) for c in columns} | parts  # columns a file predates are null
            out[_canon(row)] += 1
    return out


def stats_by_partition(uri: str, storage_options: Mapping[str, str] | None = None) -> dict[str, list[dict]]:
    """Each live file's statistics, by partition (sorted)."""
    out: dict[str, list[dict]] = {}
    for a in Snapshot.load(uri, storage_options=dict(storage_options or {}) or None).add_actions():
        key = json.dumps(a.get("partitionValues") or {}, sort_keys=True)
        out.setdefault(key, []).append(json.loads(a.get("stats") or "{}"))
    return {k: sorted(v, key=lambda s: json.dumps(s, sort_keys=True)) for k, v in sorted(out.items())}


def live_row_groups(uri: str) -> list[int]:
    """The row counts of the live files' row groups (local tables)."""
    snap = Snapshot.load(uri)
    return [rg.num_rows for a in snap.add_actions()
            for md in [pq.ParquetFile(snap.storage.local_path(snap.storage.key_for_path(a["path"]) or "")).metadata]
            for rg in (md.row_group(i) for i in range(md.num_row_groups))]
