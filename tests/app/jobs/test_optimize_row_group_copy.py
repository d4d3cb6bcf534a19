"""OPTIMIZE's bin-packing with row groups copied byte for byte (``copy_row_groups``): ``always``,
``auto`` (large inputs copied, small ones re-encoded together) and ``never`` give the same rows and
the same statistics as a full rewrite of a copy of the table; inputs that cannot be copied exactly
fall back with their reason (deletion vectors, another codec, an older schema, row tracking, a
corrupt chunk); the metrics count what was copied and re-encoded. Local execution (threads) and
Spark."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.rewrite.bin_copy import rewrite_bin
from airflow_delta_maint.app.rewrite.data_files import RewriteSpec
from airflow_delta_maint.app.rewrite.rewrite_counts import RewriteCounts, merge_copy_metrics
from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.health.run_log import run_record
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.parquet.footer import file_bytes, read_footer
from airflow_delta_maint.delta.plans.optimize_options import (DEFAULT_ROW_GROUP_BYTES, OptimizeOptions,
                                                              copy_threshold)
from tests.app.jobs.copy_tables import (BIG_ROWS, ROW_GROUP_BYTES, SMALL_ROWS, batch, copy_of, live_row_groups, make_table, rows,
                                        run, stats_by_partition)
from tests.conftest import corpus_path
from tests.dv_writer import DVTable, read_rows

COPY_KEYS = ("numRowGroupsCopied", "numBytesCopied", "numRowGroupsReencoded", "numBytesReencoded", "copyFallbacks")


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet")}


def compare_with_full_rewrite(path: Path, **params) -> tuple[dict, dict]:
    """OPTIMIZE ``path`` with ``params`` and a copy of it with ``copy_row_groups="never"``: the same
    rows as before, the same statistics. Returns both runs' metrics."""
    full = copy_of(path, path.name + "-never")
    before = rows(str(path))
    code, m = run(path, **params)
    assert code == 0 and m["status"] == "committed", m
    code, never = run(full, **{**params, "copy_row_groups": "never"})
    assert code == 0 and never["status"] == "committed", never
    assert rows(str(path)) == before == rows(str(full))
    assert stats_by_partition(str(path)) == stats_by_partition(str(full))
    assert m["numAddedFiles"] == never["numAddedFiles"] and m["numRemovedFiles"] == never["numRemovedFiles"]
    assert (never["numRowGroupsCopied"], never["numBytesCopied"], never["copyFallbacks"]) == (0, 0, {})
    return m, never


# -- options -------------------------------------------------------------------------------------
def test_options_take_copy_row_groups_and_row_group_bytes() -> None:
    default = OptimizeOptions.from_mapping({})
    assert (default.copy_row_groups, default.row_group_bytes) == ("auto", DEFAULT_ROW_GROUP_BYTES) == ("auto", 128 << 20)
    assert copy_threshold(default.row_group_bytes) == 32 << 20
    given = OptimizeOptions.from_mapping({"copy_row_groups": " Always ", "row_group_bytes": "1048576"})
    assert (given.copy_row_groups, given.row_group_bytes) == ("always", 1 << 20)
    assert OptimizeOptions.from_mapping({"copy_row_groups": None, "row_group_bytes": None}) == default
    with pytest.raises(InvalidArgumentError) as err:
        OptimizeOptions.from_mapping({"copy_row_groups": "sometimes"})
    assert str(err.value) == "copy_row_groups must be one of auto, always, never, got 'sometimes'"
    with pytest.raises(InvalidArgumentError, match="row_group_bytes must be positive, got 0"):
        OptimizeOptions.from_mapping({"row_group_bytes": 0})


def test_a_bad_mode_fails_before_anything_is_read(tmp_path: Path) -> None:
    code, m = run(tmp_path / "missing", copy_row_groups="sometimes")
    assert code == 2 and m["error"] == "copy_row_groups must be one of auto, always, never, got 'sometimes'"


def test_the_command_line_flags_reach_the_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path, big=2, small=1)
    with pytest.raises(InvalidArgumentError, match="--copy-row-groups: invalid choice: 'sometimes'"):
        run_in_process("optimize", str(path), ["--copy-row-groups", "sometimes"])
    code, m = run_in_process("optimize", str(path), ["--copy-row-groups", "always", "--row-group-bytes",
                                                     str(ROW_GROUP_BYTES), "--lease-seconds", "0"])
    assert code == 0 and (m["numRowGroupsCopied"], m["copyFallbacks"]) == (3, {}), m


# -- the three modes -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["always", "auto", "never"])
def test_modes_on_local_threads(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "t"
    make_table(path, big=3, small=4)
    inputs = {f: read_footer(str(path / f)) for f in data_files(path)}
    big_bytes = sum(f.row_groups[0]["total_compressed_size"] for f in inputs.values() if f.num_rows == BIG_ROWS)
    m, never = compare_with_full_rewrite(path, copy_row_groups=mode)
    assert all(k in m for k in COPY_KEYS)
    if mode == "always":
        assert (m["numRowGroupsCopied"], m["numRowGroupsReencoded"], m["copyFallbacks"]) == (7, 0, {})
        assert m["numBytesCopied"] == sum(f.row_groups[0]["total_compressed_size"] for f in inputs.values())
        assert sorted(live_row_groups(str(path))) == sorted([BIG_ROWS] * 3 + [SMALL_ROWS] * 4)
    elif mode == "auto":  # the small files first (the bin is sorted by size): one row group of their rows
        assert (m["numRowGroupsCopied"], m["numBytesCopied"]) == (3, big_bytes)
        assert (m["numRowGroupsReencoded"], m["copyFallbacks"]) == (1, {"smallRowGroups": 4})
        assert live_row_groups(str(path)) == [4 * SMALL_ROWS] + [BIG_ROWS] * 3
    else:
        assert m == {**m, "numRowGroupsCopied": 0, "numBytesCopied": 0, "copyFallbacks": {}}
    assert m["numRowGroupsReencoded"] + m["numRowGroupsCopied"] == len(live_row_groups(str(path)))
    assert never["numRowGroupsReencoded"] >= 1 and never["numBytesReencoded"] > 0


def test_auto_keeps_the_bins_order_of_rows_around_copied_files(tmp_path: Path) -> None:
    """Small inputs on both sides of a large one: the rows waiting to be re-encoded go before it, so
    the output holds the bin's live rows in the bin's order (a rebase counts on it)."""
    path = tmp_path / "t"
    make_table(path, big=2, small=2)
    snap = Snapshot.load(str(path))
    adds = sorted(snap.add_actions(), key=lambda a: a["path"])
    order = sorted(adds, key=lambda a: a["size"])
    order = [order[3], order[0], order[2], order[1]]  # large, small, large, small
    spec = RewriteSpec(snap.storage, snap.metadata.to_action(), row_group_bytes=ROW_GROUP_BYTES, run_token="0badc0de")
    out, counts = rewrite_bin(spec, order, {})
    written = pq.read_table(path / out[0]["path"])
    expected = [i for a in order for i in pq.read_table(path / a["path"], columns=["id"]).column("id").to_pylist()]
    assert written.column("id").to_pylist() == expected
    md = pq.ParquetFile(path / out[0]["path"]).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [BIG_ROWS, SMALL_ROWS, BIG_ROWS, SMALL_ROWS]
    assert (counts.row_groups_copied, counts.row_groups_reencoded, counts.fallbacks) == (2, 2, {"smallRowGroups": 2})


def test_row_groups_encoded_on_threads_keep_the_bins_order(tmp_path: Path) -> None:
    """A run of small inputs that fills more row groups than are encoded at once, before a copied input: the
    output holds the bin's rows in the bin's order, its statistics those of a full rewrite."""
    from airflow_delta_maint.app.rewrite import bin_copy, data_files

    path = tmp_path / "t"
    make_table(path, big=2, small=40)
    snap = Snapshot.load(str(path))
    by_size = sorted(snap.add_actions(), key=lambda a: (a["size"], a["path"]))
    small, big = by_size[:40], by_size[40:]
    order = small[:36] + big[:1] + small[36:] + big[1:]
    spec = RewriteSpec(snap.storage, snap.metadata.to_action(), row_group_bytes=ROW_GROUP_BYTES, run_token="0badc0de")
    out, counts = rewrite_bin(spec, order, {})
    expected = [i for a in order for i in pq.read_table(path / a["path"], columns=["id"]).column("id").to_pylist()]
    assert pq.read_table(path / out[0]["path"]).column("id").to_pylist() == expected
    md = pq.ParquetFile(path / out[0]["path"]).metadata
    groups = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    assert groups.index(BIG_ROWS) > bin_copy.ENCODE_THREADS  # the first run's row groups, then the copied input
    assert (counts.row_groups_copied, counts.row_groups_reencoded) == (2, len(groups) - 2)
    full = data_files.rewrite_bin(dataclasses.replace(spec, run_token="0badc0df"), order, {})
    assert json.loads(out[0]["stats"]) == json.loads(full[0]["stats"])


@pytest.mark.parametrize("room_share", [1.25, 0.01])
def test_row_groups_encoded_into_buffers_used_again_keep_the_bins_rows(tmp_path: Path, monkeypatch,
                                                                         room_share: float) -> None:
    """Row groups encoded into the bin's buffers, each used again once its bytes are written (or, with too little
    room, into buffers of their own): the output holds the bin's rows in the bin's order, its statistics those of a
    full rewrite."""
    from airflow_delta_maint.app.rewrite import bin_copy, data_files

    monkeypatch.setattr(bin_copy, "ENCODE_ROOM_SHARE", room_share)
    monkeypatch.setattr(bin_copy, "ENCODE_ROOM_BYTES", 0 if room_share < 1 else bin_copy.ENCODE_ROOM_BYTES)
    path = tmp_path / "t"
    make_table(path, big=1, small=40)
    snap = Snapshot.load(str(path))
    order = sorted(snap.add_actions(), key=lambda a: (a["size"], a["path"]))
    small_groups = copy_threshold(ROW_GROUP_BYTES)  # row groups of a few small files each; the big file copied
    spec = RewriteSpec(snap.storage, snap.metadata.to_action(), row_group_bytes=small_groups, run_token="0badc0de")
    out, counts = rewrite_bin(spec, order, {})
    expected = pa.concat_tables([pq.read_table(path / a["path"]) for a in order])
    # in order, every value (repr: NaN equals NaN)
    assert repr(pq.read_table(path / out[0]["path"]).to_pylist()) == repr(expected.to_pylist())
    assert counts.row_groups_reencoded > 2 * bin_copy.ENCODE_THREADS and counts.row_groups_copied == 1
    full = data_files.rewrite_bin(dataclasses.replace(spec, run_token="0badc0df"), order, {})
    assert json.loads(out[0]["stats"]) == json.loads(full[0]["stats"])


def test_a_column_whose_dictionary_outgrew_its_page_is_encoded_without_one_after_that(tmp_path: Path) -> None:
    """Unique ids outgrow their dictionary page in the first row groups re-encoded: the later ones encode them
    without a dictionary, while a column of few values keeps its dictionary; the output holds the bin's rows in
    the bin's order, its statistics those of a full rewrite."""
    import numpy as np
    import pyarrow as pa

    from airflow_delta_maint.app.rewrite import bin_copy, data_files

    path = tmp_path / "t"
    for k, n in enumerate([80_000] * 8 + [400_000]):  # eight small files, then one to copy
        first = k * 1_000_000
        write_deltalake(str(path), pa.table({"id": pa.array(np.arange(first, first + n, dtype=np.int64)),
                                             "k": pa.array(np.arange(n) % 100, pa.int32())}), mode="append")
    snap = Snapshot.load(str(path))
    order = sorted(snap.add_actions(), key=lambda a: (a["size"], a["path"]))
    spec = RewriteSpec(snap.storage, snap.metadata.to_action(), row_group_bytes=2 << 20, run_token="0badc0de")
    out, counts = rewrite_bin(spec, order, {})
    expected = [i for a in order for i in pq.read_table(path / a["path"], columns=["id"]).column("id").to_pylist()]
    assert pq.read_table(path / out[0]["path"]).column("id").to_pylist() == expected
    md = pq.ParquetFile(path / out[0]["path"]).metadata
    reencoded = range(md.num_row_groups - 1)  # the copied input's row group is the last
    assert counts.row_groups_copied == 1 and len(reencoded) > bin_copy.ENCODE_THREADS
    assert [md.row_group(i).column(0).has_dictionary_page for i in reencoded][bin_copy.ENCODE_THREADS:] == \
        [False] * (len(reencoded) - bin_copy.ENCODE_THREADS)
    assert all(md.row_group(i).column(1).has_dictionary_page for i in reencoded)
    full = data_files.rewrite_bin(dataclasses.replace(spec, run_token="0badc0df"), order, {})
    assert json.loads(out[0]["stats"]) == json.loads(full[0]["stats"])


@pytest.mark.spark
def test_auto_in_spark_tasks(tmp_path: Path, spark) -> None:
    path = tmp_path / "t"
    make_table(path, big=2, small=3, partitions=("x", "y"))
    full = copy_of(path, "never")
    before = rows(str(path))
    code, m = run(path, local=False, copy_row_groups="auto")
    assert code == 0 and m["status"] == "committed", m
    code, never = run(full, local=False, copy_row_groups="never")
    assert code == 0, never
    assert rows(str(path)) == before == rows(str(full))
    assert stats_by_partition(str(path)) == stats_by_partition(str(full))
    assert (m["numRowGroupsCopied"], m["numRowGroupsReencoded"], m["copyFallbacks"]) == (4, 2, {"smallRowGroups": 6})


# -- what falls back -----------------------------------------------------------------------------
def test_another_codec_is_re_encoded(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path, big=2, small=1)
    m, _ = compare_with_full_rewrite(path, copy_row_groups="always", compression="zstd")
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (0, {"codec": 3})
    assert all(read_footer(str(path / f)).row_groups[0]["columns"][0]["meta_data"]["codec"] == 6  # ZSTD
               for f in [a["path"] for a in Snapshot.load(str(path)).add_actions()])


def test_files_of_an_older_schema_are_re_encoded(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path, big=2, small=0)
    for k in range(2):  # a column added: the older files lack it
        write_deltalake(str(path), batch(10_000_000 + k * BIG_ROWS, BIG_ROWS, seed=50 + k, extra=True), mode="append",
                        schema_mode="merge")
    m, _ = compare_with_full_rewrite(path, copy_row_groups="always")
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (2, {"schema": 2})


def test_deletion_vectors_and_row_tracking_fall_back(tmp_path: Path) -> None:
    table = DVTable(tmp_path / "dv", partitioned=False).create(["a"], files_per_partition=4, rows_per_file=3000)
    table.delete(range(0, 6000, 7))  # the first two files get deletion vectors
    full = copy_of(table.path, "dv-never")
    code, m = run(table.path, copy_row_groups="always", row_group_bytes=1024)
    assert code == 0, m
    code, never = run(full, copy_row_groups="never", row_group_bytes=1024)
    assert code == 0, never
    assert read_rows(table.path)[0] == read_rows(full)[0] and len(read_rows(table.path)[0]) == len(table.rows)
    assert stats_by_partition(str(table.path)) == stats_by_partition(str(full))
    assert json.loads(Snapshot.load(str(table.path)).add_actions()[0]["stats"])["tightBounds"] is True
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (2, {"deletionVector": 2})
    tracked = DVTable(tmp_path / "rt", partitioned=False, row_tracking=True).create(["a"], 3, 2000)
    code, m = run(tracked.path, copy_row_groups="always")
    assert code == 0, m
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (0, {"rowTracking": 3})
    assert read_rows(tracked.path)[0] == tracked.rows


def test_a_corrupt_chunk_discards_the_output_and_re_encodes_the_bin(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path, big=3, small=0)
    victim = path / sorted(data_files(path))[1]
    footer = read_footer(str(victim))
    meta = footer.row_groups[0]["columns"][0]["meta_data"]
    meta["num_values"] += 1  # the pages hold one value fewer: pyarrow reads the file, the copy refuses it
    data = victim.read_bytes()
    victim.write_bytes(data[:-8 - footer.length] + file_bytes(footer.metadata))
    assert victim.stat().st_size == len(data)
    before_files = data_files(path)
    m, _ = compare_with_full_rewrite(path, copy_row_groups="always")
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (0, {"corruptChunk": 3})
    assert len(data_files(path) - before_files) == 1  # the discarded output is gone


def test_files_of_another_writer_are_copied_against_their_own_footer(tmp_path: Path) -> None:
    """delta-rs writes decimals as INT64, pyarrow as fixed-length bytes: copied when every input of
    the bin is copied (the output takes one input's footer), else the bin is re-encoded."""
    import decimal

    import pyarrow as pa

    path = tmp_path / "t"
    for k, n in enumerate((BIG_ROWS, BIG_ROWS, SMALL_ROWS)):
        data = batch(k * BIG_ROWS, n, seed=k)
        data = data.append_column("dec", pa.array([decimal.Decimal(i % 100_000) / 100 for i in range(n)],
                                                  pa.decimal128(10, 2)))
        write_deltalake(str(path), data, mode="append")
    auto = copy_of(path, "auto")
    m, _ = compare_with_full_rewrite(path, copy_row_groups="always")
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (3, {})
    m, _ = compare_with_full_rewrite(auto, copy_row_groups="auto")
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (0, {"schema": 2, "smallRowGroups": 1})


# -- metrics -------------------------------------------------------------------------------------
def test_the_counts_sum_over_rounds_and_reach_the_history_record() -> None:
    a, b = RewriteCounts(2, 100, 1, 10, {"codec": 1}), RewriteCounts(1, 50, 0, 0, {"codec": 2, "schema": 1})
    total = RewriteCounts.total([a, None, b]).metrics()
    assert total == {"numRowGroupsCopied": 3, "numBytesCopied": 150, "numRowGroupsReencoded": 1,
                     "numBytesReencoded": 10, "copyFallbacks": {"codec": 3, "schema": 1}}
    assert merge_copy_metrics([a.metrics(), {"status": "skipped"}, b.metrics()]) == total
    assert merge_copy_metrics([{"status": "skipped"}]) == {}
    record = run_record({"operation": "optimize", "table": "t", "status": "committed", **total})
    assert json.loads(record["metrics"])["copyFallbacks"] == {"codec": 3, "schema": 1}


@pytest.mark.parametrize("mode", ["always", "never"])
def test_int96_timestamps_past_2262_keep_their_values(tmp_path: Path, mode: str) -> None:
    """Spark's INT96 timestamps of the year 9999: copied as they are, or re-encoded in microseconds (in
    nanoseconds they would overflow into 1816)."""
    path = tmp_path / "t"
    shutil.copytree(corpus_path("rs/table_with_edge_timestamps"), path)

    def values() -> list:
        out = []
        for a in Snapshot.load(str(path)).add_actions():
            for row in pq.read_table(path / a["path"], coerce_int96_timestamp_unit="us").to_pylist():
                out.append(sorted((k, v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v)
                                  for k, v in row.items()))
        return sorted(out, key=str)

    before = values()
    assert max(v for row in before for k, v in row if k == "BIG_DATE").year == 9999
    code, m = run(path, copy_row_groups=mode)
    assert code == 0 and m["status"] == "committed", m
    assert values() == before
    stats = json.loads(Snapshot.load(str(path)).add_actions()[0]["stats"])
    assert stats["maxValues"]["BIG_DATE"] == "9999-12-31T00:00:00.000Z"
