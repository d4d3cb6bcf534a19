"""Run the maintenance application against a Spark Connect server (connection type ``spark_connect``).

With a Spark Connect connection (the Spark provider's :class:`SparkConnectHook` connection: host, port,
user id, token, ``use_ssl``) there is no spark-submit: the application's driver runs here, in a
process of its own (this worker's interpreter, where pyspark's Connect client is installed), and talks
to the server. Its Spark work goes through DataFrame operations Spark Connect supports
(:mod:`airflow_delta_maint.app.runners.connect_tasks`); the application's modules and, unless turned off, the
packed Python environment reach the server with ``addArtifacts``. The URL (which may hold the token)
and the storage credentials reach the process through its environment only. Metrics come back as
with spark-submit, through a local metrics file.

:class:`~airflow_delta_maint.hooks.delta_maint.DeltaMaintHook` hands its runs here when its
connection is a ``spark_connect`` one, so the operators need nothing else. Never imports pyspark.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.environment_errors import describe as describe_environment
from airflow_delta_maint.app.runners.connect_tasks import ENV_ARCHIVE, ENV_CONF, ENV_PY_FILES, ENV_REMOTE
from airflow_delta_maint.hooks.application_run import application_args, try_read_metrics
from airflow_delta_maint.app.package_bundle import APPLICATION, build_package_zip, default_cache_dir
from airflow_delta_maint.hooks.python_env import CONNECT_DISTRIBUTIONS

if TYPE_CHECKING:
    from airflow_delta_maint.hooks.python_env import PythonPlan
    from airflow_delta_maint.hooks.storage_credentials import StorageCredentials

CONN_TYPE = "spark_connect"
#: Spark settings that mean nothing to a Spark Connect client (the server fixes them)
_SUBMIT_ONLY = ("spark.pyspark.python", "spark.pyspark.driver.python", "spark.ui.showConsoleProgress")


def connect_url(conn_id: str) -> str:
    """The ``sc://`` URL of a Spark Connect connection (the Spark provider's way of building it)."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    return SparkConnectHook(conn_id).get_connection_url()


class ConnectHost(Protocol):
    """What :class:`ConnectRunner` uses of the hook whose runs it makes
    (:class:`~airflow_delta_maint.hooks.delta_maint.DeltaMaintHook` is one)."""

    @property
    def user_env_vars(self) -> Mapping[str, str]:
        """Environment variables for the application's process."""

    @property
    def storage_credentials(self) -> StorageCredentials | None:
        """The table's credentials from an Airflow connection, if any."""

    @property
    def cache_dir(self) -> str | os.PathLike | None:
        """Where the package bundle and the packed environment are kept (None: the default)."""

    @property
    def python_plan(self) -> PythonPlan:
        """What the hook does about the executors' Python."""

    @property
    def spark_conf(self) -> Mapping[str, Any]:
        """The Spark configuration of the runs."""

    @property
    def log(self) -> Any:
        """The hook's logger (its ``info`` is used)."""

    def new_metrics_location(self, job: str) -> str:
        """Where the driver of the next run writes its metrics (a fresh name each call)."""


class ConnectRunner:
    """The runs of one :class:`ConnectHost` (a :class:`DeltaMaintHook`) whose connection is a Spark Connect server."""

    def __init__(self, hook: ConnectHost, conn_id: str):
        self.hook = hook
        self.conn_id = conn_id
        self.url = connect_url(conn_id)
        self._proc: subprocess.Popen | None = None
        self._lines: deque[str] = deque(maxlen=400)

    # -- what the client process gets -----------------------------------------------------------
    def client_env(self) -> dict[str, str]:
        """The client process's environment: the worker's, the storage credentials, the URL and the artifacts."""
        hook = self.hook
        env = dict(os.environ)
        env.update(hook.user_env_vars)
        if hook.storage_credentials is not None:
            for name in hook.storage_credentials.unset:
                env.pop(name, None)
            env.update(hook.storage_credentials.env)
            env.update(hook.storage_credentials.refresh_env)
        env[ENV_REMOTE] = self.url
        env[ENV_PY_FILES] = build_package_zip(hook.cache_dir)
        archive = hook.python_plan.spark_archive(hook.cache_dir if hook.cache_dir is not None else default_cache_dir(),
                                                 hook.log.info, CONNECT_DISTRIBUTIONS)
        if archive and archive.split("#", 1)[0].endswith((".tar.gz", ".tgz", ".tar", ".zip")):
            path = archive.split("#", 1)[0]
            if "://" in path:
                raise AirflowException(
                    f"Spark Connect adds local files only: [delta_maint] python_env_uri {path} cannot be added to the "
                    "session; leave it unset (the environment is built here) or set python_env = off")
            env[ENV_ARCHIVE] = path
        else:
            env.pop(ENV_ARCHIVE, None)
        conf = {k: str(v) for k, v in hook.spark_conf.items() if k not in _SUBMIT_ONLY}
        env[ENV_CONF] = json.dumps(conf)
        env.pop("PYSPARK_GATEWAY_PORT", None)
        return env

    def command(self, job: str, table_uri: str, job_args: Sequence[str], metrics_out: str,
                storage_options: Mapping[str, Any] | None) -> list[str]:
        return [sys.executable, str(APPLICATION),
                *application_args(job, table_uri, job_args, metrics_out, storage_options)]

    def check_reachable(self, timeout_s: float = 10.0) -> None:
        """Fail at once when the server accepts no connection (the client would retry for minutes)."""
        from urllib.parse import urlparse

        parsed = urlparse(self.url.replace("sc://", "http://", 1))
        host, port = parsed.hostname or "localhost", parsed.port or 15002
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as exc:
            raise AirflowException(f"the Spark Connect server {host}:{port} is unreachable ({exc})") from None

    # -- running ----------------------------------------------------------------------------------
    def _run(self, cmd: list[str]) -> int:
        self._lines.clear()
        self.check_reachable()
        self.hook.log.info("Running the application against Spark Connect at %s", self.url.split(";")[0])
        self._proc = subprocess.Popen(cmd, env=self.client_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, bufsize=1, start_new_session=True)
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.rstrip("\n")
            self._lines.append(line)
            self.hook.log.info("%s", line)
        return self._proc.wait()

    def _failure(self, what: str, code: int) -> AirflowException:
        problem = describe_environment("\n".join(self._lines))
        if problem:
            return AirflowException(f"{what} failed: {problem}")
        tail = "\n".join(list(self._lines)[-20:])
        return AirflowException(f"{what}: the Spark Connect client exited with {code}\nLast output:\n{tail}")

    def run_job(self, job: str, table_uri: str, job_args: Sequence[str] = (),
                storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        hook = self.hook
        metrics_out = hook.new_metrics_location(job)
        options = {k: str(v) for k, v in (storage_options or {}).items()}
        try:
            code = self._run(self.command(job, table_uri, job_args, metrics_out, storage_options))
            metrics = try_read_metrics(metrics_out, options)
            if metrics and metrics.get("status") == "failed":
                raise AirflowException(f"delta-maint {job} failed: {metrics.get('error', 'unknown error')}")
            if metrics is None:
                raise self._failure(f"delta-maint {job}", code)
            return metrics
        finally:
            self._proc = None
            with contextlib.suppress(OSError):
                os.unlink(metrics_out)

    def run_fleet(self, spec: Mapping[str, Any], storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        from airflow_delta_maint.app.metrics import write_metrics

        hook = self.hook
        options = {k: str(v) for k, v in (storage_options or {}).items()}
        spec_uri = hook.new_metrics_location("fleet-spec")
        metrics_out = hook.new_metrics_location("fleet")
        write_metrics(spec, spec_uri, options)
        try:
            code = self._run(self.command("fleet", spec_uri, [], metrics_out, storage_options))
            results = try_read_metrics(metrics_out, options)
            if results is None or not isinstance(results.get("tables"), list):
                raise self._failure("delta-maint fleet", code)
            return results
        finally:
            self._proc = None
            for path in (metrics_out, spec_uri):
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def on_kill(self) -> None:
        """Stop the client process (SIGTERM, then SIGKILL): its session ends, and the server cancels its queries."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
