"""Submit the bundled Delta maintenance application with spark-submit."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_delta_maint.hooks import application_run, python_env
from airflow_delta_maint.hooks.job_submission import JobSubmission, application_args as application_args
from airflow_delta_maint.hooks.jvm_start import fast_start_options, keep_class_archive
from airflow_delta_maint.app.package_bundle import (
    APPLICATION as APPLICATION,  # re-exported, as every name below: the old import path
    PACKAGE_DIR as PACKAGE_DIR,
    build_package_zip as build_package_zip,
    default_cache_dir as default_cache_dir,
)
from airflow_delta_maint.hooks.delta_spark_jars import add_delta_spark
from airflow_delta_maint.hooks.process_tree import note_tree, stop_leftovers, terminate
from airflow_delta_maint.hooks.provider_config import get_option
from airflow_delta_maint.hooks.spark_install import pyspark_home as pyspark_home
from airflow_delta_maint.hooks.spark_connect import CONN_TYPE as SPARK_CONNECT, ConnectRunner
from airflow_delta_maint.hooks.spark_install import resolve_binary
from airflow_delta_maint.hooks.storage_credentials import StorageCredentials

#: the [delta_maint] options about the executors' Python (see python_env.plan_python)
PYTHON_ENV_OPTIONS = ("python_env", "python_env_uri", "python_env_python_version", "python_env_platform",
                      "executor_python")


class DeltaMaintHook(JobSubmission, SparkSubmitHook):
    """
    Run one job of the Delta maintenance application with spark-submit and return its metrics.

    Builds on the Spark provider's :class:`~airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook`
    and its ``spark`` connection (master ``local[*]``, ``spark://host:port``, ``yarn``,
    ``k8s://...``; extras ``deploy-mode``, ``queue``, ``namespace``, ``spark-binary``). With a
    ``spark_connect`` connection (the provider's ``SparkConnectHook`` one) there is no spark-submit:
    the runs go to :class:`~airflow_delta_maint.hooks.spark_connect.ConnectRunner`. The
    application file and a zip of this package (``--py-files``) are submitted; the driver writes
    the run's metrics JSON, which :meth:`run_job` reads back and returns.

    In client deploy mode (and in local mode) the driver runs on this machine and writes the
    metrics to a temporary local file. In cluster deploy mode the driver runs elsewhere, so
    ``metrics_uri`` must name a folder on storage both the driver and this worker can reach
    (``s3://bucket/delta-maint/metrics``, a shared mount, ...).

    :param conn_id: the :ref:`spark connection id <howto/connection:spark-submit>`.
    :param conf: extra Spark configuration, passed as ``--conf`` (``spark.pyspark.python`` there, or
        ``PYSPARK_PYTHON`` in ``env_vars``, names the executors' interpreter: nothing is shipped).
    :param spark_binary: the command to run (default ``spark-submit``; found on ``PATH``, next to
        this interpreter, or in ``$SPARK_HOME/bin``).
    :param metrics_uri: folder URI for the metrics file in cluster deploy mode.
    :param deploy_mode: ``client`` or ``cluster``; overrides the connection's ``deploy-mode`` extra.
    :param env_vars: environment variables for spark-submit (and the driver in client mode).
    :param name: the Spark application name.
    :param cache_dir: folder for the cached ``--py-files`` zip.
    :param storage_credentials: object-store credentials from an Airflow connection (see
        :mod:`~airflow_delta_maint.hooks.storage_credentials`). They go into the environment of the
        spark-submit process only, never into its arguments or ``--conf`` values, and replace the
        ambient credential variables of their store there. Refused in cluster deploy mode, where
        the only way to a remote driver is ``--conf`` values (on the command line, in the event log).

    :param fast_jvm_start: start the driver JVM faster (client and local mode only): JIT tier 1
        only (``-XX:TieredStopAtLevel=1``) and a class-data-sharing archive of the driver's
        classes, dumped by the first run into ``cache_dir`` and mapped by the next ones. The JVM
        ignores an archive that does not match it. Off by default: tier-1 code runs slower in a
        long driver (in local mode the executors share that JVM).

    :param engine: ``native`` (default) or ``delta-spark``: for ``delta-spark`` the submission carries
        delta-spark's jars (the conf's or ``packages``' own when they name ``io.delta``, else
        ``[delta_maint] delta_spark_packages``, default ``io.delta:delta-spark_2.13:4.4.0``, as
        ``--packages``), its session extension and catalog, and Ivy settings that resolve from Maven
        Central only (written into ``cache_dir``) unless the conf sets ``spark.jars.ivySettings``.
        The native engine never gets Delta jars.

    :param python_env: how the executors get the application's Python (default
        ``[delta_maint] python_env``, else ``auto``): ``ship`` sends the packed environment of
        :mod:`~airflow_delta_maint.hooks.python_env` with the submission (``--archives
        ENV#environment``, built once per dependency set into ``cache_dir``); ``worker`` runs this
        worker's interpreter path; ``off`` ships nothing (``[delta_maint] executor_python`` or the
        cluster's own configuration names the interpreter). ``auto``: ``off`` when conf or env_vars
        name an interpreter, ``worker`` for local masters, ``ship`` for any other master.

    Any other keyword argument goes to :class:`SparkSubmitHook` as it is (``executor_memory="4g"``,
    ``driver_memory="2g"``, ``num_executors=4``, ``verbose=True``, ...). The operators collect
    these in their ``spark_submit_kwargs`` dictionary and pass them on this way.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Delta Lake maintenance (Spark)"

    def __init__(
        self,
        conn_id: str = default_conn_name,
        conf: Mapping[str, Any] | None = None,
        spark_binary: str | None = None,
        metrics_uri: str | None = None,
        deploy_mode: str | None = None,
        env_vars: Mapping[str, Any] | None = None,
        name: str = "delta-maint",
        cache_dir: str | os.PathLike | None = None,
        storage_credentials: StorageCredentials | None = None,
        fast_jvm_start: bool = False,
        python_env: str | None = None,
        engine: str = "native",
        **spark_submit_kwargs: Any,
    ) -> None:
        connection = self._check_connection(conn_id)
        self.fast_jvm_start = fast_jvm_start
        self.storage_credentials = storage_credentials
        self.user_env_vars = {k: str(v) for k, v in (env_vars or {}).items()}
        self.metrics_uri = metrics_uri
        self.cache_dir = cache_dir
        super().__init__(
            conf=self._default_conf(conf),
            conn_id=conn_id,
            spark_binary=spark_binary,
            deploy_mode=deploy_mode,
            name=name,
            **spark_submit_kwargs,
        )
        if self._connection["master"].startswith("spark://") and self.is_cluster_mode:
            raise AirflowException(
                "Spark standalone clusters do not run Python applications in cluster deploy mode; "
                f"use deploy mode 'client' with master {self._connection['master']}"
            )
        if storage_credentials is not None and self.is_cluster_mode:
            raise AirflowException(
                f"storage_conn_id {storage_credentials.conn_id!r} cannot be used in deploy mode 'cluster': a driver "
                "on the cluster could only get the credentials through --conf values, which are on the spark-submit "
                "command line and in the Spark event log. Use deploy mode 'client', or give the cluster's driver "
                "and executors their own credentials (IAM role, workload identity, Kubernetes secrets with "
                "spark.kubernetes.driver.secretKeyRef.*) and drop storage_conn_id"
            )
        self.engine = str(engine or "native").strip().lower()
        if self.engine == "delta-spark":
            folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
            self._packages = add_delta_spark(self._conf, self._packages, get_option("delta_spark_packages"), folder)
        self._python_plan = self._plan_python(python_env)
        for key, value in self._python_plan.conf.items():
            self._conf[key] = value
        self._extra_archives = self._archives
        if self._is_yarn or self._is_kubernetes:
            self._add_driver_env_conf()
        self._cds_dump: tuple[Path, Path] | None = None
        self._extra_py_files = self._py_files
        self._process_tree: list[psutil.Process] = []
        #: set when the connection is a Spark Connect server: the runs go there instead of spark-submit
        self._connect = ConnectRunner(self, conn_id) if connection.conn_type == SPARK_CONNECT else None

    # -- configuration ------------------------------------------------------------------------
    @staticmethod
    def _check_connection(conn_id: str) -> Any:
        try:
            return SparkSubmitHook.get_connection(conn_id)
        except AirflowNotFoundException:
            raise AirflowNotFoundException(
                f"The Spark connection {conn_id!r} is not defined. Create it (connection type 'spark', "
                "host = the master, e.g. local[*] or spark://host:7077), for example with "
                f"AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}'"
            ) from None

    @staticmethod
    def _default_conf(conf: Mapping[str, Any] | None) -> dict[str, Any]:
        merged = dict(conf or {})
        merged.setdefault("spark.ui.showConsoleProgress", "false")
        return merged

    def _plan_python(self, mode: str | None) -> python_env.PythonPlan:
        """How the executors get the application's Python (:func:`python_env.plan_python`)."""
        try:
            return python_env.plan_python(
                mode, local_master=self.is_local_master, cluster_mode=self.is_cluster_mode, conf=self._conf,
                env_vars=self.user_env_vars, settings={k: get_option(k) for k in PYTHON_ENV_OPTIONS})
        except python_env.PythonEnvError as exc:
            raise AirflowException(str(exc)) from None

    @property
    def python_plan(self) -> python_env.PythonPlan:
        """What this hook does about the executors' Python."""
        return self._python_plan

    def _add_driver_env_conf(self) -> None:
        template = "spark.yarn.appMasterEnv.{}" if self._is_yarn else "spark.kubernetes.driverEnv.{}"
        for key, value in self.user_env_vars.items():
            self._conf.setdefault(template.format(key), value)

    @property
    def spark_conf(self) -> dict[str, Any]:
        """The Spark configuration this hook submits with (``--conf``), delta-spark's and the Python plan's included."""
        return self._conf

    @property
    def master(self) -> str:
        """The Spark master this hook submits to."""
        return self._connection["master"]

    @property
    def is_cluster_mode(self) -> bool:
        """True when the driver runs on the cluster (deploy mode ``cluster``)."""
        return self._connection["deploy_mode"] == "cluster"

    @property
    def is_local_master(self) -> bool:
        """True for ``local``, ``local[N]`` and ``local[*]`` masters."""
        return self.master.startswith("local")

    def _get_spark_binary_path(self) -> list[str]:
        binary = self._connection["spark_binary"] or "spark-submit"
        return [self._resolve_binary(binary)]

    @staticmethod
    def _resolve_binary(binary: str) -> str:
        return resolve_binary(binary)

    def submit_env(self) -> dict[str, str]:
        """The environment of the spark-submit process."""
        env = dict(os.environ)
        if not env.get("SPARK_HOME"):
            home = pyspark_home()
            if home:
                env["SPARK_HOME"] = home
        if not self.is_cluster_mode and "PYSPARK_PYTHON" not in self.user_env_vars:
            python = self._conf.get("spark.pyspark.python")
            if python:
                env["PYSPARK_PYTHON"] = str(python)
        if not (self._is_yarn or self._is_kubernetes) or not self.is_cluster_mode:
            env.update(self.user_env_vars)
        if self.storage_credentials is not None:
            for name in self.storage_credentials.unset:
                env.pop(name, None)
            env.update(self.storage_credentials.env)
            env.update(self.storage_credentials.refresh_env)
        return env

    def check_master_reachable(self, timeout_s: float = 10.0) -> None:
        """
        Fail fast when a standalone master (``spark://host:port[,host:port]``) accepts no connection.

        spark-submit itself retries an unreachable standalone master for about a minute before it
        gives up; this check turns that into an immediate, clear error.

        :param timeout_s: how long to wait for each master address.
        :raises AirflowException: when no master address accepts a TCP connection.
        """
        if not self.master.startswith("spark://"):
            return
        errors = []
        for address in self.master[len("spark://"):].split(","):
            host, _, port = address.strip().rpartition(":")
            try:
                with socket.create_connection((host or address, int(port or 7077)), timeout=timeout_s):
                    return
            except (OSError, ValueError) as exc:
                errors.append(f"{address}: {exc}")
        raise AirflowException(f"the Spark master {self.master} is unreachable ({'; '.join(errors)})")

    # -- command ------------------------------------------------------------------------------
    def new_metrics_location(self, job: str) -> str:
        """Where the driver of the next run writes its metrics (a fresh name each call)."""
        name = f"delta-maint-{job}-{uuid.uuid4().hex}.json"
        if self.is_cluster_mode:
            if not self.metrics_uri:
                raise AirflowException(
                    "deploy mode 'cluster' needs metrics_uri: a folder on storage that both the Spark driver "
                    "and the Airflow worker can reach (e.g. s3://bucket/delta-maint/metrics)"
                )
            return f"{self.metrics_uri.rstrip('/')}/{name}"
        folder = Path(tempfile.gettempdir()) / "airflow-delta-maint-metrics"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / name)

    #: the application's command line (:func:`~airflow_delta_maint.hooks.application_run.application_args`)
    application_args = staticmethod(application_run.application_args)

    def build_command(
        self,
        job: str,
        table_uri: str,
        job_args: Sequence[str] = (),
        metrics_out: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """
        The full spark-submit command for one job (also sets the hook up to submit it).

        :param job: the job name.
        :param table_uri: the table's path or URI.
        :param job_args: the job's own options.
        :param metrics_out: where the driver writes the metrics JSON.
        :param storage_options: object-store options for the table.
        """
        self._py_files = ",".join(filter(None, [build_package_zip(self.cache_dir), self._extra_py_files]))
        try:
            shipped = self._python_plan.spark_archive(self.cache_dir if self.cache_dir is not None
                                                      else default_cache_dir(), self.log.info)
        except python_env.PythonEnvError as exc:
            raise AirflowException(str(exc)) from None
        self._archives = ",".join(filter(None, [shipped, self._extra_archives]))
        if self.fast_jvm_start and not self.is_cluster_mode:
            self._add_fast_start_options()
        self._application_args = self.application_args(job, table_uri, job_args, metrics_out, storage_options)
        return self._build_spark_submit_command(str(APPLICATION))

    def _add_fast_start_options(self) -> None:
        """Driver JVM options for a faster start: JIT tier 1 and the class-data-sharing archive."""
        folder = Path(self.cache_dir) if self.cache_dir is not None else default_cache_dir()
        key = "spark.driver.extraJavaOptions"
        self._conf[key], self._cds_dump = fast_start_options(str(self._conf.get(key, "")), folder)

    def _finish_fast_start(self) -> None:
        """Keep a class-data-sharing archive the run dumped (a partial one never replaces anything)."""
        if self._cds_dump is None:
            return
        dump, self._cds_dump = self._cds_dump, None
        keep_class_archive(dump)

    # -- running ------------------------------------------------------------------------------
    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(self._watch_tree(itr))

    def _watch_tree(self, itr: Iterator[Any]) -> Iterator[Any]:
        """Pass spark-submit's output through, noting its process tree at most once a second."""
        last = 0.0
        for line in itr:
            now = time.monotonic()
            if now - last >= 1.0:
                self._snapshot_tree()
                last = now
            yield line

    @property
    def submit_exit_code(self) -> int | None:
        """spark-submit's exit code of the last submission; None before one was started or while it runs."""
        process = self._submit_sp
        return None if process is None else process.returncode

    # -- killing ------------------------------------------------------------------------------
    def _snapshot_tree(self) -> list[psutil.Process]:
        return note_tree(self._submit_sp, self._process_tree)

    @staticmethod
    def _terminate(processes: Sequence[psutil.Process], grace_s: float = 10.0) -> None:
        terminate(processes, grace_s)

    def _cleanup_processes(self) -> None:
        """After spark-submit ends, stop whatever it left (a driver's Python workers, normally none)."""
        stop_leftovers(self._process_tree)
        self._process_tree = []

    def on_kill(self) -> None:
        """
        Kill the running job.

        In local and client deploy mode the driver runs on this machine: spark-submit, the driver
        JVM, the Python driver and every Python worker are stopped (SIGTERM, then SIGKILL). In
        cluster mode the Spark provider's own kill runs (YARN application, Kubernetes pod). With
        Spark Connect, the client process stops and its session's queries with it.
        """
        if self._connect is not None:
            self._connect.on_kill()
            return
        tree = self._snapshot_tree()
        if self.is_cluster_mode:
            super().on_kill()
            self._terminate(tree)
            return
        self.log.info("Stopping spark-submit and its %d child processes", max(0, len(tree) - 1))
        self._terminate(tree)
        if self._submit_sp is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._submit_sp.pid, signal.SIGKILL)
        super().on_kill()
