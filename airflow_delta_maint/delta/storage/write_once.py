"""Write-once objects (commits, checkpoints, log compaction files, leases, files named once) on a store
whose answers can be lost.

A put-if-absent whose connection fails may or may not have been applied: the store can create the object
and the answer never arrive. obstore does not retry a conditional put that failed that way, and a retry
that did would be told the object already exists, although it is this writer's own. :func:`put_once`
settles it: after a failed attempt it reads the key back; the writer's own bytes there are its write,
another's are a lost race, and an absent object is tried again.
"""

from __future__ import annotations

import logging

from airflow_delta_maint.delta.errors import PutIfAbsentUnsupportedError, StorageError
from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage

log = logging.getLogger("delta_maint.storage")

#: attempts of one write-once put whose requests fail without an answer (obstore retries each one itself
#: where it may)
ATTEMPTS = 3


def put_once(storage: Storage, key: str, data: bytes, attempts: int = ATTEMPTS) -> None:
    """Create ``key`` with ``data`` unless it exists; never overwrite.

    Returns when ``data`` is at ``key``: written by this call, or by an attempt of this call whose answer
    was lost. Raises ``AlreadyExistsError`` when another writer's object is there, and the store's error
    when no attempt could be settled.
    """
    unsure = False
    for attempt in range(1, attempts + 1):
        try:
            storage.put_if_absent(key, data)
            return
        except AlreadyExistsError:
            if unsure and _holds(storage, key, data):
                log.info("%s/%s: an earlier attempt whose answer was lost wrote it", storage.root, key)
                return
            raise
        except PutIfAbsentUnsupportedError:  # refused before anything was sent
            raise
        except StorageError as exc:
            try:
                found = _read_back(storage, key)
            except StorageError:
                raise exc from None
            if found is None and attempt < attempts:
                log.info("%s/%s: the put failed (%s); trying again", storage.root, key, exc)
                unsure = True
                continue
            if found is None:
                raise
            if found == data:
                log.info("%s/%s: the put reported a failure (%s) but was applied", storage.root, key, exc)
                return
            raise AlreadyExistsError(f"{storage.root}/{key} exists with other content") from None


def _read_back(storage: Storage, key: str) -> bytes | None:
    """The object's bytes, None when it is absent; a failed read raises the store's error."""
    try:
        return storage.read(key)
    except FileNotFoundError:
        return None


def _holds(storage: Storage, key: str, data: bytes) -> bool:
    """True when ``key`` holds exactly ``data``."""
    return _read_back(storage, key) == data
