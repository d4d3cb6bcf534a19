"""Data-file rewriting that runs inside Spark tasks: read files (deletion vectors applied,
schema evolution filled in), write target-size parquet files, return add actions.

Pure pyarrow + the core: no pyspark import, so it runs the same in a Python worker, the
driver or a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.plans.optimize_options import DEFAULT_COPY_ROW_GROUPS, DEFAULT_ROW_GROUP_BYTES
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.deletion_vectors import live_row_mask, read_deletion_vector
from airflow_delta_maint.delta.protocol.geospatial import as_geo_array, is_geo_arrow_type
from airflow_delta_maint.delta.protocol.geospatial_files import set_geo_types
from airflow_delta_maint.delta.protocol.iceberg_compat import (ICEBERG_ROW_ID_FIELD_ID, ICEBERG_ROW_VERSION_FIELD_ID,
                                                               iceberg_compat_version, new_file_tags, partition_arrays,
                                                               partition_fields, with_field_id)
from airflow_delta_maint.delta.protocol.row_tracking import RowTracking
from airflow_delta_maint.delta.protocol.schema import to_arrow_schema
from airflow_delta_maint.delta.protocol.stats import StatsCollector, stats_json
from airflow_delta_maint.delta.protocol.variant_layout import conform_variant, is_variant_struct, variant_group_paths
from airflow_delta_maint.delta.parquet.variant_groups import annotate_file
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import Storage

PREFETCH = 2
#: on an object store, where each read waits 10-50 ms before its first byte, up to this many input files are read
#: ahead of the one being written while their bytes stay within REMOTE_PREFETCH_BYTES (and always PREFETCH)
REMOTE_PREFETCH = 8
REMOTE_PREFETCH_BYTES = 32 << 20


def read_ahead_room(storage: Storage, in_flight: list[int], size: int) -> bool:
    """Whether one more input file of ``size`` bytes may be read ahead while files of ``in_flight`` bytes are
    read and waiting: PREFETCH files on local disk; on an object store up to REMOTE_PREFETCH files within
    REMOTE_PREFETCH_BYTES, never fewer than PREFETCH."""
    if len(in_flight) < PREFETCH:
        return True
    return not storage.is_local and len(in_flight) < REMOTE_PREFETCH and \
        sum(in_flight) + size <= REMOTE_PREFETCH_BYTES


def read_ahead_threads(storage: Storage) -> int:
    """Threads that read a rewrite's inputs ahead (see :func:`read_ahead_room`)."""
    return PREFETCH if storage.is_local else REMOTE_PREFETCH


def footer_source(storage: Storage, add: dict) -> str | RangeReader:
    """The data file of ``add`` to read by ranges (its footer, some columns): its local path, or the object read
    by ranged requests."""
    key = storage.key_for_path(add["path"])
    if key is None:
        raise CorruptLogError(f"data file outside the table root cannot be rewritten: {add['path']}")
    if storage.is_local:
        return storage.local_path(key)
    return RangeReader(storage, key, int(add["size"]))


def file_size(add: dict) -> int:
    return int(add.get("size") or 0)


@dataclass
class RewriteSpec:
    """What every rewrite task of one job shares."""

    storage: Storage
    metadata_action: dict
    compression: str = "snappy"
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    #: bin-packing: ``auto``, ``always`` or ``never`` copy inputs' row groups (``app/rewrite/bin_copy.py``)
    copy_row_groups: str = DEFAULT_COPY_ROW_GROUPS
    target_file_size: int = 1 << 30
    tight_bounds: bool | None = None  # True on tables with deletion vectors: stats are exact
    #: 8 hex digits that start the UUID of every file this run writes, so that a failed run can
    #: find and delete what its tasks wrote before it failed
    run_token: str = ""
    #: the table's row-tracking state: which hidden columns rewritten files carry
    row_tracking: RowTracking = field(default_factory=RowTracking)
    #: logical column paths whose statistics must be written whatever the indexed-column settings
    required_stats_columns: tuple[tuple[str, ...], ...] = ()
    #: new files hold the partition columns after the data columns (``materializePartitionColumns``,
    #: Iceberg compatibility: see ``delta/protocol/iceberg_compat.py``)
    materialize_partitions: bool = False
    #: the table's columns with each variant in the shape chosen for this rewrite's inputs (``variant_columns.py``);
    #: None: the table's schema, variants unshredded
    variant_layout: pa.Schema | None = None
    _schema: pa.Schema | None = field(default=None, repr=False, compare=False)
    _partitions: tuple[pa.Field, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def metadata(self) -> Metadata:
        return Metadata.from_action(self.metadata_action)

    @property
    def write_schema(self) -> pa.Schema:
        """The table's physical schema without partition columns, every field nullable, then the
        materialized row-tracking columns (int64) when the table names them."""
        if self._schema is None:
            schema = self.variant_layout or nullable_schema(to_arrow_schema(self.metadata, physical=True))
            iceberg_v3 = (iceberg_compat_version(self.metadata) or 0) >= 3  # Iceberg's row-lineage field ids
            for name in self.row_tracking.hidden_columns:
                column = pa.field(name, pa.int64())
                if iceberg_v3:
                    is_row_id = name == self.row_tracking.row_id_column
                    column = with_field_id(column, ICEBERG_ROW_ID_FIELD_ID if is_row_id else ICEBERG_ROW_VERSION_FIELD_ID)
                schema = schema.append(column)
            self._schema = schema
        return self._schema

    @property
    def partition_fields(self) -> tuple[pa.Field, ...]:
        """The partition columns new files hold after :attr:`write_schema`'s (none unless materialized)."""
        if self._partitions is None:
            self._partitions = tuple(partition_fields(self.metadata)) if self.materialize_partitions else ()
        return self._partitions

    @property
    def file_schema(self) -> pa.Schema:
        """The schema of the files this rewrite writes: :attr:`write_schema`, then the materialized partition columns."""
        schema = self.write_schema
        for column in self.partition_fields:
            schema = schema.append(column)
        return schema

    def with_partitions(self, table: pa.Table, partition_values: dict[str, str | None]) -> pa.Table:
        """``table`` (in :attr:`write_schema`) with the materialized partition columns appended."""
        fields = list(self.partition_fields)
        for column, values in zip(fields, partition_arrays(self.metadata, fields, partition_values, table.num_rows)):
            table = table.append_column(column, values)
        return table

    @property
    def file_tags(self) -> dict[str, str]:
        """The tags of every add action this rewrite writes (``ICEBERG_COMPAT_VERSION`` under Iceberg compatibility)."""
        return new_file_tags(self.metadata)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_schema"] = None
        state["_partitions"] = None
        return state


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable, nested fields included (as the rewrite writes files)."""
    return pa.schema([f.with_nullable(True).with_type(_nullable_type(f.type)) for f in schema],
                     metadata=schema.metadata)


def _nullable_type(t: pa.DataType) -> pa.DataType:
    if is_variant_struct(t):  # a variant's fields stay required where delta-spark writes them so
        return t
    if pa.types.is_struct(t):
        return pa.struct([f.with_nullable(True).with_type(_nullable_type(f.type)) for f in t])
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        vf = t.value_field
        return pa.list_(vf.with_nullable(True).with_type(_nullable_type(vf.type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_nullable_type(t.key_type)),
                       t.item_field.with_nullable(True).with_type(_nullable_type(t.item_type)))
    return t


# -- reading ---------------------------------------------------------------------------------------
def conform_array(arr: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """Cast file data to the table's type: nested fields the file lacks become nulls.

    Data already of the target type is returned as is (chunks kept: no copy); a variant is carried into the
    target's shape (``variant_layout.py``)."""
    if is_variant_struct(target) and is_variant_struct(arr.type):
        return conform_variant(arr, target)
    if arr.type == target:
        return arr
    if is_geo_arrow_type(target):  # WKB read as binary (or another geoarrow.wkb): the table's geospatial type
        return as_geo_array(arr, target)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        present = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        children = [conform_array(arr.field(present[f.name]), f.type) if f.name in present
                    else pa.nulls(len(arr), f.type) for f in target]
        flat = arr
        return pa.StructArray.from_arrays(children, fields=list(target), mask=flat.is_null())
    if pa.types.is_list(target) and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        values = conform_array(arr.flatten(), target.value_type)
        offsets = arr.offsets
        if pa.types.is_large_list(arr.type):
            offsets = offsets.cast(pa.int32())
        out = pa.ListArray.from_arrays(pc_subtract_offset(offsets), values, type=target, mask=arr.is_null())
        return out
    try:
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if pa.types.is_timestamp(target):
            return arr.cast(target, safe=False)
        raise


def pc_subtract_offset(offsets: pa.Array) -> pa.Array:
    """List offsets rebased to start at 0 (a sliced list array's offsets may not)."""
    first = offsets[0].as_py()
    if not first:
        return offsets
    return pa.array(np.asarray(offsets.to_numpy(zero_copy_only=False)) - first, type=offsets.type)


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table in ``schema``'s column order and types; missing columns are nulls."""
    names = set(table.column_names)
    cols = [conform_array(table.column(f.name), f.type) if f.name in names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def read_data_file(spec: RewriteSpec, add: dict, columns: list[str] | None = None,
                   position_column: str | None = None) -> pa.Table:
    """One data file's live rows (deletion vector applied) in the table's physical schema; with
    ``position_column``, each row's physical position in the file (uint64) appended under that name."""
    storage = spec.storage
    key = storage.key_for_path(add["path"])
    if key is None:
        raise CorruptLogError(f"data file outside the table root cannot be rewritten: {add['path']}")
    schema = spec.write_schema
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    source: Any = storage.local_path(key) if storage.is_local else pa.BufferReader(storage.read(key))
    try:
        # INT96 timestamps (Spark's) in microseconds, as Delta holds them: nanoseconds overflow past 2262
        pf = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
    except FileNotFoundError:
        raise CorruptLogError(f"data file referenced by the log is missing: {add['path']}") from None
    present = [f.name for f in schema if f.name in pf.schema_arrow.names]
    table = pf.read(columns=present, use_threads=False)
    if spec.row_tracking.materializes and columns is None:
        table = materialize_row_tracking(spec.row_tracking, table, add)
    positions = np.arange(table.num_rows, dtype=np.uint64) if position_column else None
    dv = add.get("deletionVector")
    if dv:
        mask = live_row_mask(read_deletion_vector(storage, dv), table.num_rows)
        table = table.filter(pa.array(mask))
        if positions is not None:
            positions = positions[mask]
    out = conform_table(table, schema)
    if position_column:
        out = out.append_column(position_column, pa.array(positions, pa.uint64()))
    return out


def materialize_row_tracking(rt: RowTracking, table: pa.Table, add: dict) -> pa.Table:
    """Every row's stable Row ID and Row Commit Version in the materialized columns: the value
    already there, else ``baseRowId`` + the row's physical position in the file and the file's
    ``defaultRowCommitVersion``. Runs before a deletion vector drops rows, so positions are the
    file's own."""
    n = table.num_rows
    for name, default in ((rt.row_id_column, add.get("baseRowId")),
                          (rt.commit_version_column, add.get("defaultRowCommitVersion"))):
        assert name is not None  # enabled row tracking names both columns (row_tracking checks)
        existing = table.column(name).combine_chunks().cast(pa.int64()) if name in table.column_names else None
        if existing is not None and existing.null_count == 0:
            continue
        if default is None:
            raise CorruptLogError(
                f"row tracking is enabled but {add['path']} has rows without a materialized "
                f"{'Row ID' if name == rt.row_id_column else 'Row Commit Version'} and its add action has no "
                f"{'baseRowId' if name == rt.row_id_column else 'defaultRowCommitVersion'}: stable row ids "
                "cannot be preserved")
        if name == rt.row_id_column:
            computed = pa.array(np.arange(int(default), int(default) + n, dtype=np.int64))
        else:
            computed = pa.array(np.full(n, int(default), dtype=np.int64))
        value = computed if existing is None else pc.coalesce(existing, computed)
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, value)
        else:
            table = table.append_column(name, value)
    return table


def iter_files(spec: RewriteSpec, adds: list[dict], columns: list[str] | None = None) -> Iterator[pa.Table]:
    """Read files in order, keeping reads in flight (I/O overlaps writing; see :func:`read_ahead_room`)."""
    storage = spec.storage
    with ThreadPoolExecutor(max_workers=read_ahead_threads(storage)) as pool:
        pending: list[Future] = []
        sizes: list[int] = []
        nxt = 0

        def fill() -> None:
            nonlocal nxt
            while nxt < len(adds) and read_ahead_room(storage, sizes, file_size(adds[nxt])):
                pending.append(pool.submit(read_data_file, spec, adds[nxt], columns))
                sizes.append(file_size(adds[nxt]))
                nxt += 1

        fill()
        while pending:
            table = pending.pop(0).result()
            sizes.pop(0)
            fill()
            yield table


# -- writing ---------------------------------------------------------------------------------------
class DataFileWriter:
    """Writes one parquet file at its final key, buffering rows into large row groups."""

    def __init__(self, spec: RewriteSpec, out_dir: str, partition_values: dict[str, str | None]):
        self.spec = spec
        self.partition_values = partition_values
        name = output_name(spec)
        self.rel_path = f"{out_dir}{name}"  # as it will appear in the log (out_dir already encoded)
        key = spec.storage.key_for_path(self.rel_path)
        if key is None:  # out_dir is relative to the table: never outside it
            raise ValueError(f"{self.rel_path} is not inside the table {spec.storage.root}")
        self.key: str = key
        if spec.storage.is_local:
            self.local = spec.storage.local_path(self.key)
            os.makedirs(os.path.dirname(self.local), exist_ok=True)
            self._tmp = None
        else:
            fd, self.local = tempfile.mkstemp(suffix=".parquet")
            os.close(fd)
            self._tmp = self.local
        self.writer = pq.ParquetWriter(self.local, spec.file_schema, compression=spec.compression,
                                       write_statistics=True, use_dictionary=True)
        self._stats = StatsCollector(spec.metadata, required=spec.required_stats_columns)
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self.rows = 0
        self.bytes_in = 0
        #: the compressed size of each row group written (known once closed)
        self.row_group_sizes: list[int] = []

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._buffer.append(table)
        self._buffered += table.nbytes
        self.rows += table.num_rows
        self.bytes_in += table.nbytes
        if self._buffered >= self.spec.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        data = pa.concat_tables(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        data = self.spec.with_partitions(data, self.partition_values)
        self.writer.write_table(data, row_group_size=max(1, data.num_rows))
        self._stats.update(data)
        self._buffer, self._buffered = [], 0

    def close(self) -> dict:
        """Finish the file (upload it to an object store) and return its add action."""
        self._flush()
        self.writer.close()
        set_geo_types(self.local, self.spec.metadata)  # the table's CRS and edge algorithm, spelled out
        variants = variant_group_paths(self.spec.file_schema)
        if variants:  # pyarrow writes a variant as a plain group: the footer gets the VARIANT logical type
            annotate_file(self.local, variants)
        md = self.writer.writer.metadata
        self.row_group_sizes = [sum(md.row_group(i).column(j).total_compressed_size for j in range(md.num_columns))
                                for i in range(md.num_row_groups)]
        # The footer lacks what it cannot prove (float min/max, for one): gathered while writing.
        stats = self._stats.file_stats(self.local, tight_bounds=self.spec.tight_bounds)
        size = os.path.getsize(self.local)
        if self._tmp is not None:
            with open(self._tmp, "rb") as fh:
                self.spec.storage.put(self.key, fh.read())
            os.unlink(self._tmp)
        add = {
            "path": self.rel_path,
            "partitionValues": dict(self.partition_values),
            "size": size,
            "modificationTime": int(time.time() * 1000),
            "dataChange": False,
            "stats": stats_json(stats),
        }
        tags = self.spec.file_tags
        return {**add, "tags": tags} if tags else add

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self.local)


def output_name(spec: RewriteSpec) -> str:
    """A data file name as delta-spark writes them, ``part-00000-<uuid>-c000.<codec>.parquet``,
    whose UUID starts with the run's token."""
    u = uuid.uuid4().hex
    u = spec.run_token + u[len(spec.run_token):]
    return f"part-00000-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}-c000.{spec.compression}.parquet"


def delete_run_outputs(spec: RewriteSpec, dirs: Iterable[str], keep: Iterable[str] = ()) -> int:
    """Delete the files this run (``spec.run_token``) wrote into the output folders ``dirs`` (as
    :func:`output_dir` gives them), except the storage keys in ``keep`` (files the run already
    committed); returns how many. For a run that failed before its commit: none of them is
    referenced by the log."""
    if len(spec.run_token) < 8:
        return 0
    storage = spec.storage
    keys: list[str] = []
    for d in sorted(set(dirs)):
        folder = storage.key_for_path(d) if d else ""
        if folder is None:
            continue
        prefix = f"{folder}part-00000-{spec.run_token}"
        keys.extend(f.key for f in storage.list_from(prefix) if "/" not in f.key[len(folder):])
    kept = set(keep)
    keys = [k for k in keys if k not in kept]
    storage.delete_many(keys)
    return len(keys)


def output_dir(storage: Storage, adds: list[dict]) -> str:
    """Where a bin's output goes: the folder of its first input (as spelled in the log)."""
    path = adds[0]["path"]
    if "://" in path or path.startswith("/"):
        key = storage.key_for_path(path)
        if key is None:
            return ""
        from urllib.parse import quote

        path = quote(key, safe="/=:@!$&'()*+,;")
    return path.rsplit("/", 1)[0] + "/" if "/" in path else ""


def write_file(spec: RewriteSpec, out_dir: str, partition_values: dict[str, Any],
               tables: Iterable[pa.Table], row_group_sizes: list[int] | None = None) -> list[dict]:
    """Write ``tables`` into one data file; returns its add action (none if no rows come) and adds the
    compressed size of each row group written to ``row_group_sizes``. A failure leaves no file behind."""
    writer = DataFileWriter(spec, out_dir, partition_values)
    try:
        for table in tables:
            writer.write(table)
        if writer.rows == 0:
            writer.abort()
            return []
        add = writer.close()
        if row_group_sizes is not None:
            row_group_sizes.extend(writer.row_group_sizes)
        return [add]
    except BaseException:
        writer.abort()
        raise


def rewrite_bin(spec: RewriteSpec, adds: list[dict], partition_values: dict[str, str | None],
                row_group_sizes: list[int] | None = None) -> list[dict]:
    """Rewrite one bin of files into one file, re-encoding every row; returns its add action (none if no
    rows remain). ``row_group_sizes`` collects the compressed size of each row group written."""
    return write_file(spec, output_dir(spec.storage, adds), partition_values, iter_files(spec, adds),
                      row_group_sizes)


def to_json_lines(adds: Iterable[dict]) -> list[str]:
    return [json.dumps(a, separators=(",", ":")) for a in adds]
