"""Per-file statistics (``add.stats``) as delta-spark writes them, from parquet footers or from data.

Which columns: the first ``delta.dataSkippingNumIndexedCols`` (default 32, -1 for all) leaf
columns in schema order, partition columns left out, or exactly ``delta.dataSkippingStatsColumns``
when set. Arrays, maps and variants count as leaves; structs are descended into.

What: ``numRecords``; ``minValues``/``maxValues`` for numeric, decimal, date, timestamp(_ntz) and
string columns; ``nullCount`` for every chosen leaf. Keys are physical names, nested like the schema.
Strings keep a 32-character prefix (the max gets a U+FFFD tie-breaker so it stays an upper bound);
timestamps are truncated to milliseconds; NaN sorts above every number (Spark's order), so the max
of a column holding NaN is ``"NaN"``.

A footer cannot always prove a value: INT96 timestamps and oversized strings have no min/max,
writers other than parquet-mr leave NaN out of float min/max, and a list or map column's own null
count is not in the footer. Such values come from the data when a table is given, else are left out.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, Any, Callable, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.table_properties import NUM_INDEXED_COLS, STATS_COLUMNS
from airflow_delta_maint.delta.protocol.schema import (ArrayType, Column, MapType, PrimitiveType, format_column_name, leaf_columns,
                                                       split_column_list)

NUM_INDEXED_COLS_KEY = NUM_INDEXED_COLS
STATS_COLUMNS_KEY = STATS_COLUMNS
DEFAULT_NUM_INDEXED_COLS = 32
STRING_PREFIX_LENGTH = 32
TIE_BREAKER = "\ufffd"

_MIN_MAX_TYPES = frozenset({"long", "integer", "short", "byte", "float", "double", "date", "timestamp",
                            "timestamp_ntz", "string"})
_EPOCH = dt.datetime(1970, 1, 1)


# -- which columns -------------------------------------------------------------------------------
def _eligible(col: Column) -> bool:
    t = col.type
    return isinstance(t, PrimitiveType) and (t.name in _MIN_MAX_TYPES or t.is_decimal)


def has_min_max(col: Column) -> bool:
    """Whether statistics bound this leaf column with a min and a max (else they count its nulls only)."""
    return _eligible(col)


def stats_columns(metadata: Metadata, required: Sequence[Sequence[str]] = ()) -> list[Column]:
    """The leaf columns whose statistics are collected, in schema order.

    ``required``: logical paths (say, clustering columns) whose leaves are collected whatever
    ``delta.dataSkippingStatsColumns`` / ``delta.dataSkippingNumIndexedCols`` say.
    """
    chosen = _configured_stats_columns(metadata)
    if not required:
        return chosen
    wanted = [tuple(p.lower() for p in path) for path in required]
    have = {c.logical_path for c in chosen}
    extra = {c.logical_path for c in leaf_columns(metadata)
             if c.logical_path not in have and any(tuple(p.lower() for p in c.logical_path)[:len(w)] == w
                                                   for w in wanted)}
    return [c for c in leaf_columns(metadata) if c.logical_path in have or c.logical_path in extra]


def _configured_stats_columns(metadata: Metadata) -> list[Column]:
    properties = metadata.properties
    leaves = leaf_columns(metadata)
    if properties.stats_columns is not None:
        wanted = [tuple(p.lower() for p in path) for path in split_column_list(properties.stats_columns)]
        out = []
        for c in leaves:
            lp = tuple(p.lower() for p in c.logical_path)
            if any(lp[:len(w)] == w for w in wanted):
                out.append(c)
        return out
    n = properties.num_indexed_cols
    return leaves if n < 0 else leaves[:n]


# -- values --------------------------------------------------------------------------------------
@dataclass
class _LeafStats:
    """What is known of one leaf column; None means unknown (min/max also None when all null)."""

    null_count: int | None = None
    min: Any = None
    max: Any = None
    min_max_known: bool = False
    missing: bool = False  # the column is not in the file


def truncate_min_string(value: str, prefix: int = STRING_PREFIX_LENGTH) -> str:
    """A lower bound of ``value``: its first ``prefix`` characters."""
    return value[:prefix]


def truncate_max_string(value: str, prefix: int = STRING_PREFIX_LENGTH) -> str:
    """An upper bound of ``value`` that is about ``prefix`` UTF-16 units long, as delta-spark makes it.

    A longer value keeps its first ``prefix`` UTF-16 units (as the JVM counts), then every following
    character at or above U+FFFD, then U+FFFD. Unlike delta-spark, a surrogate pair is never split
    and supplementary characters count as above U+FFFD, so the result is an upper bound in code
    point order (the order Spark compares strings in); for other strings the result is the same.
    """
    if len(value) <= prefix // 2:
        return value
    units = 0
    for i, ch in enumerate(value):
        if units >= prefix:
            break
        units += 2 if ord(ch) > 0xFFFF else 1
    else:
        return value
    keep = i
    while keep < len(value) and ord(value[keep]) >= 0xFFFD:
        keep += 1
    return value[:keep] + TIE_BREAKER


def _format_timestamp(micros: int, utc: bool) -> str:
    millis = micros // 1000
    secs, ms = divmod(millis, 1000)
    try:
        text = (_EPOCH + dt.timedelta(seconds=secs)).strftime("%Y-%m-%dT%H:%M:%S")
        if len(text.split("-")[0]) < 4:
            raise OverflowError
    except (OverflowError, ValueError):
        text = str(np.datetime64(secs, "s")).replace(" ", "T")
    return f"{text}.{ms:03d}" + ("Z" if utc else "")


def _format_date(days: int) -> str:
    try:
        return (dt.date(1970, 1, 1) + dt.timedelta(days=days)).isoformat()
    except OverflowError:
        return str(np.datetime64(days, "D"))


def _float_json(v: float, single: bool) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return float(str(np.float32(v))) if single else float(v)


def _to_json_value(col: Column, v: Any, is_max: bool) -> Any:
    name = col.type.name  # type: ignore[union-attr]
    if name == "string":
        return truncate_max_string(v) if is_max else truncate_min_string(v)
    if name in ("float", "double"):
        return _float_json(v, name == "float")
    if name == "date":
        return _format_date(v)
    if name in ("timestamp", "timestamp_ntz"):
        return _format_timestamp(v, name == "timestamp")
    return v  # int or Decimal


# -- from the footer ----------------------------------------------------------------------------
def _leaf_paths(t: pa.DataType, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    if pa.types.is_struct(t):
        out: list[tuple[str, ...]] = []
        for i in range(t.num_fields):
            out.extend(_leaf_paths(t.field(i).type, prefix + (t.field(i).name,)))
        return out
    if pa.types.is_map(t):
        return _leaf_paths(t.key_type, prefix + ("key_value", "key")) + \
            _leaf_paths(t.item_type, prefix + ("key_value", "value"))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_paths(t.value_type, prefix + ("list", "element"))
    return [prefix]


def _footer_index(md: pq.FileMetaData) -> tuple[dict[tuple[str, ...], list[int]], list[tuple[str, ...]]]:
    """Map each (physical) path prefix of the file schema to the parquet leaf indices under it."""
    schema = md.schema.to_arrow_schema()
    paths: list[tuple[str, ...]] = []
    for f in schema:
        paths.extend(_leaf_paths(f.type, (f.name,)))
    index: dict[tuple[str, ...], list[int]] = {}
    for i, p in enumerate(paths):
        for k in range(1, len(p) + 1):
            index.setdefault(p[:k], []).append(i)
    return index, paths


def _is_parquet_mr(md: pq.FileMetaData) -> bool:
    return (md.created_by or "").lower().startswith("parquet-mr")


def _decode_raw(raw: Any, physical: str, descr: Any, col: Column) -> Any:
    """A footer min/max (raw physical value) in the unit _to_json_value expects."""
    t = col.type
    assert isinstance(t, PrimitiveType)
    if t.is_decimal:
        _, scale = t.precision_scale
        unscaled = int.from_bytes(raw, "big", signed=True) if isinstance(raw, bytes) else int(raw)
        return Decimal(unscaled).scaleb(-scale)
    if t.name == "string":
        return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    if t.name in ("timestamp", "timestamp_ntz"):
        if physical != "INT64":
            raise _Unknown
        lt = json.loads(descr.logical_type.to_json() or "{}")
        unit = lt.get("timeUnit") or {"TIMESTAMP_MILLIS": "milliseconds",
                                      "TIMESTAMP_MICROS": "microseconds"}.get(str(descr.converted_type))
        if unit == "milliseconds":
            return int(raw) * 1000
        if unit == "microseconds":
            return int(raw)
        if unit == "nanoseconds":
            return int(raw) // 1000
        raise _Unknown
    if t.name == "date":
        if physical != "INT32":
            raise _Unknown
        return int(raw)
    if t.name in ("float", "double"):
        return float(raw)
    if isinstance(raw, bytes):
        raise _Unknown
    return int(raw)


class _Unknown(Exception):
    """A footer value that cannot be trusted as a bound."""


def _footer_leaf(md: pq.FileMetaData, col: Column, leaves: list[int], parquet_mr: bool) -> _LeafStats:
    out = _LeafStats()
    nulls: list[int] = []
    for leaf in leaves:
        total = 0
        for rg in range(md.num_row_groups):
            st = md.row_group(rg).column(leaf).statistics
            if st is None or not st.has_null_count:
                total = -1
                break
            total += st.null_count
        nulls.append(total)
    structural = isinstance(col.type, (ArrayType, MapType)) or (
        isinstance(col.type, PrimitiveType) and col.type.name == "variant")
    if not structural:
        if len(leaves) == 1 and nulls[0] >= 0:
            out.null_count = nulls[0]
    elif nulls and min(nulls) == 0 and all(n >= 0 for n in nulls):
        out.null_count = 0
    elif isinstance(col.type, PrimitiveType) and col.type.name == "variant" and nulls and all(n >= 0 for n in nulls):
        out.null_count = min(nulls)  # value and metadata are required inside the variant group
    if not _eligible(col) or len(leaves) != 1:
        return out
    if col.type.name in ("float", "double") and not parquet_mr:  # type: ignore[union-attr]
        return out  # the writer may have left NaN out of min/max
    descr = md.schema.column(leaves[0])
    lo = hi = None
    try:
        for rg in range(md.num_row_groups):
            rgm = md.row_group(rg)
            st = rgm.column(leaves[0]).statistics
            if st is None:
                raise _Unknown
            if st.has_null_count and st.null_count >= rgm.num_rows:
                continue  # all null: nothing to bound
            if not st.has_min_max:
                raise _Unknown
            a = _decode_raw(st.min_raw, st.physical_type, descr, col)
            b = _decode_raw(st.max_raw, st.physical_type, descr, col)
            if isinstance(a, float) and math.isnan(a):
                raise _Unknown  # a NaN min says nothing about the numbers
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else _spark_max(hi, b)
    except _Unknown:
        return out
    out.min, out.max, out.min_max_known = lo, hi, True
    return out


def _spark_max(a: Any, b: Any) -> Any:
    """Max with NaN above every number."""
    if isinstance(a, float) and math.isnan(a):
        return a
    if isinstance(b, float) and math.isnan(b):
        return b
    return max(a, b)


# -- from the data -------------------------------------------------------------------------------
def _column_data(table: pa.Table, col: Column) -> pa.ChunkedArray | None:
    """The (flattened, parent nulls applied) data of a leaf, by physical then logical path."""
    for path in (col.physical_path, col.logical_path):
        if path[0] not in table.column_names:
            continue
        arr = table.column(path[0])
        ok = True
        for name in path[1:]:
            t = arr.type
            if not pa.types.is_struct(t) or t.get_field_index(name) < 0:
                ok = False
                break
            idx = t.get_field_index(name)
            arr = pa.chunked_array([c.flatten()[idx] for c in arr.chunks], type=t.field(idx).type)
        if ok:
            return arr
    return None


def _micros(value: int, unit: str) -> int:
    """A timestamp in ``unit`` since the epoch as microseconds (floored)."""
    if unit == "ns":
        return value // 1000
    return value * {"us": 1, "ms": 1000, "s": 1_000_000}[unit]


def _data_leaf(table: pa.Table, col: Column) -> _LeafStats:
    arr = _column_data(table, col)
    if arr is None:
        return _LeafStats(null_count=table.num_rows, min_max_known=True, missing=True)
    out = _LeafStats(null_count=arr.null_count)
    if not _eligible(col):
        return out
    name = col.type.name  # type: ignore[union-attr]
    valid = arr.drop_null() if arr.null_count else arr
    if pa.types.is_dictionary(valid.type):
        valid = valid.cast(valid.type.value_type)
    if len(valid) == 0:
        out.min_max_known = True
        return out
    if name in ("float", "double"):
        valid = valid.cast(pa.float64())
        nan = pc.is_nan(valid)
        has_nan = bool(pc.any(nan).as_py())
        if has_nan:
            numbers = valid.filter(pc.invert(nan))
            out.max = float("nan")
            out.min = float(pc.min(numbers).as_py()) if len(numbers) else float("nan")
            out.min_max_known = True
            return out
    unit = valid.type.unit if pa.types.is_timestamp(valid.type) else None
    if unit is not None:
        valid = valid.cast(pa.int64())
    elif pa.types.is_date(valid.type):
        valid = valid.cast(pa.date32()).cast(pa.int32())
    elif name == "string" and not pa.types.is_string(valid.type):
        valid = valid.cast(pa.string())
    mm = pc.min_max(valid)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if col.type.is_decimal:  # type: ignore[union-attr]
        _, scale = col.type.precision_scale  # type: ignore[union-attr]
        lo, hi = Decimal(lo).quantize(Decimal(1).scaleb(-scale)), Decimal(hi).quantize(Decimal(1).scaleb(-scale))
    elif name in ("float", "double"):
        lo, hi = float(lo), float(hi)
    elif unit is not None:
        lo, hi = _micros(int(lo), unit), _micros(int(hi), unit)
    else:
        lo, hi = (v if isinstance(v, (str, Decimal)) else int(v) for v in (lo, hi))
    out.min, out.max, out.min_max_known = lo, hi, True
    return out


# -- assembly ------------------------------------------------------------------------------------
def _put(tree: dict, path: tuple[str, ...], value: Any) -> None:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    tree[path[-1]] = value


def _touch(tree: dict, path: tuple[str, ...]) -> None:
    for p in path:
        tree = tree.setdefault(p, {})


def _assemble(num_records: int, cols: list[Column], leaf_stats: list[_LeafStats], tight_bounds: bool | None) -> dict:
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    any_eligible = False
    for col, ls in zip(cols, leaf_stats):
        if len(col.physical_path) > 1:
            _touch(nulls, col.physical_path[:-1])
        # Spark sums null flags, and a sum over no rows is null (left out); a column absent
        # from the file counts every row instead.
        if ls.null_count is not None and (num_records > 0 or ls.missing):
            _put(nulls, col.physical_path, int(ls.null_count))
        if _eligible(col):
            any_eligible = True
            if len(col.physical_path) > 1:
                _touch(mins, col.physical_path[:-1])
                _touch(maxs, col.physical_path[:-1])
            if ls.min_max_known and ls.min is not None:
                _put(mins, col.physical_path, _to_json_value(col, ls.min, False))
                _put(maxs, col.physical_path, _to_json_value(col, ls.max, True))
    out: dict[str, Any] = {"numRecords": int(num_records)}
    if any_eligible:
        out["minValues"] = mins
        out["maxValues"] = maxs
    if cols:
        out["nullCount"] = nulls
    if tight_bounds is not None:
        out["tightBounds"] = bool(tight_bounds)
    return out


def _needs_data(col: Column, ls: _LeafStats) -> bool:
    return ls.null_count is None or (_eligible(col) and not ls.min_max_known)


def file_stats(parquet_metadata: pq.FileMetaData, metadata: Metadata, table: pa.Table | None = None,
               tight_bounds: bool | None = None) -> dict:
    """Statistics of a data file from its parquet footer.

    Args:
        parquet_metadata: the file's footer (``pq.ParquetFile(...).metadata``).
        metadata: the table's Metadata (schema, partition columns, stats configuration).
        table: the file's data (or just the columns ``columns_needing_data`` names); values the
            footer cannot prove are computed from it. Without it they are left out.
        tight_bounds: when not None, adds ``tightBounds`` (tables with deletion vectors).

    Returns:
        ``{"numRecords", "minValues", "maxValues", "nullCount"}`` keyed by physical names.
    """
    cols = stats_columns(metadata)
    stats = _footer_stats(parquet_metadata, cols)
    if table is not None:
        stats = [(_data_leaf(table, c) if _needs_data(c, ls) and _column_data(table, c) is not None else ls)
                 for c, ls in zip(cols, stats)]
    return _assemble(parquet_metadata.num_rows, cols, stats, tight_bounds)


def _footer_stats(md: pq.FileMetaData, cols: list[Column]) -> list[_LeafStats]:
    index, _ = _footer_index(md)
    parquet_mr = _is_parquet_mr(md)
    out = []
    for c in cols:
        leaves = index.get(c.physical_path)
        if leaves is None:  # the file predates the column: all null
            out.append(_LeafStats(null_count=md.num_rows, min_max_known=True, missing=True))
        else:
            out.append(_footer_leaf(md, c, leaves, parquet_mr))
    return out


def columns_needing_data(parquet_metadata: pq.FileMetaData, metadata: Metadata,
                         required: Sequence[Sequence[str]] = ()) -> list[str]:
    """Top-level physical column names whose statistics the footer cannot give (read these for ``file_stats``)."""
    cols = stats_columns(metadata, required)
    names: list[str] = []
    for c, ls in zip(cols, _footer_stats(parquet_metadata, cols)):
        if _needs_data(c, ls) and c.physical_path[0] not in names:
            names.append(c.physical_path[0])
    return names


def table_stats(table: pa.Table, metadata: Metadata, tight_bounds: bool | None = None,
                required: Sequence[Sequence[str]] = ()) -> dict:
    """Statistics of the data in ``table`` (physical column names, as written to the file).

    Gives the same result as ``file_stats`` on the file this data is written to.
    """
    cols = stats_columns(metadata, required)
    return _assemble(table.num_rows, cols, [_data_leaf(table, c) for c in cols], tight_bounds)


ParquetSource = Union[str, "pq.ParquetFile", IO[bytes]]


def parquet_file_stats(source: ParquetSource, metadata: Metadata, tight_bounds: bool | None = None) -> dict:
    """Statistics of a parquet file: its footer, plus only the columns the footer cannot cover."""
    return StatsCollector(metadata).file_stats(source, tight_bounds)


# -- while writing -------------------------------------------------------------------------------
def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _merge_leaf(a: _LeafStats, b: _LeafStats) -> _LeafStats:
    """Statistics of two pieces of data together (NaN sorts above every number, as in Spark)."""
    out = _LeafStats(null_count=None if a.null_count is None or b.null_count is None else a.null_count + b.null_count,
                     min_max_known=a.min_max_known and b.min_max_known, missing=a.missing and b.missing)
    mins = [v for v in (a.min, b.min) if v is not None]
    maxs = [v for v in (a.max, b.max) if v is not None]
    numbers = [v for v in mins if not _nan(v)]
    out.min = min(numbers) if numbers else (mins[0] if mins else None)
    if any(_nan(v) for v in maxs):
        out.max = float("nan")
    else:
        out.max = max(maxs) if maxs else None
    return out


class StatsCollector:
    """Statistics of a parquet file this process writes, without reading it back.

    The footer gives counts and most min/max values; what it cannot prove for a file written by
    pyarrow (float and double min/max, which leave NaN out) is gathered from each piece of data
    as it is written (``update``). ``file_stats`` then gives what ``parquet_file_stats`` would.
    """

    def __init__(self, metadata: Metadata, required: Sequence[Sequence[str]] = ()):
        self.metadata = metadata
        self.cols = stats_columns(metadata, required)
        self._watch = [i for i, c in enumerate(self.cols)
                       if _eligible(c) and c.type.name in ("float", "double")]  # type: ignore[union-attr]
        self._leaves: dict[int, _LeafStats] = {}
        self._lock = threading.Lock()

    def update(self, table: pa.Table) -> None:
        """Account for one piece of the data, in the file's physical column names (from any thread)."""
        leaves = {i: _data_leaf(table, self.cols[i]) for i in self._watch
                  if _column_data(table, self.cols[i]) is not None}
        with self._lock:
            for i, leaf in leaves.items():
                self._leaves[i] = leaf if i not in self._leaves else _merge_leaf(self._leaves[i], leaf)

    def file_stats(self, source: ParquetSource, tight_bounds: bool | None = None) -> dict:
        """The file's statistics: its footer, the gathered values, what is still unknown read from the file."""
        pf = source if isinstance(source, pq.ParquetFile) else pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        return self.footer_stats(pf.metadata, lambda need: pf.read(columns=need), tight_bounds)

    def footer_stats(self, md: pq.FileMetaData, read: Callable[[list[str]], pa.Table],
                     tight_bounds: bool | None = None) -> dict:
        """:meth:`file_stats` of the footer (or view) ``md``, every row given to :meth:`update`, and ``read(names)``."""
        stats = [self._leaves[i] if _needs_data(c, ls) and i in self._leaves else ls
                 for i, (c, ls) in enumerate(zip(self.cols, _footer_stats(md, self.cols)))]
        names = md.schema.to_arrow_schema().names
        need = list(dict.fromkeys(c.physical_path[0] for c, ls in zip(self.cols, stats)
                                  if _needs_data(c, ls) and c.physical_path[0] in names))
        if need:
            table = read(need)
            stats = [_data_leaf(table, c) if _needs_data(c, ls) and _column_data(table, c) is not None else ls
                     for c, ls in zip(self.cols, stats)]
        return _assemble(md.num_rows, self.cols, stats, tight_bounds)


# -- JSON ----------------------------------------------------------------------------------------
def _dump(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out.append(",")
            out.append(_dump_str(k))
            out.append(":")
            _dump(v, out)
        out.append("}")
    elif isinstance(value, str):
        out.append(_dump_str(value))
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, Decimal):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_dump_str(_float_json(value, False)) if not math.isfinite(value) else repr(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif value is None:
        out.append("null")
    else:
        raise TypeError(f"cannot serialize {type(value).__name__} in stats")


def _dump_str(s: str) -> str:
    try:
        s.encode("utf-8")
        return json.dumps(s, ensure_ascii=False)
    except UnicodeEncodeError:  # a lone surrogate from a truncated pair
        return json.dumps(s, ensure_ascii=True)


def stats_json(stats: dict) -> str:
    """Compact JSON of a stats dict (decimals as JSON numbers, NaN and infinities as strings)."""
    out: list[str] = []
    _dump(stats, out)
    return "".join(out)


def parse_stats_columns(metadata: Metadata) -> list[str]:
    """Logical names of the columns statistics are collected on (dotted, back-quoted when needed)."""
    return [format_column_name(c.logical_path) for c in stats_columns(metadata)]


__all__ = [
    "DEFAULT_NUM_INDEXED_COLS", "STRING_PREFIX_LENGTH", "StatsCollector", "columns_needing_data", "file_stats", "has_min_max",
    "parquet_file_stats", "parse_stats_columns", "stats_columns", "stats_json", "table_stats",
    "truncate_max_string", "truncate_min_string",
]

