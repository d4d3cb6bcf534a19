"""OPTIMIZE's streamed skip check for liquid clustering and ``--rewrite-type-widened`` answers as
the plan built from the whole snapshot does (``target_files`` is compared in test_state_stream).

The property tests draw random histories: of a liquid-clustered table whose files carry random
clustering tags (no tags, ZCubes of the clustering columns or of other columns, a foreign
provider, unreadable tags), and of a partitioned table whose ``id`` column was widened from
integer to long, with real data files written in the old or the new type. Checkpoints of every
kind come between the commits. The skip reason (or error) is compared under several option sets,
and the stream must answer itself whenever the snapshot trusts the log.
"""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from
from airflow_delta_maint.delta.plans.optimize_decision import streamed_plan_outline
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state
from airflow_delta_maint.delta.plans import type_widening_scan
from airflow_delta_maint.delta.plans.even_split_scan import MAX_RECORDS, num_records
from airflow_delta_maint.delta.plans.optimize import stats_num_records
from tests.delta.log.test_state_stream import NOW, OLD, _answer, _reference, worker_check, write_history

CUBES = ["c1", "c2", "c3", "c4", ""]
ZORDER_TAGS = [None, '["id"]', '[ "id" ]', '["p"]', "not json"]
PROVIDERS = [None, None, None, "liquid", "other"]


def _clustered_first() -> list[dict]:
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}
    return [{"commitInfo": {"timestamp": NOW, "operation": "CREATE TABLE"}},
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                          "writerFeatures": ["clustering", "domainMetadata"]}},
            {"metaData": {"id": "clustered", "format": {"provider": "parquet", "options": {}},
                          "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                          "createdTime": 1}},
            {"domainMetadata": {"domain": "delta.clustering", "configuration": json.dumps(
                {"clusteringColumns": [["id"]]}), "removed": False}}]


@st.composite
def clustered_histories(draw):
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    commits: list[list[dict]] = []
    live: dict[str, dict] = {}
    counter = 0
    checkpoints: dict[int, str] = {}
    for version in range(1, draw(st.integers(2, 10)) + 1):
        actions: list[dict] = [{"commitInfo": {"timestamp": NOW + version, "operation": "WRITE"}}]
        kind = rnd.choice(["append", "cluster", "cluster", "remove", "remove"])
        if kind == "remove" and live:
            path = rnd.choice(sorted(live))
            live.pop(path)
            actions.append({"remove": {"path": path, "deletionTimestamp": NOW, "dataChange": True}})
        else:
            cube = rnd.choice(CUBES) if kind == "cluster" else None
            for _ in range(rnd.randint(1, 3)):
                counter += 1
                add: dict = {"path": f"f{counter}.parquet", "partitionValues": {}, "size": rnd.choice([10, 40, 90]),
                             "modificationTime": rnd.choice([OLD, NOW + 10**9]), "dataChange": kind != "cluster"}
                tags: dict = {}
                if cube is not None:
                    tags["ZCUBE_ID"] = cube
                    zorder = rnd.choice(ZORDER_TAGS)
                    if zorder is not None:
                        tags["ZCUBE_ZORDER_BY"] = zorder
                    add["clusteringProvider"] = rnd.choice(PROVIDERS)
                elif rnd.random() < 0.2:
                    add["clusteringProvider"] = rnd.choice(PROVIDERS)
                if rnd.random() < 0.3:
                    tags["OTHER"] = "x"
                if tags:
                    add["tags"] = tags
                if add.get("clusteringProvider") is None:
                    add.pop("clusteringProvider", None)
                actions.append({"add": add})
                live[add["path"]] = add
        commits.append(actions)
        if rnd.random() < 0.3:
            checkpoints[version] = rnd.choice(["classic", "multipart", "v2", "v2json", "corrupt"])
    return commits, checkpoints


CLUSTERED_OPTIONS = [
    {},
    {"full": True},
    {"min_cube_size": 50},
    {"min_cube_size": 200, "target_cube_size": 10},
    {"policy": "auto", "min_num_files": 1},
    {"policy": "auto", "min_num_files": 4, "min_cube_size": 50},
    {"min_file_age": 3600, "min_cube_size": 100},
    {"skip_recent_partitions": 2},
    {"min_cube_size": -1},
    {"zorder_by": "id"},
]


def _compare(table: str, options: list[dict], trusted: bool) -> None:
    for params in options:
        params = dict(params, dv_ratio=0.05)
        expected = _answer(_reference, table, params)
        assert _answer(worker_check, table, params) == expected, params
        # the stream answers as the plan does: an outline, or the same error for bad input
        try:
            streamed_plan_outline(open_state(table), options_from(params))
        except StreamFallback:
            assert not trusted, f"the stream fell back on a log the snapshot trusts: {params}"
        except DeltaError as exc:
            assert ("error", type(exc).__name__, str(exc)) == expected, params
        else:
            assert expected[0] == "ok", (params, expected)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=clustered_histories())
def test_the_streamed_clustering_check_equals_the_plan(tmp_path_factory, history):
    commits, checkpoints = history
    root = tmp_path_factory.mktemp("clustered")
    write_history(root, False, 1000, commits, checkpoints, first=_clustered_first())
    _compare(str(root), CLUSTERED_OPTIONS, not Snapshot.load(str(root)).distrusted)


# -- type widening --------------------------------------------------------------------------------
def _widened_first() -> list[dict]:
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True,
         "metadata": {"delta.typeChanges": [{"fromType": "integer", "toType": "long"}]}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}
    return [{"commitInfo": {"timestamp": NOW, "operation": "CREATE TABLE"}},
            {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                          "writerFeatures": ["typeWidening"]}},
            {"metaData": {"id": "widened", "format": {"provider": "parquet", "options": {}},
                          "schemaString": json.dumps(schema), "partitionColumns": ["p"],
                          "configuration": {"delta.enableTypeWidening": "true"}, "createdTime": 1}}]


@st.composite
def widened_histories(draw):
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    commits: list[list[dict]] = []
    files: dict[str, bool] = {}  # path -> written in the old type
    live: list[str] = []
    checkpoints: dict[int, str] = {}
    old_share = rnd.choice([0.0, 0.1, 0.5])
    for version in range(1, draw(st.integers(2, 8)) + 1):
        actions: list[dict] = [{"commitInfo": {"timestamp": NOW + version, "operation": "WRITE"}}]
        if live and rnd.random() < 0.3:
            path = live.pop(rnd.randrange(len(live)))
            actions.append({"remove": {"path": path, "deletionTimestamp": NOW, "dataChange": True}})
        else:
            for _ in range(rnd.randint(1, 4)):
                part = rnd.choice(["a", "b", "c"])
                path = f"p={part}/f{len(files)}.parquet"
                files[path] = rnd.random() < old_share
                live.append(path)
                actions.append({"add": {"path": path, "partitionValues": {"p": part}, "size": 100,
                                        "modificationTime": rnd.choice([OLD, NOW + 10**9]), "dataChange": True}})
        commits.append(actions)
        if rnd.random() < 0.3:
            checkpoints[version] = rnd.choice(["classic", "multipart", "v2", "v2json", "corrupt"])
    return commits, checkpoints, files


WIDENED_OPTIONS = [
    {"rewrite_type_widened": True},
    {"rewrite_type_widened": True, "where": "p = 'a'"},
    {"rewrite_type_widened": True, "min_file_age": 3600},
    {"rewrite_type_widened": True, "skip_recent_partitions": 2},
    {"rewrite_type_widened": True, "policy": "auto"},
]


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=widened_histories())
def test_the_streamed_type_widening_check_equals_the_plan(tmp_path_factory, history, monkeypatch):
    commits, checkpoints, files = history
    monkeypatch.setattr(type_widening_scan, "CHUNK", 2)
    root = tmp_path_factory.mktemp("widened")
    for path, old in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32() if old else pa.int64())}), root / path)
    write_history(root, True, 1000, commits, checkpoints, first=_widened_first())
    _compare(str(root), WIDENED_OPTIONS, not Snapshot.load(str(root)).distrusted)


def test_the_type_widening_check_stops_reading_footers_at_the_first_old_file(tmp_path, monkeypatch):
    monkeypatch.setattr(type_widening_scan, "CHUNK", 4)
    adds = []
    for i in range(40):
        path = f"p=a/f{i}.parquet"
        (tmp_path / "p=a").mkdir(exist_ok=True)
        pq.write_table(pa.table({"id": pa.array([i], pa.int32() if i == 1 else pa.int64())}), tmp_path / path)
        adds.append({"add": {"path": path, "partitionValues": {"p": "a"}, "size": 100, "modificationTime": OLD,
                             "dataChange": True}})
    write_history(tmp_path, True, 1000, [[{"commitInfo": {"timestamp": NOW}}] + adds], {1: "classic"},
                  first=_widened_first())
    seen: list[type_widening_scan.OldTypeFiles] = []
    real = type_widening_scan.OldTypeFiles.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append(self)

    monkeypatch.setattr(type_widening_scan.OldTypeFiles, "__init__", spy)
    assert nothing_to_do(str(tmp_path), None, options_from({"rewrite_type_widened": True})) is None
    assert seen and seen[-1].found == "p=a/f1.parquet" and seen[-1].read == 4


# -- numRecords ------------------------------------------------------------------------------------
STATS = st.one_of(
    st.none(), st.just(""), st.just("null"), st.just("[1]"), st.just("  "), st.just("{}"),
    st.integers(-10**20, 10**20).map(lambda n: json.dumps({"numRecords": n})),
    st.integers(0, 10**6).map(lambda n: json.dumps({"minValues": {"numRecords": 3}, "numRecords": n})),
    st.integers(0, 10**6).map(lambda n: f'{{"numRecords": {n}, "numRecords": {n + 1}}}'),
    st.sampled_from(['{"numRecords": 5.0}', '{"numRecords": "7"}', '{"numRecords": true}', '{"numRecords": null}',
                     '{"numRecords": 1e3}', '{"numRecords": 5} {"numRecords": 6}', '{"a": "\\ud800"}',
                     '{"numRecords":\n3}', ' {"numRecords": 4} ', '{"numRecords": [5]}', '{"numRecords": 5,}']),
    st.text(max_size=20))


@settings(max_examples=examples(200), deadline=None)
@given(values=st.lists(STATS, max_size=30))
@example(values=['{"numRecords": 100000000000000000000}'])
@example(values=['{"numRecords": 5}', '{"numRecords": 1099511627776}'])
def test_num_records_reads_stats_as_the_plan_does(values):
    expected = [stats_num_records(v) for v in values]
    try:
        records, present = num_records(pa.array(values, pa.string()))
    except StreamFallback:
        assert any(r is not None and abs(r) >= MAX_RECORDS for r in expected)
        return
    assert [int(r) if p else None for r, p in zip(records, present)] == expected


def _clustered_add(path: str, size: int, cube: str | None = None, zorder: str = '["id"]') -> dict:
    add: dict = {"path": path, "partitionValues": {}, "size": size, "modificationTime": OLD, "dataChange": False}
    if cube is not None:
        add.update(clusteringProvider="liquid", tags={"ZCUBE_ID": cube, "ZCUBE_ZORDER_BY": zorder})
    return {"add": add}


def test_the_clustering_check_counts_cubes_below_the_minimum(tmp_path, monkeypatch):
    def table(name: str, adds: list[dict]) -> str:
        root = tmp_path / name
        write_history(root, False, 1000, [[{"commitInfo": {"timestamp": NOW}}] + adds], {1: "classic"},
                      first=_clustered_first())
        return str(root)

    one_cube = table("one", [_clustered_add("a.parquet", 10, "c1"), _clustered_add("b.parquet", 10, "c1"),
                             _clustered_add("x.parquet", 10, "c9", '["p"]')])
    two_cubes = table("two", [_clustered_add("a.parquet", 10, "c1"), _clustered_add("b.parquet", 10, "c2")])
    unclustered = table("new", [_clustered_add("a.parquet", 10, "c1"), _clustered_add("n.parquet", 10)])
    monkeypatch.setattr(Snapshot, "load", None)  # the stream answers alone
    assert nothing_to_do(one_cube, None, options_from({})) is not None
    assert nothing_to_do(one_cube, None, options_from({"full": True})) is None
    assert nothing_to_do(two_cubes, None, options_from({})) is None
    assert nothing_to_do(two_cubes, None, options_from({"min_cube_size": 10})) is not None  # both cubes are finished
    assert nothing_to_do(unclustered, None, options_from({})) is None


class _RemoteFiles:
    """A remote store over local bytes that counts what is read and refuses whole reads."""

    is_local = False

    def __init__(self, files: dict[str, bytes]):
        self.files, self.ranges = files, []

    def head(self, key: str):
        if key not in self.files:
            raise FileNotFoundError(key)
        return type("Info", (), {"size": len(self.files[key])})()

    def read_range(self, key: str, start: int, end: int) -> bytes:
        self.ranges.append((key, start, end))
        return self.files[key][start:end]

    def read(self, key: str) -> bytes:
        raise AssertionError("a whole data file was read")


def test_a_remote_files_schema_is_read_from_its_footer_by_ranges(tmp_path, monkeypatch):
    from airflow_delta_maint.delta.protocol import type_widening

    columns = {f"c{i}": pa.array(range(5000), pa.int32()) for i in range(300)}
    pq.write_table(pa.table(columns), tmp_path / "wide.parquet")
    pq.write_table(pa.table({"id": pa.array(range(100_000), pa.int64())}), tmp_path / "long.parquet")
    store = _RemoteFiles({name: (tmp_path / name).read_bytes() for name in ("wide.parquet", "long.parquet")})
    monkeypatch.setattr(type_widening, "FOOTER_GUESS", 4096)
    assert type_widening.footer_schema(store, "wide.parquet") == pq.read_schema(tmp_path / "wide.parquet")
    assert len(store.ranges) == 2  # the footer of 300 columns is larger than the first guess
    assert type_widening.footer_schema(store, "long.parquet").field("id").type == pa.int64()
    assert len(store.ranges) == 3 and sum(e - s for _, s, e in store.ranges[-1:]) <= 4096
