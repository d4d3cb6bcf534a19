"""Running out of memory while reading a table's state is told as such, never as a corrupt log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.delta.errors import CorruptLogError, StateTooLargeError
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log import state_stream
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import open_state
from tests.delta.log.test_conformance import make_v2_checkpoint
from tests.delta.log.test_state_stream import NOW, OLD, write_history


def _table(root: Path, files: int = 40, v2: bool = False) -> str:
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"f{i}.parquet", "partitionValues": {}, "size": 10, "modificationTime": OLD,
                         "dataChange": True, "stats": json.dumps({"numRecords": 5})}} for i in range(files)]]
    write_history(root, False, 1000, commits, {1: "classic"})
    if v2:
        make_v2_checkpoint(root, 1, sidecars=2)
    return str(root)


@pytest.mark.parametrize("error", [pa.lib.ArrowMemoryError("malloc of size 1073741824 failed"), MemoryError()])
def test_an_allocation_failure_reading_the_checkpoint_is_not_corruption(tmp_path, monkeypatch, error):
    table = _table(tmp_path)

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(pq.ParquetFile, "read", fail)
    with pytest.raises(StateTooLargeError) as caught:
        Snapshot.load(table)
    message = str(caught.value)
    assert not isinstance(caught.value, CorruptLogError) and isinstance(caught.value, MemoryError)
    assert "did not fit in memory" in message and "not a corrupt log" in message and "more memory" in message
    assert "checkpoint at version 1 holds 40 files" in message  # _last_checkpoint's numOfAddFiles
    assert "\n" not in message


def test_without_a_count_in_last_checkpoint_the_footers_count_actions(tmp_path, monkeypatch):
    table = _table(tmp_path, files=7)
    hint = tmp_path / "_delta_log" / "_last_checkpoint"
    hint.write_text(json.dumps({k: v for k, v in json.loads(hint.read_text()).items() if k != "numOfAddFiles"}))

    def fail(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(pa, "concat_tables", fail)
    with pytest.raises(StateTooLargeError, match="holds 9 actions"):  # 7 adds, protocol, metaData
        Snapshot.load(table)


def test_a_v2_checkpoints_sidecars_count_and_the_stream_says_the_same(tmp_path, monkeypatch):
    table = _table(tmp_path, files=30, v2=True)
    state = open_state(table)

    def fail(*args, **kwargs):
        raise pa.lib.ArrowMemoryError("out of memory")

    monkeypatch.setattr(state_stream, "flatten_actions", fail)
    with pytest.raises(StateTooLargeError, match="holds 35 actions"):  # 30 adds; protocol, metaData, checkpointMetadata, 2 sidecars
        list(state.scan(["size"]))


def test_a_process_short_of_address_space_reports_the_state_too_large(tmp_path):
    """A real allocation failure: the load runs under RLIMIT_AS a little above what the process
    already maps, on a checkpoint of 200,000 files."""
    root = tmp_path / "big"
    log = root / "_delta_log"
    log.mkdir(parents=True)
    first = [{"commitInfo": {"timestamp": NOW, "operation": "CREATE TABLE"}},
             {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
             {"metaData": {"id": "big", "format": {"provider": "parquet", "options": {}},
                           "schemaString": json.dumps({"type": "struct", "fields": [
                               {"name": "id", "type": "long", "nullable": True, "metadata": {}}]}),
                           "partitionColumns": [], "configuration": {}, "createdTime": 1}}]
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in first))
    stats = json.dumps({"numRecords": 100, "minValues": {"id": 1}, "maxValues": {"id": 100}, "nullCount": {"id": 0}})
    lines = [json.dumps({"add": {"path": f"part-{i:06d}-0d3c1e7a-5f2b-4c1d-9e8f-{i:012d}.snappy.parquet",
                                 "partitionValues": {}, "size": 1000 + i, "modificationTime": OLD,
                                 "dataChange": True, "stats": stats}}) for i in range(200_000)]
    (log / f"{1:020d}.json").write_text("\n".join(lines) + "\n")
    write_checkpoint(Snapshot.load(str(root)), now_ms=NOW)
    (log / f"{1:020d}.json").write_text(json.dumps({"commitInfo": {"timestamp": NOW}}) + "\n")  # the checkpoint holds them
    script = textwrap.dedent(f"""
        import resource, sys
        from airflow_delta_maint.delta.errors import StateTooLargeError
        from airflow_delta_maint.delta.log.snapshot import Snapshot
        import pyarrow as pa, pyarrow.parquet, pyarrow.compute, numpy
        # threads started before the cap: a pool thread that fails to start under it aborts the process
        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)
        pyarrow.compute.sum(pa.table({{"x": [1]}}).column("x"))
        size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + (48 << 20), resource.RLIM_INFINITY))
        try:
            Snapshot.load({str(root)!r})
        except StateTooLargeError as exc:
            print("TOO LARGE", exc)
        except Exception as exc:
            print("OTHER", type(exc).__name__, exc)
        else:
            print("LOADED")""")
    # the system allocator: every allocation meets the cap (jemalloc's arenas reserve address space ahead)
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[3], env=env)
    assert "CorruptLogError" not in out.stdout + out.stderr
    # 200,000 files with statistics need far more than the 48 MiB left: a load that fits means the test
    # no longer runs out of memory, and must be made larger
    assert "LOADED" not in out.stdout, "the 200,000-file state fit in 48 MiB"
    assert out.stdout.startswith("TOO LARGE"), out.stdout + out.stderr[-2000:]
    assert "holds 200,00" in out.stdout
