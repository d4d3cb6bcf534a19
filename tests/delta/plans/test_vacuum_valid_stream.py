"""VACUUM's valid set streamed to parquet names exactly the keys of the in-memory valid set, on
random histories (deletion vectors in files and inline, re-adds, removes inside and outside the
retention, every kind of checkpoint)."""

from __future__ import annotations

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state
from airflow_delta_maint.delta.plans.vacuum_valid import valid_keys
from airflow_delta_maint.delta.plans.vacuum_valid_stream import write_valid_keys
from tests.delta.log.test_state_stream import NOW, OLD, histories, write_history


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
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


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=histories())
def test_streamed_kept_keys_equal_the_kept_set(tmp_path_factory, history):
    """Each version's live keys streamed (--keep-versions on a large table) are the in-memory set of
    ``kept_version_keys``; a version the stream cannot vouch for is loaded whole, with what it
    streamed discarded."""
    from airflow_delta_maint.delta.plans.vacuum_keep import kept_version_keys, readable_kept_versions, write_kept_keys
    from airflow_delta_maint.delta.storage.store import Storage

    root = tmp_path_factory.mktemp("t")
    write_history(root, *history)
    storage = Storage(str(root))
    latest = Snapshot.load(storage, paths_only=True).version
    for version in range(latest + 1):
        folder = root.parent / f"{root.name}-kept-{version}"
        written = write_kept_keys(storage, readable_kept_versions(storage, [version], latest), str(folder))
        keys = pq.read_table(folder).column("key").to_pylist()
        assert written.written == len(keys)
        assert set(keys) == kept_version_keys(storage, [version], latest), version
    everything = root.parent / f"{root.name}-kept-all"
    write_kept_keys(storage, readable_kept_versions(storage, range(latest + 1), latest), str(everything))
    assert set(pq.read_table(everything).column("key").to_pylist()) == \
        kept_version_keys(storage, range(latest + 1), latest)
