"""Variant columns as a rewrite reads and writes them: their Arrow shapes, shredded and not.

A Delta ``variant`` is stored as a parquet group that pyarrow reads as a struct: unshredded, ``value``
and ``metadata`` (required binaries, in that order, as delta-spark writes them); shredded (the
Parquet variant shredding spec), ``metadata`` (required), ``value`` (optional: what ``typed_value``
does not hold) and ``typed_value`` (optional, the shredded part; its shape is the file's choice).

The rewrite writes one shape per variant column and output file, chosen from its inputs
(:func:`layout_schema`): the unshredded one when no input is shredded, else the shredded shape most
inputs hold. Rows are carried into it without a value changing (:func:`conform_variant`): a row of a
file shredded into the same shape is copied as it is; a row of an unshredded file is shredded into the
shape as the spec asks (an object into the shape's fields and a residual object of the others, an array
into its elements, a primitive of exactly the shape's type into ``typed_value``, anything else left in
``value``); a row of a file shredded into another shape is first rebuilt into one variant value, then
shredded the same way (:mod:`.variant_binary`). Required fields stay required.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

import pyarrow as pa

from airflow_delta_maint.delta.protocol.variant_binary import rebuild_values, shred_values

__all__ = ["UNSHREDDED", "conform_variant", "is_variant_struct", "layout_schema", "shape_of", "shredded_type",
           "variant_group_paths", "variant_paths"]

#: an unshredded variant as pyarrow reads delta-spark's files (and as ``to_arrow_schema`` maps ``variant``)
UNSHREDDED = pa.struct([pa.field("value", pa.binary(), nullable=False),
                        pa.field("metadata", pa.binary(), nullable=False)])

ArrowPath = tuple[str, ...]


def is_variant_struct(t: pa.DataType) -> bool:
    """Whether ``t`` is a variant's struct: binary ``metadata`` and ``value``, and ``typed_value`` if shredded."""
    if not pa.types.is_struct(t):
        return False
    names = {t.field(i).name for i in range(t.num_fields)}
    if names not in ({"value", "metadata"}, {"value", "metadata", "typed_value"}):
        return False
    return all(pa.types.is_binary(t.field(n).type) or pa.types.is_large_binary(t.field(n).type)
               for n in ("value", "metadata"))


def shape_of(t: pa.StructType) -> pa.DataType | None:
    """A variant struct's ``typed_value`` type (None: unshredded)."""
    i = t.get_field_index("typed_value")
    return t.field(i).type if i >= 0 else None


def shredded_type(shape: pa.DataType | None) -> pa.StructType:
    """The variant struct of a shape, in delta-spark's field order and nullability."""
    if shape is None:
        return UNSHREDDED
    return pa.struct([pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary()),
                      pa.field("typed_value", shape)])


def variant_paths(schema: pa.Schema) -> list[ArrowPath]:
    """The paths, through top-level columns and struct fields, of the variant columns of a write schema
    (the table's, as ``to_arrow_schema`` maps it)."""
    out: list[ArrowPath] = []

    def walk(t: pa.DataType, path: ArrowPath) -> None:
        if t == UNSHREDDED:
            out.append(path)
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i).type, path + (t.field(i).name,))

    for f in schema:
        walk(f.type, (f.name,))
    return out


def variant_group_paths(schema: pa.Schema) -> list[ArrowPath]:
    """The parquet paths of every variant group of a file pyarrow writes with ``schema`` (through structs,
    lists as ``list.element`` and maps as ``key_value.key``/``value``)."""
    out: list[ArrowPath] = []

    def walk(t: pa.DataType, path: ArrowPath) -> None:
        if is_variant_struct(t):
            out.append(path)
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i).type, path + (t.field(i).name,))
        elif pa.types.is_map(t):
            walk(t.key_type, path + ("key_value", "key"))
            walk(t.item_type, path + ("key_value", "value"))
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            walk(t.value_type, path + ("list", "element"))

    for f in schema:
        walk(f.type, (f.name,))
    return out


def _type_at(schema: pa.Schema, path: ArrowPath) -> pa.DataType | None:
    if schema.get_field_index(path[0]) < 0:
        return None
    t = schema.field(path[0]).type
    for name in path[1:]:
        if not pa.types.is_struct(t) or t.get_field_index(name) < 0:
            return None
        t = t.field(t.get_field_index(name)).type
    return t


def _replace(t: pa.DataType, path: ArrowPath, new: pa.DataType) -> pa.DataType:
    if not path:
        return new
    fields = [f.with_type(_replace(f.type, path[1:], new)) if f.name == path[0] else f for f in t]
    return pa.struct(fields)


def _choose(shapes: list[pa.DataType | None]) -> pa.DataType | None:
    """The shredded shape most inputs hold (the first seen on a tie); None when none is shredded."""
    seen: list[pa.DataType] = []
    counts: Counter[int] = Counter()
    for s in shapes:
        if s is None:
            continue
        for i, known in enumerate(seen):
            if known.equals(s):
                counts[i] += 1
                break
        else:
            seen.append(s)
            counts[len(seen) - 1] += 1
    if not seen:
        return None
    best = max(counts.values())
    return seen[min(i for i, c in counts.items() if c == best)]


def layout_schema(schema: pa.Schema, file_schemas: Iterable[pa.Schema]) -> pa.Schema:
    """``schema`` (a write schema with unshredded variants) with each variant column in the shape chosen
    from the inputs' file schemas (as pyarrow reads them); inputs lacking a column do not vote."""
    files = list(file_schemas)
    out = schema
    for path in variant_paths(schema):
        shapes = []
        for fs in files:
            t = _type_at(fs, path)
            if t is not None and is_variant_struct(t):
                shapes.append(shape_of(t))
        shape = _choose(shapes)
        if shape is None:
            continue
        top = out.get_field_index(path[0])
        field = out.field(top)
        out = out.set(top, field.with_type(_replace(field.type, path[1:], shredded_type(shape))))
    return out


def _filled(arr: pa.Array, nullable: bool) -> pa.Array:
    """A required binary child: the slots under null groups hold empty bytes (pyarrow refuses nulls in a
    required column even where its parent is null; readers never see those slots)."""
    if nullable or not arr.null_count:
        return arr
    return arr.fill_null(b"")


def conform_variant(arr: pa.Array | pa.ChunkedArray, target: pa.StructType) -> pa.Array:
    """A variant column read from a file, in the variant struct ``target`` (see the module's docstring)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    src = arr.type
    mask = arr.is_null() if arr.null_count else None
    parts = {src.field(i).name: part for i, part in enumerate(arr.flatten())}
    source_shape, target_shape = shape_of(src), shape_of(target)
    value, typed = parts["value"], parts.get("typed_value")
    if source_shape is not None and (target_shape is None or not source_shape.equals(target_shape)):
        assert typed is not None
        values, metadata = rebuild_values(value.to_pylist(), typed, parts["metadata"].to_pylist())
        value, parts["metadata"] = pa.array(values, pa.binary()), pa.array(metadata, pa.binary())
        typed = None
    if typed is None and target_shape is not None:  # whole variants shredded into the target's shape
        values, typed = shred_values(value.to_pylist(), parts["metadata"].to_pylist(), target_shape)
        value = pa.array(values, pa.binary())
    children = []
    for f in target:
        if f.name == "typed_value":
            child = typed if typed is not None else pa.nulls(len(arr), f.type)
        else:
            child = _filled(parts["metadata"] if f.name == "metadata" else value, f.nullable)
        children.append(child.cast(f.type) if not child.type.equals(f.type) else child)
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
