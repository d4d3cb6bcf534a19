"""GEOMETRY and GEOGRAPHY logical types in footers: files this project writes spell out the table's CRS
and edge algorithm as delta-spark does, and row-group copies keep them and the chunks' bounding boxes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.parquet.footer import read_footer
from airflow_delta_maint.delta.parquet.geo_logical_types import (GeoLogicalType, adopt_geo_types, element_paths,
                                                                 set_file_geo_types)
from airflow_delta_maint.delta.parquet.row_group_copy import RowGroupCopyWriter, reference_for_schema
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.geospatial import as_geo_array
from airflow_delta_maint.delta.protocol.geospatial_files import geo_reference, set_geo_types
from airflow_delta_maint.delta.protocol.schema import to_arrow_schema

POINTS = [bytes.fromhex(h) for h in ("0101000000000000000000F03F0000000000000040",     # (1 2)
                                     "0101000000CDCCCCCCCCCC2A400000000000404A40",     # (13.4 52.5)
                                     "01010000009A999999997952C09A99999999594440")]    # (-73.9 40.7)


def metadata(location: str) -> Metadata:
    fields = [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
              {"name": "location", "type": location, "nullable": True, "metadata": {}}]
    return Metadata(id="t", schema_string=json.dumps({"type": "struct", "fields": fields}), partition_columns=(),
                    configuration={})


def rows(md: Metadata, ids: range) -> pa.Table:
    schema = to_arrow_schema(md)
    wkb = pa.array([POINTS[i % 3] if i % 4 else None for i in ids], pa.binary())
    return pa.table({"id": pa.array(list(ids), pa.int64()),
                     "location": as_geo_array(wkb, schema.field("location").type)}, schema=schema)


def logical(path: str | Path | io.BytesIO, leaf: int = 1) -> dict:
    return json.loads(pq.ParquetFile(path).schema.column(leaf).logical_type.to_json())


def test_pyarrow_leaves_the_default_crs_out_and_the_table_puts_it_back(tmp_path):
    md = metadata("geometry(OGC:CRS84)")
    path = tmp_path / "f.parquet"
    pq.write_table(rows(md, range(10)), path)
    assert logical(path) == {"Type": "Geometry"}
    assert set_geo_types(path, md)
    assert logical(path) == {"Type": "Geometry", "crs": "OGC:CRS84"}
    assert not set_geo_types(path, md)  # already there: the file is left alone
    read = pq.read_table(path)
    assert read.column("location").to_pylist() == [POINTS[i % 3] if i % 4 else None for i in range(10)]
    geo = pq.ParquetFile(path).metadata.row_group(0).column(1).geo_statistics
    assert (geo.xmin, geo.xmax, geo.ymin, geo.ymax) == (-73.9, 13.4, 2.0, 52.5)


def test_geography_gets_its_algorithm_spelled_out(tmp_path):
    md = metadata("geography(OGC:CRS84, SPHERICAL)")
    path = tmp_path / "f.parquet"
    pq.write_table(rows(md, range(5)), path)
    set_geo_types(path, md)
    element = read_footer(path).schema[2]
    assert element["logicalType"]["GEOGRAPHY"]["crs"] == "OGC:CRS84"
    assert element["logicalType"]["GEOGRAPHY"]["algorithm"] == 0
    assert logical(path)["Type"] == "Geography"


def test_set_file_geo_types_touches_only_byte_array_leaves_at_the_paths(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": [1], "location": [b"x"]}), path)
    assert not set_file_geo_types(path, {("id",): GeoLogicalType("OGC:CRS84")})
    assert set_file_geo_types(path, {("location",): GeoLogicalType("EPSG:3857")})
    assert logical(path) == {"Type": "Geometry", "crs": "EPSG:3857"}


def test_element_paths_follow_nesting(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"s": pa.array([{"a": 1, "l": [b"x"]}]), "z": [1]}), path)
    assert [p for _, p in element_paths(read_footer(path).schema)] == [
        ("s",), ("s", "a"), ("s", "l"), ("s", "l", "list"), ("s", "l", "list", "element"), ("z",)]


def test_adopt_geo_types_only_between_the_same_kind(tmp_path):
    geometry, geography = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(rows(metadata("geometry(OGC:CRS84)"), range(3)), geometry)
    pq.write_table(rows(metadata("geography(OGC:CRS84, SPHERICAL)"), range(3)), geography)
    assert adopt_geo_types(read_footer(geometry).schema, read_footer(geography).schema) is None


def test_row_group_copy_keeps_the_logical_type_and_bounding_boxes(tmp_path):
    md = metadata("geometry(OGC:CRS84)")
    copied = tmp_path / "copied.parquet"   # an input as delta-spark writes it: the CRS spelled out
    pq.write_table(rows(md, range(0, 20)), copied, compression="snappy")
    set_geo_types(copied, md)
    reference = geo_reference(reference_for_schema(to_arrow_schema(md)), md)
    out = io.BytesIO()
    writer = RowGroupCopyWriter(out, reference, "snappy")
    assert writer.refusal(read_footer(copied)) is None
    writer.add_file(str(copied))
    writer.add_table(rows(md, range(20, 30)))  # pyarrow's encoding, its CRS left out, adopts the reference's
    result = writer.close()
    assert len(result.parts) == 2
    out.seek(0)
    assert logical(out) == {"Type": "Geometry", "crs": "OGC:CRS84"}
    pf = pq.ParquetFile(io.BytesIO(out.getvalue()))
    assert pf.read().column("location").to_pylist() == [POINTS[i % 3] if i % 4 else None for i in range(30)]
    boxes = [pf.metadata.row_group(r).column(1).geo_statistics for r in range(pf.metadata.num_row_groups)]
    assert [(b.xmin, b.xmax, b.ymin, b.ymax) for b in boxes] == [(-73.9, 13.4, 2.0, 52.5)] * 2
    copied_meta = read_footer(io.BytesIO(out.getvalue())).row_groups[0]["columns"][1]["meta_data"]
    assert copied_meta["geospatial_statistics"] == \
        read_footer(copied).row_groups[0]["columns"][1]["meta_data"]["geospatial_statistics"]


def test_pyarrows_own_reference_refuses_an_input_with_another_crs(tmp_path):
    md = metadata("geometry(OGC:CRS84)")
    path = tmp_path / "f.parquet"
    pq.write_table(rows(md, range(4)), path, compression="snappy")
    set_file_geo_types(path, {("location",): GeoLogicalType("EPSG:3857")})
    writer = RowGroupCopyWriter(io.BytesIO(), geo_reference(reference_for_schema(to_arrow_schema(md)), md), "snappy")
    assert "location" in (writer.refusal(read_footer(path)) or "")
