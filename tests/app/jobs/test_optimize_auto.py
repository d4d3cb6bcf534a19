"""The auto-compaction policy (``delta-maint optimize --policy auto``): hot partitions chosen from the
log alone, no Spark when nothing is chosen, reserved partitions left to their holder."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.leases import reserve_partitions
from airflow_delta_maint.delta.protocol.deletion_vectors import write_deletion_vector
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.test_optimize import rows_deltars

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]})


class Partitioned:
    """A table partitioned by ``p`` whose small files are written and committed by hand."""

    def __init__(self, path: Path):
        self.path, self.next_id = path, 0
        (path / "_delta_log").mkdir(parents=True)
        self.commit({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                                  "writerFeatures": ["deletionVectors"]}},
                    {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                                  "schemaString": SCHEMA, "partitionColumns": ["p"],
                                  "configuration": {"delta.enableDeletionVectors": "true"}}})

    def commit(self, *actions: dict, operation: str = "WRITE") -> None:
        version = max([int(f.name[:20]) for f in (self.path / "_delta_log").glob("*.json")], default=-1) + 1
        lines = [{"commitInfo": {"timestamp": 1_700_000_000_000, "operation": operation}}, *actions]
        with open(self.path / "_delta_log" / f"{version:020d}.json", "x") as fh:
            fh.write("\n".join(json.dumps(a) for a in lines) + "\n")

    def add(self, partition: str, files: int, rows: int = 20) -> list[dict]:
        adds = []
        (self.path / f"p={partition}").mkdir(exist_ok=True)
        for _ in range(files):
            ids = list(range(self.next_id, self.next_id + rows))
            self.next_id += rows
            rel = f"p={partition}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), self.path / rel)
            adds.append({"path": rel, "partitionValues": {"p": partition}, "size": (self.path / rel).stat().st_size,
                         "modificationTime": 1_700_000_000_000, "dataChange": True,
                         "stats": json.dumps({"numRecords": rows})})
        self.commit(*({"add": a} for a in adds))
        return adds


def optimize(path: Path, *args: str) -> dict:
    code, m = cli.run(["optimize", str(path), "--json", *args])
    assert code == 0, m
    return m


@pytest.fixture
def hot_and_cold(tmp_path: Path) -> Partitioned:
    """Eight partitions compacted once; then p1 and p5 receive 55 small files each, p3 receives 10."""
    t = Partitioned(tmp_path / "t")
    for i in range(8):
        t.add(f"part{i}", 3)
    optimize(t.path, "--min-file-size", str(1 << 20))
    for name, n in (("part1", 55), ("part5", 55), ("part3", 10)):
        t.add(name, n)
    return t


def test_auto_chooses_exactly_the_hot_partitions(hot_and_cold: Partitioned, spark) -> None:
    t = hot_and_cold
    rows = rows_deltars(t.path)
    params = {"policy": "auto", "min_file_size": 1 << 20}
    assert nothing_to_do(str(t.path), None, options_from(params)) is None
    m = optimize(t.path, "--policy", "auto", "--min-file-size", str(1 << 20))
    auto = m["autoCompaction"]
    assert m["status"] == "committed", m
    assert auto["partitionsConsidered"] == 3 and auto["chosenPartitions"] == ["p=part1", "p=part5"]
    assert list(auto["skippedPartitions"]) == ["p=part3"] and "11 small files" in auto["skippedPartitions"]["p=part3"]
    assert auto["smallFilesPerChosenPartition"] == {"p=part1": 56, "p=part5": 56}
    assert m["numRemovedFiles"] == 112
    assert rows_deltars(t.path) == rows
    info = json.loads((t.path / "_delta_log" / f"{m['version_committed']:020d}.json").read_text().splitlines()[0])
    assert info["commitInfo"]["operationParameters"]["auto"] is True

    # right after: the worker's check says why, so no Spark application starts
    skip = nothing_to_do(str(t.path), None, options_from(params))
    assert skip is not None and "no partition received data files" in skip
    assert skip.details["autoCompaction"]["partitionsConsidered"] == 0
    # --all-partitions looks at the cold ones too, and finds none worth it
    skip = nothing_to_do(str(t.path), None, options_from({**params, "all_partitions": True}))
    assert skip is not None and skip.details["autoCompaction"]["partitionsConsidered"] == 8


def test_deleted_rows_choose_a_partition_with_few_files(hot_and_cold: Partitioned, spark) -> None:
    t = hot_and_cold
    snap = Snapshot.load(str(t.path))
    (victim,) = [a for a in snap.add_actions() if a["partitionValues"]["p"] == "part6"]
    dv = write_deletion_vector(Storage(str(t.path)), range(6))  # 6 of its 60 rows
    t.commit({"remove": {"path": victim["path"], "deletionTimestamp": 1, "dataChange": True}},
             {"add": {**{k: victim[k] for k in ("path", "partitionValues", "size", "modificationTime", "stats")},
                      "dataChange": True, "deletionVector": dv}}, operation="DELETE")
    m = optimize(t.path, "--policy", "auto", "--min-file-size", str(1 << 20), "--max-partitions", "2")
    auto = m["autoCompaction"]
    assert set(auto["chosenPartitions"]) == {"p=part1", "p=part5"}  # the two worst by small files
    assert "beyond the 2 worst" in auto["skippedPartitions"]["p=part6"]
    # that OPTIMIZE deferred p=part6: the next run looks past it and picks it up
    m = optimize(t.path, "--policy", "auto", "--min-file-size", str(1 << 20))
    assert m["autoCompaction"]["chosenPartitions"] == ["p=part6"], m["autoCompaction"]
    assert m["numDeletionVectorsRemoved"] == 1 and m["numRemovedFiles"] == 1
    assert "no partition received" in nothing_to_do(str(t.path), None, options_from({"policy": "auto", "min_file_size": 1 << 20}))


def test_reserved_partitions_are_left_to_their_holder(hot_and_cold: Partitioned, spark) -> None:
    t = hot_and_cold
    storage = Storage(str(t.path))
    other = reserve_partitions(storage, ["p=part1"], run_id="straggler")
    rows = rows_deltars(t.path)
    m = optimize(t.path, "--policy", "auto", "--min-file-size", str(1 << 20))
    assert m["partitionsReservedByOthers"] == {"p=part1": "straggler"}
    assert m["numRemovedFiles"] == 56  # p=part5 only
    assert rows_deltars(t.path) == rows
    other.release()
    m = optimize(t.path, "--policy", "auto", "--min-file-size", str(1 << 20))
    assert m["autoCompaction"]["chosenPartitions"] == ["p=part1"] and m["numRemovedFiles"] == 56
    assert not any((t.path / "_delta_maint" / "reservations").iterdir())  # released at the end
    assert rows_deltars(t.path) == rows


def test_auto_refuses_a_predicate(hot_and_cold: Partitioned, spark) -> None:  # the fixture's OPTIMIZE runs on Spark
    code, m = cli.run(["optimize", str(hot_and_cold.path), "--json", "--policy", "auto", "--where", "p = 'part1'"])
    assert code != 0 and "policy='auto' chooses partitions itself" in m["error"]
