"""VACUUM that keeps chosen versions: the files those versions read stay past the retention window.

A kept version reads its active files and their deletion vector files; VACUUM adds them to the
set it keeps, so they are never deleted (nor counted as deletable in a dry run), and time travel
to the version keeps working as long as its log entries exist (see :mod:`.log_cleanup`, whose
``keep_versions`` holds those entries back).
"""

from __future__ import annotations

from typing import Iterable

from airflow_delta_maint.delta.errors import InvalidArgumentError, MissingVersionError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.vacuum import valid_keys
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["kept_version_keys"]

#: a cut-off later than any deletion time: no tombstone counts, only the version's live files
_NO_TOMBSTONES = 1 << 62


def kept_version_keys(storage: Storage, versions: Iterable[int], latest: int) -> set[str]:
    """The keys every listed version reads (data files and deletion vector files).

    Raises:
        InvalidArgumentError: a version is negative, newer than ``latest``, or can no longer be
            reconstructed from the log (its commits or checkpoint were cleaned up).
    """
    keep: set[str] = set()
    for version in sorted(set(versions)):
        if version < 0 or version > latest:
            raise InvalidArgumentError(f"cannot keep version {version}: the table has versions 0 to {latest}")
        try:
            snapshot = Snapshot.load(storage, version, paths_only=True)
        except MissingVersionError as exc:
            raise InvalidArgumentError(f"cannot keep version {version}: it can no longer be read ({exc})") from None
        keep |= valid_keys(snapshot, _NO_TOMBSTONES)
    return keep
