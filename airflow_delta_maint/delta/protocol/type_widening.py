"""Type widening (PROTOCOL.md "Type Widening"): which type changes a table records, whether each
is one the feature allows, and which data files still hold a column in its old type.

A widened column keeps its history in the ``delta.typeChanges`` metadata of the nearest struct
field: ``[{"fromType": ..., "toType": ..., "fieldPath": ...}]`` (``fieldPath`` names a map
key/value or array element; the preview also wrote ``tableVersion``). Files written before a
change hold the old type; readers cast them up. A rewrite reads them in their old type and
writes the current one, with statistics in the current type, so after OPTIMIZE with
``rewrite_type_widened`` no live file holds an old type and the feature can be dropped.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import CorruptLogError, UnsupportedFeatureError
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.schema import ArrayType, MapType, StructType, parse_schema, to_arrow_schema
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["TypeChange", "check_type_changes", "files_with_old_types", "footer_schema", "type_changes",
           "widening_supported"]

TYPE_CHANGES_KEY = "delta.typeChanges"
_INTEGRAL = ["byte", "short", "integer", "long"]
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
# the digits an integral type needs left of the decimal point
_INTEGRAL_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}


@dataclass(frozen=True)
class TypeChange:
    """One recorded type change: the column's physical path, the nested ``fieldPath`` (or ""),
    and the types before and after."""

    physical_path: tuple[str, ...]
    field_path: str
    from_type: str
    to_type: str

    @property
    def column(self) -> str:
        return ".".join(self.physical_path) + (f".{self.field_path}" if self.field_path else "")


def _decimal(name: str) -> tuple[int, int] | None:
    m = _DECIMAL.match(name.replace(" ", ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def widening_supported(from_type: str, to_type: str) -> bool:
    """Whether the type-widening feature allows ``from_type`` -> ``to_type`` (delta-spark's rules:
    integral to wider integral, float to double, byte/short/int to double, date to
    timestamp_ntz, decimal to a decimal with no fewer integer and fractional digits, and an
    integral type to a decimal with room for all its digits)."""
    f, t = from_type.strip().lower(), to_type.strip().lower()
    if f == t:
        return True
    if f in _INTEGRAL and t in _INTEGRAL:
        return _INTEGRAL.index(f) <= _INTEGRAL.index(t)
    if (f, t) in (("float", "double"), ("date", "timestamp_ntz")):
        return True
    if f in ("byte", "short", "integer") and t == "double":
        return True
    fd, td = _decimal(f), _decimal(t)
    if fd and td:
        return td[1] >= fd[1] and td[0] - td[1] >= fd[0] - fd[1]
    if f in _INTEGRAL and td:
        return td[0] - td[1] >= _INTEGRAL_DIGITS[f]
    return False


def _walk(dtype: Any, path: tuple[str, ...], out: list[TypeChange]) -> None:
    if isinstance(dtype, StructType):
        for f in dtype:
            for change in f.metadata.get(TYPE_CHANGES_KEY) or []:
                if not isinstance(change, dict) or "fromType" not in change or "toType" not in change:
                    raise CorruptLogError(f"unreadable {TYPE_CHANGES_KEY} metadata on column {f.name!r}: {change!r}")
                from_type, to_type = change["fromType"], change["toType"]
                if not isinstance(from_type, str) or not isinstance(to_type, str):
                    raise UnsupportedFeatureError(
                        f"column {f.name!r} records a type change of a non-primitive type ({from_type!r} -> "
                        f"{to_type!r}), which type widening does not define")
                out.append(TypeChange(path + (f.physical_name,), str(change.get("fieldPath") or ""), from_type,
                                      to_type))
            _walk(f.type, path + (f.physical_name,), out)
    elif isinstance(dtype, ArrayType):
        _walk(dtype.element_type, path, out)
    elif isinstance(dtype, MapType):
        _walk(dtype.key_type, path, out)
        _walk(dtype.value_type, path, out)


def type_changes(metadata: Metadata) -> list[TypeChange]:
    """Every type change the schema records, outermost columns first."""
    out: list[TypeChange] = []
    _walk(parse_schema(metadata), (), out)
    return out


def check_type_changes(metadata: Metadata) -> None:
    """Refuse a table whose schema records a type change the feature does not allow (a writer
    outside the protocol made it, and its old files cannot be read safely)."""
    bad = [c for c in type_changes(metadata) if not widening_supported(c.from_type, c.to_type)]
    if bad:
        listed = ", ".join(f"{c.column} {c.from_type} -> {c.to_type}" for c in bad)
        raise UnsupportedFeatureError(f"the table records type changes type widening does not allow: {listed}")


def _child(t: pa.DataType, part: str) -> pa.DataType | None:
    if pa.types.is_struct(t):
        i = t.get_field_index(part)
        return t.field(i).type if i >= 0 else None
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and part == "element":
        return t.value_type
    if pa.types.is_map(t) and part in ("key", "value"):
        return t.key_type if part == "key" else t.item_type
    return None


def _leaf(schema: pa.Schema, change: TypeChange) -> pa.DataType | None:
    if change.physical_path[0] not in schema.names:
        return None
    t: pa.DataType | None = schema.field(change.physical_path[0]).type
    for part in list(change.physical_path[1:]) + ([p for p in change.field_path.split(".") if p]):
        t = _child(t, part) if t is not None else None
    return t


def _same(a: pa.DataType, b: pa.DataType) -> bool:
    if a == b:
        return True
    # the same logical type spelled differently in parquet readers
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return (a.tz is None) == (b.tz is None)
    return False


#: bytes read from a remote file's end in the first request: footers of files with few columns fit
FOOTER_GUESS = 64 << 10


def footer_schema(storage: Storage, key: str) -> pa.Schema:
    """The Arrow schema of a parquet data file, from its footer alone: a local file is opened, a
    remote one read by byte ranges from its end (one or two requests), never whole.

    Raises:
        FileNotFoundError: the file is missing.
        pyarrow.ArrowInvalid: the file is not parquet.
    """
    if storage.is_local:
        return pq.read_schema(storage.local_path(key))
    size = storage.head(key).size
    tail = storage.read_range(key, max(0, size - FOOTER_GUESS), size)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise pa.ArrowInvalid(f"not a parquet file: {key}")
    length = int.from_bytes(tail[-8:-4], "little") + 8
    if length > len(tail):
        tail = storage.read_range(key, max(0, size - length), size)
    # the magic number, then the footer: all a schema reader looks at
    return pq.read_schema(pa.BufferReader(b"PAR1" + tail[-length:]))


def files_with_old_types(storage: Storage, metadata: Metadata, adds: Sequence[dict], threads: int = 16) -> list[dict]:
    """The files among ``adds`` whose footer holds a widened column in a type other than the
    current one (read from each file's parquet footer, ``threads`` at a time; remote files by
    byte ranges, see :func:`footer_schema`)."""
    changes = type_changes(metadata)
    if not changes or not adds:
        return []
    expected = to_arrow_schema(metadata, physical=True)

    def old(add: dict) -> bool:
        key = storage.key_for_path(add["path"])
        if key is None:
            raise CorruptLogError(f"data file outside the table root: {add['path']}")
        try:
            schema = footer_schema(storage, key)
        except FileNotFoundError:
            raise CorruptLogError(f"data file referenced by the log is missing: {add['path']}") from None
        for change in changes:
            have, want = _leaf(schema, change), _leaf(expected, change)
            if have is not None and want is not None and not _same(have, want):
                return True
        return False

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        flags = list(pool.map(old, adds))
    return [a for a, f in zip(adds, flags) if f]

