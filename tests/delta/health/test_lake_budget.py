"""The night's plan under a budget: greedy by gain per CPU-second, limits, starvation, reasons for every wait."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.health.estimates import Cost, Estimate, Gain
from airflow_delta_maint.delta.health.lake_budget import (GAIN_WEIGHTS, JOB_STARVATION_NIGHTS, NOTHING_LEFT,
                                                         STARVATION_NIGHTS, Budget, Candidate, gain_value, gain_weights,
                                                         plan_lake)


def candidate(table: str, files_removed: int, cpu_s: float, job: str = "optimize", nights: int = 0,
              rewritten: int = 0, table_nights: int | None = None) -> Candidate:
    # housekeeping (no file removed) frees a MiB: a gain, if the least
    estimate = Estimate(job, Gain(files_removed=files_removed, bytes_freed=0 if files_removed else 1 << 20),
                        Cost(bytes_read=rewritten, bytes_written=rewritten, cpu_s=cpu_s))
    return Candidate(table, job, estimate, nights_waiting=nights,
                     table_nights_waiting=nights if table_nights is None else table_nights)


def test_the_best_gain_per_cpu_second_goes_first_and_the_rest_waits_with_its_reason():
    plan = plan_lake([candidate("a", 10, 10.0), candidate("b", 50, 10.0), candidate("c", 30, 30.0)],
                     Budget(cpu_s=25))
    assert [p.candidate.table for p in plan.chosen] == ["b", "a"]
    (waiting,) = plan.deferred
    assert waiting.candidate.table == "c"
    assert waiting.reason == "deferred: over the budget's cpu_s: 20.00 of 25 predicted CPU-s chosen, this run needs 30.00"
    assert plan.used() == {"cpu_s": 20.0, "bytes_rewritten": 0, "tables": 2, "runs": 2}


def test_a_smaller_run_after_one_that_does_not_fit_still_goes():
    plan = plan_lake([candidate("big", 100, 20.0), candidate("huge", 150, 40.0), candidate("small", 4, 2.0)],
                     Budget(cpu_s=25))
    assert sorted(p.candidate.table for p in plan.chosen) == ["big", "small"]


def test_each_limit_holds():
    runs = [candidate(t, 10 * (i + 1), 1.0, rewritten=100) for i, t in enumerate("abcd")]
    assert len(plan_lake(runs, Budget(max_tables=2)).chosen) == 2
    assert len(plan_lake(runs, Budget(bytes_rewritten=250)).chosen) == 2
    assert len(plan_lake(runs, Budget(deadline_s=1.5, cores=2)).chosen) == 3
    assert len(plan_lake(runs, Budget()).chosen) == 4
    two_jobs = [candidate("a", 10, 1.0), candidate("a", 5, 1.0, job="compute-stats"), candidate("b", 1, 1.0)]
    assert {(p.candidate.table, p.candidate.job) for p in plan_lake(two_jobs, Budget(max_tables=1)).chosen} == {
        ("a", "optimize"), ("a", "compute-stats")}


def test_a_starving_run_goes_first_even_when_bigger_than_the_budget():
    starving = candidate("old", 1, 100.0, nights=STARVATION_NIGHTS)
    plan = plan_lake([candidate("new", 1000, 1.0), starving], Budget(cpu_s=10))
    assert [p.candidate.table for p in plan.chosen] == ["old"]
    assert "taken as the night's first run" in plan.chosen[0].reason
    assert plan.deferred[0].candidate.table == "new"
    waited = plan_lake([candidate("new", 1000, 1.0), candidate("old", 1, 5.0, nights=STARVATION_NIGHTS)],
                       Budget(cpu_s=10))
    assert [p.candidate.table for p in waited.chosen] == ["old", "new"]


def test_a_starving_table_sends_its_best_run_first_and_its_others_by_their_ratio():
    old = [candidate("old", 1, 1.0, nights=STARVATION_NIGHTS),
           candidate("old", 0, 1.0, job="vacuum", nights=STARVATION_NIGHTS)]
    plan = plan_lake([candidate("new", 50, 1.0), candidate("other", 20, 1.0), *old], Budget(cpu_s=3))
    assert [(p.candidate.table, p.candidate.job) for p in plan.chosen] == [
        ("old", "optimize"), ("new", "optimize"), ("other", "optimize")]
    assert plan.chosen[0].reason == (f"its table needed work {STARVATION_NIGHTS} nights without a run "
                                     f"(at most {STARVATION_NIGHTS})")
    assert [(p.candidate.table, p.candidate.job) for p in plan.deferred] == [("old", "vacuum")]


def test_a_job_waits_at_most_a_week_behind_the_other_jobs_of_its_table():
    housekeeping = candidate("kept", 0, 1.0, job="vacuum", nights=JOB_STARVATION_NIGHTS - 1, table_nights=0)
    runs = [candidate("kept", 50, 1.0, table_nights=0), candidate("b", 40, 1.0), housekeeping]
    assert [p.candidate.job for p in plan_lake(runs, Budget(cpu_s=2)).deferred] == ["vacuum"]
    waited = candidate("kept", 0, 1.0, job="vacuum", nights=JOB_STARVATION_NIGHTS, table_nights=0)
    plan = plan_lake([*runs[:2], waited], Budget(cpu_s=2))
    assert [(p.candidate.table, p.candidate.job) for p in plan.chosen] == [("kept", "vacuum"), ("kept", "optimize")]
    assert plan.chosen[0].reason == f"waited {JOB_STARVATION_NIGHTS} nights (at most {JOB_STARVATION_NIGHTS} for one job)"


def test_housekeeping_that_waited_a_week_takes_a_fifth_of_the_night_first():
    waited = [candidate(t, 0, 1.0, job="vacuum", nights=JOB_STARVATION_NIGHTS, table_nights=0) for t in "abcdef"]
    compaction = [candidate(t, 50, 1.0, table_nights=0) for t in "abcdef"]
    plan = plan_lake([*waited, *compaction], Budget(cpu_s=10))
    first = [p.candidate.job for p in plan.chosen][:3]
    assert first == ["vacuum", "vacuum", "optimize"]  # 2 of 10 CPU-s first, then by the gain
    assert sum(p.candidate.job == "optimize" for p in plan.chosen) == 6


def test_gain_weights():
    assert gain_value(Gain(files_removed=3, log_files_not_replayed=2)) == 4  # a commit: half an open
    assert gain_value(Gain(dv_bytes_purged=16 << 20, files_given_stats=2, bytes_freed=2 << 30)) == 2 + 1 + 2
    assert gain_value(Gain(deletion_vectors_dropped=4)) == 2  # a vector's read: half an open
    assert gain_value(None) > 0


def test_a_lakes_own_weights_change_what_its_budget_buys():
    """Readers differ: DuckDB pays more for a commit it replays than for a small data file, delta-rs less. A lake
    whose readers checkpoint as they write weighs log files less, and its compaction goes before the checkpoint."""
    own = gain_weights({"log_files_not_replayed": "0.05"})
    assert own == {**GAIN_WEIGHTS, "log_files_not_replayed": 0.05}
    assert gain_weights(None) == GAIN_WEIGHTS and gain_weights({}) == GAIN_WEIGHTS
    assert gain_value(Gain(files_removed=3, log_files_not_replayed=20), own) == 4

    def night(weights):
        log = Estimate("checkpoint", Gain(log_files_not_replayed=20), Cost(cpu_s=0.5))
        files = Estimate("optimize", Gain(files_removed=6), Cost(cpu_s=0.5))
        plan = plan_lake([Candidate("a", "checkpoint", log, weights=weights),
                          Candidate("b", "optimize", files, weights=weights)], Budget(cpu_s=0.6))
        return [(p.candidate.table, p.candidate.job) for p in plan.chosen]

    assert night(GAIN_WEIGHTS) == [("a", "checkpoint")]  # 10 against 6
    assert night(own) == [("b", "optimize")]  # 1 against 6


@pytest.mark.parametrize("values, message", [
    ({"log_files": 1}, "gain_weights: unknown gain log_files \\(gains: bytes_freed, "),
    ({"files_removed": "many"}, "gain_weights: files_removed must be a number, got 'many'"),
    ({"files_removed": -1}, "gain_weights: files_removed must be 0 or more, got -1"),
    ({"files_removed": float("nan")}, "gain_weights: files_removed must be 0 or more"),
    (dict.fromkeys(GAIN_WEIGHTS, 0), "gain_weights: every weight is 0"),
])
def test_bad_gain_weights_get_one_message(values, message):
    with pytest.raises(InvalidArgumentError, match=message):
        gain_weights(values)


@pytest.mark.parametrize("values, message", [
    ({"cpu": 10}, "budget: unknown limit cpu"),
    ({"cpu_s": "ten"}, "budget: cpu_s must be a number, got 'ten'"),
    ({"max_tables": 0}, "budget: max_tables must be above 0, got 0"),
    ({"deadline_s": float("inf")}, "budget: deadline_s must be above 0"),
])
def test_a_bad_budget_gets_one_message(values, message):
    with pytest.raises(InvalidArgumentError, match=message):
        Budget.from_mapping(values)


def test_a_budget_from_its_limits():
    assert Budget.from_mapping({"cpu_s": "3600", "max_tables": "50", "bytes_rewritten": 1e9}) == Budget(
        cpu_s=3600.0, max_tables=50, bytes_rewritten=1_000_000_000)
    assert not Budget.from_mapping(None).limited


def test_a_run_that_pays_for_itself_goes_before_the_ratios():
    long_log = Candidate("long", "checkpoint", Estimate("checkpoint", Gain(log_files_not_replayed=30),
                                                        Cost(cpu_s=0.5)), saves_cpu_s=0.6)
    short_log = Candidate("short", "checkpoint", Estimate("checkpoint", Gain(log_files_not_replayed=2),
                                                          Cost(cpu_s=0.5)), saves_cpu_s=0.04)
    plan = plan_lake([candidate("a", 100, 0.5), long_log, short_log], Budget(cpu_s=1.0))
    assert [(p.candidate.table, p.candidate.job) for p in plan.chosen] == [("long", "checkpoint"), ("a", "optimize")]
    assert plan.chosen[0].reason == "pays for itself: saves the next night's reads 0.6 CPU-s for 0.5"
    assert [p.candidate.table for p in plan.deferred] == ["short"]


def test_a_run_that_a_chosen_earlier_job_of_its_table_covers_is_not_chosen_and_does_not_wait():
    compaction = Candidate("a", "compact-log", Estimate("compact-log", Gain(log_files_not_replayed=9), Cost(cpu_s=0.5)),
                           covered_by=frozenset({"checkpoint"}))
    first = Candidate("a", "checkpoint", Estimate("checkpoint", Gain(log_files_not_replayed=10), Cost(cpu_s=1.0)),
                      table_nights_waiting=STARVATION_NIGHTS)  # goes first
    plan = plan_lake([first, compaction], Budget(cpu_s=100))
    assert [p.candidate.job for p in plan.chosen] == ["checkpoint"]
    (idle,) = plan.idle
    assert (idle.candidate.job, idle.reason) == ("compact-log", NOTHING_LEFT)
    assert not plan.deferred and plan.as_dict()["nothing_to_gain"][0]["job"] == "compact-log"
    # the checkpoint deferred: the compaction is weighed on its own
    alone = plan_lake([dataclasses.replace(first, table_nights_waiting=0), compaction], Budget(cpu_s=0.6))
    assert [p.candidate.job for p in alone.chosen] == ["compact-log"]
    assert [p.candidate.job for p in alone.deferred] == ["checkpoint"] and not alone.idle
