"""VACUUM's options as one typed, checked object, built once from the parsed command line by every
caller (the command line, the operators' check on the worker, the fleet, the job) and handed down."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.option_values import as_bool
from airflow_delta_maint.delta.protocol.features import DELTA_SPARK

MODES = ("full", "lite")


def parse_versions(text: str | Any | None) -> tuple[int, ...]:
    """``"12,40"`` (or a list) -> ``(12, 40)``, sorted and unique; empty or None -> ``()``.

    Raises:
        InvalidArgumentError: a part is not a whole number >= 0.
    """
    if text is None or text == "":
        return ()
    parts = str(text).split(",") if isinstance(text, str) else [str(v) for v in text]
    out = set()
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise InvalidArgumentError(f"versions must be whole numbers >= 0 separated by commas, got {text!r}")
        out.add(int(part))
    return tuple(sorted(out))


@dataclasses.dataclass(frozen=True)
class VacuumOptions:
    """Every option of a VACUUM run, typed; build it with :meth:`from_mapping`, which checks it."""

    #: keep what versions of the last H hours need (None: the table's deletedFileRetentionDuration)
    retention_hours: float | None = None
    #: ``full`` lists every file under the table; ``lite`` reads the files to delete from the log
    mode: str = "full"
    dry_run: bool = False
    ignore_retention_check: bool = False
    #: versions whose files are kept too, so that time travel to them keeps working
    keep_versions: tuple[int, ...] = ()
    #: an inventory of the files under the table, read instead of listing (full mode)
    inventory: str | None = None
    #: ``native`` or ``delta-spark`` (checked by the application's engines)
    engine: str = "native"

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> VacuumOptions:
        """The options of ``params`` (the parsed command line as a dict; other keys are ignored; None
        means the default), checked: a bad value raises ``InvalidArgumentError``."""
        retention = params.get("retention_hours")
        try:
            retention_hours = float(retention) if retention is not None and retention != "" else None
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"VACUUM's retention_hours must be a number, got {retention!r}") from None
        options = cls(retention_hours=retention_hours, mode=str(params.get("mode") or "full").strip().lower(),
                      dry_run=as_bool(params.get("dry_run")),
                      ignore_retention_check=as_bool(params.get("ignore_retention_check")),
                      keep_versions=parse_versions(params.get("keep_versions")),
                      inventory=str(params["inventory"]) if params.get("inventory") else None,
                      engine=str(params.get("engine") or "native").strip().lower())
        options.check()
        return options

    def check(self) -> None:
        """Refuse options that cannot go together, before the table is read."""
        if self.mode not in MODES:
            raise InvalidArgumentError(f"VACUUM mode must be 'full' or 'lite', got {self.mode!r}")
        if self.inventory and self.mode != "full":
            raise InvalidArgumentError("inventory replaces the listing of a full VACUUM; it cannot be used with "
                                       "mode='lite'")
        if self.engine == DELTA_SPARK and self.keep_versions:
            raise InvalidArgumentError("VACUUM with the delta-spark engine does not take keep_versions (native "
                                       "engine only)")

