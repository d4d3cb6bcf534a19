"""Log compaction: planning, content, the snapshot it yields (our reader and delta-rs 1.6.0),
idempotence, the size guard, cleanup and the optional checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.errors import DeltaError, InvalidArgumentError, UnsupportedFeatureError
from airflow_delta_maint.delta.log.compaction_options import LogCompactionOptions
from airflow_delta_maint.delta.log.compaction import (
    Window, compact_log, compaction_interval, nothing_to_do, plan_windows, reconcile_window, render_window,
    write_window)
from airflow_delta_maint.delta.log.listing import compaction_key, list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage

from tests.conftest import corpus_path
from tests.data.conformance.expected import compaction_windows, load_expected, scrub

DAY_MS = 24 * 3600 * 1000


# -- helpers ---------------------------------------------------------------------------------------

def state(path: str | Path, version: int | None = None, use_compactions: bool = True) -> dict:
    """Everything a snapshot reconciles, in a comparable form."""
    snap = Snapshot.load(str(path), version, compactions="trust" if use_compactions else "ignore")
    key = lambda a: (a["path"], json.dumps(a.get("deletionVector"), sort_keys=True))  # noqa: E731
    return {
        "version": snap.version,
        "files": sorted(snap.add_actions(), key=key),
        "tombstones": sorted(snap.tombstone_actions(), key=key),
        "txns": snap.txns,
        "domains": snap.domains,
        "domain_tombstones": snap.domain_tombstones,
        "protocol": snap.protocol.raw,
        "metadata": snap.metadata.raw,
        "commit_timestamp": snap.commit_timestamp,
    }


def compaction_files(path: str | Path) -> list[str]:
    return sorted(f for f in os.listdir(Path(path) / "_delta_log") if f.endswith(".compacted.json"))


def rs_state(path: str | Path) -> tuple[int, list[str]]:
    """delta-rs 1.6.0's version and active files of a table."""
    dt = DeltaTable(str(path))
    root = str(Path(path).resolve())
    return dt.version(), sorted(u.split(root, 1)[-1] for u in dt.file_uris())


def rs_rows(path: str | Path) -> list[int]:
    """The ``id`` column of every active file, read through file_uris + pyarrow.parquet."""
    ids: list[int] = []
    for uri in DeltaTable(str(path)).file_uris():
        ids.extend(pq.read_table(uri.removeprefix("file://"), columns=["id"]).column("id").to_pylist())
    return sorted(ids)


def blank_covered_commits(path: str | Path) -> None:
    """Strip every action but commitInfo from the commits the compaction files cover.

    The listing still holds every commit, so a reader that ignored the compaction files would
    see a different table.
    """
    log = Path(path) / "_delta_log"
    for name in compaction_files(path):
        start, end = (int(p) for p in name.split(".")[:2])
        for v in range(start, end + 1):
            f = log / f"{v:020d}.json"
            infos = [line for line in f.read_text().splitlines() if '"commitInfo"' in line]
            f.write_text("\n".join(infos or ['{"commitInfo":{}}']) + "\n")


def write_commit(path: Path, version: int, actions: list[dict]) -> None:
    log = path / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    with open(log / f"{version:020d}.json", "x") as fh:
        for a in actions:
            fh.write(json.dumps(a) + "\n")


SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}}]})


def meta(configuration: dict | None = None) -> dict:
    return {"metaData": {"id": "c0ffee00-0000-4000-8000-000000000001", "format": {"provider": "parquet", "options": {}},
                         "schemaString": SCHEMA, "partitionColumns": [], "configuration": configuration or {},
                         "createdTime": 1}}


def add(p: str, size: int = 10, dv: dict | None = None, stats: str | None = None) -> dict:
    a = {"path": p, "partitionValues": {}, "size": size, "modificationTime": 1, "dataChange": True}
    if stats:
        a["stats"] = stats
    if dv:
        a["deletionVector"] = dv
    return {"add": a}


def remove(p: str, dv: dict | None = None) -> dict:
    r = {"path": p, "deletionTimestamp": 5, "dataChange": True}
    if dv:
        r["deletionVector"] = dv
    return {"remove": r}


def info(op: str = "WRITE") -> dict:
    return {"commitInfo": {"timestamp": 1, "operation": op}}


# -- planning ------------------------------------------------------------------------------------

def test_plan_windows_examples() -> None:
    w = lambda *pairs: [Window(s, e) for s, e in pairs]  # noqa: E731
    assert plan_windows(22, None, 5)[0] == w((1, 5), (6, 10), (11, 15), (16, 20))
    assert plan_windows(20, None, 5)[0][-1] == Window(16, 20)
    assert plan_windows(4, None, 5)[0] == []
    # windows start after the checkpoint; one that would hold a single commit is not planned
    assert plan_windows(22, 7, 5)[0] == w((8, 10), (11, 15), (16, 20))
    assert plan_windows(22, 9, 5)[0] == w((11, 15), (16, 20))
    assert plan_windows(22, 20, 5)[0] == []
    # existing files: the exact one is done, an overlapping one blocks
    missing, blocked = plan_windows(22, None, 5, [(1, 5), (9, 12)])
    assert missing == w((16, 20))
    assert blocked == [(Window(6, 10), (9, 12)), (Window(11, 15), (9, 12))]
    with pytest.raises(InvalidArgumentError):
        plan_windows(10, None, 1)


@settings(max_examples=examples(60), deadline=None)
@given(latest=st.integers(0, 120), cp=st.one_of(st.none(), st.integers(0, 120)), interval=st.integers(2, 12),
       existing=st.lists(st.tuples(st.integers(0, 120), st.integers(0, 30)), max_size=4))
def test_plan_windows_properties(latest: int, cp: int | None, interval: int, existing: list) -> None:
    existing = [(s, s + n) for s, n in existing]
    missing, blocked = plan_windows(latest, cp, interval, existing)
    floor = cp + 1 if cp is not None else 0
    for win in missing:
        assert floor <= win.start < win.end <= latest
        assert win.end % interval == 0 and win.end - win.start < interval
        assert win.start == max(win.end - interval + 1, floor)
        assert not any(s <= win.end and e >= win.start for s, e in existing)
    ends = [w.end for w in missing] + [w.end for w, _ in blocked]
    expected = [y for y in range(interval, latest + 1, interval)
                if max(y - interval + 1, floor) < y and (max(y - interval + 1, floor), y) not in existing]
    assert sorted(ends) == expected
    starts = sorted((w.start, w.end) for w in missing)
    assert all(a[1] < b[0] for a, b in zip(starts, starts[1:]))


def test_interval_from_property_and_override() -> None:
    assert compaction_interval({}) == 5
    assert compaction_interval({"delta.logCompactionInterval": "7"}) == 7
    assert compaction_interval({"delta.logCompactionInterval": "7"}, 3) == 3
    for bad in ("x", "1", "0", "-4"):
        with pytest.raises(InvalidArgumentError):
            compaction_interval({"delta.logCompactionInterval": bad})


# -- content -------------------------------------------------------------------------------------

def test_reconcile_window_keeps_tombstones_and_drops_commit_info() -> None:
    dv = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "sizeInBytes": 3, "cardinality": 1}
    commits = [
        [info(), add("b"), remove("a"), {"txn": {"appId": "z", "version": 1}}],
        [info(), add("c"), add("d"), {"txn": {"appId": "z", "version": 2}}, {"txn": {"appId": "y", "version": 9}},
         {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": False}}],
        [info(), remove("c"), {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": True}},
         remove("e"), add("e", dv=dv), {"cdc": {"path": "x", "partitionValues": {}, "size": 1, "dataChange": False}}],
    ]
    out = reconcile_window(commits)
    assert [next(iter(a)) for a in out] == ["txn", "txn", "domainMetadata", "remove", "remove", "remove", "add",
                                             "add", "add"]
    assert [a["txn"] for a in out[:2]] == [{"appId": "y", "version": 9}, {"appId": "z", "version": 2}]
    assert out[2]["domainMetadata"]["removed"] is True
    assert [a["remove"]["path"] for a in out[3:6]] == ["a", "c", "e"]
    assert [(a["add"]["path"], "deletionVector" in a["add"]) for a in out[6:]] == [("b", False), ("d", False),
                                                                                    ("e", True)]
    # deterministic bytes, whatever order the input came in within the window's result
    assert render_window(out) == render_window(reconcile_window(commits))


def test_protocol_example(tmp_path: Path) -> None:
    """The example of the protocol's "Log Compaction Files" section, as a whole table."""
    t = tmp_path / "t"
    write_commit(t, 0, [info("CREATE"), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, meta(),
                        add("f1")])
    for v in (1, 2, 3):
        write_commit(t, v, [info()])
    write_commit(t, 4, [info(), add("f2"), remove("f1")])
    write_commit(t, 5, [info(), add("f3"), add("f4"), {"txn": {"appId": "3ae45b72", "version": 4389}}])
    write_commit(t, 6, [info(), remove("f3"), {"txn": {"appId": "3ae45b72", "version": 4390}}])
    m = compact_log(str(t), interval=3)
    assert [(w["start"], w["end"]) for w in m["windows_written"]] == [(1, 3), (4, 6)]
    lines = [json.loads(x) for x in (t / "_delta_log" / compaction_key(4, 6).split("/")[1]).read_text().splitlines()]
    assert lines == [{"txn": {"appId": "3ae45b72", "version": 4390}}, remove("f1"), remove("f3"), add("f2"), add("f4")]
    assert state(t) == state(t, use_compactions=False)
    assert [p for p in (a["path"] for a in state(t)["files"])] == ["f2", "f4"]


def test_domain_tombstone_inside_window_cancels_earlier_domain(tmp_path: Path) -> None:
    """A domain set before the window (here: in the checkpoint) and removed inside it stays removed."""
    from airflow_delta_maint.delta.log.checkpoint import write_checkpoint

    t = tmp_path / "t"
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["domainMetadata"]}}
    write_commit(t, 0, [info("CREATE"), protocol, meta(),
                        {"domainMetadata": {"domain": "app.a", "configuration": '{"k":1}', "removed": False}},
                        {"domainMetadata": {"domain": "app.b", "configuration": '{"k":2}', "removed": False}}])
    write_commit(t, 1, [info(), add("f1")])
    write_checkpoint(Snapshot.load(str(t)))
    write_commit(t, 2, [info(), {"domainMetadata": {"domain": "app.a", "configuration": '{"k":1}', "removed": True}}])
    write_commit(t, 3, [info(), add("f2")])
    write_commit(t, 4, [info(), {"domainMetadata": {"domain": "app.b", "configuration": '{"k":3}', "removed": False}}])
    m = compact_log(str(t), interval=4)
    assert [(w["start"], w["end"]) for w in m["windows_written"]] == [(2, 4)]
    with_c, without = state(t), state(t, use_compactions=False)
    assert with_c == without
    assert set(with_c["domains"]) == {"app.b"} and with_c["domains"]["app.b"]["configuration"] == '{"k":3}'
    assert set(with_c["domain_tombstones"]) == {"app.a"}
    assert Snapshot.load(str(t), compactions="trust").segment.compactions  # the reader used the file


def test_remove_of_pre_window_add_and_readd_inside_window(tmp_path: Path) -> None:
    """Removes that cancel adds from before the window are kept; a re-add inside it wins."""
    t = tmp_path / "t"
    dv1 = {"storageType": "i", "pathOrInlineDv": "wi5b=c", "offset": None, "sizeInBytes": 4, "cardinality": 1}
    dv2 = {"storageType": "i", "pathOrInlineDv": "wi5b=d", "offset": None, "sizeInBytes": 4, "cardinality": 2}
    write_commit(t, 0, [info("CREATE"), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, meta()])
    write_commit(t, 1, [info(), add("f1"), add("f2"), add("f5")])
    write_commit(t, 2, [info(), add("f3", dv=dv1)])
    write_commit(t, 3, [info(), remove("f1"), remove("f2")])
    write_commit(t, 4, [info(), add("f2", stats='{"numRecords":7}'), remove("f3", dv=dv1), add("f3", dv=dv2)])
    write_commit(t, 5, [info(), add("f4"), remove("f5")])
    write_commit(t, 6, [info(), add("f5")])
    m = compact_log(str(t), interval=2)
    assert [(w["start"], w["end"]) for w in m["windows_written"]] == [(1, 2), (3, 4), (5, 6)]
    lines = [json.loads(x) for x in (t / compaction_key(3, 4)).read_text().splitlines()]
    kinds = [(next(iter(a)), a[next(iter(a))]["path"]) for a in lines]
    assert kinds == [("remove", "f1"), ("remove", "f3"), ("add", "f2"), ("add", "f3")]
    assert lines[2]["add"]["stats"] == '{"numRecords":7}'
    lines = [json.loads(x) for x in (t / compaction_key(5, 6)).read_text().splitlines()]
    assert [(next(iter(a)), a[next(iter(a))]["path"]) for a in lines] == [("add", "f4"), ("add", "f5")]
    for v in range(7):
        assert state(t, v) == state(t, v, use_compactions=False), v
    s = state(t)
    assert [(a["path"], a.get("deletionVector", {}).get("pathOrInlineDv")) for a in s["files"]] == [
        ("f2", None), ("f3", "wi5b=d"), ("f4", None), ("f5", None)]
    assert [a["path"] for a in s["tombstones"]] == ["f1", "f3"]


# -- the corpus ----------------------------------------------------------------------------------

# Every corpus table, with the outcome recorded for it in tests/data/conformance/expected.json.
EXPECTED = load_expected("compact-log")
CORPUS = sorted(EXPECTED)


def _rs_loads(path: Path) -> bool:
    try:
        DeltaTable(str(path))
        return True
    except Exception:
        return False


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_table(name: str, tmp_path: Path) -> None:
    """Compact a copy of every corpus table; the state is the same with and without the files.

    A table our reader refuses (invalid on purpose: missing protocol/metaData, gaps) or a
    feature the job does not support is refused with one clear error and nothing is written.
    The outcome, the windows written and skipped are those expected.json records.
    """
    expected = EXPECTED[name]
    src = corpus_path(name)
    t = tmp_path / "t"
    shutil.copytree(src, t)
    before = compaction_files(t)
    if expected["outcome"] == "invalid":
        with pytest.raises(DeltaError):
            state(t, use_compactions=False)
        with pytest.raises(DeltaError) as invalid:
            compact_log(str(t), interval=2)
        assert (type(invalid.value).__name__, scrub(str(invalid.value), t)) == (expected["error_type"],
                                                                                 expected["error"])
        assert compaction_files(t) == before
        return
    reference = state(t, use_compactions=False)
    if expected["outcome"] == "refused":
        with pytest.raises(UnsupportedFeatureError) as refused:
            compact_log(str(t), interval=2)
        assert scrub(str(refused.value), t) == expected["reason"]
        assert compaction_files(t) == before
        return
    m = compact_log(str(t), interval=2)
    assert m["status"] == expected["outcome"] and m["version_read"] == expected["version_read"]
    assert compaction_windows(m) == (expected["windows_written"], expected["windows_skipped"])
    written = [compaction_key(w["start"], w["end"]).split("/")[1] for w in m["windows_written"]]
    assert sorted(set(before) | set(written)) == compaction_files(t)
    assert state(t) == reference
    segment = Snapshot.load(str(t), compactions="trust").segment
    assert {(c.start, c.end) for c in segment.compactions} >= {(w["start"], w["end"]) for w in m["windows_written"]}
    # earlier versions too (those a window ends at or after)
    for v in sorted({w["end"] for w in m["windows_written"]} | {reference["version"] - 1})[-3:]:
        if v >= 0:
            try:
                expected_state = state(t, v, use_compactions=False)
            except DeltaError:
                continue  # an older version is not reconstructable from what the log kept
            assert state(t, v) == expected_state
    # a rerun is a no-op
    again = compact_log(str(t), interval=2)
    assert again["status"] == "skipped" and again["numWindowsWritten"] == 0
    assert again["numDistrustedFilesRemoved"] == 0
    if _rs_loads(src):
        expected_rs = rs_state(src)
        assert rs_state(t) == (expected_rs[0], expected_rs[1])
        if written:
            # commits emptied behind the compaction files: only a reader of them sees the table
            blank_covered_commits(t)
            assert rs_state(t) == expected_rs, "delta-rs 1.6.0 did not read the compaction files"


# -- random delta-rs histories ------------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("delete"), st.integers(0, 40)),
    st.tuples(st.just("overwrite"), st.integers(1, 3)),
    st.tuples(st.just("txn"), st.integers(1, 2)),
    st.tuples(st.just("checkpoint"), st.just(0)),
    st.tuples(st.just("compact"), st.integers(2, 4)),
), min_size=3, max_size=14)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, interval=st.integers(2, 5))
def test_random_histories(ops: list[tuple[str, int]], interval: int, tmp_path_factory) -> None:
    root = tmp_path_factory.mktemp("hist")
    t = root / "t"
    next_id = 0
    rows: list[int] = []

    def batch(n: int) -> pa.Table:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return pa.table({"id": pa.array(ids, pa.int64())})

    write_deltalake(str(t), batch(2), mode="append")
    rows.extend([0, 1])
    txn_version = 0
    for op, arg in ops:
        if op == "append":
            b = batch(arg)
            write_deltalake(str(t), b, mode="append")
            rows.extend(b.column("id").to_pylist())
        elif op == "overwrite":
            b = batch(arg)
            write_deltalake(str(t), b, mode="overwrite")
            rows = b.column("id").to_pylist()
        elif op == "delete":
            lo = arg // 2
            DeltaTable(str(t)).delete(f"id >= {lo} AND id < {lo + 3}")
            rows = [r for r in rows if not lo <= r < lo + 3]
        elif op == "txn":
            txn_version += 1
            b = batch(1)
            write_deltalake(str(t), b, mode="append", commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=f"app-{arg}", version=txn_version)]))
            rows.extend(b.column("id").to_pylist())
        elif op == "checkpoint":
            DeltaTable(str(t)).create_checkpoint()
        elif op == "compact":
            compact_log(str(t), interval=arg)
    latest = DeltaTable(str(t)).version()
    before_rs = rs_state(t)
    reference = [state(t, v, use_compactions=False) if _reconstructable(t, v) else None for v in range(latest + 1)]
    m = compact_log(str(t), interval=interval)
    assert m["version_read"] == latest
    for v, expected in enumerate(reference):
        if expected is not None:
            assert state(t, v) == expected, v
    assert rs_state(t) == before_rs
    copy = root / "blanked"
    shutil.copytree(t, copy)
    blank_covered_commits(copy)
    assert rs_state(copy)[1] == [p for p in before_rs[1]]
    assert rs_rows(copy) == sorted(rows)
    assert state(copy) == reference[-1]
    assert compact_log(str(t), interval=interval)["numWindowsWritten"] == 0


def _reconstructable(t: Path, v: int) -> bool:
    try:
        Snapshot.load(str(t), v, compactions="ignore")
        return True
    except DeltaError:
        return False


# -- idempotence, races, size guard ----------------------------------------------------------------

def _appends(t: Path, n: int) -> None:
    for i in range(n):
        write_deltalake(str(t), pa.table({"id": pa.array([i], pa.int64())}), mode="append")


def test_rerun_is_a_noop(tmp_path: Path) -> None:
    t = tmp_path / "t"
    _appends(t, 13)
    first = compact_log(str(t))
    assert first["status"] == "committed" and first["numWindowsWritten"] == 2
    stamp = {f: os.stat(t / "_delta_log" / f).st_mtime_ns for f in compaction_files(t)}
    again = compact_log(str(t))
    assert again["status"] == "skipped" and again["numWindowsWritten"] == 0 and again["windows_skipped"] == []
    assert {f: os.stat(t / "_delta_log" / f).st_mtime_ns for f in compaction_files(t)} == stamp
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({})) is not None


def test_losing_the_race_is_success(tmp_path: Path) -> None:
    t = tmp_path / "t"
    _appends(t, 6)
    storage = Storage(str(t))
    assert write_window(storage, Window(1, 5), b"{}\n") is True
    assert write_window(storage, Window(1, 5), b"other\n") is False
    assert (t / compaction_key(1, 5)).read_bytes() == b"{}\n"


def test_size_guard_skips_and_reports(tmp_path: Path) -> None:
    t = tmp_path / "t"
    _appends(t, 11)
    sizes = [os.path.getsize(t / "_delta_log" / f"{v:020d}.json") for v in range(11)]
    limit = sum(sizes[1:6]) - 1  # window 1..5 is just over, and so is 6..10 (appends are alike)
    assert sum(sizes[6:11]) > limit
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({"max_window_bytes": limit})) is not None
    m = compact_log(str(t), max_window_bytes=limit)
    assert m["status"] == "skipped" and m["numWindowsWritten"] == 0 and m["numWindowsSkipped"] == 2
    assert [(w["start"], w["end"]) for w in m["windows_skipped"]] == [(1, 5), (6, 10)]
    assert all("max_window_bytes" in w["reason"] for w in m["windows_skipped"])
    assert compaction_files(t) == []
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({"max_window_bytes": 10 * limit})) is None
    assert compact_log(str(t), max_window_bytes=10 * limit)["numWindowsWritten"] == 2


def test_overlapping_existing_file_is_reported(tmp_path: Path) -> None:
    t = tmp_path / "t"
    _appends(t, 11)
    assert compact_log(str(t), interval=3)["numWindowsWritten"] == 3  # 1..3, 4..6, 7..9
    m = compact_log(str(t), interval=5)
    assert m["numWindowsWritten"] == 0
    assert [(w["start"], w["end"]) for w in m["windows_skipped"]] == [(1, 5), (6, 10)]
    assert "overlaps" in m["windows_skipped"][0]["reason"]
    assert state(t) == state(t, use_compactions=False)


def _set_property(t: Path, key: str, value: str) -> None:
    """Commit a metaData action with one more table property (delta-rs 1.6.0 refuses to set
    ``delta.logCompactionInterval`` itself, though it reads and writes tables that have it)."""
    snap = Snapshot.load(str(t))
    md = dict(snap.metadata.raw)
    md["configuration"] = {**(md.get("configuration") or {}), key: value}
    write_commit(t, snap.version + 1, [info("SET TBLPROPERTIES"), {"metaData": md}])


def test_interval_from_table_property(tmp_path: Path) -> None:
    t = tmp_path / "t"
    _appends(t, 1)
    _set_property(t, "delta.logCompactionInterval", "3")
    _appends(t, 6)  # versions 2..7
    m = compact_log(str(t))
    assert m["interval"] == 3 and [(w["start"], w["end"]) for w in m["windows_written"]] == [(1, 3), (4, 6)]
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({})) is not None
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({"interval": 2})) is not None  # 1..2, 3..4, 5..6 overlap
    assert rs_state(t)[0] == 7 and state(t) == state(t, use_compactions=False)
    _appends(t, 2)  # versions 8, 9: window 7..9 is due
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({})) is None
    assert [(w["start"], w["end"]) for w in compact_log(str(t))["windows_written"]] == [(7, 9)]


# -- checkpoint and cleanup ------------------------------------------------------------------------

def test_checkpoint_interval_writes_checkpoint_first(tmp_path: Path) -> None:
    t = tmp_path / "t"
    _appends(t, 12)
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({"checkpoint_interval": 10})) is None
    m = compact_log(str(t), checkpoint_interval=10)
    assert m["checkpoint"]["version"] == 11 and m["version_committed"] == 11 and m["status"] == "committed"
    assert m["numWindowsWritten"] == 0  # every window would reach back to the checkpoint
    assert Snapshot.load(str(t)).segment.checkpoint_version == 11
    _appends(t, 9)  # versions 12..20
    assert nothing_to_do(str(t), None, LogCompactionOptions.from_mapping({"checkpoint_interval": 10})) is None  # windows 12..15, 16..20
    m = compact_log(str(t), checkpoint_interval=10)
    assert m["checkpoint"] is None and m["version_committed"] is None
    assert [(w["start"], w["end"]) for w in m["windows_written"]] == [(12, 15), (16, 20)]
    assert state(t) == state(t, use_compactions=False)
    assert rs_state(t)[0] == 20


def test_cleanup_removes_old_files_covered_by_a_checkpoint(tmp_path: Path) -> None:
    from airflow_delta_maint.delta.log.checkpoint import write_checkpoint

    t = tmp_path / "t"
    _appends(t, 18)
    compact_log(str(t))  # 1..5, 6..10, 11..15
    write_checkpoint(Snapshot.load(str(t), 12))
    log = t / "_delta_log"
    old = time.time() - 40 * 24 * 3600
    for name in compaction_files(t)[:1] + compaction_files(t)[2:]:  # 1..5 and 11..15 look old
        os.utime(log / name, (old, old))
    m = compact_log(str(t))
    # 1..5 ends before the checkpoint and is old; 6..10 is young; 11..15 reaches past the checkpoint
    assert m["filesCleaned"] == [compaction_key(1, 5)] and m["numFilesCleaned"] == 1
    assert compaction_files(t) == [compaction_key(6, 10).split("/")[1], compaction_key(11, 15).split("/")[1]]
    # a shorter table retention makes the young one expire too
    write_deltalake(str(t), pa.table({"id": pa.array([1], pa.int64())}), mode="append")
    dt = DeltaTable(str(t))
    dt.alter.set_table_properties({"delta.logRetentionDuration": "interval 1 second"})
    time.sleep(1.1)
    m = compact_log(str(t), now_ms=int(time.time() * 1000))
    assert m["filesCleaned"] == [compaction_key(6, 10)]
    assert state(t) == state(t, use_compactions=False)
    assert list_log(Storage(str(t))).compactions[0].start == 11


def test_unsupported_feature_is_refused_before_writing(tmp_path: Path) -> None:
    t = tmp_path / "t"
    write_commit(t, 0, [info("CREATE"),
                        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["futureThing"]}},
                        meta(), add("f1")])
    for v in range(1, 7):
        write_commit(t, v, [info(), add(f"g{v}")])
    with pytest.raises(UnsupportedFeatureError, match="futureThing"):
        compact_log(str(t))
    assert compaction_files(t) == []


def test_bad_arguments_fail_fast(tmp_path: Path) -> None:
    t = tmp_path / "t"
    _appends(t, 6)
    for kwargs in ({"interval": 1}, {"max_window_bytes": -1}, {"checkpoint_interval": 0}):
        with pytest.raises(InvalidArgumentError):
            compact_log(str(t), **kwargs)
    assert compaction_files(t) == []
