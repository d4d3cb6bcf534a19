"""A small concurrent writer for tests of OPTIMIZE on busy tables: tables with deletion vectors
(optionally row tracking) written through the core, and the commits a DELETE, an append and a
copy-on-write rewrite make, each applied to a model of the rows.

The writer commits what delta-spark commits for the same statements: a DELETE that keeps a file
replaces its deletion vector (``remove`` + ``add`` of the same path, the new vector a superset);
one that deletes a file's last row removes it; a copy-on-write rewrite removes the file and adds
a new one. Readers here read every live file and apply its vector, and on row-tracking tables
give each row's stable Row ID and Row Commit Version as the protocol's reader requirements say.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import Transaction
from airflow_delta_maint.delta.protocol.deletion_vectors import read_deletion_vector, write_deletion_vector
from airflow_delta_maint.delta.storage.store import Storage

ROW_ID = "_row-id-col-3f0c6c1e"
ROW_VERSION = "_row-commit-version-col-8d2b7a90"
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "v", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}},
]}

Row = tuple[int, str, int]  # (id, p, v)


class DVTable:
    """A table with deletion vectors, partitioned by ``p`` (or not), and a model of its rows."""

    def __init__(self, path: Path, partitioned: bool = True, row_tracking: bool = False):
        self.path = path
        self.partitioned = partitioned
        self.row_tracking = row_tracking
        self.rows: dict[int, Row] = {}
        self.next_id = 0
        self.commits = 0

    # -- creating ----------------------------------------------------------------------------------
    def create(self, partitions: Iterable[str], files_per_partition: int, rows_per_file: int) -> "DVTable":
        writer = ["deletionVectors"] + (["domainMetadata", "rowTracking"] if self.row_tracking else [])
        conf = {"delta.enableDeletionVectors": "true"}
        if self.row_tracking:
            conf.update({"delta.enableRowTracking": "true", "delta.rowTracking.materializedRowIdColumnName": ROW_ID,
                         "delta.rowTracking.materializedRowCommitVersionColumnName": ROW_VERSION})
        actions: list[dict] = [
            {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                          "writerFeatures": writer}},
            {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                          "schemaString": json.dumps(SCHEMA), "partitionColumns": ["p"] if self.partitioned else [],
                          "configuration": conf, "createdTime": 1_700_000_000_000}},
        ]
        adds = []
        for p in partitions:
            for _ in range(files_per_partition):
                adds.append(self._new_file(p, rows_per_file))
        base = 0
        if self.row_tracking:
            for a in adds:
                n = json.loads(a["stats"])["numRecords"]
                a.update(baseRowId=base, defaultRowCommitVersion=0)
                base += n
            actions.append({"domainMetadata": {"domain": "delta.rowTracking", "removed": False,
                                               "configuration": json.dumps({"rowIdHighWaterMark": base - 1})}})
        actions.extend({"add": a} for a in adds)
        (self.path / "_delta_log").mkdir(parents=True, exist_ok=True)
        info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "CREATE TABLE",
                               "operationParameters": {}, "engineInfo": "tests"}}
        (self.path / "_delta_log" / f"{0:020d}.json").write_text(
            "\n".join(json.dumps(a) for a in [info, *actions]) + "\n")
        return self

    def _new_file(self, p: str, n: int) -> dict:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        values = [(i * 7919) % 1000 for i in ids]  # not sorted by id: Z-order reorders
        for i, v in zip(ids, values):
            self.rows[i] = (i, p, v)
        return self._write(p, ids, values)

    def _write(self, p: str, ids: list[int], values: list[int], extra: dict[str, list] | None = None) -> dict:
        cols: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.int64())}
        if not self.partitioned:
            cols["p"] = pa.array([p] * len(ids), pa.string())
        for name, vals in (extra or {}).items():
            cols[name] = pa.array(vals, pa.int64())
        folder = f"p={p}/" if self.partitioned else ""
        rel = f"{folder}part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        (self.path / folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), self.path / rel)
        stats = {"numRecords": len(ids), "minValues": {"id": min(ids), "v": min(values)},
                 "maxValues": {"id": max(ids), "v": max(values)}, "nullCount": {"id": 0, "v": 0},
                 "tightBounds": True}
        return {"path": rel, "partitionValues": {"p": p} if self.partitioned else {},
                "size": (self.path / rel).stat().st_size, "modificationTime": int(time.time() * 1000),
                "dataChange": True, "stats": json.dumps(stats)}

    # -- the writer's statements -------------------------------------------------------------------
    def _commit(self, operation: str, actions: list[dict]) -> int:
        snap = Snapshot.load(str(self.path))
        txn = Transaction(snap, operation, {}, job="optimize", engine_info="tests-writer")
        txn.add_actions(actions)
        self.commits += 1
        return txn.commit({})

    def delete(self, ids: Iterable[int]) -> int | None:
        """DELETE the rows with these ids (those live): deletion vectors, as delta-spark writes them."""
        wanted = {i for i in ids if i in self.rows}
        if not wanted:
            return None
        snap = Snapshot.load(str(self.path))
        actions: list[dict] = []
        now = int(time.time() * 1000)
        for add in snap.add_actions():
            file_ids = np.asarray(pq.read_table(self.path / _local(add["path"]), columns=["id"]).column("id"))
            old = read_deletion_vector(snap.storage, add["deletionVector"]) if add.get("deletionVector") \
                else np.empty(0, dtype=np.uint64)
            live = np.ones(len(file_ids), dtype=bool)
            live[old.astype(np.int64)] = False
            hit = np.flatnonzero(live & np.isin(file_ids, list(wanted)))
            if not hit.size:
                continue
            actions.append(_remove(add, now))
            if hit.size == live.sum():  # the file's last rows: the file goes
                continue
            rows = np.union1d(old, hit.astype(np.uint64))
            dv = write_deletion_vector(snap.storage, rows)
            stats = json.loads(add["stats"])
            stats["tightBounds"] = False
            actions.append({"add": {**{k: v for k, v in add.items() if k != "deletionVector"}, "deletionVector": dv,
                                    "dataChange": True, "stats": json.dumps(stats)}})
        for i in wanted:
            del self.rows[i]
        return self._commit("DELETE", actions) if actions else None

    def append(self, p: str, n: int) -> int:
        return self._commit("WRITE", [{"add": self._new_file(p, n)}])

    def rewrite_file(self, index: int) -> int | None:
        """Copy-on-write: the ``index``-th live file (by path) removed, its live rows but the first
        written into a new file (the first row deleted)."""
        snap = Snapshot.load(str(self.path))
        adds = sorted(snap.add_actions(), key=lambda a: a["path"])
        if not adds:
            return None
        add = adds[index % len(adds)]
        table = pq.read_table(self.path / _local(add["path"]))
        live = np.ones(table.num_rows, dtype=bool)
        if add.get("deletionVector"):
            live[read_deletion_vector(snap.storage, add["deletionVector"]).astype(np.int64)] = False
        ids = np.asarray(table.column("id"))[live].tolist()
        vals = np.asarray(table.column("v"))[live].tolist()
        p = (add.get("partitionValues") or {}).get("p") or self.rows[ids[0]][1] if ids else ""
        actions = [_remove(add, int(time.time() * 1000))]
        if ids:
            del self.rows[ids[0]]
        if len(ids) > 1:
            extra = None
            if self.row_tracking:
                rid, ver = stable_ids_of(snap, add, table)
                extra = {ROW_ID: np.asarray(rid)[live][1:].tolist(), ROW_VERSION: np.asarray(ver)[live][1:].tolist()}
            actions.append({"add": self._write(p, ids[1:], vals[1:], extra)})
        return self._commit("UPDATE", actions)


def _local(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def _remove(add: dict, now: int) -> dict:
    rm = {"path": add["path"], "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
          "partitionValues": add.get("partitionValues") or {}, "size": add["size"]}
    for key in ("stats", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
        if add.get(key) is not None:
            rm[key] = add[key]
    return {"remove": rm}


def stable_ids_of(snap: Snapshot, add: dict, table: pa.Table) -> tuple[list[int], list[int]]:
    """Every physical row's stable Row ID and Row Commit Version (materialized, else from the add)."""
    n = table.num_rows
    rid = table.column(ROW_ID).to_pylist() if ROW_ID in table.column_names else [None] * n
    ver = table.column(ROW_VERSION).to_pylist() if ROW_VERSION in table.column_names else [None] * n
    rid = [r if r is not None else add["baseRowId"] + pos for pos, r in enumerate(rid)]
    ver = [c if c is not None else add["defaultRowCommitVersion"] for c in ver]
    return rid, ver


def read_rows(path: Path) -> tuple[dict[int, Row], dict[int, tuple[int, int]]]:
    """Every live row by id, and on row-tracking tables its (stable Row ID, Row Commit Version).
    Fails if a row is live twice or two rows share a stable Row ID."""
    snap = Snapshot.load(str(path))
    rows: dict[int, Row] = {}
    ids: dict[int, tuple[int, int]] = {}
    tracked = "delta.enableRowTracking" in snap.metadata.configuration
    for add in snap.add_actions():
        table = pq.read_table(path / _local(add["path"]))
        live = np.ones(table.num_rows, dtype=bool)
        if add.get("deletionVector"):
            live[read_deletion_vector(Storage(str(path)), add["deletionVector"]).astype(np.int64)] = False
        pv = (add.get("partitionValues") or {}).get("p")
        p_col = table.column("p").to_pylist() if "p" in table.column_names else [pv] * table.num_rows
        rid, ver = stable_ids_of(snap, add, table) if tracked else ([], [])
        for pos, (i, v) in enumerate(zip(table.column("id").to_pylist(), table.column("v").to_pylist())):
            if not live[pos]:
                continue
            assert i not in rows, f"id {i} is live twice"
            rows[i] = (i, p_col[pos], v)
            if tracked:
                ids[i] = (rid[pos], ver[pos])
    if tracked:
        assert len({r for r, _ in ids.values()}) == len(ids), "two rows share a stable Row ID"
    return rows, ids
