"""compact-log's options as one typed, checked object, built once from the parsed command line by
every caller (the command line, the operators' check on the worker, the fleet, the job)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.option_values import as_bool

#: a compaction window's commit files may total at most this many bytes (larger ones are skipped)
DEFAULT_MAX_WINDOW_BYTES = 1 << 30


def window_length(value: Any) -> int:
    """``interval`` as a window length: an integer of at least 2.

    Raises:
        InvalidArgumentError: it is not.
    """
    try:
        interval = int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"invalid interval {value!r}: expected an integer >= 2") from None
    if interval < 2:
        raise InvalidArgumentError(f"invalid interval {value!r}: a compaction window must span at least "
                                   "2 commits")
    return interval


def check_sizes(max_window_bytes: int | None, checkpoint_interval: int | None) -> None:
    """Refuse a negative window size or a checkpoint interval below 1."""
    if max_window_bytes is None or max_window_bytes < 0:
        raise InvalidArgumentError(f"invalid max_window_bytes {max_window_bytes!r}: expected a size >= 0")
    if checkpoint_interval is not None and checkpoint_interval < 1:
        raise InvalidArgumentError(f"invalid checkpoint_interval {checkpoint_interval!r}: expected >= 1")


@dataclasses.dataclass(frozen=True)
class LogCompactionOptions:
    """Every option of a compact-log run, typed; build it with :meth:`from_mapping`, which checks it."""

    #: commits per compaction file (None: the table's delta.logCompactionInterval, else 5)
    interval: int | None = None
    max_window_bytes: int = DEFAULT_MAX_WINDOW_BYTES
    #: first write a checkpoint when this many commits follow the last one
    checkpoint_interval: int | None = None
    cleanup_expired_log: bool = False
    #: who writes the checkpoint and cleans up the expired log: ``native`` or ``delta-spark`` (the compaction
    #: files are always written natively)
    engine: str = "native"

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> LogCompactionOptions:
        """The options of ``params`` (the parsed command line as a dict; other keys are ignored; None
        means the default), checked: a bad value raises ``InvalidArgumentError``."""
        interval = params.get("interval")
        max_bytes = params.get("max_window_bytes")
        every = params.get("checkpoint_interval")
        try:
            options = cls(interval=window_length(interval) if interval is not None else None,
                          max_window_bytes=int(max_bytes) if max_bytes is not None else DEFAULT_MAX_WINDOW_BYTES,
                          checkpoint_interval=int(every) if every is not None else None,
                          cleanup_expired_log=as_bool(params.get("cleanup_expired_log")),
                          engine=str(params.get("engine") or "native"))
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"compact-log's sizes and intervals must be whole numbers, got "
                                       f"max_window_bytes={max_bytes!r}, checkpoint_interval={every!r}") from None
        check_sizes(options.max_window_bytes, options.checkpoint_interval)
        return options
