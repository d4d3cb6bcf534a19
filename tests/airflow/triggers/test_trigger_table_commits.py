"""TableCommitsTrigger in-process, on real tables written by delta-rs: arguments, crossings, memory,
a free event loop and cancellation (the real scheduler and triggerer run in test_e2e_table_events.py)."""

from __future__ import annotations

import asyncio
import importlib
import json
import time

import pytest
from airflow.sdk import Asset, AssetWatcher
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseEventTrigger
from delta_maint_testing import write_appends
from deltalake import DeltaTable

from airflow_delta_maint.triggers import commit_interval
from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger, next_crossing


def trigger(path, **kwargs) -> TableCommitsTrigger:
    return TableCommitsTrigger(table_uri=str(path), min_commits=kwargs.pop("min_commits", 3),
                               poke_interval=kwargs.pop("poke_interval", 0.05), **kwargs)


class MemoryStore:
    """The asset state store's async accessor interface, kept in a dict (the edge of the unit)."""

    def __init__(self, values=None):
        self.values = dict(values or {})

    async def aget(self, key, default=None):
        return self.values.get(key, default)

    async def aset(self, key, value):
        self.values[key] = value


async def events(trig: TableCommitsTrigger, count: int, timeout: float = 10) -> list[dict]:
    out = []
    gen = trig.run()
    try:
        async with asyncio.timeout(timeout):
            async for event in gen:
                out.append(event.payload)
                if len(out) == count:
                    break
    finally:
        await gen.aclose()
    return out


def test_serializes_deterministically_and_round_trips(tmp_path):
    trig = trigger(tmp_path / "t", storage_options={"region": "eu", "endpoint": "http://127.0.0.1:1"},
                   storage_conn_id="store")
    classpath, kwargs = trig.serialize()
    assert classpath == "airflow_delta_maint.triggers.table_commits.TableCommitsTrigger"
    module, name = classpath.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert list(kwargs["storage_options"]) == ["endpoint", "region"]
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(*again.serialize())
    assert again.state_key == trig.state_key
    assert trigger(tmp_path / "t", min_commits=4).state_key != trig.state_key
    json.dumps(kwargs)
    # usable in an asset watcher
    Asset(name="t", uri=f"file://{tmp_path}/t", watchers=[AssetWatcher(name="w", trigger=trig)])


@pytest.mark.parametrize("kwargs, message", [
    ({"table_uri": "{{ var.value.table }}"}, "table_uri must be a fixed value"),
    ({"min_commits": 0}, "at least 1"),
    ({"since": "yesterday"}, "since must be one of"),
    ({"since": "version"}, "needs since_version"),
    ({"poke_interval": 0}, "poke_interval must be positive"),
    ({"storage_options": {"aws_secret_access_key": "x"}}, "storage_conn_id"),
])
def test_bad_arguments_are_refused(tmp_path, kwargs, message):
    args = {"table_uri": str(tmp_path), "min_commits": 3, **kwargs}
    with pytest.raises((ValueError, AirflowException), match=message):
        TableCommitsTrigger(**args)


def test_next_crossing():
    seen = {"from_version": 0, "to_version": 5, "commits": 6}
    assert next_crossing(seen, None, 3) == {"from_version": 0, "to_version": 5, "commits": 6}
    assert next_crossing(seen, 5, 3) is None  # fired for these commits already
    assert next_crossing(seen, 3, 3) is None
    assert next_crossing(seen, 2, 3) == {"from_version": 3, "to_version": 5, "commits": 3}
    # a reference point newer than the last event (maintenance happened) wins
    assert next_crossing({"from_version": 7, "to_version": 9, "commits": 3}, 5, 3) == \
        {"from_version": 7, "to_version": 9, "commits": 3}


def test_fires_once_per_crossing_and_after_maintenance(small_table):
    async def scenario():
        trig = trigger(small_table)
        store = MemoryStore()
        trig.asset_state_store = store
        gen = trig.run()
        # versions 0..5, no OPTIMIZE among the last 3: due now
        first = await asyncio.wait_for(gen.__anext__(), 10)
        assert first.payload == {"table_uri": str(small_table), "from_version": 3, "to_version": 5, "commits": 3}
        # the condition stays true: nothing more while no commit arrives
        nxt = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.5)
        assert not nxt.done()
        assert store.values == {trig.state_key: 5}
        write_appends(small_table, 2, start=6)  # two commits since the event: not due
        await asyncio.sleep(0.4)
        assert not nxt.done()
        DeltaTable(str(small_table)).optimize.compact()  # version 8: maintenance resets the count
        write_appends(small_table, 2, start=8)  # versions 9, 10
        await asyncio.sleep(0.4)
        assert not nxt.done()
        write_appends(small_table, 1, start=10)  # version 11: three commits after the OPTIMIZE
        second = await asyncio.wait_for(nxt, 10)
        assert second.payload == {"table_uri": str(small_table), "from_version": 9, "to_version": 11, "commits": 3}
        await gen.aclose()
        return store

    asyncio.run(scenario())


def test_memory_survives_a_restart_through_the_state_store(small_table):
    async def scenario():
        first = trigger(small_table)
        first.asset_state_store = store = MemoryStore()
        gen = first.run()
        assert (await asyncio.wait_for(gen.__anext__(), 10)).payload["to_version"] == 5
        pending = asyncio.ensure_future(gen.__anext__())  # the triggerer resumes the generator after an event
        await asyncio.sleep(0.2)
        assert store.values == {first.state_key: 5}
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        # a new instance (a restarted triggerer) with the same arguments reads the same memory
        again = trigger(small_table)
        again.asset_state_store = store
        gen = again.run()
        nxt = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.4)
        assert not nxt.done()
        write_appends(small_table, 3, start=6)
        assert (await asyncio.wait_for(nxt, 10)).payload["from_version"] == 6
        await gen.aclose()
        # without a store the memory is the instance's own: a new one fires for the current state
        assert [e["to_version"] for e in await events(trigger(small_table), 1)] == [8]

    asyncio.run(scenario())


def test_a_missing_table_is_waited_for(tmp_path, capsys):
    path = tmp_path / "later"

    async def scenario():
        trig = trigger(path)
        gen = trig.run()
        nxt = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.4)
        assert not nxt.done()
        write_appends(path, 3)
        payload = (await asyncio.wait_for(nxt, 10)).payload
        await gen.aclose()
        return payload

    assert asyncio.run(scenario()) == {"table_uri": str(path), "from_version": 0, "to_version": 2, "commits": 3}
    assert capsys.readouterr().out.count("cannot count commits") == 1  # logged once, not at every check


def test_the_event_loop_stays_free_and_cancellation_propagates(small_table, monkeypatch):
    real = commit_interval.count_commits  # both triggers count through commit_interval.check_commits

    def slow(*args, **kwargs):
        time.sleep(1.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(commit_interval, "count_commits", slow)

    async def scenario():
        trig = trigger(small_table, min_commits=100)
        ticks = 0

        async def heartbeat():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        beat = asyncio.ensure_future(heartbeat())
        task = asyncio.ensure_future(trig.run().__anext__())
        await asyncio.sleep(0.6)  # inside the slow check
        assert ticks >= 8
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 0.5
        beat.cancel()

    asyncio.run(scenario())
