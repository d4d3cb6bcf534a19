"""Variant columns in a rewrite: the shape chosen for an output, rows carried into it without a value
changing (unshredded into shredded, shredded into another shape rebuilt), required fields kept.

Values are compared as JSON through pyspark's pure-Python variant decoder (no Spark session)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.variant_utils import VariantUtils

from airflow_delta_maint.delta.protocol.variant_binary import (encode_array, encode_metadata, object_fields,
                                                               parse_metadata, primitive_values, rebuild_values,
                                                               value_size)
from airflow_delta_maint.delta.protocol.variant_binary import _Dictionary as Dictionary
from airflow_delta_maint.delta.protocol.variant_binary import encode_object
from airflow_delta_maint.delta.protocol.variant_layout import (UNSHREDDED, conform_variant, is_variant_struct,
                                                               layout_schema, shredded_type, variant_group_paths,
                                                               variant_paths)

NAMES = [b"n", b"s", b"x"]
METADATA = encode_metadata(NAMES, True)
_PAIR = [pa.field("value", pa.binary())]
OBJECT_SHAPE = pa.struct([
    pa.field("n", pa.struct(_PAIR + [pa.field("typed_value", pa.int64())]), nullable=False),
    pa.field("s", pa.struct(_PAIR + [pa.field("typed_value", pa.string())]), nullable=False)])
ARRAY_SHAPE = pa.list_(pa.field("element", pa.struct(_PAIR + [pa.field("typed_value", pa.float64())]),
                                nullable=False))


def as_json(value: bytes | None, metadata: bytes | None) -> object:
    return None if value is None else json.loads(VariantUtils.to_json(value, metadata))


def small_int(i: int) -> bytes:
    return bytes([3 << 2, i])  # an int8 primitive


def short_string(s: str) -> bytes:
    raw = s.encode()
    return bytes([(len(raw) << 2) | 1]) + raw


def object_value(fields: dict[str, bytes]) -> bytes:
    return encode_object({k.encode(): v for k, v in fields.items()}, Dictionary(METADATA))


def test_metadata_and_containers_round_trip() -> None:
    assert parse_metadata(METADATA) == (NAMES, True)
    obj = object_value({"x": small_int(5), "n": short_string("a")})
    assert as_json(obj, METADATA) == {"n": "a", "x": 5}
    assert [fid for fid, _ in object_fields(obj)] == [0, 2]  # sorted by name
    assert value_size(obj) == len(obj)
    arr = encode_array([small_int(1), obj])
    assert value_size(arr + b"junk") == len(arr)
    assert as_json(arr, METADATA) == [1, {"n": "a", "x": 5}]
    big = encode_array([short_string("y" * 10)] * 300)  # more than 255 elements: a large array
    assert as_json(big, METADATA) == ["y" * 10] * 300


@pytest.mark.parametrize("arrow_type, values", [
    (pa.int8(), [1, -2]), (pa.int16(), [300]), (pa.int32(), [-70000]), (pa.int64(), [1 << 40]),
    (pa.float32(), [1.5]), (pa.float64(), [-2.25]), (pa.bool_(), [True, False]), (pa.string(), ["hé", "z" * 80]),
    (pa.decimal128(9, 2), ["12.34"]), (pa.decimal128(18, 3), ["-123456789012.345"]),
    (pa.decimal128(38, 1), ["12345678901234567890123.4"]), (pa.date32(), [19000]),
])
def test_primitives_encode_to_the_same_values(arrow_type: pa.DataType, values: list) -> None:
    import decimal

    if pa.types.is_decimal(arrow_type):
        values = [decimal.Decimal(v) for v in values]
    arr = pa.array(values + [None], arrow_type)
    encoded = primitive_values(arr)
    assert encoded[-1] is None
    for v, e in zip(values, encoded):
        assert e is not None and value_size(e) == len(e)
        got = VariantUtils.to_python(e, METADATA)
        if pa.types.is_date(arrow_type):
            assert (got - __import__("datetime").date(1970, 1, 1)).days == v
        elif pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type):
            assert got == v
        else:
            assert got == v and type(got) is type(v)


def shredded_rows() -> pa.Array:
    """Rows of a variant shredded as an object {n: int64, s: string}: fully shredded, partly (residual x),
    a field left in ``value`` (s not a string), a field missing, a non-object, a null variant column."""
    rows = [
        {"metadata": METADATA, "value": None,
         "typed_value": {"n": {"value": None, "typed_value": 1}, "s": {"value": None, "typed_value": "a"}}},
        {"metadata": METADATA, "value": object_value({"x": small_int(9)}),
         "typed_value": {"n": {"value": None, "typed_value": 2}, "s": {"value": None, "typed_value": "b"}}},
        {"metadata": METADATA, "value": None,
         "typed_value": {"n": {"value": None, "typed_value": 3}, "s": {"value": small_int(4), "typed_value": None}}},
        {"metadata": METADATA, "value": None,
         "typed_value": {"n": {"value": None, "typed_value": None}, "s": {"value": None, "typed_value": "d"}}},
        {"metadata": METADATA, "value": short_string("not an object"), "typed_value": None},
        None,
    ]
    return pa.array(rows, shredded_type(OBJECT_SHAPE))


EXPECTED = [{"n": 1, "s": "a"}, {"n": 2, "s": "b", "x": 9}, {"n": 3, "s": 4}, {"s": "d"}, "not an object", None]


def json_rows(arr: pa.Array) -> list:
    """Each row's variant as JSON (shredded rows rebuilt first)."""
    if is_variant_struct(arr.type) and arr.type != UNSHREDDED:
        arr = conform_variant(arr, UNSHREDDED)
    return [None if r is None else as_json(r["value"], r["metadata"]) for r in arr.to_pylist()]


def test_a_shredded_variant_rebuilt_into_the_unshredded_shape_keeps_every_value() -> None:
    out = conform_variant(shredded_rows(), UNSHREDDED)
    assert out.type == UNSHREDDED
    assert json_rows(out) == EXPECTED
    assert out.is_null().to_pylist() == [False] * 5 + [True]
    pq.write_table(pa.table({"v": out}), io.BytesIO())  # required fields hold no null pyarrow would refuse


def test_a_shredded_variant_rebuilt_into_another_shape() -> None:
    other = shredded_type(pa.struct([pa.field("x", pa.struct(_PAIR + [pa.field("typed_value", pa.int8())]),
                                              nullable=False)]))
    out = conform_variant(shredded_rows(), other)
    assert out.type == other
    assert json_rows(out) == EXPECTED
    # objects are shredded into the shape's fields (x of row 1), the rest stays in value
    assert out.to_pylist()[1]["typed_value"] == {"x": {"value": None, "typed_value": 9}}
    assert out.to_pylist()[4]["typed_value"] is None  # not an object


def test_unshredded_rows_go_into_a_shredded_shape_with_typed_value_null() -> None:
    int64 = bytes([6 << 2]) + (7).to_bytes(8, "little")
    rows = pa.array([{"value": object_value({"n": small_int(1), "x": small_int(2)}), "metadata": METADATA},
                     {"value": object_value({"n": int64, "s": short_string("q")}), "metadata": METADATA},
                     {"value": short_string("plain"), "metadata": METADATA}, None], UNSHREDDED)
    out = conform_variant(rows, shredded_type(OBJECT_SHAPE))
    got = out.to_pylist()
    # an int8 is no int64: it stays in the field's value; the field not in the shape stays in the residual object
    assert got[0]["typed_value"] == {"n": {"value": small_int(1), "typed_value": None},
                                     "s": {"value": None, "typed_value": None}}
    assert as_json(got[0]["value"], METADATA) == {"x": 2}
    assert got[1]["value"] is None and got[1]["typed_value"] == {"n": {"value": None, "typed_value": 7},
                                                                 "s": {"value": None, "typed_value": "q"}}
    assert got[2]["typed_value"] is None and got[3] is None
    assert json_rows(out) == [{"n": 1, "x": 2}, {"n": 7, "s": "q"}, "plain", None]
    pq.write_table(pa.table({"v": out}), io.BytesIO())
    same = conform_variant(shredded_rows(), shredded_type(OBJECT_SHAPE))
    assert same.to_pylist() == shredded_rows().to_pylist()  # the same shape: copied as it is


def test_arrays_and_missing_names_are_rebuilt() -> None:
    rows = pa.array([{"metadata": encode_metadata([], True), "value": None, "typed_value": [
        {"value": None, "typed_value": 1.5}, {"value": short_string("q"), "typed_value": None}]},
        {"metadata": METADATA, "value": None, "typed_value": []}], shredded_type(ARRAY_SHAPE))
    assert json_rows(conform_variant(rows, UNSHREDDED)) == [[1.5, "q"], []]
    # a shredded field whose name the row's metadata lacks: appended to its dictionary
    bare = encode_metadata([], True)
    obj = pa.array([{"metadata": bare, "value": None, "typed_value": {
        "n": {"value": None, "typed_value": 5}, "s": {"value": None, "typed_value": None}}}], shredded_type(OBJECT_SHAPE))
    values, metadata = rebuild_values([None], obj.field("typed_value"), [bare])
    assert parse_metadata(metadata[0]) == ([b"n"], False)  # type: ignore[arg-type]
    assert as_json(values[0], metadata[0]) == {"n": 5}


def test_layout_takes_the_shape_most_inputs_hold() -> None:
    base = pa.schema([("id", pa.int64()), ("v", UNSHREDDED), ("s", pa.struct([("doc", UNSHREDDED)]))])
    other = pa.struct([pa.field("n", pa.struct(_PAIR + [pa.field("typed_value", pa.int8())]), nullable=False)])

    def files(*shapes: pa.DataType | None) -> list[pa.Schema]:
        return [pa.schema([("id", pa.int64()), ("v", shredded_type(s))]) for s in shapes]

    assert layout_schema(base, files(None, None)) == base
    assert layout_schema(base, files(None, OBJECT_SHAPE)).field("v").type == shredded_type(OBJECT_SHAPE)
    assert layout_schema(base, files(other, OBJECT_SHAPE, OBJECT_SHAPE)).field("v").type == shredded_type(OBJECT_SHAPE)
    assert layout_schema(base, files(other, OBJECT_SHAPE)).field("v").type == shredded_type(other)  # a tie: first
    assert layout_schema(base, []) == base
    assert variant_paths(base) == [("v",), ("s", "doc")]
    listed = pa.schema([("l", pa.list_(UNSHREDDED)), ("m", pa.map_(pa.string(), shredded_type(OBJECT_SHAPE)))])
    assert variant_group_paths(listed) == [("l", "list", "element"), ("m", "key_value", "value")]
    assert is_variant_struct(UNSHREDDED) and is_variant_struct(shredded_type(ARRAY_SHAPE))
    assert not is_variant_struct(pa.struct([("value", pa.binary()), ("other", pa.binary())]))


def test_zorder_by_a_variant_column_is_refused() -> None:
    from airflow_delta_maint.delta.errors import InvalidArgumentError
    from airflow_delta_maint.delta.plans.optimize_inputs import validate_zorder
    from airflow_delta_maint.delta.protocol.actions import Metadata

    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "v", "type": "variant", "nullable": True, "metadata": {}}]}

    class Header:
        partition_columns: tuple[str, ...] = ()
        metadata = Metadata.from_action({"id": "t", "format": {"provider": "parquet", "options": {}},
                                         "schemaString": json.dumps(schema), "partitionColumns": [],
                                         "configuration": {}})

    with pytest.raises(InvalidArgumentError, match="cannot Z-order by variant column 'v'"):
        validate_zorder(Header(), ["v"])  # type: ignore[arg-type]
    assert [c.logical_path for c in validate_zorder(Header(), ["id"])] == [("id",)]  # type: ignore[arg-type]
