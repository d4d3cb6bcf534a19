"""Dataset naming, asset event extras and lazy OpenLineage imports of the maintenance operators."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from airflow_delta_maint.operators.lineage import (
    asset_event_extra,
    dataset_name,
    inject_parent_job_info,
    operator_lineage,
    table_uri_matches,
)


@pytest.mark.parametrize("uri, expected", [
    ("/data/events", ("file", "/data/events")),
    ("/data/events/", ("file", "/data/events")),
    ("file:///data/events", ("file", "/data/events")),
    ("s3://lake/warehouse/events", ("s3://lake", "warehouse/events")),
    ("s3a://lake/events", ("s3a://lake", "events")),
    ("gs://lake/events", ("gs://lake", "events")),
    ("abfss://data@acct.dfs.core.windows.net/t/events", ("abfss://data@acct.dfs.core.windows.net", "t/events")),
])
def test_dataset_name(uri, expected):
    assert dataset_name(uri) == expected


def test_relative_path_and_matching(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dataset_name("t") == ("file", str(tmp_path / "t"))
    assert table_uri_matches(f"file://{tmp_path}/t", "t")
    assert not table_uri_matches("s3://lake/t", "s3://lake/u")


def test_asset_event_extra_is_json():
    extra = asset_event_extra({"status": "committed", "numAddedFiles": 2,
                               "started_at": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)})
    assert extra == {"status": "committed", "numAddedFiles": 2, "started_at": "2024-01-01 00:00:00+00:00"}


def test_operator_lineage_facets():
    start = operator_lineage("s3://lake/events")
    assert [(d.namespace, d.name) for d in start.inputs + start.outputs] == [("s3://lake", "events")] * 2
    assert start.run_facets == {}
    done = operator_lineage("s3://lake/events", {"status": "committed", "numAddedFiles": 3, "numAddedBytes": 900})
    stats = done.outputs[0].outputFacets["outputStatistics"]
    assert (stats.fileCount, stats.size) == (3, 900)
    assert done.run_facets["deltaMaintenance"].metrics["numAddedFiles"] == 3
    vacuum = operator_lineage("/t", {"status": "committed", "numFilesDeleted": 4})
    assert not vacuum.outputs[0].outputFacets  # nothing written, no statistics


def test_parent_job_info_only_when_enabled(monkeypatch):
    monkeypatch.delenv("AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO", raising=False)
    assert inject_parent_job_info({"spark.x": "1"}, context={}) == {"spark.x": "1"}  # default off


BLOCK_OPENLINEAGE = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        metadata = ('airflow.providers.openlineage', 'airflow.providers.openlineage.get_provider_info')
        if name.split('.')[0] == 'openlineage' or (name.startswith('airflow.providers.openlineage.')
                                                    and name not in metadata):
            raise ImportError(f'{name} is blocked')
sys.meta_path.insert(0, Block())
"""


def test_operators_work_without_openlineage(small_table):
    """With the OpenLineage packages unimportable, the operators import and run their worker-side parts."""
    code = BLOCK_OPENLINEAGE + (
        "import os; os.environ['AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO'] = 'True'\n"
        "from airflow_delta_maint.operators.maintenance import OptimizeOperator\n"
        "from airflow_delta_maint.operators.lineage import inject_parent_job_info\n"
        "import airflow_delta_maint.triggers.table_commits\n"
        "assert inject_parent_job_info({'spark.x': '1'}, context={}) == {'spark.x': '1'}\n"
        f"op = OptimizeOperator(task_id='o', table_uri={str(small_table)!r}, min_file_size=1)\n"
        "assert op.check_nothing_to_do() is not None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
