"""Row tracking (PROTOCOL.md "Row Tracking"): what a rewrite owes every row's Row ID and Row
Commit Version, decided from the log alone.

A table is in one of four states, and a rewrite (OPTIMIZE: rows copied, none updated) does this
in each:

- **absent** (no ``rowTracking`` writer feature): nothing.
- **supported** (the feature, ``delta.enableRowTracking`` not true): new ``add`` actions get
  fresh ``baseRowId`` above the high-water mark and ``defaultRowCommitVersion`` = the commit's
  version, and the ``delta.rowTracking`` domain's ``rowIdHighWaterMark`` is advanced in the
  same commit. Stable ids cannot be preserved yet (some files may lack ``baseRowId``), so no
  materialized column is written.
- **enabled** (``delta.enableRowTracking=true``): as supported, and every copied row keeps its
  stable Row ID and Row Commit Version in the materialized columns the table configuration
  names: the value already materialized in its file, else ``baseRowId`` + the row's physical
  position (counted before deletion vectors drop rows) and the file's
  ``defaultRowCommitVersion``. commitInfo carries the tag ``delta.rowTracking.preserved=true``.
- **suspended** (``delta.rowTrackingSuspended=true``): writers assign nothing; materialized
  values already in files are carried over unchanged (no information is dropped).

``remove`` actions always carry their file's ``baseRowId`` and ``defaultRowCommitVersion``.
Fresh ids are assigned at commit time, per attempt, above the newest high-water mark, so a
concurrent writer that advanced it never makes two rows share an id (:func:`assign_fresh_ids`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from airflow_delta_maint.delta.errors import CorruptLogError, UnsupportedFeatureError
from airflow_delta_maint.delta.protocol.actions import Metadata, Protocol
from airflow_delta_maint.delta.protocol.features import table_features

__all__ = [
    "DOMAIN", "PRESERVED_TAG", "RowTracking", "assign_fresh_ids", "high_water_mark", "row_tracking",
]

DOMAIN = "delta.rowTracking"
PRESERVED_TAG = "delta.rowTracking.preserved"
ENABLE_KEY = "delta.enableRowTracking"
SUSPENDED_KEY = "delta.rowTrackingSuspended"
ROW_ID_COLUMN_KEY = "delta.rowTracking.materializedRowIdColumnName"
COMMIT_VERSION_COLUMN_KEY = "delta.rowTracking.materializedRowCommitVersionColumnName"


def _true(conf: Mapping[str, str], key: str) -> bool:
    return str(conf.get(key, "false")).strip().lower() == "true"


@dataclass(frozen=True)
class RowTracking:
    """A table's row-tracking state and what a rewrite of it must do.

    Attributes:
        supported: the ``rowTracking`` writer feature is present.
        enabled: and ``delta.enableRowTracking`` is true.
        suspended: ``delta.rowTrackingSuspended`` is true (nothing is assigned).
        row_id_column: physical name of the materialized Row ID column (None when unnamed).
        commit_version_column: physical name of the materialized Row Commit Version column.
        high_water_mark: the ``rowIdHighWaterMark`` at the read version (-1 when none).
    """

    supported: bool = False
    enabled: bool = False
    suspended: bool = False
    row_id_column: str | None = None
    commit_version_column: str | None = None
    high_water_mark: int = -1

    @property
    def assigns_fresh_ids(self) -> bool:
        """New adds get ``baseRowId`` / ``defaultRowCommitVersion`` and the mark advances."""
        return self.supported and not self.suspended

    @property
    def materializes(self) -> bool:
        """Rewritten files compute and write every row's stable Row ID and Commit Version."""
        return self.enabled and not self.suspended

    @property
    def hidden_columns(self) -> tuple[str, ...]:
        """The materialized columns a rewrite writes (computed, or carried over when suspended)."""
        if not self.supported:
            return ()
        return tuple(c for c in (self.row_id_column, self.commit_version_column) if c)

    def describe(self) -> str:
        if not self.supported:
            return "absent"
        if self.suspended:
            return "suspended"
        return "enabled" if self.enabled else "supported"


def high_water_mark(domains: Mapping[str, Mapping[str, Any]]) -> int:
    """The ``rowIdHighWaterMark`` of the ``delta.rowTracking`` domain (-1 when absent)."""
    domain = domains.get(DOMAIN)
    if not domain or domain.get("removed"):
        return -1
    try:
        value = json.loads(domain.get("configuration") or "{}").get("rowIdHighWaterMark")
        return int(value) if value is not None else -1
    except (ValueError, TypeError, AttributeError):
        raise CorruptLogError(f"unreadable {DOMAIN} domain configuration: {domain.get('configuration')!r}") from None


def row_tracking(protocol: Protocol, metadata: Metadata, domains: Mapping[str, Mapping[str, Any]]) -> RowTracking:
    """The row-tracking state of a table version.

    Raises:
        UnsupportedFeatureError: the table enables row tracking without naming the materialized
            columns, or enables it together with suspension (the protocol forbids both).
    """
    _, writer = table_features(protocol)
    if "rowTracking" not in writer:
        return RowTracking()
    conf = metadata.configuration
    enabled, suspended = _true(conf, ENABLE_KEY), _true(conf, SUSPENDED_KEY)
    state = RowTracking(True, enabled, suspended, conf.get(ROW_ID_COLUMN_KEY) or None,
                        conf.get(COMMIT_VERSION_COLUMN_KEY) or None, high_water_mark(domains))
    if enabled and suspended:
        raise UnsupportedFeatureError(
            f"the table sets both {ENABLE_KEY} and {SUSPENDED_KEY} to true, which the protocol forbids; "
            "unset one of them before rewriting files")
    if enabled and not (state.row_id_column and state.commit_version_column):
        raise UnsupportedFeatureError(
            f"row tracking is enabled but {ROW_ID_COLUMN_KEY} or {COMMIT_VERSION_COLUMN_KEY} is not set, "
            "so stable row ids cannot be preserved")
    return state


def _num_records(add: Mapping[str, Any]) -> int:
    stats = add.get("stats")
    try:
        n = json.loads(stats).get("numRecords") if stats else None
    except ValueError:
        n = None
    if n is None:
        raise CorruptLogError(f"a new file has no numRecords statistic, so fresh row ids cannot be assigned: "
                              f"{add.get('path')}")
    return int(n)


def assign_fresh_ids(adds: Iterable[dict], high_water: int, version: int) -> tuple[list[dict], int]:
    """New add actions (copies) with consecutive fresh ``baseRowId`` above ``high_water`` and
    ``defaultRowCommitVersion`` = ``version``; returns them and the new high-water mark.

    Each file takes ``numRecords`` ids (its physical rows: new files carry no deletion vector).
    """
    out: list[dict] = []
    next_id = high_water + 1
    for add in adds:
        n = _num_records(add)
        out.append({**add, "baseRowId": next_id, "defaultRowCommitVersion": version})
        next_id += n
    return out, next_id - 1


def domain_action(high_water: int) -> dict:
    """The ``domainMetadata`` action recording ``high_water`` as the table's row-id high-water mark."""
    return {"domainMetadata": {"domain": DOMAIN, "configuration": json.dumps({"rowIdHighWaterMark": high_water}),
                               "removed": False}}
