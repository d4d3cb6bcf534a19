"""The speed guard's record: every measure it takes has a ratio in docs/benchmarks.md, and a ratio
more than the tolerance worse than recorded fails the guard."""

from __future__ import annotations

from benchmarks.bench_guard import MEASURES, compare, recorded


def test_every_measure_has_a_recorded_ratio() -> None:
    record = recorded()
    assert sorted(record) == sorted(MEASURES)
    assert all(ratio > 0 for ratio in record.values())


def test_only_a_ratio_past_the_tolerance_fails() -> None:
    baseline = {"zorder": 0.5, "optimize": 1.0}
    assert compare({"zorder": 0.57, "optimize": 0.2}, baseline, 0.15) == []
    worse = compare({"zorder": 0.58, "optimize": 1.0, "vacuum_full": 9.0}, baseline, 0.15)
    assert len(worse) == 1 and worse[0].startswith("zorder: 0.58x against 0.50x")
