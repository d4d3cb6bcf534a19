"""The documentation is true: every code block of README.md and docs/*.md is checked.

Each fenced block names its kind, and the kind says how it is checked:

- ``python``: a complete DAG file (imports, ``with DAG(...)``). Airflow parses it as its DAG
  processor would (``DagBag``, in a fresh interpreter with its own Airflow home): it must import
  without error, define at least one DAG, every DAG must have tasks, and every DAG must serialize.
- ``shell``: commands that are run. ``delta-maint ...`` lines run in order, in a folder that holds
  a small table ``events`` (partitioned by ``date``, written by delta-rs), and must exit 0 (with
  ``--json``, the metrics must not say ``failed``). ``make TARGET`` lines are checked with
  ``make -n TARGET``. Nothing else may appear in a ``shell`` block.
- ``text``: not run (synopses, diagrams, output). A line ``delta-maint JOB TABLE ...`` or
  ``delta-maint <job> TABLE ...`` is a synopsis: every option it names must exist for that job,
  and each job's line (with the ``JOB`` line of the same block, which names the common options)
  must name every option the job has.

A block of any other kind, or of none, fails ``test_every_block_says_how_it_is_checked``.
Relative links and the repository files the prose names in backticks must exist.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
KINDS = {"python", "shell", "text"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    kind: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^(\s*)```(.*)$", lines[i])
        if match:
            start, kind = i, match.group(2).strip()
            body: list[str] = []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i])
                i += 1
            assert i < len(lines), f"{path}:{start + 1}: unclosed code block"
            blocks.append(Block(path, start + 1, kind, textwrap.dedent("\n".join(body)) + "\n"))
        i += 1
    return blocks


ALL_BLOCKS = [b for doc in DOCS for b in fenced_blocks(doc)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.kind == "python"]
SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.kind == "shell"]
TEXT_BLOCKS = [b for b in ALL_BLOCKS if b.kind == "text"]


def _ids(blocks: list[Block]) -> list[str]:
    return [b.id for b in blocks]


def test_every_block_says_how_it_is_checked():
    assert PYTHON_BLOCKS and SHELL_BLOCKS and TEXT_BLOCKS
    unknown = [f"{b.id} ({b.kind or 'no kind'})" for b in ALL_BLOCKS if b.kind not in KINDS]
    assert not unknown, f"code blocks must be python, shell or text (see tests/test_docs.py): {unknown}"


# -- python: DAG files --------------------------------------------------------------------------
PARSE_DAGS = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization

results = {}
for folder in sys.argv[1:]:
    bag = DagBag(dag_folder=folder)
    out = {"errors": {str(k): str(v) for k, v in bag.import_errors.items()}, "dags": {}}
    for dag_id, dag in bag.dags.items():
        try:
            DagSerialization.to_dict(dag)
            serialized = None
        except Exception as exc:
            serialized = f"{type(exc).__name__}: {exc}"
        out["dags"][dag_id] = {
            "tasks": {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks},
            "serialization_error": serialized,
        }
    results[folder] = out
print("RESULT " + json.dumps(results))
"""


def parse_dag_folders(folders: list[Path], home: Path) -> dict[str, dict]:
    """Each folder's DAGs and import errors as Airflow's DagBag loads them, all in one Airflow process."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(folders[0]),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    })
    result = subprocess.run([sys.executable, "-c", PARSE_DAGS, *map(str, folders)], env=env, capture_output=True,
                            text=True, timeout=300)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def parsed_blocks(tmp_path_factory) -> dict[str, dict]:
    """What Airflow makes of every python block, each a DAG file in a folder of its own (one process)."""
    root = tmp_path_factory.mktemp("doc_dags")
    folders = {}
    for i, block in enumerate(PYTHON_BLOCKS):
        folder = root / f"block{i}"
        folder.mkdir()
        (folder / "snippet.py").write_text(block.text)
        folders[block.id] = folder
    parsed = parse_dag_folders(list(folders.values()), root)
    return {block_id: parsed[str(folder)] for block_id, folder in folders.items()}


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=_ids(PYTHON_BLOCKS))
def test_python_block_is_a_dag_file_airflow_loads(block, parsed_blocks):
    parsed = parsed_blocks[block.id]
    assert not parsed["errors"], f"{block.id}: {parsed['errors']}"
    assert parsed["dags"], (f"{block.id}: defines no DAG (a python block must be a complete DAG file; Airflow "
                            "reads only files that mention both 'airflow' and 'dag')")
    for dag_id, dag in parsed["dags"].items():
        assert dag["tasks"], f"{block.id}: DAG {dag_id} has no task"
        assert dag["serialization_error"] is None, f"{block.id}: DAG {dag_id}: {dag['serialization_error']}"


def test_readme_dag_wires_the_sensor_to_the_operator(tmp_path):
    """The README's DAG: the sensor comes first, the OPTIMIZE after it."""
    readme = [b for b in PYTHON_BLOCKS if b.path.name == "README.md"]
    assert len(readme) == 1
    assert "wait >> optimize" in readme[0].text and "with DAG(" in readme[0].text


# -- shell: commands that run --------------------------------------------------------------------
def write_events_table(path: Path, commits: int = 12) -> None:
    """A table of small files: ``commits`` appends, each one file in each of 3 ``date`` partitions."""
    import pyarrow as pa
    from deltalake import write_deltalake

    dates = ["2024-01-01", "2024-01-02", "2024-01-03"]
    for i in range(commits):
        n = 30
        ids = list(range(i * n, (i + 1) * n))
        write_deltalake(str(path), pa.table({
            "id": pa.array(ids, pa.int64()),
            "user_id": pa.array([(x * 7919) % 100 for x in ids], pa.int64()),
            "value": pa.array([float(x) for x in ids]),
            "date": pa.array([dates[x % 3] for x in ids]),
        }), mode="append", partition_by=["date"])


def shell_commands(block: Block) -> list[list[str]]:
    commands = []
    for line in block.text.splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            commands.append(argv)
    return commands


def _run_delta_maint(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"})
    return subprocess.run([str(BIN / "delta-maint"), *argv[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _shell_params() -> list:
    """Each shell block; one that runs ``delta-maint`` (a Spark job in a process of its own) is end to end."""
    return [pytest.param(b, id=b.id, marks=[pytest.mark.e2e] if any(argv[0] == "delta-maint"
                                                                    for argv in shell_commands(b)) else [])
            for b in SHELL_BLOCKS]


@pytest.mark.parametrize("block", _shell_params())
def test_shell_block_runs(block, tmp_path):
    commands = shell_commands(block)
    assert commands, f"{block.id}: empty shell block"
    if any(argv[0] == "delta-maint" for argv in commands):
        write_events_table(tmp_path / "events")
    for argv in commands:
        shown = f"{block.id}: {shlex.join(argv)}"
        if argv[0] == "delta-maint":
            result = _run_delta_maint(argv, tmp_path)
            assert result.returncode == 0, f"{shown}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            if "--json" in argv:
                metrics = json.loads(result.stdout.strip().splitlines()[-1])
                assert metrics["status"] != "failed", f"{shown}: {metrics}"
        elif argv[0] == "make":
            assert len(argv) == 2, f"{shown}: one make target per line"
            result = subprocess.run(["make", "-n", argv[1]], cwd=REPO, capture_output=True, text=True)
            assert result.returncode == 0, f"{shown}: {result.stderr}"
        else:
            pytest.fail(f"{shown}: a shell block holds only delta-maint and make commands")


# -- text: synopses checked against the parser -----------------------------------------------------
def job_options() -> dict[str, set[str]]:
    """Every job's long options, from the command line's own parser."""
    from airflow_delta_maint.app.cli import build_parser
    from airflow_delta_maint.app.job_definitions import JOBS as JOB_MODULES

    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return {name: {s for a in sub._actions if a.help != argparse.SUPPRESS  # not the former flags
                   for s in a.option_strings if s.startswith("--")} - {"--help"}
            for name, sub in subparsers.choices.items() if name in JOB_MODULES}  # jobs on a TABLE


def synopses(block: Block) -> dict[str, set[str]]:
    """``{job: options named}`` of the block's ``delta-maint`` synopsis lines."""
    out: dict[str, set[str]] = {}
    for line in block.text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "delta-maint" and words[2] == "TABLE":
            out.setdefault(words[1], set()).update(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line))
    return out


SYNOPSIS_BLOCKS = [b for b in TEXT_BLOCKS if synopses(b)]


@pytest.mark.parametrize("block", SYNOPSIS_BLOCKS, ids=_ids(SYNOPSIS_BLOCKS))
def test_synopsis_names_exactly_the_jobs_options(block):
    jobs = job_options()
    named = synopses(block)
    common = named.pop("JOB", set())
    if common:  # the common options are those every job has
        assert common == set.intersection(*jobs.values()), f"{block.id}: the JOB line"
    assert named, f"{block.id}: no job synopsis"
    for job, options in named.items():
        assert job in jobs, f"{block.id}: delta-maint has no job {job!r} (it has {sorted(jobs)})"
        assert options <= jobs[job], f"{block.id}: {job} has no option {sorted(options - jobs[job])}"
        missing = jobs[job] - options - common
        assert not missing, f"{block.id}: the {job} synopsis leaves out {sorted(missing)}"


def test_readme_synopsis_covers_every_job():
    readme = [b for b in SYNOPSIS_BLOCKS if b.path.name == "README.md"]
    assert len(readme) == 1
    assert set(synopses(readme[0])) - {"JOB"} == set(job_options())


# -- prose: links, file names, numbers ------------------------------------------------------------
def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_relative_links_resolve(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name}: link to {target} (no such file)"
        if anchor:
            assert anchor in _anchors(path), f"{doc.name}: link to {target}#{anchor} (no such heading)"


def _repo_python_files() -> set[str]:
    names: set[str] = set()
    for top in ("airflow_delta_maint", "benchmarks", "scripts", "tests", "dags_example"):
        names.update(p.name for p in (REPO / top).rglob("*.py"))
    return names


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_named_files_exist(doc):
    """Repository files the prose names in backticks (``app/rewrite/zorder.py``, ``snapshot.py``) exist."""
    python_files = _repo_python_files()
    for name in re.findall(r"`([\w./-]+\.py)`", doc.read_text()):
        if "/" in name:
            found = (REPO / name).exists() or (REPO / "airflow_delta_maint" / name).exists()
        else:
            found = name in python_files
        assert found, f"{doc.name} names {name}, which the repository does not have"


def test_readme_counts_the_corpus_tables():
    from tests.conftest import load_manifest

    (count,) = re.findall(r"against (\d+) tables", (REPO / "README.md").read_text())
    assert int(count) == len(load_manifest())


def test_readme_python_version_matches_the_package():
    readme = (REPO / "README.md").read_text()
    (version,) = set(re.findall(r"Python (\d+\.\d+)\+", readme))
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'requires-python = ">={version}"' in pyproject
    major, minor = version.split(".")
    assert f"sys.version_info >= ({major}, {minor})" in (REPO / "Makefile").read_text()
