"""A table's commits checked again and again (a sensor's pokes, a trigger's polls), each check after the first
reading only what is new since the one before.

The first check finds the latest version by existence checks from the checkpoint ``_last_checkpoint`` names and
reads the commitInfo of the commits it must (:mod:`.history`). A :class:`CommitWatch` remembers the latest version
it saw and the newest OPTIMIZE among the commits it read, so a later check of the same table costs two existence
checks when nothing was committed (the remembered latest, and the one after it), and reads the commitInfo of the
new commits only. Published commits above an existing one are contiguous, and a commit never changes, so the
answer is the one a first check would give; except that an OPTIMIZE commit expired by the log's cleanup since it
was seen is still counted from, where a first check would no longer find it.

A watch is of one table: checked against another root (a table by name whose location moved), or when the
remembered latest commit is gone (the table was deleted or replaced), it starts afresh.
"""

from __future__ import annotations

from collections.abc import Iterable

from airflow_delta_maint.delta.log.history import gallop_latest, last_operation_version, latest_version_cheap
from airflow_delta_maint.delta.log.listing import commit_key, read_last_checkpoint_hint
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["CommitWatch"]


class CommitWatch:
    """What the last check of one table saw: its latest version and the newest commit of an operation among the
    commits read. One per sensor or trigger, whose checks run one after the other (plain data: it copies and
    pickles with its owner)."""

    def __init__(self) -> None:
        self._root: str | None = None
        self._latest: int | None = None
        #: the commits read for an operation: versions up to ``_scanned_to``; the newest match among them
        self._scanned_to: int | None = None
        self._operation: int | None = None

    def _known_latest(self, storage: Storage) -> int | None:
        if self._root != storage.root or self._latest is None:
            return None
        return self._latest if storage.exists(commit_key(self._latest)) else None

    def latest_version(self, storage: Storage, with_checkpoint: bool = False) -> tuple[int, int | None]:
        """The latest version, and the ``_last_checkpoint`` version when ``with_checkpoint`` (else None on a check
        that starts from memory): :func:`~.history.latest_version_cheap`, galloping from the version seen last."""
        known = self._known_latest(storage)
        if known is None:
            self._root, self._scanned_to, self._operation = storage.root, None, None
            latest, hint = latest_version_cheap(storage)
        else:
            hint = read_last_checkpoint_hint(storage) if with_checkpoint else None
            start = hint if hint is not None and hint > known and storage.exists(commit_key(hint)) else known
            latest = gallop_latest(storage, start)
        self._latest = latest
        return latest, hint

    def last_operation(self, storage: Storage, operations: Iterable[str], latest: int, max_commits: int) -> int | None:
        """The newest version among the ``max_commits`` commits up to ``latest`` whose operation is one of
        ``operations`` (:func:`~.history.last_operation_version`), reading only commits not read before. Call
        with the same operations each time."""
        names = list(operations)
        lowest = latest - max_commits + 1
        scanned = self._scanned_to if self._root == storage.root else None
        if scanned is None or scanned > latest:
            found = last_operation_version(storage, names, latest, max_commits=max_commits)
        else:
            found = last_operation_version(storage, names, latest, max_commits=max_commits, stop_at=scanned + 1)
            if found is None and self._operation is not None and self._operation >= lowest:
                found = self._operation
        self._root, self._scanned_to, self._operation = storage.root, latest, found
        return found
