"""Thrift's compact protocol, decoded and encoded from a field table (``format.py``).

A decoded struct keeps every field the table knows by id, and every field it does not know (or
that arrives with another wire type than the table says) as its raw encoded bytes, re-emitted
unchanged: decode then encode gives back the writer's bytes, whatever newer fields it wrote.

Why our own codec and not a library: the footer must be decoded in Spark's Python workers, which
have pyarrow, numpy, obstore and pyroaring and may lack anything else. fastparquet's thrift
classes need its C extension and the whole package; the ``thrift`` package needs code generated
by the thrift compiler from ``parquet.thrift`` (and a compiled accelerator to be fast); thriftpy2
parses the IDL at run time but drops fields the IDL does not name, so a footer written by a newer
writer would lose them. The compact protocol is small (varints, zigzag, field headers as deltas),
and a field table covers parquet-format in a page.
"""

from __future__ import annotations

import struct
from typing import Any, Iterator

from airflow_delta_maint.delta.errors import DeltaError

from airflow_delta_maint.delta.parquet.thrift_spec import (BINARY, BOOL, BYTE, DOUBLE, I16, I32, I64, LIST, STRING,
                                                           WIRE_BINARY, WIRE_BYTE, WIRE_DOUBLE, WIRE_FALSE, WIRE_I16,
                                                           WIRE_I32, WIRE_I64, WIRE_LIST, WIRE_STRUCT, WIRE_TRUE, Field,
                                                           ListOf, StructSpec, wire_of)

__all__ = ["BINARY", "BOOL", "BYTE", "DOUBLE", "I16", "I32", "I64", "LIST", "STRING", "Field", "ListOf",
           "ThriftDecodeError", "Struct", "StructSpec", "decode", "encode", "skip_struct"]

# module globals, short: the decoding loop compares wire types with them
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _STRUCT = (
    WIRE_TRUE, WIRE_FALSE, WIRE_BYTE, WIRE_I16, WIRE_I32, WIRE_I64, WIRE_DOUBLE, WIRE_BINARY, WIRE_LIST, WIRE_STRUCT)
_STOP, _SET, _MAP, _UUID = 0, 10, 11, 13
_DOUBLE_FORMAT = struct.Struct("<d")


class ThriftDecodeError(DeltaError):
    """Bytes that are not a struct of Thrift's compact protocol."""


class _Lazy:
    """A field value still encoded (decoded when first read)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes):
        self.raw = raw


class Struct:
    """A decoded struct: known fields by id (``values``), unknown ones as raw bytes (``unknown``,
    id -> (wire type, bytes)). Fields are read and set by name; setting None removes a field."""

    __slots__ = ("spec", "values", "unknown")

    def __init__(self, spec: StructSpec, values: dict[int, Any] | None = None,
                 unknown: dict[int, tuple[int, bytes]] | None = None):
        self.spec = spec
        self.values = values if values is not None else {}
        self.unknown = unknown

    def get(self, name: str, default: Any = None) -> Any:
        fid = self.spec.ids[name]
        value = self.values.get(fid, default)
        return self._decoded(fid, value) if type(value) is _Lazy else value

    def __getitem__(self, name: str) -> Any:
        fid = self.spec.ids[name]
        value = self.values[fid]
        return self._decoded(fid, value) if type(value) is _Lazy else value

    def _decoded(self, fid: int, lazy: _Lazy) -> Any:
        f = self.spec.fields[fid]
        value = _value(lazy.raw, 0, f.wire, f.kind)[0]
        self.values[fid] = value
        return value

    def materialize(self) -> "Struct":
        """Decode every field still encoded, here and below; returns self."""
        for fid, value in list(self.values.items()):
            if type(value) is _Lazy:
                value = self._decoded(fid, value)
            for v in (value if isinstance(value, list) else [value]):
                if isinstance(v, Struct):
                    v.materialize()
        return self

    def __setitem__(self, name: str, value: Any) -> None:
        fid = self.spec.ids[name]
        if value is None:
            self.values.pop(fid, None)
        else:
            self.values[fid] = value
        if self.unknown:
            self.unknown.pop(fid, None)

    def __contains__(self, name: str) -> bool:
        return self.spec.ids[name] in self.values

    def copy(self) -> "Struct":
        """A shallow copy (field values shared)."""
        return Struct(self.spec, dict(self.values), dict(self.unknown) if self.unknown else None)

    def items(self) -> Iterator[tuple[str, Any]]:
        for fid in list(self.values):
            name = self.spec.fields[fid].name
            yield name, self.get(name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Struct) and self.spec is other.spec \
            and self.materialize().values == other.materialize().values \
            and (self.unknown or {}) == (other.unknown or {})

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.items())
        return f"{self.spec.name}({inner}{', +unknown' if self.unknown else ''})"


# -- decoding ------------------------------------------------------------------------------------
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    result, shift = b & 0x7F, 7
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _value(data: bytes, pos: int, wire: int, kind: Any) -> tuple[Any, int]:
    """One value of a known kind at ``pos`` (not a bool field: its value is in the header)."""
    if wire == _I32 or wire == _I64 or wire == _I16:
        n, pos = _varint(data, pos)
        return (n >> 1) ^ -(n & 1), pos
    if wire == _BINARY:
        n, pos = _varint(data, pos)
        end = pos + n
        if end > len(data):
            raise IndexError("binary past the end")
        raw = data[pos:end]
        return (raw.decode("utf-8", "surrogateescape") if kind == STRING else raw), end
    if wire == _STRUCT:
        return _struct(data, pos, kind)
    if wire == _LIST:
        return _list(data, pos, kind.element)
    if wire == _BYTE:
        b = data[pos]
        return (b - 256 if b > 127 else b), pos + 1
    if wire == _DOUBLE:
        return _DOUBLE_FORMAT.unpack_from(data, pos)[0], pos + 8
    raise ThriftDecodeError(f"unexpected wire type {wire}")


def _list(data: bytes, pos: int, element: Any) -> tuple[list, int]:
    head = data[pos]
    pos += 1
    size, wire = head >> 4, head & 0x0F
    if size == 15:
        size, pos = _varint(data, pos)
    if wire == _TRUE or wire == _FALSE:
        out_b = [b == _TRUE for b in data[pos:pos + size]]
        return out_b, pos + size
    out = []
    for _ in range(size):
        v, pos = _value(data, pos, wire, element)
        out.append(v)
    return out, pos


def _struct(data: bytes, pos: int, spec: StructSpec) -> tuple[Struct, int]:
    values: dict[int, Any] = {}
    unknown: dict[int, tuple[int, bytes]] | None = None
    fields = spec.fields
    fid = 0
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return Struct(spec, values, unknown), pos
        wire, delta = head & 0x0F, head >> 4
        if delta:
            fid += delta
        else:
            n, pos = _varint(data, pos)
            fid = (n >> 1) ^ -(n & 1)
        f = fields.get(fid)
        if (wire == _TRUE or wire == _FALSE) and f is not None and f.wire == _TRUE:
            values[fid] = wire == _TRUE
            continue
        if f is not None and f.wire == wire:
            if f.lazy:
                start = pos
                pos = _skip(data, pos, wire)
                values[fid] = _Lazy(data[start:pos])
                continue
            if wire == _I32 or wire == _I64 or wire == _I16:  # inlined: most of a footer's fields
                n = data[pos]
                pos += 1
                if n >= 0x80:
                    n, pos = _varint(data, pos - 1)
                values[fid] = (n >> 1) ^ -(n & 1)
                continue
            if wire != _LIST or _list_wire(data, pos) == f.element_wire:
                values[fid], pos = _value(data, pos, wire, f.kind)
                continue
        start = pos
        pos = _skip(data, pos, wire)
        if unknown is None:
            unknown = {}
        unknown[fid] = (wire, data[start:pos])


def _list_wire(data: bytes, pos: int) -> int:
    wire = data[pos] & 0x0F
    return _TRUE if wire == _FALSE else wire


def _skip(data: bytes, pos: int, wire: int) -> int:
    """The position after a value of ``wire`` type starting at ``pos``."""
    if wire in (_TRUE, _FALSE):
        return pos
    if wire in (_I16, _I32, _I64):
        return _varint(data, pos)[1]
    if wire == _BYTE:
        return pos + 1
    if wire == _DOUBLE:
        return pos + 8
    if wire == _UUID:
        return pos + 16
    if wire == _BINARY:
        n, pos = _varint(data, pos)
        return pos + n
    if wire in (_LIST, _SET):
        head = data[pos]
        pos += 1
        size, element = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        if element in (_TRUE, _FALSE):
            return pos + size
        if element in (_I16, _I32, _I64):  # varints: count the bytes that end one
            for _ in range(size):
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            return pos
        for _ in range(size):
            pos = _skip(data, pos, element)
        return pos
    if wire == _MAP:
        size, pos = _varint(data, pos)
        if not size:
            return pos
        kv = data[pos]
        pos += 1
        for _ in range(size):
            pos = _skip(data, pos, _bool_wire(kv >> 4))
            pos = _skip(data, pos, _bool_wire(kv & 0x0F))
        return pos
    if wire == _STRUCT:
        return skip_struct(data, pos)
    raise ThriftDecodeError(f"unknown wire type {wire}")


def _bool_wire(wire: int) -> int:
    """Inside containers a bool takes one byte."""
    return _BYTE if wire in (_TRUE, _FALSE) else wire


def skip_struct(data: bytes, pos: int) -> int:
    """The position after the struct starting at ``pos``, whatever its fields."""
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return pos
        if not head >> 4:
            pos = _varint(data, pos)[1]
        wire = head & 0x0F
        if wire == _I64 or wire == _I32 or wire == _I16:  # inlined: most fields are varints
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        elif wire == _BINARY:
            n, pos = _varint(data, pos)
            pos += n
        elif wire != _TRUE and wire != _FALSE:
            pos = _skip(data, pos, wire)


def decode(data: bytes, spec: StructSpec, pos: int = 0) -> tuple[Struct, int]:
    """The struct of ``spec`` encoded at ``pos`` in ``data``, and the position after it."""
    try:
        return _struct(data, pos, spec)
    except (IndexError, RecursionError, struct.error) as e:
        raise ThriftDecodeError(f"truncated or corrupt {spec.name}: {e}") from None


# -- encoding ------------------------------------------------------------------------------------
def _put_varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_value(out: bytearray, wire: int, kind: Any, v: Any) -> None:
    if wire == _I32 or wire == _I64 or wire == _I16:
        _put_varint(out, (v << 1) ^ (v >> 63))
    elif wire == _BINARY:
        raw = v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v)
        _put_varint(out, len(raw))
        out += raw
    elif wire == _STRUCT:
        _put_struct(out, v)
    elif wire == _LIST:
        _put_list(out, kind.element, v)
    elif wire == _BYTE:
        out.append(v & 0xFF)
    elif wire == _DOUBLE:
        out += _DOUBLE_FORMAT.pack(v)
    else:
        raise ValueError(f"cannot encode wire type {wire}")


def _put_list(out: bytearray, element: Any, values: list) -> None:
    wire = wire_of(element)
    n = len(values)
    out.append((n << 4 | wire) if n < 15 else (0xF0 | wire))
    if n >= 15:
        _put_varint(out, n)
    if wire == _TRUE:
        out += bytes(_TRUE if v else _FALSE for v in values)
        return
    for v in values:
        _put_value(out, wire, element, v)


def _put_struct(out: bytearray, s: Struct) -> None:
    fields = s.spec.fields
    unknown = s.unknown
    ids = sorted(set(s.values) | set(unknown)) if unknown else sorted(s.values)
    last = 0
    for fid in ids:
        if fid in s.values:
            f = fields[fid]
            v = s.values[fid]
            wire = (_TRUE if v else _FALSE) if f.wire == _TRUE else f.wire
        else:
            wire, raw = unknown[fid]  # type: ignore[index]
        delta = fid - last
        if 0 < delta <= 15:
            out.append(delta << 4 | wire)
        else:
            out.append(wire)
            _put_varint(out, (fid << 1) ^ (fid >> 15))
        last = fid
        if fid in s.values:
            if type(v) is _Lazy:
                out += v.raw
            elif f.wire != _TRUE:
                _put_value(out, wire, f.kind, v)
        else:
            out += raw
    out.append(_STOP)


def encode(s: Struct) -> bytes:
    """The compact-protocol bytes of ``s`` (fields in id order, unknown ones as they were read)."""
    out = bytearray()
    _put_struct(out, s)
    return bytes(out)
