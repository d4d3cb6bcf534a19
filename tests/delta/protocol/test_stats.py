"""File statistics: equal to what delta-spark wrote for every corpus data file, and data == footer."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import re
from decimal import Decimal
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.schema import PrimitiveType, leaf_columns
from airflow_delta_maint.delta.protocol.stats import (StatsCollector, columns_needing_data, file_stats, parquet_file_stats, parse_stats_columns,
                                                      stats_columns, stats_json, table_stats, truncate_max_string,
                                                      truncate_min_string)
from tests.conftest import corpus_path, load_manifest

# -- the corpus ---------------------------------------------------------------------------------

# Tables written by Databricks Runtime with variant statistics: they keep min/max of variant
# columns as encoded variant values, which this project does not collect. Every other statistic
# of these files must match; the variant min/max entries are removed from the expected value
# (and must be present there, so this list stays exact).
VARIANT_MIN_MAX_TABLES = {
    "spark/variant-stats-nested-no-checkpoint",
    "spark/variant-stats-no-checkpoint",
    "spark/variant-stats-state-reconstruction",
    "spark/variant-stats-with-struct-no-checkpoint",
}


def _commit_files(path: Path) -> list[Path]:
    return sorted((p for p in (path / "_delta_log").glob("*.json") if re.fullmatch(r"\d{20}\.json", p.name)),
                  key=lambda p: int(p.name[:20]))


def _spark_written(name: str, path: Path) -> bool:
    if name.startswith(("golden/", "spark/")):
        return True
    for commit in _commit_files(path):
        for line in commit.read_text().splitlines():
            if '"commitInfo"' in line:
                info = json.loads(line).get("commitInfo") or {}
                if str(info.get("engineInfo", "")).startswith("Apache-Spark"):
                    return True
    return False


def _cases(name: str) -> list[tuple[dict, Metadata]]:
    """Every add with stats whose data file exists, with the metadata in force when it was committed.

    Stats describe a file against the schema of its commit, so a later schema change (new column,
    type widening) must not apply to it.
    """
    path = corpus_path(name)
    try:
        snapshot = Snapshot.load(str(path))
    except Exception:  # corrupt or unsupported on purpose; other suites cover these
        return []
    commits = _commit_files(path)
    metadata = None
    if commits and int(commits[0].name[:20]) > 0:  # older commits are gone: start from a checkpoint
        metadata = Snapshot.load(str(path), version=int(commits[0].name[:20])).metadata
    out, seen = [], set()
    for commit in commits:
        for line in commit.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if action.get("metaData"):
                metadata = Metadata.from_action(action["metaData"])
            if action.get("add") and metadata is not None:
                seen.add(action["add"]["path"])
                out.append((action["add"], metadata))
    out.extend((a, snapshot.metadata) for a in snapshot.add_actions() if a["path"] not in seen)
    return [(a, m) for a, m in out if a.get("stats") and (path / unquote(a["path"])).exists()]


def _selected() -> dict[str, list[tuple[dict, Metadata]]]:
    out = {}
    for entry in load_manifest():
        name = entry["table"]
        path = corpus_path(name)
        if (path / "_delta_log").is_dir() and _spark_written(name, path):
            cases = _cases(name)
            if cases:
                out[name] = cases
    return out


CASES = _selected()
SELECTED = sorted(CASES)


def _instant_ms(text: str) -> int:
    """A delta-spark timestamp stat (any zone offset, or none) as epoch milliseconds."""
    m = re.fullmatch(r"(.+?\.\d{3})(Z|[+-]\d{2}:\d{2})?", text)
    assert m, text
    base = dt.datetime.fromisoformat(m.group(1))
    zone = m.group(2) or "+00:00"
    base = base.replace(tzinfo=dt.timezone.utc if zone == "Z" else dt.datetime.strptime(zone, "%z").tzinfo)
    return round(base.timestamp() * 1000)


def _normalize(stats: dict, metadata: Metadata) -> dict:
    """Compare by meaning: timestamps as instants (delta-spark writes them in the session time zone),
    floats at float precision, numbers as decimals."""
    out = copy.deepcopy(stats)
    for col in leaf_columns(metadata.schema_string, exclude=list(metadata.partition_columns)):
        t = col.type
        if not isinstance(t, PrimitiveType):
            continue
        for key in ("minValues", "maxValues"):
            node = out.get(key)
            for p in col.physical_path[:-1]:
                node = node.get(p) if isinstance(node, dict) else None
            if not isinstance(node, dict) or col.physical_path[-1] not in node:
                continue
            v = node[col.physical_path[-1]]
            if t.name == "timestamp" and isinstance(v, str):
                node[col.physical_path[-1]] = _instant_ms(v)
            elif t.name == "float" and not isinstance(v, str):
                node[col.physical_path[-1]] = float(np.float32(float(v)))
            elif isinstance(v, (int, Decimal)) and not isinstance(v, bool):
                node[col.physical_path[-1]] = Decimal(v)
    return out


def _drop_variant_min_max(expected: dict, metadata: Metadata) -> None:
    dropped = 0
    for col in leaf_columns(metadata.schema_string):
        if isinstance(col.type, PrimitiveType) and col.type.name == "variant":
            for key in ("minValues", "maxValues"):
                parents = [expected.get(key, {})]
                for p in col.physical_path[:-1]:
                    parents.append(parents[-1].get(p, {}))
                if parents[-1].pop(col.physical_path[-1], None) is not None:
                    dropped += 1
                for depth in range(len(parents) - 1, 0, -1):  # structs that only held the variant
                    if parents[depth] == {}:
                        parents[depth - 1].pop(col.physical_path[depth - 1], None)
                if expected.get(key) == {}:
                    del expected[key]
    assert dropped, "the variant exception no longer applies: remove the table from VARIANT_MIN_MAX_TABLES"


def test_corpus_selection_is_broad():
    assert len(SELECTED) >= 40
    assert VARIANT_MIN_MAX_TABLES <= set(SELECTED)


@pytest.mark.parametrize("name", SELECTED)
def test_footer_stats_equal_delta_spark_stats(name):
    path = corpus_path(name)
    for add, metadata in CASES[name]:
        expected = json.loads(add["stats"], parse_float=Decimal)
        ours = parquet_file_stats(str(path / unquote(add["path"])), metadata,
                                  tight_bounds=expected.get("tightBounds"))
        if name in VARIANT_MIN_MAX_TABLES:
            _drop_variant_min_max(expected, metadata)
        ours = json.loads(stats_json(ours), parse_float=Decimal)
        assert _normalize(ours, metadata) == _normalize(expected, metadata), add["path"]


# -- data == footer -------------------------------------------------------------------------------
def _metadata(schema: pa.Schema | dict, partition_columns=(), configuration=None) -> Metadata:
    if isinstance(schema, pa.Schema):
        from airflow_delta_maint.delta.protocol.schema import from_arrow_schema
        schema = from_arrow_schema(schema).to_json()
    return Metadata(id="t", schema_string=json.dumps(schema), partition_columns=tuple(partition_columns),
                    configuration=dict(configuration or {}))


def _write(table: pa.Table, **kwargs) -> pq.FileMetaData:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kwargs)
    return pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata


def _all_types_table(n: int = 300, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < 0.1

    def arr(values, type_):
        return pa.array(values, type=type_, mask=nulls)

    long_strings = ["".join(rng.choice(list("abcXYZ\u00e9\u4e2d\U0001f600\ufffe\uffff"), size=int(rng.integers(0, 60))))
                    for _ in range(n)]
    return pa.table({
        "b": arr(rng.integers(-128, 127, n), pa.int8()),
        "s": arr(rng.integers(-30000, 30000, n), pa.int16()),
        "i": arr(rng.integers(-2**31, 2**31 - 1, n), pa.int32()),
        "l": arr(rng.integers(-2**62, 2**62, n), pa.int64()),
        "f": arr(rng.normal(size=n).astype(np.float32), pa.float32()),
        "d": arr(rng.normal(size=n) * 1e9, pa.float64()),
        "dec": arr([Decimal(int(x)).scaleb(-3) for x in rng.integers(-10**9, 10**9, n)], pa.decimal128(12, 3)),
        "bigdec": arr([Decimal(int(x)).scaleb(-5) for x in rng.integers(-10**15, 10**15, n)], pa.decimal128(30, 5)),
        "bool": arr(rng.random(n) < 0.5, pa.bool_()),
        "str": arr(long_strings, pa.string()),
        "bin": arr([bytes([int(x)]) for x in rng.integers(0, 255, n)], pa.binary()),
        "date": arr(rng.integers(-50000, 50000, n), pa.int32()).cast(pa.date32()),
        "ts": arr(rng.integers(-2**50, 2**50, n), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "ntz": arr(rng.integers(-2**50, 2**50, n), pa.int64()).cast(pa.timestamp("us")),
        "st": pa.StructArray.from_arrays(
            [pa.array(rng.integers(0, 100, n), pa.int64(), mask=rng.random(n) < 0.2),
             pa.StructArray.from_arrays([pa.array([f"v{x}" for x in rng.integers(0, 1000, n)])], names=["z"])],
            names=["x", "y"], mask=pa.array(rng.random(n) < 0.1)),
        "arr": pa.array([None if k % 7 == 0 else [k, None] for k in range(n)], pa.list_(pa.int32())),
        "m": pa.array([None if k % 5 == 0 else [("k", k)] for k in range(n)], pa.map_(pa.string(), pa.int64())),
    })


@pytest.mark.parametrize("row_group_size", [None, 37])
def test_table_stats_equal_file_stats_on_pyarrow_files(row_group_size):
    table = _all_types_table()
    metadata = _metadata(table.schema, configuration={"delta.dataSkippingNumIndexedCols": "-1"})
    md = _write(table, row_group_size=row_group_size)
    from_data = table_stats(table, metadata)
    assert file_stats(md, metadata, table=table) == from_data
    needed = columns_needing_data(md, metadata)
    assert set(needed) == {"f", "d", "arr", "m"}  # NaN-blind footer floats, list/map null counts
    assert file_stats(md, metadata, table=table.select(needed)) == from_data
    # Without data, what the footer cannot prove is left out, the rest is identical.
    footer_only = file_stats(md, metadata)
    for key in ("f", "d"):
        assert key not in footer_only["minValues"] and key not in footer_only["maxValues"]
    for key in ("arr", "m"):
        assert key not in footer_only["nullCount"]
    for part in ("minValues", "maxValues", "nullCount"):
        trimmed = {k: v for k, v in from_data[part].items() if k not in ("f", "d", "arr", "m")}
        assert {k: v for k, v in footer_only[part].items() if k not in ("f", "d", "arr", "m")} == trimmed


def test_stats_shape_and_values():
    table = pa.table({
        "id": pa.array([3, 1, None], pa.int64()),
        "name": pa.array(["b" * 40, "a", None]),
        "ts": pa.array([1_600_000_000_123_456, -1, None], pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([0, 86_400_999_000, None], pa.timestamp("us")),
        "day": pa.array([0, 19000, None], pa.date32()),
        "amount": pa.array([Decimal("1.50"), Decimal("-2.25"), None], pa.decimal128(5, 2)),
        "flag": pa.array([True, None, False]),
        "nested": pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}],
                           pa.struct([("a", pa.int32()), ("b", pa.string())])),
    })
    metadata = _metadata(table.schema)
    stats = table_stats(table, metadata)
    assert stats == file_stats(_write(table), metadata)
    assert stats == {
        "numRecords": 3,
        "minValues": {"id": 1, "name": "a", "ts": "1969-12-31T23:59:59.999Z", "ntz": "1970-01-01T00:00:00.000",
                      "day": "1970-01-01", "amount": Decimal("-2.25"), "nested": {"a": 1, "b": "x"}},
        "maxValues": {"id": 3, "name": "b" * 32 + "\ufffd", "ts": "2020-09-13T12:26:40.123Z",
                      "ntz": "1970-01-02T00:00:00.999", "day": "2022-01-08", "amount": Decimal("1.50"),
                      "nested": {"a": 1, "b": "y"}},
        "nullCount": {"id": 1, "name": 1, "ts": 1, "ntz": 1, "day": 1, "amount": 1, "flag": 1,
                      "nested": {"a": 2, "b": 1}},
    }
    assert stats_json(stats).startswith('{"numRecords":3,"minValues":{"id":1,"name":"a",')
    assert '"amount":-2.25' in stats_json(stats) and '"amount":1.50' in stats_json(stats)


def test_nan_sorts_above_numbers():
    table = pa.table({"x": pa.array([1.5, float("nan"), -2.0, None]), "y": pa.array([float("nan"), None]
                                                                                    + [float("nan")] * 2),
                      "z": pa.array([float("inf"), 0.0, float("-inf"), 1.0], pa.float32())})
    metadata = _metadata(table.schema)
    stats = table_stats(table, metadata)
    assert stats["minValues"] == {"x": -2.0, "y": "NaN", "z": "-Infinity"}
    assert stats["maxValues"] == {"x": "NaN", "y": "NaN", "z": "Infinity"}
    assert stats["nullCount"] == {"x": 1, "y": 1, "z": 0}
    assert file_stats(_write(table), metadata, table=table) == stats
    assert '"maxValues":{"x":"NaN","y":"NaN","z":"Infinity"}' in stats_json(stats)


def test_all_null_and_empty_files():
    table = pa.table({"a": pa.array([None, None], pa.int32()), "s": pa.array([{"x": None}, None],
                                                                              pa.struct([("x", pa.string())]))})
    metadata = _metadata(table.schema)
    assert table_stats(table, metadata) == file_stats(_write(table), metadata) == {
        "numRecords": 2, "minValues": {"s": {}}, "maxValues": {"s": {}}, "nullCount": {"a": 2, "s": {"x": 2}}}
    empty = table.slice(0, 0)
    # Spark sums null flags; a sum over no rows is null and is left out.
    assert table_stats(empty, metadata) == file_stats(_write(empty), metadata) == {
        "numRecords": 0, "minValues": {"s": {}}, "maxValues": {"s": {}}, "nullCount": {"s": {}}}


def test_column_missing_from_file_counts_every_row_as_null():
    schema = {"type": "struct", "fields": [
        {"name": "a", "type": "long", "nullable": True, "metadata": {}},
        {"name": "added", "type": "string", "nullable": True, "metadata": {}}]}
    metadata = _metadata(schema)
    table = pa.table({"a": pa.array([1, 2], pa.int64())})
    expected = {"numRecords": 2, "minValues": {"a": 1}, "maxValues": {"a": 2}, "nullCount": {"a": 0, "added": 2}}
    assert table_stats(table, metadata) == file_stats(_write(table), metadata) == expected


def test_physical_names_partition_columns_and_tight_bounds():
    schema = {"type": "struct", "fields": [
        {"name": "p", "type": "string", "nullable": True,
         "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-p"}},
        {"name": "s", "type": {"type": "struct", "fields": [
            {"name": "v", "type": "integer", "nullable": True,
             "metadata": {"delta.columnMapping.id": 3, "delta.columnMapping.physicalName": "col-v"}}]},
         "nullable": True, "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-s"}}]}
    metadata = _metadata(schema, partition_columns=["p"], configuration={"delta.columnMapping.mode": "name"})
    table = pa.table({"col-s": pa.array([{"col-v": 4}, {"col-v": 9}], pa.struct([("col-v", pa.int32())]))})
    expected = {"numRecords": 2, "minValues": {"col-s": {"col-v": 4}}, "maxValues": {"col-s": {"col-v": 9}},
                "nullCount": {"col-s": {"col-v": 0}}, "tightBounds": True}
    assert table_stats(table, metadata, tight_bounds=True) == expected
    assert file_stats(_write(table), metadata, tight_bounds=True) == expected


def _wide_schema() -> dict:
    def f(name, t):
        return {"name": name, "type": t, "nullable": True, "metadata": {}}
    return {"type": "struct", "fields": [
        f("a", "long"), f("s", {"type": "struct", "fields": [f("x", "long"), f("y.z", "string")]}),
        f("b", "long"), f("c", "long")]}


@pytest.mark.parametrize("config, expected", [
    ({}, ["a", "s.x", "s.`y.z`", "b", "c"]),
    ({"delta.dataSkippingNumIndexedCols": "2"}, ["a", "s.x"]),
    ({"delta.dataSkippingNumIndexedCols": "3"}, ["a", "s.x", "s.`y.z`"]),
    ({"delta.dataSkippingNumIndexedCols": "0"}, []),
    ({"delta.dataSkippingNumIndexedCols": "-1"}, ["a", "s.x", "s.`y.z`", "b", "c"]),
    ({"delta.dataSkippingStatsColumns": "c, S"}, ["s.x", "s.`y.z`", "c"]),
    ({"delta.dataSkippingStatsColumns": "s.`y.z`,a", "delta.dataSkippingNumIndexedCols": "1"}, ["a", "s.`y.z`"]),
])
def test_stats_column_selection(config, expected):
    metadata = _metadata(_wide_schema(), configuration=config)
    assert parse_stats_columns(metadata) == expected


def test_no_stats_columns_gives_only_num_records():
    metadata = _metadata(_wide_schema(), configuration={"delta.dataSkippingNumIndexedCols": "0"})
    table = pa.table({"a": [1], "b": [2], "c": [3]})
    assert table_stats(table, metadata) == file_stats(_write(table), metadata) == {"numRecords": 1}
    assert stats_columns(metadata) == []


def test_partition_column_is_skipped_before_counting():
    metadata = _metadata(_wide_schema(), partition_columns=["a"],
                         configuration={"delta.dataSkippingNumIndexedCols": "1"})
    assert parse_stats_columns(metadata) == ["s.x"]


def test_string_truncation_like_delta_spark():
    assert truncate_min_string("x" * 40) == "x" * 32
    assert truncate_max_string("x" * 32) == "x" * 32
    assert truncate_max_string("x" * 33) == "x" * 32 + "\ufffd"
    # Characters at or above the tie-breaker are kept so the result stays an upper bound.
    assert truncate_max_string("x" * 32 + "\uffff\ufffd\u0041zz") == "x" * 32 + "\uffff\ufffd\ufffd"
    # The max's prefix counts UTF-16 units (as the JVM does): 16 emoji are 32 units, 17 are 34.
    emoji = "\U0001f600"
    assert truncate_max_string(emoji * 16) == emoji * 16
    assert truncate_max_string(emoji * 16 + "ab") == emoji * 16 + "\ufffd"
    assert truncate_min_string(emoji * 40) == emoji * 32  # the min counts characters (Spark substring)
    # Beyond the prefix, characters above U+FFFD (all supplementary ones) are kept too, so the
    # max stays an upper bound in code point order (the order Spark compares strings in).
    assert truncate_max_string("x" * 32 + emoji + "a") == "x" * 32 + emoji + "\ufffd"
    assert truncate_max_string(emoji * 15 + "x" + emoji * 2) == emoji * 15 + "x" + emoji * 2 + "\ufffd"
    assert truncate_max_string(emoji * 15 + "xy" + emoji) == emoji * 15 + "xy" + emoji + "\ufffd"
    assert truncate_max_string(emoji * 15 + "x" + emoji + "ab") == emoji * 15 + "x" + emoji + "\ufffd"
    for value in ("a" * 50, "\u4e2d" * 50, emoji * 50 + "a", "x" * 31 + emoji * 3, "\uffff" * 40 + "a"):
        assert truncate_max_string(value) >= value and truncate_min_string(value) <= value


def test_int96_timestamps_are_read_from_the_data(tmp_path):
    table = pa.table({"t": pa.array([0, 1_700_000_000_000_001, None], pa.timestamp("us", tz="UTC"))})
    path = tmp_path / "int96.parquet"
    pq.write_table(table, path, use_deprecated_int96_timestamps=True)
    metadata = _metadata(table.schema)
    assert columns_needing_data(pq.ParquetFile(path).metadata, metadata) == ["t"]
    stats = parquet_file_stats(str(path), metadata)
    assert stats == table_stats(table, metadata)
    assert stats["maxValues"] == {"t": "2023-11-14T22:13:20.000Z"}


# -- gathered while writing ------------------------------------------------------------------------
def _collect_and_write(table: pa.Table, cuts: list[int], metadata: Metadata) -> tuple[dict, dict]:
    """Write ``table`` in pieces (one row group each) feeding a StatsCollector; return its stats
    and the stats read back from the file."""
    buf = io.BytesIO()
    collector = StatsCollector(metadata)
    with pq.ParquetWriter(buf, table.schema) as writer:
        bounds = [0, *sorted(cuts), table.num_rows]
        for start, end in zip(bounds, bounds[1:]):
            piece = table.slice(start, end - start)
            writer.write_table(piece)
            collector.update(piece)
    data = buf.getvalue()
    return (collector.file_stats(pq.ParquetFile(io.BytesIO(data)), tight_bounds=True),
            parquet_file_stats(pq.ParquetFile(io.BytesIO(data)), metadata, tight_bounds=True))


def test_stats_gathered_while_writing_equal_the_file_read_back():
    table = _all_types_table()
    metadata = _metadata(table.schema, configuration={"delta.dataSkippingNumIndexedCols": "-1"})
    gathered, read_back = _collect_and_write(table, [40, 41, 200], metadata)
    assert gathered == read_back
    assert gathered["tightBounds"] is True and "f" in gathered["minValues"] and "d" in gathered["maxValues"]


_FLOATS = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64),
                    st.sampled_from([float("nan"), 0.0, -0.0, 1.0]))


@settings(max_examples=examples(150), deadline=None)
@given(values=st.lists(st.tuples(_FLOATS, _FLOATS), min_size=0, max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=4))
def test_float_stats_gathered_in_pieces_match_the_whole(values, cuts):
    """NaN above every number, nulls, all-NaN and all-null pieces: merging pieces gives the stats
    of the whole file."""
    table = pa.table({"d": pa.array([v[0] for v in values], pa.float64()),
                      "s": pa.array([{"f": v[1]} for v in values], pa.struct([("f", pa.float32())]))})
    metadata = _metadata(table.schema)
    gathered, read_back = _collect_and_write(table, [min(c, len(values)) for c in cuts], metadata)
    assert gathered == read_back
