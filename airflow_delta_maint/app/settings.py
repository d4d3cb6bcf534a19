"""The application's settings from the environment, read once at the edges.

The Delta core (``airflow_delta_maint/delta/``) reads no environment variable of ours: the entry points
(the command line, a fleet, a job run in the Airflow worker's process) and the Airflow hook read
:class:`Settings` from the environment with :meth:`Settings.from_environ`, and the values reach the core
as plain arguments. A job gets them on its ``JobContext`` (``ctx.settings``);
:func:`~airflow_delta_maint.app.jobs.execute_job` also makes them the running job's settings
(:func:`current`), for helpers that are handed a ``Storage`` rather than the context.

The object stores' credential variables (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``) are not settings of
ours: they are the store's own credential chain, read by obstore (and by
:mod:`airflow_delta_maint.delta.storage.options`). docs/configuration.md lists every setting.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.state_size import STREAM_MIN_FILES
from airflow_delta_maint.delta.plans.optimize_rounds import ROUND_FILES

__all__ = ["CACHE_DIR_ENV", "OPTIMIZE_ROUND_FILES_ENV", "STREAM_MIN_FILES_ENV", "Settings", "current",
           "default_cache_dir", "running"]

STREAM_MIN_FILES_ENV = "DELTA_MAINT_STREAM_MIN_FILES"
OPTIMIZE_ROUND_FILES_ENV = "DELTA_MAINT_OPTIMIZE_ROUND_FILES"
CACHE_DIR_ENV = "DELTA_MAINT_CACHE_DIR"


def default_cache_dir() -> Path:
    """The cache folder when ``DELTA_MAINT_CACHE_DIR`` is unset: a folder of this user's in the temp dir."""
    return Path(tempfile.gettempdir()) / f"airflow-delta-maint-{os.getuid() if hasattr(os, 'getuid') else 0}"


def _whole_number(variable: str, text: str) -> int:
    """``text`` as a whole number of files, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgumentError(f"{variable} must be a whole number of files (0 or more), got {text!r}")
    return value


def _positive(variable: str, text: str) -> int:
    """``text`` as a positive number of files."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidArgumentError(f"{variable} must be a positive number of files, got {text!r}")
    return value


def _folder(variable: str, text: str) -> Path:
    return Path(text)


@dataclass(frozen=True)
class Settings:
    """The application's settings; each field's metadata names its environment variable.

    Construct it with :meth:`from_environ` at an entry point; ``Settings()`` holds the defaults.
    """

    #: from this many checkpointed files on, jobs stream the table's state instead of loading it whole
    #: (0: always stream); the core's :func:`~airflow_delta_maint.delta.log.state_size.use_streamed_state`
    stream_min_files: int = field(default=STREAM_MIN_FILES, metadata={"env": STREAM_MIN_FILES_ENV})
    #: at most this many candidate files per round of OPTIMIZE on a streamed (large) table
    #: (:mod:`airflow_delta_maint.delta.plans.optimize_rounds`)
    optimize_round_files: int = field(default=ROUND_FILES, metadata={"env": OPTIMIZE_ROUND_FILES_ENV})
    #: where the package bundle, the packed Python environment, Ivy's settings and the command line's
    #: quiet log4j configuration are kept
    cache_dir: Path = field(default_factory=default_cache_dir, metadata={"env": CACHE_DIR_ENV})

    def __post_init__(self) -> None:
        if not isinstance(self.stream_min_files, int) or self.stream_min_files < 0:
            raise InvalidArgumentError(f"stream_min_files must be a whole number of files (0 or more), "
                                       f"got {self.stream_min_files!r}")
        if not isinstance(self.optimize_round_files, int) or self.optimize_round_files < 1:
            raise InvalidArgumentError(f"optimize_round_files must be a positive number of files, "
                                       f"got {self.optimize_round_files!r}")
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))

    @classmethod
    def variables(cls) -> dict[str, str]:
        """``{field name: environment variable}``."""
        return {f.name: f.metadata["env"] for f in fields(cls)}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """The settings in ``environ`` (``os.environ`` at an entry point); unset or blank variables
        keep their defaults, surrounding blanks are ignored.

        Raises:
            InvalidArgumentError: one line naming the variable and the value it cannot take.
        """
        values: dict[str, Any] = {}
        for name, variable in cls.variables().items():
            text = environ.get(variable)
            if text is None or not text.strip():
                continue
            values[name] = _PARSERS[name](variable, text.strip())
        return cls(**values)


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "stream_min_files": _whole_number,
    "optimize_round_files": _positive,
    "cache_dir": _folder,
}

#: the settings of the job running in this thread (or task), see :func:`running`
_CURRENT: contextvars.ContextVar[Settings | None] = contextvars.ContextVar("delta_maint_settings", default=None)


def current() -> Settings:
    """The settings of the running job (:func:`running`); the defaults outside a job."""
    return _CURRENT.get() or Settings()


@contextlib.contextmanager
def running(settings: Settings) -> Iterator[Settings]:
    """Make ``settings`` the running job's settings for the block."""
    token = _CURRENT.set(settings)
    try:
        yield settings
    finally:
        _CURRENT.reset(token)
