"""Schema parsing, column mapping, the Arrow mapping and partition values, checked on the corpus."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.delta.errors import (CorruptLogError, DeltaError, InvalidArgumentError,
                                              UnsupportedFeatureError)
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.schema import (ArrayType, MapType, PrimitiveType, StructType, column_mapping_mode,
                                                       from_arrow_schema, leaf_columns, parse_partition_value, parse_schema,
                                                       resolve_column, split_column_name, to_arrow_schema)
from tests.conftest import corpus_path, load_manifest


def _load_all() -> dict[str, Snapshot]:
    out = {}
    for entry in load_manifest():
        try:
            out[entry["table"]] = Snapshot.load(str(corpus_path(entry["table"])))
        except DeltaError:
            pass  # corrupt or unsupported on purpose; other suites cover these
    return out


SNAPSHOTS = _load_all()
NAMES = sorted(SNAPSHOTS)
MAPPED = sorted(n for n, s in SNAPSHOTS.items() if column_mapping_mode(s.metadata) != "none")


def test_corpus_covers_column_mapping():
    assert len(NAMES) >= 140
    assert {"golden/table-with-columnmapping-mode-id", "golden/table-with-columnmapping-mode-name",
            "rs/table_with_column_mapping"} <= set(MAPPED)


def _field_ids(t: pa.DataType, out: list[int]) -> None:
    children = []
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
    elif pa.types.is_list(t):
        children = [t.value_field]
    elif pa.types.is_map(t):
        children = [t.key_field, t.item_field]
    for f in children:
        if f.metadata and b"PARQUET:field_id" in f.metadata:
            out.append(int(f.metadata[b"PARQUET:field_id"]))
        _field_ids(f.type, out)


@pytest.mark.parametrize("name", NAMES)
def test_corpus_schema_round_trips(name):
    metadata = SNAPSHOTS[name].metadata
    schema = parse_schema(metadata)
    # The parsed schema serializes back to the log's JSON (metadata included).
    assert schema.to_json() == metadata.schema
    # Delta -> Arrow -> Delta keeps names, types and nullability.
    logical = to_arrow_schema(metadata, physical=False, exclude=[])
    assert from_arrow_schema(logical) == schema
    physical = to_arrow_schema(metadata)
    assert physical.names == [f.physical_name for f in schema if f.name not in metadata.partition_columns]
    ids: list[int] = []
    for f in physical:
        if f.metadata and b"PARQUET:field_id" in f.metadata:
            ids.append(int(f.metadata[b"PARQUET:field_id"]))
        _field_ids(f.type, ids)
    if column_mapping_mode(metadata) == "none":
        assert ids == []
    else:
        top = [f for f in schema if f.name not in metadata.partition_columns]
        assert set(_delta_ids(StructType(tuple(top)))) <= set(ids) and len(ids) == len(set(ids))


def _delta_ids(t) -> list[int]:
    out: list[int] = []
    if isinstance(t, StructType):
        for f in t:
            if f.field_id is not None:
                out.append(f.field_id)
            out.extend(_delta_ids(f.type))
    elif isinstance(t, ArrayType):
        out.extend(_delta_ids(t.element_type))
    elif isinstance(t, MapType):
        out.extend(_delta_ids(t.key_type) + _delta_ids(t.value_type))
    return out


@pytest.mark.parametrize("name", MAPPED)
def test_physical_schema_matches_data_files(name):
    snapshot = SNAPSHOTS[name]
    physical = to_arrow_schema(snapshot.metadata)
    checked = 0
    for add in snapshot.add_actions():
        path = corpus_path(name) / unquote(add["path"])
        if not path.exists():
            continue
        pf = pq.ParquetFile(path)
        file_schema = pf.schema_arrow
        columns = [pf.schema.column(i) for i in range(len(pf.schema))]
        int96 = {c.path for c in columns if c.physical_type == "INT96"}
        for f in physical:
            if f.name not in file_schema.names:
                continue  # a column added after the file was written
            g = file_schema.field(f.name)
            if f.name in int96:  # legacy Spark timestamps carry no time zone flag
                g = g.with_type(pa.timestamp("us", tz="UTC"))
            assert from_arrow_schema(pa.schema([g])).fields[0].type == from_arrow_schema(pa.schema([f])).fields[0].type
            if g.metadata and b"PARQUET:field_id" in g.metadata:
                assert g.metadata[b"PARQUET:field_id"] == f.metadata[b"PARQUET:field_id"]
        checked += 1
    assert checked


def test_primitive_arrow_types():
    fields = [(n, t) for n, t in [
        ("s", "string"), ("l", "long"), ("i", "integer"), ("sh", "short"), ("b", "byte"), ("f", "float"),
        ("d", "double"), ("bo", "boolean"), ("bi", "binary"), ("da", "date"), ("ts", "timestamp"),
        ("ntz", "timestamp_ntz"), ("dec", "decimal(38, 18)")]]
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": n != "l", "metadata": {}}
                                           for n, t in fields]}
    arrow = to_arrow_schema(json.dumps(schema))
    assert arrow == pa.schema([
        pa.field("s", pa.string()), pa.field("l", pa.int64(), nullable=False), pa.field("i", pa.int32()),
        pa.field("sh", pa.int16()), pa.field("b", pa.int8()), pa.field("f", pa.float32()),
        pa.field("d", pa.float64()), pa.field("bo", pa.bool_()), pa.field("bi", pa.binary()),
        pa.field("da", pa.date32()), pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ntz", pa.timestamp("us")), pa.field("dec", pa.decimal128(38, 18))])


def _cm(name, type_, fid, physical=None, nullable=True, **extra):
    meta = {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": physical or f"col-{fid}"}
    meta.update(extra)
    return {"name": name, "type": type_, "nullable": nullable, "metadata": meta}


NESTED = {"type": "struct", "fields": [
    _cm("id", "long", 1),
    _cm("info", {"type": "struct", "fields": [_cm("a.b", "string", 3), _cm("Deep", {"type": "struct", "fields": [
        _cm("x", "integer", 5)]}, 4)]}, 2),
    _cm("tags", {"type": "array", "elementType": "string", "containsNull": False}, 6,
        **{"delta.columnMapping.nested.ids": {"col-6.element": 7}}),
    _cm("props", {"type": "map", "keyType": "string", "valueType": {"type": "struct", "fields": [
        _cm("v", "double", 10)]}, "valueContainsNull": True}, 8,
        **{"delta.columnMapping.nested.ids": {"col-8.key": 11, "col-8.value": 12}}),
    _cm("part", "date", 13),
]}


def _nested_metadata(mode: str = "name") -> Metadata:
    return Metadata(id="t", schema_string=json.dumps(NESTED), partition_columns=("part",),
                    configuration={"delta.columnMapping.mode": mode})


def test_column_mapping_arrow_schema_with_field_ids():
    arrow = to_arrow_schema(_nested_metadata("id"))
    assert arrow.names == ["col-1", "col-2", "col-6", "col-8"]  # partition column left out
    ids: list[int] = []
    for f in arrow:
        ids.append(int(f.metadata[b"PARQUET:field_id"]))
        _field_ids(f.type, ids)
    assert ids == [1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 10]
    info = arrow.field("col-2").type
    assert [info.field(i).name for i in range(info.num_fields)] == ["col-3", "col-4"]
    assert arrow.field("col-6").type.value_field.nullable is False
    logical = to_arrow_schema(_nested_metadata(), physical=False, exclude=[])
    assert logical.names == ["id", "info", "tags", "props", "part"]
    # Without column mapping, no field ids are set.
    assert to_arrow_schema(_nested_metadata("none")).field("col-1").metadata is None


def test_column_mapping_mode():
    assert column_mapping_mode({}) == "none"
    assert column_mapping_mode(None) == "none"
    assert column_mapping_mode({"delta.columnMapping.mode": "Name"}) == "name"
    assert column_mapping_mode(_nested_metadata("id")) == "id"
    with pytest.raises(UnsupportedFeatureError, match="bogus"):
        column_mapping_mode({"delta.columnMapping.mode": "bogus"})


def test_fields_types_and_physical_names():
    schema = parse_schema(NESTED)
    tags = schema.field("tags")
    assert tags.type == ArrayType(PrimitiveType("string"), False)
    assert tags.physical_name == "col-6" and tags.field_id == 6
    props = schema.field("props").type
    assert isinstance(props, MapType) and props.value_contains_null
    assert PrimitiveType("decimal(38,18)").precision_scale == (38, 18)
    plain = parse_schema('{"type":"struct","fields":[{"name":"a","type":"decimal(5, 2)","nullable":true,'
                         '"metadata":{}}]}')
    assert plain.field("a").physical_name == "a" and plain.field("a").field_id is None
    assert plain.field("a").type == PrimitiveType("decimal(5,2)")


def test_leaf_columns_in_schema_order():
    leaves = leaf_columns(_nested_metadata())
    assert [c.logical_path for c in leaves] == [("id",), ("info", "a.b"), ("info", "Deep", "x"), ("tags",), ("props",)]
    assert [c.physical_path for c in leaves] == [("col-1",), ("col-2", "col-3"), ("col-2", "col-4", "col-5"),
                                                 ("col-6",), ("col-8",)]
    assert leaves[1].name == "info.`a.b`"
    assert [c.logical_path for c in leaf_columns(NESTED)][-1] == ("part",)


def test_resolve_column():
    metadata = _nested_metadata()
    assert resolve_column(metadata, "id").physical_path == ("col-1",)
    assert resolve_column(metadata, "info.`a.b`").physical_path == ("col-2", "col-3")
    assert resolve_column(metadata, "INFO.deep.X").logical_path == ("info", "Deep", "x")
    assert resolve_column(metadata, ["info", "a.b"]).field.field_id == 3
    assert isinstance(resolve_column(metadata, "info").type, StructType)
    for bad in ("nope", "info.nope", "id.x", "info.a.b"):
        with pytest.raises(InvalidArgumentError, match=bad.replace(".", r"\.")):
            resolve_column(metadata, bad)
    with pytest.raises(InvalidArgumentError):
        resolve_column(metadata, "info.`a.b")


def test_resolve_prefers_exact_case_and_rejects_ambiguity():
    schema = {"type": "struct", "fields": [{"name": n, "type": "long", "nullable": True, "metadata": {}}
                                           for n in ("a", "A", "b")]}
    assert resolve_column(json.dumps(schema), "A").logical_path == ("A",)
    assert resolve_column(json.dumps(schema), "B").logical_path == ("b",)
    schema["fields"] = [{"name": n, "type": "long", "nullable": True, "metadata": {}} for n in ("Ab", "AB")]
    with pytest.raises(InvalidArgumentError, match="'ab' is ambiguous"):
        resolve_column(json.dumps(schema), "ab")


def test_split_column_name():
    assert split_column_name("a.b") == ["a", "b"]
    assert split_column_name("`a.b`.c") == ["a.b", "c"]
    assert split_column_name("`a``b`") == ["a`b"]
    with pytest.raises(InvalidArgumentError):
        split_column_name("a..b")


def test_bad_schemas():
    with pytest.raises(CorruptLogError):
        parse_schema("{not json")
    with pytest.raises(UnsupportedFeatureError, match="interval"):
        parse_schema('{"type":"struct","fields":[{"name":"a","type":"interval","nullable":true,"metadata":{}}]}')
    with pytest.raises(CorruptLogError):
        parse_schema('{"type":"struct","fields":[{"type":"long"}]}')


@pytest.mark.parametrize("value, type_, expected", [
    (None, "string", None), ("", "long", None), ("", "string", None), ("abc", "string", "abc"),
    ("42", "long", 42), ("-7", "integer", -7), ("3", "short", 3), ("-1", "byte", -1),
    ("1.5", "double", 1.5), ("2.25", "float", 2.25), ("true", "boolean", True), ("false", "boolean", False),
    ("2021-02-03", "date", dt.date(2021, 2, 3)),
    ("2021-02-03 04:05:06", "timestamp", dt.datetime(2021, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)),
    ("2021-02-03 04:05:06.123456", "timestamp", dt.datetime(2021, 2, 3, 4, 5, 6, 123456, tzinfo=dt.timezone.utc)),
    ("2021-02-03T04:05:06.001Z", "timestamp", dt.datetime(2021, 2, 3, 4, 5, 6, 1000, tzinfo=dt.timezone.utc)),
    ("2021-02-03 04:05:06.5", "timestamp_ntz", dt.datetime(2021, 2, 3, 4, 5, 6, 500000)),
    ("123.450", "decimal(10,3)", Decimal("123.450")), ("\u0001\u0002\u00ff", "binary", b"\x01\x02\xff"),
])
def test_parse_partition_value(value, type_, expected):
    assert parse_partition_value(value, type_) == expected


@pytest.mark.parametrize("value, type_", [("x", "long"), ("maybe", "boolean"), ("2021-13", "date"),
                                          ("yesterday", "timestamp"), ("1.2.3", "decimal(5,2)")])
def test_parse_partition_value_rejects_bad_values(value, type_):
    with pytest.raises(InvalidArgumentError, match="partition value"):
        parse_partition_value(value, type_)


def test_every_corpus_partition_value_parses():
    parsed = 0
    for name, snapshot in SNAPSHOTS.items():
        partition_columns = snapshot.metadata.partition_columns
        if not partition_columns or snapshot.files.num_rows == 0:
            continue
        schema = parse_schema(snapshot.metadata)
        types = {f.name: f.type for f in schema}
        for add in snapshot.add_actions():
            for column, value in (add.get("partitionValues") or {}).items():
                if column in types:
                    parsed_value = parse_partition_value(value, types[column])
                    assert parsed_value is None or not isinstance(parsed_value, str) or \
                        types[column] == PrimitiveType("string"), (name, column, value)
                    parsed += 1
    assert parsed > 50
    # A known value: the ISO-8601 timestamp partition written by delta-spark.
    snap = SNAPSHOTS["golden/kernel-timestamp-partition-col-ISO8601"]
    values = {parse_partition_value(a["partitionValues"]["ts"], "timestamp") for a in snap.add_actions()}
    assert dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc) in values


def test_variant_maps_to_its_physical_struct():
    arrow = to_arrow_schema('{"type":"struct","fields":[{"name":"v","type":"variant","nullable":true,"metadata":{}}]}')
    assert arrow.field("v").type == pa.struct([pa.field("value", pa.binary(), nullable=False),
                                               pa.field("metadata", pa.binary(), nullable=False)])
    assert from_arrow_schema(arrow).field("v").type == PrimitiveType("variant")
