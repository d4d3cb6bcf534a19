"""CommitWatch: a table checked again and again answers as a first check would, reading only what is new."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_maint.delta.log.commit_watch import CommitWatch
from airflow_delta_maint.delta.log.history import last_operation_version, latest_version_cheap
from airflow_delta_maint.delta.storage.store import Storage
from tests.hypothesis_profiles import examples


class CountingStorage(Storage):
    """A local Storage that counts its reads and existence checks (the edge of the unit: local disk takes no
    requests, so the store-call counter leaves it out)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.calls = 0

    def exists(self, key: str) -> bool:
        self.calls += 1
        return super().exists(key)

    def read(self, key: str) -> bytes:
        self.calls += 1
        return super().read(key)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        self.calls += 1
        return super().read_range(key, start, length)


def _commit(root: Path, version: int, operation: str) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    actions = [{"commitInfo": {"timestamp": version, "operation": operation}}]
    if version == 0:
        actions += [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                    {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                                  "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": [],
                                  "configuration": {}}}]
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def _checkpoint_hint(root: Path, version: int) -> None:
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": version, "size": 1}))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.sampled_from(["WRITE", "WRITE", "DELETE", "OPTIMIZE"]), max_size=12),
                        min_size=1, max_size=8),
       window=st.integers(min_value=1, max_value=10), hint_every=st.integers(min_value=0, max_value=4))
def test_each_check_answers_as_a_first_check_would(tmp_path_factory, batches, window, hint_every):
    """Commits arrive between checks (sometimes none, sometimes an OPTIMIZE, sometimes a newer checkpoint hint):
    every check of one watch gives the latest version and the newest OPTIMIZE in the window that a fresh check
    gives."""
    root = tmp_path_factory.mktemp("watched")
    _commit(root, 0, "CREATE TABLE")
    version, watch = 0, CommitWatch()
    for n, batch in enumerate(batches):
        for operation in batch:
            version += 1
            _commit(root, version, operation)
        if hint_every and n % hint_every == 0:
            _checkpoint_hint(root, version)
        storage = Storage(str(root))
        fresh_latest, fresh_hint = latest_version_cheap(storage)
        latest, _ = watch.latest_version(storage)
        assert latest == fresh_latest == version
        assert watch.latest_version(storage, with_checkpoint=True) == (fresh_latest, fresh_hint)
        assert watch.last_operation(storage, ["OPTIMIZE"], latest, window) == \
            last_operation_version(storage, ["OPTIMIZE"], latest, max_commits=window)


def test_a_check_with_nothing_new_costs_two_existence_checks(tmp_path):
    for v in range(30):
        _commit(tmp_path, v, "OPTIMIZE" if v == 3 else "WRITE")
    watch = CommitWatch()
    first = CountingStorage(str(tmp_path))
    latest, _ = watch.latest_version(first)
    assert watch.last_operation(first, ["OPTIMIZE"], latest, 100) == 3
    assert first.calls > 20          # the first check galloped and read 27 commitInfos back to the OPTIMIZE

    again = CountingStorage(str(tmp_path))
    latest, _ = watch.latest_version(again)
    assert (latest, watch.last_operation(again, ["OPTIMIZE"], latest, 100)) == (29, 3)
    assert again.calls == 2          # the latest seen still exists, the next does not

    _commit(tmp_path, 30, "WRITE")
    newer = CountingStorage(str(tmp_path))
    latest, _ = watch.latest_version(newer)
    assert (latest, watch.last_operation(newer, ["OPTIMIZE"], latest, 100)) == (30, 3)
    assert newer.calls <= 6          # gallop from 29, and one commitInfo read


def test_a_replaced_table_or_another_root_starts_afresh(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for v in range(6):
        _commit(a, v, "WRITE")
    for v in range(3):
        _commit(b, v, "OPTIMIZE" if v == 1 else "WRITE")
    watch = CommitWatch()
    assert watch.latest_version(Storage(str(a)))[0] == 5
    assert watch.last_operation(Storage(str(a)), ["OPTIMIZE"], 5, 10) is None
    # the same watch asked about another table (a table by name whose location moved)
    assert watch.latest_version(Storage(str(b)))[0] == 2
    assert watch.last_operation(Storage(str(b)), ["OPTIMIZE"], 2, 10) == 1
    # the table deleted and written again, shorter: the remembered latest is gone
    for f in (b / "_delta_log").iterdir():
        f.unlink()
    _commit(b, 0, "WRITE")
    assert watch.latest_version(Storage(str(b)))[0] == 0
    assert watch.last_operation(Storage(str(b)), ["OPTIMIZE"], 0, 10) is None
