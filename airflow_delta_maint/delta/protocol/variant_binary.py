"""Shredded variants rebuilt into the variant binary encoding (Parquet's variant spec, version 1), and
whole variants shredded into a shape (:func:`shred_values`).

A shredded variant holds part of its value in ``typed_value`` (a primitive, an object's fields each a
``value``/``typed_value`` pair, or an array's elements each such a pair) and the rest in ``value``
(binary; for a partly shredded object, the object of the fields not shredded). :func:`rebuild_values`
gives each row's whole variant as one binary value, column by column: primitives are encoded from
their Arrow type, objects merge the residual object's fields with the shredded ones (field ids from
the row's metadata dictionary, sorted by name), arrays are built from their elements. A shredded
field missing from the dictionary is appended to it (the row's metadata then changes). The values
are the same variants: only where their bytes live changes.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any, Callable

import pyarrow as pa

__all__ = ["NULL_VALUE", "encode_array", "encode_metadata", "encode_object", "object_fields", "parse_metadata",
           "primitive_values", "rebuild_values", "value_size"]

#: the variant null (a primitive of type 0)
NULL_VALUE = b"\x00"
_PRIMITIVE, _SHORT_STRING, _OBJECT, _ARRAY = 0, 1, 2, 3
#: the size of a primitive's payload by type id (binary and string: a 4-byte length, then the bytes)
_FIXED = {0: 0, 1: 0, 2: 0, 3: 1, 4: 2, 5: 4, 6: 8, 7: 8, 8: 5, 9: 9, 10: 17, 11: 4, 12: 8, 13: 8, 14: 4,
          17: 8, 18: 8, 19: 8, 20: 16}


def _le(data: bytes, pos: int, size: int) -> int:
    return int.from_bytes(data[pos:pos + size], "little")


def _width(n: int) -> int:
    """Bytes (1 to 4) an unsigned offset or id up to ``n`` takes."""
    return 1 if n < 1 << 8 else 2 if n < 1 << 16 else 3 if n < 1 << 24 else 4


# -- metadata ------------------------------------------------------------------------------------
def parse_metadata(metadata: bytes) -> tuple[list[bytes], bool]:
    """A metadata's dictionary of field names and whether it says they are sorted."""
    header = metadata[0]
    if header & 0x0F != 1:
        raise ValueError(f"variant metadata of version {header & 0x0F}; this project reads version 1")
    size = ((header >> 6) & 3) + 1
    n = _le(metadata, 1, size)
    offsets = [_le(metadata, 1 + size * (i + 1), size) for i in range(n + 1)]
    start = 1 + size * (n + 2)
    return [metadata[start + offsets[i]:start + offsets[i + 1]] for i in range(n)], bool(header & 0x10)


def encode_metadata(names: list[bytes], is_sorted: bool) -> bytes:
    """The metadata of a dictionary of field names."""
    data = b"".join(names)
    size = _width(max(len(data), len(names)))
    offsets, pos = [], 0
    for name in names:
        offsets.append(pos)
        pos += len(name)
    offsets.append(pos)
    header = 1 | (0x10 if is_sorted else 0) | ((size - 1) << 6)
    return bytes([header]) + b"".join(v.to_bytes(size, "little") for v in [len(names), *offsets]) + data


class _Dictionary:
    """One metadata's field names; a name it lacks is appended (the metadata then changes)."""

    def __init__(self, metadata: bytes):
        self.metadata = metadata
        self.names, self.is_sorted = parse_metadata(metadata)
        self.ids = {name: i for i, name in enumerate(self.names)}
        self.changed = False

    def id_of(self, name: bytes) -> int:
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.names)
            self.names.append(name)
            self.is_sorted, self.changed = False, True
        return i

    def encoded(self) -> bytes:
        return encode_metadata(self.names, self.is_sorted) if self.changed else self.metadata


# -- values --------------------------------------------------------------------------------------
def value_size(data: bytes, pos: int = 0) -> int:
    """The size in bytes of the variant value that starts at ``pos``."""
    header = data[pos]
    basic, vh = header & 3, header >> 2
    if basic == _SHORT_STRING:
        return 1 + vh
    if basic == _PRIMITIVE:
        if vh in (15, 16):
            return 5 + _le(data, pos + 1, 4)
        return 1 + _FIXED[vh]
    offset_size = (vh & 3) + 1
    if basic == _OBJECT:
        id_size, large = ((vh >> 2) & 3) + 1, (vh >> 4) & 1
    else:
        id_size, large = 0, (vh >> 2) & 1
    count_size = 4 if large else 1
    n = _le(data, pos + 1, count_size)
    offsets_at = pos + 1 + count_size + n * id_size
    head = 1 + count_size + n * id_size + (n + 1) * offset_size
    return head + _le(data, offsets_at + n * offset_size, offset_size)


def object_fields(data: bytes) -> list[tuple[int, bytes]]:
    """An object's fields as (field id, value bytes); empty when ``data`` is not an object."""
    header = data[0]
    if header & 3 != _OBJECT:
        return []
    vh = header >> 2
    offset_size, id_size, large = (vh & 3) + 1, ((vh >> 2) & 3) + 1, (vh >> 4) & 1
    count_size = 4 if large else 1
    n = _le(data, 1, count_size)
    ids_at = 1 + count_size
    offsets_at = ids_at + n * id_size
    values_at = offsets_at + (n + 1) * offset_size
    out = []
    for i in range(n):
        start = values_at + _le(data, offsets_at + i * offset_size, offset_size)
        out.append((_le(data, ids_at + i * id_size, id_size), data[start:start + value_size(data, start)]))
    return out


def _container(basic: int, flags: int, count: int, ids: bytes, values: list[bytes]) -> bytes:
    offsets, pos = [], 0
    for v in values:
        offsets.append(pos)
        pos += len(v)
    offsets.append(pos)
    size = _width(pos)
    large = count > 255
    if basic == _OBJECT:
        vh = (int(large) << 4) | flags | (size - 1)
    else:
        vh = (int(large) << 2) | (size - 1)
    return (bytes([(vh << 2) | basic]) + count.to_bytes(4 if large else 1, "little") + ids
            + b"".join(o.to_bytes(size, "little") for o in offsets) + b"".join(values))


def encode_object(fields: dict[bytes, bytes], dictionary: _Dictionary) -> bytes:
    """An object of ``fields`` (name -> value bytes), its field ids in the order of their names."""
    items = sorted(fields.items())
    ids = [dictionary.id_of(name) for name, _ in items]
    id_size = _width(max(ids, default=0))
    return _container(_OBJECT, (id_size - 1) << 2, len(items), b"".join(i.to_bytes(id_size, "little") for i in ids),
                      [v for _, v in items])


def encode_array(elements: list[bytes]) -> bytes:
    """An array of ``elements`` (value bytes each)."""
    return _container(_ARRAY, 0, len(elements), b"", elements)


# -- primitives from Arrow -------------------------------------------------------------------------
def _primitive(type_id: int, payload: bytes = b"") -> bytes:
    return bytes([type_id << 2]) + payload


def _string(raw: bytes) -> bytes:
    if len(raw) < 64:
        return bytes([(len(raw) << 2) | _SHORT_STRING]) + raw
    return _primitive(16, struct.pack("<I", len(raw)) + raw)


def _decimal(type_id: int, size: int, scale: int) -> Callable[[Decimal], bytes]:
    def encode(d: Decimal) -> bytes:
        unscaled = int(d.scaleb(scale).to_integral_exact())
        return _primitive(type_id, bytes([scale]) + unscaled.to_bytes(size, "little", signed=True))
    return encode


def _integers(arr: pa.Array, type_id: int, size: int) -> list[bytes | None]:
    return [None if v is None else _primitive(type_id, int(v).to_bytes(size, "little", signed=True))
            for v in arr.cast(pa.int32() if pa.types.is_date32(arr.type) else pa.int64()).to_pylist()]


def primitive_values(arr: pa.Array) -> list[bytes | None]:
    """Each value of a primitive Arrow array as a variant value (None where null).

    Raises:
        ValueError: a type shredding does not use.
    """
    t = arr.type
    ints = {pa.int8(): (3, 1), pa.int16(): (4, 2), pa.int32(): (5, 4), pa.int64(): (6, 8), pa.date32(): (11, 4),
            pa.time64("us"): (17, 8)}
    if t in ints:
        return _integers(arr, *ints[t])
    if pa.types.is_timestamp(t) and t.unit in ("us", "ns"):
        type_id = {("us", True): 12, ("us", False): 13, ("ns", True): 18, ("ns", False): 19}[(t.unit, t.tz is not None)]
        return _integers(arr, type_id, 8)
    encode: Callable[[Any], bytes]
    if pa.types.is_boolean(t):
        encode = lambda v: _primitive(1 if v else 2)  # noqa: E731
    elif pa.types.is_float32(t):
        encode = lambda v: _primitive(14, struct.pack("<f", v))  # noqa: E731
    elif pa.types.is_float64(t):
        encode = lambda v: _primitive(7, struct.pack("<d", v))  # noqa: E731
    elif pa.types.is_decimal(t):
        type_id, size = (8, 4) if t.precision <= 9 else (9, 8) if t.precision <= 18 else (10, 16)
        encode = _decimal(type_id, size, t.scale)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        encode = lambda v: _string(v.encode("utf-8"))  # noqa: E731
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        encode = lambda v: _primitive(15, struct.pack("<I", len(v)) + v)  # noqa: E731
    elif pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        encode = lambda v: _primitive(20, v)  # noqa: E731
    else:
        raise ValueError(f"a shredded variant holds {t}, which the variant encoding has no type for")
    return [None if v is None else encode(v) for v in arr.to_pylist()]


# -- rebuilding ----------------------------------------------------------------------------------
def _pair(group: pa.Array, n: int) -> tuple[list[bytes | None], pa.Array | None]:
    """The ``value`` (as a list) and ``typed_value`` of a shredded field or element group."""
    t = group.type
    parts = dict(zip((t.field(i).name for i in range(t.num_fields)), group.flatten()))
    value = parts["value"].to_pylist() if "value" in parts else [None] * n
    return value, parts.get("typed_value")


def _objects(values: list[bytes | None], typed: pa.Array, dicts: list[_Dictionary]) -> list[bytes | None]:
    t = typed.type
    fields = []
    for i, child in enumerate(typed.flatten()):
        value, sub = _pair(child, len(typed))
        fields.append((t.field(i).name.encode("utf-8"), _rebuild(value, sub, dicts) if sub is not None else value))
    valid = typed.is_valid().to_pylist()
    out: list[bytes | None] = []
    for r, ok in enumerate(valid):
        if not ok:
            out.append(values[r])
            continue
        d, residual = dicts[r], values[r]
        members = {d.names[fid]: raw for fid, raw in object_fields(residual)} if residual is not None else {}
        for name, built in fields:
            shredded = built[r]
            if shredded is not None:
                members[name] = shredded
        out.append(encode_object(members, d))
    return out


def _arrays(values: list[bytes | None], typed: pa.Array, dicts: list[_Dictionary]) -> list[bytes | None]:
    offsets = typed.offsets.to_pylist()
    base = offsets[0]
    elements = typed.flatten()
    element_dicts = [dicts[r] for r in range(len(typed)) for _ in range(offsets[r + 1] - offsets[r])]
    value, sub = _pair(elements, len(elements))
    built = _rebuild(value, sub, element_dicts) if sub is not None else value
    valid = typed.is_valid().to_pylist()
    return [encode_array([b if b is not None else NULL_VALUE for b in built[offsets[r] - base:offsets[r + 1] - base]])
            if ok else values[r] for r, ok in enumerate(valid)]


def _rebuild(values: list[bytes | None], typed: pa.Array, dicts: list[_Dictionary]) -> list[bytes | None]:
    """Each row's variant from its ``value`` and ``typed_value`` (None: missing)."""
    t = typed.type
    if pa.types.is_struct(t):
        return _objects(values, typed, dicts)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _arrays(values, typed, dicts)
    primitives = primitive_values(typed)
    return [p if p is not None else v for p, v in zip(primitives, values)]


def rebuild_values(values: list[bytes | None], typed: pa.Array, metadata: list[bytes | None]
                   ) -> tuple[list[bytes | None], list[bytes | None]]:
    """Each row's whole variant as one binary value (and its metadata, which changes only when a shredded
    field name was missing from it), for a variant column's ``value``, ``typed_value`` and ``metadata``.
    A row without metadata is a null variant column (left None); a row whose ``value`` and
    ``typed_value`` are both null is the variant null."""
    cache: dict[bytes, _Dictionary] = {}
    empty = _Dictionary(encode_metadata([], True))
    dicts = [cache.setdefault(m, _Dictionary(m)) if m is not None else empty for m in metadata]
    built = _rebuild(values, typed, dicts)
    out_values = [None if m is None else (b if b is not None else NULL_VALUE) for b, m in zip(built, metadata)]
    out_metadata = [None if m is None else d.encoded() for m, d in zip(metadata, dicts)]
    return out_values, out_metadata


# -- shredding -----------------------------------------------------------------------------------
def array_elements(data: bytes) -> list[bytes]:
    """An array's elements (value bytes each); empty when ``data`` is not an array."""
    header = data[0]
    if header & 3 != _ARRAY:
        return []
    vh = header >> 2
    offset_size, count_size = (vh & 3) + 1, 4 if (vh >> 2) & 1 else 1
    n = _le(data, 1, count_size)
    offsets_at = 1 + count_size
    values_at = offsets_at + (n + 1) * offset_size
    starts = [values_at + _le(data, offsets_at + i * offset_size, offset_size) for i in range(n)]
    return [data[s:s + value_size(data, s)] for s in starts]


_EXACT = {1: pa.bool_(), 2: pa.bool_(), 3: pa.int8(), 4: pa.int16(), 5: pa.int32(), 6: pa.int64(), 7: pa.float64(),
          14: pa.float32(), 11: pa.date32(), 15: pa.binary(), 16: pa.string()}


def _typed(raw: bytes, t: pa.DataType) -> tuple[bool, Any]:
    """The primitive ``raw`` as a value of ``t`` when its variant type is exactly ``t`` (else ``(False, None)``)."""
    import datetime as dt

    basic, type_id = raw[0] & 3, raw[0] >> 2
    if basic == _SHORT_STRING:
        return (True, raw[1:].decode("utf-8")) if pa.types.is_string(t) else (False, None)
    if basic != _PRIMITIVE:
        return False, None
    if pa.types.is_decimal(t) and type_id in (8, 9, 10):
        size = {8: 4, 9: 8, 10: 16}[type_id]
        scale, unscaled = raw[1], int.from_bytes(raw[2:2 + size], "little", signed=True)
        if scale != t.scale or len(str(abs(unscaled))) > t.precision:
            return False, None
        return True, Decimal(unscaled).scaleb(-scale)
    if _EXACT.get(type_id) != t:
        return False, None
    payload = raw[1:]
    if type_id in (1, 2):
        return True, type_id == 1
    if type_id in (3, 4, 5, 6):
        return True, int.from_bytes(payload[:_FIXED[type_id]], "little", signed=True)
    if type_id == 7:
        return True, struct.unpack("<d", payload[:8])[0]
    if type_id == 14:
        return True, struct.unpack("<f", payload[:4])[0]
    if type_id == 11:
        return True, dt.date(1970, 1, 1) + dt.timedelta(days=int.from_bytes(payload[:4], "little", signed=True))
    data = payload[4:4 + _le(payload, 0, 4)]
    return True, (data.decode("utf-8") if type_id == 16 else data)


def _pair_of(raw: bytes | None, field_type: pa.StructType, dictionary: _Dictionary) -> dict[str, Any]:
    i = field_type.get_field_index("typed_value")
    if raw is None:
        return {"value": None, "typed_value": None}
    if i < 0:
        return {"value": raw, "typed_value": None}
    value, typed = shred(raw, field_type.field(i).type, dictionary)
    return {"value": value, "typed_value": typed}


def shred(raw: bytes, shape: pa.DataType, dictionary: _Dictionary) -> tuple[bytes | None, Any]:
    """A variant value split into ``(value, typed_value)`` for the shredded ``shape`` (Parquet's shredding
    spec): an object into its shape's fields (each a value/typed_value pair, missing ones both null) and
    the object of the other fields; an array into its elements; a primitive of exactly the shape's type
    into ``typed_value``; anything else stays in ``value``."""
    if pa.types.is_struct(shape):
        if raw[0] & 3 != _OBJECT:
            return raw, None
        fields = {dictionary.names[fid]: v for fid, v in object_fields(raw)}
        typed = {}
        for f in shape:
            typed[f.name] = _pair_of(fields.pop(f.name.encode("utf-8"), None), f.type, dictionary)
        return (encode_object(fields, dictionary) if fields else None), typed
    if pa.types.is_list(shape) or pa.types.is_large_list(shape):
        if raw[0] & 3 != _ARRAY:
            return raw, None
        return None, [_pair_of(e, shape.value_type, dictionary) for e in array_elements(raw)]
    ok, value = _typed(raw, shape)
    return (None, value) if ok else (raw, None)


def shred_values(values: list[bytes | None], metadata: list[bytes | None], shape: pa.DataType
                 ) -> tuple[list[bytes | None], pa.Array]:
    """Whole variants (``value`` and ``metadata`` per row; None: a null column) shredded into ``shape``:
    the rows' ``value`` and their ``typed_value`` array."""
    cache: dict[bytes, _Dictionary] = {}
    out_values: list[bytes | None] = []
    typed: list[Any] = []
    for raw, m in zip(values, metadata):
        if raw is None or m is None:
            out_values.append(raw)
            typed.append(None)
            continue
        value, t = shred(raw, shape, cache.setdefault(m, _Dictionary(m)))
        out_values.append(value)
        typed.append(t)
    return out_values, pa.array(typed, shape)
