"""Local execution of OPTIMIZE and full VACUUM: the jobs' task functions on threads of this
process, no Spark. Rows before and after, the same outcome as the Spark run, clean failures."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

import airflow_delta_maint.app.jobs.optimize_execution as optimize_execution
from airflow_delta_maint.app import cli
from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.runners.tasks import LocalTasks, split_slices
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.test_optimize import copy_corpus, listing, make_table, rows_deltars, rows_ours
from tests.app.jobs.test_vacuum import aged_table, make_old, make_young, rows, tree
from tests.conftest import CORPUS_DV_TABLES


def local(job: str, path: Path, *args: str) -> tuple[int, dict]:
    return run_in_process(job, str(path), list(args))


def file_layout(path: Path) -> list[tuple[dict, int]]:
    """Each live file's partition values and row count, sorted."""
    adds = Snapshot.load(str(path)).add_actions()
    return sorted(((a["partitionValues"], json.loads(a["stats"])["numRecords"]) for a in adds), key=repr)


# -- the thread pool ---------------------------------------------------------------------------------
def test_slices_are_contiguous_even_and_never_empty():
    assert split_slices(list(range(10)), 3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert split_slices([1, 2], 8) == [[1], [2]]
    assert split_slices([], 4) == []
    tasks = LocalTasks(3)
    out = tasks.map_slices(lambda it: [x * 2 for x in it], list(range(100)), 7, "double")
    assert out == [x * 2 for x in range(100)]


def test_a_failing_slice_raises_itself_after_the_running_ones_stopped():
    started, finished = [], []
    running = [0]
    lock = threading.Lock()

    def work(items):
        items = list(items)
        with lock:
            started.append(items[0])
            running[0] += 1
        try:
            if items[0] == 2:
                raise ValueError("slice 2 broke")
            time.sleep(0.2)
            with lock:
                finished.append(items[0])
            return items
        finally:
            with lock:
                running[0] -= 1

    with pytest.raises(ValueError, match="slice 2 broke"):
        LocalTasks(2).map_slices(work, list(range(40)), 40, "t")
    # the pool was drained before the error came back: no slice runs, the pool's threads have ended (so
    # no queued slice can start), and the queued slices never started
    with lock:
        assert running == [0]
        assert set(finished) <= set(started) and len(started) < 40
    assert not [t.name for t in threading.enumerate() if t.name.startswith("delta-maint-task")]


def test_progress_is_logged_while_slices_run(caplog, monkeypatch):
    import airflow_delta_maint.app.runners.tasks as tasks_module

    monkeypatch.setattr(tasks_module, "PROGRESS_EVERY_S", 0.05)
    with caplog.at_level(logging.INFO, logger="delta_maint.tasks"):
        LocalTasks(1).map_slices(lambda it: [time.sleep(0.1) or x for x in it], list(range(4)), 4, "slow work")
    assert any("slow work:" in r.getMessage() and "/4 tasks done" in r.getMessage() for r in caplog.records)


# -- OPTIMIZE ----------------------------------------------------------------------------------------
def test_local_optimize_equals_the_spark_run(tmp_path: Path, spark):
    """Same table twice: bin-packed by Spark tasks and by local threads, same rows, same files."""
    a = make_table(tmp_path / "a", ["x", "y", "z"], 6, 40, seed=3)
    b = make_table(tmp_path / "b", ["x", "y", "z"], 6, 40, seed=3)
    before = rows_deltars(a)
    assert rows_deltars(b) == before
    code_s, by_spark = cli.run(["optimize", str(a), "--json"])
    code_l, by_threads = local("optimize", b)
    assert code_s == code_l == 0 and by_spark["status"] == by_threads["status"] == "committed", by_threads
    assert rows_deltars(a) == rows_deltars(b) == before
    assert file_layout(a) == file_layout(b)
    same = ("numAddedFiles", "numRemovedFiles", "numRemovedBytes", "numBins", "numBatches", "version_committed",
            "totalConsideredFiles")
    assert {k: by_threads[k] for k in same} == {k: by_spark[k] for k in same}
    # the same metrics, but for the CPU parts of a run on Spark (its tasks', its executors' or why they are unknown)
    on_spark = {"cpu_tasks_s", "cpu_executors_s", "cpu_missing"}
    assert set(by_threads) == set(by_spark) - on_spark and "cpu_tasks_s" in by_spark
    # a rerun has nothing left to do, either way
    assert local("optimize", b)[1]["status"] == "skipped"


@pytest.mark.parametrize("name", ["rs/table_with_deletion_logs", "spark/table-with-dv-large"])
def test_local_optimize_purges_deletion_vectors_and_keeps_deleted_rows_deleted(name: str, tmp_path: Path):
    live = CORPUS_DV_TABLES[name][0]
    path = copy_corpus(name, tmp_path)
    before = rows_ours(path)
    assert sum(before.values()) == live
    code, m = local("optimize", path)
    assert code == 0 and m["status"] == "committed", m
    assert m["numDeletionVectorsRemoved"] > 0
    adds = Snapshot.load(str(path)).add_actions()
    assert not any(a.get("deletionVector") for a in adds)
    assert rows_ours(path) == before
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == live


def test_local_target_files_gives_n_files_of_the_same_rows(tmp_path: Path):
    path = make_table(tmp_path / "t", ["a", "b"], 5, 30)
    before = rows_deltars(path)
    code, m = local("optimize", path, "--target-files", "3")
    assert code == 0 and m["status"] == "committed", m
    assert rows_deltars(path) == before
    assert file_layout(path) == sorted([({"p": p}, 50) for p in ("a", "b") for _ in range(3)], key=repr)


def test_a_failed_local_rewrite_leaves_no_file_and_commits_nothing(tmp_path: Path, monkeypatch):
    path = make_table(tmp_path / "t", ["a", "b", "c", "d"], 4, 30)
    before_files, before_rows = listing(path), rows_deltars(path)
    version = DeltaTable(str(path)).version()
    original = optimize_execution.rewrite_bin
    calls = []

    def rewrite_then_fail(spec, files, partition_values):
        calls.append(partition_values)
        if len(calls) == 3:
            raise OSError("disk full")
        return original(spec, files, partition_values)

    monkeypatch.setattr(optimize_execution, "rewrite_bin", rewrite_then_fail)
    code, m = local("optimize", path, "--max-concurrent-bins", "2")
    assert code == 1 and m["status"] == "failed" and m["error"] == "OSError: disk full"
    assert listing(path) == before_files  # the bins already written were deleted
    assert DeltaTable(str(path)).version() == version
    assert rows_deltars(path) == before_rows


def test_local_execution_refuses_what_only_spark_does(tmp_path: Path):
    path = make_table(tmp_path / "t", None, 4, 20)
    before = listing(path)
    code, m = local("optimize", path, "--zorder-by", "x")
    assert code == 2 and m["status"] == "failed"
    assert m["error"] == (f"Z-order of {Storage(str(path)).root} needs Spark (a shuffle), which local execution "
                          "does not start; run it with execution 'spark'")
    assert listing(path) == before
    code, m = local("optimize", path, "--zorder-by", "x", "--dry-run")  # planning alone needs no Spark
    assert code == 0 and m["status"] == "dry_run"


# -- VACUUM full -------------------------------------------------------------------------------------
def test_local_full_vacuum_deletes_old_orphans_only(tmp_path: Path):
    path = aged_table(tmp_path, partitions=6)
    before_versions = {v: rows(path, v) for v in range(2, 5)}
    orphans = [f"p=p{i % 6}/orphan-{i:04d}.parquet" for i in range(300)] + ["gone=1/only.parquet"]
    make_old(path, *orphans)
    make_young(path, "p=p0/young.parquet")
    make_old(path, "_tmp/old.parquet", "p=p1/.old.parquet.crc")
    log_before = {k: v for k, v in tree(path).items() if k.startswith("_delta_log/")}
    code, m = local("vacuum", path)
    assert code == 0 and m["status"] == "committed", m
    after = tree(path)
    assert not any(o in after for o in orphans) and not (path / "gone=1").exists()
    assert {"p=p0/young.parquet", "_tmp/old.parquet", "p=p1/.old.parquet.crc"} <= set(after)
    assert m["numDeletedFiles"] == m["numFilesToDelete"] >= len(orphans)
    assert all(after[k] == v for k, v in log_before.items())
    for v, expected in before_versions.items():  # every version inside the window reads as before
        assert rows(path, v) == expected
    assert local("vacuum", path)[1]["status"] == "skipped"


def test_local_full_vacuum_on_s3_lists_on_threads(tmp_path: Path, monkeypatch, caplog, capsys):
    """An object-store table past the single-stream size is listed in subtrees on threads; the
    credentials reach no log line, output or metric."""
    import boto3
    import pyarrow as pa
    from deltalake import write_deltalake

    import airflow_delta_maint.app.jobs.vacuum_listing as vacuum_listing
    from tests.storage.servers import start_moto

    monkeypatch.setattr(vacuum_listing, "DRIVER_LIST_MAX", 0)
    server = start_moto(tmp_path)
    try:
        key_id, secret = "AKIDLOCALVACUUM", "local-vacuum-secret-9c2e41"
        opts = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
        s3 = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=key_id, aws_secret_access_key=secret,
                          region_name="us-east-1")
        s3.create_bucket(Bucket="lake")
        uri = "s3://lake/local-vacuum"
        for i in range(4):
            write_deltalake(uri, pa.table({"id": [i], "p": [f"p{i % 2}"]}), mode="append", partition_by=["p"],
                            storage_options=opts)
        for i in range(30):
            s3.put_object(Bucket="lake", Key=f"local-vacuum/p=p{i % 2}/orphan-{i}.parquet", Body=b"x")
        ids_before = sorted(DeltaTable(uri, storage_options=opts).to_pyarrow_table().column("id").to_pylist())
        caplog.set_level(logging.DEBUG)
        code, m = run_in_process("vacuum", uri, ["--retention-hours", "0", "--ignore-retention-check"], opts)
        assert code == 0 and m["status"] == "committed", m
        assert m["numDeletedFiles"] == 30
        assert any("subtrees on threads" in r.getMessage() for r in caplog.records)
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="lake", Prefix="local-vacuum/")["Contents"]}
        assert not any("orphan" in k for k in keys)
        assert sorted(DeltaTable(uri, storage_options=opts).to_pyarrow_table().column("id").to_pylist()) == ids_before
        out = capsys.readouterr()
        for text in (json.dumps(m, default=str), caplog.text, out.out, out.err):
            assert secret not in text
    finally:
        server.stop()
