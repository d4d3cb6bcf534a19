"""Which runs need Spark, and running a job in this process (no spark-submit).

Log compaction, checkpoints, expired-log cleanup, ``inspect`` and lite VACUUM do their work on
the driver with the Delta core alone (lite VACUUM turns to Spark tasks only from
``SPARK_DELETE_MIN``, a million, files to delete). OPTIMIZE by bin-packing or ``target_files``
and full VACUUM fan their work out to Spark tasks, or under local execution to threads of this
process (:mod:`airflow_delta_maint.app.runners.tasks`); Z-order and liquid clustering shuffle rows, which
only Spark does. This module imports no pyspark: the Airflow worker uses it to run jobs itself.
"""

from __future__ import annotations

import argparse
import functools
import os
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_delta_maint.delta.errors import InvalidArgumentError

from .common_flags import HISTORY_URI
from .context import JobContext
from .job_definitions import JobDefinition, definition
from .jobs import execute_job
from .rewrite.copy_estimate import PlannedRewrite
from .settings import Settings


def needs_spark(job: str, params: Mapping[str, Any]) -> bool:
    """True when the job (with these parsed options) starts Spark for its work under Spark execution
    (see :meth:`~.job_definitions.definition.JobDefinition.needs_spark`)."""
    return definition(job).needs_spark(params)


def uses_delta_spark(job: str, params: Mapping[str, Any]) -> bool:
    """True when delta-spark does the run's work, so its session needs delta-spark's jars (dry runs of
    OPTIMIZE and cleanup-log plan with our core)."""
    return definition(job).uses_delta_spark(params)


def spark_only(job: str, params: Mapping[str, Any]) -> str | None:
    """What in these options only Spark can run (a shuffle), or None when the job can run locally.

    A liquid-clustered table is found only once its log is read: its OPTIMIZE fails under local
    execution with the same clear error.
    """
    return definition(job).spark_only(params)


@functools.lru_cache(maxsize=None)
def job_parser(job: str) -> argparse.ArgumentParser:
    """A parser of one job's own options (and the history's URI) that raises instead of exiting; one per job
    and process (a fleet parses each table's options, and a parser costs more to build than to use)."""
    parser = argparse.ArgumentParser(prog=f"delta-maint {job}", exit_on_error=False, add_help=False)
    definition(job).options.add_to(parser)
    parser.add_argument(HISTORY_URI, metavar="URI")
    return parser


def parse_job_args(job: str, argv: Sequence[str]) -> argparse.Namespace:
    """Parse a job's options given as arguments (a fleet spec's ``args``); bad options raise
    ``InvalidArgumentError`` with one clear message."""
    definition(job)  # an unknown job: one line naming the jobs
    try:
        namespace, unknown = job_parser(job).parse_known_args([str(a) for a in argv])
    except (argparse.ArgumentError, SystemExit) as exc:
        raise InvalidArgumentError(f"invalid options for {job}: {exc}") from None
    if unknown:
        raise InvalidArgumentError(f"invalid options for {job}: unknown {' '.join(unknown)}")
    return namespace


def parsed_args(job: JobDefinition, params: Mapping[str, Any], history_uri: str | None = None, *,
                seen_version: int | None = None) -> argparse.Namespace:
    """The namespace a job's runner takes, from its parsed options (no command-line text in between);
    ``seen_version``: the version the task's check saw (see :func:`~airflow_delta_maint.app.jobs.planned_again`)."""
    return argparse.Namespace(**{**job.options.defaults(), **params, "history_uri": history_uri,
                                 "seen_version": seen_version})


def run_in_process(job: str, table: str, argv: Sequence[str], storage_options: Mapping[str, str] | None = None,
                   *, spark_allowed: bool = False, master: str | None = None,
                   settings: Settings | None = None) -> tuple[int, dict[str, Any]]:
    """Run one job on ``table`` in this process and return (exit code, metrics) as ``delta-maint`` would.

    The metrics object is the one the application writes (same fields, same ``error`` on failure).
    ``storage_options`` may hold credentials: they go to the job's storage only, never into the
    metrics. With ``spark_allowed`` false a job that would start Spark fails with a clear error.
    ``settings``: the application's settings (default: this process's environment, as the command
    line reads them); a bad option or setting raises ``InvalidArgumentError``.
    """
    args = parse_job_args(job, argv)
    return run_parsed(definition(job), table, args, storage_options, spark_allowed=spark_allowed, master=master,
                      settings=settings)


def run_parsed(job: JobDefinition, table: str, args: argparse.Namespace,
               storage_options: Mapping[str, str] | None = None, *, spark_allowed: bool = False,
               master: str | None = None, settings: Settings | None = None) -> tuple[int, dict[str, Any]]:
    """:func:`run_in_process` with the job's options parsed already (:func:`parsed_args`)."""
    ctx = JobContext(table=table, storage_options=dict(storage_options or {}), master=master,
                     spark_allowed=spark_allowed,
                     settings=settings if settings is not None else Settings.from_environ(os.environ))
    return execute_job(job.name, job.module(), args, ctx)


#: "auto" runs a job in the Airflow worker's process up to this many bytes of log it reads.
#: A snapshot's peak memory is about 17 times its log bytes (measured: a 70 MB checkpoint of a
#: million files loads in 1,183 MiB peak RSS, docs/benchmarks.md), so 16 MiB of log stays under
#: about 300 MiB on the worker; the same bound keeps lite VACUUM (which reads every commit since
#: its watermark, a remove action taking 150 bytes or more) far below the million files from
#: which it turns to Spark tasks.
LOCAL_MAX_LOG_BYTES = 16 << 20

#: "auto" rewrites at most this many bytes of data files in the worker's process. Spark's start
#: costs some 4-10 s before the first task; the worker rewrites about 130 MiB/s on two cores
#: (docs/benchmarks.md), so below a GiB the whole local rewrite is done in about the time
#: Spark needs to start, and Spark cannot win back its start on the rest. Memory stays bounded
#: whatever the size: a bin streams through one row group (about 270 MiB per thread, measured).
LOCAL_MAX_REWRITE_BYTES = 1 << 30

#: "auto" also keeps a bin-packing plan past LOCAL_MAX_REWRITE_BYTES on the worker when its inputs' footers say
#: that at least this share of its bytes would be copied row groups, byte for byte (``app/rewrite/copy_estimate.py``),
#: the rest staying within LOCAL_MAX_REWRITE_BYTES: copying costs I/O, not CPU (2.0 CPU s per GiB against 8.3
#: for a re-encoding rewrite, docs/benchmarks.md), so Spark's start is not won back on it either
LOCAL_MIN_COPY_SHARE = 0.9

#: ... and while the plan holds at most this many bytes: at the copy's speed on the worker (about 100 MiB/s of
#: input on two cores, statistics included) some 80 s of work, where a cluster would spread the bins
LOCAL_MAX_COPY_BYTES = 8 << 30

EXECUTIONS = ("spark", "local", "auto")


def log_bytes(table: str, storage_options: Mapping[str, str] | None = None, *, all_commits: bool = True) -> int:
    """Bytes of the log a job reads at most: the newest checkpoint (a V2 checkpoint's sidecars
    included) and the commit files.

    One listing of ``_delta_log``; of a V2 checkpoint its sidecar actions are read (the top file's
    non-file columns), since its file actions, the bulk, live in the sidecars. With ``all_commits``
    the commits before the checkpoint count too (lite VACUUM may read them); without, only those
    after it (a snapshot).
    """
    from airflow_delta_maint.delta.log.listing import list_log
    from airflow_delta_maint.delta.log.checkpoint_read import sidecar_sizes
    from airflow_delta_maint.delta.storage.store import Storage

    storage = Storage(table, dict(storage_options or {}))
    listing = list_log(storage)
    checkpoint = listing.checkpoints[-1] if listing.checkpoints else None
    after = -1 if checkpoint is None or all_commits else checkpoint.version
    sidecars = sum(size for _, size in sidecar_sizes(storage, checkpoint)) if checkpoint is not None else 0
    return sum(f.size for f in (checkpoint.files if checkpoint else ())) + sidecars + \
        sum(f.size for v, f in listing.commits.items() if v > after)


def reads_older_commits(job: str, params: Mapping[str, Any]) -> bool:
    """True when the job may read commits before the newest checkpoint (driver-only jobs and
    lite VACUUM are counted so, as :data:`LOCAL_MAX_LOG_BYTES` was measured); OPTIMIZE and full
    VACUUM read a snapshot only."""
    return definition(job).reads_older_commits(params)


@dataclass(frozen=True)
class Looked:
    """What the worker's one look at the log found already, for the execution choice: the log's bytes (its
    listing) and, for a job that rewrites data files, the bytes its plan rewrites (None: the plan needs Spark)."""

    log_bytes: int
    rewrite_bytes: int | None
    #: the rewrite the plan does, for the copy estimate (None: not planned, or the plan needs Spark)
    rewrite: PlannedRewrite | None = None


def choose_execution(requested: str, job: str, params: Mapping[str, Any], table: str,
                     storage_options: Mapping[str, str] | None = None,
                     max_log_bytes: int = LOCAL_MAX_LOG_BYTES,
                     max_rewrite_bytes: int | None = None,
                     looked: Looked | None = None) -> tuple[str, str]:
    """Where a run goes: ``("local" | "spark", why)``.

    ``spark`` always submits; ``local`` runs in this process and refuses what only Spark runs
    (Z-order, liquid clustering); ``auto`` runs locally a driver-only job, a full VACUUM, or an
    OPTIMIZE by bin-packing of at most ``max_rewrite_bytes`` (default :data:`LOCAL_MAX_REWRITE_BYTES`)
    or one that would copy nearly all its bytes (:func:`rewrite_execution`), while the log the job
    reads holds at most ``max_log_bytes``; else it submits.

    ``looked``: what the worker's look at the log found (:func:`look_before_choosing`); the log is not read
    again for it.

    Raises:
        InvalidArgumentError: an unknown ``requested`` value, or ``local`` for what needs Spark.
    """
    requested = str(requested).strip().lower()
    if requested not in EXECUTIONS:
        raise InvalidArgumentError(f"execution must be one of {', '.join(EXECUTIONS)}, got {requested!r}")
    if requested == "spark":
        return "spark", "execution 'spark'"
    only_spark = spark_only(job, params)
    if only_spark:
        if requested == "local":
            why = "its session" if only_spark == "the delta-spark engine" else "a shuffle"
            raise InvalidArgumentError(f"{only_spark} needs Spark ({why}); run it with execution 'spark' "
                                       "or 'auto'")
        return "spark", f"{only_spark} needs Spark"
    if requested == "local":
        return "local", "execution 'local'"
    defined = definition(job)
    size = looked.log_bytes if looked is not None else \
        log_bytes(table, storage_options, all_commits=defined.reads_older_commits(params))
    if size > max_log_bytes:
        return "spark", f"the log holds {size} bytes, more than {max_log_bytes} for a run on the worker"
    if defined.rewrites_data(params):
        planned = looked.rewrite if looked is not None and looked.rewrite is not None else \
            _planned(looked, defined, table, storage_options, params)
        budget = LOCAL_MAX_REWRITE_BYTES if max_rewrite_bytes is None else max_rewrite_bytes
        return rewrite_execution(planned, size, budget)
    return "local", f"{defined.local_kind(params)}, the log holds {size} bytes (at most {max_log_bytes})"


def _planned(looked: Looked | None, defined: JobDefinition, table: str, storage_options: Mapping[str, str] | None,
             params: Mapping[str, Any]) -> PlannedRewrite | None:
    """The plan's rewrite: its bytes as the worker's look found them, else planned here from the log."""
    if looked is None:
        return defined.planned_rewrite(table, storage_options, params)  # type: ignore[no-any-return]
    return None if looked.rewrite_bytes is None else PlannedRewrite(looked.rewrite_bytes)


def rewrite_execution(planned: PlannedRewrite | None, size: int, max_rewrite_bytes: int) -> tuple[str, str]:
    """``auto`` for a job that rewrites data files, from its plan made on the worker from the log alone (None:
    the plan needs Spark), by :func:`rewrites_execution`; ``size``: the bytes of the log it reads."""
    if planned is None:
        return "spark", "liquid clustering needs Spark"
    where, why = rewrites_execution([planned], max_rewrite_bytes)
    return where, f"{why}, the log holds {size} bytes" if where == "local" else why


@dataclass(frozen=True)
class RewriteWeight:
    """A plan's bytes as ``auto`` weighs them (:func:`weigh_rewrite`): all of them and, of them, the row groups
    its inputs' footers say would be copied byte for byte (0: none, or the footers were not read)."""

    bytes: int
    copied: int = 0
    #: the copy counts: at least :data:`LOCAL_MIN_COPY_SHARE` of the plan copied, the plan within
    #: :data:`LOCAL_MAX_COPY_BYTES`; else every byte counts as re-encoded
    counted: bool = False

    @property
    def reencoded(self) -> int:
        """The bytes the plan decodes and encodes again, as the execution choice counts them."""
        return self.bytes - self.copied if self.counted else self.bytes


def weigh_rewrite(planned: PlannedRewrite) -> RewriteWeight:
    """One plan's weight: its copy counts when it holds at most :data:`LOCAL_MAX_COPY_BYTES` and its inputs'
    footers say at least :data:`LOCAL_MIN_COPY_SHARE` of its bytes would be copied (footers read only for a plan
    within that bound that has candidates)."""
    if planned.bytes > LOCAL_MAX_COPY_BYTES or not planned.candidates():
        return RewriteWeight(planned.bytes)
    copied = planned.copied_bytes()
    return RewriteWeight(planned.bytes, copied, counted=copied >= LOCAL_MIN_COPY_SHARE * planned.bytes)


def rewrites_execution(plans: Sequence[PlannedRewrite], max_rewrite_bytes: int | None = None) -> tuple[str, str]:
    """``auto`` for the rewrites of one task (one table, or a whole fleet: Spark's start is paid once for all),
    ``("local" | "spark", why)``.

    Local when all the plans together rewrite at most ``max_rewrite_bytes`` (default
    :data:`LOCAL_MAX_REWRITE_BYTES`; no footer is read); past that local too when they hold at most
    :data:`LOCAL_MAX_COPY_BYTES` and what they re-encode (:func:`weigh_rewrite`: a plan copying under
    :data:`LOCAL_MIN_COPY_SHARE` of its bytes counts whole) stays within ``max_rewrite_bytes``; else Spark.
    Footers are read plan by plan, and no more once the re-encoded bytes are past the budget.
    """
    budget = LOCAL_MAX_REWRITE_BYTES if max_rewrite_bytes is None else max_rewrite_bytes
    total = sum(p.bytes for p in plans)
    if total <= budget:
        return "local", f"{total} bytes to rewrite (at most {budget})"
    if total > LOCAL_MAX_COPY_BYTES:
        return "spark", (f"{total} bytes to rewrite, more than {budget} for a run on the worker and more than "
                         f"{LOCAL_MAX_COPY_BYTES} to copy")
    reencoded = copied = 0
    for planned in plans:
        weight = weigh_rewrite(planned)
        reencoded += weight.reencoded
        copied += weight.bytes - weight.reencoded
        if reencoded > budget:
            break
    if reencoded <= budget:
        return "local", (f"{total} bytes to rewrite, {copied} of them copied row groups (at least "
                         f"{LOCAL_MIN_COPY_SHARE:.0%} of each plan that copies), {reencoded} re-encoded "
                         f"(at most {budget})")
    return "spark", (f"{total} bytes to rewrite, {reencoded} of them re-encoded: more than {budget} for a run on the "
                     f"worker (a plan copying under {LOCAL_MIN_COPY_SHARE:.0%} of its bytes counts whole)")
