"""``optimize --target-files N``: each selected partition rewritten into exactly N files of even
row counts, large files split, deletion vectors applied, rows unchanged, a rerun a no-op."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.deletion_vectors import read_deletion_vector, write_deletion_vector
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.test_optimize import listing, rows_deltars
from tests.app.jobs.test_optimize_auto import Partitioned


def _live_ids(path: Path) -> Counter:
    snap = Snapshot.load(str(path))
    out: Counter = Counter()
    for add in snap.add_actions():
        ids = pq.read_table(path / add["path"]).column("id").to_pylist()
        dead = set(read_deletion_vector(snap.storage, add["deletionVector"]).tolist()) if add.get("deletionVector") \
            else set()
        out.update((add["partitionValues"]["p"], i) for pos, i in enumerate(ids) if pos not in dead)
    return out


def _per_partition(path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for add in Snapshot.load(str(path)).add_actions():
        out.setdefault(add["partitionValues"]["p"], []).append(json.loads(add["stats"])["numRecords"])
    return {k: sorted(v) for k, v in out.items()}


def test_partitions_become_n_even_files(tmp_path: Path, spark) -> None:
    t = Partitioned(tmp_path / "t")
    t.add("small", 7, rows=20)
    t.add("big", 1, rows=1000)
    t.add("tiny", 1, rows=2)
    rows = rows_deltars(t.path)
    code, m = cli.run(["optimize", str(t.path), "--json", "--target-files", "3"])
    assert code == 0 and m["status"] == "committed", m
    assert _per_partition(t.path) == {"small": [46, 47, 47], "big": [333, 333, 334], "tiny": [1, 1]}
    assert rows_deltars(t.path) == rows
    assert "already is 3 files" in nothing_to_do(str(t.path), None, options_from({"target_files": 3}))
    code, m = cli.run(["optimize", str(t.path), "--json", "--target-files", "3"])
    assert m["status"] == "skipped"
    # fewer files: only the partition named
    code, m = cli.run(["optimize", str(t.path), "--json", "--target-files", "2", "--where", "p = 'big'"])
    assert m["status"] == "committed" and _per_partition(t.path)["big"] == [500, 500]
    assert rows_deltars(t.path) == rows


def test_deleted_rows_stay_deleted(tmp_path: Path, spark) -> None:
    t = Partitioned(tmp_path / "t")
    adds = t.add("a", 4, rows=25)
    dv = write_deletion_vector(Storage(str(t.path)), [0, 5, 24])
    victim = adds[1]
    t.commit({"remove": {"path": victim["path"], "deletionTimestamp": 1, "dataChange": True}},
             {"add": {**victim, "deletionVector": dv}}, operation="DELETE")
    before = _live_ids(t.path)
    assert sum(before.values()) == 97
    code, m = cli.run(["optimize", str(t.path), "--json", "--target-files", "4"])
    assert m["status"] == "committed" and m["numDeletionVectorsRemoved"] == 1, m
    assert _live_ids(t.path) == before
    assert _per_partition(t.path) == {"a": [24, 24, 24, 25]}


def test_a_wrong_row_count_fails_and_commits_nothing(tmp_path: Path, spark) -> None:
    t = Partitioned(tmp_path / "t")
    adds = t.add("a", 2, rows=10)
    lie = {**adds[0], "stats": json.dumps({"numRecords": 7})}
    t.commit({"remove": {"path": adds[0]["path"], "deletionTimestamp": 1, "dataChange": False}},
             {"add": {**lie, "dataChange": False}}, operation="COMPUTE STATS")
    log_before = {k: v for k, v in listing(t.path).items() if k.startswith("_delta_log")}
    code, m = cli.run(["optimize", str(t.path), "--json", "--target-files", "2"])
    assert code != 0 and "numRecords" in m["error"] and adds[0]["path"] in m["error"]
    assert {k: v for k, v in listing(t.path).items() if k.startswith("_delta_log")} == log_before


def test_bad_combinations_are_refused(tmp_path: Path) -> None:
    t = Partitioned(tmp_path / "t")
    t.add("a", 2)
    for args, message in ((["--target-files", "0"], "must be positive"),
                          (["--target-files", "2", "--zorder-by", "id"], "takes no zorder_by")):
        code, m = cli.run(["optimize", str(t.path), "--json", *args])
        assert code != 0 and message in m["error"], m
