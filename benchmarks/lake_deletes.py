"""A DELETE that writes deletion vectors, as delta-spark's does, for the simulated lake (delta-rs rewrites files).

Each live file holding a row the predicate matches is re-added with a deletion vector that adds those rows to its
old one; a file whose last live rows go is removed. One commit, operation ``DELETE``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import PurePosixPath
from urllib.parse import unquote

import numpy as np
import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import Transaction
from airflow_delta_maint.delta.protocol.deletion_vectors import read_deletion_vector, write_deletion_vector


def _remove(add: dict, now: int) -> dict:
    keep = ("path", "partitionValues", "size", "deletionVector", "baseRowId", "defaultRowCommitVersion")
    return {"remove": {**{k: add[k] for k in keep if k in add}, "deletionTimestamp": now, "dataChange": True,
                       "extendedFileMetadata": True}}


def delete_with_vectors(table: str, column: str, matches: Callable[[np.ndarray], np.ndarray]) -> int:
    """DELETE the rows whose ``column`` ``matches`` (a vectorized predicate); the number of rows deleted."""
    snap = Snapshot.load(table)
    now, deleted, actions = int(time.time() * 1000), 0, []
    for add in snap.add_actions():
        values = pq.read_table(PurePosixPath(table) / unquote(add["path"]), columns=[column]).column(column)
        live = np.ones(len(values), dtype=bool)
        if add.get("deletionVector"):
            live[read_deletion_vector(snap.storage, add["deletionVector"]).astype(np.int64)] = False
        hit = np.flatnonzero(live & matches(values.to_numpy()))
        if not hit.size:
            continue
        deleted += int(hit.size)
        actions.append(_remove(add, now))
        if hit.size == live.sum():  # its last live rows: the file goes
            continue
        vector = write_deletion_vector(snap.storage, np.flatnonzero(~live).astype(np.uint64).tolist() + hit.tolist())
        stats = {**json.loads(add["stats"]), "tightBounds": False} if add.get("stats") else None
        new = {**{k: v for k, v in add.items() if k not in ("deletionVector", "stats")}, "deletionVector": vector,
               "dataChange": True, "modificationTime": now}
        actions.append({"add": new | ({"stats": json.dumps(stats)} if stats else {})})
    if actions:
        txn = Transaction(snap, "DELETE", {"predicate": f"{column} matches"}, engine_info="bench-lake-writer")
        txn.add_actions(actions)
        txn.commit({"numDeletedRows": deleted})
    return deleted
