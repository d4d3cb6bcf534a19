"""The file-level side of VACUUM: which names are off limits, listing a subtree, deleting files.

Free of pyarrow and of the log machinery, so a Spark task that lists or deletes imports little
more than obstore.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Callable, Iterable, Sequence

from airflow_delta_maint.delta.errors import InvalidArgumentError, StorageError
from airflow_delta_maint.delta.storage.failures import translate
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

__all__ = ["LocalSidecars", "Subtree", "delete_files", "delete_files_parallel", "hidden_name", "is_hidden", "list_folder", "list_subtree", "partition_prefixes"]

_PATH_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^')
#: UniForm's Iceberg metadata folder (``<table>/metadata``): off limits to VACUUM, as delta-spark's VACUUM
#: hides it on UniForm Iceberg tables. Hidden on every table here: no Delta writer puts data files in a
#: folder of that name, and a table that had UniForm once may still be read through that metadata.
ICEBERG_METADATA_FOLDER = "metadata"


def _escape_name(name: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _PATH_ESCAPE or ord(c) < 0x20 else c for c in name)


def partition_prefixes(partition_columns: Iterable[str]) -> tuple[str, ...]:
    """The ``<column>=`` folder-name prefixes of the partition columns (raw and escaped)."""
    out: set[str] = set()
    for column in partition_columns:
        out.add(column + "=")
        out.add(_escape_name(column) + "=")
    return tuple(sorted(out))


def hidden_name(name: str, prefixes: tuple[str, ...]) -> bool:
    """Whether one path part is hidden: starts with ``_`` or ``.``, except ``_change_data`` and
    partition folders (``prefixes`` from :func:`partition_prefixes`); or is UniForm's Iceberg
    metadata folder (:data:`ICEBERG_METADATA_FOLDER`)."""
    if name == ICEBERG_METADATA_FOLDER:
        return True
    if not name or name[0] not in "._":
        return False
    if name.startswith("_change_data"):
        return False
    return not (prefixes and name.startswith(prefixes))


def is_hidden(key: str, partition_columns: Iterable[str] = ()) -> bool:
    """Whether a key is off limits to VACUUM: under ``_delta_log``, or any part of it hidden.

    A part is hidden when it starts with ``_`` or ``.``, except ``_change_data`` and partition
    folders ``<column>=<value>`` (whose column may start with ``_``), or is ``metadata`` (UniForm's
    Iceberg metadata).
    """
    parts = key.split("/")
    if parts[0] == "_delta_log":
        return True
    prefixes = partition_prefixes(partition_columns)
    return any(hidden_name(p, prefixes) for p in parts)


@dataclass
class Subtree:
    """The visible content of one listed subtree, as parallel lists (cheap to build and pickle).

    Attributes:
        keys, sizes, mtimes: visible files: key, size in bytes, modification time in ms.
        dirs: visible folders under the subtree's root, with their modification time in ms
            (object stores have no folders: always empty there).
    """

    keys: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    mtimes: list[int] = field(default_factory=list)
    dirs: dict[str, int] = field(default_factory=dict)

    @property
    def files(self) -> list[FileInfo]:
        return list(map(FileInfo, self.keys, self.sizes, self.mtimes))

    def add(self, info: FileInfo) -> None:
        self.keys.append(info.key)
        self.sizes.append(info.size)
        self.mtimes.append(info.mtime_ms)

    def extend(self, other: "Subtree") -> None:
        self.keys.extend(other.keys)
        self.sizes.extend(other.sizes)
        self.mtimes.extend(other.mtimes)
        self.dirs.update(other.dirs)


def _local_folder(root: str, rel: str, prefixes: tuple[str, ...], out: Subtree) -> list[str]:
    """Add the visible children of ``root/rel`` to ``out``; return the sub-folder keys.

    Symbolic links are neither followed nor listed, so VACUUM never deletes through one.
    """
    try:
        entries = os.scandir(os.path.join(root, rel) if rel else root)
    except (FileNotFoundError, NotADirectoryError):  # removed while listing
        return []
    base = rel + "/" if rel else ""
    subdirs = []
    keys, sizes, mtimes = out.keys, out.sizes, out.mtimes
    with entries:
        for entry in entries:
            name = entry.name
            if (name[0] in "._" or name == ICEBERG_METADATA_FOLDER) and \
                    (hidden_name(name, prefixes) or (not rel and name == "_delta_log")):
                continue
            try:
                if entry.is_symlink():
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(base + name)
                out.dirs[base + name] = int(st.st_mtime * 1000)
            else:
                keys.append(base + name)
                sizes.append(st.st_size)
                mtimes.append(int(st.st_mtime * 1000))
    return subdirs


def _scan_local(root: str, rel: str, prefixes: tuple[str, ...], out: Subtree) -> None:
    for sub in _local_folder(root, rel, prefixes, out):
        _scan_local(root, sub, prefixes, out)


def list_subtree(storage: Storage, prefix: str, partition_columns: Sequence[str] = ()) -> Subtree:
    """Every visible file (and, on local disk, folder) under ``prefix`` (a folder key without
    the trailing ``/``; ``""`` for the root). Hidden names are skipped, folders included: nothing
    under a hidden folder is visible. Unsorted."""
    prefixes = partition_prefixes(partition_columns)
    out = Subtree()
    if storage.is_local:
        _scan_local(storage.local_dir, prefix, prefixes, out)
        return out
    for info in storage.list_recursive(prefix + "/" if prefix else ""):
        parts = info.key.split("/")
        if parts[0] != "_delta_log" and not any(hidden_name(p, prefixes) for p in parts):
            out.add(info)
    return out


#: a folder with fewer files to delete has each one's sidecar tried instead of the folder scanned
SIDECAR_SCAN_MIN = 64


class LocalSidecars:
    """The Hadoop checksum sidecars (``.<name>.crc``) in the folders a local delete touches. A folder
    that loses at least :data:`SIDECAR_SCAN_MIN` files is scanned once (thread-safe) and a sidecar
    removed only where one exists, instead of a failed unlink for every file of a table no Hadoop
    writer wrote; in a folder that loses fewer, each file's sidecar is tried."""

    def __init__(self, planned: dict[str, int]) -> None:
        #: files to delete per folder (local paths)
        self._planned = planned
        self._folders: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_keys(cls, storage: Storage, keys: Iterable[str]) -> "LocalSidecars":
        planned: dict[str, int] = {}
        for key in keys:
            folder = storage.local_path(key).rpartition("/")[0]
            planned[folder] = planned.get(folder, 0) + 1
        return cls(planned)

    def in_folder(self, folder: str) -> frozenset[str] | None:
        """The sidecar names in ``folder``; None when each file's sidecar is to be tried."""
        if self._planned.get(folder, 0) < SIDECAR_SCAN_MIN:
            return None
        found = self._folders.get(folder)
        if found is None:
            try:
                with os.scandir(folder) as entries:
                    found = frozenset(e.name for e in entries if e.name[:1] == "." and e.name.endswith(".crc"))
            except (FileNotFoundError, NotADirectoryError):
                found = frozenset()
            with self._lock:
                found = self._folders.setdefault(folder, found)
        return found


def _delete_local(storage: Storage, keys: Sequence[str], sidecars: LocalSidecars) -> int:
    """Unlink local files by name within their folder (one open of each folder a batch touches),
    with the checksum sidecar of each (as Hadoop's own delete removes it: a hidden file VACUUM never
    lists)."""
    by_folder: dict[str, list[str]] = {}
    for key in keys:
        folder, _, name = storage.local_path(key).rpartition("/")
        by_folder.setdefault(folder, []).append(name)
    deleted = 0
    for folder, names in by_folder.items():
        try:
            fd = os.open(folder or "/", os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):  # the folder and its files are gone
            continue
        try:
            crc = sidecars.in_folder(folder)
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
                    deleted += 1
                if crc is None or f".{name}.crc" in crc:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f".{name}.crc", dir_fd=fd)
        finally:
            os.close(fd)
    return deleted


def delete_files(storage: Storage, keys: Sequence[str], sidecars: LocalSidecars | None = None) -> int:
    """Delete objects; return how many existed (object stores: how many were requested).

    Keys under ``_delta_log`` are refused, whatever the caller planned. On local disk the checksum
    sidecars of the deleted files go too (``sidecars`` shares the folders' scans between calls).
    """
    if any(k.split("/", 1)[0] == "_delta_log" for k in keys):
        raise InvalidArgumentError("refusing to delete a file under _delta_log")
    if storage.is_local:
        return _delete_local(storage, keys, sidecars or LocalSidecars.for_keys(storage, keys))
    deleted = 0
    for start in range(0, len(keys), 1000):
        deleted += _delete_chunk(storage, list(keys[start:start + 1000]))
    return deleted


#: attempts of one bulk delete whose request failed without an answer (a delete can be repeated; obstore
#: does not repeat a bulk delete itself)
DELETE_ATTEMPTS = 3


def _delete_chunk(storage: Storage, chunk: list[str]) -> int:
    """One bulk delete of up to 1,000 keys, repeated when the store's answer is lost; failures as one line."""
    import obstore

    for attempt in range(1, DELETE_ATTEMPTS + 1):
        storage.calls.add("deleteMany", objects=len(chunk))
        try:
            obstore.delete(storage.store, chunk)
            return len(chunk)
        except FileNotFoundError:
            deleted = 0
            for key in chunk:
                with contextlib.suppress(FileNotFoundError):
                    storage.delete(key)
                    deleted += 1
            return deleted
        except Exception as exc:  # the store's failure, one line (the raw text goes to the debug log)
            error = translate(exc, storage.root, storage.family, "delete from")
            if attempt == DELETE_ATTEMPTS or not isinstance(error, StorageError):
                raise error from None
    raise AssertionError("unreachable")


def list_folder(storage: Storage, prefix: str,
                partition_columns: Sequence[str] = ()) -> tuple[dict[str, int], list[FileInfo]]:
    """The visible children of one folder (``""`` for the root): sub-folder keys with their
    modification time in ms (0 on object stores), and files."""
    prefixes = partition_prefixes(partition_columns)
    if storage.is_local:
        out = Subtree()
        _local_folder(storage.local_dir, prefix, prefixes, out)
        return out.dirs, out.files
    subdirs, files = storage.list_dir(prefix + "/" if prefix else "")
    dirs = {d.rstrip("/"): 0 for d in subdirs if not hidden_name(d.rstrip("/").rpartition("/")[2], prefixes)}
    visible = [f for f in files if not any(hidden_name(p, prefixes) for p in f.key.split("/"))]
    return dirs, visible


def delete_files_parallel(storage: Storage, keys: Sequence[str], threads: int = 16, batch: int = 500,
                          progress: Callable[[int], None] | None = None) -> int:
    """:func:`delete_files` on a thread pool, up to ``batch`` keys per call. Deleting waits on
    storage, not on the CPU, so threads give the parallelism. On object stores a batch is one bulk
    request, whatever folders its keys are in; on local disk a batch holds one folder's files and
    batches are taken from the folders in turn, so concurrent deletes seldom wait for the same
    folder's lock. ``progress`` gets each batch's count. Returns how many were deleted."""
    if any(k.split("/", 1)[0] == "_delta_log" for k in keys):
        raise InvalidArgumentError("refusing to delete a file under _delta_log")
    if not storage.is_local:
        batches = [list(keys[i:i + batch]) for i in range(0, len(keys), batch)]
    else:
        by_folder: dict[str, list[list[str]]] = {}
        for key in keys:
            chunks = by_folder.setdefault(key.rpartition("/")[0], [[]])
            if len(chunks[-1]) >= batch:
                chunks.append([])
            chunks[-1].append(key)
        batches = [b for turn in zip_longest(*by_folder.values()) for b in turn if b]
    if not batches:
        return 0
    total = 0
    sidecars = LocalSidecars.for_keys(storage, keys) if storage.is_local else None
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(batches)))) as pool:
        for n in pool.map(lambda b: delete_files(storage, b, sidecars), batches):
            total += n
            if progress is not None:
                progress(n)
    return total
