"""The parquet VARIANT logical type on a file's groups.

A variant column is a parquet group (``metadata`` and ``value`` binaries, and ``typed_value`` when
shredded) annotated with the VARIANT logical type (``specification_version`` 1), as delta-spark writes
it. pyarrow reads such a group as a plain struct and writes it back without the annotation, so the
rewrite puts it back on the footer: on a file pyarrow wrote (:func:`annotate_file`, the footer
rewritten in place: the pages stay where they are), on a reference footer (:func:`annotate`), or
taken from the reference onto the footer of pyarrow's bytes of a table (:func:`adopt_annotations`).

Groups are named by their path of element names below the root (``("v",)``, ``("s", "doc")``,
``("a", "list", "element")``).
"""

from __future__ import annotations

import os
from typing import Iterable

from airflow_delta_maint.delta.parquet.compact import Struct, StructSpec
from airflow_delta_maint.delta.parquet.footer import Footer, file_bytes, read_footer
from airflow_delta_maint.delta.parquet.format import LOGICAL_TYPE

__all__ = ["VARIANT_SPECIFICATION_VERSION", "adopt_annotations", "annotate", "annotate_file", "element_paths",
           "variant_paths"]

#: the version of the variant binary encoding delta-spark writes (and this project reads and writes)
VARIANT_SPECIFICATION_VERSION = 1

GroupPath = tuple[str, ...]


def _variant_type() -> Struct:
    kind = LOGICAL_TYPE.fields[16].kind
    assert isinstance(kind, StructSpec)
    variant = Struct(kind)
    variant["specification_version"] = VARIANT_SPECIFICATION_VERSION
    logical = Struct(LOGICAL_TYPE)
    logical["VARIANT"] = variant
    return logical


def element_paths(schema: list[Struct]) -> list[GroupPath]:
    """The path of each schema element (the root's is ``()``), in the footer's depth-first order."""
    paths: list[GroupPath] = []
    stack: list[tuple[GroupPath, int]] = []  # (a group's path, its children still to come)
    for el in schema:
        while stack and stack[-1][1] == 0:
            stack.pop()
        if not stack:
            path: GroupPath = ()
        else:
            parent, left = stack[-1]
            stack[-1] = (parent, left - 1)
            path = parent + (str(el.get("name")),)
        paths.append(path)
        children = int(el.get("num_children") or 0)
        if children:
            stack.append((path, children))
    return paths


def _is_variant(el: Struct) -> bool:
    logical = el.get("logicalType")
    return logical is not None and "VARIANT" in logical


def variant_paths(schema: list[Struct]) -> list[GroupPath]:
    """The paths of the groups annotated VARIANT, in schema order."""
    return [p for p, el in zip(element_paths(schema), schema) if _is_variant(el)]


def annotate(schema: list[Struct], paths: Iterable[GroupPath]) -> int:
    """Put the VARIANT logical type on the groups of ``schema`` at ``paths`` (in place); returns how
    many were not annotated before.

    Raises:
        ValueError: a path names no group of the schema.
    """
    wanted = set(paths)
    changed = 0
    for path, el in zip(element_paths(schema), schema):
        if path not in wanted:
            continue
        wanted.discard(path)
        if not el.get("num_children"):
            raise ValueError(f"{'.'.join(path)} is not a group: it cannot be a variant")
        if not _is_variant(el):
            el["logicalType"] = _variant_type()
            changed += 1
    if wanted:
        raise ValueError(f"no group {', '.join('.'.join(p) for p in sorted(wanted))} in the file's schema")
    return changed


def annotate_file(path: str | os.PathLike[str], paths: Iterable[GroupPath]) -> Footer:
    """Annotate the groups at ``paths`` of the local parquet file ``path`` VARIANT, its footer rewritten in
    place (nothing else moves); returns the new footer."""
    footer = read_footer(path)
    md = footer.metadata
    schema = md.get("schema") or []
    if not annotate(schema, paths):
        return footer
    md["schema"] = schema
    tail = file_bytes(md)
    start = footer.file_size - footer.length - 8
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(tail)
        fh.truncate()
    return read_footer(path)


def adopt_annotations(footer: Footer, reference: Footer) -> bool:
    """Put the reference's VARIANT annotations on ``footer``'s groups at the same paths (in place), for
    footers pyarrow wrote; returns whether any was added. Paths ``footer`` lacks are left alone (its
    schema differs anyway)."""
    mine = set(element_paths(footer.schema))
    wanted = [p for p in variant_paths(reference.schema) if p in mine]
    if not wanted:
        return False
    schema = footer.schema
    changed = annotate(schema, wanted) > 0
    if changed:
        footer.metadata["schema"] = schema
    return changed
