"""VACUUM that keeps chosen versions: the files those versions read stay past the retention window.

A kept version reads its active files and their deletion vector files; VACUUM adds them to the
set it keeps, so they are never deleted (nor counted as deletable in a dry run), and time travel
to the version keeps working as long as its log entries exist (see :mod:`.log_cleanup`, whose
``keep_versions`` holds those entries back).

:func:`kept_version_keys` loads each kept version whole and returns a set of its keys. On a large
table :func:`readable_kept_versions` and :func:`write_kept_keys` stream each version's live files from
the log instead (the state's scan, tombstones left out) into parquet files of keys, which
the anti-join of a large table's VACUUM reads; a version the stream cannot vouch for is loaded
whole, as :func:`kept_version_keys` loads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable


from airflow_delta_maint.delta.errors import InvalidArgumentError, MissingVersionError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.listing import build_segment
from airflow_delta_maint.delta.log.table_state import TableState, read_table
from airflow_delta_maint.delta.plans.vacuum_valid import valid_keys
from airflow_delta_maint.delta.plans.vacuum_valid_stream import KeyWriter, file_keys
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["KeptKeys", "check_kept_versions", "kept_version_keys", "readable_kept_versions", "write_kept_keys"]

log = logging.getLogger("delta_maint.vacuum")

#: a cut-off later than any deletion time: no tombstone counts, only the version's live files
_NO_TOMBSTONES = 1 << 62


def check_kept_versions(versions: Iterable[int], latest: int) -> list[int]:
    """The distinct versions, sorted.

    Raises:
        InvalidArgumentError: a version is negative or newer than ``latest``.
    """
    out = sorted(set(versions))
    for version in out:
        if version < 0 or version > latest:
            raise InvalidArgumentError(f"cannot keep version {version}: the table has versions 0 to {latest}")
    return out


def _unreadable(version: int, exc: Exception) -> InvalidArgumentError:
    return InvalidArgumentError(f"cannot keep version {version}: it can no longer be read ({exc})")


def _version_keys(storage: Storage, version: int) -> set[str]:
    try:
        snapshot = Snapshot.load(storage, version, paths_only=True)
    except MissingVersionError as exc:
        raise _unreadable(version, exc) from None
    return valid_keys(snapshot, _NO_TOMBSTONES)


def kept_version_keys(storage: Storage, versions: Iterable[int], latest: int) -> set[str]:
    """The keys every listed version reads (data files and deletion vector files).

    Raises:
        InvalidArgumentError: a version is negative, newer than ``latest``, or can no longer be
            reconstructed from the log (its commits or checkpoint were cleaned up).
    """
    keep: set[str] = set()
    for version in check_kept_versions(versions, latest):
        keep |= _version_keys(storage, version)
    return keep


def readable_kept_versions(storage: Storage, versions: Iterable[int], latest: int) -> list[int]:
    """The kept versions (distinct, sorted), each found readable from the log (its segment only: no
    file is read yet). Cheap: bad versions fail here, before any work.

    Raises:
        InvalidArgumentError: as :func:`kept_version_keys`.
    """
    out = check_kept_versions(versions, latest)
    for version in out:
        try:
            build_segment(storage, version, use_compactions=True, prefer_commits=True)
        except MissingVersionError as exc:
            raise _unreadable(version, exc) from None
    return out


@dataclass
class KeptKeys:
    """What :func:`write_kept_keys` wrote: keys (repeats included) and the versions loaded whole."""

    written: int = 0
    loaded_whole: list[int] = field(default_factory=list)


def write_kept_keys(storage: Storage, versions: Iterable[int], folder: str) -> KeptKeys:
    """Write the keys the kept versions read (live data files and their deletion-vector files, as
    :func:`kept_version_keys` finds them) as parquet files into the local ``folder``, one version
    after the other, each streamed in bounded memory. A version the stream cannot vouch for has
    what it streamed discarded and is loaded whole instead (its set only, in memory for the moment).

    Raises:
        InvalidArgumentError: a version can no longer be read.
    """
    out = KeptKeys()
    for version in versions:
        def write(state: TableState, version: int = version) -> int:
            writer = KeyWriter(folder, f"kept-v{version}")
            try:
                for _kind, table in state.scan([]):  # live files only: no tombstone is kept
                    if table.num_rows:
                        writer.write(file_keys(storage, table))
            except BaseException:
                writer.discard()
                raise
            writer.close()
            if isinstance(state, Snapshot):
                out.loaded_whole.append(version)
            return writer.written

        try:
            out.written += read_table(storage, write, version=version, paths_only=True,
                                      what=f"kept version {version}")
        except MissingVersionError as exc:
            raise _unreadable(version, exc) from None
    return out
