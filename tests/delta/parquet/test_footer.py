"""The footer codec: decode then encode gives the writer's bytes (pyarrow, parquet-mr, parquet-rs),
fields it does not know are carried through, and pyarrow reads what it encodes."""

from __future__ import annotations

import io
import struct
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_maint.delta.parquet.compact import Struct, decode, encode
from airflow_delta_maint.delta.parquet.footer import (ParquetFooterError, decode_file_metadata, encode_file_metadata,
                                                      file_bytes, read_footer)
from airflow_delta_maint.delta.parquet.format import COLUMN_META_DATA, FILE_META_DATA, STATISTICS
from tests.delta.parquet.tables import many_types
from tests.hypothesis_profiles import examples

CORPUS = Path(__file__).resolve().parents[2] / "data" / "conformance" / "tables"


def parquet_bytes(table: pa.Table, **options) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return buf.getvalue()


def raw_footer(data: bytes) -> bytes:
    n = struct.unpack("<I", data[-8:-4])[0]
    return data[-8 - n:-8]


WRITES = {
    "defaults": {},
    "row_groups_page_index": {"row_group_size": 50, "write_page_index": True},
    "bloom_filters": {"bloom_filter_options": {"s": {"ndv": 50}, "i64": {"ndv": 300, "fpp": 0.01}}},
    "zstd_v1_pages": {"compression": "zstd", "data_page_version": "2.0", "use_dictionary": False},
    "sorted_no_stats": {"sorting_columns": [pq.SortingColumn(0)], "write_statistics": ["i64"]},
    "int96_byte_stream_split": {"use_deprecated_int96_timestamps": True, "use_byte_stream_split": ["f64", "f32"]},
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_pyarrow_footers_round_trip_to_the_same_bytes(name):
    data = parquet_bytes(many_types(), **WRITES[name])
    footer = read_footer(io.BytesIO(data))
    assert footer.raw == raw_footer(data)
    footer.metadata.materialize()
    assert encode_file_metadata(footer.metadata) == footer.raw
    assert footer.num_rows == 300
    assert len(footer.leaf_columns()) == pq.ParquetFile(io.BytesIO(data)).metadata.num_columns


def test_every_corpus_footer_round_trips_to_the_same_bytes():
    """Files of parquet-mr 1.8 to 1.16, Databricks' and Photon's, and parquet-rs from 13 to 55."""
    files = sorted(CORPUS.rglob("*.parquet"))
    assert len(files) > 100
    writers = set()
    for path in files:
        footer = read_footer(str(path))
        writers.add(footer.created_by.split(" version")[0])
        footer.metadata.materialize()
        assert encode_file_metadata(footer.metadata) == footer.raw, path
    assert {"parquet-mr", "parquet-rs"} <= writers


def test_decoded_fields_read_as_pyarrow_reads_them():
    data = parquet_bytes(many_types(), row_group_size=100, write_page_index=True)
    ours = read_footer(io.BytesIO(data))
    theirs = pq.ParquetFile(io.BytesIO(data)).metadata
    assert ours.created_by == theirs.created_by and len(ours.row_groups) == theirs.num_row_groups == 3
    for r, rg in enumerate(ours.row_groups):
        assert rg["num_rows"] == theirs.row_group(r).num_rows
        for c, cc in enumerate(rg["columns"]):
            meta, other = cc["meta_data"], theirs.row_group(r).column(c)
            assert meta["data_page_offset"] == other.data_page_offset
            assert meta.get("dictionary_page_offset") == other.dictionary_page_offset
            assert meta["total_compressed_size"] == other.total_compressed_size
            assert ".".join(meta["path_in_schema"]) == other.path_in_schema
            stats = meta.get("statistics")
            if other.statistics is not None and other.statistics.has_min_max:
                assert stats["min_value"] == other.statistics.min_raw or isinstance(other.statistics.min_raw, (int, float))


def test_unknown_fields_are_carried_through_unchanged():
    data = parquet_bytes(many_types(50))
    md = decode_file_metadata(raw_footer(data))
    meta = md["row_groups"][0]["columns"][0]["meta_data"]
    extra = Struct(STATISTICS, {3: 7, 5: b"zz"})  # any struct will do as an unknown field's value
    meta.unknown = {40: (12, encode(extra)), 41: (6, b"\x04")}  # a struct and an i64 (2)
    md.unknown = {100: (8, b"\x03abc")}
    encoded = encode_file_metadata(md)
    again = decode_file_metadata(encoded)
    assert again.unknown == {100: (8, b"\x03abc")}
    assert again["row_groups"][0]["columns"][0]["meta_data"].unknown == meta.unknown
    assert encode_file_metadata(again) == encoded
    # readers skip fields they do not know
    out = pq.ParquetFile(io.BytesIO(data[:-8 - len(raw_footer(data))] + encoded + struct.pack("<I", len(encoded))
                                    + b"PAR1")).read()
    assert out.num_rows == 50


def test_a_known_field_with_another_wire_type_is_kept_as_unknown():
    s = Struct(COLUMN_META_DATA, {1: 2})
    raw = bytearray(encode(s))
    raw[-1:-1] = bytes([0x18, 0x02, 0x68, 0x69])  # field 2 (encodings: a list) sent as a binary "hi"
    decoded, end = decode(bytes(raw), COLUMN_META_DATA)
    assert end == len(raw) and decoded.unknown == {2: (8, b"\x02hi")} and "encodings" not in decoded
    assert encode(decoded) == bytes(raw)


def test_what_pyarrow_reads_from_an_edited_footer():
    data = parquet_bytes(many_types(20))
    md = decode_file_metadata(raw_footer(data))
    md["created_by"] = "someone else version 1.0"
    md["key_value_metadata"] = None
    theirs = pq.read_metadata(io.BytesIO(b"PAR1" + file_bytes(md)))
    assert theirs.created_by == "someone else version 1.0" and theirs.metadata is None
    assert theirs.num_rows == 20


def test_files_that_are_not_parquet_are_refused():
    data = parquet_bytes(many_types(20))
    with pytest.raises(ParquetFooterError, match="encrypted"):
        read_footer(io.BytesIO(data[:-4] + b"PARE"))
    with pytest.raises(ParquetFooterError, match="magic"):
        read_footer(io.BytesIO(data[:-4] + b"NOPE"))
    with pytest.raises(ParquetFooterError, match="at least 12"):
        read_footer(io.BytesIO(b"PAR1PAR1"))
    n = struct.unpack("<I", data[-8:-4])[0]
    with pytest.raises(ParquetFooterError):
        read_footer(io.BytesIO(data[:-8 - n] + data[-8 - n:-8 - n // 2] + struct.pack("<I", n - n // 2) + b"PAR1"))


def test_a_footer_larger_than_the_first_read_is_read_whole():
    table = pa.table({f"column_{i:03d}_{'x' * 40}": pa.array([i, i + 1]) for i in range(400)})
    data = parquet_bytes(table)
    assert len(raw_footer(data)) > 64 << 10
    footer = read_footer(io.BytesIO(data))
    assert footer.raw == raw_footer(data) and len(footer.leaf_columns()) == 400


def test_a_large_footer_decodes_in_well_under_a_second():
    """100 row groups x 50 columns, with statistics and page indexes: milliseconds, not seconds."""
    table = pa.table({f"c{i}": pa.array(np.arange(2000) * i) if i % 3 else pa.array([f"s{j}" for j in range(2000)])
                      for i in range(50)})
    raw = raw_footer(parquet_bytes(table, row_group_size=20, write_page_index=True))
    decode_file_metadata(raw)
    started = time.process_time()
    md = decode_file_metadata(raw)
    assert len(md["row_groups"]) == 100
    assert time.process_time() - started < 1.0


_STATS = st.builds(
    lambda values: Struct(STATISTICS, {k: v for k, v in values.items() if v is not None}),
    st.fixed_dictionaries({1: st.none() | st.binary(max_size=40), 2: st.none() | st.binary(max_size=40),
                           3: st.none() | st.integers(0, 2**63 - 1), 4: st.none() | st.integers(-2**63, 2**63 - 1),
                           5: st.none() | st.binary(max_size=300), 6: st.none() | st.binary(max_size=3),
                           7: st.none() | st.booleans(), 8: st.none() | st.booleans()}))
_META = st.builds(
    lambda t, enc, path, n, off, stats: Struct(COLUMN_META_DATA, {
        1: t, 2: enc, 3: path, 4: 1, 5: n, 6: n * 3, 7: n * 2, 9: off, **({12: stats} if stats else {})}),
    st.integers(0, 7), st.lists(st.integers(0, 9), max_size=20), st.lists(st.text(max_size=12), min_size=1, max_size=4),
    st.integers(0, 2**40), st.integers(4, 2**62), st.none() | _STATS)


@settings(max_examples=examples(200), deadline=None)
@given(metas=st.lists(_META, max_size=20), created_by=st.none() | st.text(max_size=30))
def test_any_metadata_encodes_and_decodes_back(metas, created_by):
    from airflow_delta_maint.delta.parquet.format import COLUMN_CHUNK, ROW_GROUP

    chunks = [Struct(COLUMN_CHUNK, {2: 0, 3: m}) for m in metas]
    rg = Struct(ROW_GROUP, {1: chunks, 2: 10, 3: 5})
    md = Struct(FILE_META_DATA, {1: 1, 3: 5, 4: [rg], **({6: created_by} if created_by is not None else {})})
    encoded = encode(md)
    decoded = decode_file_metadata(encoded)
    assert decoded == md
    assert encode(decoded) == encoded
