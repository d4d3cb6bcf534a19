"""Log listing: which files of ``_delta_log`` make up the table at a version.

Names the protocol defines (all versions zero-padded to 20 digits):
commits ``v.json``; classic checkpoints ``v.checkpoint.parquet``; multi-part checkpoints
``v.checkpoint.p.n.parquet``; V2 checkpoints ``v.checkpoint.<uuid>.json|parquet``; log
compaction files ``x.y.compacted.json``; the ``_last_checkpoint`` hint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterable, NoReturn

from airflow_delta_maint.delta.errors import CorruptLogError, MissingVersionError, NotADeltaTableError, TableNotFoundError
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

LOG_DIR = "_delta_log/"
LAST_CHECKPOINT = LOG_DIR + "_last_checkpoint"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2 = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")
_COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
_SCAN_ONCE = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__


def commit_key(version: int) -> str:
    return f"{LOG_DIR}{version:020d}.json"


def compaction_key(start: int, end: int) -> str:
    return f"{LOG_DIR}{start:020d}.{end:020d}.compacted.json"


def classic_checkpoint_key(version: int) -> str:
    return f"{LOG_DIR}{version:020d}.checkpoint.parquet"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A complete checkpoint at ``version``: one file (classic or V2) or all parts."""

    version: int
    kind: str  # "classic" | "multipart" | "v2"
    files: tuple[FileInfo, ...]


@dataclass(frozen=True, slots=True)
class Compaction:
    start: int
    end: int
    file: FileInfo


@dataclass
class LogListing:
    """Everything found in ``_delta_log`` (from some version on), parsed by name."""

    commits: dict[int, FileInfo] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)  # complete ones, ascending
    compactions: list[Compaction] = field(default_factory=list)  # ascending by (start, end)

    @property
    def latest_commit(self) -> int | None:
        return max(self.commits) if self.commits else None


@dataclass(frozen=True)
class LogSegment:
    """The files to replay for one version: a checkpoint (or none) plus what follows it."""

    version: int
    checkpoint: Checkpoint | None
    commits: tuple[FileInfo, ...]  # after the checkpoint, ascending; covered ranges left out
    compactions: tuple[Compaction, ...]  # used compaction files, ascending
    replay: tuple[tuple[int, int, FileInfo], ...]  # (start, end, file) in version order
    shadowed: tuple[Compaction, ...] = ()  # compaction files passed over for their present commits

    @property
    def checkpoint_version(self) -> int | None:
        return self.checkpoint.version if self.checkpoint else None


def parse_listing(files: Iterable[FileInfo]) -> LogListing:
    """Sort log files by kind; incomplete multi-part checkpoints are left out."""
    listing = LogListing()
    parts: dict[tuple[int, int], list[tuple[int, FileInfo]]] = {}
    checkpoints: list[Checkpoint] = []
    for f in files:
        name = f.key[len(LOG_DIR):] if f.key.startswith(LOG_DIR) else f.key
        if "/" in name:
            continue
        if m := _COMMIT.match(name):
            listing.commits[int(m.group(1))] = f
        elif m := _CLASSIC.match(name):
            checkpoints.append(Checkpoint(int(m.group(1)), "classic", (f,)))
        elif m := _MULTIPART.match(name):
            parts.setdefault((int(m.group(1)), int(m.group(3))), []).append((int(m.group(2)), f))
        elif m := _V2.match(name):
            checkpoints.append(Checkpoint(int(m.group(1)), "v2", (f,)))
        elif m := _COMPACTION.match(name):
            start, end = int(m.group(1)), int(m.group(2))
            if start <= end:
                listing.compactions.append(Compaction(start, end, f))
    for (version, total), found in parts.items():
        numbers = sorted(found, key=lambda p: p[0])
        if [n for n, _ in numbers] == list(range(1, total + 1)):
            checkpoints.append(Checkpoint(version, "multipart", tuple(f for _, f in numbers)))
    # Prefer classic/multipart over V2 at the same version only by order; any complete one is valid.
    checkpoints.sort(key=lambda c: (c.version, {"v2": 0, "multipart": 1, "classic": 2}[c.kind]))
    listing.checkpoints = checkpoints
    listing.compactions.sort(key=lambda c: (c.start, c.end))
    return listing


def read_last_checkpoint_hint(storage: Storage) -> int | None:
    """The version ``_last_checkpoint`` names, or None when it is missing or unreadable."""
    try:
        data = json.loads(storage.read(LAST_CHECKPOINT))
        version = int(data["version"])
        return version if version >= 0 else None
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def list_log(storage: Storage, from_version: int = 0) -> LogListing:
    """List ``_delta_log`` from ``from_version`` on (names sort by version)."""
    start_after = f"{LOG_DIR}{from_version - 1:020d}.zzz" if from_version > 0 else None
    return parse_listing(storage.list_from(LOG_DIR, start_after=start_after))


def _ensure_table(storage: Storage, listing: LogListing) -> None:
    if listing.commits or listing.checkpoints:
        return
    if storage.is_local:
        import os

        if not os.path.isdir(storage.local_path("_delta_log")):
            raise NotADeltaTableError(f"not a Delta table (no _delta_log folder): {storage.root}")
    raise NotADeltaTableError(f"not a Delta table (no commits or checkpoints in _delta_log): {storage.root}")


def _listing_from_hint(storage: Storage, version: int | None, exclude: frozenset[str]) -> LogListing:
    """The log listed from the ``_last_checkpoint`` hint when it names a checkpoint found there,
    else the whole log."""
    hint = read_last_checkpoint_hint(storage)
    if hint is not None and (version is None or hint <= version) and not exclude:
        candidate = list_log(storage, hint)
        if any(c.version == hint for c in candidate.checkpoints):
            return candidate
    return list_log(storage)


def _resolve_version(listing: LogListing, version: int | None) -> int:
    """The version asked for, or the latest one; a version outside the log is refused."""
    latest = listing.latest_commit
    if latest is None:
        latest = max(c.version for c in listing.checkpoints)
    if version is None:
        return latest
    if version > latest:
        raise MissingVersionError(f"version {version} does not exist; the latest version is {latest}")
    if version < 0:
        raise MissingVersionError(f"version must be >= 0, got {version}")
    return version


def _latest_checkpoint(listing: LogListing, version: int, exclude: frozenset[str]) -> Checkpoint | None:
    """The latest complete checkpoint at or before ``version`` with none of its files excluded."""
    checkpoint = None
    for c in listing.checkpoints:
        if c.version <= version and not any(f.key in exclude for f in c.files):
            checkpoint = c  # ascending: keeps the latest
    return checkpoint


def _compactions_by_start(listing: LogListing, start: int, version: int,
                          exclude: frozenset[str]) -> dict[int, list[Compaction]]:
    """The usable compaction files inside ``start..version``, grouped by their first version."""
    by_start: dict[int, list[Compaction]] = {}
    for comp in listing.compactions:
        if comp.start >= start and comp.end <= version and comp.file.key not in exclude:
            by_start.setdefault(comp.start, []).append(comp)
    return by_start


def _cheapest_cover(listing: LogListing, by_start: dict[int, list[Compaction]], start: int, version: int,
                    prefer_commits: bool) -> tuple[dict[int, tuple[int, int]], dict[int, Compaction | None]]:
    """The cheapest cover of ``start..version`` by commits and compaction files.

    Each step from v is commit v or a compaction file starting at v; the cheapest cover wins:
    fewest compaction files first when commits are preferred, then fewest files. Solved
    backwards, one step per version. Returns the cost of covering from each reachable version
    on, and the step taken there (None: the commit).
    """
    cost: dict[int, tuple[int, int]] = {version + 1: (0, 0)}
    step: dict[int, Compaction | None] = {}
    for v in range(version, start - 1, -1):
        options: list[tuple[tuple[int, int], Compaction | None]] = []
        if v in listing.commits and v + 1 in cost:
            after = cost[v + 1]
            options.append(((after[0], after[1] + 1), None))
        for comp in by_start.get(v, ()):
            if comp.end + 1 in cost:
                after = cost[comp.end + 1]
                options.append(((after[0] + (1 if prefer_commits else 0), after[1] + 1), comp))
        if options:  # ties: a compaction file over a commit, the longer one first
            best = min(options, key=lambda o: (o[0], o[1] is None, -(o[1].end if o[1] else v)))
            cost[v], step[v] = best
    return cost, step


def _raise_gap(listing: LogListing, checkpoint: Checkpoint | None, start: int, version: int) -> NoReturn:
    """Refuse a version the log cannot reconstruct, naming the first missing commit."""
    gap = next(v for v in range(start, version + 1) if v not in listing.commits)
    if checkpoint is None and gap == 0:
        earliest = min(listing.commits) if listing.commits else None
        raise MissingVersionError(
            f"cannot reconstruct version {version}: no checkpoint at or before it and commit 0 is gone"
            + (f" (earliest commit is {earliest})" if earliest is not None else ""))
    raise MissingVersionError(
        f"the log has a gap: commit {gap} is missing (needed to read version {version}"
        f" from {'checkpoint ' + str(checkpoint.version) if checkpoint else 'version 0'})")


def _follow_cover(listing: LogListing, step: dict[int, Compaction | None], start: int, version: int,
                  ) -> tuple[list[tuple[int, int, FileInfo]], list[Compaction], list[FileInfo]]:
    """Walk the chosen steps from ``start``: the replay in version order, the compaction files
    used and the commits read."""
    replay: list[tuple[int, int, FileInfo]] = []
    used: list[Compaction] = []
    commits: list[FileInfo] = []
    v = start
    while v <= version:
        chosen = step[v]
        if chosen is not None:
            replay.append((chosen.start, chosen.end, chosen.file))
            used.append(chosen)
            v = chosen.end + 1
        else:
            replay.append((v, v, listing.commits[v]))
            commits.append(listing.commits[v])
            v += 1
    return replay, used, commits


def _shadowed_compactions(by_start: dict[int, list[Compaction]], used: list[Compaction],
                          replay: list[tuple[int, int, FileInfo]]) -> list[Compaction]:
    """The compaction files passed over although every commit they cover was replayed."""
    replayed = {s for s, e, _ in replay if s == e}
    shadowed = [c for group in by_start.values() for c in group
                if c not in used and all(u in replayed for u in range(c.start, c.end + 1))]
    shadowed.sort(key=lambda c: (c.start, c.end))
    return shadowed


def build_segment(storage: Storage, version: int | None = None, use_compactions: bool = True,
                  listing: LogListing | None = None, *, prefer_commits: bool = False,
                  exclude: frozenset[str] = frozenset()) -> LogSegment:
    """Choose the files that reconstruct ``version`` (default: the latest).

    ``_last_checkpoint`` is used only as a hint for where to start listing; a stale, missing
    or corrupt hint falls back to a full listing.

    Args:
        storage: the table's storage.
        version: the version to reconstruct (default: the latest).
        use_compactions: replay log compaction files in place of the commits they cover.
        listing: the log listing to use instead of listing the log.
        prefer_commits: use a compaction file only where one of its commits is missing; the
            compaction files that could have stood in for present commits are named in
            ``LogSegment.shadowed`` (for a cross-check).
        exclude: keys of checkpoint and compaction files not to use (found untrustworthy).
    """
    if listing is None:
        listing = _listing_from_hint(storage, version, exclude)
    _ensure_table(storage, listing)
    version = _resolve_version(listing, version)
    checkpoint = _latest_checkpoint(listing, version, exclude)
    start = checkpoint.version + 1 if checkpoint else 0
    by_start = _compactions_by_start(listing, start, version, exclude) if use_compactions else {}
    cost, step = _cheapest_cover(listing, by_start, start, version, prefer_commits)
    if start not in cost:
        _raise_gap(listing, checkpoint, start, version)
    replay, used, commits = _follow_cover(listing, step, start, version)
    shadowed = _shadowed_compactions(by_start, used, replay)
    return LogSegment(version, checkpoint, tuple(commits), tuple(used), tuple(replay), tuple(shadowed))


def latest_version(storage: Storage) -> int:
    """The latest commit version, listing from the ``_last_checkpoint`` hint when present."""
    return build_segment(storage).version


def parse_json_lines(data: bytes, what: str, skip: tuple[bytes, ...] = ()) -> list[dict]:
    """Parse a newline-delimited JSON log file; a bad line is a CorruptLogError naming the file.

    Lines starting with one of ``skip`` (say ``b'{"add"'``: one action per line, so the first key
    names it) are passed over unparsed, for a reader that needs only other kinds of action.
    """
    actions = []
    scan = _SCAN_ONCE  # the C scanner directly: much less overhead per line than json.loads
    for n, raw in enumerate(data.splitlines(), 1):
        line = raw.strip()
        if not line or (skip and line.startswith(skip)):
            continue
        try:
            text = line.decode("utf-8")
            if n == 1 and text.startswith("\ufeff"):  # a byte order mark, as json.loads accepts
                text = text[1:]
            action, end = scan(text, 0)
            if end != len(text):
                raise ValueError(f"extra data at column {end + 1}")
        except StopIteration:
            raise CorruptLogError(f"corrupt log file {what}: line {n} is not valid JSON") from None
        except ValueError as exc:
            raise CorruptLogError(f"corrupt log file {what}: line {n} is not valid JSON ({exc})") from None
        if not isinstance(action, dict):
            raise CorruptLogError(f"corrupt log file {what}: line {n} is not a JSON object")
        actions.append(action)
    return actions


def read_commit(storage: Storage, version: int) -> list[dict]:
    """The actions of one commit file."""
    key = commit_key(version)
    try:
        data = storage.read(key)
    except FileNotFoundError:
        raise MissingVersionError(f"commit {version} does not exist") from None
    return parse_json_lines(data, key)


def read_commit_info(storage: Storage, version: int) -> dict | None:
    """The commitInfo of one commit, reading only as far as its line (usually the first)."""
    for action in read_commit(storage, version):
        if "commitInfo" in action:
            return action["commitInfo"]
    return None


__all__ = [
    "LOG_DIR", "LAST_CHECKPOINT", "Checkpoint", "Compaction", "LogListing", "LogSegment",
    "build_segment", "classic_checkpoint_key", "commit_key", "compaction_key", "latest_version",
    "list_log", "parse_json_lines", "parse_listing", "read_commit", "read_commit_info",
    "read_last_checkpoint_hint", "TableNotFoundError",
]
