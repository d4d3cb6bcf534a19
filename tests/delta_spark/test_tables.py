"""The catalogue of delta-spark tables (``tables.py``) builds, and every table has what it claims.

Each table is read back with delta-spark (its snapshot's files, ``DESCRIBE DETAIL``, the rows) and from its
``_delta_log`` (the commits' actions, the checkpoint and sidecar files), and the data files' parquet schemas.
Every feature label has its own evidence (``EVIDENCE``); every table has work for every job (at least 8 live
data files over at least 6 commits, a commit that removed files unless it is append-only, a unique long
``id``); and a second build gives the same rows.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import pytest

from tests.delta_spark import committed_tables
from tests.delta_spark.tables import FEATURE_LABELS, TABLES, DeltaSparkTable, build_all

pytestmark = pytest.mark.delta_spark

TABLES_BY_NAME = {t.name: t for t in TABLES}
NAMES = [t.name for t in TABLES]
# the features a legacy protocol (writer version below 7) implies, by the writer version that brought them
LEGACY_WRITER_FEATURES = {"appendOnly": 2, "invariants": 2, "checkConstraints": 3, "changeDataFeed": 4,
                          "generatedColumns": 4, "columnMapping": 5, "identityColumns": 6}


@pytest.fixture(scope="module")
def built(delta_tables) -> dict[str, Path]:
    """The test run's copies of the kept tables (the matrix copies them again before touching them)."""
    return delta_tables


#: the tables built again to show the builder gives the rows of the kept ones: one of each way a builder writes
#: (appends alone; deletion vectors from DML and MERGE; row tracking; clustering); building all of them again
#: took 3 min 46 s on two cores alone and some 900 s of a worker's time under CI's load (``make delta-spark-tables``
#: does), and the matrix checks every table's cells against docs/compatibility.md on every run
REBUILT = ["plain", "dv-merge-partitioned", "row-tracking-dv", "clustered-optimized"]


@pytest.fixture(scope="module")
def rebuilt(spark, tmp_path_factory, built) -> dict[str, Path]:
    return build_all(spark, tmp_path_factory.mktemp("tables_second"), names=REBUILT)


# ---------------------------------------------------------------------------------------------------------
# what a table is, read back


@dataclass
class Facts:
    """One built table as delta-spark and its log show it."""

    spark: Any
    path: Path
    commits: dict[int, list[dict]] = field(default_factory=dict)   # version -> actions of its JSON commit

    def __post_init__(self) -> None:
        log = self.path / "_delta_log"
        for name in os.listdir(log):
            m = re.fullmatch(r"(\d{20})\.json", name)
            if m:
                with open(log / name) as fh:
                    self.commits[int(m.group(1))] = [json.loads(line) for line in fh if line.strip()]

    @property
    def ref(self) -> str:
        return f"delta.`{self.path}`"

    @cached_property
    def version(self) -> int:
        return max(self.commits)

    def actions(self, kind: str) -> list[tuple[int, dict]]:
        return [(v, a[kind]) for v in sorted(self.commits) for a in self.commits[v] if kind in a]

    def operation(self, version: int) -> str:
        return next(a["commitInfo"]["operation"] for a in self.commits[version] if "commitInfo" in a)

    def operations(self) -> list[str]:
        return [self.operation(v) for v in sorted(self.commits)]

    @cached_property
    def protocol(self) -> dict:
        return self.actions("protocol")[-1][1]

    @cached_property
    def reader_features(self) -> set[str]:
        """The protocol's reader features, the legacy ones a reader version below 3 implies included."""
        if self.protocol["minReaderVersion"] >= 3:
            return set(self.protocol.get("readerFeatures") or [])
        return {"columnMapping"} if self.protocol["minReaderVersion"] == 2 else set()

    @cached_property
    def writer_features(self) -> set[str]:
        """The protocol's writer features, the legacy ones a writer version below 7 implies included."""
        if self.protocol["minWriterVersion"] >= 7:
            return set(self.protocol.get("writerFeatures") or [])
        return {name for name, version in LEGACY_WRITER_FEATURES.items() if version <= self.protocol["minWriterVersion"]}

    @cached_property
    def metadata(self) -> dict:
        return self.actions("metaData")[-1][1]

    @cached_property
    def properties(self) -> dict[str, str]:
        return self.metadata.get("configuration") or {}

    @cached_property
    def schema(self) -> dict:
        return json.loads(self.metadata["schemaString"])

    def field(self, name: str) -> dict:
        return next(f for f in self.schema["fields"] if f["name"] == name)

    @cached_property
    def detail(self) -> dict:
        return self.spark.sql(f"DESCRIBE DETAIL {self.ref}").collect()[0].asDict(recursive=True)

    @cached_property
    def live_files(self) -> list[dict]:
        """The add actions of delta-spark's snapshot of the latest version."""
        from pyspark.sql import DataFrame

        jvm = self.spark._jvm
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, str(self.path))
        snapshot = delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
        assert snapshot.version() == self.version
        files = DataFrame(snapshot.allFiles().toDF(), self.spark).collect()
        return [r.asDict(recursive=True) for r in files]

    @cached_property
    def live_paths(self) -> set[str]:
        return {f["path"] for f in self.live_files}

    def parquet_schema(self, rel_path: str):
        from urllib.parse import unquote
        return pq.read_schema(self.path / unquote(rel_path))

    def data_file_columns(self) -> list[set[str]]:
        """The top-level column names of each live data file."""
        return [set(self.parquet_schema(f["path"]).names) for f in self.live_files]

    def log_files(self, pattern: str, folder: str = "_delta_log") -> list[str]:
        where = self.path / folder
        return sorted(n for n in os.listdir(where) if re.fullmatch(pattern, n)) if where.exists() else []

    def select_all(self) -> str:
        """Every column as a string (geometry as hex WKB): rows comparable across builds."""
        exprs = []
        for f in self.schema["fields"]:
            col = f"`{f['name']}`"
            kind = f["type"] if isinstance(f["type"], str) else f["type"]["type"]
            exprs.append(f"hex(st_asbinary({col}))" if kind.startswith("geometry") else f"CAST({col} AS STRING)")
        return f"SELECT {', '.join(exprs)} FROM {self.ref}"

    def rows(self) -> list[tuple]:
        return sorted(tuple(r) for r in self.spark.sql(self.select_all()).collect())


def _fields(schema: dict):
    """Every field of a schema, nested ones too."""
    def walk(kind):
        if isinstance(kind, dict):
            if kind.get("type") == "struct":
                for f in kind["fields"]:
                    yield f
                    yield from walk(f["type"])
            elif kind.get("type") == "array":
                yield from walk(kind["elementType"])
            elif kind.get("type") == "map":
                yield from walk(kind["keyType"])
                yield from walk(kind["valueType"])
    yield from walk(schema)


def _logical(schema: Any) -> Any:
    """A schema without the physical column names column mapping draws at random."""
    if isinstance(schema, dict):
        return {k: _logical(v) for k, v in schema.items() if k != "delta.columnMapping.physicalName"}
    if isinstance(schema, list):
        return [_logical(v) for v in schema]
    return schema


def _dml_commits(facts: Facts) -> list[int]:
    return [v for v in sorted(facts.commits) if facts.operation(v) in ("DELETE", "UPDATE", "MERGE")]


def _dv_adds(facts: Facts, operation: str) -> list[dict]:
    return [a for v in sorted(facts.commits) if facts.operation(v) == operation
            for a in (x["add"] for x in facts.commits[v] if "add" in x) if a.get("deletionVector")]


# ---------------------------------------------------------------------------------------------------------
# the evidence for each feature label: an assertion on the table read back


def _copy_on_write(f: Facts) -> None:
    rewrites = [v for v in _dml_commits(f)
                if any("remove" in a for a in f.commits[v]) and any("add" in a for a in f.commits[v])]
    assert rewrites, "no DELETE/UPDATE/MERGE rewrote files"
    assert not any(a.get("deletionVector") for v in rewrites for x in f.commits[v] for a in [x.get("add") or {}])


def _deletion_vectors(operation: str) -> Callable[[Facts], None]:
    def check(f: Facts) -> None:
        assert "deletionVectors" in f.reader_features and "deletionVectors" in f.writer_features
        assert _dv_adds(f, operation), f"no {operation} commit added a file with a deletion vector"
        assert any(x.get("deletionVector") for x in f.live_files), "no live file has a deletion vector"
    return check


def _dv_replaced(f: Facts) -> None:
    seen: dict[str, set[str]] = {}
    for _, add in f.actions("add"):
        if add.get("deletionVector"):
            seen.setdefault(add["path"], set()).add(add["deletionVector"]["pathOrInlineDv"])
    assert any(len(dvs) > 1 for dvs in seen.values()), "no file's deletion vector was replaced"


def _column_mapping(mode: str) -> Callable[[Facts], None]:
    def check(f: Facts) -> None:
        assert "columnMapping" in f.reader_features and "columnMapping" in f.writer_features
        assert f.properties["delta.columnMapping.mode"] == mode
        for fld in _fields(f.schema):
            assert "delta.columnMapping.id" in fld["metadata"] and "delta.columnMapping.physicalName" in fld["metadata"]
        if mode == "id":   # the data files carry parquet field ids
            schema = f.parquet_schema(f.live_files[0]["path"])
            assert all(b"PARQUET:field_id" in (schema.field(i).metadata or {}) for i in range(len(schema)))
    return check


def _renamed(f: Facts) -> None:
    assert "RENAME COLUMN" in f.operations()
    first = json.loads(f.actions("metaData")[0][1]["schemaString"])
    first_names = {fld["metadata"]["delta.columnMapping.id"]: fld["name"] for fld in _fields(first)}
    renamed = [fld["name"] for fld in _fields(f.schema)
               if first_names.get(fld["metadata"]["delta.columnMapping.id"], fld["name"]) != fld["name"]]
    assert renamed, "no column has another name than the one the table was created with"


def _dropped(f: Facts) -> None:
    assert "DROP COLUMNS" in f.operations()
    physical = {fld["metadata"]["delta.columnMapping.physicalName"] for fld in f.schema["fields"]}
    assert any(cols - physical for cols in f.data_file_columns()), "no live file keeps the dropped column"


def _row_tracking(f: Facts) -> None:
    assert "rowTracking" in f.writer_features and "domainMetadata" in f.writer_features
    assert all(x["baseRowId"] is not None and x["defaultRowCommitVersion"] is not None for x in f.live_files)
    assert any(d["domain"] == "delta.rowTracking" for _, d in f.actions("domainMetadata"))


def _materialized_row_ids(f: Facts) -> None:
    row_id = f.properties["delta.rowTracking.materializedRowIdColumnName"]
    version = f.properties["delta.rowTracking.materializedRowCommitVersionColumnName"]
    assert any({row_id, version} <= cols for cols in f.data_file_columns()), "no file has materialized row ids"


def _clustering_columns(f: Facts) -> list[list[str]]:
    """The clustering columns each delta.clustering domain action set, in commit order."""
    return [json.loads(d["configuration"])["clusteringColumns"]
            for _, d in f.actions("domainMetadata") if d["domain"] == "delta.clustering"]


def _liquid(f: Facts) -> None:
    assert "clustering" in f.writer_features and "domainMetadata" in f.writer_features
    assert _clustering_columns(f)


def _reclustered(f: Facts) -> None:
    assert _clustering_columns(f)[0] != _clustering_columns(f)[-1] != []
    assert f.detail["clusteringColumns"] == ["b"]


def _clustering_none(f: Facts) -> None:
    assert _clustering_columns(f)[0] and _clustering_columns(f)[-1] == []
    assert f.detail["clusteringColumns"] == []


def _zcubes(f: Facts) -> None:
    assert "OPTIMIZE" in f.operations()
    assert any(x["clusteringProvider"] == "liquid" and (x["tags"] or {}).get("ZCUBE_ID") for x in f.live_files)


def _type_widening(f: Facts) -> None:
    assert "typeWidening" in f.reader_features and "typeWidening" in f.writer_features
    changes = {fld["name"]: fld["metadata"].get("delta.typeChanges") for fld in f.schema["fields"]}
    assert changes["tb"] and changes["f"] and changes["i"] and changes["d"]
    assert [c["toType"] for c in changes["tb"]] == ["short", "integer", "long"]
    types = {str(f.parquet_schema(x["path"]).field("tb").type) for x in f.live_files}
    assert len(types) > 1, f"every file has one physical type for tb: {types}"


def _checkpoint_classic(f: Facts) -> None:
    assert f.log_files(r"\d{20}\.checkpoint\.parquet")


def _checkpoint_multi_part(f: Facts) -> None:
    parts = f.log_files(r"\d{20}\.checkpoint\.\d{10}\.\d{10}\.parquet")
    assert any(p.split(".")[3] != "0000000001" for p in parts), parts


def _checkpoint_v2(ext: str) -> Callable[[Facts], None]:
    def check(f: Facts) -> None:
        assert "v2Checkpoint" in f.reader_features and f.properties["delta.checkpointPolicy"] == "v2"
        assert f.log_files(r"\d{20}\.checkpoint\.[0-9a-f-]{36}\." + ext)
        assert not f.log_files(r"\d{20}\.checkpoint\.parquet")
    return check


def _sidecars(f: Facts) -> None:
    sidecars = f.log_files(r"[^.].*\.parquet", "_delta_log/_sidecars")
    assert len(sidecars) >= 2, sidecars
    # each V2 checkpoint names its sidecars (in its JSON top-level file, or read with delta-spark from parquet)
    for top in f.log_files(r"\d{20}\.checkpoint\.[0-9a-f-]{36}\.(json|parquet)"):
        rows = f.spark.read.format(top.rsplit(".", 1)[1]).load(str(f.path / "_delta_log" / top))
        named = {r[0] for r in rows.where("sidecar IS NOT NULL").select("sidecar.path").collect()}
        assert named and named <= set(sidecars), (top, named)


def _in_commit_timestamps(f: Facts) -> None:
    assert "inCommitTimestamp" in f.writer_features
    enabled = int(f.properties["delta.inCommitTimestampEnablementVersion"])
    assert 0 < enabled < f.version and "delta.inCommitTimestampEnablementTimestamp" in f.properties
    assert all("inCommitTimestamp" in f.commits[v][0].get("commitInfo", {}) for v in f.commits if v >= enabled)


def _change_data_feed(f: Facts) -> None:
    assert f.properties["delta.enableChangeDataFeed"] == "true"
    assert f.actions("cdc")
    files = [p for p in (f.path / "_change_data").rglob("*.parquet")]
    assert len(files) >= 2, files


def _identity(f: Facts) -> None:
    assert "identityColumns" in f.writer_features
    assert "delta.identity.highWaterMark" in f.field("seq")["metadata"]


def _generated(f: Facts) -> None:
    assert "generatedColumns" in f.writer_features
    assert f.field("day")["metadata"]["delta.generationExpression"]
    assert f.detail["partitionColumns"] == ["day"]


def _defaults(f: Facts) -> None:
    assert "allowColumnDefaults" in f.writer_features
    assert f.field("status")["metadata"]["CURRENT_DEFAULT"]
    assert f.spark.sql(f"SELECT count(*) FROM {f.ref} WHERE status = 'new'").collect()[0][0] > 0


def _check_constraints(f: Facts) -> None:
    assert "checkConstraints" in f.writer_features
    assert f.properties["delta.constraints.a_in_range"]


def _not_null(f: Facts) -> None:
    assert "invariants" in f.writer_features
    assert f.field("id")["nullable"] is False


def _timestamp_ntz(f: Facts) -> None:
    assert "timestampNtz" in f.reader_features and "timestampNtz" in f.writer_features
    assert any(fld["type"] == "timestamp_ntz" for fld in _fields(f.schema))


def _variant(f: Facts) -> None:
    assert "variantType" in f.reader_features
    assert any(fld["type"] == "variant" for fld in _fields(f.schema))


def _variant_shredding(f: Facts) -> None:
    assert f.reader_features & {"variantShredding", "variantShredding-preview"}
    shredded = [("typed_value" in f.parquet_schema(x["path"]).field("v").type.names) for x in f.live_files]
    assert any(shredded) and not all(shredded), shredded


def _nested(f: Facts) -> None:
    kinds = {fld["type"]["type"] for fld in _fields(f.schema) if isinstance(fld["type"], dict)}
    assert "struct" in kinds
    if "column-mapping-id" not in TABLES_BY_NAME[f.path.name].features:
        assert {"array", "map"} <= kinds


def _domain_metadata(f: Facts) -> None:
    assert "domainMetadata" in f.writer_features


def _vacuum_protocol_check(f: Facts) -> None:
    assert "vacuumProtocolCheck" in f.reader_features and "vacuumProtocolCheck" in f.writer_features


def _checkpoint_protection(f: Facts) -> None:
    assert "checkpointProtection" in f.writer_features
    assert int(f.properties["delta.requireCheckpointProtectionBeforeVersion"]) > 0


def _dropped_feature(f: Facts) -> None:
    assert f.operations()[-1] == "DROP FEATURE"
    assert "vacuumProtocolCheck" not in f.writer_features | f.reader_features


def _append_only(f: Facts) -> None:
    assert f.properties["delta.appendOnly"] == "true" and "appendOnly" in f.writer_features
    assert not f.actions("remove")


def _iceberg_compat(version: int) -> Callable[[Facts], None]:
    def check(f: Facts) -> None:
        assert f"icebergCompatV{version}" in f.writer_features
        assert f.properties[f"delta.enableIcebergCompatV{version}"] == "true"
    return check


def _uniform(f: Facts) -> None:
    assert f.properties["delta.universalFormat.enabledFormats"] == "iceberg"


def _geospatial(f: Facts) -> None:
    assert "geospatial" in f.reader_features
    assert f.field("location")["type"].startswith("geometry")


def _materialized_partitions(f: Facts) -> None:
    assert "materializePartitionColumns" in f.writer_features
    assert all("part" in cols for cols in f.data_file_columns())


def _partitioned(f: Facts) -> None:
    assert f.detail["partitionColumns"]
    by_partition: dict[str, int] = {}
    for x in f.live_files:
        key = json.dumps(x["partitionValues"], sort_keys=True)
        by_partition[key] = by_partition.get(key, 0) + 1
    assert sum(1 for n in by_partition.values() if n >= 2) >= 2, by_partition


def _unpartitioned(f: Facts) -> None:
    assert f.detail["partitionColumns"] == []


EVIDENCE: dict[str, Callable[[Facts], None]] = {
    "unpartitioned": _unpartitioned,
    "partitioned": _partitioned,
    "copy-on-write": _copy_on_write,
    "deletion-vectors-delete": _deletion_vectors("DELETE"),
    "deletion-vectors-update": _deletion_vectors("UPDATE"),
    "deletion-vectors-merge": _deletion_vectors("MERGE"),
    "deletion-vectors-replaced": _dv_replaced,
    "column-mapping-name": _column_mapping("name"),
    "column-mapping-id": _column_mapping("id"),
    "renamed-columns": _renamed,
    "dropped-columns": _dropped,
    "row-tracking": _row_tracking,
    "materialized-row-ids": _materialized_row_ids,
    "liquid-clustering": _liquid,
    "reclustered": _reclustered,
    "clustering-none": _clustering_none,
    "zcubes": _zcubes,
    "type-widening": _type_widening,
    "checkpoint-classic": _checkpoint_classic,
    "checkpoint-multi-part": _checkpoint_multi_part,
    "checkpoint-v2-parquet": _checkpoint_v2("parquet"),
    "checkpoint-v2-json": _checkpoint_v2("json"),
    "checkpoint-v2-sidecars": _sidecars,
    "in-commit-timestamps": _in_commit_timestamps,
    "change-data-feed": _change_data_feed,
    "identity-columns": _identity,
    "generated-columns": _generated,
    "column-defaults": _defaults,
    "check-constraints": _check_constraints,
    "not-null": _not_null,
    "timestamp-ntz": _timestamp_ntz,
    "variant": _variant,
    "variant-shredding": _variant_shredding,
    "nested-types": _nested,
    "domain-metadata": _domain_metadata,
    "vacuum-protocol-check": _vacuum_protocol_check,
    "checkpoint-protection": _checkpoint_protection,
    "dropped-feature": _dropped_feature,
    "append-only": _append_only,
    "iceberg-compat-v2": _iceberg_compat(2),
    "uniform-iceberg": _uniform,
    "iceberg-compat-v3": _iceberg_compat(3),
    "geospatial": _geospatial,
    "materialize-partition-columns": _materialized_partitions,
}


# ---------------------------------------------------------------------------------------------------------
# the catalogue


def test_the_catalogue_is_consistent():
    assert len(NAMES) == len(set(NAMES))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) for n in NAMES)
    assert set(EVIDENCE) == set(FEATURE_LABELS), "every label needs its evidence, and only labels have one"
    used = {label for t in TABLES for label in t.features}
    assert used == set(FEATURE_LABELS), f"labels no table has: {set(FEATURE_LABELS) - used}"
    for t in TABLES:
        assert set(t.features) <= set(FEATURE_LABELS), t.name
        assert t.clustered == ("liquid-clustering" in t.features), t.name
        assert t.row_tracking == ("row-tracking" in t.features), t.name
        assert len(t.zorder_by) == (0 if t.clustered else 2), t.name
        assert ("partitioned" in t.features) != ("unpartitioned" in t.features) or t.clustered, t.name


def test_a_rerun_reuses_the_tables(spark, rebuilt):
    root = next(iter(rebuilt.values())).parent
    stamps = {name: (path / "_delta_log").stat().st_mtime_ns for name, path in rebuilt.items()}
    assert build_all(spark, root, names=REBUILT) == rebuilt
    assert {name: (path / "_delta_log").stat().st_mtime_ns for name, path in rebuilt.items()} == stamps


def test_the_kept_tables_are_built_from_this_tables_py():
    """The kept tables (``tests/data/delta_spark_tables``) were built by this delta-spark release from this
    ``tables.py`` (``make delta-spark-tables`` builds them again), every one of them."""
    built = committed_tables.built_stamp()
    assert committed_tables.stale_reason(built) is None and built is not None
    assert built["tables"] == sorted(NAMES)
    assert all((committed_tables.COMMITTED / name / "_delta_log").is_dir() for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_table_has_work_for_every_job(spark, built, name):
    table: DeltaSparkTable = TABLES_BY_NAME[name]
    f = Facts(spark, built[name])
    assert f.version >= 5, "fewer than 6 commits"
    assert len(f.live_files) >= 8 and f.detail["numFiles"] == len(f.live_files)
    appends = [v for v in sorted(f.commits) if f.operation(v) in ("WRITE", "CREATE TABLE AS SELECT")]
    assert len(appends) >= 4, f.operations()
    removed = {r["path"] for _, r in f.actions("remove")} - f.live_paths
    if "append-only" in table.features:
        assert not removed
    else:
        assert removed, "no commit removed a file for good"
    if f.detail["partitionColumns"]:
        _partitioned(f)

    key = f.field(table.key)
    assert key["type"] == "long"
    total, distinct = f.spark.sql(f"SELECT count(*), count(DISTINCT `{table.key}`) FROM {f.ref}").collect()[0]
    assert total == distinct >= 100
    data_columns = {fld["name"] for fld in f.schema["fields"]} - set(f.detail["partitionColumns"])
    assert set(table.zorder_by) <= data_columns
    if table.row_tracking:
        ids = f.spark.sql(f"SELECT count(DISTINCT _metadata.row_id), count(_metadata.row_commit_version) "
                          f"FROM {f.ref}").collect()[0]
        assert tuple(ids) == (total, total)


@pytest.mark.parametrize("name", NAMES)
def test_table_has_the_features_it_claims(spark, built, name):
    f = Facts(spark, built[name])
    # DESCRIBE DETAIL names the same features as the protocol in the log
    assert set(f.detail["tableFeatures"]) == f.reader_features | f.writer_features
    for label in TABLES_BY_NAME[name].features:
        try:
            EVIDENCE[label](f)
        except AssertionError as exc:
            raise AssertionError(f"{name}: no evidence of {label!r} ({FEATURE_LABELS[label]}): {exc}") from exc


@pytest.mark.parametrize("name", REBUILT)
def test_building_twice_gives_the_same_rows(spark, built, rebuilt, name):
    first, second = Facts(spark, built[name]), Facts(spark, rebuilt[name])
    assert _logical(first.schema) == _logical(second.schema)
    rows = first.rows()
    assert len(rows) >= 100 and rows == second.rows()
