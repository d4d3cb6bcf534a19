"""VACUUM from an inventory: a table or file of the objects under the table root replaces the listing.

The inventory has delta-spark's ``VACUUM ... USING INVENTORY`` columns: ``path`` (the object's
full URI or path, or a path relative to the table root), ``length`` (bytes), ``isDir`` (bool)
and ``modificationTime`` (epoch ms). It may be a parquet file or folder of parquet files, a CSV
file or folder of CSV files with a header row, or a Delta table. Rows outside the table root,
folders and hidden names (``_delta_log``, other ``_``/``.`` parts except ``_change_data`` and
partition folders) are left out, exactly as a listing leaves them out. Files the inventory does
not list are never deleted. An inventory taken before the retention cut-off is refused: it
cannot know what happened since.

The inventory's time is when it was written: the newest commit of a Delta inventory, else the
oldest modification time of its data files.

:func:`read_inventory` reads the whole inventory into Arrow. For a large table
:func:`open_inventory` reads only where the inventory is and when it was taken, and
:meth:`InventorySource.batches` then yields its rows a batch at a time; :func:`write_inventory_listing`
filters and normalises each batch exactly as :func:`inventory_files` does and writes the files
older than the cut-off as parquet, for the anti-join of a large table's VACUUM.
"""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import InvalidArgumentError, NotADeltaTableError, TableNotFoundError
from airflow_delta_maint.delta.log.listing import LOG_DIR
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.table_files import ICEBERG_METADATA_FOLDER, hidden_name, partition_prefixes
from airflow_delta_maint.delta.plans.vacuum_valid_stream import KeyWriter
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import FileInfo, Storage, normalize_table_uri

log = logging.getLogger("delta_maint.vacuum_inventory")

__all__ = ["COLUMNS", "LISTING_SCHEMA", "Inventory", "InventoryListing", "InventorySource", "check_fresh",
           "inventory_files", "open_inventory", "read_inventory", "write_inventory_listing"]

COLUMNS = ("path", "length", "isDir", "modificationTime")
_SCHEMA = pa.schema([("path", pa.string()), ("length", pa.int64()), ("isDir", pa.bool_()),
                     ("modificationTime", pa.int64())])
#: the visible files of an inventory as :func:`write_inventory_listing` writes them
LISTING_SCHEMA = pa.schema([("key", pa.string()), ("size", pa.int64()), ("mtime", pa.int64())])
#: keys that may have a hidden part (:func:`hidden_name` decides)
_MAYBE_HIDDEN = rf"(^|/)([._]|{ICEBERG_METADATA_FOLDER}(/|$))"
#: rows per batch read from an inventory file (as the checkpoint scan reads them: a few MB of paths)
BATCH_ROWS = 16_384
_READ_BUFFER = 1 << 20
_REMOTE_BUFFER = 8 << 20


@dataclass
class Inventory:
    """An inventory read into Arrow (``path``, ``length``, ``isDir``, ``modificationTime``),
    with where it came from and when it was taken (epoch ms)."""

    table: pa.Table
    source: str
    kind: str  # "delta" | "parquet" | "csv"
    taken_at_ms: int
    data_files: list[str] = field(default_factory=list)


def _conform(table: pa.Table, source: str) -> pa.Table:
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise InvalidArgumentError(f"the inventory {source} lacks the column(s) {', '.join(missing)}; "
                                   f"expected {', '.join(COLUMNS)}")
    try:
        return pa.table([table.column(c).cast(_SCHEMA.field(c).type) for c in COLUMNS], schema=_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"the inventory {source} has a column of the wrong type: {exc}") from None


def _empty_with(names: list[str]) -> pa.Table:
    """An empty table with the inventory columns among ``names`` (typed), for the column check."""
    return pa.table({c: pa.array([], _SCHEMA.field(c).type) for c in COLUMNS if c in names})


def _split(uri: str) -> tuple[str, str]:
    root = normalize_table_uri(uri)
    parent, _, name = root.rpartition("/")
    return parent, name


@dataclass
class InventorySource:
    """An inventory opened for reading in batches: where it is, what kind, when it was taken
    (epoch ms) and its data files; no row is read until :meth:`batches`."""

    source: str
    kind: str  # "delta" | "parquet" | "csv"
    taken_at_ms: int
    storage: Storage
    files: list[FileInfo]  # the data files, keys of ``storage``
    data_files: list[str] = field(default_factory=list)

    def batches(self) -> Iterator[pa.Table]:
        """The inventory's rows in ``COLUMNS`` (typed), at most :data:`BATCH_ROWS` at a time.

        Raises:
            InvalidArgumentError: a data file lacks a column, has one of the wrong type, or
                cannot be read.
        """
        for f in self.files:
            try:
                if self.kind == "csv":
                    yield from self._csv_batches(f)
                else:
                    yield from self._parquet_batches(f)
            except (pa.ArrowInvalid, OSError) as exc:
                raise InvalidArgumentError(f"cannot read the inventory file {f.key} of {self.source}: {exc}") from None

    def _raw(self, f: FileInfo) -> io.RawIOBase:
        return RangeReader(self.storage, f.key, f.size)

    def _parquet_batches(self, f: FileInfo) -> Iterator[pa.Table]:
        if self.storage.is_local:
            pf = pq.ParquetFile(self.storage.local_path(f.key), memory_map=False, buffer_size=_READ_BUFFER,
                                pre_buffer=False)
        else:
            pf = pq.ParquetFile(self._raw(f), buffer_size=_READ_BUFFER, pre_buffer=False)
        try:
            _conform(_empty_with(pf.schema_arrow.names), self.source)
            if pf.metadata.num_rows == 0:
                return
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=list(COLUMNS), use_threads=False):
                yield _conform(pa.Table.from_batches([batch]), self.source)
        finally:
            pf.close()

    def _csv_stream(self, f: FileInfo) -> pa.NativeFile:
        compression = "gzip" if f.key.lower().endswith(".gz") else None
        if self.storage.is_local:
            return pa.input_stream(self.storage.local_path(f.key), compression=compression)
        raw = pa.PythonFile(io.BufferedReader(self._raw(f), _REMOTE_BUFFER), mode="r")
        return pa.CompressedInputStream(raw, compression) if compression else raw

    def _csv_batches(self, f: FileInfo) -> Iterator[pa.Table]:
        types = {c: _SCHEMA.field(c).type for c in COLUMNS}
        with self._csv_stream(f) as stream:  # the header: which columns there are
            names = pacsv.open_csv(stream, convert_options=pacsv.ConvertOptions(column_types=types)).schema.names
        _conform(_empty_with(names), self.source)
        opts = pacsv.ConvertOptions(column_types=types, include_columns=list(COLUMNS))
        with self._csv_stream(f) as stream:
            for batch in pacsv.open_csv(stream, convert_options=opts):
                if batch.num_rows:
                    yield _conform(pa.Table.from_batches([batch]), self.source)


def open_inventory(uri: str, storage_options: Mapping[str, str] | None = None) -> InventorySource:
    """Find an inventory's data files and when it was taken (a Delta table, a parquet or CSV file,
    or a folder of them), reading none of its rows.

    Raises:
        InvalidArgumentError: missing or empty, or a Delta inventory that cannot be read as one.
    """
    try:
        storage = Storage(uri, storage_options)
    except TableNotFoundError:
        storage = None
    files: list[FileInfo] = []
    if storage is not None:
        entries = list(storage.list_recursive(""))
        if any(f.key.startswith(LOG_DIR) for f in entries):
            return _open_delta(storage, uri)
        files = sorted((f for f in entries if not any(p[:1] in "._" for p in f.key.split("/"))),
                       key=lambda f: f.key)
    if storage is None or (not files and not storage.is_local):  # a single file
        parent, name = _split(uri)
        try:
            storage = Storage(parent, storage_options)
            files = [storage.head(name)]
        except (TableNotFoundError, FileNotFoundError):
            raise InvalidArgumentError(f"the inventory {uri} does not exist") from None
    if not files:
        raise InvalidArgumentError(f"the inventory {uri} has no data files")
    csv = all(f.key.lower().endswith((".csv", ".csv.gz")) for f in files)
    return InventorySource(uri, "csv" if csv else "parquet", min(f.mtime_ms for f in files), storage, files,
                           [f.key for f in files])


def _open_delta(storage: Storage, uri: str) -> InventorySource:
    try:
        snapshot = Snapshot.load(storage)
    except NotADeltaTableError as exc:
        raise InvalidArgumentError(f"the inventory {uri} is not readable: {exc}") from None
    if snapshot.files.num_rows and snapshot.files.column("deletionVector").null_count != snapshot.files.num_rows:
        raise InvalidArgumentError(f"the inventory table {uri} has deletion vectors; rewrite it without them")
    files = []
    sizes = snapshot.files.column("size").to_pylist()
    for path, size in zip(snapshot.paths, sizes):
        key = storage.key_for_path(path)
        if key is None:
            raise InvalidArgumentError(f"the inventory table {uri} names a file outside it: {path}")
        files.append(FileInfo(key, int(size) if size is not None else storage.head(key).size, 0))
    taken = snapshot.commit_timestamp
    if taken is None:
        taken = storage.head(f"{LOG_DIR}{snapshot.version:020d}.json").mtime_ms
    return InventorySource(uri, "delta", int(taken), storage, files, list(snapshot.paths))


def read_inventory(uri: str, storage_options: Mapping[str, str] | None = None) -> Inventory:
    """Read an inventory whole: a Delta table, a parquet or CSV file, or a folder of them.

    Raises:
        InvalidArgumentError: missing, empty, or of the wrong shape.
    """
    source = open_inventory(uri, storage_options)
    parts = list(source.batches())
    table = pa.concat_tables(parts) if parts else _SCHEMA.empty_table()
    return Inventory(table, source.source, source.kind, source.taken_at_ms, source.data_files)


def check_fresh(inventory: Inventory | InventorySource, cutoff_ms: int) -> None:
    """Refuse an inventory taken before the retention cut-off.

    Raises:
        InvalidArgumentError: naming both times.
    """
    if inventory.taken_at_ms < cutoff_ms:
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        raise InvalidArgumentError(
            f"the inventory {inventory.source} was taken at {time.strftime(fmt, time.gmtime(inventory.taken_at_ms / 1000))}, "
            f"before the retention cut-off {time.strftime(fmt, time.gmtime(cutoff_ms / 1000))}: it cannot know the "
            "files written or removed since; take a newer inventory")


def _roots(storage: Storage) -> list[str]:
    roots = [storage.root + "/"]
    if storage.is_local:
        local = storage.local_dir.rstrip("/") + "/"
        roots += [local, "file:" + local]
    elif storage.root.startswith("s3://"):
        roots += ["s3a://" + storage.root[5:] + "/", "s3n://" + storage.root[5:] + "/"]
    return roots


def _visible(rows: pa.Table, storage: Storage, prefixes: tuple[str, ...]) -> tuple[pa.Table, int]:
    """The visible files among inventory rows, under the table root (as a listing would find
    them), in :data:`LISTING_SCHEMA` (a missing length or time is 0); and how many file rows lie
    outside the root."""
    table = rows.filter(pc.invert(pc.fill_null(rows.column("isDir"), False)))
    paths = pc.fill_null(table.column("path"), "")
    keys = pa.nulls(table.num_rows, pa.string())
    inside = pa.array(np.zeros(table.num_rows, dtype=bool))
    for root in _roots(storage):
        hit = pc.starts_with(paths, root)
        keys = pc.if_else(pc.and_(hit, pc.invert(inside)), pc.utf8_slice_codeunits(paths, len(root)), keys)
        inside = pc.or_(inside, hit)
    relative = pc.and_(pc.invert(pc.match_substring_regex(paths, r"^[A-Za-z][A-Za-z0-9+.-]*:|^/")),
                       pc.not_equal(paths, ""))
    keys = pc.if_else(relative, paths, keys)
    inside = pc.or_(inside, relative)
    outside = table.num_rows - pc.sum(pc.cast(inside, pa.int64())).as_py() if table.num_rows else 0
    table = table.set_column(0, "path", keys).filter(inside)
    out = pa.table([table.column("path"), pc.fill_null(table.column("length"), 0),
                    pc.fill_null(table.column("modificationTime"), 0)], schema=LISTING_SCHEMA)
    # hidden names: anything whose key has a part starting with '_' or '.', or named 'metadata' (UniForm's Iceberg
    # metadata), is checked one by one
    maybe = pc.indices_nonzero(pc.match_substring_regex(out.column("key"), _MAYBE_HIDDEN)).to_pylist()
    if maybe:
        shown = np.ones(out.num_rows, dtype=bool)
        for i, key in zip(maybe, out.column("key").take(maybe).to_pylist()):
            parts = key.split("/")
            if parts[0] == "_delta_log" or any(hidden_name(p, prefixes) for p in parts):
                shown[i] = False
        out = out.filter(pa.array(shown))
    return out, int(outside)


def inventory_files(inventory: Inventory, storage: Storage,
                    partition_columns: tuple[str, ...] | list[str] = ()) -> tuple[list[FileInfo], int]:
    """The visible files the inventory lists under the table root (as a listing would find
    them), and how many rows it lists outside the root."""
    table, outside = _visible(inventory.table, storage, partition_prefixes(partition_columns))
    keys, sizes, mtimes = (table.column(c).to_pylist() for c in LISTING_SCHEMA.names)
    return list(map(FileInfo, keys, sizes, mtimes)), outside


@dataclass
class InventoryListing:
    """What :func:`write_inventory_listing` found: the visible files under the table root and
    their bytes, how many of them are older than the cut-off (the rows written), the file rows
    outside the root, and the folders the files name (local tables; key -> 0, as the in-memory
    listing of an inventory counts them)."""

    files: int = 0
    bytes: int = 0
    old: int = 0
    outside: int = 0
    dirs: dict[str, int] = field(default_factory=dict)


def write_inventory_listing(source: InventorySource, storage: Storage, partition_columns: tuple[str, ...] | list[str],
                            cutoff_ms: int, folder: str) -> InventoryListing:
    """Stream the inventory a batch at a time: keep its visible files under the table root (as
    :func:`inventory_files` keeps them), write those older than ``cutoff_ms`` as parquet files
    (:data:`LISTING_SCHEMA`) into the local ``folder``, and count the rest. Memory stays that of
    one batch and the folders.

    Raises:
        InvalidArgumentError: as :meth:`InventorySource.batches`.
    """
    prefixes = partition_prefixes(partition_columns)
    found = InventoryListing()
    writer = KeyWriter(folder, "listing", LISTING_SCHEMA)
    try:
        for rows in source.batches():
            table, outside = _visible(rows, storage, prefixes)
            found.outside += outside
            if not table.num_rows:
                continue
            found.files += table.num_rows
            found.bytes += pc.sum(table.column("size")).as_py() or 0
            if storage.is_local:  # the folders the files name (object stores have none)
                keys = table.column("key")
                nested = keys.filter(pc.match_substring(keys, "/"))
                for folder_key in pc.unique(pc.replace_substring_regex(nested, r"/[^/]*$", "")).to_pylist():
                    while folder_key and folder_key not in found.dirs:
                        found.dirs[folder_key] = 0
                        folder_key = folder_key.rpartition("/")[0]
            old = table.filter(pc.less(table.column("mtime"), cutoff_ms))
            found.old += old.num_rows
            writer.write_table(old)
    finally:
        writer.close()
    log.info("the inventory lists %d files (%d bytes) under the table (%d rows elsewhere); %d are older than the "
             "cutoff", found.files, found.bytes, found.outside, found.old)
    return found
