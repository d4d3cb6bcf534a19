"""The engine choice on the Airflow side: operators' ``engine``, ``[delta_maint] engine``, what reaches the
application's command line and the hook, and the bad values refused before anything runs (no Spark here:
the runs themselves are in tests/delta_spark)."""

from __future__ import annotations

import shutil

import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files, write_appends

from airflow_delta_maint.app.execution import choose_execution
from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.operators.fleet import MaintainTablesOperator
from airflow_delta_maint.operators.maintenance import (LogCompactionOperator, OptimizeOperator,
                                                       VacuumOperator)
from tests.airflow.operators.conftest import argv_of


def test_engine_reaches_the_command_line_and_the_hook(small_table):
    op = OptimizeOperator(task_id="o", table_uri=str(small_table), engine="delta-spark", where="part = 'p0'")
    assert argv_of(op)[-2:] == ["--engine", "delta-spark"]
    assert op.job_params()["engine"] == "delta-spark"
    hook = op.get_hook()
    assert hook.engine == "delta-spark" and "io.delta:delta-spark_2.13:4.4.0" in (hook._packages or "")
    native = OptimizeOperator(task_id="n", table_uri=str(small_table))
    assert "--engine" not in argv_of(native) and native.get_hook()._packages is None
    # the log compaction operator hands delta-spark its checkpoint and expired-log cleanup only
    lc = LogCompactionOperator(task_id="c", table_uri=str(small_table), engine="delta-spark", checkpoint_interval=2)
    assert argv_of(lc)[-2:] == ["--engine", "delta-spark"]
    assert lc.get_hook().engine == "delta-spark"



def test_packages_in_the_conf_are_kept_beside_delta_spark(small_table):
    """spark-submit's --packages replaces the conf's spark.jars.packages: the hook puts both in --packages."""
    op = OptimizeOperator(task_id="o", table_uri=str(small_table), engine="delta-spark",
                          conf={"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.5.0"})
    hook = op.get_hook()
    assert hook._packages == "org.apache.hadoop:hadoop-aws:3.5.0,io.delta:delta-spark_2.13:4.4.0"
    assert "spark.jars.packages" not in hook._conf
    # a conf that already names delta-spark is left as it is
    own = OptimizeOperator(task_id="p", table_uri=str(small_table), engine="delta-spark",
                           conf={"spark.jars.packages": "io.delta:delta-spark_2.13:4.4.0"}).get_hook()
    assert own._packages is None and own._conf["spark.jars.packages"] == "io.delta:delta-spark_2.13:4.4.0"


def test_the_deployment_default_comes_from_the_provider_setting(small_table, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__ENGINE", "delta-spark")
    op = VacuumOperator(task_id="v", table_uri=str(small_table), mode="lite")
    assert argv_of(op)[-2:] == ["--engine", "delta-spark"]
    # the explicit native engine reaches the job, against the deployment's default (the application's own default)
    assert VacuumOperator(task_id="w", table_uri=str(small_table), engine="native").job_values()["engine"] == "native"
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__ENGINE", "spark-delta")
    with pytest.raises(AirflowException, match=r"^\[delta_maint\] engine must be one of native, delta-spark, "
                                               r"got 'spark-delta'$"):
        argv_of(op)


def test_bad_engines_are_refused_before_anything_runs(small_table, monkeypatch):
    with pytest.raises(AirflowException, match="^engine must be one of native, delta-spark, got 'duck'$"):
        OptimizeOperator(task_id="o", table_uri=str(small_table), engine="duck")
    with pytest.raises(AirflowException, match="^engine must be one of native, delta-spark, got 'duck'$"):
        MaintainTablesOperator(task_id="m", tables=[str(small_table)], engine="duck")
    before = log_files(small_table)
    # execution "local" cannot run delta-spark; "auto" submits it
    params = OptimizeOperator(task_id="o", table_uri=str(small_table), engine="delta-spark").job_params()
    with pytest.raises(InvalidArgumentError, match=r"^the delta-spark engine needs Spark \(its session\)"):
        choose_execution("local", "optimize", params, str(small_table))
    assert choose_execution("auto", "optimize", params, str(small_table))[0] == "spark"
    op = OptimizeOperator(task_id="p", table_uri=str(small_table), engine="delta-spark", target_files=2)
    with pytest.raises(AirflowException, match="does not take target_files"):
        op.execute(context={})
    assert log_files(small_table) == before


def test_fleet_engine_per_table(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_appends(a, 3)
    shutil.copytree(a, b)
    op = MaintainTablesOperator(task_id="m", engine="delta-spark",
                                tables=[str(a), {"table_uri": str(b), "engine": "native"}],
                                jobs={"optimize": {}, "compact-log": {"interval": 2}, "inspect": {}})
    spec = op.fleet_spec()
    first, second = ([j.args for j in t.jobs] for t in spec.tables)
    assert first == [["--engine", "delta-spark"], ["--interval", "2", "--engine", "delta-spark"], []]
    # native is the application's own default: nothing to say
    assert second == [[], ["--interval", "2"], []]
    assert op.get_hook(spec=spec).engine == "delta-spark"
    native = MaintainTablesOperator(task_id="n", tables=[str(a)], jobs={"optimize": {}})
    assert native.fleet_spec().tables[0].jobs[0].args == [] and native.get_hook(spec=native.fleet_spec()).engine \
        == "native"
    # compact-log's own engine option: who writes its checkpoint (the compaction files are always native)
    own = MaintainTablesOperator(task_id="x", tables=[str(a)], jobs={"compact-log": {"engine": "delta-spark"}})
    assert own.fleet_spec().tables[0].jobs[0].args == ["--engine", "delta-spark"]
    with pytest.raises(AirflowException, match="unknown engine 'duckdb'"):
        MaintainTablesOperator(task_id="x", tables=[str(a)], jobs={"compact-log": {"engine": "duckdb"}}) \
            .fleet_spec()
