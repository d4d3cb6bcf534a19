"""Row-tracking tables written by hand, action by action as PROTOCOL.md "Row Tracking" describes
them (not through the project's writer), and an independent reader of stable Row IDs and Row
Commit Versions to compare a table's rows before and after a rewrite."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.deletion_vectors import read_deletion_vector, write_deletion_vector
from airflow_delta_maint.delta.storage.store import Storage

ROW_ID_COL = "_row-id-col-5a1e0c2e-9f4b-4c8e-8d1e-0a3f4b5c6d7e"
COMMIT_VERSION_COL = "_row-commit-version-col-6b2f1d3f-0a5c-4d9f-9e2f-1b4a5c6d7e8f"
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "x", "type": "double", "nullable": True, "metadata": {}},
    {"name": "s", "type": "string", "nullable": True, "metadata": {}},
]}


class HandLog:
    """Writes data files and commits of a table the way the protocol spells them."""

    def __init__(self, path: Path):
        self.path = path
        self.version = -1
        (path / "_delta_log").mkdir(parents=True, exist_ok=True)

    def data_file(self, ids: list[int], row_ids: list[int | None] | None = None,
                  commit_versions: list[int | None] | None = None, x_offset: float = 0.0) -> dict:
        """Write a parquet file of rows ``ids``; returns its add action (no row-tracking fields)."""
        cols: dict[str, Any] = {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([i * 1.5 + x_offset for i in ids], pa.float64()),
            "s": pa.array([f"row-{i}" for i in ids], pa.string()),
        }
        if row_ids is not None:
            cols[ROW_ID_COL] = pa.array(row_ids, pa.int64())
        if commit_versions is not None:
            cols[COMMIT_VERSION_COL] = pa.array(commit_versions, pa.int64())
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        pq.write_table(pa.table(cols), self.path / name)
        stats = {"numRecords": len(ids), "minValues": {"id": min(ids)}, "maxValues": {"id": max(ids)},
                 "nullCount": {"id": 0}}
        return {"path": name, "partitionValues": {}, "size": (self.path / name).stat().st_size,
                "modificationTime": 1_700_000_000_000, "dataChange": True, "stats": json.dumps(stats)}

    def deletion_vector(self, rows: list[int]) -> dict:
        return write_deletion_vector(Storage(str(self.path)), rows)

    def commit(self, *actions: dict, operation: str = "WRITE") -> int:
        self.version += 1
        info = {"commitInfo": {"timestamp": 1_700_000_000_000 + self.version, "operation": operation,
                               "operationParameters": {}, "engineInfo": "hand-written"}}
        lines = [json.dumps(info)] + [json.dumps(a) for a in actions]
        (self.path / "_delta_log" / f"{self.version:020d}.json").write_text("\n".join(lines) + "\n")
        return self.version


def protocol(dvs: bool = True) -> dict:
    return {"protocol": {"minReaderVersion": 3 if dvs else 1, "minWriterVersion": 7,
                         **({"readerFeatures": ["deletionVectors"]} if dvs else {}),
                         "writerFeatures": ["domainMetadata", "rowTracking"] + (["deletionVectors"] if dvs else [])}}


def metadata(configuration: dict[str, str]) -> dict:
    return {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps(SCHEMA), "partitionColumns": [],
                         "configuration": configuration, "createdTime": 1_700_000_000_000}}


def enabled_configuration(dvs: bool = True) -> dict[str, str]:
    conf = {"delta.enableRowTracking": "true",
            "delta.rowTracking.materializedRowIdColumnName": ROW_ID_COL,
            "delta.rowTracking.materializedRowCommitVersionColumnName": COMMIT_VERSION_COL}
    if dvs:
        conf["delta.enableDeletionVectors"] = "true"
    return conf


def high_water(mark: int) -> dict:
    return {"domainMetadata": {"domain": "delta.rowTracking",
                               "configuration": json.dumps({"rowIdHighWaterMark": mark}), "removed": False}}


def tracked(add: dict, base: int, version: int, **extra: Any) -> dict:
    return {"add": {**add, "baseRowId": base, "defaultRowCommitVersion": version, **extra}}


def remove_of(add_action: dict) -> dict:
    add = add_action["add"]
    rm = {"path": add["path"], "deletionTimestamp": 1_700_000_000_000, "dataChange": True,
          "extendedFileMetadata": True, "partitionValues": {}, "size": add["size"]}
    for key in ("baseRowId", "defaultRowCommitVersion", "deletionVector", "stats"):
        if key in add:
            rm[key] = add[key]
    return {"remove": rm}


def build_enabled_table(path: Path, dvs: bool = True) -> Path:
    """Row tracking enabled from version 0, then an append, a DELETE and an UPDATE.

    v0: three files of 10 rows (ids 0..29), baseRowId 0/10/20; v1: two files (ids 30..49);
    v2 (with dvs): rows at positions 2 and 5 of the second file deleted by a deletion vector;
    v3: ids 3 and 4 updated (deleted from the first file, rewritten into a new file that
    materializes their Row IDs, commit versions left NULL as updated rows' are) plus id 50
    inserted with nothing materialized. Without dvs, v2 and v3 are left out.
    """
    log = HandLog(path)
    f = [log.data_file(list(range(10 * k, 10 * k + 10))) for k in range(3)]
    adds0 = [tracked(a, 10 * k, 0) for k, a in enumerate(f)]
    log.commit(protocol(dvs), metadata(enabled_configuration(dvs)), *adds0, high_water(29), operation="CREATE TABLE")
    g = [log.data_file(list(range(30 + 10 * k, 40 + 10 * k))) for k in range(2)]
    adds1 = [tracked(a, 30 + 10 * k, 1) for k, a in enumerate(g)]
    log.commit(*adds1, high_water(49))
    if not dvs:
        return path
    dv = log.deletion_vector([2, 5])
    log.commit(remove_of(adds0[1]), tracked(f[1], 10, 0, deletionVector=dv, dataChange=True), operation="DELETE")
    dv0 = log.deletion_vector([3, 4])
    updated = log.data_file([3, 4, 50], row_ids=[3, 4, None], commit_versions=[None, None, None], x_offset=100.0)
    log.commit(remove_of(adds0[0]), tracked(f[0], 0, 0, deletionVector=dv0), tracked(updated, 50, 3),
               high_water(52), operation="UPDATE")
    return path


def stable_rows(path: Path) -> dict[int, tuple[int, int]]:
    """{id: (stable Row ID, stable Row Commit Version)} of every live row, read as PROTOCOL.md's
    reader requirements say; checks that no two rows share a stable Row ID."""
    snap = Snapshot.load(str(path))
    conf = snap.metadata.configuration
    rid_col = conf["delta.rowTracking.materializedRowIdColumnName"]
    cv_col = conf["delta.rowTracking.materializedRowCommitVersionColumnName"]
    out: dict[int, tuple[int, int]] = {}
    for add in snap.add_actions():
        table = pq.read_table(path / add["path"])
        n = table.num_rows
        rids = table.column(rid_col).to_pylist() if rid_col in table.column_names else [None] * n
        cvs = table.column(cv_col).to_pylist() if cv_col in table.column_names else [None] * n
        live = np.ones(n, dtype=bool)
        if add.get("deletionVector"):
            live[read_deletion_vector(snap.storage, add["deletionVector"])] = False
        for pos, key in enumerate(table.column("id").to_pylist()):
            if not live[pos]:
                continue
            rid = rids[pos] if rids[pos] is not None else add["baseRowId"] + pos
            cv = cvs[pos] if cvs[pos] is not None else add["defaultRowCommitVersion"]
            assert key not in out, f"id {key} live twice"
            out[key] = (rid, cv)
    ids = [r for r, _ in out.values()]
    assert len(ids) == len(set(ids)), "two rows share a stable Row ID"
    return out


def live_values(path: Path) -> dict[int, tuple[float, str]]:
    """{id: (x, s)} of every live row (deletion vectors applied)."""
    snap = Snapshot.load(str(path))
    out: dict[int, tuple[float, str]] = {}
    for add in snap.add_actions():
        table = pq.read_table(path / add["path"], columns=["id", "x", "s"])
        live = np.ones(table.num_rows, dtype=bool)
        if add.get("deletionVector"):
            live[read_deletion_vector(snap.storage, add["deletionVector"])] = False
        for pos, row in enumerate(table.to_pylist()):
            if live[pos]:
                assert row["id"] not in out
                out[row["id"]] = (row["x"], row["s"])
    return out
