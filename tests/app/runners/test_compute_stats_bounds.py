"""Every bound compute-stats writes holds against the file's own data.

Hypothesis draws a file (nulls, NaN and infinities, multi-byte strings around the 32-character
cut, timestamp_ntz and timestamps, decimals, dates, a nullable struct), writes it with pyarrow in
row groups of a drawn size, with footer statistics on or off, and runs the task that computes a
file's statistics on it. Every value must lie within its column's bounds (timestamps within the
millisecond the bound is truncated to), every null count and the row count must be exact, and a
column with values must have both bounds.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_maint.app.runners.stats_tasks import StatsSpec, collector_of, file_statistics
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.schema import from_arrow_schema
from airflow_delta_maint.delta.storage.store import Storage
from tests.hypothesis_profiles import examples

SCHEMA = pa.schema([
    ("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("ntz", pa.timestamp("us")),
    ("ts", pa.timestamp("us", tz="UTC")), ("dec", pa.decimal128(12, 3)), ("day", pa.date32()),
    ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
])
# characters on both sides of the orders that matter: ASCII, two- and three-byte UTF-8, the
# tie-breaker U+FFFD and U+FFFF above it, and characters outside the BMP (surrogate pairs on the JVM)
_CHARS = st.sampled_from(["a", "z", "é", "中", "\ufffd", "\uffff", "😀", "𐍈"])
TEXT = st.one_of(st.text(alphabet=_CHARS, max_size=6), st.text(alphabet=_CHARS, min_size=14, max_size=40))
EPOCH = dt.datetime(1970, 1, 1)
MICROS = st.integers(-2_000_000_000_000_000, 4_000_000_000_000_000)  # about 1906 to 2096


def _row() -> st.SearchStrategy[dict]:
    def maybe(s):
        return st.one_of(st.none(), s)

    return st.fixed_dictionaries({
        "i": maybe(st.integers(-(2 ** 63), 2 ** 63 - 1)),
        "f": maybe(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                             st.sampled_from([float("nan"), -0.0, 0.0]))),
        "s": maybe(TEXT),
        "ntz": maybe(MICROS),
        "ts": maybe(MICROS),
        "dec": maybe(st.decimals(min_value=Decimal("-999999999.999"), max_value=Decimal("999999999.999"),
                                 places=3, allow_nan=False, allow_infinity=False)),
        "day": maybe(st.integers(-100_000, 100_000)),
        "st": maybe(st.fixed_dictionaries({"x": maybe(st.integers(-(2 ** 31), 2 ** 31 - 1)), "y": maybe(TEXT)})),
    })


def _table(rows: list[dict]) -> pa.Table:
    cols: dict[str, Any] = {}
    for f in SCHEMA:
        values = [r[f.name] for r in rows]
        if pa.types.is_timestamp(f.type):
            cols[f.name] = pa.array(values, pa.int64()).cast(f.type)
        elif pa.types.is_date(f.type):
            cols[f.name] = pa.array(values, pa.int32()).cast(f.type)
        else:
            cols[f.name] = pa.array(values, f.type)
    return pa.table(cols, schema=SCHEMA)


def _leaf_values(rows: list[dict], path: tuple[str, ...]) -> list[Any]:
    out = []
    for r in rows:
        v: Any = r
        for p in path:
            v = None if v is None else v[p]
        out.append(v)
    return out


def _get(tree: dict, path: tuple[str, ...]) -> Any:
    for p in path:
        if not isinstance(tree, dict) or p not in tree:
            return None
        tree = tree[p]
    return tree


def _micros(text: str) -> int:
    """A bound as written (``yyyy-MM-ddTHH:mm:ss.SSS`` and ``Z`` for timestamps) in microseconds."""
    return int((dt.datetime.fromisoformat(text.rstrip("Z")) - EPOCH) / dt.timedelta(microseconds=1))


def _check(path: tuple[str, ...], values: list[Any], stats: dict) -> None:
    name = ".".join(path)
    present = [v for v in values if v is not None]
    assert _get(stats["nullCount"], path) == len(values) - len(present), name
    lo, hi = _get(stats["minValues"], path), _get(stats["maxValues"], path)
    if not present:
        assert lo is None and hi is None, name
        return
    assert lo is not None and hi is not None, f"{name}: values but no bounds"
    leaf = path[-1]
    if leaf == "f":
        numbers = [v for v in present if not math.isnan(v)]
        if len(numbers) < len(present):
            assert hi == "NaN", name
        def num(b):
            return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(b, b)
        if numbers:
            assert num(lo) <= min(numbers) and (hi == "NaN" or max(numbers) <= num(hi)), name
    elif leaf in ("ntz", "ts"):
        assert _micros(lo) <= min(present) and max(present) < _micros(hi) + 1000, name
    elif leaf == "day":
        assert dt.date.fromisoformat(lo) == EPOCH.date() + dt.timedelta(days=min(present))
        assert dt.date.fromisoformat(hi) == EPOCH.date() + dt.timedelta(days=max(present))
    else:  # integers, decimals, strings (code point order, as Spark compares them)
        assert lo <= min(present) and max(present) <= hi, name
        if leaf != "s" and leaf != "y":
            assert (lo, hi) == (min(present), max(present)), f"{name}: bounds not exact"
        else:
            assert len(lo) <= 32 and min(present).startswith(lo), name


@settings(max_examples=examples(120), deadline=None)
@given(rows=st.lists(_row(), min_size=1, max_size=30), row_group=st.integers(1, 30), footer_stats=st.booleans(),
       dictionary=st.booleans())
def test_every_recomputed_bound_holds_against_the_data(tmp_path_factory, rows, row_group, footer_stats, dictionary):
    folder: Path = tmp_path_factory.mktemp("file")
    pq.write_table(_table(rows), folder / "part-0.parquet", row_group_size=row_group,
                   write_statistics=footer_stats, use_dictionary=dictionary)
    metadata = Metadata.from_action({"id": "t", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                                     "schemaString": json.dumps(from_arrow_schema(SCHEMA).to_json()), "configuration": {}})
    spec = StatsSpec(Storage(str(folder)), metadata.to_action(), (), deletion_vectors=False)
    size = (folder / "part-0.parquet").stat().st_size
    path, text, from_data = file_statistics(spec, collector_of(spec), ("part-0.parquet", size, False))
    as_floats, as_decimals = json.loads(text), json.loads(text, parse_float=Decimal)
    assert path == "part-0.parquet" and as_floats["numRecords"] == len(rows)
    assert from_data or footer_stats  # without footer statistics every value comes from the data
    for leaf in (("i",), ("f",), ("s",), ("ntz",), ("ts",), ("dec",), ("day",), ("st", "x"), ("st", "y")):
        _check(leaf, _leaf_values(rows, leaf), as_decimals if leaf == ("dec",) else as_floats)
