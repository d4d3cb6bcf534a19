"""Winning commits: what the commits after a read version did, as far as conflicts care.

A transaction that lost the race for its version checks each winner against its own actions
(:mod:`~airflow_delta_maint.delta.log.transaction`, which re-exports these names); a job that
commits many independent units (OPTIMIZE bins) asks :func:`conflicting_files` which of its
inputs the winners removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

from airflow_delta_maint.delta.log.listing import list_log, read_commit
from airflow_delta_maint.delta.protocol.row_tracking import DOMAIN as ROW_TRACKING_DOMAIN
from airflow_delta_maint.delta.protocol.row_tracking import high_water_mark
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["WinningCommit", "canonical_key", "conflicting_files", "winning_commits"]


@dataclass(frozen=True)
class WinningCommit:
    """What one concurrent commit did, as far as conflict detection cares."""

    version: int
    removed_paths: frozenset[str]
    data_change_adds: int
    domains: frozenset[str]
    app_ids: frozenset[str]
    protocol_changed: bool
    metadata_changed: bool
    commit_info: dict = field(default_factory=dict, compare=False)
    #: the ``rowIdHighWaterMark`` the commit set, if it wrote the row-tracking domain
    row_id_high_water_mark: int | None = None

    @property
    def in_commit_timestamp(self) -> int | None:
        value = self.commit_info.get("inCommitTimestamp")
        return int(value) if value is not None else None


def canonical_key(storage: Storage, path: str) -> str:
    """A path from the log as a storage key, so relative and absolute spellings compare equal."""
    key = storage.key_for_path(path)
    return key if key is not None else path


def _summarise(storage: Storage, version: int, actions: list[dict]) -> WinningCommit:
    """One commit's actions reduced to what conflict detection needs."""
    removed: set[str] = set()
    adds = 0
    domains: set[str] = set()
    app_ids: set[str] = set()
    protocol = metadata = False
    info: dict = {}
    high_water: int | None = None
    for action in actions:
        if action.get("remove") is not None:
            removed.add(canonical_key(storage, action["remove"]["path"]))
        elif action.get("add") is not None:
            if action["add"].get("dataChange", True):
                adds += 1
        elif action.get("domainMetadata") is not None:
            domains.add(action["domainMetadata"]["domain"])
            if action["domainMetadata"]["domain"] == ROW_TRACKING_DOMAIN:
                high_water = high_water_mark({ROW_TRACKING_DOMAIN: action["domainMetadata"]})
        elif action.get("txn") is not None:
            app_ids.add(action["txn"]["appId"])
        elif action.get("protocol") is not None:
            protocol = True
        elif action.get("metaData") is not None:
            metadata = True
        elif action.get("commitInfo") is not None:
            info = action["commitInfo"]
    return WinningCommit(version, frozenset(removed), adds, frozenset(domains), frozenset(app_ids),
                         protocol, metadata, info, high_water)


def winning_commits(storage: Storage, read_version: int, until_version: int | None = None) -> Iterator[WinningCommit]:
    """The commits after ``read_version`` (up to ``until_version``, default the latest), in order."""
    if until_version is None:
        listing = list_log(storage, read_version + 1)
        versions = sorted(v for v in listing.commits if v > read_version)
    else:
        versions = list(range(read_version + 1, until_version + 1))
    for v in versions:
        yield _summarise(storage, v, read_commit(storage, v))


def conflicting_files(storage: Storage, read_version: int, paths: Iterable[str],
                      until_version: int | None = None) -> dict[str, int]:
    """Which of ``paths`` commits after ``read_version`` removed, each with the first version that did.

    OPTIMIZE uses this after a ``ConcurrentDeleteDelete`` conflict: it drops only the bins
    whose input files appear here and commits the others again from the same read version
    (appends in between never conflict). A file whose deletion vector a winner replaced counts
    as removed, since its rows changed.

    Args:
        storage: the table's storage.
        read_version: the version the caller planned from.
        paths: file paths as they appear in the log's add actions.
        until_version: the last commit to look at (default: the latest).

    Returns:
        ``{path: winning_version}`` for each given path a later commit removed; paths keep the
        caller's spelling.
    """
    wanted: dict[str, list[str]] = {}
    for p in paths:
        wanted.setdefault(canonical_key(storage, p), []).append(p)
    found: dict[str, int] = {}
    for winner in winning_commits(storage, read_version, until_version):
        for key in winner.removed_paths & wanted.keys():
            for original in wanted[key]:
                found.setdefault(original, winner.version)
    return found
