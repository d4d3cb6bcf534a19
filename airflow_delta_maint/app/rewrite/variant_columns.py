"""The variant columns of a rewrite: the shape each output takes, from its inputs' footers.

A table's variant columns may be shredded in some files and not in others, and shredded files may
differ in shape. Before a rewrite writes, its inputs' file schemas are read (one footer each, a few
at a time) and each variant column takes the shape ``delta/protocol/variant_layout.py`` chooses for
them: per bin for bin-packing and ``--target-files`` outputs, per run for Z-order and clustering
(whose outputs mix rows of every file). Tables without variant columns read nothing more.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.parquet.footer import Footer
from airflow_delta_maint.delta.parquet.variant_groups import annotate
from airflow_delta_maint.delta.protocol.variant_layout import layout_schema, variant_group_paths, variant_paths
from airflow_delta_maint.delta.storage.range_reader import RangeReader

from .data_files import RewriteSpec, footer_source

__all__ = ["annotate_reference", "with_variant_layout"]

#: footers read at once (each one ranged read on an object store)
SCHEMA_READS = 8


def _file_schema(spec: RewriteSpec, add: dict) -> pa.Schema:
    source = footer_source(spec.storage, add)
    try:
        return pq.read_schema(source)
    except FileNotFoundError:
        raise CorruptLogError(f"data file referenced by the log is missing: {add['path']}") from None
    finally:
        if isinstance(source, RangeReader):
            source.close()


def with_variant_layout(spec: RewriteSpec, adds: list[dict]) -> RewriteSpec:
    """``spec`` with its variant columns in the shape chosen for the inputs ``adds`` (``spec`` itself when the
    table has no variant column)."""
    base = spec.write_schema if spec.variant_layout is None else None
    if base is None or not variant_paths(base) or not adds:
        return spec
    base = pa.schema(list(base)[:len(base) - len(spec.row_tracking.hidden_columns)], metadata=base.metadata)
    with ThreadPoolExecutor(max_workers=min(SCHEMA_READS, len(adds))) as pool:
        schemas = list(pool.map(lambda add: _file_schema(spec, add), adds))
    return dataclasses.replace(spec, variant_layout=layout_schema(base, schemas), _schema=None)


def annotate_reference(reference: Footer, spec: RewriteSpec) -> Footer:
    """A reference footer pyarrow wrote for ``spec.file_schema``, its variant groups annotated VARIANT."""
    paths = variant_group_paths(spec.file_schema)
    if paths:
        schema = reference.schema
        annotate(schema, paths)
        reference.metadata["schema"] = schema
    return reference
