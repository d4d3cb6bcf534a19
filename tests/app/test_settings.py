"""The application's settings: read from the environment at the entry points, one clear error for a bad value,
carried to the core as plain arguments; the Delta core reads no environment variable of ours."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_delta_maint.app import settings as settings_module
from airflow_delta_maint.app.cli import run
from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.settings import (CACHE_DIR_ENV, OPTIMIZE_ROUND_FILES_ENV, STREAM_MIN_FILES_ENV, Settings,
                                              current, default_cache_dir, running)
from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.state_size import STREAM_MIN_FILES
from airflow_delta_maint.delta.plans import optimize_rounds

PACKAGE = Path(settings_module.__file__).resolve().parents[1]


def test_the_defaults_are_the_cores():
    assert Settings.from_environ({}) == Settings()
    assert Settings().stream_min_files == STREAM_MIN_FILES
    assert Settings().optimize_round_files == optimize_rounds.ROUND_FILES
    assert Settings().cache_dir == default_cache_dir()
    assert Settings.variables() == {"stream_min_files": STREAM_MIN_FILES_ENV,
                                    "optimize_round_files": OPTIMIZE_ROUND_FILES_ENV, "cache_dir": CACHE_DIR_ENV}
    assert (STREAM_MIN_FILES_ENV, OPTIMIZE_ROUND_FILES_ENV, CACHE_DIR_ENV) == (
        "DELTA_MAINT_STREAM_MIN_FILES", "DELTA_MAINT_OPTIMIZE_ROUND_FILES", "DELTA_MAINT_CACHE_DIR")


def test_values_are_read_and_blanks_keep_the_default(tmp_path):
    got = Settings.from_environ({STREAM_MIN_FILES_ENV: " 7 ", OPTIMIZE_ROUND_FILES_ENV: "7",
                                 CACHE_DIR_ENV: str(tmp_path)})
    assert got == Settings(stream_min_files=7, optimize_round_files=7, cache_dir=tmp_path)
    assert Settings.from_environ({STREAM_MIN_FILES_ENV: "0"}).stream_min_files == 0  # always streamed
    blank = Settings.from_environ({STREAM_MIN_FILES_ENV: "", OPTIMIZE_ROUND_FILES_ENV: "  ", CACHE_DIR_ENV: ""})
    assert blank == Settings()


def test_the_object_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().stream_min_files = 1  # type: ignore[misc]


def test_a_bad_threshold_is_one_clear_error():
    for bad in ("many", "-1", "2.5"):
        with pytest.raises(InvalidArgumentError, match=rf"^DELTA_MAINT_STREAM_MIN_FILES must be a whole number of "
                                                       rf"files \(0 or more\), got '{bad}'$"):
            Settings.from_environ({STREAM_MIN_FILES_ENV: bad})
    assert Settings.from_environ({STREAM_MIN_FILES_ENV: " 7 "}).stream_min_files == 7


def test_a_bad_round_size_is_one_clear_error():
    assert Settings.from_environ({}).optimize_round_files == optimize_rounds.ROUND_FILES
    assert Settings.from_environ({OPTIMIZE_ROUND_FILES_ENV: "7"}).optimize_round_files == 7
    for bad in ("0", "-3", "many"):
        with pytest.raises(InvalidArgumentError, match=rf"^DELTA_MAINT_OPTIMIZE_ROUND_FILES must be a positive "
                                                       rf"number of files, got '{bad}'$"):
            Settings.from_environ({OPTIMIZE_ROUND_FILES_ENV: bad})


def test_bad_values_given_directly_name_the_field():
    with pytest.raises(InvalidArgumentError, match="^stream_min_files must be a whole number"):
        Settings(stream_min_files=-1)
    with pytest.raises(InvalidArgumentError, match="^optimize_round_files must be a positive"):
        Settings(optimize_round_files=0)


def test_the_running_jobs_settings():
    assert current() == Settings()
    chosen = Settings(stream_min_files=3)
    with running(chosen):
        assert current() is chosen
    assert current() == Settings()


def _table(path: Path) -> Path:
    for i in range(3):
        write_deltalake(str(path), pa.table({"id": pa.array(range(i * 5, i * 5 + 5), pa.int64())}), mode="append")
    return path


def test_the_command_line_refuses_a_bad_setting_before_the_job(tmp_path, monkeypatch, capsys):
    table = _table(tmp_path / "t")
    monkeypatch.setenv(OPTIMIZE_ROUND_FILES_ENV, "many")
    code, metrics = run(["inspect", str(table), "--json", "--metrics-out", str(tmp_path / "m.json")])
    message = "DELTA_MAINT_OPTIMIZE_ROUND_FILES must be a positive number of files, got 'many'"
    assert code == 2
    assert metrics["status"] == "failed" and metrics["error"] == message
    assert metrics["error_type"] == "InvalidArgumentError" and metrics["operation"] == "inspect"
    assert (tmp_path / "m.json").exists()
    assert f"delta-maint inspect: error: {message}" in capsys.readouterr().err
    monkeypatch.delenv(OPTIMIZE_ROUND_FILES_ENV)
    code, metrics = run(["inspect", str(table), "--json"])
    assert code == 0 and metrics["num_files"] == 3


def test_a_run_in_the_workers_process_reads_the_same_settings(tmp_path, monkeypatch):
    """``run_in_process`` (the operators' local execution) reads the environment as the command line does,
    and takes settings given to it instead."""
    table = _table(tmp_path / "t")
    seen: list[Settings] = []
    from airflow_delta_maint.app import state_reading

    real = state_reading.use_streamed_state

    def spy(storage, threshold):
        seen.append(current())
        assert threshold == current().stream_min_files
        return real(storage, threshold)

    monkeypatch.setattr(state_reading, "use_streamed_state", spy)
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    code, metrics = run_in_process("inspect", str(table), [])
    assert code == 0 and seen[-1].stream_min_files == 0
    code, metrics = run_in_process("inspect", str(table), [], settings=Settings(stream_min_files=9))
    assert code == 0 and seen[-1].stream_min_files == 9
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "-1")
    with pytest.raises(InvalidArgumentError, match="^DELTA_MAINT_STREAM_MIN_FILES must be a whole number"):
        run_in_process("inspect", str(table), [])


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_delta_core_reads_no_setting_of_ours():
    """No module of ``airflow_delta_maint/delta/`` names a ``DELTA_MAINT_*`` variable in its code: the
    settings reach the core as arguments (the stores' own AWS_*, AZURE_*, GOOGLE_* variables are not ours)."""
    named = {str(path.relative_to(PACKAGE)): text for path in sorted((PACKAGE / "delta").rglob("*.py"))
             for text in _code_strings(path) if "DELTA_MAINT" in text}
    assert not named, named
