"""The read core against the conformance corpus and delta-rs, plus handcrafted logs.

Every corpus table is checked: where delta-rs 1.6.0 loaded the log, our snapshot must agree
with it; where it refused, ``EXPECTED_REFUSALS`` states what the Delta protocol asks for.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.delta.errors import (
    CorruptLogError, DeltaError, MissingVersionError, NotADeltaTableError, TableNotFoundError,
    UnsupportedFeatureError,
)
from airflow_delta_maint.delta.log.history import log_state
from airflow_delta_maint.delta.log.listing import LOG_DIR, build_segment
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.paths import canonical_path
from airflow_delta_maint.delta.protocol.features import check_supported
from airflow_delta_maint.delta.storage.store import Storage
from tests.conftest import corpus_path, load_manifest

MANIFEST: dict[str, dict] = {t["table"]: t["oracle"] for t in load_manifest()}

# What the protocol asks for on each table delta-rs refused. Outcomes:
#   ("error", DeltaError subclass, text the message contains)
#   ("snapshot", {expected values}) - a valid table
#   ("unsupported", text) - the log is valid; the read gate refuses the protocol
EXPECTED_REFUSALS: dict[str, tuple[tuple, str]] = {
    "golden/versions-not-contiguous": (
        ("error", MissingVersionError, "commit 1 is missing"),
        "commits 0 and 2 exist, 1 does not: a version cannot be reconstructed across a gap"),
    "golden/deltalog-state-reconstruction-without-protocol": (
        ("error", CorruptLogError, "no protocol action"),
        "every table version must have a protocol action"),
    "golden/deltalog-state-reconstruction-without-metadata": (
        ("error", CorruptLogError, "no metaData action"),
        "every table version must have a metaData action"),
    "golden/deltalog-state-reconstruction-from-checkpoint-missing-protocol": (
        ("error", CorruptLogError, "no protocol action"),
        "the checkpoint (and the commits after it) carry no protocol action"),
    "golden/deltalog-state-reconstruction-from-checkpoint-missing-metadata": (
        ("error", CorruptLogError, "no metaData action"),
        "the checkpoint (and the commits after it) carry no metaData action"),
    "golden/data-reader-absolute-paths-escaped-chars": (
        ("error", CorruptLogError, "no metaData action"),
        "its two commits hold protocol and add actions but no metaData action at all"),
    "golden/corrupted-last-checkpoint": (
        ("snapshot", {"version": 10, "num_files": 11, "size_bytes": 11, "checkpoint": 10,
                      "files": [str(i) for i in range(11)]}),
        "valid: _last_checkpoint is only a hint; delta-rs rejects a null schemaString in the checkpoint"),
    "golden/update-deleted-directory": (
        ("snapshot", {"version": 0, "num_files": 10, "size_bytes": 10, "checkpoint": 0,
                      "files": [str(i) for i in range(1, 11)]}),
        "valid: delta-rs's decoder rejects the null schemaString of the checkpoint's metaData"),
    "golden/deltalog-commit-info": (
        ("snapshot", {"version": 0, "num_files": 1, "size_bytes": 1, "files": ["abc"]}),
        "valid: metaData without schemaString is accepted by delta-spark; delta-rs's decoder is stricter"),
    "golden/canonicalized-paths-normal-a": (
        ("snapshot", {"version": 1, "num_files": 0, "size_bytes": 0, "tombstones": 1}),
        "valid: add '/some/...' and remove 'file:/some/...' name one file (paths are URIs), so none is left"),
    "golden/canonicalized-paths-normal-b": (
        ("snapshot", {"version": 1, "num_files": 0, "size_bytes": 0, "tombstones": 1}),
        "valid: add '/some/...' and remove 'file:///some/...' name one file, so none is left"),
    "golden/canonicalized-paths-special-a": (
        ("snapshot", {"version": 1, "num_files": 0, "size_bytes": 0, "tombstones": 1}),
        "valid: the escaped '/some/unqualified/with%20space/p@%23h' and its file: URI name one file"),
    "golden/deltalog-invalid-protocol-version": (
        ("unsupported", "minReaderVersion 99"),
        "the log is well formed, but reader version 99 is unknown, so no reader may read the table;"
        " its empty readerFeatures list is legal only at reader version 3 and is moot next to the version"),
    "spark44/geospatial": (
        ("snapshot", {"version": 5, "num_files": 8, "size_bytes": 15995, "tombstones": 1}),
        "valid: delta-spark 4.4 writes the geospatial feature and 'geometry(OGC:CRS84)' columns; delta-rs 1.6 knows"
        " no geometry type (the counts are the log's adds and removes replayed by hand)"),
    "rs/simple_table_features": (
        ("unsupported", "minReaderVersion 5"),
        "readerFeatures are only defined at minReaderVersion 3; version 5 does not exist, and the"
        " list also names the unknown reader feature 'blahabl'; both make the table unreadable"),
}

#: Multi-version tables whose every version is compared with delta-rs time travel.
TIME_TRAVEL_TABLES = [
    "golden/checkpoint", "golden/125-iterator-bug", "golden/snapshot-vacuumed",
    "golden/dv-partitioned-with-checkpoint", "rs/simple_table", "rs/simple_table_with_checkpoint",
    "rs/table_with_deletion_logs", "spark/table-with-dv-large", "rs/delta-1.2.1-only-struct-stats",
]


# -- helpers -----------------------------------------------------------------------------------

def snapshot_keys(snap: Snapshot) -> set[str]:
    """Active files as decoded paths relative to the table root (absolute ones kept)."""
    return {snap.storage.key_for_path(p) or p for p in snap.paths}


def rs_keys(path: Path, version: int | None = None) -> set[str]:
    """Active files as delta-rs reports them, relative to the table root."""
    dt = DeltaTable(str(path), version=version) if version is not None else DeltaTable(str(path))
    root = os.path.realpath(path)
    out = set()
    for uri in dt.file_uris():
        local = unquote(uri[len("file://"):]) if uri.startswith("file://") else uri
        out.add(os.path.relpath(local, root))
    return out


def state(snap: Snapshot) -> tuple[Any, ...]:
    """A comparable summary of a snapshot."""
    return (snap.version, snap.protocol, snap.metadata.id, snap.partition_columns,
            sorted(snap.paths), snap.size_bytes, sorted(snap.tombstones.column("path").to_pylist()))


def protocol_action(rv: int = 1, wv: int = 2) -> dict:
    return {"protocol": {"minReaderVersion": rv, "minWriterVersion": wv}}


def metadata_action(table_id: str = "t-1", partition_columns: list[str] | None = None) -> dict:
    schema = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}]}
    return {"metaData": {"id": table_id, "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps(schema), "partitionColumns": partition_columns or [],
                         "configuration": {}, "createdTime": 1}}


def add(path: str, size: int = 10) -> dict:
    return {"add": {"path": path, "partitionValues": {}, "size": size, "modificationTime": 1, "dataChange": True}}


def remove(path: str) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": 2, "dataChange": True}}


def write_json(root: Path, name: str, actions: list[dict]) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / name).write_text("".join(json.dumps(a) + "\n" for a in actions))


def write_commits(root: Path, commits: dict[int, list[dict]]) -> None:
    for version, actions in commits.items():
        write_json(root, f"{version:020d}.json", actions)


def rs_table(root: Path, appends: int, checkpoints: tuple[int, ...] = (), partitioned: bool = False) -> Path:
    """A delta-rs table: ``appends`` small appends, a checkpoint after each version in ``checkpoints``."""
    for i in range(appends):
        data = pa.table({"a": pa.array([i, i + 100], pa.int64()), "p": pa.array([f"k{i % 3}", "z"])})
        write_deltalake(str(root), data, mode="append", partition_by=["p"] if partitioned else None)
        if i in checkpoints:
            DeltaTable(str(root)).create_checkpoint()
    return root


def checkpoint_table(root: Path, version: int) -> pa.Table:
    return pq.read_table(root / "_delta_log" / f"{version:020d}.checkpoint.parquet")


# -- the corpus --------------------------------------------------------------------------------

def test_every_refused_table_has_a_decision():
    refused = {name for name, oracle in MANIFEST.items() if not oracle.get("loaded")}
    assert refused == set(EXPECTED_REFUSALS)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_corpus_table(name: str):
    oracle = MANIFEST[name]
    path = str(corpus_path(name))
    if oracle.get("loaded"):
        snap = Snapshot.load(path)
        assert snap.version == oracle["version"]
        assert snap.protocol.min_reader_version == oracle["min_reader_version"]
        assert snap.protocol.min_writer_version == oracle["min_writer_version"]
        assert sorted(snap.protocol.reader_features) == sorted(oracle["reader_features"])
        assert sorted(snap.protocol.writer_features) == sorted(oracle["writer_features"])
        assert snap.partition_columns == oracle["partition_columns"]
        assert sorted(snap.paths) == oracle["files"]
        assert snap.num_files == oracle["num_files"]
        assert snap.size_bytes == oracle["size_bytes"]
        return
    outcome, reason = EXPECTED_REFUSALS[name]
    assert reason
    if outcome[0] == "error":
        _, error_type, text = outcome
        with pytest.raises(error_type) as info:
            Snapshot.load(path)
        assert text in str(info.value)
    elif outcome[0] == "unsupported":
        snap = Snapshot.load(path)
        with pytest.raises(UnsupportedFeatureError, match=outcome[1]):
            check_supported(snap.protocol, "read")
        with pytest.raises(UnsupportedFeatureError, match=outcome[1]):
            check_supported(snap.protocol, "inspect")
    else:
        expected = outcome[1]
        snap = Snapshot.load(path)
        assert snap.version == expected["version"]
        assert snap.num_files == expected["num_files"]
        assert snap.size_bytes == expected["size_bytes"]
        if "files" in expected:
            assert sorted(snap.paths) == sorted(expected["files"])
        if "checkpoint" in expected:
            assert snap.segment.checkpoint_version == expected["checkpoint"]
        if "tombstones" in expected:
            assert snap.tombstones.num_rows == expected["tombstones"]
        check_supported(snap.protocol, "read")


@pytest.mark.parametrize("name", TIME_TRAVEL_TABLES)
def test_time_travel_matches_delta_rs(name: str):
    path = corpus_path(name)
    latest = MANIFEST[name]["version"]
    earliest = min(int(f[:20]) for f in os.listdir(path / "_delta_log") if f.endswith(".json") and len(f) == 25)
    checked = 0
    for version in range(earliest, latest + 1):
        try:
            expected = rs_keys(path, version)
        except Exception:  # delta-rs cannot rebuild it (e.g. history before a checkpoint was vacuumed)
            continue
        snap = Snapshot.load(str(path), version=version)
        assert snap.version == version
        assert snapshot_keys(snap) == expected, f"version {version}"
        checked += 1
    assert checked >= 2


def test_v2_checkpoint_with_json_manifest_and_sidecars():
    snap = Snapshot.load(str(corpus_path("golden/v2-checkpoint-json")))
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.kind == "v2"
    assert snap.segment.checkpoint.files[0].key.endswith(".json")
    oracle = MANIFEST["golden/v2-checkpoint-json"]
    assert sorted(snap.paths) == oracle["files"]
    at_checkpoint = Snapshot.load(str(corpus_path("golden/v2-checkpoint-json")), version=2)
    assert at_checkpoint.num_files > 0 and at_checkpoint.segment.replay == ()


# -- path canonicalisation ---------------------------------------------------------------------

@pytest.mark.parametrize("path, expected", [
    ("part-0.parquet", "part-0.parquet"),
    ("p=a%20b/part-0.parquet", "p=a b/part-0.parquet"),
    ("/some/abs/path", "file:///some/abs/path"),
    ("file:/some/abs/path", "file:///some/abs/path"),
    ("file:///some/abs/path", "file:///some/abs/path"),
    ("file://localhost/some/abs/path", "file:///some/abs/path"),
    ("file:/tbl/root/x%20y.parquet", "x y.parquet"),
    ("/tbl/root/sub/f.parquet", "sub/f.parquet"),
    ("s3://bucket/other/f.parquet", "s3://bucket/other/f.parquet"),
])
def test_canonical_path(path: str, expected: str):
    assert canonical_path(path, "file:///tbl/root") == expected


def test_canonical_path_on_object_store_root():
    root = "s3://bucket/tbl"
    assert canonical_path("s3a://bucket/tbl/f.parquet", root) == "f.parquet"
    assert canonical_path("/tbl/f.parquet", root) == "f.parquet"
    assert canonical_path("/elsewhere/f.parquet", root) == "s3://bucket/elsewhere/f.parquet"


def test_noncanonical_path_scan_flags_every_candidate():
    from airflow_delta_maint.delta.protocol.paths import maybe_noncanonical

    paths = ["ab", "/x", "c%20d", "", None, "file:/e", "plain", "p=1/q"] * 3 + ["y" * 3_000_000 + "%"]
    flags = maybe_noncanonical(pa.array(paths))
    assert [i for i, f in enumerate(flags) if f] == \
        [i for i, p in enumerate(paths) if p and (p.startswith("/") or "%" in p or ":" in p)]
    sliced = maybe_noncanonical(pa.array(paths).slice(2, 5))
    assert sliced.tolist() == [True, False, False, True, False]


def test_remove_by_absolute_uri_cancels_relative_add_in_checkpoint(tmp_path):
    root = rs_table(tmp_path / "t", 3, checkpoints=(2,))
    snap = Snapshot.load(str(root))
    victim = snap.paths[0]
    write_commits(root, {3: [remove(f"file://{root}/{victim}")]})
    after = Snapshot.load(str(root))
    assert after.segment.checkpoint_version == 2
    assert set(after.paths) == set(snap.paths) - {victim}
    assert after.tombstones.num_rows == 1


# -- errors ------------------------------------------------------------------------------------

def test_missing_path_is_table_not_found(tmp_path):
    with pytest.raises(TableNotFoundError, match="does not exist"):
        Snapshot.load(str(tmp_path / "nope"))


def test_folder_without_delta_log_is_not_a_delta_table(tmp_path):
    (tmp_path / "part-0.parquet").write_bytes(b"x")
    with pytest.raises(NotADeltaTableError, match="_delta_log"):
        Snapshot.load(str(tmp_path))


def test_empty_delta_log_is_not_a_delta_table(tmp_path):
    (tmp_path / "_delta_log").mkdir()
    (tmp_path / "_delta_log" / "_last_checkpoint").write_text('{"version": 3, "size": 1}')
    with pytest.raises(NotADeltaTableError):
        Snapshot.load(str(tmp_path))


def test_corrupt_commit_line_names_the_file(tmp_path):
    write_commits(tmp_path, {0: [protocol_action(), metadata_action(), add("a")]})
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text(json.dumps(add("b")) + "\n{\"add\": {\"pa\n")
    with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json.*line 2"):
        Snapshot.load(str(tmp_path))
    assert Snapshot.load(str(tmp_path), version=0).paths == ["a"]


def test_commit_line_that_is_not_an_object_is_corrupt(tmp_path):
    write_commits(tmp_path, {0: [protocol_action(), metadata_action()]})
    (tmp_path / "_delta_log" / f"{0:020d}.json").open("a").write("[1, 2]\n")
    with pytest.raises(CorruptLogError, match="not a JSON object"):
        Snapshot.load(str(tmp_path))


def test_corrupt_checkpoint_is_corrupt_log(tmp_path):
    root = rs_table(tmp_path / "t", 4, checkpoints=(2,))
    (root / "_delta_log" / f"{2:020d}.checkpoint.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(CorruptLogError, match="checkpoint"):
        Snapshot.load(str(root))
    # versions before the checkpoint are read from commits and stay readable
    assert Snapshot.load(str(root), version=1).num_files == 2


def test_requested_version_beyond_latest_or_negative(tmp_path):
    write_commits(tmp_path, {0: [protocol_action(), metadata_action(), add("a")]})
    with pytest.raises(MissingVersionError, match="latest version is 0"):
        Snapshot.load(str(tmp_path), version=5)
    with pytest.raises(MissingVersionError):
        Snapshot.load(str(tmp_path), version=-1)


def test_version_before_the_earliest_checkpoint_after_cleanup(tmp_path):
    root = rs_table(tmp_path / "t", 5, checkpoints=(2,))
    for v in range(2):
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    assert Snapshot.load(str(root)).num_files == 5
    assert Snapshot.load(str(root), version=2).num_files == 3
    with pytest.raises(MissingVersionError, match="commit 0 is gone"):
        Snapshot.load(str(root), version=1)


def test_every_error_is_a_delta_error():
    for error in (TableNotFoundError, NotADeltaTableError, CorruptLogError, MissingVersionError):
        assert issubclass(error, DeltaError)


# -- _last_checkpoint is a hint ----------------------------------------------------------------

@pytest.mark.parametrize("hint", [
    None, b"", b"not json", b'{"version": "x"}', b'{"size": 3}', b'{"version": 2, "size": 5}',
    b'{"version": 4, "size": 5}', b'{"version": 50, "size": 5}', b'{"version": -3}', b"[1, 2]",
])
def test_last_checkpoint_hint_never_breaks_reads(tmp_path, hint):
    root = rs_table(tmp_path / "t", 8, checkpoints=(2, 5))
    reference = Snapshot.load(str(root))
    assert reference.segment.checkpoint_version == 5
    # delta-rs itself trusts the hint too much (a hint past the last checkpoint fails it), so its
    # answers are taken while the hint is still right
    expected = {version: rs_keys(root, version) for version in (1, 3, 6, 7)}
    last = root / "_delta_log" / "_last_checkpoint"
    if hint is None:
        last.unlink()
    else:
        last.write_bytes(hint)
    snap = Snapshot.load(str(root))
    assert state(snap) == state(reference)
    assert snap.segment.checkpoint_version == 5
    for version in (1, 3, 6, 7):
        assert snapshot_keys(Snapshot.load(str(root), version=version)) == expected[version]
    state_now = log_state(Storage(str(root)))
    assert (state_now.latest_version, state_now.last_checkpoint_version) == (7, 5)
    assert state_now.commits_since_checkpoint == 2


def test_last_checkpoint_naming_a_deleted_checkpoint(tmp_path):
    root = rs_table(tmp_path / "t", 8, checkpoints=(2, 5))
    expected = rs_keys(root)
    (root / "_delta_log" / f"{5:020d}.checkpoint.parquet").unlink()
    snap = Snapshot.load(str(root))
    assert snap.segment.checkpoint_version == 2
    assert snapshot_keys(snap) == expected


# -- multi-part checkpoints --------------------------------------------------------------------

def split_checkpoint(root: Path, version: int, parts: int) -> list[Path]:
    """Rewrite the classic checkpoint at ``version`` as a ``parts``-part checkpoint."""
    table = checkpoint_table(root, version)
    (root / "_delta_log" / f"{version:020d}.checkpoint.parquet").unlink()
    out = []
    step = -(-table.num_rows // parts)
    for i in range(parts):
        p = root / "_delta_log" / f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet"
        pq.write_table(table.slice(i * step, step), p)
        out.append(p)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps(
        {"version": version, "size": table.num_rows, "parts": parts}))
    return out


def test_multipart_checkpoint_is_read_whole(tmp_path):
    root = rs_table(tmp_path / "t", 7, checkpoints=(5,), partitioned=True)
    reference = Snapshot.load(str(root))
    split_checkpoint(root, 5, 3)
    snap = Snapshot.load(str(root))
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.kind == "multipart"
    assert len(snap.segment.checkpoint.files) == 3
    assert state(snap) == state(reference)
    assert snapshot_keys(Snapshot.load(str(root), version=5)) == rs_keys(root, 5)


def test_multipart_checkpoint_missing_a_part_falls_back_to_an_earlier_checkpoint(tmp_path):
    root = rs_table(tmp_path / "t", 7, checkpoints=(2, 5))
    reference = Snapshot.load(str(root))
    parts = split_checkpoint(root, 5, 3)
    parts[1].unlink()
    snap = Snapshot.load(str(root))
    assert snap.segment.checkpoint_version == 2
    assert state(snap) == state(reference)


def test_multipart_checkpoint_missing_a_part_falls_back_to_commits(tmp_path):
    root = rs_table(tmp_path / "t", 7, checkpoints=(5,))
    reference = Snapshot.load(str(root))
    parts = split_checkpoint(root, 5, 2)
    parts[0].unlink()
    snap = Snapshot.load(str(root))
    assert snap.segment.checkpoint is None
    assert len(snap.segment.replay) == 7
    assert state(snap) == state(reference)


# -- log compaction files ----------------------------------------------------------------------

def compaction_log(root: Path) -> None:
    """Commits 0..6 touching files a..g, with removes, for compaction tests."""
    write_commits(root, {
        0: [protocol_action(), metadata_action(), add("a", 1)],
        1: [add("b", 2)],
        2: [remove("a"), add("c", 3)],
        3: [add("d", 4)],
        4: [remove("b"), add("e", 5)],
        5: [add("f", 6)],
        6: [remove("c"), add("g", 7)],
    })


def write_compaction(root: Path, start: int, end: int, actions: list[dict]) -> None:
    write_json(root, f"{start:020d}.{end:020d}.compacted.json", actions)


def test_compaction_files_are_used_greedily_where_they_fit(tmp_path):
    compaction_log(tmp_path)
    reference = Snapshot.load(str(tmp_path), compactions="ignore")
    write_compaction(tmp_path, 1, 3, [add("b", 2), remove("a"), add("c", 3), add("d", 4)])
    write_compaction(tmp_path, 1, 2, [add("b", 2), remove("a"), add("c", 3)])
    write_compaction(tmp_path, 2, 5, [remove("a"), add("c", 3), add("d", 4), remove("b"), add("e", 5), add("f", 6)])
    write_compaction(tmp_path, 4, 5, [remove("b"), add("e", 5), add("f", 6)])
    snap = Snapshot.load(str(tmp_path), compactions="trust")
    assert [(c.start, c.end) for c in snap.segment.compactions] == [(1, 3), (4, 5)]
    assert [(s, e) for s, e, _ in snap.segment.replay] == [(0, 0), (1, 3), (4, 5), (6, 6)]
    assert state(snap) == state(reference)
    assert sorted(snap.paths) == ["d", "e", "f", "g"]


def test_compaction_reaching_past_the_version_is_not_used(tmp_path):
    compaction_log(tmp_path)
    write_compaction(tmp_path, 1, 3, [add("b", 2), remove("a"), add("c", 3), add("d", 4)])
    snap = Snapshot.load(str(tmp_path), version=2, compactions="trust")
    assert snap.segment.compactions == ()
    assert [(s, e) for s, e, _ in snap.segment.replay] == [(0, 0), (1, 1), (2, 2)]
    assert sorted(snap.paths) == ["b", "c"]


def test_compaction_starting_before_the_checkpoint_is_not_used(tmp_path):
    root = rs_table(tmp_path / "t", 6, checkpoints=(3,))
    reference = Snapshot.load(str(root))
    # a deliberately wrong compaction over 2..4: if used, it would drop every file
    write_compaction(root, 2, 4, [remove(p) for p in reference.paths])
    snap = Snapshot.load(str(root), compactions="trust")
    assert snap.segment.compactions == ()
    assert state(snap) == state(reference)
    assert Snapshot.load(str(root), compactions="ignore").paths == snap.paths


def test_compaction_contents_are_what_a_trusting_reader_uses(tmp_path):
    """Trusted, a compaction file that passes the structural checks replaces its commits; the
    default reader replays the commits and names the file that disagrees with them."""
    compaction_log(tmp_path)
    write_compaction(tmp_path, 1, 2, [add("b", 2), remove("a"), add("c", 3), add("x", 100)])
    assert "x" in Snapshot.load(str(tmp_path), compactions="trust").paths
    assert "x" not in Snapshot.load(str(tmp_path), compactions="ignore").paths
    verified = Snapshot.load(str(tmp_path))
    assert "x" not in verified.paths
    assert [d["file"] for d in verified.distrusted] == ["_delta_log/00000000000000000001.00000000000000000002.compacted.json"]
    assert "'x' unmentioned, the compaction file live" in verified.distrusted[0]["reason"]


def test_delta_rs_reads_our_handcrafted_compacted_log_the_same(tmp_path):
    compaction_log(tmp_path)
    write_compaction(tmp_path, 1, 3, [add("b", 2), remove("a"), add("c", 3), add("d", 4)])
    for version in range(7):
        assert snapshot_keys(Snapshot.load(str(tmp_path), version=version)) == rs_keys(tmp_path, version)


# -- V2 checkpoints ----------------------------------------------------------------------------

def make_v2_checkpoint(root: Path, version: int, sidecars: int, json_manifest: bool = False,
                       spelling: str = "name") -> list[Path]:
    """Rewrite the classic checkpoint at ``version`` as a V2 checkpoint with parquet sidecars.

    ``spelling`` is how the sidecar actions name their files: ``name`` (the bare file name),
    ``uri`` (an absolute file URI) or ``encoded`` (a name with a space, URI-encoded).
    """
    classic = checkpoint_table(root, version)
    log = root / "_delta_log"
    (log / f"{version:020d}.checkpoint.parquet").unlink()
    files = classic.filter(pc.or_(classic.column("add").is_valid(), classic.column("remove").is_valid()))
    others = classic.filter(pc.and_(classic.column("add").is_null(), classic.column("remove").is_null()))
    (log / "_sidecars").mkdir(exist_ok=True)
    step = -(-files.num_rows // sidecars)
    sidecar_rows, written = [], []
    for i in range(sidecars):
        name = f"{'side car ' if spelling == 'encoded' else ''}{uuid.uuid4()}.parquet"
        path = log / "_sidecars" / name
        pq.write_table(files.select(["add", "remove"]).slice(i * step, step), path)
        written.append(path)
        stored = {"name": name, "uri": path.as_uri(), "encoded": name.replace(" ", "%20")}[spelling]
        sidecar_rows.append({"path": stored, "sizeInBytes": path.stat().st_size, "modificationTime": 1})
    top_name = f"{version:020d}.checkpoint.{uuid.uuid4()}.{'json' if json_manifest else 'parquet'}"
    if json_manifest:
        rows = [{"checkpointMetadata": {"version": version}}]
        rows += [{"sidecar": s} for s in sidecar_rows]
        for column in ("protocol", "metaData", "txn", "domainMetadata"):
            if column in others.column_names:
                rows += [{column: _strip(v)} for v in others.column(column).to_pylist() if v is not None]
        (log / top_name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        keep = [c for c in ("protocol", "metaData", "txn", "domainMetadata") if c in others.column_names]
        base = others.select(keep)
        base = base.cast(pa.schema([_nullable(f) for f in base.schema]))
        extra = pa.table({
            "checkpointMetadata": pa.array([{"version": version}] + [None] * len(sidecar_rows),
                                           pa.struct([("version", pa.int64())])),
            "sidecar": pa.array([None] + sidecar_rows, pa.struct([
                ("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64())])),
        })
        pq.write_table(pa.concat_tables([base, extra], promote_options="default"), log / top_name)
    (log / "_last_checkpoint").write_text(json.dumps({"version": version, "size": classic.num_rows}))
    return written


def _nullable(f: pa.Field) -> pa.Field:
    """The field with itself and every nested field nullable."""
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_nullable(c) for c in t])
    elif pa.types.is_map(t):
        t = pa.map_(t.key_type, _nullable(t.item_field).type)
    elif pa.types.is_list(t):
        t = pa.list_(_nullable(t.value_field))
    return pa.field(f.name, t, nullable=True)


def _strip(value: Any) -> Any:
    """Arrow maps come back as lists of pairs; JSON wants objects."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if v is not None}
    if isinstance(value, list) and value and all(isinstance(x, tuple) for x in value):
        return {k: v for k, v in value}
    return value


@pytest.mark.parametrize("json_manifest", [False, True], ids=["parquet", "json"])
def test_v2_checkpoint_with_sidecars(tmp_path, json_manifest):
    root = rs_table(tmp_path / "t", 8, checkpoints=(5,), partitioned=True)
    write_deltalake(str(root), pa.table({"a": pa.array([1], pa.int64()), "p": ["z"]}), mode="overwrite",
                    partition_by=["p"])
    DeltaTable(str(root)).create_checkpoint()
    reference = Snapshot.load(str(root))
    at_five = Snapshot.load(str(root), version=6)
    make_v2_checkpoint(root, 5, sidecars=3, json_manifest=json_manifest)
    make_v2_checkpoint(root, 8, sidecars=2, json_manifest=json_manifest)
    snap = Snapshot.load(str(root))
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.kind == "v2"
    assert state(snap) == state(reference)
    assert snap.tombstones.num_rows == reference.tombstones.num_rows > 0
    assert state(Snapshot.load(str(root), version=6)) == state(at_five)


@pytest.mark.parametrize("spelling", ["uri", "encoded"])
def test_v2_checkpoint_sidecar_path_spellings(tmp_path, spelling):
    root = rs_table(tmp_path / "t", 5, checkpoints=(3,), partitioned=True)
    reference = Snapshot.load(str(root))
    make_v2_checkpoint(root, 3, sidecars=2, spelling=spelling)
    snap = Snapshot.load(str(root))
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.kind == "v2"
    assert state(snap) == state(reference)


def test_v2_checkpoint_with_a_missing_sidecar_is_corrupt(tmp_path):
    root = rs_table(tmp_path / "t", 4, checkpoints=(3,))
    sidecars = make_v2_checkpoint(root, 3, sidecars=2)
    sidecars[1].unlink()
    with pytest.raises(CorruptLogError, match="_sidecars"):
        Snapshot.load(str(root))


def test_segment_prefers_latest_complete_checkpoint(tmp_path):
    root = rs_table(tmp_path / "t", 6, checkpoints=(1, 3))
    storage = Storage(str(root))
    segment = build_segment(storage)
    assert segment.checkpoint_version == 3
    assert [s for s, _, _ in segment.replay] == [4, 5]
    assert build_segment(storage, 2).checkpoint_version == 1
    assert build_segment(storage, 0).checkpoint is None
    assert all(f.key.startswith(LOG_DIR) for f in segment.commits)


def test_corpus_copy_is_independent(copy_table):
    dest = copy_table("rs/simple_table")
    shutil.rmtree(dest / "_delta_log")
    with pytest.raises(NotADeltaTableError):
        Snapshot.load(str(dest))
    assert Snapshot.load(str(corpus_path("rs/simple_table"))).version == MANIFEST["rs/simple_table"]["version"]


# -- large checkpoints: interleaved actions, many and few superseded rows -----------------------

def write_checkpoint(root: Path, version: int, actions: list[dict]) -> None:
    """A classic checkpoint of ``actions`` (dicts keyed by action name), one row per action."""
    from airflow_delta_maint.delta.protocol.actions import ADD, REMOVE

    protocol_t = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    str_map = pa.map_(pa.string(), pa.string())
    metadata_t = pa.struct([("id", pa.string()),
                            ("format", pa.struct([("provider", pa.string()), ("options", str_map)])),
                            ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                            ("configuration", pa.map_(pa.string(), pa.string()))])
    columns = {"add": ADD, "remove": REMOVE, "metaData": metadata_t, "protocol": protocol_t}
    table = pa.table({name: pa.array([a.get(name) for a in actions], type) for name, type in columns.items()})
    (root / "_delta_log").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "_delta_log" / f"{version:020d}.checkpoint.parquet", row_group_size=4000)


@pytest.mark.parametrize("removed", [3, 10_001], ids=["few", "many"])
def test_large_interleaved_checkpoint(tmp_path, removed):
    rows: list[dict] = [protocol_action(), metadata_action()]
    for i in range(12_000):
        rows.append(add(f"f{i}", i))
        if i % 50 == 0:
            rows.append({"remove": {"path": f"gone{i}", "deletionTimestamp": 1, "dataChange": True}})
    write_checkpoint(tmp_path, 0, rows)
    victims = list(range(0, 12_000, 12_000 // removed))[:removed]
    assert len(victims) == removed
    write_commits(tmp_path, {
        1: [remove(f"f{i}") for i in victims],
        2: [add("gone50", 7), add("new", 8), remove(f"f{11_999}")],
    })
    snap = Snapshot.load(str(tmp_path))
    expected = {f"f{i}" for i in range(12_000)} - {f"f{i}" for i in victims} - {"f11999"} | {"gone50", "new"}
    assert snap.segment.checkpoint_version == 0
    assert set(snap.paths) == expected and snap.num_files == len(expected)
    sizes = dict(zip(snap.paths, snap.files.column("size").to_pylist()))
    assert sizes["gone50"] == 7 and sizes["new"] == 8 and sizes["f11000"] == 11_000
    tombstones = set(snap.tombstones.column("path").to_pylist())
    assert tombstones == ({f"gone{i}" for i in range(0, 12_000, 50)} - {"gone50"}) | \
        {f"f{i}" for i in victims} | {"f11999"}
    assert snapshot_keys(snap) == rs_keys(tmp_path)
