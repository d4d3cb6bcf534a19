"""The search for the last VACUUM stops at the oldest removal it is asked about: a VACUUM that ended before a
file was removed deleted none of the files removed since, so the commits before it need not be read."""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.delta.health import score
from airflow_delta_maint.delta.health.score import health_inputs, vacuum_cutoff_ms
from airflow_delta_maint.delta.log import history
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "airflow"))
from delta_maint_testing import write_appends  # noqa: E402


def test_a_vacuum_before_the_oldest_removal_is_not_searched_for_and_the_bytes_are_the_same(tmp_path, monkeypatch):
    import pyarrow as pa
    from deltalake import write_deltalake

    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": [0], "part": ["p0"], "value": [0.0]}),
                    partition_by=["part"], configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"})
    write_appends(table, 4, start=1)
    assert run_in_process("optimize", str(table), [])[1]["status"] == "committed"
    assert run_in_process("vacuum", str(table), ["--retention-hours", "0", "--ignore-retention-check"])[1][
        "status"] == "committed"
    assert run_in_process("checkpoint", str(table), [])[1]["status"] == "committed"  # drops the expired tombstones
    write_appends(table, 12, start=5)
    assert run_in_process("optimize", str(table), [])[1]["status"] == "committed"
    storage = Storage(str(table))
    snapshot = Snapshot.load(storage)
    oldest = min(t["deletionTimestamp"] for t in snapshot.tombstone_actions())
    reads: list[int] = []
    real = history.read_commit_info_head
    monkeypatch.setattr(history, "read_commit_info_head", lambda s, v: reads.append(v) or real(s, v))

    unbounded = vacuum_cutoff_ms(storage, snapshot.version)
    searched_all = len(reads)
    reads.clear()
    assert vacuum_cutoff_ms(storage, snapshot.version, oldest_removal_ms=oldest) is None
    assert len(reads) < searched_all and unbounded is not None  # the VACUUM's commits are older than every removal
    bounded_bytes = health_inputs(snapshot, 1 << 30).tombstone_bytes
    monkeypatch.setattr(score, "vacuum_cutoff_ms", lambda s, v, oldest_removal_ms=None: unbounded)
    assert health_inputs(snapshot, 1 << 30).tombstone_bytes == bounded_bytes > 0
