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
"""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass, field
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import InvalidArgumentError, NotADeltaTableError, TableNotFoundError
from airflow_delta_maint.delta.log.listing import LOG_DIR
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.vacuum_files import hidden_name, partition_prefixes
from airflow_delta_maint.delta.storage.store import FileInfo, Storage, normalize_table_uri

log = logging.getLogger("delta_maint.vacuum_inventory")

__all__ = ["COLUMNS", "Inventory", "check_fresh", "read_inventory", "inventory_files"]

COLUMNS = ("path", "length", "isDir", "modificationTime")
_SCHEMA = pa.schema([("path", pa.string()), ("length", pa.int64()), ("isDir", pa.bool_()),
                     ("modificationTime", pa.int64())])


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


def _split(uri: str) -> tuple[str, str]:
    root = normalize_table_uri(uri)
    parent, _, name = root.rpartition("/")
    return parent, name


def read_inventory(uri: str, storage_options: Mapping[str, str] | None = None) -> Inventory:
    """Read an inventory: a Delta table, a parquet or CSV file, or a folder of them.

    Raises:
        InvalidArgumentError: missing, empty, or of the wrong shape.
    """
    try:
        storage = Storage(uri, storage_options)
    except TableNotFoundError:
        storage = None
    files: list[FileInfo] = []
    if storage is not None:
        entries = list(storage.list_recursive(""))
        if any(f.key.startswith(LOG_DIR) for f in entries):
            return _read_delta(storage, uri)
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
    parts = []
    for f in files:
        data = storage.read(f.key)
        try:
            if csv:
                opts = pacsv.ConvertOptions(column_types={c: _SCHEMA.field(c).type for c in COLUMNS})
                compression = "gzip" if f.key.lower().endswith(".gz") else None
                stream = pa.CompressedInputStream(io.BytesIO(data), compression) if compression else io.BytesIO(data)
                parts.append(_conform(pacsv.read_csv(stream, convert_options=opts), uri))
            else:
                parts.append(_conform(pq.read_table(io.BytesIO(data), columns=list(COLUMNS)), uri))
        except (pa.ArrowInvalid, OSError) as exc:
            raise InvalidArgumentError(f"cannot read the inventory file {f.key} of {uri}: {exc}") from None
    return Inventory(pa.concat_tables(parts), uri, "csv" if csv else "parquet",
                     min(f.mtime_ms for f in files), [f.key for f in files])


def _read_delta(storage: Storage, uri: str) -> Inventory:
    try:
        snapshot = Snapshot.load(storage)
    except NotADeltaTableError as exc:
        raise InvalidArgumentError(f"the inventory {uri} is not readable: {exc}") from None
    if snapshot.files.num_rows and snapshot.files.column("deletionVector").null_count != snapshot.files.num_rows:
        raise InvalidArgumentError(f"the inventory table {uri} has deletion vectors; rewrite it without them")
    parts = []
    for path in snapshot.paths:
        key = storage.key_for_path(path)
        if key is None:
            raise InvalidArgumentError(f"the inventory table {uri} names a file outside it: {path}")
        parts.append(_conform(pq.read_table(io.BytesIO(storage.read(key)), columns=list(COLUMNS)), uri))
    table = pa.concat_tables(parts) if parts else _SCHEMA.empty_table()
    taken = snapshot.commit_timestamp
    if taken is None:
        taken = storage.head(f"{LOG_DIR}{snapshot.version:020d}.json").mtime_ms
    return Inventory(table, uri, "delta", int(taken), list(snapshot.paths))


def check_fresh(inventory: Inventory, cutoff_ms: int) -> None:
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


def inventory_files(inventory: Inventory, storage: Storage,
                    partition_columns: tuple[str, ...] | list[str] = ()) -> tuple[list[FileInfo], int]:
    """The visible files the inventory lists under the table root (as a listing would find
    them), and how many rows it lists outside the root."""
    table = inventory.table.filter(pc.invert(pc.fill_null(inventory.table.column("isDir"), False)))
    paths = pc.fill_null(table.column("path"), "")
    keys = pa.nulls(table.num_rows, pa.string())
    inside = pa.array([False] * table.num_rows)
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
    # hidden names: anything whose key has a part starting with '_' or '.' is checked one by one
    maybe = pc.match_substring_regex(table.column("path"), r"(^|/)[._]")
    prefixes = partition_prefixes(partition_columns)
    out: list[FileInfo] = []
    keys_l, sizes, mtimes = (table.column(c).to_pylist() for c in ("path", "length", "modificationTime"))
    for key, size, mtime, odd in zip(keys_l, sizes, mtimes, maybe.to_pylist()):
        if odd:
            parts = key.split("/")
            if parts[0] == "_delta_log" or any(hidden_name(p, prefixes) for p in parts):
                continue
        out.append(FileInfo(key, int(size or 0), int(mtime or 0)))
    return out, int(outside)
