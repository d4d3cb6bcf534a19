"""The VARIANT logical type on a file's groups: element paths, annotation in a footer and in a file
(pages untouched, values the same), and the annotation carried onto the tables a copy writer encodes."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.delta.parquet.footer import read_footer
from airflow_delta_maint.delta.parquet.row_group_copy import RowGroupCopyWriter, reference_for_schema
from airflow_delta_maint.delta.parquet.variant_groups import (adopt_annotations, annotate, annotate_file,
                                                              element_paths, variant_paths)

UNSHREDDED = pa.struct([pa.field("value", pa.binary(), nullable=False),
                        pa.field("metadata", pa.binary(), nullable=False)])
SHREDDED = pa.struct([pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary()),
                      pa.field("typed_value", pa.struct([pa.field("n", pa.struct([
                          pa.field("value", pa.binary()), pa.field("typed_value", pa.int64())]), nullable=False)]))])
METADATA = b"\x01\x01\x00\x01n"  # a dictionary of one name, "n"


def table() -> pa.Table:
    v = pa.array([{"value": b"\x0c\x01", "metadata": b"\x01\x00\x00"}, None], UNSHREDDED)
    w = pa.array([{"metadata": METADATA, "value": None, "typed_value": {"n": {"value": None, "typed_value": 7}}},
                  {"metadata": METADATA, "value": b"\x00", "typed_value": None}], SHREDDED)
    nested = pa.array([{"doc": {"value": b"\x00", "metadata": b"\x01\x00\x00"}, "x": 1}, None],
                      pa.struct([pa.field("doc", UNSHREDDED), pa.field("x", pa.int32())]))
    listed = pa.array([[{"value": b"\x00", "metadata": b"\x01\x00\x00"}], []], pa.list_(UNSHREDDED))
    return pa.table({"id": [1, 2], "v": v, "w": w, "s": nested, "l": listed})


def parquet(t: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return buf.getvalue()


PATHS = [("v",), ("w",), ("s", "doc"), ("l", "list", "element")]


def test_element_paths_follow_the_depth_first_schema() -> None:
    footer = read_footer(io.BytesIO(parquet(table())))
    paths = element_paths(footer.schema)
    assert paths[0] == ()
    assert ("w", "typed_value", "n", "typed_value") in paths
    assert ("s", "x") in paths and ("l", "list", "element", "metadata") in paths
    assert len(paths) == len(footer.schema)


def test_annotate_marks_each_group_once_and_refuses_what_is_no_group() -> None:
    footer = read_footer(io.BytesIO(parquet(table())))
    assert variant_paths(footer.schema) == []  # pyarrow writes no VARIANT annotation
    assert annotate(footer.schema, PATHS) == 4
    assert variant_paths(footer.schema) == PATHS
    assert annotate(footer.schema, PATHS) == 0
    with pytest.raises(ValueError, match="not a group"):
        annotate(footer.schema, [("id",)])
    with pytest.raises(ValueError, match="no group nope"):
        annotate(footer.schema, [("nope",)])


def test_annotate_file_rewrites_only_the_footer(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    data = parquet(table())
    path.write_bytes(data)
    before = read_footer(path)
    after = annotate_file(path, PATHS)
    body = path.read_bytes()
    assert body[:before.file_size - before.length - 8] == data[:before.file_size - before.length - 8]
    assert variant_paths(after.schema) == PATHS
    text = str(pq.ParquetFile(path).schema)
    assert text.count("(Variant(1))") == 4
    assert pq.read_table(path).equals(pq.read_table(io.BytesIO(data)))
    assert annotate_file(path, PATHS).raw == after.raw  # annotating again changes nothing


def test_copy_writer_carries_the_reference_annotation_onto_encoded_tables() -> None:
    t = table()
    reference = reference_for_schema(t.schema)
    annotate(reference.schema, PATHS)
    sink = io.BytesIO()
    writer = RowGroupCopyWriter(sink, reference)
    writer.add_table(t)  # pyarrow's footer of the table lacks the annotation: taken from the reference
    writer.add_table(t)
    writer.close()
    out = sink.getvalue()
    assert variant_paths(read_footer(io.BytesIO(out)).schema) == PATHS
    assert pq.read_table(io.BytesIO(out)).equals(pa.concat_tables([t, t]))


def test_adopt_annotations_takes_only_the_paths_the_footer_has() -> None:
    reference = read_footer(io.BytesIO(parquet(table())))
    annotate(reference.schema, PATHS)
    other = read_footer(io.BytesIO(parquet(table().select(["id", "v"]))))
    assert adopt_annotations(other, reference)
    assert variant_paths(other.schema) == [("v",)]
    assert not adopt_annotations(other, reference)
