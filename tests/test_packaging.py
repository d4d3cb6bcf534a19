"""Packaging: provider discovery and the import boundaries between the layers."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import airflow_delta_maint
from airflow_delta_maint.provider_info import get_provider_info

PACKAGE_DIR = Path(airflow_delta_maint.__file__).resolve().parent
AIRFLOW_SIDE = ("hooks", "operators", "sensors", "triggers", "ui")


def modules_of(subpackage: str) -> list[str]:
    """Every module of ``airflow_delta_maint.<subpackage>``, the package itself included."""
    base = f"airflow_delta_maint.{subpackage}"
    names = [base]
    for info in pkgutil.walk_packages([str(PACKAGE_DIR / subpackage)], prefix=base + "."):
        names.append(info.name)
    return names


def imports_of(subpackage: str) -> dict[str, set[str]]:
    """What each module of ``airflow_delta_maint.<subpackage>`` imports (absolute names), read from
    the source with ``ast`` (nothing is imported): every import counts, inside functions and
    ``TYPE_CHECKING`` blocks too, and ``from package import name`` counts ``package.name`` as well,
    for when that is a module."""
    found_by_module: dict[str, set[str]] = {}
    for path in sorted((PACKAGE_DIR / subpackage).rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        package = name if is_package else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = (f"{base}.{node.module}" if node.module else base) if node.level else str(node.module)
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
        found_by_module[name] = found
    return found_by_module


def import_graph(subpackage: str) -> dict[str, set[str]]:
    """Which modules of ``airflow_delta_maint.<subpackage>`` each of its modules imports (see
    :func:`imports_of`)."""
    found = imports_of(subpackage)
    return {name: {m for m in names if m in found and m != name} for name, names in found.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def imported_after(modules: list[str]) -> set[str]:
    """Top-level packages loaded by importing ``modules`` in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_provider_info_names_the_distribution():
    info = get_provider_info()
    assert info["package-name"] == "airflow-delta-maint"
    assert info["name"] and info["description"]
    assert airflow_delta_maint.__version__ in info["versions"]


def test_provider_info_modules_exist():
    info = get_provider_info()
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info.get(kind, []):
            for module in entry["python-modules"]:
                relative = module.split(".", 1)[1].replace(".", "/") + ".py"
                assert (PACKAGE_DIR / relative).is_file(), module


def test_provider_entry_point_is_registered():
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_delta_maint")]
    assert len(found) == 1
    assert found[0].load()()["package-name"] == "airflow-delta-maint"


def test_delta_core_imports_neither_spark_nor_airflow():
    modules = modules_of("delta")
    assert "airflow_delta_maint.delta.log.snapshot" in modules and "airflow_delta_maint.delta.log.listing" in modules
    loaded = imported_after(modules)
    assert "pyspark" not in loaded
    assert "airflow" not in loaded
    assert "py4j" not in loaded


def test_airflow_side_never_imports_pyspark():
    modules = [m for sub in AIRFLOW_SIDE for m in modules_of(sub)]
    loaded = imported_after(modules)
    assert "pyspark" not in loaded
    assert "py4j" not in loaded


def test_application_cli_imports_without_spark_until_a_job_needs_it():
    loaded = imported_after(["airflow_delta_maint.app.cli", "airflow_delta_maint.app.jobs.inspect"])
    assert "pyspark" not in loaded
    assert "airflow" not in loaded


def test_vacuum_spark_tasks_import_no_pyarrow():
    """The code VACUUM runs in Spark tasks stays light, so fresh Python workers start quickly."""
    loaded = imported_after(["airflow_delta_maint.app.runners.vacuum_tasks"])
    assert "airflow_delta_maint" in loaded and "obstore" in loaded
    assert "pyarrow" not in loaded and "pyspark" not in loaded


def test_find_cycle_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_package_has_no_import_cycle():
    """No module of the package, the Airflow side included, imports (even inside a function or a
    ``TYPE_CHECKING`` block) a module that imports it back."""
    found: dict[str, set[str]] = {}
    for room in sorted(p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()):
        found.update(imports_of(room))
    graph = {m: {d for d in deps if d in found and d != m} for m, deps in found.items()}
    assert "airflow_delta_maint.hooks.delta_maint" in graph["airflow_delta_maint.operators.base"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def borrowed_private_names(package_dir: Path) -> list[str]:
    """Each use of another module's private name (``_name``, not ``__dunder__``) in the package under
    ``package_dir``: imported by name, or read as an attribute of an imported module, as
    ``importer <- owner.name``."""
    root = package_dir.name
    found: set[str] = set()
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        package = name if is_package else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        modules: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = (f"{base}.{node.module}" if node.module else base) if node.level else str(node.module)
                if not target.startswith(root):
                    continue
                for alias in node.names:
                    if _private(alias.name) and target != name:
                        found.add(f"{name} <- {target}.{alias.name}")
                    modules[alias.asname or alias.name] = f"{target}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(root):
                        modules[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name or root
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules:
                found.add(f"{name} <- {modules[node.value.id]}.{node.attr}")
    return sorted(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_borrowed_private_names_are_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "owner.py").write_text("_hidden = 1\nshown = 2\n__all__ = ['shown']\n")
    (pkg / "sub" / "user.py").write_text("from pkg.sub.owner import _hidden, shown\nfrom pkg.sub import owner\n"
                                         "x = owner._hidden + owner.__name__.count('x')\n")
    (pkg / "sub" / "relative.py").write_text("from .owner import _hidden\n")
    assert borrowed_private_names(pkg) == ["pkg.sub.relative <- pkg.sub.owner._hidden",
                                           "pkg.sub.user <- pkg.sub.owner._hidden"]


def test_no_module_uses_another_modules_private_names():
    """A name one module shares with another is public where it lives (or moves to the module that
    owns the idea)."""
    borrowed = borrowed_private_names(PACKAGE_DIR)
    assert not borrowed, "private names used by other modules:\n" + "\n".join(borrowed)


def test_no_module_is_over_600_lines():
    long = sorted(f"{p.relative_to(PACKAGE_DIR)}: {n}" for p in PACKAGE_DIR.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > 600)
    assert not long, f"modules over 600 lines: {long}"


def test_delta_core_reads_no_environment_variable():
    """Settings are read at the edges (the command line, the hook) and carried down: the core reads
    none, except the object stores' own credential variables (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``),
    read in ``delta/storage/options.py`` and shipped to executors by ``delta/storage/store.py``."""
    allowed = {"storage/options.py", "storage/store.py"}
    readers = sorted(str(p.relative_to(PACKAGE_DIR / "delta")) for p in (PACKAGE_DIR / "delta").rglob("*.py")
                     if str(p.relative_to(PACKAGE_DIR / "delta")) not in allowed
                     and any(isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv")
                             for n in ast.walk(ast.parse(p.read_text()))))
    assert not readers, f"modules of delta/ that read the environment: {readers}"


def test_application_has_no_import_cycle():
    """No module of ``app/`` imports, even inside a function, a module that imports it back;
    the command line sits on top, imported only by the spark-submit entry ``main.py``."""
    graph = import_graph("app")
    assert "airflow_delta_maint.app.jobs" in graph["airflow_delta_maint.app.cli"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in app/: " + " -> ".join(cycle or [])
    assert sorted(m for m, deps in graph.items() if "airflow_delta_maint.app.cli" in deps) == [
        "airflow_delta_maint.app.main"]


#: the rooms of the Delta core, bottom first; ``delta/errors.py`` (and the package itself) lies
#: below them all
CORE_ROOMS = ("storage", "parquet", "protocol", "log", "plans", "health")
CORE_BOTTOM = ("airflow_delta_maint.delta", "airflow_delta_maint.delta.errors", "airflow_delta_maint.delta.option_values")


def core_room(module: str) -> int | None:
    """The rank of ``module``'s room in :data:`CORE_ROOMS` (-1 for the bottom), None when it has none."""
    if module in CORE_BOTTOM:
        return -1
    parts = module.split(".")
    if parts[:2] != ["airflow_delta_maint", "delta"] or len(parts) < 3 or parts[2] not in CORE_ROOMS:
        return None
    if len(parts) == 3 and not (PACKAGE_DIR / "delta" / parts[2]).is_dir():
        return None  # a module delta/<room name>.py is outside the rooms
    return CORE_ROOMS.index(parts[2])


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module in a higher room than the importer's (or in none), as a sentence."""
    found = []
    for module, deps in sorted(graph.items()):
        own = core_room(module)
        for dep in sorted(deps):
            room = core_room(dep)
            if own is None or room is None or room > own:
                found.append(f"{module} imports {dep}")
    return found


def test_upward_imports_are_found():
    graph = {"airflow_delta_maint.delta.storage.store": {"airflow_delta_maint.delta.errors",
                                                         "airflow_delta_maint.delta.log.snapshot"},
             "airflow_delta_maint.delta.plans.vacuum": {"airflow_delta_maint.delta.log.snapshot",
                                                        "airflow_delta_maint.delta.storage.table_files",
                                                        "airflow_delta_maint.delta.storage.store"},
             "airflow_delta_maint.delta.log.snapshot": {"airflow_delta_maint.delta.health.score"}}
    assert upward_imports(graph) == [
        "airflow_delta_maint.delta.log.snapshot imports airflow_delta_maint.delta.health.score",
        "airflow_delta_maint.delta.storage.store imports airflow_delta_maint.delta.log.snapshot"]
    assert upward_imports({"airflow_delta_maint.delta.roomless": {"airflow_delta_maint.delta.errors"}}) == [
        "airflow_delta_maint.delta.roomless imports airflow_delta_maint.delta.errors"]


def test_delta_core_imports_only_down_its_rooms():
    """Every module of ``delta/`` lives in a room (or is ``errors.py``) and imports, even inside a
    function, only from its own room and the rooms below: storage, parquet, protocol, log, plans, health."""
    graph = import_graph("delta")
    rooms = {core_room(m) for m in graph}
    assert rooms == {-1, *range(len(CORE_ROOMS))}, "a room is empty or a module has no room"
    outside = sorted(m for m in graph if core_room(m) is None)
    assert not outside, f"modules of delta/ outside the rooms {CORE_ROOMS}: {outside}"
    assert "airflow_delta_maint.delta.log.table_state" in graph["airflow_delta_maint.delta.plans.vacuum"]
    upward = upward_imports(graph)
    assert not upward, "imports up the rooms of delta/:\n" + "\n".join(upward)


def test_delta_core_imports_nothing_above_it():
    """The core imports no module of the application or the Airflow side (only the package's version)."""
    above = sorted(f"{module} imports {name}" for module, names in imports_of("delta").items() for name in names
                   if name.startswith("airflow_delta_maint.") and not name.startswith("airflow_delta_maint.delta")
                   and name != "airflow_delta_maint.__version__")
    assert not above, above


def test_only_the_state_module_decides_the_streams_fallback():
    """Where the stream cannot vouch for a table's state is decided once, where the state is opened
    (``delta/log/table_state.py``): no job or plan catches the fallback itself."""
    catching = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None and "StreamFallback" in ast.unparse(node.type):
                catching.append(f"{path.relative_to(PACKAGE_DIR)}:{node.lineno}")
    assert catching and all(c.startswith("delta/log/table_state.py:") for c in catching), catching
