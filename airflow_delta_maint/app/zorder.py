"""Z-order on Spark: per-column range ids from a sample, rows ordered by their interleaved bits.

1. A Spark job samples the Z-order columns of every input file; the driver turns the sample into
   per-column range boundaries (up to ``MAX_RANGES`` ranges, as delta-spark's range ids).
2. Spark tasks read the files (deletion vectors applied), tag each row with its group (the
   table partition) and Z-value, Spark range-partitions by (group, Z-value) and sorts.
3. Each sorted Spark partition is written as target-size files, a new file at each group
   boundary, and returns add actions.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.optimize_plan import OptimizePlan
from airflow_delta_maint.delta.schema import Column

from .rewrite import RewriteSpec, output_dir, read_data_file, write_sorted_groups

MAX_RANGES = 1000
SAMPLE_ROWS = 100_000
GROUP_COL = "__delta_maint_group"
Z_COL = "__delta_maint_z"


def _leaf(table: pa.Table, col: Column) -> pa.Array:
    arr = table.column(col.physical_path[0]).combine_chunks()
    for name in col.physical_path[1:]:
        arr = pc.struct_field(arr, name)
    return arr


def sortable(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Values as a numpy array that sorts like the column, and the null mask."""
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        arr = arr.cast(pa.int64()) if not pa.types.is_date32(t) else arr.cast(pa.int32()).cast(pa.int64())
    elif pa.types.is_decimal(t):
        arr = arr.cast(pa.float64())
    elif pa.types.is_boolean(t):
        arr = arr.cast(pa.int8())
    if pa.types.is_integer(arr.type):
        values = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    elif pa.types.is_floating(arr.type):
        values = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
    elif pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_binary(arr.type) \
            or pa.types.is_large_binary(arr.type) or pa.types.is_string_view(arr.type):
        values = np.array(["" if v is None else v for v in arr.to_pylist()], dtype=object)
    else:
        raise TypeError(f"cannot Z-order by a column of type {t}")
    return values, nulls


def boundaries_from_sample(samples: list[np.ndarray], max_ranges: int = MAX_RANGES) -> np.ndarray:
    """Cut points splitting the sampled values into up to ``max_ranges`` equal-count ranges."""
    values = np.concatenate(samples) if samples else np.array([])
    if values.size == 0:
        return values
    values = np.sort(values, kind="stable")
    ranges = min(max_ranges, values.size)
    idx = (np.arange(1, ranges) * values.size) // ranges
    return np.unique(values[idx])


def range_ids(values: np.ndarray, nulls: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Range id per row: 0 for nulls (first), else 1 + the range its value falls in."""
    ids = np.searchsorted(bounds, values, side="right").astype(np.int64) + 1 if bounds.size else \
        np.ones(len(values), dtype=np.int64)
    ids[nulls] = 0
    return ids


def interleave(ids: list[np.ndarray], bits: int) -> np.ndarray:
    """Interleave the low ``bits`` bits of each column's range ids (first column most significant)."""
    k = len(ids)
    z = np.zeros(len(ids[0]), dtype=np.int64)
    for bit in range(bits - 1, -1, -1):
        for j in range(k):
            z = (z << 1) | ((ids[j] >> bit) & 1)
    return z


def bits_per_column(num_columns: int, max_ranges: int = MAX_RANGES) -> int:
    return max(1, min(math.ceil(math.log2(max_ranges + 2)), 62 // num_columns))


def _sample_files(spec: RewriteSpec, columns: list[Column], adds: list[dict], per_task: int) -> list[list[Any]]:
    needed = sorted({c.physical_path[0] for c in columns})
    rng = random.Random(len(adds))
    samples: list[list[Any]] = [[] for _ in columns]
    seen = 0
    for add in adds:
        table = read_data_file(spec, add, columns=needed)
        leaves = [_leaf(table, c) for c in columns]
        for row in range(table.num_rows):  # reservoir sample of rows
            seen += 1
            slot = len(samples[0]) if len(samples[0]) < per_task else rng.randrange(seen)
            if slot >= per_task:
                continue
            for j, leaf in enumerate(leaves):
                value = leaf[row].as_py()
                if value is None:
                    continue
                if slot < len(samples[j]):
                    samples[j][slot] = value
                else:
                    samples[j].append(value)
    return samples


def _to_sortable_list(values: list[Any], arrow_type: pa.DataType) -> np.ndarray:
    vals, nulls = sortable(pa.array(values, type=arrow_type))
    return vals[~nulls]


def execute_zorder(spark, spec: RewriteSpec, plan: OptimizePlan) -> list[list[dict]]:
    """Z-order every group (bin) of the plan; returns the add actions per bin."""
    from pyspark.sql.pandas.types import from_arrow_schema

    columns = plan.zorder_columns
    sc = spark.sparkContext
    files = [(gid, add) for gid, b in enumerate(plan.bins) for add in b.files]
    slices = max(1, min(len(files), sc.defaultParallelism * 2))
    per_task = max(100, SAMPLE_ROWS // slices)
    sampled = (sc.parallelize([a for _, a in files], slices)
               .mapPartitions(lambda it: [_sample_files(spec, columns, list(it), per_task)])
               .collect())
    types = [_leaf_type(spec.write_schema, c) for c in columns]
    bounds = [boundaries_from_sample([_to_sortable_list(s[j], types[j]) for s in sampled if s[j]])
              for j in range(len(columns))]
    bits = bits_per_column(len(columns))
    schema = spec.write_schema
    out_schema = pa.schema(list(_plain(schema)) + [pa.field(GROUP_COL, pa.int32()), pa.field(Z_COL, pa.int64())])

    def read_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for gid, add_json in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                table = read_data_file(spec, json.loads(add_json))
                if table.num_rows == 0:
                    continue
                ids = [range_ids(*sortable(_leaf(table, c)), bounds[j]) for j, c in enumerate(columns)]
                z = interleave(ids, bits)
                table = _plain_table(table, out_schema, gid, z)
                yield from table.to_batches(max_chunksize=10_000)

    groups = {gid: (output_dir(spec.storage, b.files), b.partition_values) for gid, b in enumerate(plan.bins)}

    def write_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        adds = list(write_sorted_groups(spec, batches, GROUP_COL, groups, [GROUP_COL, Z_COL]))
        yield pa.RecordBatch.from_pydict({"gid": [int(a.pop("_gid")) for a in adds] if adds else [],
                                          "add": [json.dumps(a) for a in adds]},
                                         schema=pa.schema([("gid", pa.int32()), ("add", pa.string())]))

    num_out = max(1, plan.predicted_output_files())
    file_df = spark.createDataFrame([(gid, json.dumps(add)) for gid, add in files], "g int, f string") \
        .repartition(slices)
    rows = file_df.mapInArrow(read_rows, from_arrow_schema(out_schema))
    ordered = rows.repartitionByRange(num_out, GROUP_COL, Z_COL).sortWithinPartitions(GROUP_COL, Z_COL)
    results = ordered.mapInArrow(write_rows, "gid int, add string").collect()
    per_bin: list[list[dict]] = [[] for _ in plan.bins]
    for row in results:
        per_bin[row["gid"]].append(json.loads(row["add"]))
    return per_bin


def _leaf_type(schema: pa.Schema, col: Column) -> pa.DataType:
    t = schema.field(col.physical_path[0]).type
    for name in col.physical_path[1:]:
        t = t.field(name).type
    return t


def _plain(schema: pa.Schema) -> pa.Schema:
    """The schema without field metadata (Spark's Arrow conversion does not carry it)."""
    return pa.schema([pa.field(f.name, f.type, True) for f in schema])


def _plain_table(table: pa.Table, out_schema: pa.Schema, gid: int, z: np.ndarray) -> pa.Table:
    cols = [table.column(i) for i in range(table.num_columns)]
    cols += [pa.array(np.full(table.num_rows, gid, dtype=np.int32)), pa.array(z)]
    return pa.Table.from_arrays(cols, schema=out_schema)
