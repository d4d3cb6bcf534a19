"""Write-once files whose put is applied by the store but whose answer is lost (``fault_proxy.py`` in front
of moto's S3 and Azurite): the job recognises its own write and reports success with exactly one new
version, the rows unchanged. ``_last_checkpoint``, overwritten by design, is shown to come to no harm; a
job that gives up fails in one line that names the request and the store's answer."""

from __future__ import annotations

import json
import re

import pytest
from deltalake import DeltaTable

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.settings import Settings
from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.fault_harness import (COMMITS, Table, append, clean_env, commits, data_files, delta_rs_env, new_table,
                                         proxied, rows)

__all__ = ["clean_env", "proxied"]  # fixtures

pytestmark = pytest.mark.timeout(300)

#: the table's newest version: new_table commits 0..11
LATEST = 11


def lost(path: str, kind: str = "CONDITIONAL_PUT", nth: int = 1) -> dict:
    """A scripted lost reply: the ``nth`` put of a key matching ``path`` is applied, its answer dropped."""
    return {"path": path, "kind": kind, "fault": "lost_reply", "nth": nth}


def fired(table: Table) -> list[int]:
    return [s["fired"] for s in table.stats["script"]]


@pytest.fixture
def table(proxied, clean_env, request) -> Table:
    store, proxy = proxied
    return new_table(store, proxy, "lost/" + re.sub(r"[^\w]+", "-", request.node.name).strip("-"), days=None)


def test_optimize_recognises_its_own_commit(table):
    """The first put of 00..12.json lands, its answer is lost: OPTIMIZE reads its own txnId back."""
    code, m = table.run("optimize", [], script=[lost(rf"_delta_log/0+{LATEST + 1}\.json$")])
    assert fired(table) == [1] and code == 0, m
    assert (m["status"], m["version_committed"]) == ("committed", LATEST + 1), m
    assert table.check() == LATEST + 1
    [info] = commits(table.uri, table.options, LATEST)
    assert info["operation"] == "OPTIMIZE"
    metrics = info["operationMetrics"]  # the run's metrics agree with the commit's
    assert (m["numRemovedFiles"], m["numAddedFiles"]) == (int(metrics["numRemovedFiles"]), int(metrics["numAddedFiles"]))
    assert (m["numRemovedFiles"], m["numAddedFiles"]) == (24, 2), m
    code, again = run_in_process("optimize", table.uri, [], table.options)
    assert (code, again["status"]) == (0, "skipped"), again


def test_classic_checkpoint(table):
    code, m = table.run("checkpoint", [], script=[lost(rf"_delta_log/0+{LATEST}\.checkpoint\.parquet$")])
    assert fired(table) == [1] and code == 0, m
    assert m["status"] == "committed" and m["checkpoint_version"] == LATEST, m
    hint = json.loads(Storage(table.uri, table.options).read("_delta_log/_last_checkpoint"))
    assert hint["version"] == LATEST and hint["numOfAddFiles"] == 24, hint
    assert table.check() == LATEST


def test_multipart_checkpoint_part(table):
    """A checkpoint written in parts from the streamed state (a checkpoint to stream from, then one more
    commit): the first part's answer is lost."""
    assert run_in_process("checkpoint", table.uri, [], table.options)[0] == 0
    with delta_rs_env(table.store):
        append(table.uri, table.options, COMMITS)
    table.before = rows(table.store, table.uri)[1]
    table.proxy.configure(script=[lost(r"\.checkpoint\.0+1\.0+2\.parquet$")])
    try:
        code, m = run_in_process("checkpoint", table.uri, [], table.faulty, settings=Settings(stream_min_files=0))
    finally:
        table.stats = table.proxy.stats()
        table.proxy.configure()
    assert fired(table) == [1] and code == 0, m
    assert (m["checkpoint"]["kind"], m["checkpoint"]["parts"], m["checkpoint_version"]) == ("multipart", 2, LATEST + 1), m
    hint = json.loads(Storage(table.uri, table.options).read("_delta_log/_last_checkpoint"))
    assert (hint["version"], hint["parts"]) == (LATEST + 1, 2), hint
    assert table.check() == LATEST + 1


def test_last_checkpoint_is_overwritten_harmlessly(table):
    """``_last_checkpoint`` is a plain put: obstore repeats it when the answer is lost, and the same bytes land."""
    code, m = table.run("checkpoint", [], script=[lost(r"_delta_log/_last_checkpoint$", kind="PUT")])
    assert fired(table) == [1] and code == 0, m
    assert table.stats["requests"]["PUT"] >= 2, table.stats
    hint = json.loads(Storage(table.uri, table.options).read("_delta_log/_last_checkpoint"))
    assert hint["version"] == LATEST and m["checkpoint"]["last_checkpoint_updated"], (hint, m)
    assert table.check() == LATEST
    code, again = run_in_process("checkpoint", table.uri, [], table.options)
    assert code == 0 and again["status"] == "skipped" and not again["checkpoint"]["last_checkpoint_updated"], again


def test_log_compaction_file(table):
    code, m = table.run("compact-log", ["--interval", "3"], script=[lost(r"\.compacted\.json$")])
    assert fired(table) == [1] and code == 0, m
    windows = [(w["start"], w["end"]) for w in m["windows_written"]]
    assert windows == [(1, 3), (4, 6), (7, 9)] and m["numWindowsSkipped"] == 0, m
    code, again = run_in_process("compact-log", table.uri, ["--interval", "3"], table.options)
    assert (code, again["status"]) == (0, "skipped"), again
    assert table.check() == LATEST


def test_partition_lease(table):
    """OPTIMIZE's lease on a partition: its own lost write is its lease, not another run's."""
    code, m = table.run("optimize", [], script=[lost(r"_delta_maint/reservations/")])
    assert fired(table) == [1] and code == 0, m
    assert not m.get("partitionsReservedByOthers") and m["numAddedFiles"] == 2, m
    assert not list(Storage(table.uri, table.options).list_recursive("_delta_maint/"))  # released
    assert table.check() == LATEST + 1


def test_maintenance_history(table, monkeypatch):
    """The history table's creation, its data file and its first append, each with a lost answer. The
    history's store is configured by the environment (``--history-uri`` does not take the table's options)."""
    for key, value in history_env(table).items():
        monkeypatch.setenv(key, value)
    history = table.store.uri(table.uri.rsplit("/", 1)[1] + "-history")
    name = history.rsplit("/", 1)[1]
    script = [lost(rf"{name}/_delta_log/0+\.json$"), lost(rf"{name}/part-[^/]*\.parquet$"),
              lost(rf"{name}/_delta_log/0+1\.json$")]
    code, m = table.run("optimize", ["--history-uri", history], script=script)
    assert fired(table) == [1, 1, 1] and code == 0, m
    assert m["history"]["written"] and m["history"]["version"] == 1, m["history"]
    with delta_rs_env(table.store):
        dt = DeltaTable(history, storage_options=table.options)
        runs = dt.to_pyarrow_dataset().to_table().to_pylist()
    assert dt.version() == 1 and [(r["operation"], r["status"]) for r in runs] == [("optimize", "committed")], runs
    assert table.check() == LATEST + 1


def history_env(table: Table) -> dict[str, str]:
    """The environment that points a store at the proxy."""
    options = table.faulty
    if table.store.name == "s3":
        return options
    return {"AZURE_STORAGE_ACCOUNT_NAME": options["account_name"], "AZURE_STORAGE_ACCOUNT_KEY": options["account_key"],
            "AZURE_STORAGE_ENDPOINT": options["endpoint"], "AZURE_ALLOW_HTTP": "true"}


def test_a_commit_that_times_out_is_settled(table):
    """No answer within the client's timeout: the put is read back (absent) and made again."""
    code, m = table.run("optimize", [], options={"timeout": "2s"}, hold_s=4,
                        script=[{"path": rf"_delta_log/0+{LATEST + 1}\.json$", "fault": "timeout"}])
    assert fired(table) == [1] and code == 0 and m["version_committed"] == LATEST + 1, m
    assert len(commits(table.uri, table.options, LATEST)) == 1
    assert table.check() == LATEST + 1


@pytest.mark.parametrize("fault,answer", [("internal", "HTTP 500 InternalError"),
                                          ("reset", "the connection was reset")], ids=["http-500", "reset"])
def test_a_job_that_gives_up_says_so_in_one_line(table, fault, answer):
    """Every attempt at the commit fails: one line names the request and the store's answer; the files
    the run wrote are gone and the table is as it was."""
    files = data_files(table.uri, table.options)
    script = [{"path": rf"_delta_log/0+{LATEST + 1}\.json$", "fault": fault, "nth": 0}]
    code, m = table.run("optimize", [], options={"max_retries": "1"}, script=script)
    assert code == 2 and m["status"] == "failed", m
    error = m["error"]
    assert "\n" not in error and len(error) < 400 and table.uri in error and answer in error, error
    assert f"{LATEST + 1:020d}.json" in error, error
    assert data_files(table.uri, table.options) == files
    assert table.check() == LATEST
