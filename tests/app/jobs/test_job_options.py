"""The jobs' typed options: built once from the parsed command line, checked there with one clear
error, and the same object whoever builds it (the command line, the operators' check, the fleet)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from airflow_delta_maint.app import fleet
from airflow_delta_maint.app.jobs import compact_log, optimize, vacuum
from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.compaction_options import LogCompactionOptions
from airflow_delta_maint.app.job_definitions import definition
from airflow_delta_maint.delta.plans.optimize_options import DEFAULT_BATCH_BYTES, OptimizeOptions
from airflow_delta_maint.delta.plans.vacuum_options import VacuumOptions, parse_versions
from airflow_delta_maint.delta.protocol.features import Operation


def parsed(module, *argv: str) -> dict:
    """``vars`` of the job's own parser over ``argv``, as the command line, the operators and the fleet parse it."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    definition(module.NAME).options.add_to(parser)
    return vars(parser.parse_args(list(argv)))


def test_optimize_options_from_the_command_line_are_typed() -> None:
    options = optimize.options_from(parsed(optimize, "--zorder-by", "a, b", "--min-file-size", "10", "--dry-run",
                                           "--bins-per-commit", "0", "--min-file-age", "60"))
    assert options.zorder_by == ("a", "b") and options.min_file_size == 10 and options.dry_run
    assert options.bins_per_commit == 0 and options.min_file_age == 60.0 and options.engine == "native"
    assert options.batch_bytes == DEFAULT_BATCH_BYTES and options.compression == "snappy"
    assert options.feature_gate == "optimize"
    # the defaults of the parser and of the object agree: an empty command line is the empty object
    assert optimize.options_from(parsed(optimize)) == OptimizeOptions()


def test_optimize_options_from_rendered_text() -> None:
    """Values that arrive as text (a rendered template, a fleet spec) are converted, flags included."""
    options = OptimizeOptions.from_mapping({"full": "false", "purge": "True", "target_files": "", "dv_ratio": "0.2",
                                            "unrelated": object()})
    assert options.full is False and options.purge is True and options.target_files is None
    assert options.dv_ratio == 0.2


@pytest.mark.parametrize("params, message", [
    ({"batch_bytes": 0}, "batch_bytes must be positive, got 0"),
    ({"max_concurrent_bins": -1}, "max_concurrent_bins must be positive"),
    ({"lease_seconds": -5}, "lease_seconds must be 0 (no reservation) or positive"),
    ({"compression": "brotli"}, "unknown compression 'brotli'"),
    ({"wait_for_writer": -1}, "wait_for_writer must not be negative"),
    ({"bins_per_commit": -2}, "bins_per_commit must be 0 (one commit per batch) or positive"),
    ({"purge": True, "zorder_by": "a", "policy": "auto"}, "it takes no zorder_by, policy='auto'"),
    ({"policy": "auto", "where": "p = 1"}, "policy='auto' chooses partitions itself"),
    ({"policy": "hot"}, "policy must be one of all, auto, got 'hot'"),
    ({"min_file_size": "ten"}, "OPTIMIZE's min_file_size must be a whole number, got 'ten'"),
    ({"dv_ratio": "x"}, "OPTIMIZE's dv_ratio must be a number"),
    ({"engine": "delta-spark", "target_files": 4}, "does not take target_files (native engine only)"),
    ({"engine": "duckdb"}, "unknown engine 'duckdb'"),
])
def test_bad_optimize_options_get_one_error_before_any_table_is_read(params: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        optimize.options_from(params)
    assert message in str(err.value)
    # nor does the worker's check get as far as the table: a path that does not exist is never read
    with pytest.raises(InvalidArgumentError):
        optimize.nothing_to_do("/no/such/table", None, optimize.options_from(params))


def test_purged_options_and_the_delta_spark_gate() -> None:
    options = optimize.options_from({"purge": True, "engine": "delta-spark"})
    purged = options.purged()
    assert (purged.min_file_size, purged.dv_ratio) == (1, 0.0) and options.min_file_size is None
    assert purged.purged() == purged and OptimizeOptions().purged() == OptimizeOptions()
    assert options.feature_gate == Operation.OPTIMIZE_BY_DELTA_SPARK


def test_vacuum_options() -> None:
    options = vacuum.options_from(parsed(vacuum, "--mode", "lite", "--retention-hours", "2",
                                         "--keep-versions", "40,12, 12"))
    assert options == VacuumOptions(retention_hours=2.0, mode="lite", keep_versions=(12, 40))
    assert vacuum.options_from(parsed(vacuum)) == VacuumOptions()
    assert parse_versions([3, "1"]) == (1, 3) and parse_versions(None) == ()


@pytest.mark.parametrize("params, message", [
    ({"mode": "deep"}, "VACUUM mode must be 'full' or 'lite', got 'deep'"),
    ({"mode": "lite", "inventory": "s3://b/inv"}, "inventory replaces the listing of a full VACUUM"),
    ({"engine": "delta-spark", "keep_versions": "3"}, "does not take keep_versions"),
    ({"keep_versions": "3,x"}, "versions must be whole numbers >= 0"),
    ({"retention_hours": "soon"}, "VACUUM's retention_hours must be a number"),
])
def test_bad_vacuum_options(params: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        vacuum.options_from(params)
    assert message in str(err.value)


def test_log_compaction_options() -> None:
    options = compact_log.options_from(parsed(compact_log, "--interval", "10", "--checkpoint-interval", "5",
                                              "--cleanup-expired-log", "--engine", "delta-spark"))
    assert options == LogCompactionOptions(interval=10, checkpoint_interval=5, cleanup_expired_log=True,
                                           engine="delta-spark")
    assert compact_log.options_from(parsed(compact_log)) == LogCompactionOptions()


@pytest.mark.parametrize("params, message", [
    ({"interval": 1}, "a compaction window must span at least 2 commits"),
    ({"interval": "x"}, "invalid interval 'x'"),
    ({"max_window_bytes": -1}, "invalid max_window_bytes -1"),
    ({"checkpoint_interval": 0}, "invalid checkpoint_interval 0"),
    ({"engine": "duckdb"}, "unknown engine 'duckdb'"),
])
def test_bad_log_compaction_options(params: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        compact_log.options_from(params)
    assert message in str(err.value)


def test_the_fleet_fails_a_table_on_bad_options_and_reads_nothing(tmp_path: Path) -> None:
    """A bad option fails the job's entry in the fleet's decision; the table (here: none) is never read."""
    spec = fleet.FleetSpec([fleet.FleetTable(str(tmp_path / "missing"), [
        fleet.FleetJob("optimize", ["--batch-bytes", "0"]), fleet.FleetJob("vacuum", [])], {})], None)
    decision = fleet.decide(spec)
    first, second = decision.known[0]
    assert first is not None and first["status"] == "failed" and "batch_bytes must be positive" in first["error"]
    assert second is not None and second["status"] == "skipped" and "optimize failed" in second["reason"]
    assert decision.to_run.tables == []
