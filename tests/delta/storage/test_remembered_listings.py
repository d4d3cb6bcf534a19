"""A store that remembers its listings (the lake's look at a table) answers each later listing of a prefix from
the first one, cut to the start asked for, until it writes."""

from __future__ import annotations

from airflow_delta_maint.delta.storage.store import Storage


def _keys(storage: Storage, prefix: str, start_after: str | None = None) -> list[str]:
    return [f.key for f in storage.list_from(prefix, start_after)]


def test_a_later_listing_is_served_from_the_first_and_a_write_forgets_it(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    for v in range(4):
        (log / f"{v:020d}.json").write_text("{}")
    storage = Storage(str(tmp_path)).remembering_listings()
    first = _keys(storage, "_delta_log/", f"_delta_log/{1:020d}.zzz")
    assert first == [f"_delta_log/{v:020d}.json" for v in (2, 3)]
    (log / f"{4:020d}.json").write_text("{}")  # another writer's commit after the look's listing
    # the same moment of the log: from any start, the one before the first's included (local disk lists it all)
    assert _keys(storage, "_delta_log/", f"_delta_log/{2:020d}.zzz") == [f"_delta_log/{3:020d}.json"]
    assert _keys(storage, "_delta_log/") == [f"_delta_log/{v:020d}.json" for v in range(4)]
    # another prefix is listed on its own
    assert _keys(storage, "_delta_log/_sidecars/") == []
    storage.put("_delta_log/_last_checkpoint", b"{}")  # a write: the store lists again
    assert _keys(storage, "_delta_log/", f"_delta_log/{3:020d}.zzz") == [
        f"_delta_log/{4:020d}.json", "_delta_log/_last_checkpoint"]


def test_a_store_lists_afresh_unless_asked_to_remember(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    storage = Storage(str(tmp_path))
    assert _keys(storage, "") == ["a.json"]
    (tmp_path / "b.json").write_text("{}")
    assert _keys(storage, "") == ["a.json", "b.json"]
