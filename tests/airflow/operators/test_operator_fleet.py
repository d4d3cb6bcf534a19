"""Many tables in one application (MaintainTablesOperator, ``delta-maint fleet``) and local execution."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files, write_appends
from deltalake import DeltaTable

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.execution import choose_execution
from airflow_delta_maint.app.fleet import FleetSpec, run_fleet
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.operators.fleet import MaintainTablesOperator, job_options
from airflow_delta_maint.operators.maintenance import InspectTableOperator, LogCompactionOperator, OptimizeOperator

from tests.snapshot_serves import count_snapshot_serves

pytestmark = pytest.mark.timeout(600)


class RecordingTI:
    """The task instance's XCom push, at the unit's edge."""

    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = json.loads(json.dumps(value))  # what XCom would store


def rows(path: Path) -> list[tuple]:
    """The table's rows as delta-rs lists its files (read with pyarrow, not to_pyarrow_table)."""
    out = []
    for uri in DeltaTable(str(path)).file_uris():
        t = pq.read_table(uri.removeprefix("file://"))
        part = Path(uri).parent.name.split("=", 1)[1]
        out += [(i, part, v) for i, v in zip(t.column("id").to_pylist(), t.column("value").to_pylist())]
    return sorted(out)


def compacted(path: Path) -> Path:
    write_appends(path, 6)
    DeltaTable(str(path)).optimize.compact()
    return path


def corrupt_log(path: Path) -> Path:
    write_appends(path, 2)
    (path / "_delta_log" / "00000000000000000002.json").write_text("{not json\n")
    return path


def corrupt_data_file(path: Path) -> Path:
    write_appends(path, 6)
    victim = Path(DeltaTable(str(path)).file_uris()[0].removeprefix("file://"))
    victim.write_bytes(b"PAR1 this is not a parquet file PAR1")
    return path


@pytest.fixture
def recorded(monkeypatch) -> dict[str, list]:
    """Spy on the hook: the fleet specs submitted and each spark-submit (the real ones still run)."""
    calls: dict[str, list] = {"specs": [], "submits": []}
    run_fleet_real, submit_real = DeltaMaintHook.run_fleet, DeltaMaintHook.submit

    def run_fleet_spy(self, spec, storage_options=None):
        calls["specs"].append(json.loads(json.dumps(spec)))
        return run_fleet_real(self, spec, storage_options)

    def submit_spy(self, *args, **kwargs):
        calls["submits"].append(self._application_args[:1])
        return submit_real(self, *args, **kwargs)

    monkeypatch.setattr(DeltaMaintHook, "run_fleet", run_fleet_spy)
    monkeypatch.setattr(DeltaMaintHook, "submit", submit_spy)
    return calls


@pytest.fixture
def in_process_fleet(monkeypatch) -> list[dict]:
    """Run a submitted fleet in this process instead of spark-submit (jobs that need no Spark only)."""
    specs: list[dict] = []

    def run(self, spec, storage_options=None):
        specs.append(json.loads(json.dumps(spec)))
        entries = run_fleet(FleetSpec.from_json(spec))
        return {"status": "committed", "tables": entries}

    monkeypatch.setattr(DeltaMaintHook, "run_fleet", run)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    return specs


# -- end to end: one spark-submit for the tables with work ------------------------------------------
@pytest.mark.e2e
def test_fleet_maintains_the_others_and_names_the_failed_tables(tmp_path, recorded):
    hot = [tmp_path / f"hot{i}" for i in range(2)]
    for path in hot:
        write_appends(path, 6)
    done = compacted(tmp_path / "done")
    bad_log = corrupt_log(tmp_path / "bad_log")
    bad_data = corrupt_data_file(tmp_path / "bad_data")
    twins = {name: tmp_path / name for name in ("via_spark", "via_local")}
    for path in twins.values():
        write_appends(path, 7)
    before = {p: rows(p) for p in (*hot, done)}
    logs_before = {p: log_files(p) for p in (done, bad_log, bad_data)}

    op = MaintainTablesOperator(
        task_id="fleet",
        tables=[*map(str, hot), str(done), str(bad_log), str(bad_data),
                {"table_uri": str(twins["via_spark"]), "jobs": {"compact-log": {"interval": 5}, "inspect": {}}}],
        jobs={"optimize": {}, "vacuum": {"mode": "lite"}},
        spark_submit_kwargs={"fast_jvm_start": True, "cache_dir": str(tmp_path / "cache")},
    )
    ti = RecordingTI()
    with pytest.raises(AirflowException) as failure:
        op.execute(context={"ti": ti})

    # one application, for the tables with work only
    assert len(recorded["submits"]) == 1 and recorded["submits"][0] == ["fleet"]
    (spec,) = recorded["specs"]
    assert [t["table"] for t in spec["tables"]] == [*map(str, hot), str(bad_data), str(twins["via_spark"])]
    assert all([j["job"] for j in t["jobs"]] == ["optimize"] for t in spec["tables"][:3])  # lite VACUUM: nothing

    # the failure names both broken tables, and only them
    message = str(failure.value)
    assert "2 of 6 tables failed" in message and str(bad_log) in message and str(bad_data) in message
    for path in (*hot, done):
        assert f"{path} (" not in message

    # the driver JVM dumped its class-data-sharing archive for the next runs
    assert [p.name.startswith("spark-driver-") for p in (tmp_path / "cache").glob("*.jsa")] == [True]
    assert not list((tmp_path / "cache").glob(".spark-driver-*"))

    # every table has an entry, in order, pushed before the task failed
    results = ti.pushed["return_value"]
    assert [e["table"] for e in results] == [*map(str, hot), str(done), str(bad_log), str(bad_data),
                                             str(twins["via_spark"])]
    by_table = {e["table"]: e for e in results}
    for path in hot:
        entry = by_table[str(path)]
        assert entry["status"] == "committed"
        optimize, vacuum = entry["jobs"]
        assert optimize["status"] == "committed" and optimize["numRemovedFiles"] == 12
        assert optimize["numAddedFiles"] == 2
        assert vacuum["status"] == "skipped" and vacuum["operation"] == "vacuum"
        assert rows(path) == before[path]  # same rows, read by delta-rs
    assert by_table[str(done)]["status"] == "skipped"
    assert "nothing to compact" in by_table[str(done)]["jobs"][0]["reason"]
    assert rows(done) == before[done]
    assert by_table[str(bad_log)]["status"] == "failed" and "not valid JSON" in by_table[str(bad_log)]["error"]
    assert by_table[str(bad_log)]["jobs"][1]["reason"] == "not run: optimize failed on this table"
    assert by_table[str(bad_data)]["status"] == "failed" and by_table[str(bad_data)]["jobs"][0]["error"]
    for path in (done, bad_log, bad_data):
        assert log_files(path) == logs_before[path]  # nothing committed on them

    # local execution gives the same metrics as the application: compact-log and inspect
    local = [LogCompactionOperator(task_id="c", table_uri=str(twins["via_local"]), interval=5,
                                   execution="local").execute(context={}),
             InspectTableOperator(task_id="i", table_uri=str(twins["via_local"]), execution="local").execute(context={})]
    remote = by_table[str(twins["via_spark"])]["jobs"]
    for spark_metrics, local_metrics in zip(remote, local):
        assert set(spark_metrics) == set(local_metrics)
        volatile = {"table", "started_at", "duration_s", "cpu_s", "cpu_driver_s", "timestamp", "path", "checkpoint", "log",
                    "last_modified", "windows_written"}
        assert _stable(spark_metrics, volatile, str(twins["via_spark"])) == \
            _stable(local_metrics, volatile, str(twins["via_local"]))
    assert remote[0]["numWindowsWritten"] == 1 and remote[0]["status"] == "committed"


def _stable(metrics: dict, volatile: set[str], table: str) -> str:
    """The metrics without times and with the table's path replaced, as comparable JSON."""
    text = json.dumps({k: v for k, v in metrics.items() if k not in volatile}, sort_keys=True, default=str)
    return text.replace(table, "TABLE")


@pytest.mark.e2e
def test_local_and_spark_execution_give_the_same_compact_log_metrics(tmp_path, recorded):
    a, b = tmp_path / "a", tmp_path / "b"
    write_appends(a, 11)
    write_appends(b, 11)
    via_spark = LogCompactionOperator(task_id="c", table_uri=str(a), interval=5, checkpoint_interval=8,
                                      execution="spark").execute(context={})
    assert len(recorded["submits"]) == 1
    via_local = LogCompactionOperator(task_id="c", table_uri=str(b), interval=5, checkpoint_interval=8,
                                      execution="local").execute(context={})
    assert len(recorded["submits"]) == 1  # no second application
    assert set(via_spark) == set(via_local)
    volatile = {"table", "started_at", "duration_s", "cpu_s", "cpu_driver_s"}
    windows = [(w["start"], w["end"], w["numActions"]) for w in via_spark["windows_written"]]
    assert windows == [(w["start"], w["end"], w["numActions"]) for w in via_local["windows_written"]]
    assert via_spark["checkpoint"]["version"] == via_local["checkpoint"]["version"] == 10
    for key in set(via_spark) - volatile - {"windows_written", "checkpoint"}:
        assert via_spark[key] == via_local[key], key
    assert rows(a) == rows(b)


# -- in process: the decision on the worker ---------------------------------------------------------
def test_only_the_tables_with_work_are_submitted_once(tmp_path, in_process_fleet):
    tables = []
    for i in range(5):
        path = tmp_path / f"t{i}"
        write_appends(path, 6 if i in (1, 3) else 4)  # a 5-commit window is due on t1 and t3 only
        tables.append(str(path))
    op = MaintainTablesOperator(task_id="fleet", tables=tables, jobs={"compact-log": {"interval": 5}})
    results = op.execute(context={"ti": RecordingTI()})
    assert len(in_process_fleet) == 1
    assert [t["table"] for t in in_process_fleet[0]["tables"]] == [tables[1], tables[3]]
    assert [e["status"] for e in results] == ["skipped", "committed", "skipped", "committed", "skipped"]
    assert all(len(e["jobs"]) == 1 and e["jobs"][0]["operation"] == "compact-log" for e in results)
    assert "no log compaction window" in results[0]["jobs"][0]["reason"]

    again = MaintainTablesOperator(task_id="fleet", tables=tables, jobs={"compact-log": {"interval": 5}})
    assert {e["status"] for e in again.execute(context={"ti": RecordingTI()})} == {"skipped"}
    assert len(in_process_fleet) == 1  # nothing to do: no application at all


def test_bad_job_options_fail_before_anything(tmp_path, in_process_fleet):
    write_appends(tmp_path / "t", 6)
    before = log_files(tmp_path / "t")
    for jobs, match in (({"compact-log": {"interval": "many"}}, "invalid options for compact-log"),
                        ({"defragment": {}}, "unknown job 'defragment'"),
                        ({"vacuum": {"mode": "sideways"}}, "invalid options for vacuum")):
        op = MaintainTablesOperator(task_id="fleet", tables=[str(tmp_path / "t")], jobs=jobs)
        with pytest.raises(AirflowException, match=match):
            op.execute(context={"ti": RecordingTI()})
    assert not in_process_fleet and log_files(tmp_path / "t") == before


def test_fleet_refuses_secret_storage_options():
    with pytest.raises(AirflowException, match="secret"):
        MaintainTablesOperator(task_id="fleet", tables=["s3://b/t"], storage_options={"AWS_SECRET_ACCESS_KEY": "x"})
    op = MaintainTablesOperator(task_id="fleet", tables=[{"table_uri": "s3://b/t",
                                                           "storage_options": {"aws_session_token": "x"}}])
    with pytest.raises(AirflowException, match="secret"):
        op.fleet_spec()


def test_job_options_as_flags():
    assert job_options({"min_file_size": 1000, "dry_run": True, "full": False, "zorder_by": ["a", "b"],
                        "where": None}) == ["--min-file-size", "1000", "--dry-run", "--zorder-by", "a,b"]


def test_former_option_names_in_the_jobs_mapping_are_taken_with_a_deprecation_warning():
    from airflow.exceptions import AirflowProviderDeprecationWarning

    op = MaintainTablesOperator(task_id="fleet", tables=["/t"], jobs={
        "optimize": {"auto": True, "predicate": "p = 1", "max_file_size": 5},
        "cleanup-log": {"retention": "interval 1 day"},
        "compact-log": {"checkpoint_engine": "delta-spark"}})
    with pytest.warns(AirflowProviderDeprecationWarning) as warned:
        spec = op.fleet_spec()
    assert [j.args for j in spec.tables[0].jobs] == [
        ["--where", "p = 1", "--target-file-size", "5", "--policy", "auto"], ["--retention-hours", "24"],
        ["--engine", "delta-spark"]]
    assert sorted(str(w.message).split(" is deprecated")[0] for w in warned) == [
        "cleanup-log: retention", "compact-log: checkpoint_engine", "optimize: auto", "optimize: max_file_size",
        "optimize: predicate"]
    assert op.get_hook(spec=spec).engine == "delta-spark"
    with pytest.raises(AirflowException, match="invalid log retention 'soon'"), \
            pytest.warns(AirflowProviderDeprecationWarning):
        MaintainTablesOperator(task_id="fleet", tables=["/t"], jobs={"cleanup-log": {"retention": "soon"}}).fleet_spec()


def test_fleet_command_line_names_the_failed_table(tmp_path, capsys):
    good = tmp_path / "good"
    write_appends(good, 6)
    bad = corrupt_log(tmp_path / "bad")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tables": [{"table": str(bad), "jobs": [{"job": "compact-log"}]},
                                           {"table": str(good), "jobs": [{"job": "compact-log",
                                                                           "args": ["--interval", "5"]}]}]}))
    code, result = cli.run(["fleet", str(spec), "--metrics-out", str(tmp_path / "out.json")])
    assert code == 2
    assert [e["status"] for e in result["tables"]] == ["failed", "committed"]
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(json.dumps(result, default=str))
    assert f"failed tables: {bad}" in capsys.readouterr().err
    spec.write_text(json.dumps({"tables": [{"table": str(good), "jobs": [{"job": "optimize",
                                                                          "args": ["--bogus"]}]}]}))
    code, result = cli.run(["fleet", str(spec)])
    assert code == 2 and "invalid options for optimize" in result["error"]


# -- local execution ----------------------------------------------------------------------------------
def test_execution_choice(tmp_path):
    write_appends(tmp_path / "t", 3)
    t = str(tmp_path / "t")
    assert choose_execution("auto", "compact-log", {}, t)[0] == "local"
    assert choose_execution("auto", "vacuum", {"mode": "lite"}, t)[0] == "local"
    assert choose_execution("auto", "vacuum", {"mode": "full"}, t)[0] == "local"
    assert choose_execution("auto", "optimize", {}, t)[0] == "local"
    where, why = choose_execution("auto", "optimize", {}, t, max_rewrite_bytes=10)
    assert where == "spark" and "more than 10 for a run on the worker" in why
    assert choose_execution("auto", "optimize", {"zorder_by": "id"}, t) == ("spark", "Z-order needs Spark")
    where, why = choose_execution("auto", "inspect", {}, t, max_log_bytes=100)
    assert where == "spark" and "more than 100" in why
    assert choose_execution("spark", "inspect", {}, t)[0] == "spark"
    op = OptimizeOperator(task_id="o", table_uri=t, execution="local", zorder_by="id", skip_if_nothing_to_do=False)
    with pytest.raises(AirflowException, match="Z-order needs Spark \\(a shuffle\\); run it with execution 'spark'"):
        op.execute(context={})
    with pytest.raises(AirflowException, match="execution must be one of"):
        InspectTableOperator(task_id="i", table_uri=t, execution="laptop")


def test_auto_optimizes_and_vacuums_a_small_table_on_the_worker(tmp_path, monkeypatch):
    """A small OPTIMIZE and a full VACUUM under ``execution="auto"`` run in this process, rows unchanged."""
    from deltalake import DeltaTable

    from airflow_delta_maint.operators.maintenance import VacuumOperator

    write_appends(tmp_path / "t", 8)
    t = str(tmp_path / "t")
    ids = sorted(DeltaTable(t).to_pyarrow_table().column("id").to_pylist())
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    op = OptimizeOperator(task_id="o", table_uri=t, execution="auto")
    where, why = op.choose_execution()
    assert where == "local" and "bytes to rewrite (at most 1073741824)" in why
    m = op.execute(context={})
    assert m["status"] == "committed" and m["numRemovedFiles"] == 16 and m["numAddedFiles"] == 2
    v = VacuumOperator(task_id="v", table_uri=t, retention_hours=0, ignore_retention_check=True,
                       execution="auto").execute(context={})
    assert v["status"] == "committed" and v["numDeletedFiles"] == 16
    assert sorted(DeltaTable(t).to_pyarrow_table().column("id").to_pylist()) == ids


def test_the_configured_execution_is_the_default(tmp_path, monkeypatch):
    """``[delta_maint] execution`` decides where operators without their own ``execution`` run."""
    write_appends(tmp_path / "t", 4)
    t = str(tmp_path / "t")
    assert OptimizeOperator(task_id="o", table_uri=t).choose_execution() == ("spark", "execution 'spark'")
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__EXECUTION", "auto")
    assert OptimizeOperator(task_id="o", table_uri=t).choose_execution()[0] == "local"
    assert OptimizeOperator(task_id="o", table_uri=t, execution="spark").choose_execution()[0] == "spark"
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__EXECUTION", "laptop")
    with pytest.raises(AirflowException, match=r"^\[delta_maint\] execution must be one of spark, local, auto, got 'laptop'$"):
        OptimizeOperator(task_id="o", table_uri=t).choose_execution()
    monkeypatch.setattr(DeltaMaintHook, "run_fleet", lambda *a, **k: pytest.fail("an application was submitted"))
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__EXECUTION", "local")  # a fleet takes it as auto
    results = MaintainTablesOperator(task_id="fleet", tables=[t], jobs={"optimize": {}}).execute(
        context={"ti": RecordingTI()})
    assert results[0]["jobs"][0]["status"] == "committed"


def test_local_failure_reads_as_a_spark_failure(tmp_path, monkeypatch):
    bad = corrupt_log(tmp_path / "bad")
    before = log_files(bad)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    op = InspectTableOperator(task_id="i", table_uri=str(bad), execution="local")
    with pytest.raises(AirflowException, match=r"^delta-maint inspect failed: corrupt log file .*not valid JSON"):
        op.execute(context={})
    assert log_files(bad) == before


@pytest.fixture
def s3_lake(tmp_path_factory, monkeypatch):
    """A moto S3 bucket ``lake`` and the Airflow connection ``lake_s3`` to it (no store variable in the
    environment): yields (the options a writer uses, the key id, the secret)."""
    import boto3

    from tests.storage.servers import start_moto

    server = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        key_id, secret = "AKIDLOCALRUN", "local-run-secret-5b1d7e"
        boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id=key_id,
                     aws_secret_access_key=secret).create_bucket(Bucket="lake")
        for key in [k for k in __import__("os").environ if k.startswith(("AWS_", "AZURE_", "GOOGLE_"))]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({
            "conn_type": "aws", "login": key_id, "password": secret,
            "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint}}))
        options = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                   "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
        yield options, key_id, secret
    finally:
        server.stop()


def test_local_execution_keeps_the_connections_secret(s3_lake, monkeypatch, caplog, capsys):
    """On S3 with a connection: the job runs in this process, the secret in no log, output, XCom or field."""
    options, key_id, secret = s3_lake
    uri = "s3://lake/events"
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(6):
        write_deltalake(uri, pa.table({"id": [i], "part": ["p"]}), mode="append", storage_options=options)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    caplog.set_level(logging.DEBUG)
    op = LogCompactionOperator(task_id="c", table_uri=uri, interval=5, storage_conn_id="lake_s3",
                               storage_options={"AWS_ALLOW_HTTP": "true"}, execution="auto")
    metrics = op.execute(context={})
    assert metrics["status"] == "committed" and metrics["numWindowsWritten"] == 1
    # OPTIMIZE and full VACUUM run on the worker's threads with the same connection
    import subprocess as subprocess_module

    from airflow_delta_maint.operators.maintenance import VacuumOperator

    monkeypatch.setattr(subprocess_module, "Popen", lambda *a, **k: pytest.fail(f"a process was started: {a}"))
    common = {"table_uri": uri, "storage_conn_id": "lake_s3", "storage_options": {"AWS_ALLOW_HTTP": "true"},
              "execution": "auto"}
    optimize_op = OptimizeOperator(task_id="o", lease_seconds=0, **common)
    optimized = optimize_op.execute(context={})
    assert optimized["status"] == "committed" and optimized["numRemovedFiles"] == 6
    vacuum_op = VacuumOperator(task_id="v", retention_hours=0, ignore_retention_check=True, **common)
    vacuumed = vacuum_op.execute(context={})
    assert vacuumed["status"] == "committed" and vacuumed["numDeletedFiles"] == 6
    out = capsys.readouterr()
    for task, result in ((op, metrics), (optimize_op, optimized), (vacuum_op, vacuumed)):
        fields = {name: getattr(task, name) for name in task.template_fields}
        for text in (json.dumps(result, default=str), json.dumps(fields, default=str)):
            assert secret not in text
    for text in (caplog.text, out.out, out.err):
        assert secret not in text
    assert "in this process" in caplog.text + out.out + out.err


def test_fleet_spec_holds_no_secret(tmp_path, monkeypatch, in_process_fleet):
    """The credentials reach the application by its environment; the spec file has only the table options."""
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({
        "conn_type": "aws", "login": "AKIDFLEET", "password": "fleet-secret-91c2", "extra": {"region_name": "eu"}}))
    written: list[bytes] = []
    real_submit_env = DeltaMaintHook.submit_env

    def capture(self, spec, storage_options=None):
        self.build_command("fleet", "/tmp/spec.json", [], "/tmp/out.json", storage_options)
        written.append(json.dumps(spec).encode() + json.dumps(self._application_args).encode())
        env = real_submit_env(self)
        assert env["AWS_SECRET_ACCESS_KEY"] == "fleet-secret-91c2"
        return {"tables": [{"table": t["table"], "jobs": [{"operation": "inspect", "table": t["table"],
                                                            "status": "committed"}]} for t in spec["tables"]]}

    monkeypatch.setattr(DeltaMaintHook, "run_fleet", capture)
    op = MaintainTablesOperator(task_id="fleet", tables=["s3://lake/a", "s3://lake/b"], jobs={"inspect": {}},
                                storage_conn_id="lake_s3", storage_options={"AWS_REGION": "eu"},
                                skip_if_nothing_to_do=False)
    results = op.execute(context={"ti": RecordingTI()})
    assert [e["status"] for e in results] == ["committed", "committed"]
    assert "fleet-secret-91c2" not in json.dumps(results)
    assert written and b"fleet-secret-91c2" not in written[0] and b"AKIDFLEET" not in written[0]


def test_a_missing_table_does_not_stop_the_next(tmp_path):
    """In the application: a table that fails is reported, the next is maintained with its rows unchanged."""
    src = tmp_path / "src"
    write_appends(src, 6)
    shutil.copytree(src, tmp_path / "copy")
    entries = run_fleet(FleetSpec.from_json({"tables": [
        {"table": str(tmp_path / "missing"), "jobs": [{"job": "inspect"}]},
        {"table": str(tmp_path / "copy"), "jobs": [{"job": "compact-log", "args": ["--interval", "5"]}]}]}))
    assert [e["status"] for e in entries] == ["failed", "committed"]
    assert "does not exist" in entries[0]["error"]
    assert rows(tmp_path / "copy") == rows(src)


def test_fleet_of_driver_only_work_runs_on_the_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(DeltaMaintHook, "run_fleet", lambda *a, **k: pytest.fail("an application was submitted"))
    tables = []
    for i in range(3):
        write_appends(tmp_path / f"t{i}", 6)
        tables.append(str(tmp_path / f"t{i}"))
    before = {t: rows(Path(t)) for t in tables}
    op = MaintainTablesOperator(task_id="fleet", tables=tables, execution="auto",
                                jobs={"compact-log": {"interval": 5}, "vacuum": {"mode": "lite"}})
    results = op.execute(context={"ti": RecordingTI()})
    assert [e["status"] for e in results] == ["committed"] * 3
    assert all(e["jobs"][0]["numWindowsWritten"] == 1 and e["jobs"][1]["status"] == "skipped" for e in results)
    assert {t: rows(Path(t)) for t in tables} == before
    assert MaintainTablesOperator(task_id="f", tables=[], execution="auto").execute(context={}) == []


def test_default_jobs_give_statistics_to_the_files_optimize_leaves(tmp_path, monkeypatch):
    """compute-stats runs after OPTIMIZE by default: on one table OPTIMIZE rewrites every file without
    statistics (new ones, with statistics), so compute-stats finds nothing left; on the other OPTIMIZE has
    nothing to compact and compute-stats gives the files their statistics back. Rows unchanged."""
    monkeypatch.setattr(DeltaMaintHook, "run_fleet", lambda *a, **k: pytest.fail("an application was submitted"))
    small, single = tmp_path / "small", tmp_path / "single"
    write_appends(small, 6)
    write_appends(single, 1)
    for path in (small, single):
        for name in sorted((path / "_delta_log").glob("*.json")):
            actions = [json.loads(line) for line in name.read_text().splitlines() if line.strip()]
            for action in actions:
                action.get("add", {}).pop("stats", None)
            name.write_text("".join(json.dumps(a) + "\n" for a in actions))
    before = {p: rows(p) for p in (small, single)}
    results = MaintainTablesOperator(task_id="fleet", tables=[str(small), str(single)], execution="auto"
                                     ).execute(context={"ti": RecordingTI()})
    by_table = {e["table"]: {m["operation"]: m for m in e["jobs"]} for e in results}
    assert list(by_table[str(small)]) == ["optimize", "compute-stats", "compact-log", "vacuum"]
    small_jobs, single_jobs = by_table[str(small)], by_table[str(single)]
    assert small_jobs["optimize"]["status"] == "committed"
    assert small_jobs["compute-stats"]["status"] == "skipped", small_jobs["compute-stats"]
    assert single_jobs["optimize"]["status"] == "skipped"
    assert (single_jobs["compute-stats"]["status"], single_jobs["compute-stats"]["numFilesUpdated"]) == ("committed", 2)
    for path in (small, single):
        assert all(json.loads(a["stats"])["numRecords"] > 0 for a in _adds(path))
    assert {p: rows(p) for p in (small, single)} == before


def _adds(path: Path) -> list[dict]:
    from airflow_delta_maint.delta.log.snapshot import Snapshot

    return Snapshot.load(str(path)).add_actions()


def test_fleet_of_small_rewrites_runs_on_the_worker_and_z_order_is_submitted(tmp_path, monkeypatch):
    """auto: small OPTIMIZEs and full VACUUMs stay on the worker; a Z-order (a shuffle) goes to Spark."""
    class Submitted(Exception):
        pass

    def submit(*args, **kwargs):
        raise Submitted

    monkeypatch.setattr(DeltaMaintHook, "run_fleet", submit)
    tables = []
    for i in range(3):
        write_appends(tmp_path / f"t{i}", 6)
        tables.append(str(tmp_path / f"t{i}"))
    before = {t: rows(Path(t)) for t in tables}
    jobs = {"optimize": {}, "vacuum": {"retention_hours": 0, "ignore_retention_check": True}}
    results = MaintainTablesOperator(task_id="fleet", tables=tables, execution="auto",
                                     jobs=jobs).execute(context={"ti": RecordingTI()})
    assert [[j["status"] for j in e["jobs"]] for e in results] == [["committed", "committed"]] * 3
    assert all(e["jobs"][0]["numRemovedFiles"] == 12 and e["jobs"][1]["numDeletedFiles"] == 12 for e in results)
    assert {t: rows(Path(t)) for t in tables} == before
    write_appends(tmp_path / "t0", 6, start=6)
    with pytest.raises(Submitted):
        MaintainTablesOperator(task_id="fleet", tables=tables[:1], execution="auto",
                               jobs={"optimize": {"zorder_by": "id"}}).execute(context={"ti": RecordingTI()})


def test_fast_jvm_start_options(tmp_path):
    hook = DeltaMaintHook(fast_jvm_start=True, cache_dir=tmp_path, conf={"spark.driver.extraJavaOptions": "-Dx=1"})
    cmd = " ".join(hook.build_command("inspect", "/t", [], "/tmp/m.json"))
    assert "spark.driver.extraJavaOptions=-Dx=1 -XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit=" in cmd
    tmp, archive = hook._cds_dump
    tmp.write_bytes(b"archive")
    hook._finish_fast_start()  # the dump is moved in place, whole
    assert archive.read_bytes() == b"archive" and not tmp.exists()
    again = DeltaMaintHook(fast_jvm_start=True, cache_dir=tmp_path)
    cmd = " ".join(again.build_command("inspect", "/t", [], "/tmp/m.json"))
    assert f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive}" in cmd
    assert "extraJavaOptions" not in " ".join(DeltaMaintHook(cache_dir=tmp_path).build_command("inspect", "/t"))


def test_a_local_run_imports_no_pyspark(tmp_path):
    """Running jobs on the worker (driver-only ones, an OPTIMIZE and a full VACUUM, and a fleet)
    loads neither pyspark nor py4j."""
    import subprocess
    import sys

    write_appends(tmp_path / "t", 6)
    code = (
        "import json, sys\n"
        "from airflow_delta_maint.app.execution import run_in_process\n"
        "from airflow_delta_maint.app.fleet import FleetSpec, run_fleet\n"
        "import airflow_delta_maint.operators.fleet\n"
        f"code, m = run_in_process('compact-log', {str(tmp_path / 't')!r}, ['--interval', '5'])\n"
        f"assert run_in_process('optimize', {str(tmp_path / 't')!r}, [])[1]['status'] == 'committed'\n"
        f"assert run_in_process('vacuum', {str(tmp_path / 't')!r}, ['--retention-hours', '0', "
        "'--ignore-retention-check'])[1]['status'] == 'committed'\n"
        f"e = run_fleet(FleetSpec.from_json({{'tables': [{{'table': {str(tmp_path / 't')!r}, 'jobs': [\n"
        "    {'job': 'inspect'}, {'job': 'vacuum', 'args': ['--mode', 'lite']}]}]}), spark_allowed=False)\n"
        "print(json.dumps([m['status'], e[0]['status'], sorted({k.split('.')[0] for k in sys.modules})]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    job_status, fleet_status, loaded = json.loads(out.strip().splitlines()[-1])
    assert job_status == "committed" and fleet_status == "skipped"
    assert "pyspark" not in loaded and "py4j" not in loaded


def test_a_budget_keeps_the_runs_that_gain_most_and_defers_the_rest(tmp_path, monkeypatch):
    import airflow_delta_maint.operators.fleet as fleet_operator
    from airflow_delta_maint.delta.health.run_log import read_runs

    specs: list[FleetSpec] = []

    def local_run(spec, **kwargs):
        specs.append(spec)
        return run_fleet(spec, **kwargs)

    monkeypatch.setattr(fleet_operator, "run_fleet", local_run)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    tables = []
    for i, appends in enumerate((12, 6, 3)):
        write_appends(tmp_path / f"t{i}", appends)
        tables.append(str(tmp_path / f"t{i}"))
    before = {t: rows(Path(t)) for t in tables}
    history = str(tmp_path / "history")
    ti = RecordingTI()
    op = MaintainTablesOperator(task_id="fleet", tables=tables, jobs={"optimize": {}}, history_uri=history,
                                budget={"max_tables": 2, "cpu_s": 1000}, execution="auto",
                                gain_weights={"files_removed": "2"})  # as a rendered template gives it
    results = op.execute(context={"ti": ti})
    assert [e["jobs"][0]["status"] for e in results] == ["committed", "committed", "skipped"]
    deferred = results[2]["jobs"][0]
    assert deferred["deferred"] is True and deferred["reason"].startswith("deferred: over the budget's max_tables")
    assert deferred["predicted_cpu_s"] > 0 and deferred["estimate"]["gain"]["files_removed"] > 0
    plan = ti.pushed["lake_plan"]
    assert [p["table"] for p in plan["chosen"]] == tables[:2] and [p["table"] for p in plan["deferred"]] == tables[2:]
    assert plan["gain_weights"]["files_removed"] == 2.0 and plan["gain_weights"]["log_files_not_replayed"] == 0.5
    (spec,) = specs  # the run keeps the CPU budget left after the worker's planning
    assert spec.budget is not None and 0 < spec.budget["cpu_s"] < 1000
    assert all(j.expect["predicted_cpu_s"] > 0 for t in spec.tables for j in t.jobs)
    assert all(m["cpu_s"] > 0 and m["predicted_cpu_s"] > 0 for e in results[:2] for m in e["jobs"])
    assert {t: rows(Path(t)) for t in tables} == before
    waiting = [r for r in read_runs(history).to_pylist() if json.loads(r["metrics"]).get("deferred")]
    assert [(r["table_uri"], r["operation"]) for r in waiting] == [(tables[2], "optimize")]
    with pytest.raises(AirflowException, match="fleet: budget: unknown limit cpu"):
        MaintainTablesOperator(task_id="fleet", tables=tables, budget={"cpu": 1})
    with pytest.raises(AirflowException, match="fleet: gain_weights: unknown gain files "):
        MaintainTablesOperator(task_id="fleet", tables=tables, budget={"cpu_s": 1}, gain_weights={"files": 1})


def test_a_budgeted_night_keeps_the_connections_secret(s3_lake, monkeypatch, caplog, capsys):
    """On S3 with a connection: the plan in XCom, the deferred results, the fields and the task's log hold no
    secret of the tables' connection."""
    import pyarrow as pa
    from deltalake import write_deltalake

    options, key_id, secret = s3_lake
    tables = ["s3://lake/busy", "s3://lake/quiet"]
    for uri, appends in zip(tables, (6, 3)):
        for i in range(appends):
            write_deltalake(uri, pa.table({"id": [i, i + 100], "part": ["p", "q"]}), mode="append",
                            partition_by=["part"], storage_options=options)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    ti = RecordingTI()
    caplog.set_level(logging.DEBUG)
    op = MaintainTablesOperator(task_id="fleet", tables=tables, jobs={"optimize": {"lease_seconds": 0}},
                                storage_conn_id="lake_s3", storage_options={"AWS_ALLOW_HTTP": "true"},
                                budget={"max_tables": 1}, execution="auto")
    results = op.execute(context={"ti": ti})
    assert [e["jobs"][0]["status"] for e in results] == ["committed", "skipped"]
    assert results[1]["jobs"][0]["deferred"] is True and ti.pushed["lake_plan"]["deferred"]
    fields = {name: getattr(op, name) for name in op.template_fields}
    out = capsys.readouterr()
    seen = json.dumps(results) + json.dumps(ti.pushed) + json.dumps(fields, default=str) + caplog.text + out.out \
        + out.err
    assert secret not in seen and key_id not in seen


def test_a_night_from_the_plans_reads_keeps_the_connections_secret(s3_lake, tmp_path, monkeypatch, caplog, capsys):
    """On S3 with a connection, the night's kept snapshots serve the chosen jobs and its runs land in the history
    in one append: no process is started (no argument can carry the secret), and neither the task's log, XCom,
    the fields nor the history's rows hold it."""
    import subprocess as subprocess_module

    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_delta_maint.delta.health.run_log import read_runs
    from airflow_delta_maint.delta.log import snapshot_cache

    options, key_id, secret = s3_lake
    tables = ["s3://lake/one", "s3://lake/two"]
    for uri in tables:
        for i in range(4):
            write_deltalake(uri, pa.table({"id": [i, i + 100], "part": ["p", "q"]}), mode="append",
                            partition_by=["part"], storage_options=options)
    served = count_snapshot_serves(monkeypatch)
    from airflow_delta_maint.delta.storage.store import Storage

    remembering, remember = [], Storage.remembering_listings

    def remembered(storage: Storage) -> Storage:  # the look's store, keeping its listings
        remembering.append(storage.root)
        return remember(storage)

    monkeypatch.setattr(Storage, "remembering_listings", remembered)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    monkeypatch.setattr(subprocess_module, "Popen", lambda *a, **k: pytest.fail(f"a process was started: {a}"))
    history = tmp_path / "history"
    ti = RecordingTI()
    caplog.set_level(logging.DEBUG)
    # the log's cleanup too: the night's look plans it on S3 with the connection's secret
    op = MaintainTablesOperator(task_id="fleet", tables=tables, jobs={"optimize": {"lease_seconds": 0}, "cleanup-log": {}},
                                storage_conn_id="lake_s3", storage_options={"AWS_ALLOW_HTTP": "true"},
                                history_uri=str(history), budget={"cpu_s": 600}, execution="auto")
    results = op.execute(context={"ti": ti})
    assert [e["jobs"][0]["status"] for e in results] == ["committed", "committed"]
    assert {e["jobs"][1]["reason"] for e in results} == {"nothing to gain, by the estimate from the log"}
    assert sorted(set(served)) == sorted(tables)  # each chosen job started from the plan's read
    assert sorted(remembering) == sorted(tables)  # the look listed each log once for all its parts
    assert {e["jobs"][0]["history"]["version"] for e in results} == {1}  # one append for the night's runs
    recorded = read_runs(str(history)).to_pylist()
    fields = {name: getattr(op, name) for name in op.template_fields}
    out = capsys.readouterr()
    seen = json.dumps(results) + json.dumps(ti.pushed, default=str) + json.dumps(fields, default=str) \
        + json.dumps(recorded, default=str) + caplog.text + out.out + out.err
    assert secret not in seen and key_id not in seen
    assert snapshot_cache.kept_snapshots() is None  # nothing kept once the task is done
