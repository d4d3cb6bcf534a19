"""A newer version built on a kept snapshot and the commits after it is the state a whole read of the log gives."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_maint.delta.errors import InconsistentStateError
from airflow_delta_maint.delta.log import snapshot as snapshot_module
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.snapshot_cache import SnapshotCache, keeping_snapshots
from tests.dv_writer import DVTable
from tests.hypothesis_profiles import examples


def view(snap: Snapshot, paths_only: bool = False) -> dict[str, Any]:
    """Everything a state holds, its files and tombstones in path order (of a read of paths only, what it reads
    whole: a state read whole serves it too)."""
    def rows(table: pa.Table) -> list[dict]:
        if paths_only:
            table = table.select([c for c in ("path", "deletionVector", "deletionTimestamp") if c in table.schema.names])
        return sorted(table.to_pylist(), key=lambda r: (r["path"], json.dumps(r.get("deletionVector"))))

    return {"version": snap.version, "segment": snap.segment, "protocol": snap.protocol.to_action(),
            "metadata": snap.metadata.to_action(), "txns": snap.txns, "domains": snap.domains,
            "domain_tombstones": snap.domain_tombstones, "commit_timestamp": snap.commit_timestamp,
            "files": rows(snap.files), "tombstones": rows(snap.tombstones), "distrusted": snap.distrusted}


def same_as_whole_read(path: str, cache: SnapshotCache, paths_only: bool = False) -> Snapshot:
    with keeping_snapshots(cache):
        built = Snapshot.load(path, paths_only=paths_only)
    assert view(built, paths_only) == view(Snapshot.load(path, paths_only=paths_only), paths_only)
    return built


def other_actions(table: DVTable, step: int) -> int:
    """A commit of no file, as another writer writes it: an app transaction, a domain, a property (a new
    metaData), or the domain removed."""
    snap = Snapshot.load(str(table.path))
    kind = step % 4
    if kind == 0:
        actions = [{"txn": {"appId": f"app-{step % 3}", "version": step, "lastUpdated": 1}}]
    elif kind in (1, 3):
        actions = [{"domainMetadata": {"domain": "tests.d", "configuration": json.dumps({"n": step}),
                                       "removed": kind == 3}}]
    else:
        meta = snap.metadata.to_action()
        meta["configuration"] = {**meta.get("configuration", {}), "tests.step": str(step)}
        actions = [{"metaData": meta}]
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES"}}
    version = snap.version + 1
    Path(table.path, "_delta_log", f"{version:020d}.json").write_text(
        "\n".join(json.dumps(a) for a in [info, *actions]) + "\n")
    return version


steps = st.lists(st.sampled_from(["append", "delete", "rewrite", "other", "checkpoint", "two"]), min_size=1,
                 max_size=8)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=steps, seed=st.integers(0, 50), partitioned=st.booleans())
def test_every_version_built_on_a_kept_one_is_the_whole_read_s_state(ops: list[str], seed: int, partitioned: bool):
    """Deletion vectors replaced, files removed and re-added, transactions, domains, properties and checkpoints:
    after each, the state built on the kept one equals a whole read, and a commit after the last read is built."""
    with tempfile.TemporaryDirectory() as tmp:
        table = DVTable(Path(tmp) / "t", partitioned=partitioned).create(["a", "b"], 2, 4)
        path, cache = str(table.path), SnapshotCache()
        version = same_as_whole_read(path, cache).version
        for step, op in enumerate(ops):
            before = cache.extended
            if op == "append":
                table.append("ab"[(seed + step) % 2], 3)
            elif op == "delete":
                table.delete(range(seed + step, seed + step + 6))
            elif op == "rewrite":
                table.rewrite_file(seed + step)
            elif op == "other":
                other_actions(table, seed + step)
            elif op == "two":  # two commits between reads
                table.append("a", 1)
                other_actions(table, seed + step)
            else:
                write_checkpoint(Snapshot.load(path))
            built = same_as_whole_read(path, cache)
            # every read after new commits is built on the kept read of the version before them
            assert cache.extended == before + (built.version > version)
            version = built.version


def test_the_next_read_after_a_commit_reads_the_new_commit_only(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1, 2]}))
    write_deltalake(path, pa.table({"a": [3]}), mode="append")
    DeltaTable(path).create_checkpoint()
    write_deltalake(path, pa.table({"a": [4]}), mode="append")
    cache = SnapshotCache()
    with keeping_snapshots(cache):
        first = Snapshot.load(path)
    write_deltalake(path, pa.table({"a": [5]}), mode="append")
    read: list[str] = []
    real = snapshot_module.read_checkpoint
    monkeypatch.setattr(snapshot_module, "read_checkpoint", lambda s, c, *a: read.append(c.files[0].key) or real(s, c, *a))
    built = same_as_whole_read(path, cache)
    assert cache.extended == 1 and len(read) == 1  # the whole read's; none for the state built on the kept one
    assert built.version == first.version + 1 and built.files.num_rows == first.files.num_rows + 1


def test_a_rewritten_older_commit_is_not_built_on(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1]}))
    cache = SnapshotCache()
    write_deltalake(path, pa.table({"a": [2]}), mode="append")
    same_as_whole_read(path, cache)
    commit = os.path.join(path, "_delta_log", f"{1:020d}.json")
    later = time.time() + 5
    os.utime(commit, (later, later))  # version 1 is another file now: the kept state of it is not the base
    write_deltalake(path, pa.table({"a": [3]}), mode="append")
    built = same_as_whole_read(path, cache)
    assert cache.extended == 0 and built.version == 2


def test_a_new_checkpoint_is_a_whole_read_and_the_next_commit_builds_on_it(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1]}))
    cache = SnapshotCache()
    same_as_whole_read(path, cache)
    DeltaTable(path).create_checkpoint()
    same_as_whole_read(path, cache)
    assert cache.extended == 0
    write_deltalake(path, pa.table({"a": [2]}), mode="append")
    built = same_as_whole_read(path, cache)
    assert cache.extended == 1 and built.segment.checkpoint_version == 0


def test_a_whole_read_is_not_built_on_a_read_of_paths_only(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1]}))
    DeltaTable(path).create_checkpoint()
    cache = SnapshotCache()
    same_as_whole_read(path, cache, paths_only=True)
    write_deltalake(path, pa.table({"a": [2]}), mode="append")
    same_as_whole_read(path, cache)
    assert cache.extended == 0
    write_deltalake(path, pa.table({"a": [3]}), mode="append")
    same_as_whole_read(path, cache, paths_only=True)  # a read of paths only builds on either
    assert cache.extended == 1


def test_a_commit_that_makes_a_path_live_twice_is_refused_as_the_whole_read_refuses_it(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1]}))
    cache = SnapshotCache()
    with keeping_snapshots(cache):
        live = Snapshot.load(path).add_actions()[0]
    bad = {**live, "deletionVector": {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f",
                                      "offset": 1, "sizeInBytes": 36, "cardinality": 1}}
    log = Path(path, "_delta_log", f"{1:020d}.json")
    log.write_text(json.dumps({"commitInfo": {"timestamp": 1}}) + "\n" + json.dumps({"add": bad}) + "\n")
    with keeping_snapshots(cache), pytest.raises(InconsistentStateError, match="live"):
        Snapshot.load(path)
    with pytest.raises(InconsistentStateError, match="live"):
        Snapshot.load(path)
    assert cache.extended == 1
