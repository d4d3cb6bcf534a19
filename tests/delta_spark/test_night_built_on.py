"""delta-spark judges a night whose later jobs started from the state kept before the earlier ones committed: on
a table delta-spark wrote with deletion vectors, OPTIMIZE commits, then compute-stats, VACUUM and a checkpoint each
read only the commits after the kept state, and the checkpoint written from it is what delta-spark loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_delta_maint.app.fleet import FleetSpec, run_fleet
from airflow_delta_maint.delta.log.snapshot_cache import SnapshotCache, keeping_snapshots
from tests.delta_spark.judge import assert_keeps_writing, assert_log_files_load, assert_same_table, read_state

pytestmark = pytest.mark.delta_spark


def test_a_checkpoint_written_from_a_state_built_on_the_kept_one_is_the_table_delta_spark_reads(spark, tmp_path: Path):
    path = str(tmp_path / "table")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, p STRING) USING delta PARTITIONED BY (p) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '1000')")
    for k in range(8):  # small files in two partitions
        spark.range(k * 50, (k + 1) * 50).selectExpr("id", "IF(id % 2 = 0, 'a', 'b') AS p") \
            .write.format("delta").mode("append").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")  # deletion vectors on most files
    before = read_state(spark, path)

    spec = FleetSpec.from_json({"tables": [{"table": path, "jobs": [
        {"job": "optimize"}, {"job": "compute-stats"}, {"job": "vacuum"}, {"job": "checkpoint"}]}]})
    cache = SnapshotCache()
    with keeping_snapshots(cache):
        [entry] = run_fleet(spec, spark_allowed=False)
    jobs = {j["operation"]: j for j in entry["jobs"]}
    assert jobs["optimize"]["status"] == "committed" and jobs["checkpoint"]["status"] == "committed", jobs
    # OPTIMIZE read the log whole and committed; compute-stats' read was built on that state and the new commit
    # (it committed nothing), and VACUUM and the checkpoint were given the state it built
    assert (cache.misses, cache.extended, cache.hits) == (2, 1, 2)

    after = read_state(spark, path)
    assert after.version > before.version
    assert_same_table(before, after)
    assert_log_files_load(spark, path, after)  # the checkpoint loads without the commits before it
    assert_keeps_writing(spark, path, before.version, kept_versions=[before.version], every_statement=False)
