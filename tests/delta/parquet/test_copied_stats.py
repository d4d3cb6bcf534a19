"""Delta statistics of a copied file: merged from the inputs' footers, equal to those of a rewrite of
the same rows by our writer, and the columns the footers cannot prove read from the output."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.parquet.bounds import (is_signed_order, statistics_for_copy, view_statistics,
                                                      writer_version, writes_wrong_unsigned_bounds)
from airflow_delta_maint.delta.parquet.compact import Struct
from airflow_delta_maint.delta.parquet.format import SCHEMA_ELEMENT, STATISTICS
from airflow_delta_maint.delta.parquet.footer import read_footer
from airflow_delta_maint.delta.parquet.row_group_copy import RowGroupCopyWriter, copy_files, copy_refusal
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.copied_stats import (copied_columns_needing_data, copied_file_stats,
                                                             copied_file_stats_gathered, copied_file_stats_reading)
from airflow_delta_maint.delta.protocol.schema import from_arrow_schema
from airflow_delta_maint.delta.protocol.stats import StatsCollector, stats_json, table_stats
from tests.conftest import corpus_path, load_manifest
from tests.delta.parquet.tables import many_types

STATS_COLUMNS = ["i64", "i32", "i16", "i8", "f64", "f32", "b", "s", "long_s", "d", "ts", "ts_ntz", "dec", "dec38",
                 "lst", "mp", "st", "nulls"]


def metadata_for(schema: pa.Schema, configuration: dict | None = None) -> Metadata:
    return Metadata(id="t", schema_string=json.dumps(from_arrow_schema(schema).to_json()), partition_columns=(),
                    configuration=dict(configuration or {}))


def rewrite_stats(table: pa.Table, metadata: Metadata, path: Path) -> dict:
    """What our writer's rewrite of ``table`` records (``app/rewrite/data_files.py``'s way)."""
    pq.write_table(table, path, compression="snappy", write_statistics=True, use_dictionary=True)
    collector = StatsCollector(metadata)
    collector.update(table)
    return collector.file_stats(str(path))


def copied(tmp_path: Path, tables: list[pa.Table], **options) -> tuple[str, object]:
    paths = []
    for i, t in enumerate(tables):
        paths.append(str(tmp_path / f"in{i}.parquet"))
        pq.write_table(t, paths[-1], compression="snappy", **options)
    out = tmp_path / "out.parquet"
    with open(out, "wb") as sink:
        result = copy_files(paths, sink, read_footer(paths[0]))
    assert not isinstance(result, str), result
    return str(out), result


@pytest.mark.parametrize("options", [{}, {"row_group_size": 40, "write_page_index": True}])
def test_stats_equal_a_rewrite_of_the_same_rows(tmp_path, options):
    tables = [many_types(150 + 20 * i, seed=i).select(STATS_COLUMNS) for i in range(3)]
    metadata = metadata_for(tables[0].schema, {"delta.dataSkippingNumIndexedCols": "-1"})
    out, result = copied(tmp_path, tables, **options)
    ours = copied_file_stats_reading(result, metadata, out)
    theirs = rewrite_stats(pa.concat_tables(tables), metadata, tmp_path / "rewrite.parquet")
    assert stats_json(ours) == stats_json(theirs)
    assert ours["numRecords"] == sum(t.num_rows for t in tables)


def test_footers_prove_most_columns_and_name_the_rest(tmp_path):
    tables = [many_types(100, seed=i).select(STATS_COLUMNS) for i in range(2)]
    metadata = metadata_for(tables[0].schema, {"delta.dataSkippingNumIndexedCols": "-1"})
    _, result = copied(tmp_path, tables)
    need = copied_columns_needing_data(result, metadata)
    # pyarrow leaves NaN out of float bounds; a list's own nulls are not in the footer (its 72-byte
    # strings are marked exact, a map whose entries have no null has none itself)
    assert set(need) == {"f64", "f32", "lst"}
    partial = copied_file_stats(result, metadata)
    assert "f64" not in partial["minValues"] and partial["minValues"]["i64"] == min(
        pa.concat_tables(tables)["i64"].to_pylist())
    assert partial["nullCount"]["s"] == sum(t["s"].null_count for t in tables)


def test_a_mixed_file_of_copied_and_encoded_row_groups_has_the_stats_of_its_rows(tmp_path):
    big = many_types(300, seed=1).select(STATS_COLUMNS)
    small = many_types(12, seed=2).select(STATS_COLUMNS)
    metadata = metadata_for(big.schema)
    pq.write_table(big, tmp_path / "big.parquet", compression="snappy")
    out = tmp_path / "out.parquet"
    with open(out, "wb") as sink:
        writer = RowGroupCopyWriter(sink, read_footer(str(tmp_path / "big.parquet")), "snappy")
        writer.add_file(str(tmp_path / "big.parquet"))
        writer.add_table(small)
        result = writer.close()
    ours = copied_file_stats_reading(result, metadata, str(out))
    theirs = rewrite_stats(pa.concat_tables([big, small]), metadata, tmp_path / "rewrite.parquet")
    assert stats_json(ours) == stats_json(theirs)


def test_stats_gathered_while_copying_equal_those_read_back(tmp_path):
    """Tables encoded on other threads (``encode``, then added in order) and copied inputs' float values given to
    a collector: the statistics are those read back from the output, and those of a rewrite of its rows."""
    big = many_types(300, seed=3).select(STATS_COLUMNS)
    smalls = [many_types(12, seed=s).select(STATS_COLUMNS) for s in (4, 5)]
    metadata = metadata_for(big.schema)
    pq.write_table(big, tmp_path / "big.parquet", compression="snappy")
    collector = StatsCollector(metadata)
    out = tmp_path / "out.parquet"
    with open(out, "wb") as sink, ThreadPoolExecutor(2) as pool:
        writer = RowGroupCopyWriter(sink, read_footer(str(tmp_path / "big.parquet")), "snappy")
        encoded = list(pool.map(lambda t: (collector.update(t), writer.encode(t))[1], smalls))
        assert writer.row_groups == [] and writer.encode(smalls[0].slice(0, 0)) is None  # encoding writes nothing
        writer.add_file(*encoded[0])
        writer.add_file(str(tmp_path / "big.parquet"))
        collector.update(pq.read_table(tmp_path / "big.parquet", columns=["f64", "f32"]))
        writer.add_file(*encoded[1])
        result = writer.close()
    gathered = copied_file_stats_gathered(result, collector, str(out))
    assert stats_json(gathered) == stats_json(copied_file_stats_reading(result, metadata, str(out)))
    rows = pa.concat_tables([smalls[0], big, smalls[1]])
    assert pq.read_table(out).equals(rows)
    assert stats_json(gathered) == stats_json(rewrite_stats(rows, metadata, tmp_path / "rewrite.parquet"))


# -- the rules -------------------------------------------------------------------------------------
def element(physical: int, **fields) -> Struct:
    el = Struct(SCHEMA_ELEMENT)
    el["type"], el["name"] = physical, "c"
    for k, v in fields.items():
        el[k] = v
    return el


def stats(**fields) -> Struct:
    s = Struct(STATISTICS)
    for k, v in fields.items():
        s[k] = v
    return s


def test_writer_versions_and_their_trust():
    assert writer_version("parquet-mr version 1.12.3-databricks-0002 (build x)") == ("parquet-mr", (1, 12, 3))
    assert writer_version("parquet-cpp-arrow version 26.0.1") == ("parquet-cpp-arrow", (26, 0, 1))
    assert writes_wrong_unsigned_bounds("parquet-mr version 1.8.2 (build c)")
    assert writes_wrong_unsigned_bounds("")
    assert not writes_wrong_unsigned_bounds("parquet-mr version 1.10.1 (build a)")
    assert not writes_wrong_unsigned_bounds("parquet-rs version 50.0.0")


def test_copied_statistics_keep_only_what_holds_in_the_output():
    binary, int32 = element(6), element(1)
    old = stats(min=b"a", max=b"z", null_count=0)
    assert "min" not in statistics_for_copy(old, binary, "parquet-mr version 1.8.2", True)
    assert statistics_for_copy(old, int32, "parquet-mr version 1.8.2", True)["min"] == b"a"
    unsigned = element(1, converted_type=13)
    assert not is_signed_order(unsigned) and is_signed_order(int32)
    new = stats(min_value=b"a", max_value=b"z", is_min_value_exact=True, is_max_value_exact=True, null_count=1)
    assert statistics_for_copy(new, binary, "parquet-cpp-arrow version 26.0.1", True) == new
    other_order = statistics_for_copy(new, binary, "parquet-cpp-arrow version 26.0.1", False)
    assert "min_value" not in other_order and "is_min_value_exact" not in other_order
    assert other_order["null_count"] == 1


def test_view_statistics_keep_only_exact_bounds():
    binary, double = element(6), element(5)
    exact = stats(min_value=b"a" * 80, max_value=b"b", is_min_value_exact=True, is_max_value_exact=True)
    assert view_statistics(exact, binary, "parquet-cpp-arrow version 26.0.1") == exact
    cut = stats(min_value=b"a" * 64, max_value=b"b")
    assert "min_value" not in view_statistics(cut, binary, "parquet-mr version 1.13.1")
    assert view_statistics(stats(min_value=b"a" * 63, max_value=b"b"), binary, "parquet-mr version 1.13.1")[
        "min_value"] == b"a" * 63
    inexact = stats(min_value=b"a", max_value=b"b", is_min_value_exact=True, is_max_value_exact=False, null_count=2)
    assert view_statistics(inexact, binary, "x version 1").get("min_value") is None
    assert view_statistics(inexact, binary, "x version 1")["null_count"] == 2
    floats = stats(min_value=b"\0" * 8, max_value=b"\0" * 8)
    assert "min_value" not in view_statistics(floats, double, "parquet-rs version 50.0.0")
    assert view_statistics(floats, double, "parquet-mr version 1.10.1")["min_value"] == b"\0" * 8


# -- files delta-spark and delta-rs wrote ------------------------------------------------------------
def _corpus_groups() -> list[str]:
    names = []
    for entry in load_manifest():
        path = corpus_path(entry["table"])
        if (path / "_delta_log").is_dir() and len(list(path.rglob("*.parquet"))) >= 3:
            names.append(entry["table"])
    return sorted(names)


def _eligible_files(name: str) -> tuple[Metadata, list[str]] | None:
    path = corpus_path(name)
    try:
        snapshot = Snapshot.load(str(path))
    except Exception:  # corrupt or unsupported on purpose; other suites cover these
        return None
    files = [str(path / unquote(a["path"])) for a in snapshot.add_actions()
             if "://" not in a["path"] and (path / unquote(a["path"])).exists()]
    if len(files) < 2:
        return None
    reference = read_footer(files[0])
    codec = reference.row_groups[0]["columns"][0]["meta_data"]["codec"] if reference.row_groups else None
    if codec is None:
        return None
    chosen = [f for f in files if copy_refusal(read_footer(f), reference, codec) is None]
    return (snapshot.metadata, chosen) if len(chosen) >= 2 else None


def test_corpus_files_copied_have_the_stats_of_their_rows(tmp_path):
    """Files of parquet-mr (1.8 to 1.16, Databricks, Photon) and parquet-rs, copied table by table:
    the rows are the inputs' (pyarrow and DuckDB read them), and the stats those of the rows."""
    from airflow_delta_maint.delta.parquet.format import CODECS

    tables = 0
    for name in _corpus_groups():
        found = _eligible_files(name)
        if found is None:
            continue
        metadata, files = found
        reference = read_footer(files[0])
        codec = CODECS[reference.row_groups[0]["columns"][0]["meta_data"]["codec"]]
        sink = io.BytesIO()
        result = copy_files(files, sink, reference, codec)
        assert not isinstance(result, str), (name, result)
        data = sink.getvalue()
        read = dict(coerce_int96_timestamp_unit="us")
        got = pq.read_table(io.BytesIO(data), **read)
        want = pa.concat_tables([pq.read_table(f, **read).cast(got.schema) for f in files])
        assert got.equals(want), name
        (tmp_path / "copied.parquet").write_bytes(data)
        assert duckdb.sql(f"select count(*) from read_parquet('{tmp_path / 'copied.parquet'}')").fetchone()[0] == \
            want.num_rows, name
        ours = copied_file_stats_reading(result, metadata, io.BytesIO(data))
        assert stats_json(ours) == stats_json(table_stats(want, metadata)), name
        tables += 1
    assert tables >= 30
