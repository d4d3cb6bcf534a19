"""VACUUM's valid set streamed to parquet names exactly the keys of the in-memory valid set, on
random histories (deletion vectors in files and inline, re-adds, removes inside and outside the
retention, every kind of checkpoint)."""

from __future__ import annotations

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state
from airflow_delta_maint.delta.plans.vacuum import valid_keys
from airflow_delta_maint.delta.plans.vacuum_valid_stream import write_valid_keys
from tests.delta.test_state_stream import NOW, OLD, histories, write_history


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=histories())
def test_streamed_valid_keys_equal_the_valid_set(tmp_path_factory, history):
    root = tmp_path_factory.mktemp("t")
    write_history(root, *history)
    snapshot = Snapshot.load(str(root), paths_only=True)
    for n, cutoff in enumerate((OLD - 1, NOW, NOW + 1)):
        folder = root.parent / f"{root.name}-valid-{n}"
        try:
            count = write_valid_keys(open_state(str(root)), cutoff, str(folder))
        except StreamFallback:
            assert snapshot.distrusted
            return
        keys = pq.read_table(folder).column("key").to_pylist()
        assert count == len(keys)
        assert set(keys) == valid_keys(snapshot, cutoff)
