"""OPTIMIZE on liquid-clustered tables (PROTOCOL.md "Clustered Table"): Hilbert clustering by the
clustering columns, delta-spark's incremental ZCube rules, ``--full``, and the refusals.

Tables are written by hand (pyarrow files, log actions as the protocol spells them). Rows are
compared with delta-rs before and after; clustering quality is the average number of files
whose [min, max] range overlaps a point, per clustering column.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.clustering import clustering_columns, clustering_quality
from tests.app.jobs.test_optimize import listing, rows_deltars
from tests.conftest import corpus_path
from tests.row_tracking_tables import build_enabled_table, stable_rows

SCHEMA = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                       for n, t in (("id", "long"), ("x", "double"), ("y", "long"), ("s", "string"))]}


class ClusteredTable:
    """A table with the clustering feature, clustered by x and y, written file by file."""

    def __init__(self, path: Path, files: int, rows: int, seed: int = 7):
        self.path, self.version, self.next_id = path, -1, 0
        self.rng = np.random.default_rng(seed)
        (path / "_delta_log").mkdir(parents=True)
        adds = [self._file(rows) for _ in range(files)]
        self._commit({"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                                   "writerFeatures": ["domainMetadata", "clustering"]}},
                     {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                                   "schemaString": json.dumps(SCHEMA), "partitionColumns": [], "configuration": {},
                                   "createdTime": 1_700_000_000_000}},
                     {"domainMetadata": {"domain": "delta.clustering", "removed": False,
                                         "configuration": json.dumps({"clusteringColumns": [["x"], ["y"]]})}},
                     *adds)

    def _file(self, rows: int) -> dict:
        ids = np.arange(self.next_id, self.next_id + rows)
        self.next_id += rows
        x, y = self.rng.uniform(0, 1000, rows).round(3), self.rng.integers(0, 1_000_000, rows)
        table = pa.table({"id": ids, "x": x, "y": y, "s": [f"r{i}" for i in ids]})
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        pq.write_table(table, self.path / name)
        stats = {"numRecords": rows, "minValues": {"id": int(ids.min()), "x": float(x.min()), "y": int(y.min())},
                 "maxValues": {"id": int(ids.max()), "x": float(x.max()), "y": int(y.max())},
                 "nullCount": {"id": 0, "x": 0, "y": 0, "s": 0}}
        return {"add": {"path": name, "partitionValues": {}, "size": (self.path / name).stat().st_size,
                        "modificationTime": 1_700_000_000_000, "dataChange": True, "stats": json.dumps(stats)}}

    def _commit(self, *actions: dict) -> None:
        self.version = max([int(p.name[:20]) for p in (self.path / "_delta_log").glob("*.json")], default=-1) + 1
        lines = [json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE"}})]
        with open(self.path / "_delta_log" / f"{self.version:020d}.json", "x") as fh:  # never overwrite
            fh.write("\n".join(lines + [json.dumps(a) for a in actions]) + "\n")

    def append(self, files: int, rows: int) -> list[str]:
        adds = [self._file(rows) for _ in range(files)]
        self._commit(*adds)
        return [a["add"]["path"] for a in adds]


def optimize(path: Path, *args: str) -> dict:
    code, m = cli.run(["optimize", str(path), "--json", *args])
    assert code == 0, m
    return m


def _live(path: Path) -> dict[str, dict]:
    return {a["path"]: a for a in Snapshot.load(str(path)).add_actions()}


def test_clusters_measurably_and_incrementally(tmp_path: Path, spark) -> None:
    t = ClusteredTable(tmp_path / "t", files=24, rows=400)
    rows = rows_deltars(t.path)
    m = optimize(t.path, "--target-file-size", "20000")
    assert m["status"] == "committed" and m["numRemovedFiles"] == 24 and m["numAddedFiles"] >= 4, m
    before, after = m["clusteringQualityBefore"], m["clusteringQualityAfter"]
    assert set(before) == {"x", "y"} and before["x"] > 10
    assert all(after[c] < before[c] / 3 for c in ("x", "y")), (before, after)
    assert m["clusteringStats"]["inputOtherFiles"]["numFiles"] == 24 and m["clusteringStats"]["numOutputZCubes"] == 1
    assert rows_deltars(t.path) == rows
    live = _live(t.path)
    cubes = {a["tags"]["ZCUBE_ID"] for a in live.values()}
    assert len(cubes) == 1
    for a in live.values():
        assert a["clusteringProvider"] == "liquid" and a["tags"]["ZCUBE_ZORDER_BY"] == '["x","y"]'
        stats = json.loads(a["stats"])
        assert {"x", "y"} <= set(stats["minValues"]) and {"x", "y"} <= set(stats["maxValues"])
    info = json.loads((t.path / "_delta_log" / f"{m['version_committed']:020d}.json").read_text().splitlines()[0])
    assert json.loads(info["commitInfo"]["operationParameters"]["clusterBy"]) == ["x", "y"]

    # a rerun right after: one ZCube, nothing unclustered -> nothing to do
    assert optimize(t.path, "--target-file-size", "20000")["status"] == "skipped"

    # appended files are clustered into a new ZCube; a finished ZCube (here: at least 1 byte) stays
    first_cube = set(live)
    appended = t.append(files=6, rows=400)
    rows = rows_deltars(t.path)
    m = optimize(t.path, "--target-file-size", "20000", "--min-cube-size", "1")
    assert m["status"] == "committed" and m["numRemovedFiles"] == 6, m
    live = _live(t.path)
    assert first_cube <= set(live) and not set(appended) & set(live)
    assert len({a["tags"]["ZCUBE_ID"] for a in live.values()}) == 2
    assert rows_deltars(t.path) == rows
    assert optimize(t.path, "--target-file-size", "20000", "--min-cube-size", "1")["status"] == "skipped"

    # with delta-spark's default minimum cube size both small ZCubes are merged, once
    m = optimize(t.path, "--target-file-size", "20000")
    assert m["status"] == "committed" and m["clusteringStats"]["inputNumZCubes"] == 2, m
    assert len({a["tags"]["ZCUBE_ID"] for a in _live(t.path).values()}) == 1
    assert optimize(t.path, "--target-file-size", "20000")["status"] == "skipped"
    # --full reclusters even a finished table
    live = _live(t.path)
    m = optimize(t.path, "--target-file-size", "20000", "--full")
    assert m["status"] == "committed" and m["numRemovedFiles"] == len(live), m
    assert rows_deltars(t.path) == rows


def test_files_clustered_by_other_columns_are_left_to_full(tmp_path: Path, spark) -> None:
    t = ClusteredTable(tmp_path / "t", files=6, rows=200)
    optimize(t.path)
    # the clustering columns change to y only: files clustered by (x, y) are no longer candidates
    t._commit({"domainMetadata": {"domain": "delta.clustering", "removed": False,
                                  "configuration": json.dumps({"clusteringColumns": [["y"]]})}})
    appended = t.append(files=3, rows=200)
    m = optimize(t.path)
    assert m["numRemovedFiles"] == 3 and m["clusteringStats"]["numFilesSkippedOtherClustering"] >= 1, m
    assert not set(appended) & set(_live(t.path))
    m = optimize(t.path, "--full")
    assert m["status"] == "committed"
    assert {a["tags"]["ZCUBE_ZORDER_BY"] for a in _live(t.path).values()} == {'["y"]'}


@pytest.mark.parametrize("args, message", [
    (["--zorder-by", "x"], "cannot Z-order a liquid-clustered table"),
    (["--where", "x > 1"], "takes no partition predicate"),
    (["--min-file-size", "10"], "use min_cube_size"),
])
def test_refused_options_change_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    t = ClusteredTable(tmp_path / "t", files=3, rows=10)
    before = listing(t.path)
    code, m = cli.run(["optimize", str(t.path), "--json", *args])
    assert code != 0 and message in m["error"]
    assert listing(t.path) == before


def test_full_on_an_unclustered_table_is_refused(tmp_path: Path) -> None:
    path = build_enabled_table(tmp_path / "t", dvs=False)
    code, m = cli.run(["optimize", str(path), "--json", "--full"])
    assert code != 0 and "liquid-clustered tables only" in m["error"]


def test_clustering_with_row_tracking_and_deletion_vectors(tmp_path: Path, spark) -> None:
    path = build_enabled_table(tmp_path / "t")
    ids = stable_rows(path)
    snap = Snapshot.load(str(path))
    proto = snap.protocol
    (path / "_delta_log" / f"{snap.version + 1:020d}.json").write_text("\n".join(json.dumps(a) for a in [
        {"commitInfo": {"timestamp": 1_700_000_100_000, "operation": "CLUSTER BY"}},
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": list(proto.reader_features),
                      "writerFeatures": sorted(set(proto.writer_features) | {"clustering"})}},
        {"domainMetadata": {"domain": "delta.clustering", "removed": False,
                            "configuration": json.dumps({"clusteringColumns": [["x"]]})}}]) + "\n")
    m = optimize(path)
    assert m["status"] == "committed", m
    assert stable_rows(path) == ids
    assert all(a["clusteringProvider"] == "liquid" for a in _live(path).values())


def test_corpus_preview_table_refused_and_its_standard_twin_clustered(tmp_path: Path, spark) -> None:
    preview = tmp_path / "preview"
    shutil.copytree(corpus_path("rs/table_with_liquid_clustering"), preview)
    before = listing(preview)
    code, m = cli.run(["optimize", str(preview), "--json"])
    assert code != 0 and "'liquid'" in m["error"] and "preview" in m["error"]
    assert listing(preview) == before

    # the same table with the protocol's names for the feature and the domain
    twin = tmp_path / "twin"
    shutil.copytree(corpus_path("rs/table_with_liquid_clustering"), twin)
    log = twin / "_delta_log" / "00000000000000000000.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    for a in actions:
        if "protocol" in a:
            a["protocol"]["writerFeatures"] = ["clustering" if f == "liquid" else f
                                               for f in a["protocol"]["writerFeatures"]]
        if a.get("domainMetadata", {}).get("domain") == "delta.liquid":
            a["domainMetadata"] = {"domain": "delta.clustering", "removed": False,
                                   "configuration": json.dumps({"clusteringColumns": [["id"]]})}
    log.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    (twin / "_delta_log" / "00000000000000000000.crc").unlink()
    snap = Snapshot.load(str(twin))
    assert [c.name for c in clustering_columns(snap.metadata.schema_string, snap.domains)] == ["id"]
    ids = stable_rows(twin)
    m = optimize(twin)
    assert m["status"] == "committed" and m["numRemovedFiles"] == 10, m
    assert stable_rows(twin) == ids
    assert sorted(ids) == list(range(10))
    after = Snapshot.load(str(twin))
    assert clustering_quality(after.add_actions(), clustering_columns(after.metadata.schema_string,
                                                                       after.domains)) == {"id": 1.0}
