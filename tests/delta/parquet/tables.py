"""Tables the parquet tests write: most types a Delta table holds, nested ones and nulls included."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa


def many_types(n: int = 300, seed: int = 0) -> pa.Table:
    """A table of most types a Delta table holds, nested ones and nulls included."""
    r = np.random.default_rng(seed)
    ints = r.integers(-1000, 1000, n)
    mask = r.random(n) < 0.2
    words = [f"w{int(x)}" for x in r.integers(0, 40, n)]
    return pa.table({
        "i64": pa.array(ints, pa.int64()),
        "i32": pa.array(ints.astype(np.int32), mask=mask),
        "i16": pa.array(ints.astype(np.int16), pa.int16()),
        "i8": pa.array((ints % 100).astype(np.int8), pa.int8()),
        "f64": pa.array(r.normal(size=n), mask=mask),
        "f32": pa.array(r.normal(size=n).astype(np.float32)),
        "b": pa.array(ints > 0),
        "s": pa.array(words, mask=mask),
        "dict_s": pa.array(words).dictionary_encode(),
        "long_s": pa.array(["x" * 70 + w for w in words]),
        "bin": pa.array([w.encode() for w in words], pa.binary()),
        "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=int(x)) for x in ints], pa.date32()),
        "ts": pa.array((ints * 1_000_003).astype("datetime64[us]"), pa.timestamp("us", tz="UTC")),
        "ts_ntz": pa.array((ints * 1_000_003).astype("datetime64[us]"), pa.timestamp("us")),
        "dec": pa.array([Decimal(int(x)).scaleb(-2) for x in ints], pa.decimal128(10, 2)),
        "dec38": pa.array([Decimal(int(x) * 10**20).scaleb(-3) for x in ints], pa.decimal128(38, 3)),
        "lst": pa.array([[int(x), None] if x % 3 else None for x in ints], pa.list_(pa.int64())),
        "mp": pa.array([[(w, int(x))] for w, x in zip(words, ints)], pa.map_(pa.string(), pa.int64())),
        "st": pa.array([{"a": int(x), "b": {"c": w}} if x % 5 else None for x, w in zip(ints, words)],
                       pa.struct([("a", pa.int64()), ("b", pa.struct([("c", pa.string())]))])),
        "nulls": pa.nulls(n, pa.string()),
    })
