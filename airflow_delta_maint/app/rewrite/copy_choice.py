"""Which inputs of a bin keep their row groups as they are (copied byte for byte) and which are
re-encoded, and the footer the output takes its schema from.

An input is copied only where the copy is exact: no deletion vector, the output's codec, the output's
physical schema (``delta/parquet``'s refusal check: names, types, repetitions, field ids, key-value
metadata that changes how rows read), not encrypted; under ``auto`` also every row group at least the
copy threshold in compressed bytes. Tables whose rewrite adds data of its own (materialized row ids,
clustering statistics) are re-encoded whole. Where new files hold the partition columns, so does the
reference: an input written without them (before ``materializePartitionColumns`` was enabled, say) differs
in its schema and is re-encoded, the partition values added. The reference is the footer pyarrow writes for the
table's physical schema; when every input of a bin is refused only for its schema or its key-value
metadata, one input's own footer may serve instead, if pyarrow reads that footer as exactly the
table's schema and every other input matches it (files of another writer, say decimals as INT64 or
Spark's calendar flags).
"""

from __future__ import annotations

import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.parquet.eligibility import codec_number, schema_difference
from airflow_delta_maint.delta.parquet.footer import MAGIC, Footer, ParquetFooterError, Source, read_footer
from airflow_delta_maint.delta.parquet.key_values import semantics_difference
from airflow_delta_maint.delta.parquet.row_group_copy import copy_refusal, reference_for_schema
from airflow_delta_maint.delta.plans.optimize_options import copy_threshold
from airflow_delta_maint.delta.protocol.geospatial_files import geo_reference

from .data_files import RewriteSpec, footer_source, nullable_schema
from .rewrite_counts import RewriteCounts
from .variant_columns import annotate_reference

__all__ = ["CopyChoice", "choose_copies", "input_source", "maps_exactly", "table_reason"]

#: footers read at once (each one ranged read on an object store)
FOOTER_READS = 8


@dataclass
class CopyChoice:
    """A bin's inputs: the footer of each one copied (None: re-encoded), the output's reference, and
    why the others fell back."""

    footers: list[Footer | None]
    reference: Footer | None = None
    counts: RewriteCounts = field(default_factory=RewriteCounts)

    @property
    def copies(self) -> int:
        return sum(1 for f in self.footers if f is not None)


def table_reason(spec: RewriteSpec) -> str | None:
    """Why no input of this rewrite can be copied, whatever its files (a fallback reason), or None."""
    if spec.row_tracking.hidden_columns:
        return "rowTracking"
    if spec.required_stats_columns:
        return "clustering"
    return None


def input_source(spec: RewriteSpec, add: dict) -> Source:
    """A data file to read by ranges: its local path, or the object read by ranged requests."""
    return footer_source(spec.storage, add)



def _footer(spec: RewriteSpec, add: dict) -> Footer | str:
    try:
        return read_footer(input_source(spec, add))
    except FileNotFoundError:
        raise CorruptLogError(f"data file referenced by the log is missing: {add['path']}") from None
    except ParquetFooterError:
        return "unreadableFooter"


def _reason(footer: Footer, reference: Footer, codec: int) -> str | None:
    """The fallback reason of an input against ``reference``, or None when it can be copied."""
    text = copy_refusal(footer, reference, codec)
    if text is None:
        return None
    if "encrypted" in text:
        return "encrypted"
    codecs = {cc["meta_data"].get("codec") for rg in footer.row_groups for cc in rg.get("columns", [])
              if cc.get("meta_data") is not None}
    if codecs and codecs != {codec}:
        return "codec"
    if schema_difference(footer.schema, reference.schema):
        return "schema"
    if semantics_difference(footer.key_value_metadata(), reference.key_value_metadata()):
        return "metadata"
    return "fileLayout"


def _small(footer: Footer, threshold: int) -> bool:
    return any(int(rg.get("total_compressed_size") or 0) < threshold for rg in footer.row_groups)


def maps_exactly(footer: Footer, schema: pa.Schema) -> bool:
    """Whether pyarrow reads the file of ``footer`` as exactly ``schema`` (names and types; nullability
    and field metadata aside). A top-level INT96 column (Spark's timestamps) reads as a UTC timestamp
    in microseconds, as the rewrite reads it."""
    tail = MAGIC + footer.raw + struct.pack("<I", len(footer.raw)) + MAGIC
    try:
        parquet = pq.ParquetFile(pa.BufferReader(tail), coerce_int96_timestamp_unit="us")
        read = parquet.schema_arrow
    except (pa.ArrowException, OSError):
        return False
    columns = parquet.schema
    int96 = {columns.column(i).path for i in range(len(columns)) if columns.column(i).physical_type == "INT96"}
    utc = pa.timestamp("us", tz="UTC")
    read = pa.schema([f.with_type(utc) if f.name in int96 and f.type == pa.timestamp("us") else f for f in read])
    return nullable_schema(read).equals(nullable_schema(schema), check_metadata=False)


def _own_reference(footers: list[Footer], spec: RewriteSpec, codec: int) -> Footer | None:
    """The footer of one input that every input matches and that reads as the table's schema."""
    for candidate in footers:
        if maps_exactly(candidate, spec.file_schema) and \
                all(copy_refusal(f, candidate, codec) is None for f in footers):
            return candidate
    return None


def choose_copies(spec: RewriteSpec, adds: list[dict]) -> CopyChoice:
    """Which of ``adds`` are copied, against which reference (``spec.copy_row_groups`` is ``auto`` or
    ``always``); the others' fallback reasons are counted."""
    counts = RewriteCounts()
    threshold = copy_threshold(spec.row_group_bytes) if spec.copy_row_groups == "auto" else 0
    wanted: list[int] = []
    for i, add in enumerate(adds):
        if add.get("deletionVector"):
            counts.fell_back("deletionVector")
        elif threshold and int(add.get("size") or 0) < threshold:  # a file smaller than the threshold
            counts.fell_back("smallRowGroups")
        else:
            wanted.append(i)
    footers: list[Footer | None] = [None] * len(adds)
    if not wanted:
        return CopyChoice(footers, None, counts)
    with ThreadPoolExecutor(max_workers=min(FOOTER_READS, len(wanted))) as pool:
        read: list[Any] = list(pool.map(lambda i: _footer(spec, adds[i]), wanted))
    codec = codec_number(spec.compression)
    reference = geo_reference(reference_for_schema(spec.file_schema, spec.compression), spec.metadata)
    reference = annotate_reference(reference, spec)
    reasons: dict[int, str | None] = {}
    for i, footer in zip(wanted, read):
        if isinstance(footer, str):
            reasons[i] = footer
        elif threshold and _small(footer, threshold):
            reasons[i] = "smallRowGroups"
        else:
            reasons[i] = _reason(footer, reference, codec)
    if len(wanted) == len(adds) and all(r in ("schema", "metadata") for r in reasons.values()):
        own = _own_reference(read, spec, codec)
        if own is not None:
            return CopyChoice(list(read), own, counts)
    for i, footer in zip(wanted, read):
        if reasons[i] is None:
            footers[i] = footer
        else:
            counts.fell_back(str(reasons[i]))
    return CopyChoice(footers, reference, counts)
