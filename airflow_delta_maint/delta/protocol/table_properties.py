"""A table's properties (``metaData.configuration``), parsed once into typed values.

Every job reads the properties it needs from :class:`TableProperties` (``metadata.properties``),
never from the raw map: one parser and one default per property, and one error text for a bad
value: ``the table property <key>=<value> is invalid: <why>`` (:class:`InvalidTablePropertyError`).
Each value is parsed when first asked for, so a bad value stops only the jobs that need it.

Intervals are Delta's interval strings (``interval 7 days``, ``168 hours``); sizes are byte strings
as delta-spark reads them (``134217728``, ``128mb``, ``1g``: binary units); booleans are ``true`` or
``false`` in any case.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import cached_property
from typing import Literal, Mapping

from airflow_delta_maint.delta.errors import InvalidArgumentError

__all__ = [
    "APPEND_ONLY", "CHECKPOINT_INTERVAL", "CHECKPOINT_POLICY", "COMPRESSION_CODEC", "DEFAULT_CHECKPOINT_INTERVAL",
    "DEFAULT_DELETED_FILE_RETENTION", "DEFAULT_DELETED_FILE_RETENTION_MS", "DEFAULT_LOG_COMPACTION_INTERVAL",
    "DEFAULT_LOG_RETENTION", "DEFAULT_LOG_RETENTION_MS", "DELETED_FILE_RETENTION", "ENABLE_EXPIRED_LOG_CLEANUP",
    "ENABLE_IN_COMMIT_TIMESTAMPS", "ICT_ENABLEMENT_TIMESTAMP", "ICT_ENABLEMENT_VERSION", "InvalidTablePropertyError",
    "LOG_COMPACTION_INTERVAL", "LOG_RETENTION", "NUM_INDEXED_COLS", "STATS_COLUMNS", "TARGET_FILE_SIZE",
    "TableProperties", "WRITE_STATS_AS_JSON", "WRITE_STATS_AS_STRUCT", "parse_byte_size", "parse_interval_ms",
]

LOG_RETENTION = "delta.logRetentionDuration"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
CHECKPOINT_POLICY = "delta.checkpointPolicy"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
WRITE_STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
WRITE_STATS_AS_JSON = "delta.checkpoint.writeStatsAsJson"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
TARGET_FILE_SIZE = "delta.targetFileSize"
APPEND_ONLY = "delta.appendOnly"
COMPRESSION_CODEC = "delta.parquet.compression.codec"
LOG_COMPACTION_INTERVAL = "delta.logCompactionInterval"
ENABLE_EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"

DEFAULT_LOG_RETENTION = "interval 30 days"
DEFAULT_LOG_RETENTION_MS = 30 * 86_400_000
DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
DEFAULT_DELETED_FILE_RETENTION_MS = 7 * 86_400_000
DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_LOG_COMPACTION_INTERVAL = 5

#: parquet codecs by the names Delta tables use, as pyarrow names them
_CODECS = {"uncompressed": "none", "none": "none", "snappy": "snappy", "gzip": "gzip", "lz4_raw": "lz4",
           "zstd": "zstd"}


class InvalidTablePropertyError(InvalidArgumentError):
    """A table property whose value cannot be read; the message names the key and the value."""

    def __init__(self, key: str, value: object, why: str):
        super().__init__(f"the table property {key}={value!r} is invalid: {why}")
        self.key, self.value = key, value


# -- intervals and sizes ---------------------------------------------------------------------------
_UNIT_MS: dict[str, Decimal] = {
    "week": Decimal(7 * 24 * 3600 * 1000), "day": Decimal(24 * 3600 * 1000), "hour": Decimal(3600 * 1000),
    "minute": Decimal(60 * 1000), "second": Decimal(1000), "millisecond": Decimal(1),
    "microsecond": Decimal("0.001"), "nanosecond": Decimal("0.000001"),
}
_UNIT_ALIASES = {"min": "minute", "mins": "minute", "sec": "second", "secs": "second",
                 "ms": "millisecond", "msec": "millisecond", "us": "microsecond", "usec": "microsecond",
                 "ns": "nanosecond"}
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
_BYTES = re.compile(r"^(\d+)\s*([kmgtp]?)b?$")


def parse_interval_ms(s: str) -> int:
    """Parse a Delta interval string into milliseconds.

    Accepts what Delta table properties use: ``"interval 1 week"``, ``"interval 7 days"``,
    ``"168 hours"``, ``"interval 1 day 12 hours"``; units week, day, hour, minute, second,
    millisecond, microsecond, nanosecond (singular or plural, any case). Months and years
    have no fixed length and are refused, as are negative intervals.

    Returns:
        The interval in whole milliseconds (fractions truncated).

    Raises:
        InvalidArgumentError: the string is not a valid non-negative interval.
    """
    if not isinstance(s, str):
        raise InvalidArgumentError(f"invalid interval {s!r}: expected a string like 'interval 7 days'")
    tokens = s.strip().lower().split()
    if tokens and tokens[0] == "interval":
        tokens = tokens[1:]
    if not tokens or len(tokens) % 2:
        raise InvalidArgumentError(f"invalid interval {s!r}: expected '<number> <unit>' pairs, "
                                   "like 'interval 7 days'")
    total = Decimal(0)
    for number, unit in zip(tokens[::2], tokens[1::2]):
        if not _NUMBER.match(number):
            raise InvalidArgumentError(f"invalid interval {s!r}: {number!r} is not a number")
        unit = _UNIT_ALIASES.get(unit, unit)
        base = unit[:-1] if unit.endswith("s") and unit[:-1] in _UNIT_MS else unit
        if base in ("month", "year", "months", "years"):
            raise InvalidArgumentError(f"invalid interval {s!r}: months and years are not allowed, "
                                       "use days or weeks")
        if base not in _UNIT_MS:
            raise InvalidArgumentError(f"invalid interval {s!r}: unknown unit {unit!r}")
        try:
            value = Decimal(number)
        except InvalidOperation:  # pragma: no cover - the regex already checked the shape
            raise InvalidArgumentError(f"invalid interval {s!r}: {number!r} is not a number") from None
        if value != value.to_integral_value() and base not in ("second", "millisecond"):
            raise InvalidArgumentError(f"invalid interval {s!r}: a fraction is only allowed in seconds")
        total += value * _UNIT_MS[base]
    if total < 0:
        raise InvalidArgumentError(f"invalid interval {s!r}: an interval must not be negative")
    return int(total)


def parse_byte_size(s: str) -> int:
    """Bytes from a byte string as delta-spark reads ``delta.targetFileSize``: a whole number,
    optionally followed by ``k``, ``m``, ``g``, ``t`` or ``p`` (binary units) and ``b``.

    Raises:
        ValueError: not such a string, or not positive.
    """
    match = _BYTES.match(str(s).strip().lower())
    if not match:
        raise ValueError("expected a size in bytes, like 134217728 or 128mb")
    value = int(match.group(1)) * 1024 ** " kmgtp".index(match.group(2) or " ")
    if value <= 0:
        raise ValueError("a size must be positive")
    return value


class TableProperties:
    """The typed view of one table's properties; each value parsed once, when first read.

    ``raw`` is the map itself, for what no job interprets (and for writing it back unchanged).
    """

    def __init__(self, configuration: Mapping[str, str]):
        self.raw: Mapping[str, str] = configuration

    def get(self, key: str, default: str | None = None) -> str | None:
        """The raw text of a property (None, or ``default``, when unset)."""
        return self.raw.get(key, default)

    # -- one rule per kind of value -------------------------------------------------------------
    def _interval_ms(self, key: str, default_ms: int) -> int:
        value = self.raw.get(key)
        if value is None:
            return default_ms
        try:
            return parse_interval_ms(value)
        except InvalidArgumentError as exc:
            raise InvalidTablePropertyError(key, value, str(exc)) from None

    def _bool(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise InvalidTablePropertyError(key, value, "expected true or false")
        return text == "true"

    def _int(self, key: str, default: int | None, minimum: int) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return default
        try:
            number = int(str(value).strip())
        except ValueError:
            raise InvalidTablePropertyError(key, value, "expected a whole number") from None
        if number < minimum:
            raise InvalidTablePropertyError(key, value, f"expected a whole number of at least {minimum}")
        return number

    # -- retention -------------------------------------------------------------------------------
    @cached_property
    def log_retention_ms(self) -> int:
        """How long commits are kept (``delta.logRetentionDuration``, 30 days)."""
        return self._interval_ms(LOG_RETENTION, DEFAULT_LOG_RETENTION_MS)

    @cached_property
    def deleted_file_retention_ms(self) -> int:
        """How long removed files are kept (``delta.deletedFileRetentionDuration``, 1 week)."""
        return self._interval_ms(DELETED_FILE_RETENTION, DEFAULT_DELETED_FILE_RETENTION_MS)

    @cached_property
    def expired_log_cleanup(self) -> bool:
        """Whether expired commits may be cleaned up (``delta.enableExpiredLogCleanup``, true)."""
        return self._bool(ENABLE_EXPIRED_LOG_CLEANUP, True)

    # -- in-commit timestamps ----------------------------------------------------------------------
    @cached_property
    def in_commit_timestamps(self) -> bool:
        """Whether commits carry in-commit timestamps (``delta.enableInCommitTimestamps``)."""
        return self._bool(ENABLE_IN_COMMIT_TIMESTAMPS, False)

    @cached_property
    def ict_enablement_version(self) -> int | None:
        """The first version with an in-commit timestamp: None when timestamps are off; the first
        commit when they are on from the table's creation (no enablement version recorded)."""
        if not self.in_commit_timestamps:
            return None
        return self._int(ICT_ENABLEMENT_VERSION, 0, 0)

    # -- checkpoints ---------------------------------------------------------------------------------
    @cached_property
    def checkpoint_policy(self) -> Literal["v2", "classic"]:
        """``delta.checkpointPolicy``: ``v2`` (the default) or ``classic``."""
        value = self.raw.get(CHECKPOINT_POLICY)
        if value is None or not str(value).strip():
            return "v2"
        text = str(value).strip().lower()
        if text not in ("v2", "classic"):
            raise InvalidTablePropertyError(CHECKPOINT_POLICY, value, "expected v2 or classic")
        return "classic" if text == "classic" else "v2"

    @cached_property
    def checkpoint_interval(self) -> int:
        """Commits between checkpoints (``delta.checkpointInterval``, 10)."""
        return self._int(CHECKPOINT_INTERVAL, DEFAULT_CHECKPOINT_INTERVAL, 1) or DEFAULT_CHECKPOINT_INTERVAL

    @cached_property
    def write_stats_as_struct(self) -> bool:
        """Whether checkpoints carry ``stats_parsed`` (``delta.checkpoint.writeStatsAsStruct``)."""
        return self._bool(WRITE_STATS_AS_STRUCT, False)

    @cached_property
    def write_stats_as_json(self) -> bool:
        """``delta.checkpoint.writeStatsAsJson`` (true); JSON statistics are kept either way."""
        return self._bool(WRITE_STATS_AS_JSON, True)

    @cached_property
    def compression_codec(self) -> str:
        """The parquet codec, as pyarrow names it (``delta.parquet.compression.codec``, zstd)."""
        value = self.raw.get(COMPRESSION_CODEC)
        if value is None or not str(value).strip():
            return "zstd"
        codec = _CODECS.get(str(value).strip().lower())
        if codec is None:
            raise InvalidTablePropertyError(COMPRESSION_CODEC, value, "expected one of " + ", ".join(sorted(_CODECS)))
        return codec

    # -- log compaction ----------------------------------------------------------------------------
    @cached_property
    def log_compaction_interval(self) -> int:
        """Commits per log compaction file (``delta.logCompactionInterval``, 5)."""
        return self._int(LOG_COMPACTION_INTERVAL, DEFAULT_LOG_COMPACTION_INTERVAL, 2) or DEFAULT_LOG_COMPACTION_INTERVAL

    # -- writing data --------------------------------------------------------------------------------
    @cached_property
    def target_file_size(self) -> int | None:
        """``delta.targetFileSize`` in bytes (None when unset)."""
        value = self.raw.get(TARGET_FILE_SIZE)
        if value is None or not str(value).strip():
            return None
        try:
            return parse_byte_size(value)
        except ValueError as exc:
            raise InvalidTablePropertyError(TARGET_FILE_SIZE, value, str(exc)) from None

    @cached_property
    def append_only(self) -> bool:
        """``delta.appendOnly``: no commit may remove data."""
        return self._bool(APPEND_ONLY, False)

    @cached_property
    def stats_columns(self) -> str | None:
        """``delta.dataSkippingStatsColumns`` as written (a column list), None when unset."""
        return self.raw.get(STATS_COLUMNS)

    @cached_property
    def num_indexed_cols(self) -> int:
        """``delta.dataSkippingNumIndexedCols`` (32; -1 means every column)."""
        value = self._int(NUM_INDEXED_COLS, 32, -1)
        return 32 if value is None else value
