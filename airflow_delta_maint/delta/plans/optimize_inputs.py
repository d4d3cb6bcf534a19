"""OPTIMIZE's inputs checked before any file is read: a schema whose files can be rewritten, the
file sizes, the Z-order columns and the partition predicate of ``where``.

:mod:`~airflow_delta_maint.delta.plans.optimize` re-exports these names; the plans and the skip
checks call them.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow_delta_maint.delta.errors import InvalidArgumentError, UnsupportedFeatureError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.plans.predicate import BoolOp, Cmp, Expr, In, Not, check_partition_columns, evaluate, parse_predicate
from airflow_delta_maint.delta.protocol.schema import (Column, PrimitiveType, parse_partition_value, parse_schema,
                                                       resolve_column)
from airflow_delta_maint.delta.protocol.type_widening import check_type_changes

__all__ = ["GIB", "check_rewritable_schema", "file_size_settings", "partition_filter", "validate_zorder"]

GIB = 1 << 30


def _void_columns(t: Any, name: str) -> list[str]:
    """Columns of Spark's ``void`` type (NullType) in a schema type, by dotted name."""
    if t == "void":
        return [name]
    if not isinstance(t, dict):
        return []
    kind = t.get("type")
    if kind == "struct":
        return [c for f in t.get("fields") or () if isinstance(f, dict)
                for c in _void_columns(f.get("type"), f"{name}.{f.get('name')}" if name else str(f.get("name")))]
    if kind == "array":
        return _void_columns(t.get("elementType"), f"{name}.element")
    if kind == "map":
        return _void_columns(t.get("keyType"), f"{name}.key") + _void_columns(t.get("valueType"), f"{name}.value")
    return []


def check_rewritable_schema(snapshot: Snapshot) -> None:
    """Refuse, before any Spark work, a table whose data files OPTIMIZE cannot rewrite: a column of
    Spark's ``void`` type (never stored in data files, no parquet type to write it as) or a type
    this project does not know. Reading jobs (inspect, checkpoints, log compaction) accept both."""
    void = _void_columns(snapshot.metadata.schema, "")
    if void:
        shown = ", ".join(repr(c) for c in void)
        raise UnsupportedFeatureError(
            f"cannot OPTIMIZE {snapshot.storage.root}: column{'s' if len(void) > 1 else ''} {shown} "
            f"{'have' if len(void) > 1 else 'has'} Spark's void type, which data files do not store; drop "
            "the column or cast it to a concrete type first")
    parse_schema(snapshot.metadata)
    check_type_changes(snapshot.metadata)


def file_size_settings(snapshot: TableHeader, min_file_size: int | None, target_file_size: int | None) -> tuple[int, int]:
    """Defaults: the table's ``delta.targetFileSize``, else 1 GiB (delta-spark's defaults)."""
    default = snapshot.properties.target_file_size or GIB
    max_size = int(target_file_size) if target_file_size is not None else default
    min_size = int(min_file_size) if min_file_size is not None else min(default, max_size)
    if min_size <= 0 or max_size <= 0:
        raise InvalidArgumentError(f"file sizes must be positive (min {min_size}, max {max_size})")
    return min_size, max_size


def validate_zorder(snapshot: TableHeader, columns: Sequence[str]) -> list[Column]:
    """Z-order columns must exist and must not be partition, geospatial or variant columns."""
    partition = {c.lower() for c in snapshot.partition_columns}
    out: list[Column] = []
    for name in columns:
        if name.lower() in partition:
            raise InvalidArgumentError(f"cannot Z-order by partition column {name!r}: partition columns are"
                                       " already clustered; Z-order by data columns instead")
        column = resolve_column(snapshot.metadata.schema_string, name)
        if isinstance(column.type, PrimitiveType) and column.type.geo is not None:
            raise InvalidArgumentError(f"cannot Z-order by {column.type.geo.kind} column {name!r}: geospatial values "
                                       "have no order; Z-order by other columns")
        if isinstance(column.type, PrimitiveType) and column.type.name == "variant":
            raise InvalidArgumentError(f"cannot Z-order by variant column {name!r}: variant values have no order; "
                                       "Z-order by other columns")
        out.append(column)
    if len({c.logical_path for c in out}) != len(out):
        raise InvalidArgumentError(f"Z-order columns repeat: {', '.join(columns)}")
    return out


def partition_filter(snapshot: TableHeader, predicate: str | None):
    """A test of a file's partition values against the ``where`` predicate (None: no predicate);
    refuses a predicate on other than partition columns, or with a literal its column cannot hold."""
    if not predicate:
        return None
    expr: Expr = parse_predicate(predicate)
    mapping = check_partition_columns(expr, snapshot.partition_columns)
    schema = parse_schema(snapshot.metadata.schema_string)
    types = {c: schema.field(mapping[c]).type for c in mapping}

    def coerce(column: str, literal: Any) -> Any:
        if literal is None:
            return None
        try:
            return parse_partition_value(str(literal).lower() if isinstance(literal, bool) else str(literal),
                                         types[column])
        except (ValueError, TypeError, InvalidArgumentError) as exc:
            raise InvalidArgumentError(f"invalid literal {literal!r} for column {column} in predicate "
                                       f"{predicate!r}: {exc}") from None

    def matches(values: dict[str, str | None]) -> bool:
        typed = {c: parse_partition_value(values.get(mapping[c]), types[c]) for c in mapping}
        return evaluate(expr, typed, coerce) is True

    for column, literal in _literals(expr):  # bad literals fail now, before any file is read
        coerce(column, literal)
    return matches


def _literals(expr: Expr):
    """(column, literal) of every comparison in the predicate."""
    if isinstance(expr, Cmp):
        yield expr.column, expr.value
    elif isinstance(expr, In):
        for value in expr.values:
            yield expr.column, value
    elif isinstance(expr, Not):
        yield from _literals(expr.part)
    elif isinstance(expr, BoolOp):
        for part in expr.parts:
            yield from _literals(part)
