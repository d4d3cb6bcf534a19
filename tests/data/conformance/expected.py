"""The expected outcome of each maintenance job on each corpus table (``expected.json``).

The corpus tests assert these outcomes exactly; they never derive them from the code under test.
This module writes the file by running the jobs on copies of the tables, the way the tests run
them. It is run once, and again only for a deliberate change of behaviour, whose diff of the file
is reviewed like code (see README.md):

    .venv/bin/python -m tests.data.conformance.expected              # every job
    .venv/bin/python -m tests.data.conformance.expected --job vacuum --table rs/simple_table

The tests import the small helpers at the top (loading the file, the outcome fields); the runs
import the test modules' readers lazily, so both measure rows and files the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from tests.conftest import CORPUS, corpus_path, load_manifest, restore_dv_file_names

EXPECTED_FILE = CORPUS / "expected.json"

# What each job section records and on which tables (the keys of the file's "about").
ABOUT = {
    "optimize": "every table: `delta-maint optimize TABLE --json` (default bin-packing) on a copy whose DV files "
                "have their protocol names",
    "vacuum": "every table: `delta-maint vacuum TABLE --json` (full mode, default retention) on a copy whose "
              "data files are 30 days old, with a 30-day-old orphan at the root and in the first file's folder",
    "checkpoint": "every table delta-rs 1.6.0 loaded: write_checkpoint at the latest version, any checkpoint "
                  "already there removed, 'now' set to expire the older half of the tombstones",
    "compact-log": "every table: compact_log(interval=2)",
}
# The tables a job section covers (the checkpoint is read back by delta-rs: the tables it loads).
SELECTION: dict[str, Callable[[dict], bool]] = {
    "optimize": lambda oracle: True,
    "vacuum": lambda oracle: True,
    "checkpoint": lambda oracle: bool(oracle.get("loaded")),
    "compact-log": lambda oracle: True,
}
OUTCOMES = ("committed", "skipped", "refused", "invalid", "log-only")
# The fields each outcome records, per job (committed and skipped share theirs).
_WRITTEN = {
    "optimize": ["version_read", "version_committed", "files_before", "files_after", "removed_files",
                 "added_files", "deletion_vectors_removed", "rows_before", "rows_after", "partitions"],
    "vacuum": ["version_read", "version_committed", "deleted_files", "files", "rows"],
    "checkpoint": ["kind", "version", "add_files", "actions", "tombstones_kept", "rows_before", "rows_after"],
    "compact-log": ["version_read", "windows_written", "windows_skipped"],
}
FIELDS: dict[str, dict[str, list[str]]] = {
    job: {"committed": fields, "skipped": fields + (["reason"] if job == "optimize" else []),
          "refused": ["reason"], "invalid": ["error_type", "error"], "log-only": ["files", "missing"]}
    for job, fields in _WRITTEN.items()
}
TABLE = "<table>"  # stands for the copy's location in recorded error texts


def load_expected(job: str) -> dict[str, dict[str, Any]]:
    """The recorded outcome of ``job`` on each table it covers."""
    with open(EXPECTED_FILE) as fh:
        return json.load(fh)["jobs"][job]


def scrub(text: str, path: Path | str) -> str:
    """An error text with the copy's location replaced, so it compares across folders."""
    for form in (str(path), quote(str(path))):
        text = text.replace(form, TABLE)
    return text


def missing_data_files(snapshot) -> int:
    """How many data files the snapshot's log references are not in its folder."""
    storage = snapshot.storage
    missing = 0
    for add in snapshot.add_actions():
        key = storage.key_for_path(add["path"])
        if key is None or not os.path.exists(storage.local_path(key)):
            missing += 1
    return missing


def partition_label(values: dict[str, Any] | None) -> str:
    if not values:
        return "(unpartitioned)"
    return "/".join(f"{k}={'<null>' if v is None else v}" for k, v in sorted(values.items()))


def files_per_partition(snapshot) -> Counter:
    return Counter(partition_label(a.get("partitionValues")) for a in snapshot.add_actions())


def changed_partitions(before: Counter, after: Counter) -> dict[str, list[int]]:
    """Each partition whose file count changed: [files before, files after]."""
    return {k: [before[k], after[k]] for k in sorted(set(before) | set(after)) if before[k] != after[k]}


def compaction_windows(m: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """The windows a run wrote ({start, end, commits, actions}) and skipped ({start, end, reason})."""
    written = [{"start": w["start"], "end": w["end"], "commits": w["numCommits"], "actions": w["numActions"]}
               for w in m["windows_written"]]
    skipped = [{"start": w["start"], "end": w["end"], "reason": w["reason"]} for w in m["windows_skipped"]]
    return written, skipped


def render(data: dict[str, Any]) -> str:
    """The file's text: sorted keys, one line per table (so a diff names the tables that changed)."""
    lines = ["{", ' "about": {']
    lines.append(",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(data["about"].items())))
    lines += [" },", ' "jobs": {']
    jobs = []
    for job, tables in sorted(data["jobs"].items()):
        body = ",\n".join(f"   {json.dumps(name)}: {json.dumps(entry, sort_keys=True)}"
                          for name, entry in sorted(tables.items()))
        jobs.append(f"  {json.dumps(job)}: {{\n{body}\n  }}" if tables else f"  {json.dumps(job)}: {{}}")
    lines.append(",\n".join(jobs))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


# -- the runs --------------------------------------------------------------------------------------
def _copy(name: str, work: Path, dv_names: bool) -> Path:
    dest = work / name.replace("/", "__")
    shutil.copytree(corpus_path(name), dest)
    if dv_names:
        restore_dv_file_names(dest)
    return dest


def _failure(m: dict, path: Path) -> dict[str, Any]:
    if m.get("error_type") == "UnsupportedFeatureError":
        return {"outcome": "refused", "reason": scrub(m["error"], path)}
    return {"outcome": "invalid", "error_type": m["error_type"], "error": scrub(m["error"], path)}


def _load_copy(name: str, work: Path):
    """A copy of the table (DV file names restored), our snapshot of it (None for a log we reject) and how many
    of its data files the corpus lacks."""
    from airflow_delta_maint.delta.errors import DeltaError
    from airflow_delta_maint.delta.log.snapshot import Snapshot

    path = _copy(name, work, dv_names=True)
    try:
        snap = Snapshot.load(str(path))
    except DeltaError:
        snap = None
    return path, snap, (missing_data_files(snap) if snap is not None else 0)


def _refused_invalid_or_log_only(name: str, code: int, m: dict, path: Path, snap, missing: int) -> dict | None:
    """The entry of a run that failed (refused or invalid) or found the corpus without the table's data
    (log-only); None when the run's own outcome is the entry."""
    if code:
        assert code == 2 and m["status"] == "failed", m
        failure = _failure(m, path)
        assert snap is not None or failure["outcome"] == "invalid", (name, m)
        if failure["outcome"] == "refused" or not missing:
            return failure
    if missing:
        return {"outcome": "log-only", "files": snap.num_files, "missing": missing}
    return None


def run_optimize(name: str, oracle: dict, work: Path) -> dict[str, Any]:
    from airflow_delta_maint.app import cli
    from airflow_delta_maint.delta.log.snapshot import Snapshot
    from tests.app.jobs.test_optimize import rows_deltars, rows_ours

    path, snap, missing = _load_copy(name, work)
    rows_before = None
    if snap is not None and not missing:
        rows_before = sum((rows_deltars(path) if oracle.get("readable") else rows_ours(path)).values())
    code, m = cli.run(["optimize", str(path), "--json"])
    ended = _refused_invalid_or_log_only(name, code, m, path, snap, missing)
    if ended is not None:
        return ended
    assert m["status"] in ("committed", "skipped"), m
    after = Snapshot.load(str(path))
    rows_after = sum((rows_deltars(path) if oracle.get("readable") else rows_ours(path)).values())
    entry = {"outcome": m["status"], "version_read": m["version_read"], "version_committed": m.get("version_committed"),
             "files_before": snap.num_files, "files_after": after.num_files,
             "removed_files": m["numRemovedFiles"], "added_files": m["numAddedFiles"],
             "deletion_vectors_removed": m.get("numDeletionVectorsRemoved", 0),
             "rows_before": rows_before, "rows_after": rows_after,
             "partitions": changed_partitions(files_per_partition(snap), files_per_partition(after))}
    if m["status"] == "skipped":
        entry["reason"] = m["reason"]
    return entry


def run_vacuum(name: str, oracle: dict, work: Path) -> dict[str, Any]:
    from airflow_delta_maint.app import cli
    from airflow_delta_maint.delta.log.snapshot import Snapshot
    from tests.app.jobs.test_vacuum import corpus_vacuum_copy, row_count, row_tables

    path, snap, missing = _load_copy(name, work)
    corpus_vacuum_copy(path, snap)
    rows = None
    if snap is not None and not missing:
        rows = sum(t.num_rows for _, t in row_tables(path)) if oracle.get("readable") else row_count(snap)
    code, m = cli.run(["vacuum", str(path), "--json"])
    ended = _refused_invalid_or_log_only(name, code, m, path, snap, missing)
    if ended is not None:
        return ended
    latest = Snapshot.load(str(path))
    return {"outcome": m["status"], "version_read": m["version_read"], "version_committed": m["version_committed"],
            "deleted_files": m["numDeletedFiles"], "files": latest.num_files,
            "rows": rows}


def run_checkpoint(name: str, oracle: dict, work: Path) -> dict[str, Any]:
    from airflow_delta_maint.delta.errors import UnsupportedFeatureError
    from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
    from airflow_delta_maint.delta.log.snapshot import Snapshot
    from tests.delta.log.test_checkpoint import (
        _hide_log_up_to, _logical_rows, _now_keeping_half, kept_tombstones, remove_checkpoints_at)

    path = _copy(name, work, dv_names=False)
    before = Snapshot.load(str(path))
    remove_checkpoints_at(path, before.version)
    now_ms = _now_keeping_half(before)
    try:
        metrics = write_checkpoint(before, now_ms=now_ms)
    except UnsupportedFeatureError as e:
        return {"outcome": "refused", "reason": scrub(str(e), path)}
    _hide_log_up_to(path, before.version, keep=metrics["path"])
    after = Snapshot.load(str(path))
    return {"outcome": "committed", "kind": metrics["kind"], "version": metrics["version"],
            "add_files": metrics["num_add_files"], "actions": metrics["num_actions"],
            "tombstones_kept": kept_tombstones(before, now_ms).num_rows,
            "rows_before": _logical_rows(before), "rows_after": _logical_rows(after)}


def run_compact_log(name: str, oracle: dict, work: Path) -> dict[str, Any]:
    from airflow_delta_maint.delta.errors import DeltaError, UnsupportedFeatureError
    from airflow_delta_maint.delta.log.compaction import compact_log

    path = _copy(name, work, dv_names=False)
    try:
        m = compact_log(str(path), interval=2)
    except UnsupportedFeatureError as e:
        return {"outcome": "refused", "reason": scrub(str(e), path)}
    except DeltaError as e:
        return {"outcome": "invalid", "error_type": type(e).__name__, "error": scrub(str(e), path)}
    written, skipped = compaction_windows(m)
    return {"outcome": m["status"], "version_read": m["version_read"], "windows_written": written,
            "windows_skipped": skipped}


RUNS: dict[str, Callable[[str, dict, Path], dict[str, Any]]] = {
    "optimize": run_optimize, "vacuum": run_vacuum, "checkpoint": run_checkpoint, "compact-log": run_compact_log}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", action="append", choices=sorted(RUNS), help="only this job (repeatable)")
    parser.add_argument("--table", action="append", help="only this table (repeatable)")
    args = parser.parse_args(argv)
    jobs = args.job or sorted(RUNS)
    manifest = {t["table"]: t["oracle"] for t in load_manifest()}
    unknown = set(args.table or ()) - set(manifest)
    if unknown:
        parser.error(f"not in the manifest: {sorted(unknown)}")
    data = {"about": dict(ABOUT), "jobs": {job: {} for job in RUNS}}
    if EXPECTED_FILE.exists():
        with open(EXPECTED_FILE) as fh:
            data["jobs"].update(json.load(fh)["jobs"])
    else:
        EXPECTED_FILE.write_text(render(data))  # the test modules the runs import read it

    from airflow_delta_maint.app.spark_session import get_spark

    spark = get_spark(master="local[2]", app_name="airflow-delta-maint-expected")
    try:
        for job in jobs:
            selected = {n: o for n, o in manifest.items() if SELECTION[job](o)}
            section = {n: e for n, e in data["jobs"][job].items() if n in selected}
            for name in sorted(args.table or selected):
                if name not in selected:
                    continue
                started = time.monotonic()
                with tempfile.TemporaryDirectory() as work, contextlib.redirect_stdout(io.StringIO()):
                    section[name] = RUNS[job](name, selected[name], Path(work))
                print(f"{job} {name}: {section[name]['outcome']} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
            data["jobs"][job] = section
    finally:
        spark.stop()
    EXPECTED_FILE.write_text(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
