"""What the application knows of one job, in one object: its name and purpose, its options, whether it
writes, the operation the core's feature gate checks, which engines run it, where it can run, and where
its runner lives. The command line, the operators, the fleet, the catalog gate and the execution choice
ask the definition; none of them keeps a table keyed by a job's name.

Nothing here imports pyspark: the Airflow side reads the definitions. A job's runner (its module under
``app/jobs/``) is imported only when the job runs or its check is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from airflow_delta_maint.delta.health.estimates import DEFAULT_RATES, CpuRates, Estimate, EstimateInputs, estimate, gains
from airflow_delta_maint.delta.protocol.features import DELTA_SPARK, Operation

from .options import OptionSet

__all__ = ["NATIVE", "DELTA_SPARK", "JobDefinition", "Params"]

NATIVE = "native"
#: a job's parsed options (every option, defaults included)
Params = Mapping[str, Any]


def _never(params: Params) -> str | None:
    return None


def _always(params: Params) -> bool:
    return True


@dataclass(frozen=True)
class JobDefinition:
    """One maintenance job.

    Attributes:
        name: the sub-command, the metrics' ``operation`` and the operators' ``job``.
        summary: what it is for, in one line (``--help``, the docs).
        runner: the module that runs it (``run(args, ctx)``, and optionally ``options_from``,
            ``nothing_to_do`` and ``format_human``).
        options: its options, declared once.
        operation: what the core's feature gate checks before the job writes (or reads).
        writes: whether it changes the table (a catalog vends read-write credentials; a catalog-managed
            table refuses it unless the catalog allows it).
        engines: the engines that run it.
        engine_option: the option the operators' ``engine`` sets (``engine``), None for a job with no choice of
            engine.
        engine_of: the job whose engines the ``engine`` option chooses among, when not this one's own
            (compact-log's ``engine`` writes its checkpoint: the checkpoint job's engines).
        driver_only: its work never starts Spark on the native engine.
        spark_work: with these options, it starts Spark (native engine; ``driver_only`` jobs never do).
        shuffle: what in these options only Spark runs (a shuffle), or None.
        reads_older_commits: with these options, it may read commits before the newest checkpoint.
        local_kind: how the execution choice names a run on the worker.
        dry_run_plans_natively: a dry run plans with the core, whatever the engine.
        catalog_operation: its operation as catalogs name it in their allowed maintenance operations
            (a catalog-managed table's catalog must allow it); empty for a job that does not write.
        fleet_default: the options a fleet runs it with when given no jobs (None: not run by default).
        fleet_rank: its place among the fleet's default jobs (lower first).
        estimate_holds: with these options, the estimate from the log describes the run (the expired log's
            cleanup is planned under the table's own retention: not with a retention or versions of its own).
    """

    name: str
    summary: str
    runner: str
    options: OptionSet
    operation: Operation
    writes: bool
    engines: tuple[str, ...] = (NATIVE,)
    engine_option: str | None = None
    engine_of: str = ""
    driver_only: bool = False
    spark_work: Callable[[Params], bool] = _always
    shuffle: Callable[[Params], str | None] = _never
    reads_older_commits: Callable[[Params], bool] = _always
    local_kind: Callable[[Params], str] = lambda params: "driver-only job"
    dry_run_plans_natively: bool = False
    catalog_operation: str = ""
    fleet_default: Mapping[str, Any] | None = None
    fleet_rank: int = 0
    estimate_holds: Callable[[Params], bool] = _always

    def module(self) -> ModuleType:
        """The job's runner module."""
        return importlib.import_module(self.runner)

    def engine(self, params: Params) -> str:
        """The engine these options choose (native unless one of the job's engine options says otherwise)."""
        if "engine" in self.options.names() and str(params.get("engine") or "").strip().lower() == DELTA_SPARK:
            return DELTA_SPARK
        return NATIVE

    def uses_delta_spark(self, params: Params) -> bool:
        """True when delta-spark does the run's work, so its session needs delta-spark's jars."""
        if self.dry_run_plans_natively and params.get("dry_run"):
            return False
        return self.engine(params) == DELTA_SPARK

    def needs_spark(self, params: Params) -> bool:
        """True when the run starts Spark for its work under Spark execution."""
        if self.uses_delta_spark(params):
            return True
        return not self.driver_only and self.spark_work(params)

    def spark_only(self, params: Params) -> str | None:
        """What in these options only Spark can run, or None when the job can run in the worker's process."""
        if self.uses_delta_spark(params):
            return "the delta-spark engine"
        return self.shuffle(params)

    def rewrites_data(self, params: Params) -> bool:
        """With these options, the job rewrites data files (its runner plans the bytes: ``local_rewrite_bytes``)."""
        return hasattr(self.module(), "local_rewrite_bytes") and self.needs_spark(params)

    def planned_rewrite(self, table: str, storage_options: Mapping[str, str] | None, params: Params) -> Any:
        """The rewrite the run would do, planned from the log alone (the runner's ``local_rewrite``: its bytes
        and what the copy estimate reads; None: the plan needs Spark)."""
        return self.module().local_rewrite(table, storage_options, params)

    def parse(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every option's value from ``values`` (defaults for the rest); a bad one raises naming the option."""
        return self.options.parse(values, self.name)

    def typed_options(self, params: Params) -> Any | None:
        """The job's typed options from parsed ``params`` (its runner's ``options_from``), or None for a job
        without them; a bad value raises the core's ``InvalidArgumentError`` before anything is read."""
        build = getattr(self.module(), "options_from", None)
        return build(params) if build is not None else None

    def nothing_to_do(self, table: str, storage_options: Mapping[str, str] | None, options: Any) -> str | None:
        """Why the job would do nothing on the table, found without Spark, or None (no check, or work)."""
        check = getattr(self.module(), "nothing_to_do", None)
        if check is None or options is None:
            return None
        return check(table, storage_options, options)

    def format_human(self, metrics: Mapping[str, Any]) -> str:
        """The run's metrics for a person (the runner's ``format_human``, else one ``key: value`` a line)."""
        own = getattr(self.module(), "format_human", None)
        if own is not None:
            return own(dict(metrics))
        return "\n".join(f"{k}: {v}" for k, v in metrics.items())

    def estimate(self, inputs: EstimateInputs, rates: CpuRates = DEFAULT_RATES,
                 params: Params | None = None) -> Estimate | None:
        """What a run with ``params`` (None: the defaults) would gain and cost on the table ``inputs`` describe, from
        the log alone (its operation's estimate: :mod:`airflow_delta_maint.delta.health.estimates`); None for a job
        that changes nothing, or whose options the estimate does not hold for."""
        return estimate(self.operation, inputs, rates) if self._estimated(params) else None

    def would_gain(self, inputs: EstimateInputs, params: Params | None = None) -> bool | None:
        """Whether :meth:`estimate` would gain anything (None: it gives no estimate), without pricing or scoring."""
        return gains(self.operation, inputs) if self._estimated(params) else None

    def _estimated(self, params: Params | None) -> bool:
        """Whether a run with ``params`` has an estimate: it writes, and its options keep the estimate true."""
        return self.writes and (params is None or self.estimate_holds(params))
