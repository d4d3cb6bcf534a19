"""Property tests: after any short sequence of delta-rs writes, deletes and checkpoints, our
snapshot at every version agrees with delta-rs's."""

from __future__ import annotations

import json
import os
import tempfile
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.log.snapshot import Snapshot

KEYS = ["x", "y", "z z", "a/b"]  # a space and a slash exercise partition path escaping

append = st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 3))
overwrite = st.tuples(st.just("overwrite"), st.integers(1, 4), st.integers(0, 3))
delete = st.tuples(st.just("delete"), st.integers(0, 40), st.sampled_from(["lt", "key"]))
checkpoint = st.tuples(st.just("checkpoint"))
operations = st.lists(st.one_of(append, append, overwrite, delete, checkpoint), min_size=1, max_size=6)


def batch(rows: int, seed: int, start: int) -> pa.Table:
    """``rows`` rows with ids from ``start``, keys picked by ``seed``."""
    return pa.table({
        "id": pa.array(range(start, start + rows), pa.int64()),
        "key": pa.array([KEYS[(seed + i) % len(KEYS)] for i in range(rows)]),
        "value": pa.array([float(i) / 3 for i in range(rows)]),
    })


def rs_view(root: str, version: int) -> dict:
    """What delta-rs reports at ``version``: relative file paths, protocol, metadata, sizes."""
    dt = DeltaTable(root, version=version)
    real = os.path.realpath(root)
    files = set()
    for uri in dt.file_uris():
        local = unquote(uri[len("file://"):]) if uri.startswith("file://") else uri
        files.add(os.path.relpath(local, real))
    protocol = dt.protocol()
    actions = pa.table(dt.get_add_actions())
    return {
        "files": files,
        "uris": dt.file_uris(),
        "protocol": (protocol.min_reader_version, protocol.min_writer_version,
                     sorted(protocol.reader_features or []), sorted(protocol.writer_features or [])),
        "metadata": (dt.metadata().id, list(dt.metadata().partition_columns)),
        "size_bytes": sum(actions.column("size_bytes").to_pylist()),
    }


def our_view(root: str, version: int) -> dict:
    snap = Snapshot.load(root, version=version)
    assert snap.version == version
    return {
        "files": {snap.storage.key_for_path(p) or p for p in snap.paths},
        "protocol": (snap.protocol.min_reader_version, snap.protocol.min_writer_version,
                     sorted(snap.protocol.reader_features), sorted(snap.protocol.writer_features)),
        "metadata": (snap.metadata.id, snap.partition_columns),
        "size_bytes": snap.size_bytes,
        "num_records": sum(json.loads(s)["numRecords"] for s in snap.files.column("stats").to_pylist()),
    }


def apply(root: str, ops: list[tuple], partitioned: bool) -> int:
    """Run ``ops`` on a new table at ``root``; returns the number of rows delta-rs should hold."""
    next_id = 0
    write_deltalake(root, batch(3, 0, next_id), mode="append", partition_by=["key"] if partitioned else None)
    next_id += 3
    for op in ops:
        if op[0] in ("append", "overwrite"):
            write_deltalake(root, batch(op[1], op[2], next_id), mode=op[0],
                            partition_by=["key"] if partitioned else None)
            next_id += op[1]
        elif op[0] == "delete":
            predicate = f"id < {op[1]}" if op[2] == "lt" else f"key = '{KEYS[op[1] % len(KEYS)]}'"
            DeltaTable(root).delete(predicate)
        else:
            DeltaTable(root).create_checkpoint()
    return DeltaTable(root).version()


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, partitioned=st.booleans())
def test_every_version_matches_delta_rs(ops: list[tuple], partitioned: bool):
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "t")
        latest = apply(root, ops, partitioned)
        assert Snapshot.load(root).version == latest
        for version in range(latest + 1):
            theirs, ours = rs_view(root, version), our_view(root, version)
            assert ours["files"] == theirs["files"], f"version {version}"
            assert ours["protocol"] == theirs["protocol"]
            assert ours["metadata"] == theirs["metadata"]
            assert ours["size_bytes"] == theirs["size_bytes"]
        # the rows the data files hold are the rows the statistics promise
        rows = sum(pq.ParquetFile(uri).metadata.num_rows for uri in theirs["uris"])
        assert ours["num_records"] == rows


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_checkpoint_then_commits_equals_commits_alone(ops: list[tuple]):
    """Reading from the newest checkpoint gives the state a full replay of the commits gives."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "t")
        apply(root, ops, partitioned=True)
        with_checkpoints = Snapshot.load(root)
        log = os.path.join(root, "_delta_log")
        for name in os.listdir(log):
            if ".checkpoint." in name or name == "_last_checkpoint":
                os.remove(os.path.join(log, name))
        replayed = Snapshot.load(root)
        assert replayed.segment.checkpoint is None
        assert sorted(replayed.paths) == sorted(with_checkpoints.paths)
        assert replayed.size_bytes == with_checkpoints.size_bytes
        assert replayed.metadata.id == with_checkpoints.metadata.id
        assert replayed.protocol == with_checkpoints.protocol
        assert sorted(replayed.tombstones.column("path").to_pylist()) == \
            sorted(with_checkpoints.tombstones.column("path").to_pylist())


segments = st.lists(st.sampled_from(["a", "p=1", "%20", "%2F", "%25", "x y", ":", "%3A", "part-0.parquet", "é"]),
                    min_size=1, max_size=4).map("".join)
log_paths = st.tuples(st.sampled_from(["", "/", "file:/", "file:///", "file:///tbl/root/", "s3://b/t/",
                                       "s3a://b/t/"]),
                      st.lists(segments, min_size=1, max_size=3).map("/".join)).map("".join)


@settings(max_examples=examples(300), deadline=None)
@given(path=log_paths, root=st.sampled_from(["file:///tbl/root", "s3://b/t"]))
def test_cheap_file_name_is_the_canonical_path_s_last_segment(path: str, root: str):
    """The pre-filter of checkpoint rows never rejects a row whose canonical path could match."""
    from airflow_delta_maint.delta.protocol.paths import canonical_path, file_name

    assert file_name(path) == canonical_path(path, root).rpartition("/")[2]
