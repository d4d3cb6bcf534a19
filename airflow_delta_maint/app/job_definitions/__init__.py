"""The jobs of the maintenance application: one definition each (:class:`~.definition.JobDefinition`), listed
here and nowhere else. Adding a job: its definition module in this folder, its line below, its runner under
``app/jobs/`` and, where it needs one, its plan in the core (CONTRIBUTING.md)."""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.delta.errors import InvalidArgumentError

from .checkpoint import CHECKPOINT
from .cleanup_log import CLEANUP_LOG
from .compact_log import COMPACT_LOG
from .compute_stats import COMPUTE_STATS
from .definition import JobDefinition
from .describe_table import DESCRIBE_TABLE
from .inspect import INSPECT
from .optimize import OPTIMIZE
from .vacuum import VACUUM

__all__ = ["JOBS", "JobDefinition", "definition", "fleet_defaults", "jobs_run_by"]

#: every job, by name, in the order ``--help`` lists them
JOBS: dict[str, JobDefinition] = {d.name: d for d in (
    INSPECT, VACUUM, OPTIMIZE, CHECKPOINT, COMPACT_LOG, CLEANUP_LOG, COMPUTE_STATS, DESCRIBE_TABLE,
)}


def definition(name: str) -> JobDefinition:
    """The job named ``name``; an unknown name raises ``InvalidArgumentError`` listing the jobs."""
    found = JOBS.get(str(name))
    if found is None:
        raise InvalidArgumentError(f"unknown job {name!r} (jobs: {', '.join(JOBS)})")
    return found


def jobs_run_by(engine: str) -> list[str]:
    """The jobs ``engine`` runs."""
    return [name for name, d in JOBS.items() if engine in d.engines]


def fleet_defaults() -> dict[str, dict[str, Any]]:
    """The jobs a fleet runs on each table when it is given none, with their options, in the order they run."""
    chosen = sorted((d for d in JOBS.values() if d.fleet_default is not None), key=lambda d: d.fleet_rank)
    return {d.name: dict(d.fleet_default or {}) for d in chosen}
