"""delta-spark judges our OPTIMIZE of a table with VARIANT columns written unshredded, then shredded in two
shapes: the new files' variant groups carry the parquet VARIANT annotation, shredded inputs stay shredded,
delta-spark reads every variant back as it was (``to_json``, ``variant_get``), the statistics are those
delta-spark keeps (a null count, no bounds) and compute-stats gives the same; pyarrow reads the same
values, and delta-rs refuses the shredding feature by name."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql.variant_utils import VariantUtils

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.parquet.footer import read_footer
from airflow_delta_maint.delta.parquet.variant_groups import variant_paths
from airflow_delta_maint.delta.protocol.stats import parquet_file_stats

pytestmark = pytest.mark.delta_spark

ROWS = 20
OBJECT = "concat('{\"n\": ', CAST(id AS STRING), ', \"s\": \"v', CAST(id % 4 AS STRING), '\", \"o\": {\"k\": ', " \
         "CAST(id % 3 AS STRING), '}}')"
OTHER = "concat('{\"k\": [1, 2.5, \"x\"], \"t\": ', CAST(id AS STRING), '}')"


def write_table(spark, path: Path) -> None:
    t = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {t} (id BIGINT, a INT, v VARIANT) USING delta")

    def append(lo: int, json_text: str) -> None:
        spark.sql(f"INSERT INTO {t} SELECT /*+ REPARTITION(1) */ id, CAST(id % 7 AS INT), "
                  f"CASE WHEN id % 11 = 5 THEN NULL WHEN id % 13 = 6 THEN parse_json('null') "
                  f"ELSE parse_json({json_text}) END FROM range({lo}, {lo + ROWS})")

    append(0, OBJECT)
    append(ROWS, OBJECT)
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableVariantShredding' = 'true')")
    append(2 * ROWS, OBJECT)   # shredded: typed_value {n, o, s}
    append(3 * ROWS, OBJECT)
    append(4 * ROWS, OTHER)    # shredded in another shape: typed_value {k, t}


def variants(spark, path: Path) -> dict[int, tuple]:
    df = spark.sql(f"SELECT id, to_json(v) AS j, variant_get(v, '$.n', 'int') AS n, "
                   f"variant_get(v, '$.k[1]', 'double') AS k FROM delta.`{path}`")
    return {r.id: (r.j, r.n, r.k) for r in df.collect()}


def data_files(path: Path) -> list[str]:
    return [str(path / a["path"]) for a in Snapshot.load(str(path)).add_actions()]


def shredded(file: str) -> bool:
    return "typed_value" in pq.read_schema(file).field("v").type.__str__()


def optimize(path: Path, *args: str) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        code, m = cli.run(["optimize", str(path), "--json", *args])
    assert code == 0 and m["status"] == "committed", m
    return m


def pyarrow_json(files: list[str]) -> dict[int, str | None]:
    out = {}
    for f in files:
        for row in pq.read_table(f, columns=["id", "v"]).to_pylist():
            v = row["v"]
            out[row["id"]] = None if v is None else (v["value"], v["metadata"], v.get("typed_value"))
    return out


def assert_stats_as_delta_spark_keeps_them(path: Path, expected_nulls: int) -> None:
    nulls = 0
    for add in Snapshot.load(str(path)).add_actions():
        stats = json.loads(add["stats"])
        assert "v" not in stats.get("minValues", {}) and "v" not in stats.get("maxValues", {}), stats
        nulls += stats["nullCount"]["v"]
    assert nulls == expected_nulls


@pytest.mark.parametrize("layout", [[], ["--zorder-by", "a,id"]], ids=["bin-packing", "zorder"])
def test_optimize_keeps_variants_shredded_annotated_and_equal(spark, tmp_path: Path, layout: list[str]) -> None:
    path = tmp_path / "t"
    write_table(spark, path)
    inputs = data_files(path)
    assert sum(shredded(f) for f in inputs) == 3 and all(variant_paths(read_footer(f).schema) for f in inputs)
    snapshot = Snapshot.load(str(path))
    for add in snapshot.add_actions():  # compute-stats gives delta-spark's own statistics of its files
        assert parquet_file_stats(str(path / add["path"]), snapshot.metadata) == json.loads(add["stats"])
    before = variants(spark, path)
    null_count = spark.sql(f"SELECT count(*) AS c FROM delta.`{path}` WHERE v IS NULL").collect()[0].c
    assert len(before) == 5 * ROWS and null_count > 0

    m = optimize(path, *layout)
    assert m["numRemovedFiles"] == 5
    outputs = data_files(path)
    for f in outputs:
        assert variant_paths(read_footer(f).schema) == [("v",)]
        text = str(pq.ParquetFile(f).schema)
        assert "group field_id=-1 v (Variant(1))" in text and "required binary field_id=-1 metadata" in text
        assert shredded(f)  # most inputs were shredded in the {n, o, s} shape: the output keeps it
    assert variants(spark, path) == before
    assert dict(spark.sql(f"DESCRIBE delta.`{path}`").select("col_name", "data_type").collect())["v"] == "variant"
    assert_stats_as_delta_spark_keeps_them(path, null_count)

    # pyarrow reads the same variants (rebuilt rows have no typed_value; shredded ones decode with it)
    by_id = pyarrow_json(outputs)
    for i, (j, _, _) in before.items():
        got = by_id[i]
        if got is None:
            assert j is None
        elif got[2] is None:
            assert json.loads(VariantUtils.to_json(got[0], got[1])) == json.loads(j)

    # compute-stats' statistics of a file (from its footer) are those the rewrite wrote; delta-spark keeps writing
    snapshot = Snapshot.load(str(path))
    for add in snapshot.add_actions():
        assert parquet_file_stats(str(path / add["path"]), snapshot.metadata) == json.loads(add["stats"])
    spark.sql(f"INSERT INTO delta.`{path}` SELECT 1000, 1, parse_json('{{\"n\": 1000}}')")
    assert variants(spark, path)[1000][1] == 1000


def test_delta_rs_refuses_the_shredding_feature_by_name(spark, tmp_path: Path) -> None:
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaProtocolError

    path = tmp_path / "t"
    write_table(spark, path)
    optimize(path)
    with pytest.raises(DeltaProtocolError, match="variantShredding"):
        DeltaTable(str(path)).to_pyarrow_dataset()
