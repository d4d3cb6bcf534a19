"""Storage access for Delta tables on local disk and object stores, through obstore.

Keys are relative to the table root and use ``/``: ``_delta_log/00000000000000000000.json``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Iterator, Mapping
from urllib.parse import quote, unquote, urlparse

import obstore
from obstore.exceptions import AlreadyExistsError
from obstore.store import LocalStore, from_url

from .errors import TableNotFoundError

_CLIENT_KEYS = {"allow_http", "aws_allow_http"}

__all__ = ["FileInfo", "Storage", "AlreadyExistsError", "normalize_table_uri"]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One object: its key relative to the root, size in bytes, modification time in ms."""

    key: str
    size: int
    mtime_ms: int


def normalize_table_uri(uri: str) -> str:
    """Return the table root as a URI without a trailing slash (``file:///abs/path`` for local paths)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = unquote(parsed.path) if parsed.scheme == "file" else uri
        path = os.path.abspath(os.path.expanduser(path))
        return "file://" + path.rstrip("/") if path != "/" else "file:///"
    scheme = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(parsed.scheme, parsed.scheme)
    return f"{scheme}://{parsed.netloc}{parsed.path}".rstrip("/")


class Storage:
    """List, read, put-if-absent and delete the objects under one table root.

    Args:
        root: a local path or a ``file://``, ``s3://``, ``gs://``, ``az://``/``abfss://`` URI.
        options: storage options passed to obstore (credentials, endpoint, region, ...).
    """

    def __init__(self, root: str, options: Mapping[str, str] | None = None):
        self.root = normalize_table_uri(root)
        self.options = dict(options or {})
        self.is_local = self.root.startswith("file://")
        if self.is_local:
            self.local_root = self.root[len("file://"):] or "/"
            if not os.path.isdir(self.local_root):
                raise TableNotFoundError(f"table path does not exist: {self.local_root}")
            self._store = LocalStore(self.local_root)
        else:
            self.local_root = None
            self._store = from_url(self.root, config=self._config(), client_options=self._client_options())

    def _config(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items()
                if not k.startswith("client.") and k.lower() not in _CLIENT_KEYS}

    def _client_options(self) -> dict[str, str]:
        opts = {k[len("client."):]: v for k, v in self.options.items() if k.startswith("client.")}
        if any(str(v).lower() == "true" for k, v in self.options.items() if k.lower() in _CLIENT_KEYS):
            opts.setdefault("allow_http", True)
        return opts

    def __getstate__(self) -> dict:
        return {"root": self.root, "options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"], state["options"])

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    # -- reading --------------------------------------------------------------------------
    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        """Objects whose key starts with ``prefix``, sorted, after ``start_after`` when given.

        On local disk only the prefix's own folder is read (``os.scandir``: no recursion into
        sub-folders, a few times faster than a generic listing); object stores list with a
        start-after offset.
        """
        if self.is_local:
            return iter(self._scan_local(prefix, start_after))
        kwargs = {"offset": start_after} if start_after else {}
        items: list[FileInfo] = []
        for chunk in obstore.list(self._store, prefix, **kwargs):
            for meta in chunk:
                items.append(_info(meta))
        items.sort(key=lambda f: f.key)
        return iter(items)

    def _scan_local(self, prefix: str, start_after: str | None) -> list[FileInfo]:
        folder, _, stem = prefix.rpartition("/")
        base = f"{folder}/" if folder else ""
        try:
            entries = os.scandir(os.path.join(self.local_root, folder))
        except FileNotFoundError:
            return []
        items = []
        with entries:
            for entry in entries:
                key = base + entry.name
                if not entry.name.startswith(stem) or (start_after is not None and key <= start_after):
                    continue
                try:
                    if not entry.is_file():
                        continue
                    st = entry.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                items.append(FileInfo(key, st.st_size, int(st.st_mtime * 1000)))
        items.sort(key=lambda f: f.key)
        return items

    def list_recursive(self, prefix: str = "") -> Iterator[FileInfo]:
        """Every object under ``prefix`` (unsorted, streamed)."""
        for chunk in obstore.list(self._store, prefix or None):
            for meta in chunk:
                yield _info(meta)

    def list_dir(self, prefix: str = "") -> tuple[list[str], list[FileInfo]]:
        """Immediate children of a folder: (sub-folder keys, objects)."""
        res = obstore.list_with_delimiter(self._store, prefix or None)
        return list(res["common_prefixes"]), [_info(m) for m in res["objects"]]

    def read(self, key: str) -> bytes:
        """The whole object. Raises FileNotFoundError when it does not exist."""
        return bytes(obstore.get(self._store, key).bytes())

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object."""
        return bytes(obstore.get_range(self._store, key, start=start, end=end))

    def head(self, key: str) -> FileInfo:
        """Size and modification time of one object."""
        return _info(obstore.head(self._store, key))

    def exists(self, key: str) -> bool:
        try:
            obstore.head(self._store, key)
            return True
        except FileNotFoundError:
            return False

    # -- writing --------------------------------------------------------------------------
    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create the object; raises AlreadyExistsError if it exists. Never overwrites."""
        obstore.put(self._store, key, data, mode="create")

    def put(self, key: str, data: bytes) -> None:
        """Create or overwrite the object (whole or not at all)."""
        obstore.put(self._store, key, data)

    def delete(self, key: str) -> None:
        obstore.delete(self._store, key)

    def delete_many(self, keys: list[str]) -> None:
        """Delete objects; keys already gone are ignored."""
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                obstore.delete(self._store, key)

    # -- paths ----------------------------------------------------------------------------
    def key_for_path(self, path: str) -> str | None:
        """Map a path as stored in the log (relative, URL-encoded; or absolute URI) to a key.

        Returns None for an absolute path outside this table's root.
        """
        parsed = urlparse(path)
        if not parsed.scheme:
            return unquote(path)
        absolute = normalize_table_uri(path) if parsed.scheme == "file" else path
        if absolute.startswith(self.root + "/"):
            return unquote(absolute[len(self.root) + 1:])
        return None

    def uri_for_key(self, key: str) -> str:
        return f"{self.root}/{quote(key)}" if not self.is_local else f"{self.root}/{key}"

    def local_path(self, key: str) -> str:
        assert self.local_root is not None
        return os.path.join(self.local_root, key)

    @property
    def store(self):
        """The underlying obstore store (for readers that accept one)."""
        return self._store


def _info(meta: Mapping) -> FileInfo:
    ts = meta["last_modified"]
    return FileInfo(key=meta["path"], size=int(meta["size"]), mtime_ms=int(ts.timestamp() * 1000))
