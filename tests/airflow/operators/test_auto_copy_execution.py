"""``execution="auto"`` weighs an OPTIMIZE by what its bins would copy: a plan past the re-encoding budget whose
inputs' footers say nearly all of it is copied row groups runs in the worker's process (no spark-submit, no
JVM), rows unchanged and read by delta-rs; a plan that would mostly re-encode still goes to Spark."""

from __future__ import annotations

import io
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.app import execution
from airflow_delta_maint.app.jobs import optimize
from airflow_delta_maint.app.rewrite.copy_estimate import PlannedRewrite, copyable
from airflow_delta_maint.delta.parquet.eligibility import codec_number
from airflow_delta_maint.delta.parquet.footer import read_footer
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.operators.maintenance import OptimizeOperator
from tests.app.jobs.copy_tables import ROW_GROUP_BYTES, live_row_groups, make_table, rows


class Submitted(Exception):
    """The run was handed to spark-submit."""


@pytest.fixture
def small_budget(monkeypatch) -> int:
    """A re-encoding budget below every test table, so only the copy estimate can keep a run on the worker."""
    monkeypatch.setattr(execution, "LOCAL_MAX_REWRITE_BYTES", 4096)
    return 4096


@pytest.fixture
def submissions(monkeypatch) -> list[str]:
    """The tables handed to spark-submit (the hook's edge: nothing is submitted)."""
    seen: list[str] = []

    def run_job(self, job, table, *args, **kwargs):
        seen.append(table)
        raise Submitted(job)

    monkeypatch.setattr(DeltaMaintHook, "run_job", run_job)
    return seen


def java_children() -> set[int]:
    """The JVMs this process started (a session of another test may be among them)."""
    return {p.pid for p in psutil.Process().children(recursive=True) if "java" in p.name().lower()}


def operator(path: Path, **kwargs) -> OptimizeOperator:
    return OptimizeOperator(task_id="o", table_uri=str(path), execution="auto", row_group_bytes=ROW_GROUP_BYTES,
                            **kwargs)


def test_a_plan_that_only_copies_runs_on_the_worker(tmp_path: Path, small_budget: int, submissions: list[str]) -> None:
    path = tmp_path / "t"
    make_table(path, big=4, small=0)
    before = rows(str(path))
    planned = optimize.local_rewrite(str(path), None, {"row_group_bytes": ROW_GROUP_BYTES})
    assert planned is not None and planned.bytes > small_budget and planned.copied_bytes() == planned.bytes
    op = operator(path)
    where, why = op.choose_execution()
    assert where == "local" and f"{planned.bytes} bytes to rewrite, {planned.bytes} of them copied" in why, why
    jvms = java_children()
    m = op.execute(context={})  # a local run has no Spark allowed: starting one would fail it
    assert submissions == [] and java_children() <= jvms
    assert m["status"] == "committed" and (m["numRemovedFiles"], m["numAddedFiles"]) == (4, 1)
    assert (m["numRowGroupsCopied"], m["numRowGroupsReencoded"]) == (4, 0)
    assert rows(str(path)) == before  # delta-rs' file list, read with pyarrow
    assert len(live_row_groups(str(path))) == 4


def test_a_plan_that_mostly_re_encodes_goes_to_spark(tmp_path: Path, small_budget: int,
                                                      submissions: list[str]) -> None:
    path = tmp_path / "t"
    make_table(path, big=1, small=12)  # one large input among small ones: under 90% copied
    before = rows(str(path))
    planned = optimize.local_rewrite(str(path), None, {"row_group_bytes": ROW_GROUP_BYTES})
    assert planned is not None and 0 < planned.copied_bytes() < execution.LOCAL_MIN_COPY_SHARE * planned.bytes
    op = operator(path)
    where, why = op.choose_execution()
    assert where == "spark" and "of them re-encoded" in why, why
    with pytest.raises(Submitted):
        op.execute(context={})
    assert submissions == [str(path)] and rows(str(path)) == before


def test_no_copy_no_estimate(tmp_path: Path, small_budget: int, submissions: list[str], monkeypatch) -> None:
    """``copy_row_groups="never"`` and a plan past the copy bound go to Spark without a footer read."""
    path = tmp_path / "t"
    make_table(path, big=4, small=0)
    where, why = operator(path, copy_row_groups="never").choose_execution()
    assert where == "spark" and f"more than {small_budget} for a run on the worker" in why
    planned = optimize.local_rewrite(str(path), None, {"row_group_bytes": ROW_GROUP_BYTES, "copy_row_groups": "never"})
    assert planned is not None and planned.candidates() == [] and planned.copied_bytes() == 0
    assert execution.rewrite_execution(planned, 0, small_budget)[0] == "spark"
    copying = optimize.local_rewrite(str(path), None, {"row_group_bytes": ROW_GROUP_BYTES})
    assert copying is not None and len(copying.candidates()) == 4
    assert copying.copied_bytes(max_footers=3) == 0  # more candidates than footers it may read: nothing counted
    assert execution.rewrite_execution(copying, 0, small_budget)[0] == "local"
    monkeypatch.setattr(execution, "LOCAL_MAX_COPY_BYTES", copying.bytes - 1)  # past the copy bound
    assert execution.rewrite_execution(copying, 0, small_budget)[0] == "spark"


def test_what_the_estimate_counts_as_copied(tmp_path: Path) -> None:
    """A footer counts when every row group reaches the threshold in the run's codec, unencrypted."""
    table = pa.table({"x": list(range(20_000))})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy", row_group_size=5_000)
    footer = read_footer(io.BytesIO(buf.getvalue()))
    sizes = [int(rg["total_compressed_size"]) for rg in footer.row_groups]
    assert copyable(footer, min(sizes), codec_number("snappy"))
    assert not copyable(footer, max(sizes) + 1, codec_number("snappy"))  # a row group under the threshold
    assert not copyable(footer, 0, codec_number("zstd"))  # another codec
    path = tmp_path / "f.parquet"
    path.write_bytes(buf.getvalue())
    options = OptimizeOptions.from_mapping({"copy_row_groups": "always"})
    storage = Storage(str(tmp_path))
    planned = PlannedRewrite(2 * path.stat().st_size, storage, options,
                             [[("f.parquet", path.stat().st_size, False), ("gone.parquet", path.stat().st_size, False),
                               ("dv.parquet", path.stat().st_size, True)]], copies=True)
    assert [f[0] for f in planned.candidates()] == ["f.parquet", "gone.parquet"]
    assert planned.copied_bytes() == path.stat().st_size  # a missing file is left to the run
    assert PlannedRewrite(10, storage, options, planned.bins, copies=False).copied_bytes() == 0
