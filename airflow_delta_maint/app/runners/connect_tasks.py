"""Spark work through DataFrame operations: the runner for Spark Connect (and, by choice, classic sessions).

Spark Connect has no SparkContext and no RDDs. :class:`DataFrameTasks` runs the same slices of work as
:class:`~airflow_delta_maint.app.runners.tasks.SparkTasks` with operations Spark Connect supports:
``spark.range(n, numPartitions=n)`` gives one partition per slice (no shuffle, no data sent along),
and ``mapInArrow`` runs the slice's function on the slice's items in a Python worker, returning its
results pickled; the driver collects them with ``toArrow`` and puts them back in slice order. The
function and the slices travel pickled inside the mapped function and are unpickled in the task,
after it has put the shipped environment (see below) on its path: the modules they need are
imported only there.

On Spark Connect the application's modules reach the server's Python workers with ``addArtifacts``
(the package as a zip, ``pyfile=True``); the packed Python environment
(:mod:`airflow_delta_maint.hooks.python_env`) goes as an archive (``archive=True``), which the
server unpacks among the session's files, where each task finds it. A Spark Connect server chooses
its executors' interpreter itself (its ``PYSPARK_PYTHON``), which must have pyarrow (as ``mapInArrow``
does); the environment adds the rest (obstore, pyroaring, numpy). :func:`connect_session` opens the
session and ships both.

No pyspark import at module level: the Airflow side may import the application without it.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from airflow_delta_maint.app.runners.store_call_tasks import take_task_calls, with_task_calls
from airflow_delta_maint.app.runners.tasks import PROGRESS_EVERY_S, raise_worker_error, split_slices

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("delta_maint.tasks")

#: what the Airflow side passes to a Spark Connect run (environment variables of the client process)
ENV_REMOTE = "SPARK_REMOTE"  # pyspark's own: the Spark Connect URL (its token stays off the command line)
ENV_PY_FILES = "DELTA_MAINT_CONNECT_PY_FILES"  # the application's package zip
ENV_ARCHIVE = "DELTA_MAINT_CONNECT_ENV"  # the packed Python environment (a .tar.gz), or empty
ENV_CONF = "DELTA_MAINT_CONNECT_CONF"  # JSON: session configuration to set
#: the folder name the environment unpacks to among the session's files
ENV_ALIAS = "environment"
#: how classic sessions run slices: "rdd" (SparkTasks) or "dataframe" (DataFrameTasks)
ENV_CLASSIC_TASKS = "DELTA_MAINT_SPARK_TASKS"
CLASSIC_DEFAULT = "rdd"

_RESULT_SCHEMA = "slice int, seq int, result binary"


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def remote_url(master: str | None) -> str | None:
    """The Spark Connect URL of this run: ``--master sc://...`` or ``$SPARK_REMOTE``; else None."""
    if master and master.startswith("sc://"):
        return master
    return os.environ.get(ENV_REMOTE) or None


def classic_tasks_kind() -> str:
    kind = (os.environ.get(ENV_CLASSIC_TASKS) or CLASSIC_DEFAULT).strip().lower()
    if kind not in ("rdd", "dataframe"):
        raise ValueError(f"{ENV_CLASSIC_TASKS} must be rdd or dataframe, got {kind!r}")
    return kind


# -- the session ----------------------------------------------------------------------------------
def connect_session(url: str) -> Any:
    """A Spark Connect session at ``url`` with the application's modules and environment added.

    ``$DELTA_MAINT_CONNECT_PY_FILES`` names the package zip (else the one spark-submit ships is built or
    taken from its cache, :func:`~airflow_delta_maint.app.package_bundle.build_package_zip`), ``$DELTA_MAINT_CONNECT_ENV``
    the packed environment to add as an archive, ``$DELTA_MAINT_CONNECT_CONF`` (JSON) configuration
    to set on the session (settings the server fixes at its start are skipped, with a warning).
    """
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = SparkSession.builder.remote(url).getOrCreate()
    from airflow_delta_maint.app.package_bundle import build_package_zip

    py_files = os.environ.get(ENV_PY_FILES) or build_package_zip()
    spark.addArtifacts(py_files, pyfile=True)
    archive = os.environ.get(ENV_ARCHIVE)
    if archive:
        spark.addArtifacts(f"{archive}#{ENV_ALIAS}", archive=True)
    for key, value in json.loads(os.environ.get(ENV_CONF) or "{}").items():
        try:
            spark.conf.set(key, str(value))
        except Exception as exc:  # a static setting, or one Connect does not let a client change
            log.warning("Spark Connect: %s not set on the session: %s", key, str(exc).splitlines()[0])
    log.info("Spark Connect session at %s ready in %.1f s (modules %s%s)", url.split(";")[0],
             time.perf_counter() - started, Path(py_files).name,
             f", environment {Path(archive).name}" if archive else "")
    return spark


# -- inside the tasks -------------------------------------------------------------------------------
def use_shipped_environment() -> None:
    """Put the shipped environment's packages on this worker's path (once), when the session shipped one.
    A task calls it before it unpickles what the driver sent: the modules that needs are imported only then."""
    try:
        from pyspark import SparkFiles

        root = SparkFiles.getRootDirectory()
    except Exception:  # noqa: BLE001 - no Spark files here: nothing was shipped
        return
    site = os.path.join(root, ENV_ALIAS, "site-packages")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.insert(0, site)
        import importlib

        importlib.invalidate_caches()
    _check_pyarrow_takes_numpy()


_PYARROW_CHECKED = False


def _check_pyarrow_takes_numpy() -> None:
    """Fail with one line when this worker's pyarrow was imported without numpy (a Spark Connect server's
    Python that has pyarrow only): pyarrow then takes no numpy array for good, and the jobs hand it many.
    The numpy shipped with the session comes too late: the worker imported pyarrow before any task ran."""
    global _PYARROW_CHECKED
    if _PYARROW_CHECKED:
        return
    import numpy as np
    import pyarrow as pa

    try:
        pa.array(np.zeros(1, dtype=np.int64))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        raise RuntimeError(
            "delta-maint environment error: the Python workers' pyarrow was imported without numpy, so it takes no "
            "numpy arrays: install numpy beside pyarrow in the interpreter the Spark Connect server runs its Python "
            "workers with (its PYSPARK_PYTHON)") from None
    _PYARROW_CHECKED = True


def slice_calls(payload: bytes, slices: list[bytes], batches: Iterator[Any]) -> Iterator[tuple[int, Any]]:
    """
    Inside one partition of a ``mapInArrow`` over ``range(n)``: for each slice its rows number, the slice's
    number and what the driver's function returns for the slice's items.

    The function and the items are unpickled after the shipped environment is on the path
    (:func:`use_shipped_environment`); each call happens when the caller asks for the next slice.

    :param payload: the function, cloudpickled.
    :param slices: each slice's items, pickled.
    :param batches: the partition's rows (the slice numbers in the first column).
    """
    use_shipped_environment()
    from pyspark import cloudpickle

    ids = [i for batch in batches for i in batch.column(0).to_pylist()]
    if not ids:
        return
    fn = cloudpickle.loads(payload)
    for slice_id in ids:
        yield slice_id, fn(iter(pickle.loads(slices[slice_id])))


def run_slice(payload: bytes, slices: list[bytes], batches: Iterator[Any]) -> Iterator[Any]:
    """One partition of a ``mapInArrow`` over ``range(n)``: for the slice numbered by its row, unpickle
    the function (after the shipped environment is on the path) and the slice's items, run it, and
    yield each result pickled."""
    import pyarrow as pa

    for slice_id, results in slice_calls(payload, slices, batches):
        yield from _results(slice_id, results, pa)


def _results(slice_id: int, results: Iterable[Any], pa: Any) -> Iterator[Any]:
    schema = pa.schema([("slice", pa.int32()), ("seq", pa.int32()), ("result", pa.binary())])
    for seq, result in enumerate(results):
        yield pa.RecordBatch.from_pydict({"slice": [slice_id], "seq": [seq], "result": [pickle.dumps(result)]},
                                         schema=schema)


# -- on the driver ----------------------------------------------------------------------------------
class DataFrameTasks:
    """Runs each slice as a task of one ``mapInArrow`` (see the module's docstring)."""

    local = False

    def __init__(self, spark: Any, description: str = "delta-maint", parallelism: int | None = None):
        self.spark = spark
        self.description = description
        self.parallelism = max(1, parallelism or _default_parallelism(spark))

    def map_slices(self, fn: Callable[[Iterator[T]], Iterable[R]], items: Sequence[T], slices: int,
                   label: str) -> list[R]:
        import functools

        from pyspark import cloudpickle

        parts = split_slices(list(items), slices)
        if not parts:
            return []
        payload = cloudpickle.dumps(with_task_calls(fn))  # the slices' store calls come back as their last result
        sliced = [pickle.dumps(part) for part in parts]
        tag = f"delta-maint-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        add_tag = getattr(self.spark, "addTag", None)
        try:
            if add_tag is not None and is_connect(self.spark):
                add_tag(tag)  # interruptTag(tag) cancels these tasks
            frame = self.spark.range(0, len(parts), 1, len(parts)).mapInArrow(
                functools.partial(run_slice, payload, sliced), _RESULT_SCHEMA)
            out = frame.toArrow()
        except Exception as exc:
            raise_worker_error(exc)
            raise
        finally:
            if add_tag is not None and is_connect(self.spark):
                self.spark.removeTag(tag)
        log.info("%s: %s: %d tasks done in %.1f s", self.description, label, len(parts),
                 time.perf_counter() - started)
        rows = sorted(zip(out.column("slice").to_pylist(), out.column("seq").to_pylist(),
                          out.column("result").to_pylist()))
        return take_task_calls(pickle.loads(r) for _, _, r in rows)


def _default_parallelism(spark: Any) -> int:
    """The session's parallelism: the SparkContext's on a classic session; on Spark Connect
    ``spark.default.parallelism`` when the server sets it, else the cores its master states
    (``local[N]``, or executors times cores), else 8."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)

    def conf(key: str) -> str | None:
        try:
            return spark.conf.get(key, None)
        except Exception:  # noqa: BLE001 - not readable on this server
            return None

    parallelism = conf("spark.default.parallelism")
    if parallelism:
        return max(1, int(parallelism))
    master = conf("spark.master") or ""
    if master.startswith("local["):
        local = master[len("local["):].split(",")[0].rstrip("]")
        return (os.cpu_count() or 2) if local == "*" else max(1, int(local))
    instances, cores = conf("spark.executor.instances"), conf("spark.executor.cores")
    if instances and cores:
        return max(1, int(instances) * int(cores))
    return 8


__all__ = ["DataFrameTasks", "PROGRESS_EVERY_S", "connect_session", "is_connect", "remote_url", "run_slice"]
