"""The provider's metadata is honest: valid by the installed Airflow's schema, a config section for
every setting it reads, every trigger class and how-to page listed."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import subprocess
from pathlib import Path

import airflow
import jsonschema
from airflow.triggers.base import BaseTrigger

import pytest
from delta_maint_testing import BIN, REPO, airflow_env

import airflow_delta_maint
from airflow_delta_maint.provider_info import get_provider_info

PACKAGE = Path(airflow_delta_maint.__file__).parent


def test_provider_info_is_valid_by_the_installed_schema():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def _settings_read() -> set[tuple[str, str]]:
    """(section, option) of every ``conf.get*(section, option, ...)`` call in the package's sources."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            # the provider's own section through hooks/provider_config.get_option(option)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "get_option" and node.args:
                arg = node.args[0]
                option = arg.value if isinstance(arg, ast.Constant) else constants.get(getattr(arg, "id", ""))
                if isinstance(option, str):
                    found.add(("delta_maint", option))
                continue
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "getboolean", "getint", "getfloat", "getjson")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("conf")
                    and len(node.args) >= 2):
                continue
            values = [a.value if isinstance(a, ast.Constant) else constants.get(getattr(a, "id", ""))
                      for a in node.args[:2]]
            if all(isinstance(v, str) for v in values):
                found.add((values[0], values[1]))
    return found


def test_every_setting_of_the_provider_is_declared():
    config = get_provider_info()["config"]
    ours = {(s, o) for s, o in _settings_read() if s == "delta_maint"}
    assert {("delta_maint", "history_uri"), ("delta_maint", "execution")} <= ours
    missing = [f"[{s}] {o}" for s, o in sorted(ours) if o not in config.get(s, {}).get("options", {})]
    assert not missing, f"settings read but not declared in get_provider_info()['config']: {missing}"
    # others' sections are read, not declared: Airflow's own and the OpenLineage provider's
    assert not set(config) - {"delta_maint"}


@pytest.mark.e2e
def test_airflow_reads_the_declared_setting(tmp_path):
    result = subprocess.run([str(BIN / "airflow"), "config", "get-value", "delta_maint", "history_uri"],
                            env=airflow_env(tmp_path, AIRFLOW__DELTA_MAINT__HISTORY_URI="/lake/history"),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("/lake/history"), result.stderr[-2000:]


def test_every_trigger_class_is_listed():
    listed = {m for entry in get_provider_info()["triggers"] for m in entry["python-modules"]}
    found = set()
    for module_info in pkgutil.iter_modules([str(PACKAGE / "triggers")]):
        module = importlib.import_module(f"airflow_delta_maint.triggers.{module_info.name}")
        if any(issubclass(c, BaseTrigger) and c.__module__ == module.__name__
               for _, c in inspect.getmembers(module, inspect.isclass)):
            found.add(module.__name__)
    assert found == listed


def test_how_to_guides_exist():
    guides = get_provider_info()["integrations"][0]["how-to-guide"]
    assert len(guides) == 7
    for guide in guides:
        assert (REPO / guide.lstrip("/")).is_file(), guide
