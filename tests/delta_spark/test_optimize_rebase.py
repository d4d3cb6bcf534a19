"""delta-spark judges OPTIMIZE rebased onto its own concurrent DELETE, UPDATE and MERGE.

Each case: delta-spark writes a table with deletion vectors (partitioned or not, liquid clustered,
with row tracking, with column mapping) in many small appends; our OPTIMIZE plans and rewrites it;
between our rewrite and our commit (``optimize_commit.BEFORE_COMMIT``) delta-spark runs DML
statements that replace the deletion vectors of our inputs; delta-spark reads the table then. Our
OPTIMIZE must land, carrying the new deletions onto its outputs, and delta-spark must read after
it exactly what it read before it: the rows and, on row-tracking tables, every row's
``_metadata.row_id`` and ``_metadata.row_commit_version``. delta-spark then keeps writing the
table and reads what it should.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.rewrite import commit as optimize_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot

DELETE = "DELETE FROM {t} WHERE id % 7 = 0"
UPDATE = "UPDATE {t} SET v = v + 1000 WHERE id % 11 = 3"
MERGE = ("MERGE INTO {t} AS t USING (SELECT id, (id * 31) % 997 AS v FROM range(0, 400, 13)) AS s ON t.id = s.id "
         "WHEN MATCHED THEN UPDATE SET v = s.v + 5000 WHEN NOT MATCHED THEN INSERT (id, p, v) VALUES "
         "(s.id + 10000, 'p1', s.v)")
ROWS = 360


@dataclass(frozen=True)
class Case:
    layout: str  # binpack | zorder | liquid | even
    partitioned: bool
    row_tracking: bool
    column_mapping: bool
    statements: tuple[str, ...]

    @property
    def args(self) -> list[str]:
        # Z-order and clustering record the row maps a rebase needs on the busy path or with
        # --bins-per-commit; the table here is quiet until the DML the test runs mid-commit
        return {"binpack": [], "zorder": ["--zorder-by", "v", "--target-file-size", "2000", "--bins-per-commit", "0"],
                "liquid": ["--target-file-size", "2000", "--bins-per-commit", "0"],
                "even": ["--target-files", "3"]}[self.layout]


CASES = {
    "binpack-partitioned": Case("binpack", True, False, False, (DELETE, UPDATE)),
    "binpack-partitioned-row-tracking": Case("binpack", True, True, False, (UPDATE, MERGE)),
    "binpack-row-tracking-column-mapping": Case("binpack", False, True, True, (DELETE, MERGE)),
    "zorder-partitioned": Case("zorder", True, False, False, (MERGE, DELETE)),
    "zorder-row-tracking-column-mapping": Case("zorder", False, True, True, (DELETE, UPDATE)),
    "liquid-row-tracking": Case("liquid", False, True, False, (DELETE, MERGE)),
    "liquid-column-mapping": Case("liquid", False, False, True, (UPDATE, DELETE)),
    "even-partitioned-row-tracking": Case("even", True, True, False, (DELETE, UPDATE)),
}


def create(spark, path: Path, case: Case) -> None:
    props = {"delta.enableDeletionVectors": "true"}
    if case.row_tracking:
        props["delta.enableRowTracking"] = "true"
    if case.column_mapping:
        props.update({"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2",
                      "delta.minWriterVersion": "5"})
    layout = "PARTITIONED BY (p)" if case.partitioned else "CLUSTER BY (v)" if case.layout == "liquid" else ""
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, p STRING, v BIGINT) USING delta {layout} "
              f"TBLPROPERTIES ({', '.join(f'{k!r} = {v!r}' for k, v in props.items())})")
    step = ROWS // 3
    for k in range(3):  # three appends of two files per partition: many small files
        (spark.range(k * step, (k + 1) * step)
         .selectExpr("id", "concat('p', id % 3) AS p", "(id * 7919) % 1000 AS v")
         .repartition(2).write.format("delta").mode("append").save(str(path)))


def read(spark, path: Path, row_tracking: bool) -> list[tuple]:
    cols = ["id", "p", "v"] + (["_metadata.row_id", "_metadata.row_commit_version"] if row_tracking else [])
    return sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).select(*cols).collect())


def optimize(path: Path, *args: str) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        code, m = cli.run(["optimize", str(path), "--json", *args])
    assert code == 0, m.get("error")
    return m


@pytest.mark.parametrize("name", list(CASES))
def test_optimize_rebased_onto_delta_spark_dml(spark, tmp_path: Path, name: str) -> None:
    case = CASES[name]
    path = tmp_path / "t"
    create(spark, path, case)
    table = f"delta.`{path}`"
    expected: list[list[tuple]] = []

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        if attempt.attempt == 1 and not expected:
            for statement in case.statements:
                spark.sql(statement.format(t=table))
            expected.append(read(spark, path, case.row_tracking))

    optimize_commit.BEFORE_COMMIT.append(writer)
    try:
        m = optimize(path, *case.args)
    finally:
        optimize_commit.BEFORE_COMMIT.remove(writer)
    assert m["status"] == "committed" and m["numBinsDroppedByConflicts"] == 0, m
    assert m["numBinsRebased"] >= 1 and m["numDeletionVectorsCarried"] >= 1, m
    if case.layout in ("zorder", "liquid", "even"):
        assert m["numAddedFiles"] > m["numBins"], m  # an input's rows went into several outputs
    assert read(spark, path, case.row_tracking) == expected[0]
    carried = [a for a in Snapshot.load(str(path)).add_actions() if a.get("deletionVector")]
    assert carried and all(json.loads(a["stats"])["tightBounds"] is False for a in carried)

    # delta-spark keeps writing the table and reads what it should
    before = read(spark, path, case.row_tracking)
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 1")
    after = read(spark, path, case.row_tracking)
    assert after == [r for r in before if r[0] % 5 != 1]


def test_a_bin_whose_inputs_delta_spark_optimized_meanwhile_is_dropped(spark, tmp_path: Path) -> None:
    case = Case("binpack", True, True, False, ())
    path = tmp_path / "t"
    create(spark, path, case)
    expected: list[list[tuple]] = []

    def other_optimize(attempt: optimize_commit.CommitAttempt) -> None:
        if attempt.attempt == 1 and not expected:
            spark.sql(f"OPTIMIZE delta.`{path}` WHERE p = 'p1'")
            spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")
            expected.append(read(spark, path, True))

    optimize_commit.BEFORE_COMMIT.append(other_optimize)
    try:
        m = optimize(path)
    finally:
        optimize_commit.BEFORE_COMMIT.remove(other_optimize)
    assert m["status"] == "committed" and m["numBinsDroppedByConflicts"] == 1 and m["numBinsRebased"] == 2, m
    [dropped] = m["droppedBins"]
    assert dropped["partition"] == "p=p1" and "removed by a concurrent commit" in dropped["reason"]
    assert "OPTIMIZE" in dropped["reason"]
    assert read(spark, path, True) == expected[0]
