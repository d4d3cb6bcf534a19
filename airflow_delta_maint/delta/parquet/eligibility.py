"""Whether a file's row groups can be copied byte for byte into a file of a reference schema:
the same physical schema, the codec wanted, nothing encrypted, every column chunk in the file.
Each check answers with the reason it refuses (a sentence), or None."""

from __future__ import annotations

from airflow_delta_maint.delta.parquet.compact import Struct, encode
from airflow_delta_maint.delta.parquet.footer import Footer
from airflow_delta_maint.delta.parquet.format import CODECS, PHYSICAL_TYPES

__all__ = ["chunk_range", "codec_number", "refusal", "schema_difference"]

_ELEMENT_PARTS = ("type", "type_length", "repetition_type", "num_children", "converted_type", "scale",
                  "precision", "field_id", "logicalType")


def codec_number(codec: str) -> int:
    """The CompressionCodec value of a codec named as pyarrow names it (``none`` is uncompressed,
    ``lz4`` is LZ4_RAW, as pyarrow writes it)."""
    name = {"none": "uncompressed", "lz4": "lz4_raw"}.get(codec.lower(), codec.lower())
    if name not in CODECS:
        raise ValueError(f"unknown parquet codec {codec!r}; known: {', '.join(CODECS)}")
    return CODECS.index(name)


def _element_text(el: Struct) -> str:
    parts = []
    for name in _ELEMENT_PARTS:
        value = el.get(name)
        if name == "type" and value is not None:
            value = PHYSICAL_TYPES[value] if 0 <= value < len(PHYSICAL_TYPES) else value
        if value is not None:
            parts.append(f"{name}={value!r}")
    return ", ".join(parts)


def schema_difference(schema: list[Struct], reference: list[Struct]) -> str | None:
    """Where ``schema`` differs physically from ``reference`` (names, types, repetitions, logical and
    converted types, decimal scale and precision, field ids; the root's name aside), or None."""
    if len(schema) != len(reference):
        return f"the schema has {len(schema) - 1} fields, the reference {len(reference) - 1}"
    if (schema[0].get("num_children") or 0) != (reference[0].get("num_children") or 0):
        return "the schema's top-level fields differ from the reference's in number"
    for i, (el, ref) in enumerate(zip(schema[1:], reference[1:]), start=1):
        if encode(el) == encode(ref):
            continue
        if el.get("name") != ref.get("name"):
            return f"schema field {i} is named {el.get('name')!r}, the reference's {ref.get('name')!r}"
        return (f"the field {el.get('name')!r} differs from the reference's: {_element_text(el)} "
                f"against {_element_text(ref)}")
    return None


def chunk_range(chunk: Struct) -> tuple[int, int]:
    """A column chunk's first byte and length: from its first page (dictionary, index or data)."""
    md = chunk["meta_data"]
    starts = [md["data_page_offset"]]
    for name in ("dictionary_page_offset", "index_page_offset"):
        offset = md.get(name)
        if offset is not None and 4 <= offset < starts[0]:
            starts.append(offset)
    return min(starts), md["total_compressed_size"]


def _encryption(footer: Footer) -> str | None:
    md = footer.metadata
    if "encryption_algorithm" in md or "footer_signing_key_metadata" in md:
        return "the file is encrypted (plaintext footer)"
    for rg in footer.row_groups:
        for cc in rg.get("columns", []):
            if "crypto_metadata" in cc or "encrypted_column_metadata" in cc:
                return "the file has encrypted columns"
    return None


def _chunks(footer: Footer, codec: int, leaves: int) -> str | None:
    end = footer.file_size - footer.length - 8
    for r, rg in enumerate(footer.row_groups):
        columns = rg.get("columns", [])
        if len(columns) != leaves:
            return f"row group {r} has {len(columns)} column chunks for {leaves} columns"
        for cc in columns:
            if cc.get("file_path"):
                return f"row group {r} keeps a column chunk in another file ({cc.get('file_path')})"
            md = cc.get("meta_data")
            if md is None:
                return f"row group {r} has a column chunk without metadata"
            if md.get("codec") != codec:
                got = md.get("codec")
                name = CODECS[got] if isinstance(got, int) and 0 <= got < len(CODECS) else got
                return f"the column {'.'.join(md.get('path_in_schema') or [])} is compressed with {name}, " \
                       f"not {CODECS[codec]}"
            start, length = chunk_range(cc)
            if start < 4 or length < 0 or start + length > end:
                return f"row group {r} has a column chunk outside the file's data ({start}+{length})"
    return None


def refusal(footer: Footer, reference: Footer, codec: int) -> str | None:
    """Why the row groups of ``footer``'s file cannot be copied into a file of ``reference``'s
    schema compressed with ``codec`` (a CompressionCodec value), or None when they can."""
    return (_encryption(footer) or schema_difference(footer.schema, reference.schema)
            or _chunks(footer, codec, len(reference.leaf_columns())))
