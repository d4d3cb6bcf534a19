"""A job's option parser is built once a process; each parse still gets its own namespace."""

from __future__ import annotations

import pytest

from airflow_delta_maint.app.execution import job_parser, parse_job_args
from airflow_delta_maint.delta.errors import InvalidArgumentError


def test_one_parser_per_job_and_a_fresh_namespace_per_parse():
    assert job_parser("optimize") is job_parser("optimize")
    first = parse_job_args("optimize", ["--target-file-size", "268435456"])
    second = parse_job_args("optimize", [])
    assert vars(first) != vars(second)
    first.target_file_size = -1
    assert vars(parse_job_args("optimize", [])) == vars(second)


def test_a_bad_option_still_gets_one_message_after_a_good_parse():
    parse_job_args("vacuum", [])
    with pytest.raises(InvalidArgumentError, match="invalid options for vacuum: unknown --no-such-flag"):
        parse_job_args("vacuum", ["--no-such-flag"])
