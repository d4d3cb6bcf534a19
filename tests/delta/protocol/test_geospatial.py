"""Geospatial columns (the ``geospatial`` table feature): type names, the Arrow mapping, the gate,
statistics and typed checkpoint statistics, Z-order's refusal."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.delta.errors import InvalidArgumentError, UnsupportedFeatureError
from airflow_delta_maint.delta.log.checkpoint import typed_add_columns
from airflow_delta_maint.delta.protocol.actions import Metadata, Protocol
from airflow_delta_maint.delta.protocol.features import JOBS, check_supported, unsupported_features
from airflow_delta_maint.delta.protocol.geospatial import (GeoArrowWkb, GeoType, as_geo_array, geo_type_of_arrow,
                                                           is_geo_arrow_type, parse_geo_type)
from airflow_delta_maint.delta.protocol.geospatial_files import parquet_geo_types
from airflow_delta_maint.delta.parquet.geo_logical_types import GeoLogicalType
from airflow_delta_maint.delta.protocol.schema import (PrimitiveType, from_arrow_type, parse_schema, resolve_column,
                                                       to_arrow_schema)
from airflow_delta_maint.delta.protocol.stats import has_min_max, table_stats

POINT = bytes.fromhex("0101000000000000000000F03F0000000000000040")  # POINT (1 2)


def schema_string(*fields: tuple[str, object]) -> str:
    return json.dumps({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]})


def geo_metadata(location: object = "geometry(OGC:CRS84)", **configuration: str) -> Metadata:
    return Metadata(id="t", schema_string=schema_string(("id", "long"), ("location", location)),
                    partition_columns=(), configuration=dict(configuration))


GEO_PROTOCOL = Protocol(3, 7, ("geospatial",), ("geospatial", "invariants", "appendOnly"))


# -- type names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("geometry(OGC:CRS84)", GeoType("geometry", "OGC:CRS84")),
    ("geometry(EPSG:3857)", GeoType("geometry", "EPSG:3857")),
    ("geometry", GeoType("geometry", "OGC:CRS84")),
    ("GEOMETRY( srid:4326 )", GeoType("geometry", "srid:4326")),
    ("geometry(projjson:crs_property)", GeoType("geometry", "projjson:crs_property")),
    ("geography(OGC:CRS84, SPHERICAL)", GeoType("geography", "OGC:CRS84", "spherical")),
    ("geography(EPSG:4326, karney)", GeoType("geography", "EPSG:4326", "karney")),
    ("geography(OGC:CRS84)", GeoType("geography", "OGC:CRS84", "spherical")),
    ("geography(vincenty)", GeoType("geography", "OGC:CRS84", "vincenty")),
    ("geography", GeoType("geography", "OGC:CRS84", "spherical")),
])
def test_parse_geo_type(name, expected):
    assert parse_geo_type(name) == expected


@pytest.mark.parametrize("name", ["string", "binary", "geometry(OGC:CRS84, spherical)", "geo", "geometry()"])
def test_not_a_geo_type(name):
    assert parse_geo_type(name) is None


def test_unknown_edge_algorithm_is_refused():
    with pytest.raises(UnsupportedFeatureError, match="edge algorithm 'flat'"):
        parse_geo_type("geography(OGC:CRS84, flat)")


def test_type_names_as_delta_spark_writes_them():
    assert GeoType("geometry", "EPSG:3857").type_name == "geometry(EPSG:3857)"
    assert GeoType("geography", "OGC:CRS84", "spherical").type_name == "geography(OGC:CRS84, SPHERICAL)"


def test_schema_keeps_the_type_string_exactly():
    text = schema_string(("g", "geometry(OGC:CRS84)"), ("h", "geography(OGC:CRS84, SPHERICAL)"))
    parsed = parse_schema(text)
    assert parsed.field("g").type == PrimitiveType("geometry(OGC:CRS84)")
    assert parsed.field("h").type.geo == GeoType("geography", "OGC:CRS84", "spherical")
    assert parsed.to_json() == json.loads(text)


def test_unknown_types_still_refused():
    with pytest.raises(UnsupportedFeatureError, match="unsupported Delta data type 'geometry\\(a, b\\)'"):
        parse_schema(schema_string(("g", "geometry(a, b)")))


# -- Arrow -----------------------------------------------------------------------------------------

def test_arrow_schema_uses_geoarrow_wkb():
    schema = to_arrow_schema(schema_string(("g", "geometry(EPSG:3857)"), ("h", "geography(OGC:CRS84, KARNEY)")))
    g, h = schema.field("g").type, schema.field("h").type
    assert is_geo_arrow_type(g) and is_geo_arrow_type(h)
    assert g.storage_type == pa.binary()
    assert json.loads(g.__arrow_ext_serialize__()) == {"crs": "EPSG:3857"}
    assert json.loads(h.__arrow_ext_serialize__()) == {"crs": "OGC:CRS84", "edges": "karney"}
    assert geo_type_of_arrow(h) == GeoType("geography", "OGC:CRS84", "karney")
    assert from_arrow_type(g) == PrimitiveType("geometry(EPSG:3857)")
    assert from_arrow_type(h) == PrimitiveType("geography(OGC:CRS84, KARNEY)")


def test_nested_geo_columns_map_to_arrow():
    text = json.dumps({"type": "struct", "fields": [
        {"name": "shapes", "type": {"type": "array", "elementType": "geometry(OGC:CRS84)", "containsNull": True},
         "nullable": True, "metadata": {}}]})
    assert is_geo_arrow_type(to_arrow_schema(text).field("shapes").type.value_type)
    assert parquet_geo_types(text) == {("shapes", "list", "element"): GeoLogicalType("OGC:CRS84")}


def test_parquet_geo_types_use_physical_names():
    text = json.dumps({"type": "struct", "fields": [
        {"name": "loc", "type": "geography(OGC:CRS84, SPHERICAL)", "nullable": True,
         "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1"}},
        {"name": "s", "type": {"type": "struct", "fields": [
            {"name": "g", "type": "geometry(EPSG:3857)", "nullable": True, "metadata": {}}]},
         "nullable": True, "metadata": {}}]})
    assert parquet_geo_types(text) == {("col-1",): GeoLogicalType("OGC:CRS84", "spherical"),
                                       ("s", "g"): GeoLogicalType("EPSG:3857")}


def test_binary_and_other_wkb_arrays_become_the_table_type():
    target = GeoType("geometry", "OGC:CRS84").arrow_type()
    out = as_geo_array(pa.chunked_array([pa.array([POINT, None])]), target)
    assert out.type == target and out.storage.to_pylist() == [POINT, None]
    other = pa.ExtensionArray.from_storage(GeoArrowWkb(b'{"crs": "OGC:CRS84", "crs_type": "authority_code"}'),
                                           pa.array([POINT]))
    assert as_geo_array(other, target).type == target


def test_pyarrow_round_trip_keeps_the_values():
    schema = to_arrow_schema(geo_metadata())
    table = pa.table({"id": pa.array([1, 2]), "location": as_geo_array(pa.array([POINT, None]),
                                                                      schema.field("location").type)}, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    back = pq.read_table(io.BytesIO(buf.getvalue()))
    assert back.column("location").combine_chunks().storage.to_pylist() == [POINT, None]
    column = pq.ParquetFile(io.BytesIO(buf.getvalue())).schema.column(1)
    assert json.loads(column.logical_type.to_json())["Type"] == "Geometry"


# -- the gate --------------------------------------------------------------------------------------

@pytest.mark.parametrize("job", JOBS)
def test_every_job_honours_geospatial(job):
    assert unsupported_features(GEO_PROTOCOL, job, geo_metadata()) == []
    check_supported(GEO_PROTOCOL, job, geo_metadata())


def test_gate_still_names_unknown_features_beside_geospatial():
    protocol = Protocol(3, 7, ("geospatial", "futureFeature"), ("geospatial", "futureFeature"))
    with pytest.raises(UnsupportedFeatureError, match="unknown reader feature 'futureFeature'"):
        check_supported(protocol, "vacuum", geo_metadata())


# -- statistics ------------------------------------------------------------------------------------

def test_statistics_count_nulls_and_never_bound_geo_columns():
    metadata = geo_metadata()
    column = resolve_column(metadata.schema_string, "location")
    assert not has_min_max(column)
    schema = to_arrow_schema(metadata)
    table = pa.table({"id": pa.array([1, 2, 3]),
                      "location": as_geo_array(pa.array([POINT, None, POINT]), schema.field("location").type)},
                     schema=schema)
    stats = table_stats(table, metadata)
    assert stats == {"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3},
                     "nullCount": {"id": 0, "location": 1}}


def test_typed_checkpoint_statistics_leave_geo_bounds_out():
    metadata = geo_metadata(**{"delta.checkpoint.writeStatsAsStruct": "true"})
    stats = '{"numRecords":2,"minValues":{"id":1},"maxValues":{"id":2},"nullCount":{"id":0,"location":1}}'
    files = pa.table({"path": ["a.parquet"], "partitionValues": pa.array([[]], pa.map_(pa.string(), pa.string())),
                      "stats": [stats]})
    parsed = typed_add_columns(metadata, files)["stats_parsed"]
    assert parsed.type.field("minValues").type == pa.struct([pa.field("id", pa.int64())])
    assert parsed.to_pylist()[0]["nullCount"] == {"id": 0, "location": 1}


def test_zorder_by_a_geo_column_is_refused():
    from airflow_delta_maint.delta.plans.optimize_inputs import validate_zorder

    class Header:
        partition_columns: tuple[str, ...] = ()
        metadata = geo_metadata()

    with pytest.raises(InvalidArgumentError, match="cannot Z-order by geometry column 'location'"):
        validate_zorder(Header(), ["location"])  # type: ignore[arg-type]
    assert [c.logical_path for c in validate_zorder(Header(), ["id"])] == [("id",)]  # type: ignore[arg-type]


_FOREIGN_FIRST = """
import io, json
import pyarrow as pa, pyarrow.parquet as pq

class ForeignWkb(pa.ExtensionType):  # another library's geoarrow.wkb, registered before this package's
    def __init__(self, meta=b"{}"):
        self.meta = meta
        super().__init__(pa.binary(), "geoarrow.wkb")
    def __arrow_ext_serialize__(self):
        return self.meta
    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls(serialized)

pa.register_extension_type(ForeignWkb())
from airflow_delta_maint.delta.protocol.geospatial import GeoType, as_geo_array
t = GeoType("geometry", "EPSG:3857").arrow_type()
arr = as_geo_array(pa.array([bytes.fromhex("0101000000000000000000F03F0000000000000040")]), t)
buf = io.BytesIO()
pq.write_table(pa.table({"g": arr}), buf)
column = pq.ParquetFile(io.BytesIO(buf.getvalue())).schema.column(0)
print(json.dumps([type(t).__name__, json.loads(t.__arrow_ext_serialize__()), column.logical_type.to_json()]))
"""


def test_another_librarys_registered_geoarrow_type_serves():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FOREIGN_FIRST], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    name, meta, logical = json.loads(done.stdout.strip().splitlines()[-1])
    assert (name, meta) == ("ForeignWkb", {"crs": "EPSG:3857"})
    assert json.loads(logical) == {"Type": "Geometry", "crs": "EPSG:3857"}
