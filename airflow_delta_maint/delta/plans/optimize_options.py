"""OPTIMIZE's options as one typed, checked object.

The command line, the operators' check on the worker, the fleet, dry runs and the job all build an
:class:`OptimizeOptions` once (:meth:`OptimizeOptions.from_mapping`, from the parsed command line) and
hand it down; its checks run there, before anything is read. What the options ask of a table (the
plan, the auto policy's choice, the reason to skip) is :mod:`.optimize_decision`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.option_values import as_bool
from airflow_delta_maint.delta.plans.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MAX_PARTITIONS,
                                                             DEFAULT_MIN_NUM_FILES)
from airflow_delta_maint.delta.plans.optimize import DEFAULT_DV_RATIO
from airflow_delta_maint.delta.protocol.features import DELTA_SPARK, Operation
from airflow_delta_maint.delta.storage.leases import DEFAULT_LEASE_SECONDS

DEFAULT_BATCH_BYTES = 50 << 30
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")
# delta-spark's (Spark's) default: the fastest to write and read; zstd writes files about a
# quarter smaller for some 10-15% more time (docs/benchmarks.md).
DEFAULT_COMPRESSION = "snappy"
#: Arrow bytes the rewrite gathers into one row group of the files it writes
DEFAULT_ROW_GROUP_BYTES = 128 << 20
#: how a bin-packing rewrite treats its inputs' row groups: ``auto`` copies the row groups of inputs
#: whose row groups are all large and re-encodes the rest, ``always`` copies every input it can,
#: ``never`` re-encodes every row
COPY_ROW_GROUPS = ("auto", "always", "never")
DEFAULT_COPY_ROW_GROUPS = "auto"
#: ``auto`` copies an input whose row groups all hold at least this share of ``row_group_bytes`` in
#: compressed bytes on disk: about what a full row group of Arrow data compresses to (docs/optimize.md)
COPY_THRESHOLD_SHARE = 0.25
#: the ``policy`` values: ``all`` plans every partition the options select, ``auto`` applies the
#: auto-compaction policy
POLICIES = ("all", "auto")


def copy_threshold(row_group_bytes: int) -> int:
    """The compressed size from which ``copy_row_groups="auto"`` copies a row group as it is."""
    return max(1, int(row_group_bytes * COPY_THRESHOLD_SHARE))


def zorder_columns(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """The Z-order columns of ``zorder_by`` (comma-separated text, or a list)."""
    if not text:
        return ()
    if isinstance(text, str):
        return tuple(c.strip() for c in text.split(",") if c.strip())
    return tuple(str(c) for c in text)


@dataclasses.dataclass(frozen=True)
class OptimizeOptions:
    """Every option of an OPTIMIZE run, typed; build it with :meth:`from_mapping`, which checks it."""

    #: the partition predicate
    where: str | None = None
    zorder_by: tuple[str, ...] = ()
    min_file_size: int | None = None
    target_file_size: int | None = None
    dv_ratio: float = DEFAULT_DV_RATIO
    full: bool = False
    min_cube_size: int | None = None
    target_cube_size: int | None = None
    rewrite_type_widened: bool = False
    target_files: int | None = None
    #: ``all`` or ``auto`` (the auto-compaction policy; the four options below are its settings)
    policy: str = "all"
    all_partitions: bool = False
    min_num_files: int = DEFAULT_MIN_NUM_FILES
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO
    max_partitions: int = DEFAULT_MAX_PARTITIONS
    min_file_age: float | None = None
    skip_recent_partitions: int | None = None
    purge: bool = False
    #: how the run writes and commits
    max_concurrent_bins: int | None = None
    batch_bytes: int = DEFAULT_BATCH_BYTES
    bins_per_commit: int | None = None
    wait_for_writer: float | None = None
    compression: str = DEFAULT_COMPRESSION
    #: Arrow bytes per row group of the files written (``row_group_bytes``)
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    #: bin-packing: copy inputs' row groups byte for byte where exact (``auto``, ``always``) or not (``never``)
    copy_row_groups: str = DEFAULT_COPY_ROW_GROUPS
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    dry_run: bool = False
    #: who does the data work: ``native`` or ``delta-spark`` (checked by the application's engines)
    engine: str = "native"

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> OptimizeOptions:
        """The options of ``params`` (the parsed command line as a dict; other keys are ignored;
        None means the default), checked: a bad value raises ``InvalidArgumentError``."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = params.get(f.name)
            if value is None or (value == "" and f.name != "where"):
                continue
            values[f.name] = _convert(f.name, value)
        options = cls(**values)
        options.check()
        return options

    def check(self) -> None:
        """Refuse bad options before the table is read (on a large table, before minutes of planning)."""
        if self.batch_bytes <= 0:
            raise InvalidArgumentError(f"batch_bytes must be positive, got {self.batch_bytes}")
        if self.max_concurrent_bins is not None and self.max_concurrent_bins <= 0:
            raise InvalidArgumentError(f"max_concurrent_bins must be positive, got {self.max_concurrent_bins}")
        if self.lease_seconds < 0:
            raise InvalidArgumentError(f"lease_seconds must be 0 (no reservation) or positive, got {self.lease_seconds}")
        if self.compression not in COMPRESSIONS:
            raise InvalidArgumentError(f"unknown compression {self.compression!r}; one of {', '.join(COMPRESSIONS)}")
        if self.copy_row_groups not in COPY_ROW_GROUPS:
            raise InvalidArgumentError(f"copy_row_groups must be one of {', '.join(COPY_ROW_GROUPS)}, "
                                       f"got {self.copy_row_groups!r}")
        if self.row_group_bytes <= 0:
            raise InvalidArgumentError(f"row_group_bytes must be positive, got {self.row_group_bytes}")
        if (self.wait_for_writer or 0) < 0:
            raise InvalidArgumentError(f"wait_for_writer must not be negative, got {self.wait_for_writer}")
        if self.bins_per_commit is not None and self.bins_per_commit < 0:
            raise InvalidArgumentError(f"bins_per_commit must be 0 (one commit per batch) or positive, "
                                       f"got {self.bins_per_commit}")
        if self.policy not in POLICIES:
            raise InvalidArgumentError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.purge:
            given = [name for name, on in (("zorder_by", self.zorder_by), ("policy='auto'", self.auto),
                                           ("target_files", self.target_files),
                                           ("rewrite_type_widened", self.rewrite_type_widened)) if on]
            if given:
                raise InvalidArgumentError(f"purge rewrites the files with deletion vectors only; it takes no "
                                           f"{', '.join(given)}")
        if self.auto and (self.where or self.zorder_by or self.rewrite_type_widened):
            raise InvalidArgumentError("policy='auto' chooses partitions itself: it takes no where, zorder_by or "
                                       "rewrite_type_widened")

    @property
    def auto(self) -> bool:
        """``policy='auto'``: the auto-compaction policy chooses the partitions."""
        return self.policy == "auto"

    def purged(self) -> OptimizeOptions:
        """``purge``: only files with deletion vectors are rewritten (no file counts as small, any
        deleted row is enough), as delta-spark's REORG TABLE ... APPLY (PURGE) does."""
        if not self.purge:
            return self
        return dataclasses.replace(self, min_file_size=1, dv_ratio=0.0)

    @property
    def feature_gate(self) -> Operation:
        """The feature gate's job for this run: OPTIMIZE written natively, or by delta-spark, which
        honours the table's writer features itself (this core only plans, from the log)."""
        return Operation.OPTIMIZE_BY_DELTA_SPARK if self.engine == DELTA_SPARK else Operation.OPTIMIZE



_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "where": str, "zorder_by": zorder_columns, "compression": lambda v: str(v).strip().lower(),
    "policy": lambda v: str(v).strip().lower(),
    "engine": lambda v: str(v).strip().lower(), "copy_row_groups": lambda v: str(v).strip().lower(),
    **{name: int for name in ("min_file_size", "target_file_size", "min_cube_size", "target_cube_size", "target_files",
                              "min_num_files", "max_partitions", "skip_recent_partitions", "max_concurrent_bins",
                              "batch_bytes", "bins_per_commit", "lease_seconds", "row_group_bytes")},
    **{name: float for name in ("dv_ratio", "max_deleted_rows_ratio", "min_file_age", "wait_for_writer")},
    **{name: as_bool for name in ("full", "rewrite_type_widened", "all_partitions", "purge", "dry_run")},
}


def _convert(name: str, value: Any) -> Any:
    convert = _CONVERTERS[name]
    try:
        return convert(value)
    except (TypeError, ValueError):
        kind = {int: "a whole number", float: "a number"}.get(convert, "text")  # type: ignore[call-overload]
        raise InvalidArgumentError(f"OPTIMIZE's {name} must be {kind}, got {value!r}") from None
