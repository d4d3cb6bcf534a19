"""The jobs' definitions: one declaration of each option gives the command line, the operators' keywords and
template fields, the fleet's mappings and the docs; the registry is the only list of jobs."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import pytest

from airflow_delta_maint.app.cli import build_parser
from airflow_delta_maint.app.execution import parse_job_args
from airflow_delta_maint.app.job_definitions import JOBS, definition, fleet_defaults
from airflow_delta_maint.app.job_definitions.doc import render
from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.operators.maintenance import (ComputeStatsOperator, InspectTableOperator,
                                                       LogCompactionOperator, OptimizeOperator, VacuumOperator)

REPO = Path(__file__).resolve().parents[2]
OPERATORS = (OptimizeOperator, VacuumOperator, LogCompactionOperator, InspectTableOperator, ComputeStatsOperator)


def test_the_options_page_is_generated_from_the_definitions():
    assert (REPO / "docs" / "job-options.md").read_text() == render(), \
        "docs/job-options.md is stale: python -m airflow_delta_maint.app.job_definitions.doc docs/job-options.md"


def test_every_job_on_the_command_line_is_a_definition():
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) - {"fleet", "report", "plan-lake"} == set(JOBS)
    for name, job in JOBS.items():
        flags = {s for a in sub.choices[name]._actions for s in a.option_strings}
        assert {o.flag for o in job.options} <= flags, name


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda c: c.__name__)
def test_an_operators_keywords_and_template_fields_come_from_its_job(operator):
    job = definition(operator.job)
    keywords = [o.keyword for o in job.options.keywords()]
    signature = inspect.signature(operator.__init__).parameters
    assert keywords and all(k in signature for k in keywords)
    assert set(job.options.template_fields()) <= set(operator.template_fields)
    documented = operator.__doc__ or ""
    assert [k for k in keywords if f":param {k}:" not in documented] == [], "undocumented keywords"


def test_the_same_bad_value_gives_one_message_naming_the_option_whichever_door():
    with pytest.raises(InvalidArgumentError, match=r"^invalid options for vacuum: mode must be one of full, lite, "
                                                   r"got 'sideways'$"):
        definition("vacuum").parse({"mode": "sideways"})
    with pytest.raises(InvalidArgumentError, match=r"^invalid options for inspect: small_file_bytes must be a whole "
                                                   r"number, got 'lots'$"):
        definition("inspect").parse({"small_file_bytes": "lots"})
    with pytest.raises(InvalidArgumentError, match="unknown zorder"):
        definition("optimize").parse({"zorder": "a"})


def test_operator_keywords_and_option_names_parse_alike():
    job = definition("optimize")
    by_keyword = job.parse({"where": "p = 1", "policy": "AUTO", "zorder_by": ["a", "b"], "dry_run": "true"})
    by_name = job.parse({"where": "p = 1", "policy": "auto", "zorder_by": "a,b", "dry_run": True})
    assert by_keyword == by_name
    assert job.options.to_argv(by_name, job.name) == ["--where", "p = 1", "--zorder-by", "a,b", "--policy", "auto",
                                                      "--dry-run"]
    parser = argparse.ArgumentParser()
    job.options.add_to(parser)
    assert vars(parser.parse_args(job.options.to_argv(by_name, job.name))) == by_name


def test_former_names_are_taken_for_one_release_with_a_warning(capsys):
    """predicate, auto, max_file_size (keyword and flag), cleanup-log's retention (an interval, in hours now) and
    compact-log's checkpoint_engine: each still parses, with one warning naming the option to use."""
    job = definition("optimize")
    warned: list[str] = []
    former = job.options.parse({"predicate": "p = 1", "auto": True, "max_file_size": "7"}, job.name, warned.append)
    assert former == job.parse({"where": "p = 1", "policy": "auto", "target_file_size": 7})
    assert sorted(warned) == [f"optimize: {old} is deprecated and will be removed in the next release; use {new}"
                              for old, new in (("auto", "policy"), ("max_file_size", "target_file_size"),
                                               ("predicate", "where"))]
    # the new name wins over the former one
    assert job.options.parse({"auto": True, "policy": "all"}, job.name, warned.append)["policy"] == "all"
    assert job.options.parse({"auto": "false"}, job.name, warned.append)["policy"] == "all"
    # a mapping's former name without a callback: one line on stderr
    capsys.readouterr()
    assert definition("cleanup-log").options.parse({"retention": "interval 2 days"}, "cleanup-log")[
        "retention_hours"] == 48
    assert capsys.readouterr().err == ("delta-maint: warning: cleanup-log: retention is deprecated and will be "
                                       "removed in the next release; use retention_hours\n")

    def parsed(name: str, *argv: str) -> dict:
        parser = argparse.ArgumentParser(prog=f"delta-maint {name}")
        definition(name).options.add_to(parser)
        return vars(parser.parse_args(list(argv)))

    got = parsed("optimize", "--auto", "--max-file-size", "7")
    assert got["policy"] == "auto" and got["target_file_size"] == 7 and "auto" not in got
    assert capsys.readouterr().err.splitlines() == [
        "delta-maint: warning: --auto is deprecated and will be removed in the next release; use --policy",
        "delta-maint: warning: --max-file-size is deprecated and will be removed in the next release; use "
        "--target-file-size"]
    assert parsed("cleanup-log", "--retention", "720 hours")["retention_hours"] == 720
    assert parsed("compact-log", "--checkpoint-engine", "delta-spark")["engine"] == "delta-spark"
    assert "--checkpoint-engine is deprecated" in capsys.readouterr().err
    # the former flags stay out of --help
    parser = argparse.ArgumentParser()
    job.options.add_to(parser)
    assert "--max-file-size" not in parser.format_help() and "--auto " not in parser.format_help()
    # a bad value by a former name: one message naming it, before any table is read
    with pytest.raises(InvalidArgumentError, match="invalid log retention 'soon'"):
        definition("cleanup-log").parse({"retention": "soon"})
    with pytest.raises(InvalidArgumentError, match="retention.*invalid log retention 'soon'"):
        parse_job_args("cleanup-log", ["--retention", "soon"])
    with pytest.raises(InvalidArgumentError, match="target_file_size must be a whole number"):
        parse_job_args("optimize", ["--max-file-size", "big"])


def test_the_fleet_defaults_and_the_writing_jobs_come_from_the_definitions():
    assert fleet_defaults() == {"optimize": {}, "compute-stats": {}, "compact-log": {}, "vacuum": {"mode": "lite"}}
    assert [name for name, job in JOBS.items() if not job.writes] == ["inspect", "describe-table"]
    assert all(job.catalog_operation for job in JOBS.values() if job.writes)


def test_describe_table_reports_the_schema_protocol_and_features_and_changes_nothing(tmp_path):
    """The job added from its definition, its runner and its registry line alone."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_delta_maint.app.cli import run

    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1, 2], pa.int64()), "day": ["a", "b"]}),
                    partition_by=["day"], configuration={"delta.appendOnly": "true"})
    log_before = sorted(p.name for p in (table / "_delta_log").iterdir())
    code, metrics = run(["describe-table", str(table), "--json"])
    assert code == 0, metrics
    assert [f["name"] for f in metrics["schema"]["fields"]] == ["id", "day"]
    assert metrics["partition_columns"] == ["day"] and metrics["properties"] == {"delta.appendOnly": "true"}
    assert metrics["protocol"]["min_writer_version"] >= 2 and "appendOnly" in metrics["protocol"]["writer_features"]
    assert (metrics["status"], metrics["version_read"]) == ("skipped", 0)
    assert sorted(p.name for p in (table / "_delta_log").iterdir()) == log_before
    assert definition("describe-table").needs_spark({"version": None}) is False
