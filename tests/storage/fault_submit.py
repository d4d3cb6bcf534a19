"""A fault test's job through a real spark-submit of the bundled application, as the operators submit it:
:class:`~airflow_delta_maint.hooks.delta_maint.DeltaMaintHook` on a ``local[2]`` master (an Airflow connection
from an ``AIRFLOW_CONN_*`` variable), the store's endpoint at the fault proxy, so the driver's and the Spark
tasks' requests all go through it. The credentials reach spark-submit through its environment only, never its
command line; the other storage options are application arguments."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# in-process Airflow (the hook's connection lookup) must not touch a real Airflow home; imported here, before any
# test runs, Airflow configures logging once and leaves the test's log capture alone
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-delta-maint-tests-"))

from airflow.sdk.exceptions import AirflowException  # noqa: E402

from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook  # noqa: E402

#: the Spark connection the submissions use
CONN_ID = "spark_faults"
CONNECTION = json.dumps({"conn_type": "spark", "host": "local[2]"})
#: the storage options that are credentials, and the variable each goes to spark-submit in
SECRET_VARIABLES = {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
                    "account_key": "AZURE_STORAGE_ACCOUNT_KEY"}


def split_credentials(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(spark-submit's environment, the application's storage options): the credentials go to the first."""
    env = {SECRET_VARIABLES[k]: v for k, v in options.items() if k in SECRET_VARIABLES}
    return env, {k: v for k, v in options.items() if k not in SECRET_VARIABLES}


def submit(job: str, uri: str, argv: list[str], options: Mapping[str, str], cache_dir: Path) -> tuple[int, dict]:
    """Submit ``job`` and wait for it; (0, its metrics), or (spark-submit's exit code, the failure as metrics hold
    it: ``status``, ``error``, ``table``) when the hook raised the application's one-line error.
    ``AIRFLOW_CONN_SPARK_FAULTS`` must hold :data:`CONNECTION`."""
    env, plain = split_credentials(options)
    hook = DeltaMaintHook(conn_id=CONN_ID, env_vars=env, cache_dir=cache_dir, fast_jvm_start=True)
    command = hook.build_command(job, uri, argv, "metrics.json", plain)
    leaked = [i for i, part in enumerate(command) if any(secret in part for secret in env.values())]
    assert env and not leaked, f"a credential is in spark-submit's arguments {leaked}"
    try:
        return 0, hook.run_job(job, uri, argv, storage_options=plain)
    except AirflowException as exc:
        text, prefix = str(exc), f"delta-maint {job} failed: "
        assert text.startswith(prefix), text  # the application's own error, not a crash without metrics
        failed: dict[str, Any] = {"status": "failed", "error": text[len(prefix):], "table": uri}
        code = hook.submit_exit_code
        assert code is not None, text
        return code, failed
