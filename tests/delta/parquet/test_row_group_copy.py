"""Row groups copied byte for byte: every row read back by pyarrow, DuckDB and delta-rs, the chunks'
bytes the inputs', every offset (pages, page indexes, bloom filters) pointing at the right bytes,
and inputs that cannot be copied refused with the reason."""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta_maint.delta.parquet.chunks import CorruptChunkError
from airflow_delta_maint.delta.parquet.compact import decode
from airflow_delta_maint.delta.parquet.eligibility import chunk_range
from airflow_delta_maint.delta.parquet.footer import decode_file_metadata, file_bytes, read_footer, read_range
from airflow_delta_maint.delta.parquet.format import (BLOOM_FILTER_HEADER, COLUMN_INDEX, DATA_PAGE, DATA_PAGE_V2,
                                                      ENCRYPTION_ALGORITHM, OFFSET_INDEX, PAGE_HEADER)
from airflow_delta_maint.delta.parquet.compact import Struct
from airflow_delta_maint.delta.parquet.row_group_copy import (DEFAULT_CREATED_BY, CopyRefused, RowGroupCopyWriter,
                                                              copy_files, copy_refusal, dictionary_columns,
                                                              reference_for_schema)
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import Storage
from tests.delta.parquet.tables import many_types
from tests.hypothesis_profiles import examples


def write(path: Path, table: pa.Table, **options) -> str:
    options.setdefault("compression", "snappy")
    pq.write_table(table, path, **options)
    return str(path)


def inputs(tmp_path: Path, count: int = 3, **options) -> list[str]:
    return [write(tmp_path / f"in{i}.parquet", many_types(200 + 37 * i, seed=i), **options) for i in range(count)]


def copy(tmp_path: Path, paths: list, reference=None, codec: str = "snappy", **options):
    reference = reference or read_footer(paths[0])
    out = tmp_path / "out.parquet"
    with open(out, "wb") as sink:
        result = copy_files(paths, sink, reference, codec, **options)
    assert not isinstance(result, str), result
    assert result.size == out.stat().st_size
    return str(out), result


def rows(path_or_paths) -> pa.Table:
    paths = path_or_paths if isinstance(path_or_paths, list) else [path_or_paths]
    tables = [pq.read_table(p) for p in paths]
    return pa.concat_tables(tables).combine_chunks()


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Equal as multisets: sorted by every column that sorts."""
    keys = [(n, "ascending") for n in ("i64", "s", "f64") if n in a.column_names]
    return a.sort_by(keys).equals(b.sort_by(keys))


def chunk_bytes(path: str) -> list[bytes]:
    footer = read_footer(path)
    out = []
    with open(path, "rb") as f:
        for rg in footer.row_groups:
            for cc in rg["columns"]:
                start, length = chunk_range(cc)
                out.append(read_range(f, start, length))
    return out


def check_offsets(path: str) -> int:
    """Every page index and bloom filter offset of ``path`` points at what it says; returns how many
    offset indexes were checked."""
    footer = read_footer(path)
    checked = 0
    with open(path, "rb") as f:
        for rg in footer.row_groups:
            assert rg["file_offset"] == min(chunk_range(cc)[0] for cc in rg["columns"])
            for cc in rg["columns"]:
                meta = cc["meta_data"]
                if "offset_index_offset" in cc:
                    index, _ = decode(read_range(f, cc["offset_index_offset"], cc["offset_index_length"]), OFFSET_INDEX)
                    assert index["page_locations"][0]["offset"] == meta["data_page_offset"]
                    for loc in index["page_locations"]:
                        header, size = decode(read_range(f, loc["offset"], loc["compressed_page_size"]), PAGE_HEADER)
                        assert header["type"] in (DATA_PAGE, DATA_PAGE_V2)
                        assert size + header["compressed_page_size"] == loc["compressed_page_size"]
                    checked += 1
                    if "column_index_offset" in cc:
                        ci, _ = decode(read_range(f, cc["column_index_offset"], cc["column_index_length"]), COLUMN_INDEX)
                        assert len(ci["null_pages"]) == len(index["page_locations"])
                if "bloom_filter_offset" in meta:
                    raw = read_range(f, meta["bloom_filter_offset"], meta["bloom_filter_length"])
                    header, size = decode(raw, BLOOM_FILTER_HEADER)
                    assert size + header["numBytes"] == meta["bloom_filter_length"]
    return checked


# -- what is copied ------------------------------------------------------------------------------------
def test_copied_file_holds_every_row_and_the_inputs_chunks(tmp_path):
    paths = inputs(tmp_path, row_group_size=70)
    out, result = copy(tmp_path, paths)
    assert same_rows(rows(out), rows(paths))
    assert pq.read_table(out).schema == pq.read_table(paths[0]).schema
    assert chunk_bytes(out) == [b for p in paths for b in chunk_bytes(p)]
    md = pq.ParquetFile(out).metadata
    assert md.num_rows == result.num_rows == sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    assert md.num_row_groups == sum(pq.ParquetFile(p).metadata.num_row_groups for p in paths)
    assert md.created_by == DEFAULT_CREATED_BY
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [
        pq.ParquetFile(p).metadata.row_group(i).num_rows for p in paths for i in range(pq.ParquetFile(p).num_row_groups)]
    check_offsets(out)


def test_row_group_statistics_survive_and_filters_find_the_same_rows(tmp_path):
    paths = inputs(tmp_path, row_group_size=50)
    out, _ = copy(tmp_path, paths)
    ins = [pq.ParquetFile(p).metadata for p in paths]
    theirs = [m.row_group(r).column(c).statistics for m in ins for r in range(m.num_row_groups)
              for c in range(m.num_columns)]
    md = pq.ParquetFile(out).metadata
    ours = [md.row_group(r).column(c).statistics for r in range(md.num_row_groups) for c in range(md.num_columns)]
    for a, b in zip(ours, theirs):
        assert (a is None) == (b is None)
        if a is not None:
            assert (a.has_min_max, a.null_count) == (b.has_min_max, b.null_count)
            if a.has_min_max:
                assert (a.min, a.max) == (b.min, b.max)
    every = rows(paths)
    for flt in ([("i64", ">", 900)], [("s", "=", "w7")], [("d", "<", dt.date(2018, 6, 1))]):
        got = pq.read_table(out, filters=flt)
        want = pq.read_table(paths[0], filters=flt)
        for p in paths[1:]:
            want = pa.concat_tables([want, pq.read_table(p, filters=flt)])
        assert same_rows(got.combine_chunks(), want.combine_chunks()), flt
    assert every.num_rows == md.num_rows


def test_page_indexes_and_bloom_filters_are_moved_with_their_chunks(tmp_path):
    bloom = {"s": {"ndv": 50}, "i64": {"ndv": 300}}
    paths = inputs(tmp_path, row_group_size=60, write_page_index=True, max_rows_per_page=16,
                   bloom_filter_options=bloom)
    out, _ = copy(tmp_path, paths)
    checked = check_offsets(out)
    assert checked == sum(len(rg["columns"]) for p in paths for rg in read_footer(p).row_groups)
    footer = read_footer(out)
    pages = decode(read_range(open(out, "rb"), footer.row_groups[0]["columns"][0]["offset_index_offset"], 10_000),
                   OFFSET_INDEX)[0]["page_locations"]
    assert len(pages) > 1, "small pages: several per chunk"
    blooms = [cc["meta_data"].get("bloom_filter_offset") for rg in footer.row_groups for cc in rg["columns"]]
    assert sum(b is not None for b in blooms) == 2 * len(footer.row_groups)
    # DuckDB prunes with statistics and bloom filters: the same rows either way
    for predicate in ("s = 'w7'", "i64 = 17", "s = 'absent'", "i64 between -50 and 50"):
        got = duckdb.sql(f"select count(*), sum(i64) from read_parquet('{out}') where {predicate}").fetchall()
        want = duckdb.sql(f"select count(*), sum(i64) from read_parquet({paths!r}) where {predicate}").fetchall()
        assert got == want, predicate


def test_without_page_indexes_and_bloom_filters_none_is_written(tmp_path):
    paths = inputs(tmp_path, 2, write_page_index=True, bloom_filter_options={"s": {"ndv": 50}})
    out, _ = copy(tmp_path, paths, page_index=False, bloom_filters=False)
    for rg in read_footer(out).row_groups:
        for cc in rg["columns"]:
            assert "offset_index_offset" not in cc and "column_index_offset" not in cc
            assert "bloom_filter_offset" not in cc["meta_data"]
    assert same_rows(rows(out), rows(paths))


def test_duckdb_reads_every_row(tmp_path):
    paths = inputs(tmp_path, row_group_size=64, write_page_index=True)
    out, _ = copy(tmp_path, paths)
    query = "select count(*), sum(i64), count(s), sum(len(lst)), count(st), sum(dec) from read_parquet({})"
    assert duckdb.sql(query.format(f"'{out}'")).fetchall() == duckdb.sql(query.format(repr(paths))).fetchall()


def test_delta_rs_reads_the_copied_file_as_a_table(tmp_path):
    from airflow_delta_maint.delta.protocol.schema import from_arrow_schema

    table_dir = tmp_path / "table"
    (table_dir / "_delta_log").mkdir(parents=True)
    simple = ["i64", "i32", "f64", "s", "d", "ts", "dec", "lst", "st"]
    paths = [write(tmp_path / f"in{i}.parquet", many_types(300, seed=i).select(simple), row_group_size=100,
                   write_page_index=True) for i in range(3)]
    out = table_dir / "part-00000-copied.snappy.parquet"
    with open(out, "wb") as sink:
        result = copy_files(paths, sink, read_footer(paths[0]))
    schema = json.dumps(from_arrow_schema(pq.read_schema(paths[0])).to_json())
    log = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
           {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": schema,
                         "partitionColumns": [], "configuration": {}, "createdTime": 0}},
           {"add": {"path": out.name, "partitionValues": {}, "size": result.size, "modificationTime": 0,
                    "dataChange": True}}]
    (table_dir / "_delta_log" / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in log) + "\n")
    code = ("import json, sys\nfrom deltalake import DeltaTable, QueryBuilder\n"
            "t = QueryBuilder().register('t', DeltaTable(sys.argv[1])).execute("
            "'select count(*) as n, sum(i64) as s, sum(i32) as s32, count(st) as c from t').read_all()\n"
            "import pyarrow as pa\n"
            "print(json.dumps(pa.table(t).to_pylist()[0]), flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code, str(table_dir)], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip(), done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    every = rows(paths)
    assert got == {"n": every.num_rows, "s": every["i64"].to_numpy().sum().item(),
                   "s32": int(pa.compute.sum(every["i32"]).as_py()), "c": every.num_rows - every["st"].null_count}


def test_inputs_through_the_stores_range_reader(tmp_path):
    paths = inputs(tmp_path, 2, row_group_size=90)
    storage = Storage(str(tmp_path))
    readers = [RangeReader(storage, Path(p).name, Path(p).stat().st_size) for p in paths]
    out, _ = copy(tmp_path, readers, reference=read_footer(paths[0]))
    assert chunk_bytes(out) == [b for p in paths for b in chunk_bytes(p)]
    assert same_rows(rows(out), rows(paths))


# -- mixing in re-encoded rows ---------------------------------------------------------------------------
def test_arrow_tables_are_encoded_and_mixed_with_copied_row_groups(tmp_path):
    big = inputs(tmp_path, 2, row_group_size=100, write_page_index=True)
    small = [many_types(20, seed=10), many_types(15, seed=11)]
    reference = reference_for_schema(pq.read_schema(big[0]))
    out = tmp_path / "mixed.parquet"
    with open(out, "wb") as sink:
        writer = RowGroupCopyWriter(sink, reference, "snappy")
        writer.add_file(big[0])
        writer.add_table(pa.concat_tables(small), row_group_rows=10)
        writer.add_file(big[1])
        result = writer.close()
    assert same_rows(rows(str(out)), pa.concat_tables([rows(big[0]), *small, rows(big[1])]).combine_chunks())
    assert [len(p.row_groups) for p in result.parts] == [2, 4, 3]
    check_offsets(str(out))
    assert chunk_bytes(str(out))[:len(chunk_bytes(big[0]))] == chunk_bytes(big[0])


@pytest.mark.parametrize("room", [1 << 20, 64])
def test_a_table_encoded_into_a_given_buffer_has_the_bytes_of_one_encoded_alone(room):
    """Encoded into a buffer of the caller's, with room or without (then into a buffer of its own): the same
    bytes and footer as encoded alone; the bytes are the buffer's own when they fit."""
    table = many_types(40, seed=3)
    writer = RowGroupCopyWriter(io.BytesIO(), reference_for_schema(table.schema), "snappy")
    alone, alone_footer = writer.encode(table, row_group_rows=15)
    into = pa.allocate_buffer(room)
    given, given_footer = writer.encode(table, row_group_rows=15, into=into)
    assert given.read() == alone.read()
    assert given_footer.raw == alone_footer.raw
    given.seek(0)
    assert (given.read_buffer().address == into.address) == (room > 64)


def test_a_table_of_another_schema_is_refused(tmp_path):
    paths = inputs(tmp_path, 1)
    writer = RowGroupCopyWriter(io.BytesIO(), read_footer(paths[0]), "snappy")
    with pytest.raises(CopyRefused, match="i64"):
        writer.add_table(many_types(10).set_column(0, "i64", pa.array(np.arange(10), pa.int32())))


# -- what is refused -------------------------------------------------------------------------------
def refusal_of(tmp_path: Path, table: pa.Table, codec: str = "snappy", **options) -> str | None:
    reference = read_footer(write(tmp_path / "ref.parquet", many_types(10)))
    return copy_refusal(read_footer(write(tmp_path / "other.parquet", table, **options)), reference, codec)


def test_inputs_of_another_physical_schema_or_codec_are_refused(tmp_path):
    base = many_types(30)
    assert refusal_of(tmp_path, base) is None
    assert "compressed with zstd, not snappy" in refusal_of(tmp_path, base, compression="zstd")
    assert "compressed with snappy, not zstd" in refusal_of(tmp_path, base, codec="zstd")
    assert "fields" in refusal_of(tmp_path, base.append_column("extra", pa.array(np.arange(30))))
    assert "'i64' differs" in refusal_of(tmp_path, base.set_column(0, "i64", base["i64"].cast(pa.int32())))
    assert "named 'renamed'" in refusal_of(tmp_path, base.rename_columns(["renamed", *base.column_names[1:]]))
    required = base.schema.set(0, base.schema.field(0).with_nullable(False))
    assert "repetition_type" in refusal_of(tmp_path, base.cast(required))
    assert "'ts' differs" in refusal_of(tmp_path, base.set_column(12, "ts", base["ts"].cast(pa.timestamp("ms", "UTC"), safe=False)))
    with_ids = base.schema.set(0, base.schema.field(0).with_metadata({"PARQUET:field_id": "7"}))
    assert "field_id=7" in refusal_of(tmp_path, base.cast(with_ids))


def test_encrypted_or_broken_inputs_are_refused_with_the_reason(tmp_path):
    paths = inputs(tmp_path, 2)
    data = Path(paths[1]).read_bytes()
    (tmp_path / "pare.parquet").write_bytes(data[:-4] + b"PARE")
    reference = read_footer(paths[0])
    sink = io.BytesIO()
    assert "encrypted" in copy_files([paths[0], str(tmp_path / "pare.parquet")], sink, reference)
    assert sink.getvalue() == b"", "nothing is written before every input is checked"
    footer = read_footer(paths[1])
    md = footer.metadata
    md["encryption_algorithm"] = Struct(ENCRYPTION_ALGORITHM)
    plain = data[:-8 - footer.length] + file_bytes(md)
    (tmp_path / "signed.parquet").write_bytes(plain)
    assert copy_files([str(tmp_path / "signed.parquet")], io.BytesIO(), reference).endswith(
        "the file is encrypted (plaintext footer)")


def test_spark_calendar_metadata_must_agree(tmp_path):
    table = many_types(20)
    legacy = table.replace_schema_metadata({"org.apache.spark.legacyDateTime": ""})
    reason = refusal_of(tmp_path, legacy)
    assert "org.apache.spark.legacyDateTime" in reason and "read differently" in reason


def test_key_value_metadata_kept_only_where_it_holds(tmp_path):
    a = many_types(20).replace_schema_metadata({"everywhere": "1", "somewhere": "x", "varies": "a"})
    b = many_types(20, seed=1).replace_schema_metadata({"everywhere": "1", "varies": "b"})
    paths = [write(tmp_path / "a.parquet", a), write(tmp_path / "b.parquet", b)]
    reference = reference_for_schema(many_types(1).schema)
    out, _ = copy(tmp_path, paths, reference=reference)
    kv = pq.ParquetFile(out).metadata.metadata
    assert kv[b"everywhere"] == b"1" and b"somewhere" not in kv and b"varies" not in kv
    assert kv[b"ARROW:schema"] == reference.key_value_metadata()["ARROW:schema"].encode()


def test_a_chunk_whose_pages_do_not_match_its_metadata_stops_the_copy(tmp_path):
    path = inputs(tmp_path, 1)[0]
    footer = read_footer(path)
    meta = footer.row_groups[0]["columns"][3]["meta_data"]
    meta["num_values"] = meta["num_values"] + 1
    data = Path(path).read_bytes()
    (tmp_path / "lying.parquet").write_bytes(data[:-8 - footer.length] + file_bytes(footer.metadata))
    with pytest.raises(CorruptChunkError, match="values"):
        RowGroupCopyWriter(io.BytesIO(), read_footer(path)).add_file(str(tmp_path / "lying.parquet"))
    meta["num_values"] -= 1
    meta["total_compressed_size"] -= 1
    (tmp_path / "short.parquet").write_bytes(data[:-8 - footer.length] + file_bytes(footer.metadata))
    with pytest.raises(CorruptChunkError):
        RowGroupCopyWriter(io.BytesIO(), read_footer(path)).add_file(str(tmp_path / "short.parquet"))


def test_an_output_footer_decodes_as_pyarrow_reads_it(tmp_path):
    paths = inputs(tmp_path, 2, write_page_index=True)
    out, result = copy(tmp_path, paths)
    assert decode_file_metadata(read_footer(out).raw) == result.metadata
    assert result.footer().raw == read_footer(out).raw


class CountingStorage(Storage):
    """A local store that counts its ranged reads."""

    reads = 0

    def read_range(self, key: str, start: int, end: int) -> bytes:
        type(self).reads += 1
        return super().read_range(key, start, end)


def test_a_remote_input_costs_few_requests(tmp_path):
    """The footer in one request, each chunk in one, the page indexes and bloom filters in one."""
    path = write(tmp_path / "in.parquet", many_types(400), row_group_size=100, write_page_index=True,
                 bloom_filter_options={"s": {"ndv": 50}})
    storage = CountingStorage(str(tmp_path))
    reader = RangeReader(storage, "in.parquet", Path(path).stat().st_size)
    footer = read_footer(reader)
    CountingStorage.reads = 0
    sink = io.BytesIO()
    writer = RowGroupCopyWriter(sink, footer, "snappy")
    writer.add_file(reader, footer)
    writer.close()
    chunks = sum(len(rg["columns"]) for rg in footer.row_groups)
    assert CountingStorage.reads == chunks + 1
    assert pq.read_table(io.BytesIO(sink.getvalue())).equals(pq.read_table(path))


@settings(max_examples=examples(25), deadline=None)
@given(sizes=st.lists(st.integers(1, 120), min_size=1, max_size=5), row_group=st.integers(1, 80),
       page_index=st.booleans(), pages=st.sampled_from([None, 7]), seed=st.integers(0, 1000))
def test_any_split_of_rows_copies_back_to_the_same_rows(tmp_path_factory, sizes, row_group, page_index, pages, seed):
    tmp_path = tmp_path_factory.mktemp("split")
    options = {"row_group_size": row_group, "write_page_index": page_index}
    if pages:
        options["max_rows_per_page"] = pages
    paths = [write(tmp_path / f"in{i}.parquet", many_types(n, seed=seed + i), **options) for i, n in enumerate(sizes)]
    out, result = copy(tmp_path, paths)
    assert result.num_rows == sum(sizes)
    assert same_rows(rows(out), rows(paths))
    assert chunk_bytes(out) == [b for p in paths for b in chunk_bytes(p)]
    check_offsets(out)


def test_a_lying_chunk_stops_the_copy_between_local_files_too(tmp_path):
    """Between two local files the chunks move in the kernel, their page headers read alone: a chunk whose pages
    do not fill it as its metadata says still stops the copy."""
    path = inputs(tmp_path, 1)[0]
    footer = read_footer(path)
    meta = footer.row_groups[0]["columns"][3]["meta_data"]
    data = Path(path).read_bytes()
    meta["num_values"] += 1
    (tmp_path / "lying.parquet").write_bytes(data[:-8 - footer.length] + file_bytes(footer.metadata))
    meta["num_values"] -= 1
    meta["total_compressed_size"] -= 1
    (tmp_path / "short.parquet").write_bytes(data[:-8 - footer.length] + file_bytes(footer.metadata))
    for name, match in (("lying.parquet", "values"), ("short.parquet", "end")):
        with open(tmp_path / "out.parquet", "wb") as sink, pytest.raises(CorruptChunkError, match=match):
            RowGroupCopyWriter(sink, read_footer(path)).add_file(str(tmp_path / name))


def test_local_chunks_are_copied_in_the_kernel_and_read_back_equal(tmp_path, monkeypatch):
    """File to file, no chunk passes through the interpreter (the copy through Python is never called), page
    headers longer than the first probe are read whole, and the rows and page indexes read back equal."""
    from airflow_delta_maint.delta.parquet import chunks, row_group_copy

    def refuse(*args, **kwargs):
        raise AssertionError("a local chunk was copied through the interpreter")

    monkeypatch.setattr(row_group_copy, "copy_chunk", refuse)
    monkeypatch.setattr(chunks, "HEADER_PROBE_BYTES", 5)  # every header needs a longer second read
    paths = inputs(tmp_path, 3, write_page_index=True)
    out, result = copy(tmp_path, paths)
    assert rows(out).equals(rows(paths))
    assert result.metadata == decode_file_metadata(read_footer(out).raw)
    filtered = pq.read_table(out, filters=[("i64", ">=", 0)])  # the page indexes, where pyarrow reads them
    everything = rows(out)
    assert filtered.num_rows == everything.filter(pc.greater_equal(everything["i64"], 0)).num_rows > 0


def test_where_the_kernel_cannot_copy_the_chunks_go_through_the_interpreter(tmp_path, monkeypatch):
    from airflow_delta_maint.delta.parquet import row_group_copy

    calls = []
    monkeypatch.setattr(row_group_copy, "copy_file_range", lambda *args: calls.append(args) or False)
    paths = inputs(tmp_path, 2)
    out, _ = copy(tmp_path, paths)
    assert rows(out).equals(rows(paths))
    assert len(calls) == 1  # refused once: the writer stops asking


def test_dictionary_columns_name_the_columns_whose_dictionary_held() -> None:
    """A column whose dictionary outgrew its page (unique ids) is left out; one of few values, nested leaves
    included, is kept; None when every dictionary held. An encoding without the outgrown column's dictionary
    gives the same rows."""
    n = 20_000
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "k": pa.array(np.arange(n) % 7, pa.int32()),
                      "n": pa.array([{"a": i % 5} for i in range(n)], pa.struct([("a", pa.int64())]))})
    buf = io.BytesIO()
    pq.write_table(table, buf, dictionary_pagesize_limit=4096, row_group_size=n // 2)
    footer = read_footer(io.BytesIO(buf.getvalue()))
    assert dictionary_columns(footer) == ["k", "n.a"]
    buf = io.BytesIO()
    pq.write_table(table.select(["k", "n"]), buf)
    assert dictionary_columns(read_footer(io.BytesIO(buf.getvalue()))) is None
    writer = RowGroupCopyWriter(io.BytesIO(), reference_for_schema(table.schema))
    encoded = writer.encode(table, dictionary=["k", "n.a"])
    assert encoded is not None
    md = pq.ParquetFile(encoded[0]).metadata
    assert [md.row_group(0).column(j).has_dictionary_page for j in range(3)] == [False, True, True]
    encoded[0].seek(0)
    assert pq.read_table(encoded[0]).equals(table)
