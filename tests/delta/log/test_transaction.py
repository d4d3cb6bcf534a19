"""Transactions: put-if-absent commits, conflict checks against winners, rebase and retry.

Races run in separate processes: our own transactions against each other, and ours against
delta-rs writers. Every committed log is read back by delta-rs and by our Snapshot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import airflow_delta_maint
from airflow_delta_maint.delta.errors import (
    CommitConflictError, CommitFailedError, InvalidArgumentError, UnsupportedFeatureError,
)
from airflow_delta_maint.delta.log.listing import commit_key, read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import (
    ConflictError, Transaction, commit_actions, conflicting_files, ict_enabled,
)

REPO = Path(__file__).resolve().parents[3]


# -- helpers ------------------------------------------------------------------------------------

def make_table(path: Path, batches: int = 4, rows: int = 5) -> Path:
    """A delta-rs table with one file per append: ids 0..batches*rows-1."""
    from deltalake import write_deltalake

    for b in range(batches):
        ids = list(range(b * rows, (b + 1) * rows))
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()),
                                             "name": pa.array([f"n{i}" for i in ids])}), mode="append")
    return path


def table_rows(path: Path, column: str = "id") -> list:
    """Rows as delta-rs sees the table, read through file_uris() + pyarrow."""
    from deltalake import DeltaTable

    out = []
    for uri in DeltaTable(str(path)).file_uris():
        local = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
        out.extend(pq.read_table(local, columns=[column]).column(column).to_pylist())
    return sorted(out)


def snapshot_rows(path: Path, column: str = "id") -> list:
    snap = Snapshot.load(str(path))
    out = []
    for p in snap.paths:
        out.extend(pq.read_table(os.path.join(path, unquote(p)), columns=[column]).column(column).to_pylist())
    return sorted(out)


def delta_rs_version(path: Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).version()


def rewrite_actions(table: str, adds: list[dict], tag: str = "") -> list[dict]:
    """What an OPTIMIZE bin produces: the inputs' rows in one new file; removes + add, dataChange=false."""
    partition = adds[0].get("partitionValues") or {}
    if isinstance(partition, list):
        partition = dict(partition)
    merged = pa.concat_tables([pq.read_table(os.path.join(table, unquote(a["path"]))) for a in adds])
    folder = "/".join(f"{k}={v}" for k, v in partition.items())
    name = (folder + "/" if folder else "") + f"part-00000-{tag}{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(merged, os.path.join(table, name))
    now = int(time.time() * 1000)
    actions: list[dict] = [{"remove": {"path": a["path"], "deletionTimestamp": now, "dataChange": False,
                                       "extendedFileMetadata": True, "partitionValues": partition,
                                       "size": a["size"]}} for a in adds]
    actions.append({"add": {"path": name, "partitionValues": partition,
                            "size": os.path.getsize(os.path.join(table, name)), "modificationTime": now,
                            "dataChange": False, "stats": json.dumps({"numRecords": merged.num_rows})}})
    return actions


def handmade_table(path: Path, writer_features: list[str] | None = None, configuration: dict | None = None) -> Path:
    """A one-file table written by hand, for protocols delta-rs will not create."""
    (path / "_delta_log").mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), path / "f0.parquet")
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    if writer_features is not None:
        protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": writer_features}
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    actions = [
        {"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE", **(
            {"inCommitTimestamp": 1} if (configuration or {}).get("delta.enableInCommitTimestamps") else {})}},
        {"protocol": protocol},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": configuration or {}, "createdTime": 1}},
        {"add": {"path": "f0.parquet", "partitionValues": {}, "size": os.path.getsize(path / "f0.parquet"),
                 "modificationTime": 1, "dataChange": True, "stats": json.dumps({"numRecords": 3})}},
    ]
    (path / "_delta_log" / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return path


def write_commit(path: Path, version: int, actions: list[dict]) -> None:
    """A concurrent writer's commit, written directly."""
    target = path / commit_key(version)
    with open(target, "x") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def log_lines(path: Path, version: int) -> list[dict]:
    return [json.loads(line) for line in (path / commit_key(version)).read_text().splitlines() if line.strip()]


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(REPO))


# A process that plans a rewrite of some files, waits for the start signal, then commits.
RACER = r"""
import json, os, sys, time
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import ConflictError, Transaction
from tests.delta.log.test_transaction import rewrite_actions
args = json.loads(sys.argv[1])
snap = Snapshot.load(args["table"])
adds = [a for a in snap.add_actions() if a["path"] in set(args["paths"])]
txn = Transaction(snap, "OPTIMIZE", {"predicate": [], "zOrderBy": []}, max_retries=args.get("max_retries", 15))
txn.add_actions(rewrite_actions(args["table"], adds, args["tag"]))
open(args["ready"], "w").close()
deadline = time.time() + 30
while not os.path.exists(args["go"]) and time.time() < deadline:
    time.sleep(0.0005)
try:
    v = txn.commit({"numRemovedFiles": len(adds), "numAddedFiles": 1})
    print(json.dumps({"version": v, "attempts": txn.attempts, "read_version": txn.read_version}))
except ConflictError as exc:
    print(json.dumps({"conflict": exc.kind, "winning_version": exc.winning_version, "message": str(exc),
                      "read_version": txn.read_version}))
"""


def race(table: Path, tmp_path: Path, path_sets: list[list[str]]) -> list[dict]:
    """Start one racer process per path set; release them together; return their results."""
    procs, readies = [], []
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for n, paths in enumerate(path_sets):
        ready = tmp_path / f"ready-{n}"
        readies.append(ready)
        args = {"table": str(table), "paths": paths, "ready": str(ready), "go": str(go), "tag": f"r{n}-"}
        procs.append(subprocess.Popen([sys.executable, "-c", RACER, json.dumps(args)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO)))
    deadline = time.time() + 60
    while not all(r.exists() for r in readies):
        assert time.time() < deadline, "racers did not get ready"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.005)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


# -- commit basics ------------------------------------------------------------------------------

def test_commit_writes_commit_info_and_both_readers_agree(tmp_path):
    table = make_table(tmp_path / "t")
    before = table_rows(table)
    snap = Snapshot.load(str(table))
    adds = snap.add_actions()
    txn = Transaction(snap, "OPTIMIZE", {"predicate": [], "zOrderBy": ["id"], "auto": False, "mode": "bin"})
    txn.add_actions(rewrite_actions(str(table), adds[:3]))
    started = int(time.time() * 1000)
    version = txn.commit({"numRemovedFiles": 3, "numAddedFiles": 1, "numAddedBytes": 123, "ratio": 0.5})
    committed = int(time.time() * 1000)
    assert version == snap.version + 1 == txn.read_version + 1

    lines = log_lines(table, version)
    assert list(lines[0]) == ["commitInfo"]
    info = lines[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    # as delta-spark writes them: lists as JSON text, booleans and numbers as JSON values
    assert info["operationParameters"] == {"predicate": "[]", "zOrderBy": '["id"]', "auto": False,
                                           "mode": "bin"}
    assert info["operationMetrics"] == {"numRemovedFiles": "3", "numAddedFiles": "1", "numAddedBytes": "123",
                                        "ratio": "0.5"}
    assert info["readVersion"] == snap.version
    assert info["isolationLevel"] == "SnapshotIsolation"
    assert info["isBlindAppend"] is False
    assert info["engineInfo"] == f"airflow-delta-maint/{airflow_delta_maint.__version__}"
    assert uuid.UUID(info["txnId"]).version == 4
    assert started <= info["timestamp"] <= committed  # the time of the commit
    assert "inCommitTimestamp" not in info
    assert sum("remove" in a for a in lines) == 3 and sum("add" in a for a in lines) == 1

    assert delta_rs_version(table) == version
    assert table_rows(table) == before == snapshot_rows(table)
    after = Snapshot.load(str(table))
    assert after.version == version and after.num_files == len(adds) - 2
    from deltalake import DeltaTable
    assert len(DeltaTable(str(table)).file_uris()) == after.num_files


def test_commit_actions_and_add_actions_validation(tmp_path):
    table = make_table(tmp_path / "t", batches=2)
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE")
    with pytest.raises(InvalidArgumentError, match="single add, remove"):
        txn.add_actions([{"metaData": {}}])
    with pytest.raises(InvalidArgumentError, match="missing"):
        txn.add_actions([{"add": {"path": "x"}}])
    v = commit_actions(snap, "OPTIMIZE", rewrite_actions(str(table), snap.add_actions()), {"predicate": []},
                       {"numAddedFiles": 1})
    assert v == 2 and delta_rs_version(table) == 2 and table_rows(table) == list(range(10))


def test_blind_append_and_domain_and_txn_only_commits(tmp_path):
    table = handmade_table(tmp_path / "t", ["appendOnly", "invariants", "domainMetadata"])
    snap = Snapshot.load(str(table))
    pq.write_table(pa.table({"id": pa.array([4], pa.int64())}), table / "f1.parquet")
    txn = Transaction(snap, "WRITE", {"mode": "Append"}, job="optimize")
    txn.add_actions([{"add": {"path": "f1.parquet", "partitionValues": {}, "modificationTime": 1,
                              "size": os.path.getsize(table / "f1.parquet"), "dataChange": True}}])
    assert txn.commit() == 1
    info = log_lines(table, 1)[0]["commitInfo"]
    assert info["isBlindAppend"] is True and info["isolationLevel"] == "Serializable"
    snap = Snapshot.load(str(table))
    v = commit_actions(snap, "OPTIMIZE", [
        {"domainMetadata": {"domain": "airflow-delta-maint.test", "configuration": "{}", "removed": False}},
        {"txn": {"appId": "dag-1", "version": 7}}])
    info = log_lines(table, v)[0]["commitInfo"]
    # no file action, so no file read: delta-spark calls such a commit a blind append too
    assert info["isolationLevel"] == "SnapshotIsolation" and info["isBlindAppend"] is True
    snap = Snapshot.load(str(table))
    assert snap.domains["airflow-delta-maint.test"]["configuration"] == "{}"
    assert snap.txns["dag-1"]["version"] == 7
    assert delta_rs_version(table) == v


def test_feature_gate_runs_before_anything_is_written(tmp_path, copy_table):
    table = copy_table("golden/collations-table")
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE")
    txn.add_actions([{"txn": {"appId": "a", "version": 1}}])
    with pytest.raises(UnsupportedFeatureError, match="optimize.*collations|collations.*optimize"):
        txn.commit()
    assert not (table / commit_key(snap.version + 1)).exists()
    # The same table is fine for a job that supports its features.
    assert Transaction(snap, "VACUUM END", job="vacuum").commit() == snap.version + 1


def test_domain_metadata_needs_the_feature_and_append_only_forbids_data_removal(tmp_path):
    table = handmade_table(tmp_path / "t")
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE")
    txn.add_actions([{"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False}}])
    with pytest.raises(UnsupportedFeatureError, match="domainMetadata"):
        txn.commit()
    table2 = handmade_table(tmp_path / "t2", configuration={"delta.appendOnly": "true"})
    snap2 = Snapshot.load(str(table2))
    txn = Transaction(snap2, "DELETE")
    txn.add_actions([{"remove": {"path": "f0.parquet", "dataChange": True, "deletionTimestamp": 1}}])
    with pytest.raises(UnsupportedFeatureError, match="append-only"):
        txn.commit()
    assert not (table / commit_key(1)).exists() and not (table2 / commit_key(1)).exists()
    # Rearranging data is allowed on an append-only table.
    assert commit_actions(snap2, "OPTIMIZE", rewrite_actions(str(table2), snap2.add_actions())) == 1


# -- lost races, decided in-process against hand-written winners --------------------------------

def test_a_commit_is_never_overwritten_and_non_conflicting_winners_are_rebased_over(tmp_path):
    table = make_table(tmp_path / "t")
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE")
    txn.add_actions(rewrite_actions(str(table), snap.add_actions()[:2]))
    winner = [{"commitInfo": {"timestamp": 1, "operation": "VACUUM START"}}]
    write_commit(table, snap.version + 1, winner)
    write_commit(table, snap.version + 2, [{"commitInfo": {"timestamp": 2, "operation": "VACUUM END"}}])
    original = (table / commit_key(snap.version + 1)).read_bytes()
    assert txn.commit() == snap.version + 3
    assert txn.attempts == 2
    assert (table / commit_key(snap.version + 1)).read_bytes() == original
    assert delta_rs_version(table) == snap.version + 3 and table_rows(table) == list(range(20))


@pytest.mark.parametrize("winner, kind", [
    ({"metaData": "CHANGED"}, "MetadataChanged"),
    ({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, "ProtocolChanged"),
    ({"domainMetadata": {"domain": "mine", "configuration": "{}", "removed": False}}, "ConcurrentDomainMetadata"),
    ({"txn": {"appId": "job-1", "version": 3}}, "ConcurrentTransaction"),
])
def test_winner_conflicts_are_named(tmp_path, winner, kind):
    table = handmade_table(tmp_path / "t", ["appendOnly", "invariants", "domainMetadata"])
    snap = Snapshot.load(str(table))
    if winner.get("metaData") == "CHANGED":
        winner = {"metaData": dict(snap.metadata.raw, configuration={"delta.appendOnly": "false"})}
    txn = Transaction(snap, "OPTIMIZE")
    txn.add_actions([{"domainMetadata": {"domain": "mine", "configuration": "{}", "removed": False}},
                     {"txn": {"appId": "job-1", "version": 4}}])
    write_commit(table, 1, [{"commitInfo": {"timestamp": 1, "operation": "X"}}, winner])
    with pytest.raises(ConflictError) as exc:
        txn.commit()
    assert exc.value.kind == kind and exc.value.winning_version == 1
    assert isinstance(exc.value, CommitConflictError)
    assert kind in str(exc.value) and "version 1" in str(exc.value)
    assert not (table / commit_key(2)).exists()


def test_other_domains_and_app_ids_do_not_conflict(tmp_path):
    table = handmade_table(tmp_path / "t", ["appendOnly", "invariants", "domainMetadata"])
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE")
    txn.add_actions([{"domainMetadata": {"domain": "mine", "configuration": "{}", "removed": False}}])
    write_commit(table, 1, [{"domainMetadata": {"domain": "theirs", "configuration": "{}", "removed": False}},
                            {"txn": {"appId": "other", "version": 1}}])
    assert txn.commit() == 2


def test_data_changing_transaction_conflicts_with_concurrent_append(tmp_path):
    table = handmade_table(tmp_path / "t")
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "DELETE")
    txn.add_actions([{"remove": {"path": "f0.parquet", "dataChange": True, "deletionTimestamp": 1}}])
    write_commit(table, 1, [{"add": {"path": "f9.parquet", "partitionValues": {}, "size": 1,
                                     "modificationTime": 1, "dataChange": True}}])
    with pytest.raises(ConflictError, match="ConcurrentAppend"):
        txn.commit()


def test_retries_are_bounded(tmp_path):
    table = make_table(tmp_path / "t", batches=2)
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE", max_retries=0)
    txn.add_actions(rewrite_actions(str(table), snap.add_actions()))
    write_commit(table, snap.version + 1, [{"commitInfo": {"timestamp": 1, "operation": "VACUUM START"}}])
    with pytest.raises(CommitFailedError, match="after 1 attempts"):
        txn.commit()
    assert not (table / commit_key(snap.version + 2)).exists()


# -- in-commit timestamps -------------------------------------------------------------------------

def test_in_commit_timestamps_are_first_and_monotonic_on_a_corpus_table(copy_table):
    table = copy_table("rs/cdc_ict_table")
    snap = Snapshot.load(str(table))
    assert ict_enabled(snap)
    previous = log_lines(table, snap.version)[0]["commitInfo"]["inCommitTimestamp"]
    # A commit far in the future: the next one must still move forward.
    future = int(time.time() * 1000) + 10 * 86_400_000
    write_commit(table, snap.version + 1, [{"commitInfo": {"inCommitTimestamp": future, "timestamp": future,
                                                           "operation": "VACUUM START"}}])
    txn = Transaction(snap, "OPTIMIZE", {"predicate": []})
    adds = snap.add_actions()
    txn.add_actions(rewrite_actions(str(table), adds[:1]))
    v1 = txn.commit({"numAddedFiles": 1})  # rebased over the future commit
    assert v1 == snap.version + 2
    info = log_lines(table, v1)[0]["commitInfo"]
    assert list(info)[0] == "inCommitTimestamp"
    assert info["inCommitTimestamp"] == future + 1 and info["timestamp"] == future + 1

    snap2 = Snapshot.load(str(table))
    v2 = commit_actions(snap2, "OPTIMIZE", rewrite_actions(str(table), snap2.add_actions()[:1]))
    icts = [log_lines(table, v)[0]["commitInfo"]["inCommitTimestamp"] for v in (snap.version, v1 - 1, v1, v2)]
    assert icts == sorted(icts) and len(set(icts)) == 4 and icts[0] == previous
    assert delta_rs_version(table) == v2
    assert table_rows(table, "name") == snapshot_rows(table, "name")


def test_in_commit_timestamp_uses_now_when_the_previous_one_is_older(tmp_path):
    table = handmade_table(tmp_path / "t", ["appendOnly", "invariants", "inCommitTimestamp"],
                           {"delta.enableInCommitTimestamps": "true"})
    snap = Snapshot.load(str(table))
    started = int(time.time() * 1000)
    v = commit_actions(snap, "OPTIMIZE", rewrite_actions(str(table), snap.add_actions()))
    info = log_lines(table, v)[0]["commitInfo"]
    assert started <= info["inCommitTimestamp"] <= int(time.time() * 1000)
    # Not enabled: no in-commit timestamp even though the feature is there.
    table2 = handmade_table(tmp_path / "t2", ["appendOnly", "invariants", "inCommitTimestamp"])
    snap2 = Snapshot.load(str(table2))
    assert not ict_enabled(snap2)
    v = commit_actions(snap2, "OPTIMIZE", rewrite_actions(str(table2), snap2.add_actions()))
    assert "inCommitTimestamp" not in log_lines(table2, v)[0]["commitInfo"]


# -- races between processes --------------------------------------------------------------------

def test_two_processes_race_on_disjoint_files_both_commit(tmp_path):
    table = make_table(tmp_path / "t")
    snap = Snapshot.load(str(table))
    paths = snap.paths
    results = race(table, tmp_path, [paths[:2], paths[2:]])
    assert sorted(r["version"] for r in results) == [snap.version + 1, snap.version + 2]
    assert sorted(r["attempts"] for r in results) == [1, 2]
    assert all(r["read_version"] == snap.version for r in results)
    assert delta_rs_version(table) == snap.version + 2
    assert table_rows(table) == list(range(20)) == snapshot_rows(table)
    assert Snapshot.load(str(table)).num_files == 2


def test_two_processes_race_on_the_same_files_one_wins_one_conflicts(tmp_path):
    table = make_table(tmp_path / "t")
    snap = Snapshot.load(str(table))
    paths = snap.paths
    results = race(table, tmp_path, [paths[:3], paths[1:]])
    winners = [r for r in results if "version" in r]
    losers = [r for r in results if "conflict" in r]
    assert len(winners) == 1 and len(losers) == 1
    assert winners[0]["version"] == snap.version + 1
    assert losers[0]["conflict"] == "ConcurrentDeleteDelete"
    assert losers[0]["winning_version"] == snap.version + 1
    assert f"version {snap.version + 1}" in losers[0]["message"]
    assert delta_rs_version(table) == snap.version + 1
    assert table_rows(table) == list(range(20)) == snapshot_rows(table)  # nothing lost or duplicated


# -- races against delta-rs ------------------------------------------------------------------------

DELTA_RS_APPEND = r"""
import sys
import pyarrow as pa
from deltalake import write_deltalake
start, count = int(sys.argv[2]), int(sys.argv[3])
for n in range(count):
    ids = list(range(start + 5 * n, start + 5 * n + 5))
    write_deltalake(sys.argv[1], pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}),
                    mode="append")
"""

DELTA_RS_DELETE = r"""
import sys
from deltalake import DeltaTable
DeltaTable(sys.argv[1]).delete(sys.argv[2])
"""


def test_delta_rs_append_is_rebased_over(tmp_path):
    table = make_table(tmp_path / "t")
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE", {"predicate": []})
    txn.add_actions(rewrite_actions(str(table), snap.add_actions()))
    done = run_python(DELTA_RS_APPEND, str(table), "100", "1")
    assert done.returncode == 0, done.stderr
    assert txn.commit({"numAddedFiles": 1}) == snap.version + 2 and txn.attempts == 2
    assert delta_rs_version(table) == snap.version + 2
    expected = list(range(20)) + list(range(100, 105))
    assert table_rows(table) == expected == snapshot_rows(table)


def test_concurrent_delta_rs_appends_and_our_commit_all_land(tmp_path):
    table = make_table(tmp_path / "t")
    snap = Snapshot.load(str(table))
    txn = Transaction(snap, "OPTIMIZE", {"predicate": []})
    txn.add_actions(rewrite_actions(str(table), snap.add_actions()))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", DELTA_RS_APPEND, str(table), "200", "6"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not (table / commit_key(snap.version + 1)).exists() and time.time() < deadline:
        time.sleep(0.002)  # let the appender get going, then race it
    version = txn.commit()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    final = delta_rs_version(table)
    assert final == snap.version + 7 and snap.version < version <= final
    expected = sorted(list(range(20)) + list(range(200, 230)))
    assert table_rows(table) == expected == snapshot_rows(table)
    info = log_lines(table, version)[0]["commitInfo"]
    assert info["txnId"] == txn.txn_id and info["readVersion"] == snap.version


def test_delta_rs_delete_of_a_file_we_remove_conflicts_and_only_that_bin_is_dropped(tmp_path):
    table = make_table(tmp_path / "t", batches=6)
    snap = Snapshot.load(str(table))
    by_first_id = {}
    for a in snap.add_actions():
        first = pq.read_table(table / unquote(a["path"]), columns=["id"]).column("id")[0].as_py()
        by_first_id[first] = a
    bin_a = [by_first_id[0], by_first_id[5], by_first_id[10]]  # the delete hits id 7
    bin_b = [by_first_id[15], by_first_id[20], by_first_id[25]]
    actions_a = rewrite_actions(str(table), bin_a, "a-")
    actions_b = rewrite_actions(str(table), bin_b, "b-")
    txn = Transaction(snap, "OPTIMIZE")
    txn.add_actions(actions_a + actions_b)

    done = run_python(DELTA_RS_DELETE, str(table), "id = 7")
    assert done.returncode == 0, done.stderr
    with pytest.raises(ConflictError) as exc:
        txn.commit()
    assert exc.value.kind == "ConcurrentDeleteDelete" and exc.value.winning_version == snap.version + 1
    assert exc.value.paths == {by_first_id[5]["path"]}
    assert by_first_id[5]["path"] in str(exc.value)

    inputs = [a["path"] for a in bin_a + bin_b]
    hit = conflicting_files(snap.storage, snap.version, inputs)
    assert hit == {by_first_id[5]["path"]: snap.version + 1}
    # Retry without the bin that read the deleted file, from the same read version.
    survivors = [actions for actions, inputs_ in ((actions_a, bin_a), (actions_b, bin_b))
                 if not any(a["path"] in hit for a in inputs_)]
    assert survivors == [actions_b]
    retry = Transaction(snap, "OPTIMIZE")
    retry.add_actions(actions_b)
    assert retry.commit() == snap.version + 2
    assert delta_rs_version(table) == snap.version + 2
    expected = [i for i in range(30) if i != 7]
    assert table_rows(table) == expected == snapshot_rows(table)


def test_conflicting_files_matches_relative_and_absolute_spellings(tmp_path):
    table = make_table(tmp_path / "t", batches=2)
    snap = Snapshot.load(str(table))
    first, second = snap.paths
    write_commit(table, snap.version + 1, [{"remove": {"path": f"file://{table}/{first}", "dataChange": True,
                                                       "deletionTimestamp": 1}}])
    write_commit(table, snap.version + 2, [{"remove": {"path": second, "dataChange": True,
                                                       "deletionTimestamp": 1}}])
    assert conflicting_files(snap.storage, snap.version, [first, second, "nope.parquet"]) == {
        first: snap.version + 1, second: snap.version + 2}
    assert conflicting_files(snap.storage, snap.version, [first, second], until_version=snap.version + 1) == {
        first: snap.version + 1}
    assert read_commit(snap.storage, snap.version + 2)[0]["remove"]["path"] == second
