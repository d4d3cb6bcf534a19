"""TableCommitsTrigger in-process, on real tables written by delta-rs: arguments, crossings, memory,
a free event loop and cancellation (the real scheduler and triggerer run in test_e2e_table_events.py)."""

from __future__ import annotations

import asyncio
import importlib
import json
import threading

import pytest
from airflow.sdk import Asset, AssetWatcher
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseEventTrigger
from delta_maint_testing import write_appends
from deltalake import DeltaTable

from airflow_delta_maint.triggers import commit_interval
from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger, next_crossing, waiting_message

#: seconds a gate or a wait for a log line allows before the test fails (far beyond any real check)
PATIENCE = 60


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


class Watched:
    """A trigger's log lines and checks, recorded as they happen (its logger is the edge of the unit)."""

    def __init__(self, trig: TableCommitsTrigger):
        self.lines: list[tuple[str, str]] = []
        self.checks = 0
        check = trig.check

        async def counted() -> dict[str, int]:
            try:
                return await check()
            finally:
                self.checks += 1

        trig.check = counted  # type: ignore[method-assign]
        trig._log = self  # type: ignore[assignment]

    def __getattr__(self, level: str):
        def record(msg: str, *args, **kwargs) -> None:
            self.lines.append((level, msg % args if args else msg))
        return record

    def count(self, line: str) -> int:
        return sum(text == line for _, text in self.lines)

    async def until(self, condition, what: str, task: asyncio.Future | None = None) -> None:
        """Wait for ``condition()`` while the trigger runs; fail with ``what`` after PATIENCE seconds,
        or at once with the trigger's own error when ``task`` ended."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PATIENCE
        while not condition():
            if task is not None and task.done():  # its error, else the event it fired too early
                raise AssertionError(f"the trigger ended before {what}: {task.result()}")
            assert loop.time() < deadline, f"timed out waiting for {what}; logged: {self.lines}"
            await asyncio.sleep(0.01)

    async def logged(self, *lines: str, task: asyncio.Future | None = None) -> None:
        await self.until(lambda: all(self.count(line) for line in lines), f"the lines {lines}", task)


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


def test_waiting_message():
    assert waiting_message("t", {"from_version": 0, "to_version": 1, "commits": 2}, None, 3) == \
        "t: versions 0..1, 2 commits, waiting for 3"
    assert waiting_message("t", {"from_version": 0, "to_version": 0, "commits": 1}, None, 3) == \
        "t: versions 0..0, 1 commit, waiting for 3"
    assert waiting_message("t", {"from_version": 3, "to_version": 5, "commits": 3}, 5, 3) == \
        "t: latest version 5, no commits since the last event (version 5), waiting for 3"
    assert waiting_message("t", {"from_version": 5, "to_version": 7, "commits": 3}, 5, 3) == \
        "t: versions 6..7, 2 commits since the last event (version 5), waiting for 3"
    # the reference point (an OPTIMIZE at version 8) is newer than the last event: counted from it
    assert waiting_message("t", {"from_version": 9, "to_version": 10, "commits": 2}, 5, 3) == \
        "t: versions 9..10, 2 commits, waiting for 3"
    assert waiting_message("t", {"from_version": 9, "to_version": 8, "commits": 0}, None, 3) == \
        "t: latest version 8, no commits, waiting for 3"


def test_a_state_not_due_is_logged_once(small_table):
    """One INFO line per state judged not due (latest version, last event), not one per check."""
    async def scenario():
        trig = trigger(small_table, min_commits=100)
        watched = Watched(trig)
        gen = trig.run()
        nxt = asyncio.ensure_future(gen.__anext__())
        first = f"{small_table}: versions 0..5, 6 commits, waiting for 100"
        await watched.logged(first, task=nxt)
        seen = watched.checks
        await watched.until(lambda: watched.checks >= seen + 3, "three more checks", nxt)
        write_appends(small_table, 1, start=6)
        second = f"{small_table}: versions 0..6, 7 commits, waiting for 100"
        await watched.logged(second, task=nxt)
        seen = watched.checks
        await watched.until(lambda: watched.checks >= seen + 3, "three more checks", nxt)
        nxt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await nxt
        return watched

    watched = asyncio.run(scenario())
    assert watched.lines == [("info", f"{small_table}: versions 0..5, 6 commits, waiting for 100"),
                             ("info", f"{small_table}: versions 0..6, 7 commits, waiting for 100")]


def test_fires_once_per_crossing_and_after_maintenance(small_table):
    async def scenario():
        trig = trigger(small_table)
        watched = Watched(trig)
        store = MemoryStore()
        trig.asset_state_store = store
        gen = trig.run()
        # versions 0..5, no OPTIMIZE among the last 3: due now
        first = await asyncio.wait_for(gen.__anext__(), 10)
        assert first.payload == {"table_uri": str(small_table), "from_version": 3, "to_version": 5, "commits": 3}
        # the condition stays true: the trigger looks at version 5 again and fires nothing more
        nxt = asyncio.ensure_future(gen.__anext__())
        await watched.logged(f"{small_table}: latest version 5, no commits since the last event (version 5), "
                             "waiting for 3", task=nxt)
        assert store.values == {trig.state_key: 5}
        write_appends(small_table, 2, start=6)  # two commits since the event: not due
        await watched.logged(f"{small_table}: versions 6..7, 2 commits since the last event (version 5), "
                             "waiting for 3", task=nxt)
        DeltaTable(str(small_table)).optimize.compact()  # version 8: maintenance resets the count
        write_appends(small_table, 2, start=8)  # versions 9, 10
        await watched.logged(f"{small_table}: versions 9..10, 2 commits, waiting for 3", task=nxt)
        write_appends(small_table, 1, start=10)  # version 11: three commits after the OPTIMIZE
        second = await asyncio.wait_for(nxt, 10)
        assert second.payload == {"table_uri": str(small_table), "from_version": 9, "to_version": 11, "commits": 3}
        await gen.aclose()
        return store

    asyncio.run(scenario())


def test_memory_survives_a_restart_through_the_state_store(small_table):
    async def scenario():
        first = trigger(small_table)
        watched = Watched(first)
        first.asset_state_store = store = MemoryStore()
        gen = first.run()
        assert (await asyncio.wait_for(gen.__anext__(), 10)).payload["to_version"] == 5
        pending = asyncio.ensure_future(gen.__anext__())  # the triggerer resumes the generator after an event
        # its next check is logged after the version was recorded
        await watched.logged(f"{small_table}: latest version 5, no commits since the last event (version 5), "
                             "waiting for 3", task=pending)
        assert store.values == {first.state_key: 5}
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        # a new instance (a restarted triggerer) with the same arguments reads the same memory
        again = trigger(small_table)
        watched = Watched(again)
        again.asset_state_store = store
        gen = again.run()
        nxt = asyncio.ensure_future(gen.__anext__())
        await watched.logged(f"{small_table}: last event fired for version 5",
                             f"{small_table}: latest version 5, no commits since the last event (version 5), "
                             "waiting for 3", task=nxt)
        write_appends(small_table, 3, start=6)
        assert (await asyncio.wait_for(nxt, 10)).payload["from_version"] == 6
        await gen.aclose()
        # without a store the memory is the instance's own: a new one fires for the current state
        assert [e["to_version"] for e in await events(trigger(small_table), 1)] == [8]

    asyncio.run(scenario())


def test_a_missing_table_is_waited_for(tmp_path):
    path = tmp_path / "later"

    async def scenario():
        trig = trigger(path)
        watched = Watched(trig)
        gen = trig.run()
        nxt = asyncio.ensure_future(gen.__anext__())
        await watched.until(lambda: watched.checks >= 3, "three checks of the missing table", nxt)
        write_appends(path, 3)
        payload = (await asyncio.wait_for(nxt, 10)).payload
        await gen.aclose()
        return payload, watched

    payload, watched = asyncio.run(scenario())
    assert payload == {"table_uri": str(path), "from_version": 0, "to_version": 2, "commits": 3}
    warnings = [text for level, text in watched.lines if level == "warning"]
    assert len(warnings) == 1 and "cannot count commits" in warnings[0]  # logged once, not at every check


def test_the_event_loop_stays_free_and_cancellation_propagates(small_table, monkeypatch):
    """Each count of commits blocks its thread on a gate. The first gate is opened by a heartbeat on
    the event loop after it ticked while the count was blocked: a count that held the loop would
    keep its own gate shut and fail. The second count is cancelled while blocked: the cancellation
    reaches the trigger's caller before the count ends."""
    real = commit_interval.count_commits  # both triggers count through commit_interval.check_commits
    gates = [threading.Event(), threading.Event()]
    entered = [threading.Event(), threading.Event()]
    finished = [threading.Event(), threading.Event()]
    calls: list[int] = []

    def gated(*args, **kwargs):
        n = len(calls)
        calls.append(n)
        entered[n].set()
        try:
            if not gates[n].wait(PATIENCE):
                raise AssertionError(["the heartbeat never opened the first count's gate: the event loop was blocked",
                                      "the cancelled trigger waited for the second count to end"][n])
            return real(*args, **kwargs)
        finally:
            finished[n].set()

    monkeypatch.setattr(commit_interval, "count_commits", gated)
    ticks_needed = 5

    async def scenario():
        trig = trigger(small_table, min_commits=100)
        ticks = 0

        async def heartbeat():
            nonlocal ticks
            while not entered[0].is_set():
                await asyncio.sleep(0.01)
            while ticks < ticks_needed:  # the loop turns while the first count is blocked in its thread
                await asyncio.sleep(0.01)
                ticks += 1
            gates[0].set()

        beat = asyncio.ensure_future(heartbeat())
        task = asyncio.ensure_future(trig.run().__anext__())
        try:
            deadline = asyncio.get_running_loop().time() + PATIENCE
            while not entered[1].is_set():  # the first count was let through, the second is blocked
                if task.done():
                    raise AssertionError(f"the trigger ended: {task.result()}")
                assert asyncio.get_running_loop().time() < deadline, f"no second count after {ticks} ticks"
                await asyncio.sleep(0.01)
            assert finished[0].is_set() and ticks == ticks_needed and beat.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not finished[1].is_set()  # cancelled while the count was still in progress
        finally:
            for gate in gates:
                gate.set()  # the counts' threads end either way
        assert await asyncio.to_thread(finished[1].wait, PATIENCE)
        assert calls == [0, 1]

    asyncio.run(scenario())



def _s3_appends(uri: str, options: dict, commits: int, start: int = 0) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(start, start + commits):
        write_deltalake(uri, pa.table({"id": pa.array([i], pa.int64())}), mode="append", storage_options=options)


@pytest.mark.services  # a moto S3 server with IAM checks, started and stopped here
def test_the_waiting_line_never_shows_the_connections_secret(tmp_path, monkeypatch, caplog):
    """A trigger on S3 through a storage connection (the secret is needed: moto checks IAM): the secret reaches
    no log line (the trigger's own or any logger's), no event and not the serialized trigger."""
    import boto3

    from tests.storage.servers import start_moto

    server = start_moto(tmp_path, auth_actions=4)
    try:
        kw = dict(endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="setup",
                  aws_secret_access_key="setup")
        boto3.client("s3", **kw).create_bucket(Bucket="lake")
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="maint")
        key = iam.create_access_key(UserName="maint")["AccessKey"]
        iam.put_user_policy(UserName="maint", PolicyName="lake", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*", "Action": "s3:*"}]}))
        secret = key["SecretAccessKey"]
        options = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                   "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": secret}
        uri = "s3://lake/events"
        _s3_appends(uri, options, 3)
        monkeypatch.setenv("AIRFLOW_CONN_LAKE_TRIGGER", json.dumps(
            {"conn_type": "aws", "login": key["AccessKeyId"], "password": secret,
             "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint}}))
        caplog.set_level("DEBUG")

        async def scenario():
            trig = TableCommitsTrigger(table_uri=uri, min_commits=4, poke_interval=0.05,
                                       storage_conn_id="lake_trigger")
            watched = Watched(trig)
            gen = trig.run()
            nxt = asyncio.ensure_future(gen.__anext__())
            await watched.logged(f"{uri}: versions 0..2, 3 commits, waiting for 4", task=nxt)
            await asyncio.to_thread(_s3_appends, uri, options, 1, 3)
            event = await asyncio.wait_for(nxt, PATIENCE)
            await gen.aclose()
            return trig, watched, event

        trig, watched, event = asyncio.run(scenario())
    finally:
        server.stop()
    assert event.payload == {"table_uri": uri, "from_version": 0, "to_version": 3, "commits": 4}
    shown = [json.dumps(trig.serialize()), json.dumps(event.payload), *(text for _, text in watched.lines),
             *(record.getMessage() for record in caplog.records)]
    assert watched.lines and not [text for text in shown if secret in text]
