"""The OPTIMIZE planner: candidates, bin-packing, partition predicates, Z-order checks (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.optimize import GIB, file_size_settings, plan_optimize, size_percentiles

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "x", "type": "double", "nullable": True, "metadata": {}},
    {"name": "year", "type": "integer", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}},
]}


def make_log(path: Path, files: list[tuple[dict, int]], partition_columns: tuple[str, ...] = ("year", "p"),
             configuration: dict | None = None, dvs: dict[int, tuple[int, int]] | None = None) -> Snapshot:
    """A table whose log lists ``files`` as (partition values, size); no data files are needed to plan."""
    (path / "_delta_log").mkdir(parents=True)
    actions = [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                      "writerFeatures": ["deletionVectors"]}},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(SCHEMA), "partitionColumns": list(partition_columns),
                      "configuration": configuration or {}, "createdTime": 0}},
    ]
    for i, (pv, size) in enumerate(files):
        add = {"path": f"f{i:04d}.parquet", "partitionValues": pv, "size": size, "modificationTime": 0,
               "dataChange": True}
        if dvs and i in dvs:
            records, deleted = dvs[i]
            add["stats"] = json.dumps({"numRecords": records})
            add["deletionVector"] = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                                     "sizeInBytes": 40, "cardinality": deleted}
        actions.append({"add": add})
    (path / "_delta_log" / "00000000000000000000.json").write_text("\n".join(json.dumps(a) for a in actions))
    return Snapshot.load(str(path))


def pv(year: int | None, p: str | None) -> dict:
    return {"year": None if year is None else str(year), "p": p}


def test_bin_packing_per_partition(tmp_path: Path) -> None:
    files = [(pv(2024, "a"), s) for s in (10, 20, 30, 40, 500)] + [(pv(2024, "b"), 15)] + \
            [(pv(2025, "a"), s) for s in (60, 70)]
    plan = plan_optimize(make_log(tmp_path, files), min_file_size=100, target_file_size=65)
    bins = [(b.partition_values["year"], b.partition_values["p"], [f["size"] for f in b.files]) for b in plan.bins]
    # sorted by size, packed up to 65 bytes; the 500-byte file is not small; single-file bins dropped
    assert bins == [("2024", "a", [10, 20, 30])]
    plan = plan_optimize(make_log(tmp_path / "2", files), min_file_size=100, target_file_size=200)
    bins = [(b.partition_values["year"], [f["size"] for f in b.files]) for b in plan.bins]
    assert bins == [("2024", [10, 20, 30, 40]), ("2025", [60, 70])]
    assert plan.num_candidate_files == 7 and plan.num_table_files == 8
    assert plan.input_files == 6 and plan.input_bytes == 230 and plan.predicted_output_files() == 2
    summary = plan.summary()
    assert summary["num_partitions"] == 2 and summary["num_bins"] == 2
    assert summary["partitions"]["p=a/year=2024"] == {"bins": 1, "files": 4, "bytes": 100}


def test_nothing_to_do(tmp_path: Path) -> None:
    plan = plan_optimize(make_log(tmp_path, [(pv(1, "a"), 10), (pv(2, "a"), 10)]), min_file_size=100)
    assert plan.is_empty and plan.num_candidate_files == 2
    assert plan_optimize(make_log(tmp_path / "e", [])).is_empty


def test_deletion_vectors(tmp_path: Path) -> None:
    files = [(pv(1, "a"), 1000), (pv(1, "b"), 1000), (pv(1, "c"), 10)]
    # a large file is rewritten alone when its DV deletes more than dv_ratio of its rows
    snap = make_log(tmp_path, files, dvs={0: (100, 50), 1: (100, 1), 2: (100, 1)})
    plan = plan_optimize(snap, min_file_size=100, target_file_size=10_000)
    assert [b.files[0]["path"] for b in plan.bins] == ["f0000.parquet", "f0002.parquet"]
    assert sum(b.num_dvs for b in plan.bins) == 2
    plan = plan_optimize(snap, min_file_size=100, target_file_size=10_000, dv_ratio=0.0)
    assert len(plan.bins) == 3
    with pytest.raises(InvalidArgumentError, match="dv_ratio"):
        plan_optimize(snap, dv_ratio=-0.1)


def test_partition_predicates_are_typed(tmp_path: Path) -> None:
    files = [(pv(y, p), 10) for y in (9, 10, 2024) for p in ("a", "b")] * 2 + [(pv(None, "a"), 10)] * 2
    snap = make_log(tmp_path, files)

    def parts(predicate: str) -> list[tuple]:
        plan = plan_optimize(snap, predicate=predicate)
        return sorted((b.partition_values["year"], b.partition_values["p"]) for b in plan.bins)

    assert parts("year > 9") == [("10", "a"), ("10", "b"), ("2024", "a"), ("2024", "b")]  # numeric, not text
    assert parts("YEAR = 10 AND p = 'b'") == [("10", "b")]
    assert parts("year IS NULL") == [(None, "a")]
    assert parts("year != 9") == [("10", "a"), ("10", "b"), ("2024", "a"), ("2024", "b")]  # NULL is not != 9
    assert parts("NOT (year IN (9, 10))") == [("2024", "a"), ("2024", "b")]
    assert parts("year IN (9, NULL) OR p = 'zzz'") == [("9", "a"), ("9", "b")]
    with pytest.raises(InvalidArgumentError, match="invalid literal 'abc' for column year"):
        plan_optimize(snap, predicate="year = 'abc'")
    with pytest.raises(InvalidArgumentError, match="not a partition column: x"):
        plan_optimize(snap, predicate="x = 1")


def test_zorder_groups_every_file_of_a_partition(tmp_path: Path) -> None:
    files = [(pv(1, "a"), s) for s in (10, 5000, 20)] + [(pv(2, "a"), 7)]
    snap = make_log(tmp_path, files)
    plan = plan_optimize(snap, zorder_by=["x", "ID"], target_file_size=2000)
    assert [len(b.files) for b in plan.bins] == [3, 1]
    assert plan.zorder_by == ["x", "id"] and plan.predicted_output_files() == 3 + 1
    for columns, message in ((["year"], "partition column"), (["nope"], "nope"), (["x", "X"], "repeat")):
        with pytest.raises(InvalidArgumentError, match=message):
            plan_optimize(snap, zorder_by=columns)


def test_file_size_settings(tmp_path: Path) -> None:
    snap = make_log(tmp_path, [], configuration={"delta.targetFileSize": "1048576"})
    assert file_size_settings(snap, None, None) == (1 << 20, 1 << 20)
    assert file_size_settings(snap, 10, None) == (10, 1 << 20)
    assert file_size_settings(snap, None, 100) == (100, 100)
    assert file_size_settings(make_log(tmp_path / "d", []), None, None) == (GIB, GIB)
    for bad in ((0, None), (None, -1)):
        with pytest.raises(InvalidArgumentError, match="positive"):
            file_size_settings(snap, *bad)


def test_size_percentiles() -> None:
    assert size_percentiles([]) == {}
    assert size_percentiles([5]) == dict.fromkeys(
        ["minFileSize", "p25FileSize", "p50FileSize", "p75FileSize", "maxFileSize"], 5)
    m = size_percentiles([4, 1, 3, 2, 100])
    assert (m["minFileSize"], m["p50FileSize"], m["maxFileSize"]) == (1, 3, 100)
    assert all(isinstance(v, int) for v in m.values())


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 300)), max_size=40),
       st.integers(1, 400), st.integers(1, 400))
def test_bin_packing_properties(tmp_path_factory, files, min_size, max_size) -> None:
    path = tmp_path_factory.mktemp("plan")
    snap = make_log(path, [({"year": "1", "p": p}, s) for p, s in files])
    plan = plan_optimize(snap, min_file_size=min_size, target_file_size=max_size)
    seen = [f["path"] for b in plan.bins for f in b.files]
    assert len(seen) == len(set(seen))  # no file in two bins
    for b in plan.bins:
        assert len(b.files) >= 2 and len({f["partitionValues"]["p"] for f in b.files}) == 1
        assert all(f["size"] < min_size for f in b.files)
        assert b.input_bytes == sum(f["size"] for f in b.files) and b.input_bytes <= max(max_size, max(
            f["size"] for f in b.files))
    # every partition with two small files that fit together gets a bin
    for p in "abc":
        small = sorted(s for q, s in files if q == p and s < min_size)
        if len(small) >= 2 and small[0] + small[1] <= max_size:
            assert any(b.partition_values["p"] == p for b in plan.bins)
