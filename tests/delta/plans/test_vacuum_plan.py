"""VACUUM planning without Spark: retention, hidden paths, the valid set, lite mode's commit range."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from tests.conftest import corpus_path, restore_dv_file_names

from airflow_delta_maint.delta.errors import DeltaError, InvalidArgumentError
from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.vacuum_options import VacuumOptions
from airflow_delta_maint.delta.plans.vacuum import (
    DEFAULT_RETENTION_MS, LAST_VACUUM_INFO, VacuumLiteUnavailableError, check_retention, delete_files, is_hidden,
    latest_commit_at_or_before, lite_candidates, nothing_to_do, plan_vacuum, read_last_vacuum_info,
    remove_empty_dirs, select_candidates, table_retention_ms, write_last_vacuum_info,
)
from airflow_delta_maint.delta.storage.table_files import (SIDECAR_SCAN_MIN, delete_files_parallel, list_folder,
                                                          list_subtree)
from airflow_delta_maint.delta.plans.vacuum_valid import key_for_log_path, valid_among, valid_keys
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def _meta(configuration: dict[str, str] | None = None) -> Metadata:
    return Metadata(id="x", schema_string="", partition_columns=(), configuration=configuration or {})


def age_commit(table: Path, version: int, when_ms: int) -> None:
    """Move one commit back in time: its commitInfo, removes, adds and files' modification times."""
    log_file = table / "_delta_log" / f"{version:020d}.json"
    lines = []
    for line in log_file.read_text().splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            action["commitInfo"]["timestamp"] = when_ms
        if "remove" in action:
            action["remove"]["deletionTimestamp"] = when_ms
        if "add" in action:
            action["add"]["modificationTime"] = when_ms
            data = table / Storage(str(table)).key_for_path(action["add"]["path"])
            if data.exists():
                os.utime(data, (when_ms / 1000, when_ms / 1000))
        lines.append(json.dumps(action))
    log_file.write_text("\n".join(lines) + "\n")
    os.utime(log_file, (when_ms / 1000, when_ms / 1000))




def protocol_names(path: Path) -> None:
    """delta-spark's test suites wrote the spark/ DV files with a test-only name prefix the log does
    not name; move them to the names the protocol gives them."""
    restore_dv_file_names(path)


def _table(tmp_path: Path, versions: int = 3, partition: bool = False) -> Path:
    """A delta-rs table whose every version overwrites the last (so each leaves tombstones)."""
    path = tmp_path / "t"
    for v in range(versions):
        data = pa.table({"id": [v * 10 + i for i in range(4)], "p": ["a", "b", "a", "b"]})
        write_deltalake(str(path), data, mode="overwrite" if v else "error",
                        partition_by=["p"] if partition else None)
    return path


# -- retention -----------------------------------------------------------------------------------
def test_table_retention_default_and_property():
    assert table_retention_ms(_meta()) == DEFAULT_RETENTION_MS
    assert table_retention_ms(_meta({"delta.deletedFileRetentionDuration": "interval 2 days"})) == 2 * DAY_MS
    assert table_retention_ms(_meta({"delta.deletedFileRetentionDuration": "interval 36 hours"})) == 36 * HOUR_MS
    with pytest.raises(InvalidArgumentError, match="deletedFileRetentionDuration"):
        table_retention_ms(_meta({"delta.deletedFileRetentionDuration": "a while"}))


def test_shorter_retention_is_refused_unless_check_is_off():
    week = DEFAULT_RETENTION_MS
    assert check_retention(None, week) == week
    assert check_retention(200, week) == 200 * HOUR_MS
    with pytest.raises(InvalidArgumentError, match=r"1 hour is shorter than .*168 hours.*ignore_retention_check"):
        check_retention(1, week)
    assert check_retention(1, week, ignore_retention_check=True) == HOUR_MS
    assert check_retention(0, week, ignore_retention_check=True) == 0
    for bad in (-1, float("nan"), "soon"):
        with pytest.raises(InvalidArgumentError, match="retention"):
            check_retention(bad, week, ignore_retention_check=True)


# -- paths ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,columns,hidden", [
    ("_delta_log/00000000000000000000.json", [], True),
    ("_delta_log/_last_vacuum_info", ["_delta_log"], True),
    ("part-0.parquet", [], False),
    (".part-0.parquet.crc", [], True),
    ("p=1/.part-0.parquet.crc", ["p"], True),
    ("p=1/_SUCCESS", ["p"], True),
    ("_tmp/part-0.parquet", [], True),
    ("_change_data/cdc-0.parquet", [], False),
    ("_change_data/p=1/cdc-0.parquet", ["p"], False),
    ("_p=a%20b/part-0.parquet", ["_p"], False),
    ("_p=a%20b/part-0.parquet", [], True),
    ("_a%3Ab=1/part-0.parquet", ["_a:b"], False),
    ("p=1/_q=2/part-0.parquet", ["p", "_q"], False),
    ("p=1/_q=2/part-0.parquet", ["p"], True),
])
def test_hidden_paths(key, columns, hidden):
    assert is_hidden(key, columns) is hidden


def test_keys_for_log_paths(tmp_path):
    storage = Storage(str(tmp_path))
    root = str(tmp_path)
    assert key_for_log_path(storage, "p=a%2520b/f%20g.parquet") == "p=a%20b/f g.parquet"
    assert key_for_log_path(storage, "part-0.parquet") == "part-0.parquet"
    assert key_for_log_path(storage, f"file:{root}/x%20y/z.parquet") == "x y/z.parquet"
    assert key_for_log_path(storage, f"file://{root}/z.parquet") == "z.parquet"
    assert key_for_log_path(storage, f"{root}/r.parquet") == "r.parquet"
    assert key_for_log_path(storage, f"{root}-other/r.parquet") is None
    assert key_for_log_path(storage, "/elsewhere/r.parquet") is None
    assert key_for_log_path(storage, "s3://bucket/table/r.parquet") is None
    assert key_for_log_path(storage, "ab:cd/x.parquet") == "ab:cd/x.parquet"  # relative, not a scheme


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"),
                        min_size=1, max_size=12), min_size=1, max_size=3))
def test_encoded_relative_paths_map_back_to_their_keys(parts):
    storage = Storage("/")
    key = "/".join(parts)
    assert key_for_log_path(storage, quote(key)) == key


def test_select_candidates_keeps_young_valid_and_hidden_files():
    cutoff = 1_000_000
    files = [
        FileInfo("old-orphan.parquet", 10, cutoff - 1),
        FileInfo("young-orphan.parquet", 10, cutoff),
        FileInfo("valid.parquet", 10, 1),
        FileInfo("_delta_log/00000000000000000000.json", 10, 1),
        FileInfo(".hidden.crc", 10, 1),
        FileInfo("_p=1/old.parquet", 10, 1),
        FileInfo("_change_data/cdc.parquet", 10, 1),
        FileInfo("_tmp/x.parquet", 10, 1),
    ]
    chosen = {f.key for f in select_candidates(files, {"valid.parquet"}, cutoff, ["_p"])}
    assert chosen == {"old-orphan.parquet", "_p=1/old.parquet", "_change_data/cdc.parquet"}


# -- the valid set ---------------------------------------------------------------------------------
def test_valid_set_holds_active_files_and_unexpired_tombstones(tmp_path):
    path = _table(tmp_path, versions=3, partition=True)
    now = int(time.time() * 1000)
    age_commit(path, 0, now - 10 * DAY_MS)
    age_commit(path, 1, now - 9 * DAY_MS)  # removes version 0's files 9 days ago
    snapshot = Snapshot.load(str(path))
    storage = snapshot.storage
    active = {storage.key_for_path(p) for p in snapshot.paths}
    v0 = {storage.key_for_path(p) for p in DeltaTable(str(path), version=0).get_add_actions(flatten=True)
          .column("path").to_pylist()}
    v1 = {storage.key_for_path(p) for p in DeltaTable(str(path), version=1).get_add_actions(flatten=True)
          .column("path").to_pylist()}
    valid = valid_keys(snapshot, now - 7 * DAY_MS)
    assert active <= valid
    assert v1 <= valid  # removed by version 2, just now: inside the window
    assert not (v0 & valid)  # removed 9 days ago: expired
    assert valid_keys(snapshot, now - 30 * DAY_MS) >= v0 | v1 | active
    assert all((path / k).exists() for k in valid)


@pytest.mark.parametrize("name", ["spark/table-with-dv-small", "rs/table-with-dv-small", "rs/table_with_deletion_logs",
                                  "spark/table-with-dv-large"])
def test_valid_set_holds_deletion_vector_files(copy_table, name):
    path = copy_table(name)
    protocol_names(path)
    snapshot = Snapshot.load(str(path))
    valid = valid_keys(snapshot, int(time.time() * 1000))
    dv_files = {str(p.relative_to(path)) for p in path.rglob("*deletion_vector_*.bin")}
    referenced = {k for k in valid if "deletion_vector_" in k}
    assert referenced, "the table's active files have deletion vectors in files"
    assert referenced <= dv_files
    # every DV file of an active file is kept; none is a candidate even when very old
    listed = [FileInfo(k, 1, 0) for k in dv_files]
    assert not {f.key for f in select_candidates(listed, valid, int(time.time() * 1000))} & referenced


def test_valid_among_agrees_with_the_whole_valid_set_on_the_corpus(manifest):
    """For every corpus table (escaped, absolute and DV paths included): looking keys up in the
    snapshot gives exactly the valid set's members among them, and a snapshot loaded with paths
    only gives the same valid set."""
    checked = 0
    now = int(time.time() * 1000)
    for entry in manifest:
        path = corpus_path(entry["table"])
        if not (path / "_delta_log").is_dir():
            continue
        try:
            snapshot = Snapshot.load(str(path))
        except DeltaError:
            continue
        lean = Snapshot.load(str(path), paths_only=True)  # what the VACUUM job loads
        for cutoff in (now, 0):
            valid = valid_keys(snapshot, cutoff)
            assert valid_keys(lean, cutoff) == valid, entry["table"]
            listed = {f.key for f in snapshot.storage.list_recursive()}
            probe = listed | set(list(valid)[::2]) | {"missing.parquet", "p=%41/x.parquet"}
            assert valid_among(snapshot, cutoff, probe) == valid & probe, entry["table"]
        checked += 1
    assert checked > 100


def test_no_corpus_file_of_the_latest_snapshot_is_a_candidate(manifest):
    """Across the corpus: listing everything as very old, nothing delta-rs calls active is chosen,
    and nothing under _delta_log or hidden."""
    checked = 0
    now = int(time.time() * 1000)
    for entry in manifest:
        oracle = entry["oracle"]
        path = corpus_path(entry["table"])
        if not oracle.get("loaded") or not (path / "_delta_log").is_dir():
            continue
        try:
            snapshot = Snapshot.load(str(path))
        except DeltaError:
            continue  # refused logs are the conformance tests' business
        storage = snapshot.storage
        valid = valid_keys(snapshot, now)
        listed = [FileInfo(f.key, f.size, 0) for f in storage.list_recursive()]
        chosen = {f.key for f in select_candidates(listed, valid, now, snapshot.partition_columns)}
        active = {key_for_log_path(storage, p) for p in oracle["files"]}
        assert not chosen & active, entry["table"]
        assert not any(k.startswith("_delta_log/") for k in chosen), entry["table"]
        assert not any(is_hidden(k, snapshot.partition_columns) for k in chosen), entry["table"]
        checked += 1
    assert checked > 50


# -- commit times and lite mode ------------------------------------------------------------------
def test_latest_commit_at_or_before_uses_monotonic_file_times(tmp_path):
    path = _table(tmp_path, versions=4)
    now = int(time.time() * 1000)
    for v, days in ((0, 10), (1, 9), (2, 8)):
        age_commit(path, v, now - days * DAY_MS)
    storage = Storage(str(path))
    assert latest_commit_at_or_before(storage, now - 11 * DAY_MS) is None
    assert latest_commit_at_or_before(storage, now - 9 * DAY_MS) == 1
    assert latest_commit_at_or_before(storage, now - 7 * DAY_MS) == 2
    assert latest_commit_at_or_before(storage, now + 1000) == 3
    # a commit file older than its predecessor counts as just after it
    log1 = path / "_delta_log" / f"{1:020d}.json"
    os.utime(log1, (now / 1000 - 20 * 86400, now / 1000 - 20 * 86400))
    assert latest_commit_at_or_before(storage, now - 9.9 * DAY_MS) == 1


def test_latest_commit_with_in_commit_timestamps(tmp_path):
    path = tmp_path / "t"
    path.mkdir()
    (path / "_delta_log").mkdir()
    base = 1_700_000_000_000
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [],
                "writerFeatures": ["inCommitTimestamp"]}
    meta = {"id": "x", "format": {"provider": "parquet", "options": {}}, "schemaString": "{}",
            "partitionColumns": [], "configuration": {"delta.enableInCommitTimestamps": "true",
                                                      "delta.inCommitTimestampEnablementVersion": "0"}}
    for v in range(6):
        actions = [{"commitInfo": {"inCommitTimestamp": base + v * 1000, "timestamp": base + v * 1000}}]
        if v == 0:
            actions += [{"protocol": protocol}, {"metaData": meta}]
        (path / "_delta_log" / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    storage = Storage(str(path))
    conf = meta["configuration"]
    # the files were all written just now; only the in-commit timestamps tell the versions apart
    assert latest_commit_at_or_before(storage, base + 3500, conf) == 3
    assert latest_commit_at_or_before(storage, base - 1, conf) is None
    assert latest_commit_at_or_before(storage, base + 10_000, conf) == 5


def test_last_vacuum_info_format(tmp_path):
    storage = Storage(str(_table(tmp_path, versions=1)))
    assert read_last_vacuum_info(storage) is None
    write_last_vacuum_info(storage, 5)
    assert storage.read(LAST_VACUUM_INFO) == b'{"latestCommitVersionOutsideOfRetentionWindow":5}\n'
    assert read_last_vacuum_info(storage) == 5
    write_last_vacuum_info(storage, None)
    assert read_last_vacuum_info(storage) is None
    storage.put(LAST_VACUUM_INFO, b"{not json")
    assert read_last_vacuum_info(storage) is None


def test_lite_mode_reads_removes_between_watermark_and_cutoff(tmp_path):
    path = _table(tmp_path, versions=4, partition=True)
    now = int(time.time() * 1000)
    for v, days in ((0, 12), (1, 11), (2, 10)):
        age_commit(path, v, now - days * DAY_MS)
    snapshot = Snapshot.load(str(path))
    plan = plan_vacuum(snapshot, mode="lite", now_ms=now)
    assert plan.latest_outside == 2 and (plan.lite.start, plan.lite.end) == (0, 2)
    found = lite_candidates(plan, snapshot.storage)
    # looking the candidates up in the snapshot gives the same files as the whole valid set
    lean = lite_candidates(plan_vacuum(snapshot, mode="lite", now_ms=now, with_valid=False), snapshot.storage,
                           snapshot)
    assert sorted(lean.files, key=lambda f: f.key) == sorted(found.files, key=lambda f: f.key)
    assert lean.watermark == found.watermark
    removed = {snapshot.storage.key_for_path(p) for v in (0, 1)
               for p in DeltaTable(str(path), version=v).get_add_actions(flatten=True).column("path").to_pylist()}
    assert {f.key for f in found.files} == removed
    assert found.watermark == 2
    # the removes of version 3 happened just now: a later run reads from version 3 on
    write_last_vacuum_info(snapshot.storage, found.watermark)
    later = plan_vacuum(snapshot, mode="lite", now_ms=now)
    assert later.lite.empty
    assert "no commit left the retention window" in nothing_to_do(str(path), None, VacuumOptions.from_mapping({"mode": "lite"}))
    assert nothing_to_do(str(path), None, VacuumOptions.from_mapping({"mode": "full"})) is None


def test_lite_mode_holds_the_watermark_before_unexpired_removes(tmp_path):
    path = _table(tmp_path, versions=3)
    now = int(time.time() * 1000)
    age_commit(path, 0, now - 12 * DAY_MS)
    age_commit(path, 1, now - 11 * DAY_MS)
    # version 2 is old by its file time but its remove says it happened just now (a skewed clock)
    log2 = path / "_delta_log" / f"{2:020d}.json"
    os.utime(log2, (now / 1000 - 10 * 86400, now / 1000 - 10 * 86400))
    snapshot = Snapshot.load(str(path))
    plan = plan_vacuum(snapshot, mode="lite", now_ms=now)
    found = lite_candidates(plan, snapshot.storage)
    assert found.skipped_young > 0
    assert found.watermark == 1
    assert nothing_to_do(str(path), None, VacuumOptions.from_mapping({"mode": "lite"})) is None


def test_lite_mode_refuses_a_cleaned_log(tmp_path):
    path = _table(tmp_path, versions=4)
    now = int(time.time() * 1000)
    for v in range(3):
        age_commit(path, v, now - (12 - v) * DAY_MS)
    DeltaTable(str(path)).create_checkpoint()
    for v in range(2):
        (path / "_delta_log" / f"{v:020d}.json").unlink()
    snapshot = Snapshot.load(str(path))
    with pytest.raises(VacuumLiteUnavailableError, match=r"log now starts at version 2.*Run a full VACUUM"):
        plan_vacuum(snapshot, mode="lite", now_ms=now)
    with pytest.raises(VacuumLiteUnavailableError):
        nothing_to_do(str(path), None, VacuumOptions.from_mapping({"mode": "lite"}))
    # a watermark at version 1 means commits 0 and 1 were handled: lite mode can go on from 2
    write_last_vacuum_info(snapshot.storage, 1)
    plan = plan_vacuum(snapshot, mode="lite", now_ms=now)
    assert (plan.lite.start, plan.lite.end) == (2, 2)
    # full mode never needs the old commits
    assert plan_vacuum(snapshot, mode="full", now_ms=now).lite is None


def test_bad_arguments_fail_before_anything(tmp_path):
    path = _table(tmp_path, versions=1)
    snapshot = Snapshot.load(str(path))
    with pytest.raises(InvalidArgumentError, match="mode"):
        plan_vacuum(snapshot, mode="quick")
    with pytest.raises(InvalidArgumentError, match="shorter than"):
        nothing_to_do(str(path), None, VacuumOptions.from_mapping({"mode": "lite", "retention_hours": 1}))
    assert list_log(snapshot.storage).latest_commit == 0


def test_delete_files_counts_existing_and_refuses_the_log(tmp_path):
    path = _table(tmp_path, versions=1)
    storage = Storage(str(path))
    (path / "a.parquet").write_bytes(b"x")
    (path / "b c%.parquet").write_bytes(b"x")
    assert delete_files(storage, ["a.parquet", "b c%.parquet", "missing.parquet"]) == 2
    assert not (path / "a.parquet").exists() and not (path / "b c%.parquet").exists()
    with pytest.raises(InvalidArgumentError, match="_delta_log"):
        delete_files(storage, ["_delta_log/00000000000000000000.json"])
    assert (path / "_delta_log" / f"{0:020d}.json").exists()


@pytest.mark.parametrize("files", [10, SIDECAR_SCAN_MIN * 2])
def test_deleted_files_take_their_checksum_sidecars_and_nothing_else(tmp_path, files):
    """Below and above the folder size that scans the folder for sidecars instead of trying each."""
    path = _table(tmp_path, versions=1)
    storage = Storage(str(path))
    folder = path / "p=1"
    folder.mkdir()
    names = [f"part-{i:04d}.parquet" for i in range(files)]
    for i, name in enumerate(names):
        (folder / name).write_bytes(b"x")
        if i % 2 == 0:  # a Hadoop writer's file: its sidecar beside it
            (folder / f".{name}.crc").write_bytes(b"c")
    (folder / ".unrelated.crc").write_bytes(b"c")
    doomed = names[: files * 3 // 4]
    assert delete_files_parallel(storage, [f"p=1/{n}" for n in doomed], threads=4, batch=7) == len(doomed)
    left = sorted(p.name for p in folder.iterdir())
    kept = names[files * 3 // 4:]
    assert left == sorted([".unrelated.crc", *kept, *(f".{n}.crc" for n in kept if names.index(n) % 2 == 0)])


def test_parallel_delete_removes_every_key_and_refuses_the_log_before_deleting(tmp_path):
    path = _table(tmp_path, versions=1)
    storage = Storage(str(path))
    keys = []
    for i in range(230):
        folder = path / f"d{i % 7}"
        folder.mkdir(exist_ok=True)
        (folder / f"f {i}%.parquet").write_bytes(b"x")
        keys.append(f"d{i % 7}/f {i}%.parquet")
    keys.sort()
    seen: list[int] = []
    assert delete_files_parallel(storage, keys + ["gone.parquet"], threads=4, batch=16, progress=seen.append) == 230
    assert sum(seen) == 230 and len(seen) == 6 * 3 + 2 + 1  # at most 16 keys of one folder a batch
    assert not any((path / k).exists() for k in keys)
    (path / "keep.parquet").write_bytes(b"x")
    with pytest.raises(InvalidArgumentError, match="_delta_log"):
        delete_files_parallel(storage, ["keep.parquet", "_delta_log/00000000000000000000.json"], batch=1)
    assert (path / "keep.parquet").exists()


# -- listing -------------------------------------------------------------------------------------
def test_list_subtree_sees_exactly_the_visible_files_of_a_generic_listing(manifest):
    """Across the corpus, the scandir walk VACUUM uses on local disk finds the same visible files
    (and sizes) as a generic obstore listing filtered by ``is_hidden``."""
    checked = 0
    for entry in manifest:
        path = corpus_path(entry["table"])
        if not (path / "_delta_log").is_dir():
            continue
        storage = Storage(str(path))
        try:
            columns = Snapshot.load(str(path)).partition_columns
        except DeltaError:
            columns = ()
        generic = {(f.key, f.size) for f in storage.list_recursive() if not is_hidden(f.key, columns)}
        found = list_subtree(storage, "", columns)
        assert {(f.key, f.size) for f in found.files} == generic, entry["table"]
        folders = {k.rpartition("/")[0] for k, _ in generic if "/" in k}
        assert folders <= set(found.dirs), entry["table"]
        checked += 1
    assert checked > 100


def test_listing_skips_hidden_folders_and_symlinks_and_reports_folders(tmp_path):
    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    (root / "_delta_log" / "00000000000000000000.json").write_text("{}")
    for folder in ("_p=1", "_hidden", ".tmp", "_change_data", "q=a b%", "q=a b%/n=1", "empty"):
        (root / folder).mkdir()
    for key in ("_p=1/a.parquet", "_hidden/b.parquet", ".tmp/c.parquet", "_change_data/d.parquet",
                "q=a b%/n=1/e f#1.parquet", "top.parquet", ".crc", "_x.parquet"):
        (root / key).write_bytes(b"x" * 3)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.parquet").write_bytes(b"x")
    (root / "link.parquet").symlink_to(outside / "victim.parquet")
    (root / "linked").symlink_to(outside)
    storage = Storage(str(root))
    found = list_subtree(storage, "", ["_p"])
    assert sorted(f.key for f in found.files) == [
        "_change_data/d.parquet", "_p=1/a.parquet", "q=a b%/n=1/e f#1.parquet", "top.parquet"]
    assert set(found.dirs) == {"_p=1", "_change_data", "q=a b%", "q=a b%/n=1", "empty"}
    assert all(f.size == 3 for f in found.files)
    dirs, files = list_folder(storage, "", ["_p"])
    assert set(dirs) == {"_p=1", "_change_data", "q=a b%", "empty"}
    assert [f.key for f in files] == ["top.parquet"]
    sub = list_subtree(storage, "q=a b%", ["_p"])
    assert [f.key for f in sub.files] == ["q=a b%/n=1/e f#1.parquet"] and set(sub.dirs) == {"q=a b%/n=1"}


def test_remove_empty_dirs_from_a_listing_keeps_young_and_hidden_folders(tmp_path):
    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    old_s = time.time() - 30 * 86400
    for folder in ("old/deeper", "young", "emptied", "_hidden_old", "full"):
        (root / folder).mkdir(parents=True)
    (root / "full" / "f.parquet").write_bytes(b"x")
    for folder in ("old/deeper", "old", "_hidden_old", "emptied", "full"):
        os.utime(root / folder, (old_s, old_s))
    storage = Storage(str(root))
    listed = list_subtree(storage, "", ()).dirs
    assert "_hidden_old" not in listed
    cutoff = int((time.time() - 7 * 86400) * 1000)
    (root / "young" / "late.parquet").write_bytes(b"x")  # a writer adds a file after the listing
    os.unlink(root / "young" / "late.parquet")
    removed = remove_empty_dirs(storage, ["emptied/gone.parquet"], cutoff, (), walk=False, listed_dirs=listed)
    assert removed == 3  # old/deeper, old, emptied
    assert sorted(p.name for p in root.iterdir()) == ["_delta_log", "_hidden_old", "full", "young"]


def test_lite_mode_parses_only_the_actions_it_needs():
    from airflow_delta_maint.delta.log.listing import parse_json_lines

    data = (b'{"commitInfo":{"operation":"DELETE"}}\n{"add":{"path":"a.parquet"}}\n'
            b'{"remove":{"path":"b.parquet"}}\n  {"cdc":{"path":"c.parquet"}}\n{ "add":{"path":"d.parquet"}}\n')
    skipped = parse_json_lines(data, "x", skip=(b'{"add"', b'{"commitInfo"'))
    assert skipped == [{"remove": {"path": "b.parquet"}}, {"cdc": {"path": "c.parquet"}},
                       {"add": {"path": "d.parquet"}}]  # unusual spacing: parsed, never lost
    assert len(parse_json_lines(data, "x")) == 5


def test_lite_mode_has_work_when_only_the_watermark_moves(tmp_path):
    """Append-only commits left the window: nothing to delete, but the watermark moves, so that
    the commits read each night do not pile up until the log is cleaned under them."""
    path = tmp_path / "t"
    for v in range(3):
        write_deltalake(str(path), pa.table({"id": [v]}), mode="append")
    now = int(time.time() * 1000)
    for v in range(3):
        age_commit(path, v, now - (12 - v) * DAY_MS)
    write_last_vacuum_info(Storage(str(path)), 0)
    snapshot = Snapshot.load(str(path))
    plan = plan_vacuum(snapshot, mode="lite", now_ms=now, with_valid=False)
    found = lite_candidates(plan, snapshot.storage, snapshot)
    assert found.files == [] and found.watermark == 2 and plan.lite.watermark == 0
    assert nothing_to_do(str(path), None, VacuumOptions.from_mapping({"mode": "lite"})) is None
    write_last_vacuum_info(snapshot.storage, found.watermark)
    assert "no commit left the retention window" in nothing_to_do(str(path), None, VacuumOptions.from_mapping({"mode": "lite"}))
