"""VACUUM planning: which files under a table root no version inside the retention window needs.

Pure planning over the log and a listing; no Spark. The application lists and deletes.

- The retention comes from ``delta.deletedFileRetentionDuration`` (default 7 days). A shorter
  requested retention is refused unless the caller turns the check off.
- The cutoff is ``now - retention``. The *valid set* holds every file the latest snapshot
  references (active files and tombstones deleted at or after the cutoff) and the deletion
  vector files of both. A version read at any moment after the cutoff only references files in
  that set.
- Full mode: a listed file is deleted when it is older than the cutoff (modification time), not
  hidden, and not in the valid set.
- Lite mode: the candidates are the ``remove`` (and their deletion vector files) and ``cdc``
  actions of the commits between the last vacuum's watermark (``_delta_log/_last_vacuum_info``)
  and the latest commit at or before the cutoff, minus the valid set. No listing.
- Nothing under ``_delta_log`` or any other hidden (``_``/``.``) name is ever a candidate, except
  ``_change_data`` and partition folders whose column name starts with ``_``.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from airflow_delta_maint.delta.errors import DeltaError, InvalidArgumentError, MissingVersionError
from airflow_delta_maint.delta.log.commit_time import latest_commit_at_or_before
from airflow_delta_maint.delta.log.listing import LOG_DIR, LogListing, commit_key, list_log, parse_json_lines
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.table_state import read_table
from airflow_delta_maint.delta.storage.table_files import delete_files, hidden_name, is_hidden, partition_prefixes
from airflow_delta_maint.delta.plans.vacuum_options import VacuumOptions
from airflow_delta_maint.delta.plans.vacuum_valid import key_for_log_path, valid_among, valid_keys
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.deletion_vectors import dv_file_key
from airflow_delta_maint.delta.protocol.table_properties import DELETED_FILE_RETENTION
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

__all__ = [
    "DEFAULT_RETENTION_MS", "LAST_VACUUM_INFO", "LiteRange", "VacuumLiteUnavailableError", "VacuumPlan",
    "check_retention", "delete_files", "is_hidden", "latest_commit_at_or_before",
    "lite_candidates", "lite_check", "lite_range", "nothing_to_do", "plan_vacuum", "read_last_vacuum_info",
    "select_candidates", "table_retention_ms", "write_last_vacuum_info",
]

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
RETENTION_PROPERTY = DELETED_FILE_RETENTION
LAST_VACUUM_INFO = LOG_DIR + "_last_vacuum_info"
_WATERMARK_FIELD = "latestCommitVersionOutsideOfRetentionWindow"
_HOUR_MS = 3600 * 1000
# Characters Hive-style partition folder names escape (as delta-spark and delta-rs write them).


class VacuumLiteUnavailableError(InvalidArgumentError):
    """Lite mode cannot see every file to delete because the commits it needs were cleaned up."""


# -- retention ------------------------------------------------------------------------------------
def table_retention_ms(metadata: Metadata) -> int:
    """The table's tombstone retention: ``delta.deletedFileRetentionDuration`` or 7 days.

    Raises:
        InvalidArgumentError: the property is not a valid interval.
    """
    return metadata.properties.deleted_file_retention_ms


def _hours(ms: int) -> str:
    hours = ms / _HOUR_MS
    return f"{hours:g} hours" if hours != 1 else "1 hour"


def check_retention(retention_hours: float | None, table_retention: int,
                    ignore_retention_check: bool = False) -> int:
    """The retention to use in ms: the requested one, or the table's when none is requested.

    Raises:
        InvalidArgumentError: a negative retention, or one shorter than the table's while the
            check is on.
    """
    if retention_hours is None:
        return table_retention
    try:
        hours = float(retention_hours)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"retention must be a number of hours, got {retention_hours!r}") from None
    if hours != hours or hours < 0 or hours == float("inf"):
        raise InvalidArgumentError(f"retention must be a finite number of hours >= 0, got {retention_hours!r}")
    retention = int(round(hours * _HOUR_MS))
    if retention < table_retention and not ignore_retention_check:
        raise InvalidArgumentError(
            f"a retention of {_hours(retention)} is shorter than the table's {RETENTION_PROPERTY} "
            f"({_hours(table_retention)}): VACUUM could delete files that readers of older versions or "
            f"writers still committing need. Use at least {_hours(table_retention)}, or turn the retention "
            "check off (ignore_retention_check) only when nothing reads old versions of or writes to the table")
    return retention


def select_candidates(files: Iterable[FileInfo], valid: set[str] | frozenset[str], cutoff_ms: int,
                      partition_columns: Iterable[str] = ()) -> list[FileInfo]:
    """Listed files full mode deletes: older than the cutoff, not hidden, not in the valid set."""
    prefixes = partition_prefixes(partition_columns)
    out = []
    for f in files:
        if f.mtime_ms >= cutoff_ms or f.key in valid:
            continue
        parts = f.key.split("/")
        if parts[0] == "_delta_log" or any(hidden_name(p, prefixes) for p in parts):
            continue
        out.append(f)
    return out


# -- the last vacuum's watermark ---------------------------------------------------------------
def read_last_vacuum_info(storage: Storage) -> int | None:
    """The watermark ``_last_vacuum_info`` records (None when missing, null or unreadable)."""
    try:
        data = json.loads(storage.read(LAST_VACUUM_INFO))
    except (FileNotFoundError, ValueError):
        return None
    value = data.get(_WATERMARK_FIELD) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def write_last_vacuum_info(storage: Storage, version: int | None) -> None:
    """Record the latest commit whose removed files VACUUM has handled (delta-spark's format)."""
    payload = json.dumps({_WATERMARK_FIELD: version}, separators=(",", ":")) + "\n"
    storage.put(LAST_VACUUM_INFO, payload.encode("utf-8"))


# -- commit timestamps ------------------------------------------------------------------------


# -- plans ------------------------------------------------------------------------------------------
@dataclass
class LiteRange:
    """The commits lite mode reads: ``start`` to ``end`` inclusive (empty when ``start > end``)."""

    start: int
    end: int
    earliest_commit: int
    watermark: int | None

    @property
    def empty(self) -> bool:
        return self.start > self.end


@dataclass
class VacuumPlan:
    """What one VACUUM run will do, before any listing or deletion.

    Attributes:
        mode: ``full`` or ``lite``.
        now_ms, cutoff_ms: the run's clock and ``now - retention``; older untracked files go.
        retention_ms: the retention in force; ``specified_retention_ms`` when one was requested.
        default_retention_ms: the table's ``delta.deletedFileRetentionDuration``.
        retention_check_enabled: False when the caller turned the check off.
        valid: keys that must stay.
        latest_outside: the newest commit at or before the cutoff (None when none is).
        lite: the commits lite mode reads (lite mode only).
    """

    mode: str
    version: int
    now_ms: int
    cutoff_ms: int
    retention_ms: int
    default_retention_ms: int
    specified_retention_ms: int | None
    retention_check_enabled: bool
    partition_columns: tuple[str, ...]
    valid: set[str] = field(repr=False)
    latest_outside: int | None = None
    lite: LiteRange | None = None

    def commit_parameters(self) -> dict[str, Any]:
        """``VACUUM START`` operation parameters, as delta-spark writes them."""
        params: dict[str, Any] = {"retentionCheckEnabled": self.retention_check_enabled,
                                  "defaultRetentionMillis": self.default_retention_ms}
        if self.specified_retention_ms is not None:
            params["specifiedRetentionMillis"] = self.specified_retention_ms
        return params


def lite_range(storage: Storage, latest_outside: int | None, snapshot_version: int,
               listing: LogListing | None = None) -> LiteRange:
    """The commits lite mode must read, from the watermark (or the first commit) to the cutoff.

    Raises:
        VacuumLiteUnavailableError: the first commit lite mode needs was cleaned up from the log.
        MissingVersionError: a commit inside the range is missing.
    """
    listing = listing if listing is not None else list_log(storage)
    if not listing.commits:
        raise VacuumLiteUnavailableError("VACUUM lite needs the table's commit files, and _delta_log has none; "
                                         "run a full VACUUM")
    earliest = min(listing.commits)
    watermark = read_last_vacuum_info(storage)
    start = watermark + 1 if watermark is not None else 0
    end = latest_outside if latest_outside is not None else -1
    start = min(start, snapshot_version + 1)
    if start <= end and start < earliest:
        if watermark is None:
            why = "no earlier VACUUM recorded a watermark (_delta_log/_last_vacuum_info)"
        else:
            why = f"the last VACUUM handled commits up to version {watermark}"
        raise VacuumLiteUnavailableError(
            f"VACUUM lite cannot find every file to delete: {why}, but the log now starts at version "
            f"{earliest} (earlier commits were cleaned up), so files removed in versions {start} to "
            f"{earliest - 1} are unknown. Run a full VACUUM (mode='full'); it lists the table and records "
            "a new watermark so lite mode works again")
    if start <= end:
        missing = [v for v in range(start, end + 1) if v not in listing.commits]
        if missing:
            raise MissingVersionError(f"the log has a gap: commit {missing[0]} is missing, VACUUM lite cannot read "
                                      f"versions {start} to {end}")
    return LiteRange(start, end, earliest, watermark)


def plan_vacuum(snapshot: TableHeader, retention_hours: float | None = None, mode: str = "full",
                ignore_retention_check: bool = False, now_ms: int | None = None,
                listing: LogListing | None = None, with_valid: bool = True) -> VacuumPlan:
    """Check the retention and build the plan (valid set; lite mode's commit range).

    With ``with_valid=False`` the plan's valid set is left empty for the caller to fill with
    :func:`valid_keys` (say, while a listing runs).

    Raises:
        InvalidArgumentError: bad mode or retention (see :func:`check_retention`).
        VacuumLiteUnavailableError: lite mode cannot run on this log.
    """
    if mode not in ("full", "lite"):
        raise InvalidArgumentError(f"VACUUM mode must be 'full' or 'lite', got {mode!r}")
    default = table_retention_ms(snapshot.metadata)
    retention = check_retention(retention_hours, default, ignore_retention_check)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - retention
    storage = snapshot.storage
    listing = listing if listing is not None else list_log(storage)
    latest_outside = latest_commit_at_or_before(storage, cutoff, snapshot.metadata.configuration, listing)
    if latest_outside is not None:
        latest_outside = min(latest_outside, snapshot.version)
    lite = lite_range(storage, latest_outside, snapshot.version, listing) if mode == "lite" else None
    return VacuumPlan(
        mode=mode, version=snapshot.version, now_ms=now, cutoff_ms=cutoff, retention_ms=retention,
        default_retention_ms=default,
        specified_retention_ms=retention if retention_hours is not None else None,
        retention_check_enabled=not ignore_retention_check,
        partition_columns=tuple(snapshot.metadata.partition_columns),
        valid=valid_keys(snapshot, cutoff) if with_valid else set(), latest_outside=latest_outside, lite=lite)


@dataclass
class LiteCandidates:
    """Files lite mode deletes, and the watermark to record once they are gone."""

    files: list[FileInfo]
    watermark: int | None
    commits_read: int
    skipped_young: int


# lite mode reads only remove and cdc actions: the (usually many) adds need no parsing
_LITE_SKIP = (b'{"add"', b'{"commitInfo"')


def _read_commits(storage: Storage, versions: Sequence[int], threads: int = 16) -> Iterable[tuple[int, list[dict]]]:
    def read(v: int) -> tuple[int, list[dict]]:
        key = commit_key(v)
        try:
            return v, parse_json_lines(storage.read(key), key, skip=_LITE_SKIP)
        except FileNotFoundError:
            raise MissingVersionError(f"commit {v} disappeared while VACUUM lite was reading it") from None

    if len(versions) <= 2:
        return [read(v) for v in versions]
    with ThreadPoolExecutor(max_workers=min(threads, len(versions))) as pool:
        return list(pool.map(read, versions))


def lite_candidates(plan: VacuumPlan, storage: Storage, state: TableHeader | None = None) -> LiteCandidates:
    """Read lite mode's commits and pick the files to delete.

    A removed file (and its deletion vector file) is a candidate when it was deleted before the
    cutoff; a ``cdc`` file always is (its commit is older than the cutoff). Valid and hidden keys
    are left out: with ``state`` (eager or streamed), the candidates are looked up in it
    (:func:`valid_among`; the plan may then be built without its valid set), else in
    ``plan.valid``. When a removal
    in the range is not yet expired, the watermark stops before its commit so a later run reads
    that commit again.
    """
    assert plan.lite is not None
    rng = plan.lite
    if rng.empty:
        return LiteCandidates([], rng.watermark, 0, 0)
    prefixes = partition_prefixes(plan.partition_columns)
    seen: dict[str, FileInfo] = {}
    first_young: int | None = None
    skipped = 0

    def consider(key: str | None, size: int, when: int) -> None:
        if key is None or key in seen:
            return
        parts = key.split("/")
        if parts[0] == "_delta_log" or any(hidden_name(p, prefixes) for p in parts):
            return
        seen[key] = FileInfo(key, size, when)

    versions = list(range(rng.start, rng.end + 1))
    for version, actions in _read_commits(storage, versions):
        for action in actions:
            remove = action.get("remove")
            if remove is not None:
                deleted_at = int(remove.get("deletionTimestamp") or 0)
                if deleted_at >= plan.cutoff_ms:
                    skipped += 1
                    first_young = version if first_young is None else min(first_young, version)
                    continue
                consider(key_for_log_path(storage, remove["path"]), int(remove.get("size") or 0), deleted_at)
                dv = remove.get("deletionVector")
                if dv:
                    consider(dv_file_key(storage, dv), int(dv.get("sizeInBytes") or 0), deleted_at)
                continue
            cdc = action.get("cdc")
            if cdc is not None:
                consider(key_for_log_path(storage, cdc["path"]), int(cdc.get("size") or 0), 0)
    valid = valid_among(state, plan.cutoff_ms, seen) if state is not None else plan.valid
    watermark = rng.end if first_young is None else first_young - 1
    if watermark < rng.start - 1:
        watermark = rng.start - 1
    return LiteCandidates([f for k, f in seen.items() if k not in valid], watermark if watermark >= 0 else None,
                          len(versions), skipped)


# -- deleting -----------------------------------------------------------------------------------
def remove_empty_dirs(storage: Storage, emptied: Iterable[str], cutoff_ms: int,
                      partition_columns: Iterable[str] = (), walk: bool = True,
                      listed_dirs: Mapping[str, int] | None = None) -> int:
    """Remove empty folders under a local table root, deepest first; return how many went.

    A folder goes when it is empty, not hidden, and either held a file this run deleted (or
    such a folder) or was last modified before the cutoff, so a folder another writer just
    created stays. The folders tried are those of ``listed_dirs`` (key -> modification time in
    ms, from a listing taken before the deletes) when given, else every folder under the root
    (``walk``), else only the folders of ``emptied`` keys. Object stores have no folders:
    returns 0.
    """
    if not storage.is_local:
        return 0
    root = storage.local_dir.rstrip("/") or "/"
    prefixes = partition_prefixes(partition_columns)
    allowed = set()
    for folder in {key.rpartition("/")[0] for key in emptied}:
        while folder and folder not in allowed:
            allowed.add(folder)
            folder = folder.rpartition("/")[0]
    if listed_dirs is not None:
        folders: Mapping[str, int | None] = listed_dirs
    elif walk:
        folders = {os.path.relpath(d, root).replace(os.sep, "/"): None
                   for d, _subdirs, _files in os.walk(root) if d != root}
    else:
        folders = dict.fromkeys(allowed)
    removed = 0
    for rel in sorted(folders, key=lambda d: d.count("/"), reverse=True):
        parts = rel.split("/")
        if parts[0] == "_delta_log" or any(hidden_name(p, prefixes) for p in parts):
            continue
        path = os.path.join(root, rel)
        try:
            if rel not in allowed:
                mtime = folders[rel]
                if mtime is None:
                    mtime = int(os.stat(path).st_mtime * 1000)
                if mtime >= cutoff_ms:
                    continue
            os.rmdir(path)
        except OSError:
            continue
        removed += 1
        parent = rel.rpartition("/")[0]
        if parent:
            allowed.add(parent)
    return removed


# -- the cheap check --------------------------------------------------------------------------
def nothing_to_do(table: str, storage_options: Mapping[str, str] | None = None,
                  options: VacuumOptions | None = None) -> str | None:
    """Why a VACUUM would delete nothing, found without Spark, or None when it may have work.

    Args:
        table: the table path or URI.
        storage_options: object-store options.
        options: the run's options (``mode``, ``retention_hours``, ``ignore_retention_check`` count here).

    Returns:
        A one-line reason (lite mode: no commits newly outside the retention window, or none of
        them removed a file that is not still needed and the watermark would not move), or None. Full mode returns None: only a
        listing can prove a table has no orphans.

    Raises:
        DeltaError: a missing or unsupported table, or a bad mode or retention, as the job would.
    """
    options = options if options is not None else VacuumOptions()
    plan, found = lite_check(table, storage_options, options)
    if options.mode != "lite":
        return None
    assert plan.lite is not None
    if plan.lite.empty:
        return (f"no commit left the retention window since the last VACUUM (watermark "
                f"{plan.lite.watermark}, newest commit outside the window {plan.latest_outside})")
    assert found is not None
    # a run that deletes nothing still moves the watermark, so that later runs read fewer commits
    if not found.files and found.watermark == plan.lite.watermark:
        return (f"commits {plan.lite.start} to {plan.lite.end} removed no file that has expired and is no "
                "longer needed, and the watermark stays at version "
                f"{plan.lite.watermark}")
    return None


def lite_check(table: str, storage_options: Mapping[str, str] | None,
               options: VacuumOptions) -> tuple[VacuumPlan, LiteCandidates | None]:
    """The plan (no valid set) and, in lite mode with commits to read, lite mode's candidates,
    on the worker in bounded memory.

    Reads: the log listing, the protocol and metaData, the commits after the checkpoint, the
    commits of lite mode's range (their remove and cdc actions), and the checkpoint's paths and
    deletion vectors streamed (:func:`valid_among`) to look the candidates up; the whole
    snapshot (paths only) when the streamed state cannot be vouched for.

    Raises:
        DeltaError: a missing or unsupported table, or a bad mode or retention, as the job would.
    """
    from airflow_delta_maint.delta.protocol.features import Operation, check_supported

    def check(state: TableHeader) -> tuple[VacuumPlan, LiteCandidates | None]:
        check_supported(state.protocol, Operation.VACUUM, state.metadata)
        plan = plan_vacuum(state, options.retention_hours, options.mode, options.ignore_retention_check,
                           with_valid=False)
        if plan.lite is None or plan.lite.empty:
            return plan, None
        return plan, lite_candidates(plan, state.storage, state)

    return read_table(table, check, storage_options=storage_options, paths_only=True, what="VACUUM's check")


__all__ += ["LiteCandidates", "remove_empty_dirs", "DeltaError"]
