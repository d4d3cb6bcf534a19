"""What new data files hold under Iceberg compatibility and materializePartitionColumns; UniForm's refusal
once its Iceberg metadata exists; VACUUM never listing that metadata."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta_maint.delta.errors import UnsupportedFeatureError
from airflow_delta_maint.delta.plans.vacuum_inventory import Inventory, inventory_files
from airflow_delta_maint.delta.protocol.actions import Metadata, Protocol
from airflow_delta_maint.delta.protocol.iceberg_compat import (iceberg_compat_version, materializes_partition_columns,
                                                               new_file_tags, partition_arrays, partition_fields)
from airflow_delta_maint.delta.protocol.uniform_iceberg import check_no_iceberg_metadata
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.delta.storage.table_files import is_hidden, list_folder, list_subtree


def field(name: str, dtype: str, field_id: int | None = None) -> dict:
    meta = {} if field_id is None else {"delta.columnMapping.id": field_id,
                                        "delta.columnMapping.physicalName": f"col-{name}"}
    return {"name": name, "type": dtype, "nullable": True, "metadata": meta}


def metadata(partitions: tuple[str, ...] = ("day", "p"), mapping: bool = False, **configuration: str) -> Metadata:
    fields = [field("id", "long", 1 if mapping else None), field("p", "string", 2 if mapping else None),
              field("day", "date", 3 if mapping else None), field("ts", "timestamp", 4 if mapping else None),
              field("amount", "decimal(10,2)", 5 if mapping else None)]
    if mapping:
        configuration = {"delta.columnMapping.mode": "name", **configuration}
    return Metadata(id="t", schema_string=json.dumps({"type": "struct", "fields": fields}),
                    partition_columns=partitions, configuration=configuration)


def test_partition_fields_in_partition_order_with_physical_names_and_field_ids():
    fields = partition_fields(metadata(mapping=True))
    assert [(f.name, f.type, f.nullable, f.metadata) for f in fields] == [
        ("col-day", pa.date32(), True, {b"PARQUET:field_id": b"3"}),
        ("col-p", pa.string(), True, {b"PARQUET:field_id": b"2"})]
    assert [f.name for f in partition_fields(metadata())] == ["day", "p"] and not partition_fields(metadata())[0].metadata


def test_partition_arrays_typed_from_the_serialized_values():
    m = metadata(partitions=("p", "day", "ts", "amount"), mapping=True)
    fields = partition_fields(m)
    values = {"col-p": "blue", "col-day": "2024-02-29", "col-ts": "2024-01-01 10:00:00.5", "col-amount": "12.30"}
    arrays = partition_arrays(m, fields, values, 2)
    assert [a.to_pylist() for a in arrays] == [
        ["blue"] * 2, [dt.date(2024, 2, 29)] * 2,
        [dt.datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=dt.timezone.utc)] * 2, [Decimal("12.30")] * 2]
    assert [a.type for a in arrays] == [f.type for f in fields]
    nulls = partition_arrays(m, fields, {"col-p": None, "col-day": "", "col-ts": None}, 3)  # null, empty, missing
    assert all(a.null_count == 3 for a in nulls)


@pytest.mark.parametrize("writers, configuration, partitions, expected", [
    (("materializePartitionColumns",), {}, ("p",), True),
    (("materializePartitionColumns",), {}, (), False),                  # nothing to materialize
    (("columnMapping", "icebergCompatV2"), {"delta.enableIcebergCompatV2": "true"}, ("p",), True),
    (("columnMapping", "icebergCompatV2"), {"delta.enableIcebergCompatV2": "false"}, ("p",), False),
    (("columnMapping",), {}, ("p",), False),
])
def test_which_tables_materialize_partition_columns(writers, configuration, partitions, expected):
    m = metadata(partitions=partitions, **configuration)
    assert materializes_partition_columns(Protocol(2, 7, (), writers), m) is expected


def test_iceberg_compat_version_and_tags():
    assert iceberg_compat_version(metadata()) is None and new_file_tags(metadata()) == {}
    assert new_file_tags(metadata(**{"delta.enableIcebergCompatV1": "true"})) == {}
    assert new_file_tags(metadata(**{"delta.enableIcebergCompatV2": "true"})) == {"ICEBERG_COMPAT_VERSION": "2"}
    assert new_file_tags(metadata(**{"delta.enableIcebergCompatV3": "TRUE"})) == {"ICEBERG_COMPAT_VERSION": "3"}


def _uniform_table(root: Path) -> Storage:
    (root / "metadata").mkdir(parents=True)
    (root / "_delta_log").mkdir()
    (root / "ab").mkdir()
    for name in ("metadata/00000-a.metadata.json", "metadata/snap-1-a.avro", "part-0.parquet", "ab/part-1.parquet"):
        (root / name).write_text("x")
    return Storage(str(root))


def test_vacuum_never_lists_the_iceberg_metadata_folder(tmp_path):
    storage = _uniform_table(tmp_path)
    assert sorted(list_subtree(storage, "").keys) == ["ab/part-1.parquet", "part-0.parquet"]
    dirs, files = list_folder(storage, "")
    assert sorted(dirs) == ["ab"] and [f.key for f in files] == ["part-0.parquet"]
    assert is_hidden("metadata/snap-1-a.avro") and not is_hidden("ab/part-1.parquet")
    assert not is_hidden("metadata=x/part-0.parquet", ["metadata"])  # a partition folder is no Iceberg folder


def test_uniform_table_refused_once_its_iceberg_metadata_exists(tmp_path):
    uniform = metadata(**{"delta.universalFormat.enabledFormats": "iceberg", "delta.enableIcebergCompatV2": "true"})
    (tmp_path / "_delta_log").mkdir()
    storage = Storage(str(tmp_path))
    check_no_iceberg_metadata(storage, uniform, "optimize")            # no converter ran: maintained
    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata" / "v1.metadata.json").write_text("{}")
    check_no_iceberg_metadata(storage, metadata(), "optimize")         # no UniForm: the folder is not Iceberg's
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_no_iceberg_metadata(storage, uniform, "optimize")
    assert str(exc.value) == ("cannot run optimize on this table: it is a UniForm Iceberg table with Iceberg metadata "
                              "under metadata/, which optimize does not convert to Iceberg; delta-spark's OPTIMIZE "
                              "does: run it with engine='delta-spark'")
    with pytest.raises(UnsupportedFeatureError, match="^cannot run compute-stats .* to Iceberg$"):
        check_no_iceberg_metadata(storage, uniform, "compute-stats")


def test_vacuum_by_inventory_never_lists_the_iceberg_metadata_folder(tmp_path):
    storage = _uniform_table(tmp_path)
    root = str(tmp_path)
    keys = ["metadata/00000-a.metadata.json", "metadata/snap-1-a.avro", "part-0.parquet", "ab/part-1.parquet",
            "ab/metadata", "_delta_log/00000000000000000000.json"]
    table = pa.table({"path": [f"{root}/{k}" for k in keys], "length": [1] * len(keys),
                      "isDir": [False] * len(keys), "modificationTime": [0] * len(keys)})
    files, outside = inventory_files(Inventory(table, "inventory.parquet", "parquet", 0), storage)
    assert sorted(f.key for f in files) == ["ab/part-1.parquet", "part-0.parquet"] and outside == 0
