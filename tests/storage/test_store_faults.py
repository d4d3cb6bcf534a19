"""Every job through a fault-injecting proxy in front of moto's S3 and Azurite (``fault_proxy.py``).

Each seed runs the jobs in turn on a small table (24 files in two partitions, written by delta-rs and
copied to the store) with about 5% of requests of every kind failing: 503 and 500 answers in the store's
format, connections reset before the answer or in its body, and lost replies (applied, then dropped).
After each run, whatever it ended with (success or a clean one-line failure), delta-rs and DuckDB read the
same rows straight from the store (every live file is there), no commit is duplicated, and a rerun without
faults ends the work. The jobs that fan out to Spark tasks also run through a real spark-submit
(``fault_submit.py``). The default run takes two seeds and one spark-submit case; ``make test-faults`` sweeps
twenty (``DELTA_MAINT_FAULT_SEEDS``) and two (``DELTA_MAINT_FAULT_SUBMIT_SEEDS``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections import Counter

import pytest

from airflow_delta_maint.app.execution import needs_spark, parse_job_args, run_in_process
from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.fault_harness import (COMMITS, Runner, Table, clean_env, commits, data_files, new_table, proxied,
                                         removed_files, through)
from tests.storage.fault_submit import CONN_ID, CONNECTION, submit

__all__ = ["clean_env", "proxied"]  # fixtures

pytestmark = pytest.mark.timeout(600)
log = logging.getLogger(__name__)

SEEDS = list(range(1, 1 + int(os.environ.get("DELTA_MAINT_FAULT_SEEDS", "2"))))
#: (store fixture, seed) of the runs through spark-submit, the stores in turn: one in the default run
SUBMIT_CASES = [(("s3_store", "azure_store")[(seed - 1) % 2], seed)
                for seed in range(1, 1 + int(os.environ.get("DELTA_MAINT_FAULT_SUBMIT_SEEDS", "1")))]
RETENTION = ["--retention-hours", "0", "--ignore-retention-check"]
#: (job, options, most new versions one run may commit)
JOBS: list[tuple[str, list[str], int]] = [
    ("inspect", [], 0),
    ("compact-log", ["--interval", "3"], 0),
    ("checkpoint", [], 0),
    ("compute-stats", [], 1),
    ("optimize", [], 1),
    ("vacuum", ["--mode", "lite", *RETENTION], 2),
    ("vacuum", ["--mode", "full", *RETENTION], 2),
    ("cleanup-log", ["--retention-hours", "0"], 0),
]
#: besides the seeded faults of a submitted run: the answer to its first whole read of a data file (OPTIMIZE's
#: inputs, read in Spark tasks; the driver reads footers by range) is cut short
TASK_READ_CUT = {"path": r"/part(=|%3D)\d/[^/]+\.parquet$", "kind": "GET", "fault": "reset_body", "nth": 1}
#: the jobs that fan their work out to Spark tasks (compute-stats, OPTIMIZE, full VACUUM): the ones submitted
SUBMITTED_JOBS = [(job, argv, most) for job, argv, most in JOBS if needs_spark(job, vars(parse_job_args(job, argv)))]


def assert_clean_failure(job: str, code: int, m: dict) -> None:
    """A failed run ended with one line naming the table, never the client's debug dump."""
    assert code == 2 and m["status"] == "failed", (job, m)
    error = m["error"]
    assert "\n" not in error and "Debug source" not in error and "RetryError" not in error, error
    assert len(error) < 400 and m["table"] in error, error


def is_done(table: Table, job: str, argv: list[str]) -> None:
    """After the rerun without faults, the job has nothing left to do."""
    uri, options = table.uri, table.options
    if job in ("optimize", "compute-stats", "compact-log"):
        code, m = run_in_process(job, uri, argv, options)
        assert code == 0 and m["status"] == "skipped", (job, m)
    elif job == "checkpoint":
        storage = Storage(uri, options)
        hint = json.loads(storage.read("_delta_log/_last_checkpoint"))
        assert hint["version"] == table.version  # as the rerun left it
        assert storage.exists(f"_delta_log/{hint['version']:020d}.checkpoint.parquet")
    elif job == "cleanup-log":
        code, m = run_in_process(job, uri, argv, options)
        assert (code, m["status"], m["numLogFilesDeleted"]) == (0, "skipped", 0), m
        assert not Storage(uri, options).exists(f"_delta_log/{0:020d}.json")  # the expired commits went
    elif job == "vacuum":
        left = data_files(uri, options) - table.live()
        if "full" in argv:
            assert left == set(), left
        else:
            assert not left & table.removed, left & table.removed


def run_with_faults(table: Table, job: str, argv: list[str], most: int, seed: int, runner: Runner | None = None,
                    script: list[dict] | None = None) -> tuple[Counter, int]:
    """One job with seeded faults (and ``script``), in this process or with ``runner``, then without, in this
    process; the table checked after each. Returns the faults drawn and the faulty run's exit code."""
    version = table.version  # as the last check read it
    if job == "vacuum":
        table.removed = removed_files(table.uri, table.options)
        if "full" in argv:
            Storage(table.uri, table.options).put("part=0/part-00000-orphan.parquet", b"not referenced")
    code, m = table.run(job, argv, seed=seed, runner=runner, script=script or [])
    faults = Counter(table.stats["faults"])
    if code != 0:
        assert_clean_failure(job, code, m)
    after = table.check()
    assert after - version <= most, (job, after - version, m)
    again, m = table.run(job, argv)  # no faults: the rerun ends the work
    assert again == 0, (job, m)
    final = table.check()
    mine = commits(table.uri, table.options, version)
    assert len(mine) == final - version and len({c["txnId"] for c in mine}) == len(mine), mine
    operations = Counter(c["operation"] for c in mine)
    if job in ("optimize", "compute-stats"):  # the work is committed once, by one run or the other
        assert sum(operations.values()) == 1, operations
    is_done(table, job, argv)
    return faults, code


def run_jobs(table: Table, jobs: list[tuple[str, list[str], int]], seed: int, runner: Runner | None = None,
             script: list[dict] | None = None) -> None:
    """:func:`run_with_faults` for each job in turn; the faults drawn and the runs that failed are logged
    (``--log-cli-level=INFO`` shows them)."""
    drawn: Counter = Counter()
    failed = []
    for i, (job, argv, most) in enumerate(jobs):
        faults, code = run_with_faults(table, job, argv, most, seed * 100 + i, runner, script)
        drawn += faults
        if code:
            failed.append(f"{job} {' '.join(argv[:2])}".strip())
    log.info("%s seed %d%s: faults %s; runs that failed: %s", table.store.name, seed, " (spark-submit)" if runner else "",
             json.dumps(dict(drawn), sort_keys=True), ", ".join(failed) or "none")
    assert sum(drawn.values()) > 0, "no fault was drawn: the test proves nothing"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_job_on_a_failing_store(proxied, clean_env, seed):
    """Every job with ~5% seeded faults; the table keeps its rows and files, and a clean rerun ends each job."""
    store, proxy = proxied
    run_jobs(new_table(store, proxy, f"faults/seed-{seed}"), JOBS, seed)


@pytest.mark.e2e
@pytest.mark.parametrize("proxied,seed", SUBMIT_CASES, indirect=["proxied"],
                         ids=[f"{store[:-len('_store')]}-{seed}" for store, seed in SUBMIT_CASES])
def test_spark_jobs_submitted_on_a_failing_store(proxied, clean_env, seed, monkeypatch, tmp_path_factory):
    """The jobs that fan out to Spark tasks, each through a real spark-submit of the bundled application with ~5%
    seeded faults on the driver's and the tasks' requests; the same checks, and the rerun in this process."""
    store, proxy = proxied
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", CONNECTION)
    table = new_table(store, proxy, f"faults/submitted-{seed}")
    cache = tmp_path_factory.getbasetemp() / "spark-submit"  # the bundle and the driver's class archive, kept
    runner = functools.partial(submit, cache_dir=cache)
    # a store that answers every whole read of a data file 503, without retries: a task's read fails the run, and
    # the hook's error is the application's one line naming the request and the store's answer; nothing changed
    code, m = table.run("optimize", [], runner=runner, options={"max_retries": "0"},
                        script=[{**TASK_READ_CUT, "fault": "slowdown", "nth": 0}])
    assert_clean_failure("optimize", code, m)
    assert re.search(r"GET http://127\.0\.0\.1:\d+/\S+\.parquet answered HTTP 503 \w+", m["error"]), m["error"]
    assert table.check() == COMMITS - 1
    run_jobs(table, SUBMITTED_JOBS, seed, runner, script=[TASK_READ_CUT])


# -- the store calls a run counts, against the requests the proxy saw ----------------------------------------------
#: our kinds of calls and the proxy's kinds of requests they are sent as (a multipart upload is a create, on S3,
#: and a complete request; Azure has no create)
PROXY_KINDS = {"list": ("LIST",), "get": ("GET",), "getRange": ("RANGE_GET",), "head": ("HEAD",), "put": ("PUT",),
               "putIfAbsent": ("CONDITIONAL_PUT",), "multipartUpload": ("MULTIPART_CREATE", "MULTIPART_COMPLETE"),
               "multipartPart": ("MULTIPART_PART",), "delete": ("DELETE",), "deleteMany": ("DELETE_MANY",)}


def expected_requests(calls: dict, store: str) -> Counter:
    """The requests of each proxy kind our counted calls stand for, on a table small enough for one page a listing
    and one request a bulk delete (obstore sends even one object's delete to S3 and Azure as a bulk request)."""
    out: Counter = Counter()
    for kind, proxy_kinds in PROXY_KINDS.items():
        for proxy_kind in proxy_kinds:
            if proxy_kind == "DELETE":
                proxy_kind = "DELETE_MANY"
            if not (store == "azure" and proxy_kind == "MULTIPART_CREATE"):
                out[proxy_kind] += calls[kind]["calls"]
    return +out


def seen_requests(stats: dict) -> Counter:
    return +Counter(stats["requests"])


def test_store_calls_match_the_requests_the_store_saw(proxied, clean_env):
    """OPTIMIZE and full VACUUM in this process (local execution: tasks on threads) count, call by call, the requests
    the proxy forwarded; the metrics hold counts only, never the endpoint or a credential."""
    store, proxy = proxied
    table = new_table(store, proxy, "calls/local", days=None)
    Storage(table.uri, table.options).put("part=0/part-00000-orphan.parquet", b"not referenced")
    for job, argv in (("optimize", []), ("vacuum", ["--mode", "full", *RETENTION])):
        code, m = table.run(job, argv)
        assert code == 0 and m["status"] == "committed", (job, m)
        calls = m["storeCalls"]
        assert set(calls) == set(PROXY_KINDS) and all(set(c) == {"calls", "bytes", "objects"} for c in calls.values())
        assert expected_requests(calls, store.name) == seen_requests(table.stats), (job, calls, table.stats)
        text = json.dumps(calls)
        assert "127.0.0.1" not in text and all(v not in text for v in table.faulty.values() if len(v) > 6)
        if job == "optimize":  # 24 inputs read whole, 2 outputs written, the commit put if absent
            assert calls["get"]["calls"] >= 24 and calls["putIfAbsent"]["calls"] >= 1
            assert calls["get"]["bytes"] >= m["numRemovedBytes"] and calls["put"]["bytes"] >= m["numAddedBytes"]
        else:  # the 24 rewritten inputs and the orphan, deleted in one bulk request
            assert calls["deleteMany"] == {"calls": 1, "bytes": 0, "objects": 25}, calls
            assert calls["list"]["objects"] >= 27
    table.check()


def test_store_calls_with_failing_requests_leave_the_retries_to_the_proxy(proxied, clean_env):
    """With 503 and 500 answers (which obstore repeats for every request) the proxy sees more requests than the run
    counted, and the difference of each kind is the faults drawn for it: the requests obstore repeated."""
    store, proxy = proxied
    table = new_table(store, proxy, "calls/faults", days=None)
    code, m = table.run("optimize", [], rates={"*": {"slowdown": 0.04, "internal": 0.04}})
    assert code == 0, m
    expected, seen = expected_requests(m["storeCalls"], store.name), seen_requests(table.stats)
    retries: Counter = Counter()
    for name, n in table.stats["faults"].items():
        retries[name.split(":")[0]] += n
    assert sum(retries.values()) > 0, "no fault was drawn: the test proves nothing"
    assert all(seen[k] >= expected[k] for k in expected), (expected, seen)
    assert seen - expected == +retries, (expected, seen, retries)
    table.check()


def test_large_puts_and_streams_are_counted_as_multipart_uploads(proxied, clean_env):
    """A put past obstore's part size and a stream past its buffer are multipart uploads, counted part by part as
    the proxy sees them; a stream below a part is one put."""
    from airflow_delta_maint.delta.storage.store_calls import StoreCalls
    from airflow_delta_maint.delta.storage.stream_write import open_stream

    store, proxy = proxied
    proxy.configure()
    calls = StoreCalls()
    storage = Storage(store.uri("calls/multipart"), through(store, proxy), calls=calls)
    storage.put("big.bin", b"x" * (11 << 20))  # 3 parts of obstore's 5 MiB
    with open_stream(storage, "streamed.bin", part_bytes=5 << 20) as sink:  # 2 parts
        for _ in range(10):
            sink.write(b"y" * (1 << 20))
    with open_stream(storage, "small.bin", part_bytes=5 << 20) as sink:  # one put
        sink.write(b"z" * 1000)
    counts = calls.counts()
    assert counts["multipartUpload"] == {"calls": 2, "bytes": 21 << 20, "objects": 0}, counts
    assert counts["multipartPart"]["calls"] == 5 and counts["put"] == {"calls": 1, "bytes": 1000, "objects": 0}
    assert expected_requests(counts, store.name) == seen_requests(proxy.stats()), (counts, proxy.stats())


@pytest.mark.spark
@pytest.mark.parametrize("proxied", ["s3_store"], indirect=True, ids=["s3"])  # one store: the tasks' way back
def test_store_calls_of_spark_tasks_reach_the_driver(proxied, clean_env, spark, monkeypatch):
    """OPTIMIZE's bins rewritten in Spark tasks, and full VACUUM's listing and deletes sent from Spark tasks: the
    tasks' calls come back to the driver, and the run's counts match the requests the proxy saw."""
    from airflow_delta_maint.app.jobs import vacuum_deletion, vacuum_listing

    store, proxy = proxied
    monkeypatch.setattr(vacuum_listing, "DRIVER_LIST_MAX", 0)  # listed in Spark tasks
    monkeypatch.setattr(vacuum_deletion, "SPARK_DELETE_MIN", 1)  # deleted in Spark tasks
    table = new_table(store, proxy, "calls/spark", days=None)
    Storage(table.uri, table.options).put("part=1/part-00000-orphan.parquet", b"not referenced")
    for job, argv in (("optimize", []), ("vacuum", ["--mode", "full", *RETENTION])):
        proxy.configure()
        code, m = run_in_process(job, table.uri, argv, table.faulty, spark_allowed=True)
        assert code == 0 and m["status"] == "committed", (job, m)
        calls = m["storeCalls"]
        assert expected_requests(calls, store.name) == seen_requests(proxy.stats()), (job, calls, proxy.stats())
        if job == "optimize":  # the inputs are read in the tasks only
            assert calls["get"]["calls"] >= 24 and calls["get"]["bytes"] >= m["numRemovedBytes"], calls
        else:
            assert calls["deleteMany"]["objects"] == 25 and calls["list"]["objects"] >= 27, calls
    table.check()
    # Z-order: sampled in tasks, then rewritten through the scratch folder, Spark's RDD shuffle, or DataFrame tasks
    # (as on Spark Connect: the counts come back as results)
    for shuffle, kind in (("scratch", "rdd"), ("spark", "rdd"), ("spark", "dataframe")):
        monkeypatch.setenv("DELTA_MAINT_ZORDER_SHUFFLE", shuffle)
        monkeypatch.setenv("DELTA_MAINT_SPARK_TASKS", kind)
        table = new_table(store, proxy, f"calls/zorder-{shuffle}-{kind}", days=None)
        proxy.configure()
        code, m = run_in_process("optimize", table.uri, ["--zorder-by", "id"], table.faulty, spark_allowed=True)
        assert code == 0 and m["status"] == "committed", m
        calls = m["storeCalls"]
        assert expected_requests(calls, store.name) == seen_requests(proxy.stats()), (shuffle, kind, calls,
                                                                                     proxy.stats())
        assert calls["get"]["calls"] + calls["getRange"]["calls"] >= 24, calls
        table.check()
