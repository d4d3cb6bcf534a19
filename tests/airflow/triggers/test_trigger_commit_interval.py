"""CommitIntervalTrigger and the commit counting behind it, on real tables written by delta-rs."""

from __future__ import annotations

import asyncio
import importlib
import json
import threading

import pytest
from airflow.triggers.base import TriggerEvent
from delta_maint_testing import write_appends
from deltalake import DeltaTable

from airflow_delta_maint.delta.errors import NotADeltaTableError, TableNotFoundError
from airflow_delta_maint.triggers.commit_interval import CommitIntervalTrigger, count_commits, validate_since


def test_count_since_last_optimize(small_table):
    # versions 0..5 are appends, none is an OPTIMIZE: the range is the min_commits commits scanned
    assert count_commits(str(small_table), 4) == {"from_version": 2, "to_version": 5, "commits": 4}
    assert count_commits(str(small_table), 10) == {"from_version": 0, "to_version": 5, "commits": 6}
    DeltaTable(str(small_table)).optimize.compact()  # version 6 is an OPTIMIZE
    write_appends(small_table, 3, start=6)  # versions 7..9
    assert count_commits(str(small_table), 5) == {"from_version": 7, "to_version": 9, "commits": 3}


def test_count_since_last_checkpoint(small_table):
    assert count_commits(str(small_table), 1, "last_checkpoint") == {"from_version": 0, "to_version": 5, "commits": 6}
    DeltaTable(str(small_table)).create_checkpoint()
    write_appends(small_table, 2, start=6)
    assert count_commits(str(small_table), 1, "last_checkpoint") == {"from_version": 6, "to_version": 7, "commits": 2}


def test_count_since_last_compaction(small_table):
    log = small_table / "_delta_log"
    assert count_commits(str(small_table), 1, "last_compaction")["commits"] == 6
    # a log compaction file covering versions 1..4 (only its name matters to the count)
    (log / f"{1:020d}.{4:020d}.compacted.json").write_text((log / f"{1:020d}.json").read_text())
    assert count_commits(str(small_table), 1, "last_compaction") == {"from_version": 5, "to_version": 5, "commits": 1}
    DeltaTable(str(small_table)).create_checkpoint()  # at 5: newer than the compaction
    write_appends(small_table, 1, start=6)
    assert count_commits(str(small_table), 1, "last_compaction") == {"from_version": 6, "to_version": 6, "commits": 1}


def test_count_since_version(small_table):
    assert count_commits(str(small_table), 1, "version", 3) == {"from_version": 4, "to_version": 5, "commits": 2}
    assert count_commits(str(small_table), 1, "version", 5)["commits"] == 0
    assert count_commits(str(small_table), 1, "version", 9)["commits"] == 0


def test_validate_since():
    assert validate_since("version", "12", "3") == (12, 3)
    assert validate_since("last_optimize", "None", 5) == (None, 5)
    with pytest.raises(ValueError, match="since must be one of"):
        validate_since("yesterday", None, 1)
    with pytest.raises(ValueError, match="needs since_version"):
        validate_since("version", "", 1)
    with pytest.raises(ValueError, match="at least 1"):
        validate_since("last_optimize", None, 0)


def test_count_errors(tmp_path):
    with pytest.raises(TableNotFoundError):
        count_commits(str(tmp_path / "nope"), 1)
    with pytest.raises(NotADeltaTableError):
        count_commits(str(tmp_path), 1)


def test_serialize_round_trip():
    trigger = CommitIntervalTrigger(table_uri="s3://b/t", min_commits=50, since="version", since_version="7",
                                    storage_options={"AWS_REGION": "eu-west-1"}, poke_interval=2)
    path, kwargs = trigger.serialize()
    json.dumps(kwargs)  # what the metadata database stores
    module, _, name = path.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
    assert kwargs == {"table_uri": "s3://b/t", "min_commits": 50, "since": "version", "since_version": 7,
                      "storage_options": {"AWS_REGION": "eu-west-1"}, "poke_interval": 2.0,
                      "storage_conn_id": None}


def test_fires_at_once_when_enough(small_table):
    trigger = CommitIntervalTrigger(str(small_table), min_commits=3, since="version", since_version=1)

    async def first():
        return await anext(trigger.run())

    assert asyncio.run(first()) == TriggerEvent({"status": "success", "from_version": 2, "to_version": 5, "commits": 4})


def test_waits_for_commits_without_blocking_the_loop(small_table):
    """The commits are written only once the event loop ticked while the trigger was waiting for them
    (after its second check): the trigger's waits leave the loop free."""
    trigger = CommitIntervalTrigger(str(small_table), min_commits=3, since="version", since_version=5,
                                    poke_interval=0.05)
    checks = 0
    check = trigger.check

    async def counted() -> dict[str, int]:
        nonlocal checks
        try:
            return await check()
        finally:
            checks += 1

    trigger.check = counted  # type: ignore[method-assign]
    ticked = threading.Event()
    written = threading.Event()

    def writer() -> None:
        if ticked.wait(60):
            write_appends(small_table, 3, start=6)
            written.set()

    async def run():
        waiting = asyncio.ensure_future(anext(trigger.run()))
        ticks = 0
        while ticks < 10 or checks < 2:
            await asyncio.sleep(0.01)
            assert not waiting.done(), f"fired before any commit was written: {waiting.result()}"
            ticks += 1
        ticked.set()  # lets the writer write
        return await asyncio.wait_for(waiting, timeout=60), ticks

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        event, ticks = asyncio.run(run())
    finally:
        ticked.set()
        thread.join()
    assert written.is_set() and ticks >= 10 and checks >= 3
    assert event.payload == {"status": "success", "from_version": 6, "to_version": 8, "commits": 3}


def test_missing_table_is_an_error_event(tmp_path):
    trigger = CommitIntervalTrigger(str(tmp_path / "gone"), min_commits=1)

    async def first():
        return await anext(trigger.run())

    event = asyncio.run(first())
    assert event.payload["status"] == "error"
    assert "table path does not exist" in event.payload["message"]
