"""OPTIMIZE on type-widened tables (PROTOCOL.md "Type Widening"): files written before a type
change are read in their old types and written in the current ones; ``--rewrite-type-widened``
rewrites exactly the files still holding an old type.

Tables are written by hand: old files with pyarrow in the old types, then a metaData action
that widens the columns with ``delta.typeChanges`` metadata, then files in the new types.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.type_widening import files_with_old_types, widening_supported
from tests.app.jobs.test_optimize import listing, read_rows
from tests.conftest import corpus_path

OLD = {"id": "long", "i": "integer", "s": "short", "f": "float", "d": "decimal(10,2)", "day": "date"}
NEW = {"id": "long", "i": "long", "s": "double", "f": "double", "d": "decimal(14,4)", "day": "timestamp_ntz"}
ARROW_OLD = {"id": pa.int64(), "i": pa.int32(), "s": pa.int16(), "f": pa.float32(), "d": pa.decimal128(10, 2),
             "day": pa.date32()}
ARROW_NEW = {"id": pa.int64(), "i": pa.int64(), "s": pa.float64(), "f": pa.float64(), "d": pa.decimal128(14, 4),
             "day": pa.timestamp("us")}


def _schema(types: dict[str, str], changes: bool) -> str:
    fields = []
    for name, t in types.items():
        meta = {}
        if changes and OLD[name] != t:
            meta = {"delta.typeChanges": [{"fromType": OLD[name], "toType": t}]}
        fields.append({"name": name, "type": t, "nullable": True, "metadata": meta})
    return json.dumps({"type": "struct", "fields": fields})


def _rows(ids: range) -> list[dict]:
    return [{"id": i, "i": i * 1000, "s": i - 5, "f": i / 4, "d": decimal.Decimal(f"{i}.25"),
             "day": dt.date(2024, 1, 1) + dt.timedelta(days=i)} for i in ids]


def _file(path: Path, ids: range, arrow: dict[str, pa.DataType]) -> dict:
    rows = _rows(ids)
    if arrow["day"] == pa.timestamp("us"):
        rows = [{**r, "day": dt.datetime.combine(r["day"], dt.time())} for r in rows]
    table = pa.Table.from_pylist(rows, schema=pa.schema(list(arrow.items())))
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(table, path / name)
    return {"add": {"path": name, "partitionValues": {}, "size": (path / name).stat().st_size,
                    "modificationTime": 1_700_000_000_000, "dataChange": True,
                    "stats": json.dumps({"numRecords": len(ids)})}}


def _commit(path: Path, version: int, *actions: dict) -> None:
    lines = [json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}})]
    lines += [json.dumps(a) for a in actions]
    (path / "_delta_log" / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def widened_table(path: Path) -> Path:
    """v0: two files in the old types; v1: every non-id column widened; v2: a file in the new types."""
    (path / "_delta_log").mkdir(parents=True)
    meta = {"id": "t-widening", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
            "createdTime": 1_700_000_000_000}
    _commit(path, 0, {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                   "readerFeatures": ["typeWidening", "timestampNtz"],
                                   "writerFeatures": ["typeWidening", "timestampNtz"]}},
            {"metaData": {**meta, "schemaString": _schema(OLD, False), "configuration": {}}},
            _file(path, range(0, 10), ARROW_OLD), _file(path, range(10, 20), ARROW_OLD))
    _commit(path, 1, {"metaData": {**meta, "schemaString": _schema(NEW, True),
                                   "configuration": {"delta.enableTypeWidening": "true"}}})
    _commit(path, 2, _file(path, range(20, 30), ARROW_NEW))
    return path


def _expected(ids: range) -> dict[int, tuple]:
    out = {}
    for r in _rows(ids):
        out[r["id"]] = (r["i"], float(r["s"]), float(pa.scalar(r["f"], pa.float32()).as_py()),
                        r["d"].quantize(decimal.Decimal("0.0001")), dt.datetime.combine(r["day"], dt.time()))
    return out


def _read_all(path: Path) -> tuple[dict[int, tuple], set[pa.Schema]]:
    """Every live row straight from the data files (all of which must then be in the new types)."""
    snap = Snapshot.load(str(path))
    out, schemas = {}, set()
    for add in snap.add_actions():
        table = pq.read_table(path / add["path"])
        schemas.add(table.schema.remove_metadata())
        for r in table.to_pylist():
            out[r["id"]] = (r["i"], r["s"], r["f"], r["d"], r["day"])
    return out, schemas


def test_old_files_are_written_in_the_wide_types(tmp_path: Path, spark) -> None:
    path = widened_table(tmp_path / "t")
    code, m = cli.run(["optimize", str(path), "--json"])
    assert code == 0 and m["status"] == "committed", m
    rows, schemas = _read_all(path)
    assert rows == _expected(range(30))
    assert schemas == {pa.schema([pa.field(n, t) for n, t in ARROW_NEW.items()])}
    snap = Snapshot.load(str(path))
    (add,) = snap.add_actions()
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 30
    assert stats["minValues"]["day"].startswith("2024-01-01T00:00:00") and stats["maxValues"]["i"] == 29000
    assert stats["minValues"]["d"] == 0.25 and stats["maxValues"]["s"] == 24.0
    assert files_with_old_types(snap.storage, snap.metadata, snap.add_actions()) == []


def test_rewrite_type_widened_takes_exactly_the_old_files(tmp_path: Path, spark) -> None:
    path = widened_table(tmp_path / "t")
    snap = Snapshot.load(str(path))
    old = {a["path"] for a in files_with_old_types(snap.storage, snap.metadata, snap.add_actions())}
    new = {a["path"] for a in snap.add_actions()} - old
    assert len(old) == 2 and len(new) == 1
    code, m = cli.run(["optimize", str(path), "--json", "--rewrite-type-widened", "--dry-run"])
    assert m["plan"]["num_files_to_rewrite"] == 2
    code, m = cli.run(["optimize", str(path), "--json", "--rewrite-type-widened"])
    assert m["status"] == "committed" and m["numRemovedFiles"] == 2, m
    after = Snapshot.load(str(path))
    assert new <= {a["path"] for a in after.add_actions()}  # the file already in the new types stays
    assert files_with_old_types(after.storage, after.metadata, after.add_actions()) == []
    assert _read_all(path)[0] == _expected(range(30))
    code, m = cli.run(["optimize", str(path), "--json", "--rewrite-type-widened"])
    assert m["status"] == "skipped"


def test_corpus_type_widening_table(tmp_path: Path, spark) -> None:
    path = tmp_path / "t"
    shutil.copytree(corpus_path("golden/type-widening"), path)
    before = read_rows(path, "golden/type-widening")
    snap = Snapshot.load(str(path))
    assert len(files_with_old_types(snap.storage, snap.metadata, snap.add_actions())) == 1
    code, m = cli.run(["optimize", str(path), "--json", "--rewrite-type-widened"])
    assert m["status"] == "committed" and m["numRemovedFiles"] == 1, m
    assert read_rows(path, "golden/type-widening") == before
    after = Snapshot.load(str(path))
    assert files_with_old_types(after.storage, after.metadata, after.add_actions()) == []


@pytest.mark.parametrize("change, ok", [
    (("integer", "long"), True), (("byte", "short"), True), (("float", "double"), True), (("short", "double"), True),
    (("date", "timestamp_ntz"), True), (("decimal(10,2)", "decimal(12,4)"), True), (("integer", "decimal(10,0)"), True),
    (("long", "integer"), False), (("long", "double"), False), (("decimal(10,2)", "decimal(10,4)"), False),
    (("long", "decimal(19,0)"), False), (("date", "timestamp"), False), (("double", "float"), False),
])
def test_supported_changes(change, ok) -> None:
    assert widening_supported(*change) is ok


def test_a_change_outside_the_feature_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    path = widened_table(tmp_path / "t")
    bad = json.loads(_schema(NEW, True))
    bad["fields"][1]["metadata"]["delta.typeChanges"] = [{"fromType": "long", "toType": "integer"}]
    _commit(path, 3, {"metaData": {"id": "t-widening", "format": {"provider": "parquet", "options": {}},
                                   "partitionColumns": [], "schemaString": json.dumps(bad), "configuration": {}}})
    before = listing(path)
    code, m = cli.run(["optimize", str(path), "--json"])
    assert code != 0 and "long -> integer" in m["error"]
    assert listing(path) == before
