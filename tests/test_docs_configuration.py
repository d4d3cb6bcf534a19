"""docs/configuration.md names every setting, with its default: each flag of the command line's parsers, each
argument of an operator's (and the sensor's) ``__init__``, each ``[delta_maint]`` option the provider declares,
and each environment variable of ours the package reads."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
PACKAGE = REPO / "airflow_delta_maint"


def section(heading: str) -> str:
    """The text under the one heading that contains ``heading``, down to the next heading of its level or above."""
    lines = DOC.read_text().splitlines()
    found = [i for i, line in enumerate(lines) if re.match(r"^#+ ", line) and heading in line]
    assert len(found) == 1, f"docs/configuration.md: {len(found)} headings contain {heading!r}"
    start = found[0]
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    end = next((i for i in range(start + 1, len(lines))
                if re.match(r"^#+ ", lines[i]) and len(lines[i]) - len(lines[i].lstrip("#")) <= level), len(lines))
    return "\n".join(lines[start + 1:end])


def rows(text: str) -> dict[str, list[str]]:
    """The table rows of ``text``, by their first cell's leading code span (``name``, ``--flag``): the cells."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        match = re.match(r"`([^` ]+)", cells[0])
        assert match is not None, line
        out[match.group(1)] = cells
    return out


def test_every_command_line_flag_is_documented():
    from airflow_delta_maint.app.cli import build_parser
    from airflow_delta_maint.app.job_definitions import JOBS as JOB_MODULES

    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    common = rows(section("Every job (`delta-maint JOB TABLE`)"))
    assert set(subparsers.choices) == {*JOB_MODULES, "fleet", "report", "plan-lake"}
    missing = []
    for name, sub in subparsers.choices.items():
        own = rows(section(f"`delta-maint {name}`"))
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:  # a former flag, named in its option's row ("formerly")
                continue
            for flag in action.option_strings:
                if not flag.startswith("--") or flag == "--help":
                    continue
                documented = own.get(flag) or (common.get(flag) if name in JOB_MODULES else None)
                if documented is None:
                    missing.append(f"delta-maint {name} {flag}")
                else:
                    assert len(documented) >= 3 and documented[1], f"{name} {flag}: no default in {documented}"
    assert not missing, f"docs/configuration.md does not document {missing}"


def _operator_classes() -> list[type]:
    """Every operator and sensor class the provider defines (``operators/*.py``, ``sensors/*.py``)."""
    from airflow.sdk import BaseOperator

    classes = []
    for package in ("airflow_delta_maint.operators", "airflow_delta_maint.sensors"):
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            module = importlib.import_module(f"{package}.{info.name}")
            classes += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                        if issubclass(cls, BaseOperator) and cls.__module__ == module.__name__]
    return sorted(set(classes), key=lambda c: c.__name__)


def test_every_operator_argument_is_documented():
    classes = _operator_classes()
    assert {"DeltaMaintenanceOperator", "OptimizeOperator", "VacuumOperator", "LogCompactionOperator",
            "InspectTableOperator", "MaintainTablesOperator", "CommitIntervalSensor"} <= {c.__name__ for c in classes}
    missing = []
    for cls in classes:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        documented = rows(section(f"`{cls.__name__}`"))
        for param in inspect.signature(init).parameters.values():
            if param.name == "self" or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            if param.name not in documented:
                missing.append(f"{cls.__name__}({param.name})")
            else:
                assert len(documented[param.name]) >= 3 and documented[param.name][1], f"{cls.__name__}.{param.name}"
    assert not missing, f"docs/configuration.md does not document {missing}"


def test_every_provider_config_option_is_documented_with_its_default():
    from airflow_delta_maint.provider_info import get_provider_info

    options = get_provider_info()["config"]["delta_maint"]["options"]
    documented = rows(section("`[delta_maint]`"))
    assert set(options) == set(documented), "the [delta_maint] table must list exactly the provider's options"
    for name, option in options.items():
        default = documented[name][1]
        if option["default"]:
            assert f"`{option['default']}`" in default, f"[delta_maint] {name}: default {option['default']!r}"
        else:
            assert default.startswith("empty"), f"[delta_maint] {name}: the default is empty, the doc says {default}"


def test_the_settings_are_documented_with_their_defaults():
    from airflow_delta_maint.app.settings import Settings

    documented = rows(section("The application's settings"))
    defaults = Settings()
    for field, variable in Settings.variables().items():
        assert variable in documented, f"{variable} ({field}) is not documented"
        assert documented[variable][1] == f"`{field}`"
        value = getattr(defaults, field)
        if isinstance(value, int):
            assert documented[variable][2] == f"`{value}`", variable
        else:
            assert "airflow-delta-maint" in documented[variable][2] and value.name.startswith("airflow-delta-maint")


@pytest.mark.parametrize("prefix", ["AWS_", "AZURE_", "GOOGLE_"])
def test_the_stores_credential_variables_are_listed(prefix):
    assert f"`{prefix}*`" in section("Object-store credentials")


def test_every_environment_variable_of_ours_is_documented():
    """Every ``DELTA_MAINT_*`` variable the package's code or text names appears in the environment section."""
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named.update(re.findall(r"\bDELTA_MAINT_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    assert "DELTA_MAINT_STREAM_MIN_FILES" in named and "DELTA_MAINT_SCRATCH_DIR" in named
    documented = section("Environment variables")
    missing = sorted(v for v in named if f"`{v}`" not in documented)
    assert not missing, f"docs/configuration.md does not document {missing}"
