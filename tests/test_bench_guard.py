"""The speed guard's record: every measure it takes has a ratio in docs/benchmarks.md, and a ratio
more than the tolerance worse than recorded fails the guard."""

from __future__ import annotations

from benchmarks.bench_guard import MEASURES, best_ratios, compare, looks_worse, recorded


def test_every_measure_has_a_recorded_ratio() -> None:
    record = recorded()
    assert sorted(record) == sorted(MEASURES)
    assert all(ratio > 0 for ratio in record.values())


def test_only_a_ratio_past_the_tolerance_fails() -> None:
    baseline = {"zorder": 0.5, "optimize": 1.0}
    assert compare({"zorder": 0.57, "optimize": 0.2}, baseline, 0.15) == []
    worse = compare({"zorder": 0.58, "optimize": 1.0, "vacuum_full": 9.0}, baseline, 0.15)
    assert len(worse) == 1 and worse[0].startswith("zorder: 0.58x against 0.50x")


def test_best_runs_and_what_is_measured_again() -> None:
    results = {"optimize": [(2.6, 2.3), (1.9, 2.8)], "vacuum_full_with_start": [(3.8, 3.3)]}
    assert best_ratios(results) == {"optimize": (1.9, 2.3), "vacuum_full_with_start": (3.8, 3.3)}
    baseline = {"optimize": 0.8, "vacuum_full_with_start": 0.9, "zorder": 0.4}
    # optimize's best, 1.9 / 2.3 = 0.83, is within 15% of 0.80; VACUUM's whole task is not: its job runs again
    assert looks_worse(results, baseline, 0.15) == {"vacuum_full_with_start": "vacuum_full"}
    results["vacuum_full_with_start"].append((2.9, 3.2))
    assert looks_worse(results, baseline, 0.15) == {}
