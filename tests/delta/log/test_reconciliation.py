"""The reconciliation invariant: no state the core builds or writes has a file live twice, or live
and removed, whatever checkpoints and log compaction files a log holds.

The hand-written logs reproduce a non-conforming log compaction file found on a delta-spark
table (a ``remove(P, dv)`` with an ``add(P, dv)``, and an ``add(P, dv)`` with an ``add(P)``), and
variants of it: a compaction file that drops a remove, one that duplicates an add, one whose
covered commits are gone. The property test draws random valid histories with random
compaction windows, some corrupted, and compares every read with a replay of the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.errors import CorruptLogError, InconsistentStateError
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.compaction import compact_log, reconcile_window, render_window
from airflow_delta_maint.delta.log.reconciliation import commit_problem, state_problem
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import Transaction
from airflow_delta_maint.delta.protocol.actions import dv_unique_id
from airflow_delta_maint.delta.protocol.deletion_vectors import write_deletion_vector
from airflow_delta_maint.delta.storage.store import Storage

DV_PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                            "writerFeatures": ["deletionVectors"]}}
SCHEMA = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
METADATA = {"metaData": {"id": "reconciliation-test", "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps(SCHEMA), "partitionColumns": [],
                         "configuration": {"delta.enableDeletionVectors": "true"}, "createdTime": 1}}
NOW = 1_760_000_000_000
#: the live rows of the table ``dv_history`` builds: A minus rows 0-2, C minus rows 0-1
EXPECTED_IDS = [3, 4, 12, 13, 14]
BAD_COMPACTION = "_delta_log/00000000000000000000.00000000000000000005.compacted.json"


def log_dir(root: Path) -> Path:
    return root / "_delta_log"


def write_log_file(root: Path, name: str, actions: list[dict]) -> None:
    log_dir(root).mkdir(parents=True, exist_ok=True)
    (log_dir(root) / name).write_text("".join(json.dumps(a) + "\n" for a in actions))


def commit_info(version: int) -> dict:
    return {"commitInfo": {"timestamp": NOW + version, "operation": "WRITE" if version == 0 else "DELETE"}}


def _file_action(kind: str, root: Path, name: str, dv: dict | None) -> dict:
    body: dict = {"path": f"{name}.parquet", "partitionValues": {}, "size": os.path.getsize(root / f"{name}.parquet"),
                  "dataChange": True}
    if kind == "add":
        body.update(modificationTime=NOW, stats=json.dumps({"numRecords": 5, "minValues": {}, "maxValues": {},
                                                            "nullCount": {}, "tightBounds": dv is None}))
    else:
        body.update(deletionTimestamp=NOW, extendedFileMetadata=True)
    if dv is not None:
        body["deletionVector"] = dv
    return {kind: body}


def dv_history(root: Path) -> dict[str, dict]:
    """Three files of five rows (ids 0-4, 5-9, 10-14) and six valid commits of deletes through
    deletion vectors; returns the DVs by name. Live at version 5: A minus rows 0-2, C minus rows 0-1."""
    root.mkdir(parents=True)
    storage = Storage(str(root))
    for name, start in (("A", 0), ("B", 5), ("C", 10)):
        pq.write_table(pa.table({"id": pa.array(range(start, start + 5), pa.int64())}), root / f"{name}.parquet")
    dvs = {"a1": write_deletion_vector(storage, [0]), "a2": write_deletion_vector(storage, [0, 1]),
           "a3": write_deletion_vector(storage, [0, 1, 2]), "c": write_deletion_vector(storage, [0, 1])}

    def add(name: str, dv: str | None = None) -> dict:
        return _file_action("add", root, name, dvs.get(dv) if dv else None)

    def remove(name: str, dv: str | None = None) -> dict:
        return _file_action("remove", root, name, dvs.get(dv) if dv else None)

    commits = {
        0: [DV_PROTOCOL, METADATA, add("A"), add("B"), add("C")],
        1: [remove("A"), add("A", "a1")],
        2: [remove("A", "a1"), add("A", "a2")],
        3: [remove("B")],
        4: [remove("C"), add("C", "c")],
        5: [remove("A", "a2"), add("A", "a3")],
    }
    for v, actions in commits.items():
        write_log_file(root, f"{v:020d}.json", [commit_info(v), *actions])
    dvs["_actions"] = {"add": add, "remove": remove}  # type: ignore[assignment]
    return dvs


def write_bad_compaction(root: Path, dvs: dict) -> None:
    """The non-conforming compaction file over commits 0-5: for path A a remove and an add of the
    same logical file, and two adds (with and without a DV); B's remove dropped; C twice."""
    add, remove = dvs["_actions"]["add"], dvs["_actions"]["remove"]
    write_log_file(root, "00000000000000000000.00000000000000000005.compacted.json", [
        DV_PROTOCOL, METADATA, remove("A", "a3"), add("A", "a3"), add("A", "a2"), add("A"), add("B"),
        add("C", "c"), add("C")])


def live_keys(snap: Snapshot) -> list[tuple[str, str]]:
    return sorted((a["path"], dv_unique_id(a.get("deletionVector"))) for a in snap.add_actions())


def deltars_ids(root: Path) -> list[int]:
    """The table's ids as delta-rs 1.6.0 reads them (deletion vectors applied), in a subprocess so
    that delta-rs's native threads cannot abort this interpreter at exit."""
    code = ("import sys, json; from deltalake import DeltaTable, QueryBuilder; "
            "dt = DeltaTable(sys.argv[1]); "
            "t = QueryBuilder().register('t', dt).execute('select id from t order by id').read_all(); "
            "print(json.dumps(t.column('id').to_pylist()))")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the reader --------------------------------------------------------------------------------------

def test_the_commits_alone_give_two_files_and_five_rows(tmp_path):
    root = tmp_path / "t"
    dvs = dv_history(root)
    snap = Snapshot.load(str(root))
    assert live_keys(snap) == sorted([("A.parquet", dv_unique_id(dvs["a3"])), ("C.parquet", dv_unique_id(dvs["c"]))])
    assert deltars_ids(root) == EXPECTED_IDS


@pytest.mark.parametrize("mode", ["verify", "trust"])
def test_a_non_conforming_compaction_file_is_distrusted(tmp_path, mode, caplog):
    root = tmp_path / "t"
    dvs = dv_history(root)
    reference = live_keys(Snapshot.load(str(root), compactions="ignore"))
    write_bad_compaction(root, dvs)
    with caplog.at_level("WARNING"):
        snap = Snapshot.load(str(root), compactions=mode)
    assert live_keys(snap) == reference and snap.num_files == 2
    assert [d["file"] for d in snap.distrusted] == [BAD_COMPACTION]
    assert "an add and a remove of the file 'A.parquet'" in snap.distrusted[0]["reason"]
    assert BAD_COMPACTION in caplog.text
    assert state_problem(snap.files, snap.tombstones, snap.storage.root) is None


def test_a_bad_compaction_file_whose_commits_are_gone_is_refused_naming_it(tmp_path):
    root = tmp_path / "t"
    write_bad_compaction(root, dv_history(root))
    for v in range(5):
        os.remove(log_dir(root) / f"{v:020d}.json")
    for mode in ("verify", "trust"):
        with pytest.raises(CorruptLogError, match="00000000000000000000.00000000000000000005.compacted.json"):
            Snapshot.load(str(root), compactions=mode)


def test_a_good_compaction_file_stands_in_for_commits_that_are_gone(tmp_path):
    root = tmp_path / "t"
    dv_history(root)
    storage = Storage(str(root))
    reference = live_keys(Snapshot.load(str(root)))
    commits = [[json.loads(line) for line in (log_dir(root) / f"{v:020d}.json").read_text().splitlines()]
               for v in range(6)]
    (log_dir(root) / "00000000000000000000.00000000000000000004.compacted.json").write_bytes(
        render_window(reconcile_window(commits[:5], storage.root)))
    for v in range(5):
        os.remove(log_dir(root) / f"{v:020d}.json")
    snap = Snapshot.load(str(root))
    assert live_keys(snap) == reference and snap.distrusted == []
    assert [(s, e) for s, e, _ in snap.segment.replay] == [(0, 4), (5, 5)]


def test_a_compaction_file_that_drops_a_remove_is_caught_by_the_cross_check(tmp_path):
    """Structurally fine but wrong: the file forgets that commit 3 removed B. A reader that
    trusts it resurrects B; the default reader replays the commits and names the file."""
    root = tmp_path / "t"
    dvs = dv_history(root)
    add, remove = dvs["_actions"]["add"], dvs["_actions"]["remove"]
    write_log_file(root, "00000000000000000001.00000000000000000005.compacted.json", [
        remove("A"), remove("A", "a1"), remove("A", "a2"), add("A", "a3"), remove("C"), add("C", "c")])
    trusted = Snapshot.load(str(root), compactions="trust")
    assert "B.parquet" in trusted.paths  # what a trusting reader (delta-rs 1.6.0 too) makes of it
    snap = Snapshot.load(str(root))
    assert "B.parquet" not in snap.paths and snap.num_files == 2
    assert snap.distrusted[0]["file"].endswith("00000000000000000001.00000000000000000005.compacted.json")
    assert "'B.parquet' removed, the compaction file unmentioned" in snap.distrusted[0]["reason"]


def test_a_compaction_file_that_duplicates_an_add_is_not_trusted(tmp_path):
    root = tmp_path / "t"
    dvs = dv_history(root)
    add, remove = dvs["_actions"]["add"], dvs["_actions"]["remove"]
    write_log_file(root, "00000000000000000004.00000000000000000005.compacted.json", [
        remove("C"), add("C", "c"), add("C", "c"), remove("A", "a2"), add("A", "a3")])
    snap = Snapshot.load(str(root), compactions="trust")
    assert snap.num_files == 2 and "two add actions of the file 'C.parquet'" in snap.distrusted[0]["reason"]


def test_a_checkpoint_with_a_file_live_twice_is_distrusted(tmp_path):
    """A checkpoint some writer built from a bad state: the reader falls back to the commits,
    and refuses naming the checkpoint when they are gone."""
    root = tmp_path / "t"
    write_bad_compaction(root, dv_history(root))
    trusted = Snapshot.load(str(root), compactions="trust")
    # build the bad state by hand: every add of the bad compaction file as live
    bad = [json.loads(line)["add"] for line in (root / BAD_COMPACTION).read_text().splitlines()
           if '"add"' in line]
    from airflow_delta_maint.delta.protocol.actions import ADD

    trusted.files = pa.Table.from_struct_array(pa.array(bad, type=ADD))
    trusted.tombstones = trusted.tombstones.slice(0, 0)
    with pytest.raises(InconsistentStateError, match="live add actions for the file 'A.parquet'"):
        write_checkpoint(trusted)
    assert not list(log_dir(root).glob("*.checkpoint.parquet"))
    # the same rows written around the guard, as an older writer would have
    from airflow_delta_maint.delta.log.checkpoint import build_checkpoint_table

    table, _ = build_checkpoint_table(trusted, now_ms=NOW, v2_spec=False)
    pq.write_table(table, log_dir(root) / "00000000000000000005.checkpoint.parquet")
    snap = Snapshot.load(str(root))
    assert snap.num_files == 2 and snap.segment.checkpoint is None
    assert snap.distrusted[0]["file"] == "_delta_log/00000000000000000005.checkpoint.parquet"
    for v in range(5):
        os.remove(log_dir(root) / f"{v:020d}.json")
    os.remove(root / BAD_COMPACTION)
    with pytest.raises(CorruptLogError, match="00000000000000000005.checkpoint.parquet"):
        Snapshot.load(str(root))


def test_a_commit_with_two_adds_of_one_path_is_refused(tmp_path):
    root = tmp_path / "t"
    dvs = dv_history(root)
    add = dvs["_actions"]["add"]
    write_log_file(root, f"{6:020d}.json", [commit_info(6), add("B"), add("B", "a1")])
    with pytest.raises(CorruptLogError, match="two add actions for the file 'B.parquet'"):
        Snapshot.load(str(root))


def test_a_dv_add_without_the_remove_of_the_live_file_is_refused(tmp_path):
    """add(P, dv) while add(P) is live and the commit does not remove it: not a valid version;
    the reader refuses instead of returning P twice."""
    root = tmp_path / "t"
    dvs = dv_history(root)
    add = dvs["_actions"]["add"]
    write_log_file(root, f"{6:020d}.json", [commit_info(6), add("C", "a1")])
    with pytest.raises(InconsistentStateError, match="live add actions for the file 'C.parquet'"):
        Snapshot.load(str(root))


# -- writers ---------------------------------------------------------------------------------------

def test_checkpoint_and_compact_log_write_the_commits_state(tmp_path):
    root = tmp_path / "t"
    write_bad_compaction(root, dv_history(root))
    m = compact_log(str(root), checkpoint_interval=1)
    assert m["checkpoint"]["num_add_files"] == 2 and not m["windows_written"]
    cp = pq.read_table(log_dir(root) / "00000000000000000005.checkpoint.parquet")
    adds = cp.column("add").combine_chunks()
    assert sorted(adds.filter(adds.is_valid()).field("path").to_pylist()) == ["A.parquet", "C.parquet"]
    assert deltars_ids(root) == EXPECTED_IDS  # delta-rs now reads our checkpoint: no row back


def test_transaction_refuses_an_impossible_commit(tmp_path):
    root = tmp_path / "t"
    dvs = dv_history(root)
    add, remove = dvs["_actions"]["add"], dvs["_actions"]["remove"]
    snap = Snapshot.load(str(root))
    cases = {
        "removes the file 'B.parquet', which is not live": [remove("B")],
        "adds the file 'C.parquet' (deletion vector": [add("C", "a1")],
        "two add actions for the file 'A.parquet'": [add("A", "a1"), add("A", "a2")],
    }
    for message, actions in cases.items():
        problem = commit_problem(snap.files, snap.version, actions, snap.storage.root)
        assert problem is not None and message in problem
        txn = Transaction(snap, "OPTIMIZE", job="optimize")
        txn.add_actions(actions)
        with pytest.raises(InconsistentStateError, match="refusing to commit OPTIMIZE"):
            txn.commit()
    assert not (log_dir(root) / f"{6:020d}.json").exists()


# -- the property ------------------------------------------------------------------------------------

PATHS = [f"p{i}.parquet" for i in range(4)]
CORRUPTIONS = ["none", "drop", "duplicate", "stray-add", "swap-dv"]


def _dv(n: int) -> dict:
    return {"storageType": "i", "pathOrInlineDv": f"dv{n:05d}", "sizeInBytes": 10, "cardinality": 1}


@st.composite
def histories(draw):
    """Valid commits over four paths: adds, removes, DV updates of a live file, re-adds."""
    live: dict[str, str | None] = {}
    commits: list[list[dict]] = [[DV_PROTOCOL, METADATA]]
    dv_counter = 0
    for _ in range(draw(st.integers(3, 12))):
        actions: list[dict] = []
        for path in draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=2, unique=True)):
            if path not in live:
                actions.append({"add": {"path": path, "partitionValues": {}, "size": 1, "modificationTime": 1,
                                        "dataChange": True}})
                live[path] = None
                continue
            current = live[path]
            old = {"path": path, "deletionTimestamp": NOW, "dataChange": True}
            if current is not None:
                old["deletionVector"] = _dv(int(current[2:]))
            if draw(st.booleans()):
                actions.append({"remove": old})
                del live[path]
            else:
                dv_counter += 1
                actions += [{"remove": old}, {"add": {"path": path, "partitionValues": {}, "size": 1,
                                                      "modificationTime": 1, "dataChange": True,
                                                      "deletionVector": _dv(dv_counter)}}]
                live[path] = f"dv{dv_counter:05d}"
        commits.append(actions)
    n = len(commits)
    windows = []
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, n - 2))
        end = draw(st.integers(start + 1, n - 1))
        windows.append((start, end, draw(st.sampled_from(CORRUPTIONS)), draw(st.integers(0, 10_000))))
    return commits, windows, draw(st.booleans())


def _model(commits: list[list[dict]]) -> list[tuple[str, str]]:
    """The live files of the last version, by plain replay of the model's commits."""
    live: dict[str, str] = {}
    for actions in commits:
        for a in actions:
            if "remove" in a:
                live.pop(a["remove"]["path"], None)
        for a in actions:
            if "add" in a:
                live[a["add"]["path"]] = dv_unique_id(a["add"].get("deletionVector"))
    return sorted(live.items())


def _corrupt(lines: list[dict], how: str, seed: int) -> list[dict]:
    files = [i for i, a in enumerate(lines) if "add" in a or "remove" in a]
    if how == "none" or not files:
        return lines
    i = files[seed % len(files)]
    out = list(lines)
    if how == "drop":
        del out[i]
    elif how == "duplicate":
        out.insert(i, out[i])
    elif how == "stray-add":
        out.append({"add": {"path": PATHS[seed % len(PATHS)], "partitionValues": {}, "size": 1,
                            "modificationTime": 1, "dataChange": True}})
    elif how == "swap-dv":
        kind = next(iter(out[i]))
        body = dict(out[i][kind])
        body["deletionVector"] = _dv(90_000 + seed % 7)
        out[i] = {kind: body}
    return out


def _keys(snap: Snapshot) -> list[tuple[str, str]]:
    return sorted((a["path"], dv_unique_id(a.get("deletionVector"))) for a in snap.add_actions())


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(history=histories())
def test_random_histories_with_random_compaction_files(tmp_path_factory, history):
    commits, windows, clean_up = history
    root = tmp_path_factory.mktemp("hist")
    for v, actions in enumerate(commits):
        write_log_file(root, f"{v:020d}.json", [commit_info(v), *actions])
    storage = Storage(str(root))
    corrupted = False
    for start, end, how, seed in windows:
        lines = _corrupt(reconcile_window(commits[start:end + 1], storage.root), how, seed)
        corrupted |= lines != reconcile_window(commits[start:end + 1], storage.root)
        (log_dir(root) / f"{start:020d}.{end:020d}.compacted.json").write_bytes(render_window(lines))
    expected = _model(commits)

    # The default reader: commits win wherever they exist, so the state is the model's.
    snap = Snapshot.load(str(root))
    assert _keys(snap) == expected
    if not corrupted:
        assert snap.distrusted == []
    # A trusting reader: never an impossible state, and a structurally bad file is not used.
    try:
        trusted = _keys(Snapshot.load(str(root), compactions="trust"))
    except CorruptLogError:
        trusted = None
    if trusted is not None:
        assert len({p for p, _ in trusted}) == len(trusted)
    if not corrupted:
        assert trusted == expected
    # Commits covered by a compaction file gone: the model's state, or a clear refusal.
    if clean_up and windows[0][1] < len(commits) - 1:  # the latest commit stays: it names the version
        start, end, how, _ = windows[0]
        for v in range(start, end + 1):
            (log_dir(root) / f"{v:020d}.json").unlink(missing_ok=True)
        try:
            got = _keys(Snapshot.load(str(root)))
        except CorruptLogError:
            got = None
        if how == "none" and not any(w[2] != "none" and w[0] <= end and w[1] >= start for w in windows[1:]):
            assert got == expected
        elif how == "duplicate" and not any(w[2] not in ("none", "duplicate") and w[0] <= end and w[1] >= start
                                            for w in windows[1:]):
            # a duplicate is seen; another file over these versions may lose an action unseen (a drop)
            assert got in (None, expected)
        if got is not None:
            assert len({p for p, _ in got}) == len(got)
