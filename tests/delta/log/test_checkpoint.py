"""Checkpoint writer: every corpus table is checkpointed, its earlier log hidden, and then read
back by delta-rs and by our own reader with the same state as before."""

from __future__ import annotations

import json
from datetime import date
import os
import shutil
import time
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.delta.errors import InvalidArgumentError, UnsupportedFeatureError
from airflow_delta_maint.delta.log.checkpoint import last_checkpoint_checksum, write_checkpoint
from airflow_delta_maint.delta.log.checkpoint_schema import CHECKPOINT_SCHEMA_V1
from airflow_delta_maint.delta.protocol.table_properties import parse_interval_ms
from airflow_delta_maint.delta.log.listing import LAST_CHECKPOINT, build_segment
from airflow_delta_maint.delta.log.checkpoint_read import plain_value
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.actions import ADD_SCHEMA, REMOVE_SCHEMA
from airflow_delta_maint.delta.storage.store import Storage

from tests.conftest import load_manifest
from tests.data.conformance.expected import load_expected, scrub

import deltalake  # noqa: E402

DAY = 24 * 3600 * 1000
WEEK = 7 * DAY

# Every table delta-rs 1.6.0 loaded (our reader loads all of them), with the outcome recorded for it
# in tests/data/conformance/expected.json. Where delta-rs could not read the data (deletion vectors,
# column mapping, V2 checkpoints, variant, missing data files, values pyarrow rejects) the rows are
# not compared; the file list, stats and deletion vectors are still checked through delta-rs's log
# and through our reader, and the logical row count (numRecords minus deleted rows) through our reader.
_LOADED = {t["table"]: t for t in load_manifest() if t["oracle"].get("loaded")}
EXPECTED = load_expected("checkpoint")
CORPUS = [_LOADED[n] for n in sorted(EXPECTED) if EXPECTED[n]["outcome"] == "committed"]
# Tables whose writer features the gate refuses (e.g. the unknown `liquid` feature) get no
# checkpoint: the protocol forbids writers to write tables with features they do not know.
REFUSED = [_LOADED[n] for n in sorted(EXPECTED) if EXPECTED[n]["outcome"] == "refused"]


@pytest.mark.parametrize("entry", REFUSED, ids=[t["table"] for t in REFUSED])
def test_checkpoint_refuses_tables_with_unsupported_writer_features(entry, copy_table):
    table = copy_table(entry["table"])
    listing = sorted(os.listdir(_log(table)))
    with pytest.raises(UnsupportedFeatureError, match="checkpoint") as refused:
        write_checkpoint(Snapshot.load(str(table)))
    assert scrub(str(refused.value), table) == EXPECTED[entry["table"]]["reason"]
    assert sorted(os.listdir(_log(table))) == listing


def _log(path: Path) -> Path:
    return path / "_delta_log"


def _version_of(name: str) -> int | None:
    return int(name[:20]) if len(name) > 20 and name[:20].isdigit() and name[20] == "." else None


def _hide_log_up_to(table: Path, version: int, keep: str) -> list[str]:
    """Move every commit, checkpoint, checksum and compaction file at or before ``version`` out of
    ``_delta_log`` (``keep`` and ``_last_checkpoint`` stay); return the names moved."""
    hidden = table / "hidden_log"
    hidden.mkdir()
    moved = []
    for name in sorted(os.listdir(_log(table))):
        v = _version_of(name)
        if v is not None and v <= version and f"_delta_log/{name}" != keep:
            shutil.move(_log(table) / name, hidden / name)
            moved.append(name)
    return moved


def _rs_add_actions(dt) -> list[dict]:
    actions = pa.table(dt.get_add_actions(flatten=True))
    actions = actions.drop_columns([c for c in actions.column_names if c in ("data_change", "modification_time")])
    return sorted(actions.to_pylist(), key=lambda a: a["path"])


def _rs_rows(dt) -> dict[str, pa.Table]:
    """Each active file's rows as delta-rs lists it, with its partition values added as columns."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    part_cols = [c for c in actions.column_names if c.startswith("partition.")]
    parts = {a["path"]: a for a in actions.select(["path"] + part_cols).to_pylist()}
    rows: dict[str, pa.Table] = {}
    for uri in dt.file_uris():
        local = unquote(uri[len("file://"):]) if uri.startswith("file://") else uri
        path = next(p for p in parts if uri.endswith(p) or local.endswith(unquote(p)))
        data = pq.read_table(local)
        for c in part_cols:
            value = parts[path][c]
            data = data.append_column(c, pa.array([None if value is None else str(value)] * data.num_rows,
                                                  pa.string()))
        rows[path] = data
    return rows


def _files(table: pa.Table) -> list[dict]:
    rows = [plain_value(r) for r in table.drop_columns(["dataChange"]).to_pylist()]
    return sorted(rows, key=lambda r: (r["path"], json.dumps(r.get("deletionVector"), sort_keys=True)))


def _tombstones(table: pa.Table) -> list[dict]:
    keep = [c for c in table.column_names if c not in ("dataChange", "stats", "tags")]
    rows = [plain_value(r) for r in table.select(keep).to_pylist()]
    return sorted(rows, key=lambda r: (r["path"], json.dumps(r.get("deletionVector"), sort_keys=True)))


def _logical_rows(snapshot: Snapshot) -> int | None:
    """numRecords minus deletion-vector cardinality over all files (None if a file has no stats)."""
    total = 0
    for stats, dv in zip(snapshot.files.column("stats").to_pylist(),
                         snapshot.files.column("deletionVector").to_pylist()):
        if not stats or json.loads(stats).get("numRecords") is None:
            return None
        total += json.loads(stats)["numRecords"] - ((dv or {}).get("cardinality") or 0)
    return total


def _agrees(after: list[dict], before: list[dict]) -> bool:
    """Same rows; every value ``before`` holds is the same ``after`` (a missing one may be filled)."""
    assert [a["path"] for a in after] == [b["path"] for b in before]
    for a, b in zip(after, before):
        for key, value in b.items():
            assert value is None or a.get(key) == value, (b["path"], key, value, a.get(key))
    return True


def _no_nulls(actions: dict[str, dict]) -> dict[str, dict]:
    return {k: {f: v for f, v in a.items() if v is not None} for k, a in actions.items()}


def _now_keeping_half(snapshot: Snapshot) -> int | None:
    """A 'now' that keeps the newer half of the tombstones and expires the older half."""
    ts = sorted(t for t in snapshot.tombstones.column("deletionTimestamp").to_pylist() if t is not None)
    if not ts:
        return None
    return ts[len(ts) // 2] + snapshot.metadata.properties.deleted_file_retention_ms - 1


def remove_checkpoints_at(table: Path, version: int) -> None:
    """Set aside any checkpoint already at ``version``, so the one read back is ours."""
    for name in os.listdir(_log(table)):
        if _version_of(name) == version and ".checkpoint." in name:
            os.remove(_log(table) / name)


def kept_tombstones(snapshot: Snapshot, now_ms: int | None) -> pa.Table:
    """The tombstones a checkpoint written at ``now_ms`` keeps (deleted after its retention cutoff)."""
    cutoff = (now_ms if now_ms is not None else time.time() * 1000) - snapshot.metadata.properties.deleted_file_retention_ms
    return snapshot.tombstones.filter(pc.greater(pc.fill_null(snapshot.tombstones.column("deletionTimestamp"), 0),
                                                 int(cutoff)))


@pytest.mark.parametrize("entry", CORPUS, ids=[t["table"] for t in CORPUS])
def test_checkpoint_replaces_the_log(entry, copy_table):
    oracle = entry["oracle"]
    expected = EXPECTED[entry["table"]]
    table = copy_table(entry["table"])
    before = Snapshot.load(str(table))
    version = before.version
    rs_before = deltalake.DeltaTable(str(table))
    uris_before = sorted(rs_before.file_uris())
    adds_before = _rs_add_actions(rs_before)
    rows_before = _rs_rows(rs_before) if oracle.get("readable") else None

    remove_checkpoints_at(table, version)
    now_ms = _now_keeping_half(before)
    metrics = write_checkpoint(before, now_ms=now_ms)
    expected_kind = "v2" if "v2Checkpoint" in oracle["reader_features"] else "classic"
    assert metrics["kind"] == expected_kind == expected["kind"]
    assert metrics["already_existed"] is False and metrics["version"] == version == expected["version"]
    assert metrics["num_add_files"] == before.num_files == oracle["num_files"] == expected["add_files"]
    assert metrics["num_actions"] == expected["actions"]
    cp_file = table / metrics["path"]
    assert cp_file.stat().st_size == metrics["size_bytes"]
    cp = pq.read_table(cp_file)
    assert cp.num_rows == metrics["num_actions"]
    hint = json.loads((table / LAST_CHECKPOINT).read_text())
    assert hint["version"] == version and hint["size"] == metrics["num_actions"]
    assert hint["numOfAddFiles"] == before.num_files and hint["sizeInBytes"] == metrics["size_bytes"]
    assert hint["checksum"] == last_checkpoint_checksum(hint)

    hidden = _hide_log_up_to(table, version, keep=metrics["path"])
    assert any(name.endswith(".json") for name in hidden) or version == 0 or not hidden

    # (a) delta-rs reads the table from our checkpoint alone.
    rs_after = deltalake.DeltaTable(str(table))
    assert rs_after.version() == version == oracle["version"]
    assert sorted(rs_after.file_uris()) == uris_before
    # Statistics only survive as typed stats_parsed in some source checkpoints; the writer turns them
    # back into JSON, so a value may appear where there was none, but none may change or vanish.
    assert _agrees(_rs_add_actions(rs_after), adds_before)
    assert rs_after.protocol() == rs_before.protocol()
    assert rs_after.metadata().configuration == rs_before.metadata().configuration
    assert rs_after.metadata().partition_columns == rs_before.metadata().partition_columns
    if rows_before is not None:
        assert sum(t.num_rows for t in rows_before.values()) == oracle["rows"]
        rows_after = _rs_rows(rs_after)
        assert rows_after.keys() == rows_before.keys()
        assert all(rows_after[p].equals(rows_before[p]) for p in rows_before)

    # (b) our reader gets the same state from it.
    after = Snapshot.load(str(table))
    assert after.segment.checkpoint is not None and after.segment.checkpoint.version == version
    assert after.segment.checkpoint.files[0].key == metrics["path"]
    assert not after.segment.replay
    assert after.version == version
    assert after.protocol == before.protocol
    assert after.metadata == before.metadata
    assert _agrees(_files(after.files), _files(before.files))
    assert _logical_rows(before) in (None, _logical_rows(after))
    assert (_logical_rows(before), _logical_rows(after)) == (expected["rows_before"], expected["rows_after"])
    if oracle.get("rows") is not None and expected["rows_after"] is not None:
        assert expected["rows_after"] == oracle["rows"]
    kept = kept_tombstones(before, now_ms)
    assert kept.num_rows == expected["tombstones_kept"]
    assert _tombstones(after.tombstones) == _tombstones(kept)
    if now_ms is not None:
        assert 0 < kept.num_rows <= before.tombstones.num_rows
    assert _no_nulls(after.txns) == _no_nulls(before.txns)
    assert _no_nulls(after.domains) == _no_nulls(before.domains)
    assert metrics["num_actions"] == 2 + len(before.txns) + len(before.domains) + before.num_files + kept.num_rows + (
        1 if expected_kind == "v2" else 0)


def test_v2_table_gets_a_v2_spec_checkpoint(copy_table):
    table = copy_table("golden/v2-checkpoint-json")
    snap = Snapshot.load(str(table))
    uris = sorted(deltalake.DeltaTable(str(table)).file_uris())
    # The table already has a UUID-named checkpoint at its latest version: that one satisfies the call.
    existing = write_checkpoint(snap)
    assert existing["already_existed"] is True and existing["kind"] == "v2"
    assert existing["path"].endswith(".json")

    classic = write_checkpoint(snap, naming="classic")
    assert classic["kind"] == "v2-classic" and classic["already_existed"] is False
    assert classic["path"] == "_delta_log/00000000000000000002.checkpoint.parquet"
    cp = pq.read_table(table / classic["path"])
    meta = [m for m in cp.column("checkpointMetadata").to_pylist() if m is not None]
    assert meta == [{"version": 2, "tags": None}]
    assert cp.column("sidecar").null_count == cp.num_rows
    proto = [p for p in cp.column("protocol").to_pylist() if p is not None][0]
    assert "v2Checkpoint" in proto["readerFeatures"] and "v2Checkpoint" in proto["writerFeatures"]
    _hide_log_up_to(table, 2, keep=classic["path"])
    assert sorted(deltalake.DeltaTable(str(table)).file_uris()) == uris
    after = Snapshot.load(str(table))
    assert _files(after.files) == _files(snap.files)


def test_v2_uuid_naming_on_a_classic_table_is_refused(copy_table):
    table = copy_table("rs/simple_table")
    with pytest.raises(InvalidArgumentError, match="v2Checkpoint"):
        write_checkpoint(Snapshot.load(str(table)), naming="uuid")
    with pytest.raises(InvalidArgumentError, match="naming"):
        write_checkpoint(Snapshot.load(str(table)), naming="sideways")  # type: ignore[arg-type]
    assert not any(".checkpoint." in n for n in os.listdir(_log(table)))


def test_second_call_is_a_no_op(copy_table):
    table = copy_table("rs/simple_table")
    snap = Snapshot.load(str(table))
    first = write_checkpoint(snap)
    listing = {n: (table / "_delta_log" / n).stat().st_mtime_ns for n in os.listdir(_log(table))}
    content = (table / first["path"]).read_bytes()
    hint = (table / LAST_CHECKPOINT).read_bytes()
    second = write_checkpoint(Snapshot.load(str(table)))
    assert second["already_existed"] is True and second["last_checkpoint_updated"] is False
    assert {k: second[k] for k in ("version", "path", "kind", "num_actions", "num_add_files", "size_bytes")} == {
        k: first[k] for k in ("version", "path", "kind", "num_actions", "num_add_files", "size_bytes")}
    assert {n: (table / "_delta_log" / n).stat().st_mtime_ns for n in os.listdir(_log(table))} == listing
    assert (table / first["path"]).read_bytes() == content
    assert (table / LAST_CHECKPOINT).read_bytes() == hint


def test_existing_checkpoint_without_hint_gets_its_hint(copy_table):
    """A run that died after the checkpoint but before ``_last_checkpoint`` converges on retry."""
    table = copy_table("rs/simple_table")
    first = write_checkpoint(Snapshot.load(str(table)))
    (table / LAST_CHECKPOINT).unlink()
    again = write_checkpoint(Snapshot.load(str(table)))
    assert again["already_existed"] is True and again["last_checkpoint_updated"] is True
    hint = json.loads((table / LAST_CHECKPOINT).read_text())
    assert (hint["version"], hint["size"], hint["numOfAddFiles"]) == (4, first["num_actions"], 5)


def test_last_checkpoint_never_goes_backwards(copy_table):
    table = copy_table("rs/simple_table")
    latest = write_checkpoint(Snapshot.load(str(table)))
    hint = (table / LAST_CHECKPOINT).read_bytes()
    older = write_checkpoint(Snapshot.load(str(table), version=2))
    assert older["already_existed"] is False and older["last_checkpoint_updated"] is False
    assert (table / older["path"]).exists() and older["version"] == 2
    assert (table / LAST_CHECKPOINT).read_bytes() == hint
    assert json.loads(hint)["version"] == latest["version"] == 4
    # An older hint is moved forward.
    (table / LAST_CHECKPOINT).write_text(json.dumps({"version": 1, "size": 3}))
    write_checkpoint(Snapshot.load(str(table)))
    assert json.loads((table / LAST_CHECKPOINT).read_text())["version"] == 4
    # The version-2 checkpoint is a valid starting point too.
    segment = build_segment(Storage(str(table)), 3)
    assert segment.checkpoint_version == 2
    assert Snapshot.load(str(table), version=3).paths == Snapshot.load(
        str(table), version=3, compactions="ignore").paths


def test_tombstone_retention(copy_table):
    table = copy_table("rs/simple_table")
    snap = Snapshot.load(str(table))
    stamps = snap.tombstones.column("deletionTimestamp").to_pylist()
    newest = max(stamps)
    assert write_checkpoint(snap, now_ms=newest + WEEK + 1)["num_actions"] == 2 + 5  # all expired
    shutil.rmtree(table)
    table = copy_table("rs/simple_table")
    snap = Snapshot.load(str(table))
    metrics = write_checkpoint(snap, now_ms=min(stamps) + WEEK)  # all but the oldest kept
    kept = sum(1 for s in stamps if s > min(stamps))
    assert metrics["num_actions"] == 2 + 5 + kept


def test_retention_property_is_used(tmp_path):
    table = tmp_path / "t"
    _commit(table, 0, [_protocol(1, 2), _metadata({"delta.deletedFileRetentionDuration": "interval 2 days"}),
                       _add("a.parquet"), _add("b.parquet")])
    _commit(table, 1, [{"remove": {"path": "a.parquet", "deletionTimestamp": 10 * DAY, "dataChange": True}},
                       {"remove": {"path": "b.parquet", "deletionTimestamp": 12 * DAY, "dataChange": True}}])
    metrics = write_checkpoint(Snapshot.load(str(table)), now_ms=13 * DAY)
    cp = pq.read_table(table / metrics["path"])
    assert [r["path"] for r in cp.column("remove").to_pylist() if r] == ["b.parquet"]
    assert cp.schema == CHECKPOINT_SCHEMA_V1


def test_unsupported_feature_is_refused_before_writing(tmp_path):
    table = tmp_path / "t"
    _commit(table, 0, [_protocol(3, 7, [], ["someFutureFeature"]), _metadata({}), _add("a.parquet")])
    before = sorted(os.listdir(_log(table)))
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        write_checkpoint(Snapshot.load(str(table)))
    assert sorted(os.listdir(_log(table))) == before


def test_protocol_features_columns_follow_versions(tmp_path):
    """readerFeatures/writerFeatures are null below reader 3 / writer 7 and lists at or above."""
    table = tmp_path / "t"
    _commit(table, 0, [_protocol(1, 7, None, ["appendOnly"]), _metadata({}), _add("a.parquet")])
    metrics = write_checkpoint(Snapshot.load(str(table)))
    proto = [p for p in pq.read_table(table / metrics["path"]).column("protocol").to_pylist() if p][0]
    assert proto == {"minReaderVersion": 1, "minWriterVersion": 7, "readerFeatures": None,
                     "writerFeatures": ["appendOnly"]}


def test_a_million_file_checkpoint_holds_every_file(tmp_path):
    """A checkpoint of a million files holds each once with its statistics (its speed is benchmarked, not
    asserted here)."""
    table = tmp_path / "t"
    _commit(table, 0, [_protocol(1, 2), _metadata({}, partitioned=True)])
    snap = Snapshot.load(str(table))
    n = 1_000_000
    idx = pa.array(np.arange(n))
    ids = idx.cast(pa.string())
    part = pc.cast(pa.array(np.arange(n) % 100), pa.string())
    paths = pc.binary_join_element_wise("p=", part, "/part-", ids, ".parquet", "")
    parts = pa.MapArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)),
                                    pa.array(np.full(n, "p", dtype=object)), part)
    stats = pc.binary_join_element_wise('{"numRecords":', ids, "}", "")
    columns = {"path": paths, "partitionValues": parts, "size": pc.add(idx, 100),
               "modificationTime": pa.array(np.full(n, 1_700_000_000_000)), "dataChange": pa.array(np.ones(n, bool)),
               "stats": stats}
    snap.files = pa.table([columns.get(f.name, pa.nulls(n, f.type)) for f in ADD_SCHEMA], schema=ADD_SCHEMA)
    snap.tombstones = REMOVE_SCHEMA.empty_table()
    metrics = write_checkpoint(snap)
    assert metrics["num_add_files"] == n and metrics["num_actions"] == n + 2
    reread = pq.read_table(table / metrics["path"], columns=["add"])
    assert reread.column("add").null_count == 2
    adds = reread.column("add").combine_chunks().drop_null()
    assert pc.struct_field(adds, "path").equals(paths) and pc.struct_field(adds, "stats").equals(stats)


@pytest.mark.parametrize("text, expected", [
    ("interval 1 week", WEEK), ("interval 7 days", WEEK), ("interval 168 hours", WEEK),
    ("INTERVAL 1 WEEKS", WEEK), ("1 day", DAY), ("interval 1 day 12 hours", DAY + DAY // 2),
    ("interval 30 minutes", 30 * 60 * 1000), ("interval 1.5 seconds", 1500), ("interval 0 days", 0),
    ("  interval   2   days  ", 2 * DAY), ("interval 1000 milliseconds", 1000),
    ("interval 1000 microseconds", 1), ("interval 2 mins", 120_000),
])
def test_parse_interval(text, expected):
    assert parse_interval_ms(text) == expected


@pytest.mark.parametrize("text", [
    "", "interval", "7 days ago", "interval seven days", "interval 7 fortnights", "interval 1 month",
    "interval 2 years", "interval -1 days", "interval 1.5 days", "7", "interval 7 days 3",
])
def test_parse_interval_rejects(text):
    with pytest.raises(InvalidArgumentError, match="invalid interval"):
        parse_interval_ms(text)


def test_bad_retention_property_fails_before_writing(tmp_path):
    table = tmp_path / "t"
    _commit(table, 0, [_protocol(1, 2), _metadata({"delta.deletedFileRetentionDuration": "a while"}),
                       _add("a.parquet")])
    _commit(table, 1, [{"remove": {"path": "a.parquet", "deletionTimestamp": 1, "dataChange": True}}])
    with pytest.raises(InvalidArgumentError, match="a while"):
        write_checkpoint(Snapshot.load(str(table)))
    assert not any(".checkpoint." in n for n in os.listdir(_log(table)))


def test_last_checkpoint_checksum_matches_the_protocol_example():
    sample = {"k0": "'v 0'", "checksum": "adsaskfljadfkjadfkj",
              "k1": {"k2": 2, "k3": ["v3", [1, 2], {"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}
    assert last_checkpoint_checksum(sample) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


# -- tiny hand-written tables ------------------------------------------------------------------

def _commit(table: Path, version: int, actions: list[dict]) -> None:
    _log(table).mkdir(parents=True, exist_ok=True)
    with open(_log(table) / f"{version:020d}.json", "w") as fh:
        for a in actions:
            fh.write(json.dumps(a) + "\n")


def _protocol(reader: int, writer: int, reader_features=None, writer_features=None) -> dict:
    p: dict = {"minReaderVersion": reader, "minWriterVersion": writer}
    if reader_features is not None:
        p["readerFeatures"] = reader_features
    if writer_features is not None:
        p["writerFeatures"] = writer_features
    return {"protocol": p}


def _metadata(configuration: dict, partitioned: bool = False) -> dict:
    fields = [{"name": "x", "type": "long", "nullable": True, "metadata": {}}]
    if partitioned:
        fields.append({"name": "p", "type": "string", "nullable": True, "metadata": {}})
    return {"metaData": {"id": "0c1b2e5a-0000-4000-8000-000000000001", "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps({"type": "struct", "fields": fields}),
                         "partitionColumns": ["p"] if partitioned else [], "configuration": configuration,
                         "createdTime": 1}}


def _add(path: str) -> dict:
    return {"add": {"path": path, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}}


def test_typed_stats_and_partition_values_when_the_table_asks(tmp_path):
    table = tmp_path / "t"
    schema = {"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "d", "type": "date", "nullable": True, "metadata": {}},
        {"name": "n", "type": "integer", "nullable": True, "metadata": {}}]}
    meta = _metadata({"delta.checkpoint.writeStatsAsStruct": "true"})
    meta["metaData"].update(schemaString=json.dumps(schema), partitionColumns=["d", "n"])
    stats = {"numRecords": 2, "minValues": {"x": 1, "ts": "2024-01-02T03:04:05.678Z"},
             "maxValues": {"x": 9, "ts": "2024-01-03T00:00:00.000Z"}, "nullCount": {"x": 0, "ts": 1}}
    _commit(table, 0, [_protocol(1, 2), meta,
                       {"add": {"path": "d=2024-01-02/n=7/a.parquet", "partitionValues": {"d": "2024-01-02", "n": "7"},
                                "size": 1, "modificationTime": 1, "dataChange": True, "stats": json.dumps(stats)}},
                       {"add": {"path": "d=__HIVE_DEFAULT_PARTITION__/n=1/b.parquet",
                                "partitionValues": {"d": None, "n": "1"}, "size": 1, "modificationTime": 1,
                                "dataChange": True}}])
    metrics = write_checkpoint(Snapshot.load(str(table)))
    adds = sorted((a for a in pq.read_table(table / metrics["path"]).column("add").to_pylist() if a),
                  key=lambda a: a["path"])
    assert [a["partitionValues_parsed"] for a in adds] == [{"d": date(2024, 1, 2), "n": 7}, {"d": None, "n": 1}]
    parsed = adds[0]["stats_parsed"]
    assert parsed["numRecords"] == 2 and parsed["minValues"]["x"] == 1 and parsed["nullCount"]["ts"] == 1
    assert parsed["minValues"]["ts"].isoformat() == "2024-01-02T03:04:05.678000+00:00"
    assert [a["stats"] is None for a in adds] == [a["stats_parsed"] is None for a in adds]
    rs = deltalake.DeltaTable(str(table))
    assert sorted(pa.table(rs.get_add_actions(flatten=True)).column("num_records").to_pylist(),
                  key=lambda v: v or 0) == [None, 2]
