"""The ``delta-maint inspect`` command, run as a subprocess like a user or spark-submit would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.conftest import load_manifest

CLI = [sys.executable, "-m", "airflow_delta_maint.app.cli"]
ORACLE = {t["table"]: t["oracle"] for t in load_manifest()}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """The children's environment; bytecode is cached for the module's runs."""
    out = dict(os.environ)
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    out["PYTHONPYCACHEPREFIX"] = str(tmp_path_factory.mktemp("pycache"))
    return out


def inspect(env: dict[str, str], table: Path | str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "inspect", str(table), *options], capture_output=True, text=True, env=env,
                          timeout=300)


def inspect_json(env: dict[str, str], table: Path | str, *options: str) -> dict:
    done = inspect(env, table, "--json", *options)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def small_files_table(tmp_path_factory) -> Path:
    """A delta-rs table of 12 small appends (24 files), a checkpoint at version 7."""
    root = tmp_path_factory.mktemp("small") / "events"
    for i in range(12):
        rows = pa.table({"id": pa.array(range(i * 50, i * 50 + 10 * (i + 1)), pa.int64()),
                         "kind": pa.array(["a", "b"] * (5 * (i + 1)))})
        write_deltalake(str(root), rows, mode="append", partition_by=["kind"])
        if i == 7:
            DeltaTable(str(root)).create_checkpoint()
    return root


def rs_state(root: Path, version: int | None = None) -> tuple[set[str], list[int]]:
    """(relative active paths, sizes) as delta-rs reports them."""
    dt = DeltaTable(str(root), version=version) if version is not None else DeltaTable(str(root))
    actions = pa.table(dt.get_add_actions())
    return set(actions.column("path").to_pylist()), actions.column("size_bytes").to_pylist()


def test_json_report_of_a_corpus_table(env, copy_table):
    table = copy_table("rs/simple_table_with_checkpoint")
    oracle = ORACLE["rs/simple_table_with_checkpoint"]
    report = inspect_json(env, table, "--files")
    assert report["status"] == "skipped"
    assert report["operation"] == "inspect"
    assert report["version"] == report["version_read"] == oracle["version"]
    assert report["num_files"] == oracle["num_files"]
    assert report["size_bytes"] == oracle["size_bytes"]
    assert sorted(report["files"]) == oracle["files"]
    assert report["partition_columns"] == oracle["partition_columns"]
    assert report["protocol"]["min_reader_version"] == oracle["min_reader_version"]
    assert report["last_checkpoint_version"] == 10
    assert report["commits_since_checkpoint"] == 0
    assert report["num_small_files"] == oracle["num_files"]
    assert sum(h["files"] for h in report["file_size_histogram"]) == oracle["num_files"]


def test_without_files_flag_no_paths_are_listed(env, copy_table):
    report = inspect_json(env, copy_table("golden/basic-decimal-table"))
    assert "files" not in report
    assert report["partition_columns"] == ["part"]


def test_small_files_and_commits_since_checkpoint(env, small_files_table):
    paths, sizes = rs_state(small_files_table)
    report = inspect_json(env, small_files_table, "--files")
    assert report["version"] == 11
    assert set(report["files"]) == paths and report["num_files"] == len(paths) == 24
    assert report["size_bytes"] == sum(sizes)
    assert report["num_small_files"] == 24
    assert report["small_files_bytes"] == sum(sizes)
    assert report["last_checkpoint_version"] == 7
    assert report["commits_since_checkpoint"] == 4
    assert report["num_tombstones"] == 0

    threshold = sorted(sizes)[len(sizes) // 2]
    report = inspect_json(env, small_files_table, "--small-file-bytes", str(threshold))
    assert report["small_file_bytes"] == threshold
    assert report["num_small_files"] == sum(1 for s in sizes if s < threshold)
    assert report["small_files_bytes"] == sum(s for s in sizes if s < threshold)
    assert inspect_json(env, small_files_table, "--small-file-bytes", "1")["num_small_files"] == 0


def test_time_travel(env, small_files_table):
    paths, sizes = rs_state(small_files_table, 5)
    report = inspect_json(env, small_files_table, "--files", "--version", "5")
    assert report["version"] == 5
    assert set(report["files"]) == paths
    assert report["num_files"] == 12 and report["size_bytes"] == sum(sizes)
    assert report["last_checkpoint_version"] is None
    assert report["commits_since_checkpoint"] == 6
    at_checkpoint = inspect_json(env, small_files_table, "--version", "9")
    assert at_checkpoint["last_checkpoint_version"] == 7
    assert at_checkpoint["commits_since_checkpoint"] == 2


def test_overwrite_leaves_tombstones(env, tmp_path):
    root = tmp_path / "t"
    for mode in ("append", "append", "overwrite"):
        write_deltalake(str(root), pa.table({"x": pa.array([1, 2, 3], pa.int64())}), mode=mode)
    report = inspect_json(env, root, "--files")
    assert report["num_files"] == 1
    assert report["num_tombstones"] == 2
    assert report["tombstone_bytes"] > 0
    assert set(report["files"]) == rs_state(root)[0]


def test_human_output(env, small_files_table):
    done = inspect(env, small_files_table)
    assert done.returncode == 0, done.stderr
    assert "version          11" in done.stdout
    assert "checkpoint       7 (4 commits since)" in done.stdout
    assert "24 below 128MiB" in done.stdout


def test_missing_table_is_one_clear_error(env, tmp_path):
    missing = tmp_path / "no-such-table"
    done = inspect(env, missing)
    assert done.returncode != 0
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("delta-maint inspect: error:")]
    assert len(errors) == 1
    assert str(missing) in errors[0] and "does not exist" in errors[0]


def test_missing_table_json_reports_failure(env, tmp_path):
    done = inspect(env, tmp_path / "gone", "--json")
    assert done.returncode != 0
    metrics = json.loads(done.stdout.strip().splitlines()[-1])
    assert metrics["status"] == "failed"
    assert metrics["error_type"] == "TableNotFoundError"


def test_not_a_delta_table_and_bad_version(env, tmp_path, small_files_table):
    done = inspect(env, tmp_path)
    assert done.returncode != 0
    assert "not a Delta table" in done.stderr and "Traceback" not in done.stderr
    done = inspect(env, small_files_table, "--version", "99")
    assert done.returncode != 0
    assert "version 99 does not exist" in done.stderr


def test_unreadable_protocol_is_refused(env, copy_table):
    done = inspect(env, copy_table("golden/deltalog-invalid-protocol-version"))
    assert done.returncode != 0
    assert "minReaderVersion 99" in done.stderr
