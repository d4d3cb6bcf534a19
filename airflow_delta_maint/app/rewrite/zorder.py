"""Z-order and liquid clustering on Spark: per-column range ids from a sample, rows ordered by
their interleaved bits (Z-order) or their position on a Hilbert curve (liquid clustering).

1. A Spark job samples the Z-order columns of every input file (random rows, vectorised). On
   the driver the sample gives per-column range boundaries (up to ``MAX_RANGES`` ranges, as
   delta-spark's range ids) and, per group (table partition), Z-value cut points: the group
   is split into as many output files as its bytes need, each made of sub-ranges of at most
   ``SUB_RANGE_BYTES`` input bytes.
2. Spark tasks read the files (deletion vectors applied), compute each row's Z-value and
   sub-range, and emit the rows of each sub-range as compressed Arrow IPC. Where the executors
   share the driver's scratch folder (a local master, or ``DELTA_MAINT_SCRATCH_DIR``), the blobs
   go through files there (:mod:`~airflow_delta_maint.app.runners.scratch_shuffle`), never into
   the JVM; elsewhere a Python RDD shuffle with an exact partitioner sends every sub-range to the
   task of its output file. The rows never become Spark SQL rows, and the shuffle runs in the
   Python workers the sampling job already started. Spark Connect has no RDDs: there the same blobs go through
   ``mapInArrow`` and ``groupBy(output file).applyInArrow``
   (:mod:`~airflow_delta_maint.app.runners.connect_shuffle`), as on classic sessions with
   ``DELTA_MAINT_SPARK_TASKS=dataframe``.
3. Each task sorts its sub-ranges by Z-value one at a time (spilling what it received to local
   disk beyond ``SPILL_BYTES``), writes them in order into one file and returns its add action.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.plans.optimize import OptimizePlan
from airflow_delta_maint.delta.protocol.schema import Column
from airflow_delta_maint.delta.storage.scratch import make_scratch, remove_scratch

from airflow_delta_maint.delta.plans.dv_rebase import encode_row_map, pack_sources

from airflow_delta_maint.app.rewrite.data_files import DataFileWriter, RewriteSpec, output_dir, read_data_file
from airflow_delta_maint.app.rewrite.variant_columns import with_variant_layout
from airflow_delta_maint.app.runners.connect_shuffle import shuffle_to_groups
from airflow_delta_maint.app.runners.connect_tasks import DataFrameTasks, classic_tasks_kind, is_connect
from airflow_delta_maint.app.runners.scratch_shuffle import scratch_shared, shuffle_through_scratch
from airflow_delta_maint.app.runners.store_call_tasks import count_into, spark_task_calls

MAX_RANGES = 1000
SAMPLE_ROWS = 100_000
SUB_RANGE_BYTES = 64 << 20  # input bytes of one sub-range (sorted in memory at once)
SPILL_BYTES = 256 << 20  # shuffled bytes a writing task holds in memory before spilling
Z_COL = "__delta_maint_z"
#: ``spark``: shuffle through Spark even where the executors share the driver's scratch folder
SHUFFLE_ENV = "DELTA_MAINT_ZORDER_SHUFFLE"
#: each row's source (input ordinal in its bin, position in that file; ``dv_rebase.pack_sources``),
#: carried through the shuffle when the run records row maps, and never written
SRC_COL = "__delta_maint_src"
log = logging.getLogger("delta_maint.optimize")


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
    elif pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_string_view(arr.type):
        values = arr.cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False).astype(object)
    elif pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type) or pa.types.is_binary_view(arr.type):
        values = arr.cast(pa.binary()).fill_null(b"").to_numpy(zero_copy_only=False).astype(object)
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


def hilbert_index(ids: list[np.ndarray], bits: int) -> np.ndarray:
    """Position of each point (one coordinate array per column, each in ``[0, 2**bits)``) along an
    n-dimensional Hilbert curve of order ``bits``: Skilling's transpose (J. Skilling, "Programming
    the Hilbert curve", 2004), vectorised over rows, then the transposed bits interleaved."""
    x = [np.asarray(c, dtype=np.int64).copy() for c in ids]
    n = len(x)
    if n == 1:
        return x[0]
    q = 1 << (bits - 1)
    while q > 1:  # undo excess work
        p = q - 1
        for i in range(n):
            high = (x[i] & q) != 0
            x[0] = np.where(high, x[0] ^ p, x[0])
            t = np.where(high, 0, (x[0] ^ x[i]) & p)
            x[0] ^= t
            x[i] ^= t
        q >>= 1
    for i in range(1, n):  # Gray encode
        x[i] ^= x[i - 1]
    t = np.zeros_like(x[0])
    q = 1 << (bits - 1)
    while q > 1:
        t = np.where((x[n - 1] & q) != 0, t ^ (q - 1), t)
        q >>= 1
    for i in range(n):
        x[i] ^= t
    return interleave(x, bits)


def curve_values(ids: list[np.ndarray], bits: int, curve: str) -> np.ndarray:
    """Each row's position along the space-filling curve (``zorder`` or ``hilbert``) of its
    per-column range ids; ids wider than ``bits`` keep their high bits."""
    needed = max(int(i.max()).bit_length() if i.size else 0 for i in ids)
    if needed > bits:
        ids = [i >> (needed - bits) for i in ids]
    return hilbert_index(ids, bits) if curve == "hilbert" else interleave(ids, bits)


# -- sampling --------------------------------------------------------------------------------------
def _sample_files(spec: RewriteSpec, columns: list[Column], files: list[tuple[int, dict]],
                  per_task: int, seed: int) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """A uniform random sample of up to ``per_task`` rows of the files: (group ids, per column
    (sortable values, null mask))."""
    needed = sorted({c.physical_path[0] for c in columns})
    gids: list[np.ndarray] = []
    leaves: list[list[pa.Array]] = [[] for _ in columns]
    for gid, add in files:
        table = read_data_file(spec, add, columns=needed)
        if table.num_rows == 0:
            continue
        gids.append(np.full(table.num_rows, gid, dtype=np.int32))
        for j, c in enumerate(columns):
            leaves[j].append(_leaf(table, c))
    if not gids:
        return np.empty(0, dtype=np.int32), [(np.empty(0), np.empty(0, dtype=bool)) for _ in columns]
    all_gids = np.concatenate(gids)
    total = len(all_gids)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(total, size=per_task, replace=False)) if total > per_task else np.arange(total)
    index = pa.array(pick)
    out = []
    for j in range(len(columns)):
        arr = pa.chunked_array(leaves[j]).combine_chunks() if len(leaves[j]) > 1 else leaves[j][0]
        out.append(sortable(arr.take(index)))
    return all_gids[pick], out


def zorder_cuts(z: np.ndarray, gids: np.ndarray, parts: list[int]) -> list[np.ndarray]:
    """Per group: Z-value cut points splitting its sampled rows into ``parts[g]`` equal parts."""
    cuts: list[np.ndarray] = []
    for g, n in enumerate(parts):
        zg = np.sort(z[gids == g])
        if n <= 1 or zg.size == 0:
            cuts.append(np.empty(0, dtype=np.int64))
            continue
        idx = (np.arange(1, n) * zg.size) // n
        cuts.append(np.unique(zg[idx]))
    return cuts


def _ipc(table: pa.Table, compress: bool = True) -> bytes:
    """``table`` as Arrow IPC bytes, LZ4-compressed unless ``compress`` is false (blobs that never leave
    the machine: compressing and decompressing them cost a fifth of a Z-order's CPU, measured)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS if compress else _IPC_PLAIN) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(blobs: list[bytes]) -> pa.Table:
    return pa.concat_tables([pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in blobs])


_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_IPC_PLAIN = pa.ipc.IpcWriteOptions()


class _Layout:
    """Where rows go: per group Z cuts into sub-ranges (sorted in memory one at a time), and
    which output file (Spark partition) each sub-range belongs to."""

    def __init__(self, cuts: list[np.ndarray], files_per_group: list[int]):
        self.cuts = cuts
        subs = [c.size + 1 for c in cuts]
        self.sub_offsets = np.concatenate([[0], np.cumsum(subs)]).astype(np.int64)
        files = [min(f, n) for f, n in zip(files_per_group, subs)]
        file_offsets = np.concatenate([[0], np.cumsum(files)]).astype(np.int64)
        self.num_files = int(file_offsets[-1])
        self.sub_to_file = np.concatenate(
            [file_offsets[g] + (np.arange(n) * files[g]) // n for g, n in enumerate(subs)]).astype(np.int64)
        self.file_to_group = np.repeat(np.arange(len(cuts)), files)

    def sub_ids(self, gid: int, z: np.ndarray) -> np.ndarray:
        return self.sub_offsets[gid] + np.searchsorted(self.cuts[gid], z, side="right")


def _split_rows(spec: RewriteSpec, columns: list[Column], bounds: list[np.ndarray], bits: int, layout: _Layout,
                files: list[tuple[int, dict]], curve: str = "zorder",
                ordinals: dict[str, int] | None = None, compress: bool = True) -> Iterator[tuple[int, bytes]]:
    """Read files and emit their rows as (sub-range id, Arrow IPC bytes with a Z column); with
    ``ordinals`` (input path -> its ordinal in its bin) each row's packed source rides along.
    ``compress``: LZ4 blobs, for a shuffle that may cross the network."""
    for gid, add in files:
        table = read_data_file(spec, add, position_column=SRC_COL if ordinals is not None else None)
        if table.num_rows == 0:
            continue
        if ordinals is not None:
            positions = table.column(SRC_COL).to_numpy()
            table = table.set_column(table.column_names.index(SRC_COL), SRC_COL,
                                     pa.array(pack_sources(ordinals[add["path"]], positions), pa.uint64()))
        ids = [range_ids(*sortable(_leaf(table, c)), bounds[j]) for j, c in enumerate(columns)]
        z = curve_values(ids, bits, curve)
        subs = layout.sub_ids(gid, z)
        table = table.append_column(Z_COL, pa.array(z))
        order = np.argsort(subs, kind="stable")
        table, subs = table.take(pa.array(order)), subs[order]
        cuts = np.flatnonzero(np.diff(subs)) + 1
        for s, e in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(subs)]])):
            yield int(subs[s]), _ipc(table.slice(int(s), int(e - s)), compress)


def _write_output(spec: RewriteSpec, groups: dict[int, tuple[str, dict]], layout: _Layout,
                  records: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, str, bytes | None]]:
    """Write one output file from its sub-ranges, each sorted by Z-value in memory in turn.

    Incoming blobs stay in memory up to ``SPILL_BYTES``, then go to local files per sub-range.
    Yields (output file id, add action JSON, the file's row map or None): rows that carry their
    source (``SRC_COL``) leave it out of the file and into the row map, in file order.
    """
    memory: dict[int, list[bytes]] = {}
    held = 0
    spill_dir: str | None = None
    spilled: set[int] = set()
    file_id: int | None = None

    def spill() -> None:
        nonlocal held, spill_dir
        if spill_dir is None:
            spill_dir = make_scratch("delta-maint-zorder-")
        for sub, blobs in memory.items():
            with open(os.path.join(spill_dir, str(sub)), "ab") as fh:
                for b in blobs:
                    fh.write(len(b).to_bytes(8, "little"))
                    fh.write(b)
            spilled.add(sub)
        memory.clear()
        held = 0

    def blobs_of(sub: int) -> list[bytes]:
        out: list[bytes] = []
        if sub in spilled and spill_dir is not None:  # spilled only after spill_dir was made
            with open(os.path.join(spill_dir, str(sub)), "rb") as fh:
                data = fh.read()
            pos = 0
            while pos < len(data):
                n = int.from_bytes(data[pos:pos + 8], "little")
                out.append(data[pos + 8:pos + 8 + n])
                pos += 8 + n
        return out + memory.pop(sub, [])

    writer: DataFileWriter | None = None
    sources: list[np.ndarray] = []
    try:
        for sub, blob in records:
            file_id = int(layout.sub_to_file[sub])
            memory.setdefault(sub, []).append(blob)
            held += len(blob)
            if held > SPILL_BYTES:
                spill()
        if file_id is None:
            return
        for sub in sorted(set(memory) | spilled):
            table = _from_ipc(blobs_of(sub))
            # numpy's stable sort of the 64-bit curve values: a third of pyarrow's sort_indices' time (measured)
            order = np.argsort(table.column(Z_COL).to_numpy(), kind="stable")
            table = table.take(pa.array(order)).drop_columns([Z_COL])
            if SRC_COL in table.column_names:
                sources.append(table.column(SRC_COL).to_numpy())
                table = table.drop_columns([SRC_COL])
            if writer is None:
                out_dir, pv = groups[int(layout.file_to_group[file_id])]
                writer = DataFileWriter(spec, out_dir, pv)
            writer.write(table)
            del table
        if writer is not None and writer.rows:
            add = writer.close()
            writer = None
            row_map = encode_row_map(np.concatenate(sources)) if sources else None
            yield file_id, json.dumps(add), row_map
    finally:
        if writer is not None:
            writer.abort()
        if spill_dir is not None:
            remove_scratch(spill_dir)


def _spark_shuffle_forced() -> bool:
    """``DELTA_MAINT_ZORDER_SHUFFLE=spark``: Spark's shuffle even where the scratch folder is shared."""
    return os.environ.get(SHUFFLE_ENV, "").strip().lower() == "spark"


def _rdd_shuffle(spark: Any) -> bool:
    """Whether this session shuffles with RDDs (classic sessions, unless told to use DataFrames)."""
    return not is_connect(spark) and classic_tasks_kind() == "rdd"


@dataclass(frozen=True)
class _Sampled:
    """What Z-order's sampling gives its rewrite: the files' slices, each column's boundaries, the curve's layout."""

    chunks: list[list[tuple[int, dict]]]
    slices: int
    bounds: list[Any]
    bits: int
    curve: str
    layout: Any
    num_files: int


def _sample_layout(spark: Any, spec: RewriteSpec, plan: OptimizePlan, rdd: bool) -> _Sampled:
    """Sample the plan's files (Spark tasks) for each Z-order column's range boundaries, and lay the sampled curve
    values out into each bin's output files."""
    columns = plan.zorder_columns
    files = [(gid, add) for gid, b in enumerate(plan.bins) for add in b.files]
    parallelism = spark.sparkContext.defaultParallelism if rdd else DataFrameTasks(spark).parallelism
    slices = max(1, min(len(files), parallelism * 2))
    per_task = max(100, SAMPLE_ROWS // slices)
    chunks = [files[i::slices] for i in range(slices)]
    started = time.perf_counter()
    if rdd:
        def sample(items: Iterator[tuple[int, list[tuple[int, dict]]]]) -> list[Any]:
            return [_sample_files(spec, columns, chunk, per_task, seed=i) for i, chunk in items]

        with spark_task_calls(spark.sparkContext) as calls:  # the tasks' store calls, added to the job's
            sampled = (spark.sparkContext.parallelize(list(enumerate(chunks)), slices)
                       .mapPartitions(count_into(sample, calls)).collect())
    else:
        sampled = DataFrameTasks(spark, "Z-order").map_slices(
            lambda items: [_sample_files(spec, columns, chunk, per_task, seed=i) for i, chunk in items],
            list(enumerate(chunks)), slices, "sampling")
    sample_gids = np.concatenate([s[0] for s in sampled])
    bounds = []
    sample_ids = []
    for j in range(len(columns)):
        values = [s[1][j][0][~s[1][j][1]] for s in sampled if len(s[0])]
        bounds.append(boundaries_from_sample([v for v in values if v.size]))
        vals = np.concatenate([s[1][j][0] for s in sampled]) if len(sample_gids) else np.empty(0)
        nulls = np.concatenate([s[1][j][1] for s in sampled]) if len(sample_gids) else np.empty(0, dtype=bool)
        sample_ids.append(range_ids(vals, nulls, bounds[j]))
    bits = bits_per_column(len(columns))
    curve = "hilbert" if plan.layout == "hilbert" else "zorder"
    sample_z = curve_values(sample_ids, bits, curve) if len(sample_gids) else np.empty(0, dtype=np.int64)
    files_per_group = [max(1, math.ceil(b.input_bytes / plan.target_file_size)) for b in plan.bins]
    sub_bytes = min(plan.target_file_size, SUB_RANGE_BYTES)
    subs_per_group = [max(f, math.ceil(b.input_bytes / sub_bytes)) for f, b in zip(files_per_group, plan.bins)]
    layout = _Layout(zorder_cuts(sample_z, sample_gids, subs_per_group), files_per_group)
    log.info("Z-order: sampled %d rows of %d files in %.1fs; %d output files", len(sample_gids), len(files),
             time.perf_counter() - started, layout.num_files)
    return _Sampled(chunks, slices, bounds, bits, curve, layout, len(files))


def execute_zorder(spark, spec: RewriteSpec, plan: OptimizePlan,
                   row_maps: list[list[bytes]] | None = None) -> list[list[dict]]:
    """Z-order every group (bin) of the plan; returns the add actions per bin. With ``row_maps`` (an
    empty list), each output's row map (the packed source of every row, see ``dv_rebase``) is
    recorded too: appended per bin, in the order of the add actions."""
    columns = plan.zorder_columns
    spec = with_variant_layout(spec, [a for b in plan.bins for a in b.files])  # one shape for every output
    rdd = _rdd_shuffle(spark)
    sampled = _sample_layout(spark, spec, plan, rdd)
    chunks, slices, bounds, bits, curve, layout = (sampled.chunks, sampled.slices, sampled.bounds, sampled.bits,
                                                   sampled.curve, sampled.layout)
    started = time.perf_counter()
    groups = {g: (output_dir(spec.storage, b.files), b.partition_values) for g, b in enumerate(plan.bins)}
    to_file = layout.sub_to_file
    ordinals = ({a["path"]: k for b in plan.bins for k, a in enumerate(b.files)}
                if row_maps is not None else None)
    results: list[Any]  # (output file id, add action JSON, row map or None) per output file
    if rdd and scratch_shared(spark.sparkContext.master) and not _spark_shuffle_forced():
        # on a local master the blobs never leave the machine: they go uncompressed; a scratch folder
        # every machine mounts carries them over the network, compressed
        compress = not str(spark.sparkContext.master).startswith("local")
        results = shuffle_through_scratch(
            spark, chunks, layout.num_files,
            lambda chunk: _split_rows(spec, columns, bounds, bits, layout, chunk, curve, ordinals, compress),
            lambda sub: int(to_file[sub]), lambda records: _write_output(spec, groups, layout, records))
    elif rdd:
        def split_chunks(items: Iterator[list[tuple[int, dict]]]) -> Iterator[tuple[int, bytes]]:
            for chunk in items:
                yield from _split_rows(spec, columns, bounds, bits, layout, chunk, curve, ordinals)

        def write_file(records: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, str, bytes | None]]:
            return _write_output(spec, groups, layout, records)

        with spark_task_calls(spark.sparkContext) as calls:  # the tasks' store calls, added to the job's
            results = (spark.sparkContext.parallelize(chunks, slices)
                       .mapPartitions(count_into(split_chunks, calls))
                       .partitionBy(layout.num_files, lambda sub: int(to_file[sub]))
                       .mapPartitions(count_into(write_file, calls))
                       .collect())
    else:
        def split(items: Iterator[list[tuple[int, dict]]]) -> Iterator[tuple[int, int, bytes]]:
            for chunk in items:
                for sub, blob in _split_rows(spec, columns, bounds, bits, layout, chunk, curve, ordinals):
                    yield int(to_file[sub]), sub, blob

        results = shuffle_to_groups(spark, split, chunks, slices,
                                    lambda _file, records: _write_output(spec, groups, layout, records), "Z-order")
    log.info("Z-order: rewrote %d files in %.1fs", sampled.num_files, time.perf_counter() - started)
    per_bin: list[list[dict]] = [[] for _ in plan.bins]
    maps: list[list[bytes]] = [[] for _ in plan.bins]
    for file_id, add, row_map in results:
        per_bin[int(layout.file_to_group[file_id])].append(json.loads(add))
        maps[int(layout.file_to_group[file_id])].append(row_map)
    if row_maps is not None:
        row_maps.extend(maps)
    return per_bin
