"""Every job on object stores: S3 (moto) and Azure Blob (Azurite), servers on 127.0.0.1 started by the tests
(GCS, which fake-gcs-server serves for reading only, is in test_gcs.py).

delta-rs writes a table of many small files; the jobs run through the CLI in-process, configured the way a
shell configures delta-rs (environment variables) or with ``--storage-option``; delta-rs reads the table back
and the rows must not change. Failures (missing bucket, rejected credentials, permission denied, unreachable
endpoint, plain http not allowed, not a Delta table, no put-if-absent) are one line naming the table and the
cause, and leave the table as it was.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections import Counter

import obstore
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.errors import PutIfAbsentUnsupportedError, StorageError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import commit_actions
from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage

pytestmark = pytest.mark.timeout(300)

COMMITS = 6
ROWS = 20
STORE_ENV_PREFIXES = ("AWS_", "AZURE_", "AZURITE_", "GOOGLE_")


# -- helpers -------------------------------------------------------------------------------------
@pytest.fixture
def shell_env(monkeypatch):
    """Returns a function that makes ``env`` the whole store environment (AWS_*, AZURE_*, GOOGLE_*), as a
    shell that exported only those variables would have it. The environment starts clean."""

    def export(env: dict[str, str]) -> None:
        for key in list(os.environ):
            if key.startswith(STORE_ENV_PREFIXES):
                monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)

    export({})
    return export


def write_table(uri: str, options: dict[str, str], commits: int = COMMITS) -> None:
    """delta-rs appends ``commits`` small files."""
    for i in range(commits):
        ids = list(range(i * ROWS, (i + 1) * ROWS))
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()), "value": pa.array([f"v{x}" for x in ids]),
                                       "amount": pa.array([x * 0.5 for x in ids])}),
                        mode="append", storage_options=options)


def rows(uri: str, options: dict[str, str]) -> tuple[int, Counter]:
    """(version, rows) as delta-rs sees the table: its live files, read through our storage."""
    dt = DeltaTable(uri, storage_options=options)
    storage = Storage(uri, options)
    counter: Counter = Counter()
    for file_uri in dt.file_uris():
        key = storage.key_for_path(file_uri)
        assert key is not None, file_uri
        for row in pq.read_table(io.BytesIO(storage.read(key))).to_pylist():
            counter[tuple(sorted(row.items()))] += 1
    return dt.version(), counter


def listing(uri: str, options: dict[str, str]) -> dict[str, int]:
    """Every object under the table root with its size."""
    storage = Storage(uri, options)
    return {f.key: f.size for f in storage.list_recursive()}


def run_cli(*argv: str) -> tuple[int, dict]:
    return cli.run([*argv, "--json"])


def storage_args(options: dict[str, str]) -> list[str]:
    return [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]


def assert_one_line_error(capsys, job: str, *needles: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    lines = [line for line in err if line.startswith(f"delta-maint {job}: error:")]
    assert len(lines) == 1, err
    line = lines[0]
    for needle in needles:
        assert needle in line, line
    assert "Debug source" not in line and "RetryError" not in line and len(line) < 400, line
    return line


# -- every job, end to end -----------------------------------------------------------------------
def maintain_table(store, spark, capsys, scheme: str | None = None, extra: list[str] | None = None) -> None:
    """inspect, compact-log, checkpoint, optimize, vacuum lite and full on a fresh table; rows unchanged.
    compact-log runs before the checkpoint, so it has a window to write (windows start after a checkpoint)."""
    extra = extra or []
    path = f"{store.name}-jobs-{scheme or store.scheme}"
    uri = store.uri(path, scheme)
    rs_uri = store.uri(path)  # delta-rs speaks s3:// rather than s3a://
    write_table(rs_uri, store.options)
    version, before = rows(rs_uri, store.options)
    assert version == COMMITS - 1 and sum(before.values()) == COMMITS * ROWS

    code, m = run_cli("inspect", uri, *extra)
    assert code == 0 and m["status"] == "skipped", m  # inspect reads only
    assert m["version_read"] == version and m["num_files"] == COMMITS, m
    code, m = run_cli("compact-log", uri, "--interval", "3", *extra)
    assert code == 0 and m["status"] == "committed" and m["version_read"] == version, m
    # versions 0..5, interval 3: the one whole window is 1..3 (a window ends at a multiple of 3)
    assert [(w["start"], w["end"], w["numCommits"]) for w in m["windows_written"]] == [(1, 3, 3)], m
    assert m["numWindowsSkipped"] == 0 and m["version_committed"] is None, m
    compaction = "_delta_log/00000000000000000001.00000000000000000003.compacted.json"
    assert compaction in listing(rs_uri, store.options)
    code, m = run_cli("checkpoint", uri, *extra)
    assert code == 0 and m["status"] == "committed" and m["checkpoint_version"] == version, m
    assert rows(rs_uri, store.options) == (version, before)

    code, m = run_cli("optimize", uri, *extra)
    assert code == 0 and m["status"] == "committed", m
    assert m["numRemovedFiles"] == COMMITS and m["numAddedFiles"] == 1
    optimized, after = rows(rs_uri, store.options)
    assert optimized == version + 1 and after == before
    assert len(DeltaTable(rs_uri, storage_options=store.options).file_uris()) == 1

    data_before = {k for k in listing(rs_uri, store.options) if not k.startswith("_delta_log/")}
    code, m = run_cli("vacuum", uri, "--mode", "lite", "--retention-hours", "0", "--ignore-retention-check", *extra)
    assert code == 0 and m["status"] == "committed" and m["numFilesDeleted"] == COMMITS, m
    orphan = "part-00000-orphan-written-by-a-failed-job.parquet"
    Storage(rs_uri, store.options).put(orphan, b"not referenced")
    code, m = run_cli("vacuum", uri, "--mode", "full", "--retention-hours", "0", "--ignore-retention-check", *extra)
    assert code == 0 and m["status"] == "committed" and m["numFilesDeleted"] == 1, m
    data_after = {k for k in listing(rs_uri, store.options) if not k.startswith("_delta_log/")}
    assert len(data_after) == 1 and data_after < data_before
    final_version, final_rows = rows(rs_uri, store.options)
    assert final_rows == before and final_version > optimized
    capsys.readouterr()


@pytest.mark.spark
def test_s3_every_job_from_the_environment(s3_store, spark, shell_env, capsys):
    """The variables a shell exports for delta-rs (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, ...) are enough, on the
    driver and in Spark tasks; s3a:// names the same table."""
    shell_env(s3_store.env)
    maintain_table(s3_store, spark, capsys, scheme="s3a")


def test_s3_storage_options_without_environment(s3_store, shell_env):
    """The same variables as --storage-option keys, with nothing in the environment."""
    uri = s3_store.uri("s3-options")
    write_table(uri, s3_store.options, commits=3)
    before = rows(uri, s3_store.options)
    code, m = run_cli("inspect", uri, *storage_args(s3_store.options))
    assert code == 0 and m["version_read"] == 2, m
    code, m = run_cli("checkpoint", uri, *storage_args(s3_store.options))
    assert code == 0 and m["status"] == "committed", m
    assert rows(uri, s3_store.options) == before
    assert any(k.endswith(".checkpoint.parquet") for k in listing(uri, s3_store.options))


# -- put-if-absent -------------------------------------------------------------------------------
@pytest.mark.parametrize("store_name", ["s3_store", "azure_store"])
def test_commit_race_one_writer_wins(store_name, request):
    """Two writers race for the same version: put-if-absent lets exactly one in; the other retries."""
    store = request.getfixturevalue(store_name)
    uri = store.uri("race")
    write_table(uri, store.options, commits=2)
    storage = Storage(uri, store.options)
    key = "_delta_log/00000000000000000002.json"
    results: list[object] = []

    def put(i: int) -> None:
        try:
            Storage(uri, store.options).put_if_absent(key, json.dumps({"commitInfo": {"writer": i}}).encode())
            results.append(i)
        except AlreadyExistsError as exc:
            results.append(exc)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if isinstance(r, int)]
    assert len(winners) == 1 and sum(isinstance(r, AlreadyExistsError) for r in results) == 1, results
    assert json.loads(storage.read(key)) == {"commitInfo": {"writer": winners[0]}}

    # through transactions: both read version 2, the loser's first put fails and it commits at 4
    a, b = Snapshot.load(storage), Snapshot.load(Storage(uri, store.options))
    assert commit_actions(a, "OPTIMIZE", [], {}) == 3
    assert commit_actions(b, "OPTIMIZE", [], {}) == 4
    assert DeltaTable(uri, storage_options=store.options).version() == 4


def test_s3_without_conditional_put_is_refused_for_writing(s3_store, shell_env, capsys):
    uri = s3_store.uri("no-conditional-put")
    write_table(uri, s3_store.options, commits=3)
    before = listing(uri, s3_store.options)
    shell_env({**s3_store.env, "AWS_CONDITIONAL_PUT": "disabled"})
    code, m = run_cli("inspect", uri)
    assert code == 0, m
    capsys.readouterr()
    for job in ("checkpoint", "compact-log", "optimize", "vacuum"):
        argv = [job, uri] + (["--interval", "2"] if job == "compact-log" else [])
        argv += ["--retention-hours", "0", "--ignore-retention-check"] if job == "vacuum" else []
        code, m = run_cli(*argv)
        assert code == 2 and m["error_type"] == "PutIfAbsentUnsupportedError", (job, m)
        assert_one_line_error(capsys, job, uri, "conditional put")
    assert listing(uri, s3_store.options) == before


def test_a_store_that_ignores_preconditions_is_refused(s3_store, monkeypatch):
    """The probe: a conditional put the store should refuse, but that goes through, means no put-if-absent."""
    uri = s3_store.uri("ignores-preconditions")
    write_table(uri, s3_store.options, commits=1)
    before = listing(uri, s3_store.options)
    real_put = obstore.put

    def careless_put(store, key, data, mode=None, **kw):  # what a store without precondition support does
        return real_put(store, key, data, **kw)

    monkeypatch.setattr(obstore, "put", careless_put)
    storage = Storage(uri, s3_store.options)
    with pytest.raises(PutIfAbsentUnsupportedError, match="ignored a conditional put"):
        storage.put_if_absent("_delta_log/00000000000000000001.json", b"{}")
    monkeypatch.undo()
    assert listing(uri, s3_store.options) == before


def test_probe_answer_travels_with_the_storage(s3_store):
    import pickle

    storage = Storage(s3_store.uri("race"), s3_store.options)
    storage.require_put_if_absent()
    copy = pickle.loads(pickle.dumps(storage))
    assert copy._put_if_absent_checked and copy.root == storage.root


# -- failures: one line, nothing written -----------------------------------------------------------
JOBS = [("inspect", []), ("checkpoint", []), ("compact-log", ["--interval", "2"]),
        ("optimize", []), ("vacuum", ["--retention-hours", "0", "--ignore-retention-check"])]


@pytest.fixture(scope="module")
def s3_error_table(s3_store):
    uri = s3_store.uri("errors/table")
    write_table(uri, s3_store.options, commits=3)
    Storage(s3_store.uri("errors/plain"), s3_store.options).put("part-0.parquet", b"PAR1")
    return uri


@pytest.mark.parametrize("job,args", JOBS, ids=[j for j, _ in JOBS])
def test_s3_failures_are_one_line_and_write_nothing(job, args, s3_store, s3_error_table, shell_env, capsys):
    uri = s3_error_table
    before = listing(uri, s3_store.options)
    dead = f"http://127.0.0.1:{_closed_port()}"
    cases = [
        ("s3://no-such-bucket/t", s3_store.env, StorageError, ["s3://no-such-bucket/t", "bucket does not exist"]),
        (uri, {**s3_store.env, "AWS_ENDPOINT_URL": dead}, StorageError, [uri, f"cannot reach {dead}"]),
        (uri, {k: v for k, v in s3_store.env.items() if k != "AWS_ALLOW_HTTP"}, StorageError,
         [uri, "plain http", "AWS_ALLOW_HTTP=true"]),
        (s3_store.uri("errors/plain"), s3_store.env, None, [s3_store.uri("errors/plain"), "not a Delta table"]),
    ]
    for table, env, error, needles in cases:
        shell_env(env)
        code, m = run_cli(job, table, *args)
        assert code == 2 and m["status"] == "failed", (job, table, m)
        if error is not None:
            assert m["error_type"] == error.__name__, m
        assert_one_line_error(capsys, job, *needles)
    assert listing(uri, s3_store.options) == before


@pytest.mark.parametrize("job,args", JOBS, ids=[j for j, _ in JOBS])
def test_s3_credentials_and_permissions(job, args, s3_locked, shell_env, capsys):
    server, keys = s3_locked
    base = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
    writer = {**base, "AWS_ACCESS_KEY_ID": keys["writer"][0], "AWS_SECRET_ACCESS_KEY": keys["writer"][1]}
    uri = f"s3://locked/{job}"
    write_table(uri, writer, commits=3)
    before = listing(uri, writer)
    shell_env({**base, "AWS_ACCESS_KEY_ID": keys["reader"][0], "AWS_SECRET_ACCESS_KEY": "wrong"})
    code, m = run_cli(job, uri, *args)
    assert code == 2 and m["error_type"] == "StorageError", m
    assert_one_line_error(capsys, job, uri, "credentials were rejected")
    shell_env({**base, "AWS_ACCESS_KEY_ID": keys["reader"][0], "AWS_SECRET_ACCESS_KEY": keys["reader"][1]})
    code, m = run_cli(job, uri, *args)
    if job == "inspect":  # read-only credentials are enough
        assert code == 0 and m["version_read"] == 2, m
    else:
        assert code == 2 and m["error_type"] == "StorageError", m
        assert_one_line_error(capsys, job, uri, "permission denied")
    assert listing(uri, writer) == before


# -- Azure ---------------------------------------------------------------------------------------
@pytest.mark.spark
def test_azure_every_job_from_the_environment(azure_store, spark, shell_env, capsys, monkeypatch):
    """AZURE_STORAGE_ACCOUNT_NAME/KEY and AZURE_STORAGE_USE_EMULATOR (with AZURITE_BLOB_STORAGE_URL for the
    emulator's port) are enough, on the driver and in Spark tasks. Full VACUUM lists with Spark
    tasks here, as on a large table (the S3 test lists this small table on the driver)."""
    from airflow_delta_maint.app.jobs import vacuum_listing

    monkeypatch.setattr(vacuum_listing, "DRIVER_LIST_MAX", 0)
    shell_env(azure_store.env)
    maintain_table(azure_store, spark, capsys)


def test_azure_abfss_and_storage_options(azure_store, shell_env):
    """abfss://container@account.dfs.core.windows.net/path names the same table; options without environment."""
    uri = azure_store.uri("abfss-table")
    shell_env(azure_store.env)  # delta-rs 1.6.0 lists Azurite right only with the emulator variables
    write_table(uri, azure_store.options, commits=3)
    before = rows(uri, azure_store.options)
    shell_env({})
    abfss = f"abfss://{azure_store.bucket}@devstoreaccount1.dfs.core.windows.net/abfss-table"
    code, m = run_cli("inspect", abfss, *storage_args(azure_store.options))
    assert code == 0 and m["version_read"] == 2, m
    code, m = run_cli("checkpoint", abfss, *storage_args(azure_store.options))
    assert code == 0 and m["status"] == "committed", m
    assert rows(uri, azure_store.options) == before


@pytest.mark.parametrize("job,args", [JOBS[0], JOBS[3]], ids=["inspect", "optimize"])
def test_azure_failures_are_one_line_and_write_nothing(job, args, azure_store, shell_env, capsys):
    uri = azure_store.uri(f"errors-{job}")
    write_table(uri, azure_store.options, commits=2)
    Storage(azure_store.uri(f"plain-{job}"), azure_store.options).put("part-0.parquet", b"PAR1")
    before = listing(uri, azure_store.options)
    env = azure_store.env
    dead = f"http://127.0.0.1:{_closed_port()}"
    cases = [
        ("az://no-such-container/t", env, ["az://no-such-container/t", "container does not exist"]),
        (uri, {**env, "AZURITE_BLOB_STORAGE_URL": dead}, [uri, f"cannot reach {dead}"]),
        (uri, {**env, "AZURE_STORAGE_ACCOUNT_KEY": "d3Jvbmcga2V5"}, [uri, "permission denied"]),
        (azure_store.uri(f"plain-{job}"), env, [azure_store.uri(f"plain-{job}"), "not a Delta table"]),
    ]
    assert_failures(cases, job, args, shell_env, capsys)
    assert listing(uri, azure_store.options) == before


def assert_failures(cases, job: str, args, shell_env, capsys) -> None:
    """Run ``job`` on each (table, environment, needles) case: it fails with one line holding the needles."""
    for table, case_env, needles in cases:
        shell_env(case_env)
        code, m = run_cli(job, table, *args)
        assert code == 2 and m["status"] == "failed", (job, table, m)
        assert_one_line_error(capsys, job, *needles)


def _closed_port() -> int:
    from tests.storage.servers import free_port

    return free_port()


@pytest.mark.spark
def test_zorder_on_s3_through_the_scratch_shuffle_keeps_the_secret_out(s3_store, spark, shell_env, capsys, caplog,
                                                                      monkeypatch, tmp_path):
    """Z-order of an S3 table on a local master shuffles through files in the scratch folder: the secret
    reaches none of those files, no process's arguments, no log line, no output and no metric; rows
    unchanged."""
    import logging
    import psutil

    from airflow_delta_maint.app.runners import scratch_shuffle

    secret = "zorder-scratch-secret-5d81c2"
    shell_env({**s3_store.env, "AWS_SECRET_ACCESS_KEY": secret})
    scratch = tmp_path / "scratch"
    monkeypatch.setenv(scratch_shuffle.SCRATCH_ENV, str(scratch))
    monkeypatch.setattr(scratch_shuffle, "remove_scratch", lambda folder: None)  # kept, to be read
    caplog.set_level(logging.DEBUG)
    options = {**s3_store.options, "AWS_SECRET_ACCESS_KEY": secret}
    rs_uri = s3_store.uri("zorder-secret")
    write_table(rs_uri, options)
    version, before = rows(rs_uri, options)

    arguments: list[str] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for proc in psutil.process_iter(["cmdline"]):
                arguments.append(" ".join(proc.info.get("cmdline") or []))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        code, m = run_cli("optimize", rs_uri, "--zorder-by", "amount,id", "--target-file-size", "1500")
    finally:
        done.set()
        sampler.join()
    assert code == 0 and m["status"] == "committed" and m["numAddedFiles"] >= 2, m
    assert rows(rs_uri, options) == (version + 1, before)

    shuffled = [p for p in scratch.rglob("*") if p.is_file() and p.parent.name.isdigit()]
    assert shuffled, "the Z-order did not shuffle through the scratch folder"
    assert not any(secret.encode() in p.read_bytes() for p in scratch.rglob("*") if p.is_file())
    out = capsys.readouterr()
    assert arguments and not any(secret in a for a in arguments)
    assert secret not in out.out + out.err
    assert not any(secret in r.getMessage() for r in caplog.records)
    assert secret not in json.dumps(m)
