"""The reconciliation invariant, checked wherever a table state is built or about to be written.

A reconciled state (a snapshot, a checkpoint, a log compaction file) holds at most one live
``add`` per file path, and no logical file ``(path, deletion vector id)`` is both live and
removed. A commit obeys the protocol's rules for one version ("Add File and Remove File"): at
most one ``add`` and one ``remove`` per path, and an ``add`` of a path that is live with another
deletion vector only together with the ``remove`` of that live file. This project's jobs also
never remove a file that is not live in the version they read, since a rewrite of such a file
would bring its rows back.

Every check returns a sentence saying what is wrong, or None; callers decide whether to
distrust a derived file, refuse to read, or refuse to write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.protocol.actions import dv_unique_id
from airflow_delta_maint.delta.protocol.paths import canonical_path, canonical_paths, file_name, maybe_noncanonical

__all__ = ["Replay", "actions_problem", "added_problem", "commit_problem", "describe_file", "drop_keys", "live_dv_ids",
           "state_problem"]


def describe_file(path: str, dv_id: str) -> str:
    """A logical file as error messages name it: its path, and its deletion vector if any."""
    return f"{path!r} (deletion vector {dv_id})" if dv_id else f"{path!r}"


def _rows(mask: pa.Array) -> pa.Array:
    return pa.array(np.flatnonzero(mask.to_numpy(zero_copy_only=False)), pa.int64())


def state_problem(adds: pa.Table, removes: pa.Table, root: str) -> str | None:
    """Why live ``adds`` and tombstones ``removes`` (tables with ``path`` and ``deletionVector``)
    are not a reconciled state, or None. Vectorised: one hash pass over the paths, and only rows
    that may share a key are looked at in Python."""
    if adds.num_rows == 0:
        return None
    keys = canonical_paths(adds.column("path"), root)
    if len(pc.unique(keys)) != len(keys):
        counts = pc.value_counts(keys)
        dup = counts.filter(pc.greater(counts.field("counts"), 1))[0].as_py()
        return f"{dup['counts']} live add actions for the file {dup['values']!r}"
    if removes.num_rows == 0:
        return None
    removed = canonical_paths(removes.column("path"), root)
    # probe the larger side with a hash of the smaller one
    if len(removed) <= len(keys):
        shared = pc.filter(keys, pc.fill_null(pc.is_in(keys, value_set=pc.unique(removed)), False))
    else:
        shared = pc.filter(removed, pc.fill_null(pc.is_in(removed, value_set=keys), False))
    if len(shared) == 0:
        return None
    paths = set(shared.to_pylist())
    live = live_dv_ids(adds, paths, root, keys)
    rows = _rows(pc.fill_null(pc.is_in(removed, value_set=pa.array(sorted(paths), pa.string())), False))
    for path, dv in zip(removed.take(rows).to_pylist(), removes.column("deletionVector").take(rows).to_pylist()):
        dv_id = dv_unique_id(dv)
        if live.get(path) == dv_id:
            return f"the file {describe_file(path, dv_id)} is both live and removed"
    return None


def added_problem(base: pa.Table, adds: Iterable[Mapping[str, Any]], root: str) -> str | None:
    """Why live files ``base`` (a reconciled state, checked already) joined by new ``adds`` of other
    logical files would hold a path live twice, or None. Cheap: the new paths are few."""
    new: dict[str, str] = {}
    for a in adds:
        path = canonical_path(a["path"], root)
        dv_id = dv_unique_id(a.get("deletionVector"))
        if path in new:
            return (f"2 live add actions for the file {path!r} (deletion vectors {new[path] or 'none'} and "
                    f"{dv_id or 'none'})")
        new[path] = dv_id
    if not new or base.num_rows == 0:
        return None
    keys = canonical_paths(base.column("path"), root)
    shared = pc.filter(keys, pc.fill_null(pc.is_in(keys, value_set=pa.array(sorted(new), pa.string())), False))
    if len(shared):
        path = shared[0].as_py()
        return f"2 live add actions for the file {path!r}"
    return None


def live_dv_ids(adds: pa.Table, paths: set[str], root: str, keys: pa.Array | None = None) -> dict[str, str]:
    """``{canonical path: deletion vector id}`` of the live files among ``paths``."""
    if adds.num_rows == 0 or not paths:
        return {}
    if keys is None:
        keys = canonical_paths(adds.column("path"), root)
    rows = _rows(pc.fill_null(pc.is_in(keys, value_set=pa.array(sorted(paths), pa.string())), False))
    dvs = adds.column("deletionVector").take(rows).to_pylist()
    return {p: dv_unique_id(dv) for p, dv in zip(keys.take(rows).to_pylist(), dvs)}


def _file_actions(actions: Iterable[Mapping[str, Any]]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for action in actions:
        for kind in ("add", "remove"):
            body = action.get(kind)
            if body is not None:
                yield kind, body


def actions_problem(actions: Iterable[Mapping[str, Any]], root: str) -> str | None:
    """Why a list of actions that claims to be a reconciled state (a log compaction file) is not
    one, or None: a logical file listed twice, added and removed at once, or a path live twice."""
    seen: dict[tuple[str, str], str] = {}
    live: dict[str, str] = {}
    for kind, body in _file_actions(actions):
        if not isinstance(body.get("path"), str):
            return f"a {kind} action without a path"
        path = canonical_path(body["path"], root)
        dv_id = dv_unique_id(body.get("deletionVector"))
        before = seen.get((path, dv_id))
        if before is not None:
            what = f"two {kind} actions" if before == kind else "an add and a remove"
            return f"{what} of the file {describe_file(path, dv_id)}"
        seen[(path, dv_id)] = kind
        if kind == "add":
            if path in live:
                return (f"two live add actions for the file {path!r} (deletion vectors "
                        f"{live[path] or 'none'} and {dv_id or 'none'})")
            live[path] = dv_id
    return None


def commit_problem(files: pa.Table | Iterable[pa.Table], version: int, actions: Iterable[Mapping[str, Any]],
                   root: str) -> str | None:
    """Why ``actions`` are not a valid next commit on a table whose live files at ``version`` are
    ``files`` (one table, or the pieces of a scan), or None (see the module docstring for the rules)."""
    adds: dict[str, str] = {}
    removes: dict[str, str] = {}
    for kind, body in _file_actions(actions):
        path = canonical_path(body["path"], root)
        dv_id = dv_unique_id(body.get("deletionVector"))
        target = adds if kind == "add" else removes
        if path in target:
            return f"the commit has two {kind} actions for the file {path!r}"
        target[path] = dv_id
    if not adds and not removes:
        return None
    touched = set(adds) | set(removes)
    live: dict[str, str] = {}
    for piece in [files] if isinstance(files, pa.Table) else files:
        live.update(live_dv_ids(piece, touched, root))
    for path, dv_id in removes.items():
        if live.get(path) != dv_id:
            return f"the commit removes the file {describe_file(path, dv_id)}, which is not live at version {version}"
    for path, dv_id in adds.items():
        current = live.get(path)
        if current is not None and current != dv_id and removes.get(path) != current:
            return (f"the commit adds the file {describe_file(path, dv_id)} while {describe_file(path, current)} "
                    f"is live at version {version} and not removed")
    return None


@dataclass
class Replay:
    """Reconciled state of a run of commits (or compaction files), built one log file at a time.

    File actions are keyed by (canonical path, deletion vector id); a file's newest action wins.
    The actions of one commit carry no order (protocol, "Add File and Remove File"), so a
    commit is applied as a set: its removes, then its adds, so that a logical file both removed
    and re-added in one commit stays live. A commit with two adds (or two removes) of one path
    under different deletion vectors is not a valid version and is refused.
    """

    root: str = ""
    protocol: dict | None = None
    metadata: dict | None = None
    txns: dict[str, dict] = field(default_factory=dict)
    domains: dict[str, dict] = field(default_factory=dict)  # latest per domain, tombstones included
    files: dict[tuple[str, str], tuple[str, dict]] = field(default_factory=dict)  # key -> (kind, action)

    def apply_commit(self, actions: Iterable[Mapping[str, Any]], what: str = "a commit", *,
                     reconciled: bool = False) -> None:
        """Apply one commit's actions; ``what`` names the file in errors. With ``reconciled`` the
        actions are a reconciled state (a log compaction file, checked by :func:`actions_problem`),
        which may hold several removes of one path."""
        adds: dict[tuple[str, str], dict] = {}
        removes: dict[tuple[str, str], dict] = {}
        add_dvs: dict[str, str] = {}
        remove_dvs: dict[str, str] = {}
        for action in actions:
            if action.get("add") is not None:
                body, target, dvs, kind = action["add"], adds, add_dvs, "add"
            elif action.get("remove") is not None:
                body, target, dvs, kind = action["remove"], removes, remove_dvs, "remove"
            else:
                self._apply_other(action)
                continue
            try:
                path = canonical_path(body["path"], self.root)
            except (KeyError, TypeError, AttributeError):
                raise CorruptLogError(f"corrupt log file {what}: a {kind} action without a path") from None
            dv_id = dv_unique_id(body.get("deletionVector"))
            if not reconciled and dvs.get(path, dv_id) != dv_id:
                raise CorruptLogError(
                    f"corrupt log file {what}: two {kind} actions for the file {path!r} with different "
                    "deletion vectors in one version")
            dvs[path] = dv_id
            target[(path, dv_id)] = body
        for key, body in removes.items():
            self.files[key] = ("remove", body)
        for key, body in adds.items():
            self.files[key] = ("add", body)

    def _apply_other(self, action: Mapping[str, Any]) -> None:
        if action.get("metaData") is not None:
            self.metadata = action["metaData"]
        elif action.get("protocol") is not None:
            self.protocol = action["protocol"]
        elif action.get("txn") is not None:
            self.txns[action["txn"]["appId"]] = action["txn"]
        elif action.get("domainMetadata") is not None:
            self.domains[action["domainMetadata"]["domain"]] = action["domainMetadata"]

    def file_kinds(self) -> dict[tuple[str, str], str]:
        """``{(path, dv id): "add" | "remove"}`` of every file the replay touched."""
        return {key: kind for key, (kind, _) in self.files.items()}


MAX_SLICES = 10_000


def drop_keys(table: pa.Table, keys: set[tuple[str, str]], spellings: set[str], root: str) -> pa.Table:
    """Rows of an add/remove table whose (canonical path, dv id) is not in ``keys``.

    ``spellings`` holds the paths as the replayed actions wrote them. A row can match only if
    its path is one of those or one of the canonical keys, or is not canonical itself (see
    :func:`maybe_noncanonical`); only such rows are canonicalised in Python.
    """
    if not keys or table.num_rows == 0:
        return table
    key_paths = {p for p, _ in keys}
    key_names = {p.rpartition("/")[2] for p in key_paths}
    value_set = pa.array(sorted(spellings | key_paths), pa.string())
    drop: list[int] = []
    base = 0
    for batch in table.to_batches():
        path_col = batch.column(batch.schema.get_field_index("path"))
        candidate = pc.is_in(path_col, value_set=value_set).to_numpy(zero_copy_only=False)
        candidate = candidate | maybe_noncanonical(path_col)
        idx = np.flatnonzero(candidate)
        if len(idx):
            hit_paths = path_col.take(pa.array(idx, pa.int64())).to_pylist()
            canonical = [(int(i), canonical_path(p, root)) for i, p in zip(idx, hit_paths)
                         if p is not None and file_name(p) in key_names]
            matched = [(i, c) for i, c in canonical if c in key_paths]
            if matched:
                rows = pa.array([i for i, _ in matched], pa.int64())
                dvs = batch.column(batch.schema.get_field_index("deletionVector")).take(rows).to_pylist()
                drop.extend(base + i for (i, c), dv in zip(matched, dvs) if (c, dv_unique_id(dv)) in keys)
        base += batch.num_rows
    if not drop:
        return table
    return without_rows(table, drop)


def without_rows(table: pa.Table, rows: list[int]) -> pa.Table:
    """``table`` without the rows at ``rows`` (ascending): zero-copy slices around a few rows,
    a filter (which copies) around many."""
    if len(rows) > MAX_SLICES:
        keep = np.ones(table.num_rows, dtype=bool)
        keep[rows] = False
        return table.filter(pa.array(keep))
    pieces, start = [], 0
    for row in rows:
        if row > start:
            pieces.append(table.slice(start, row - start))
        start = row + 1
    if start < table.num_rows:
        pieces.append(table.slice(start))
    return pa.concat_tables(pieces) if pieces else table.schema.empty_table()
