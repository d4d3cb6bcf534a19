"""tests/data/conformance/expected.json, the recorded outcome of each job on each corpus table: one
entry for every table a job's corpus test runs on and no other, in the fields its outcome needs, in
the file's canonical form, and consistent with the manifest (delta-rs's answers), with the
hand-written deletion-vector counts and across jobs. The job tests assert these outcomes; this
module keeps the file itself honest."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import CORPUS_DV_TABLES, load_manifest
from tests.data.conformance.expected import ABOUT, EXPECTED_FILE, FIELDS, OUTCOMES, SELECTION, render

DATA = json.loads(EXPECTED_FILE.read_text())
JOBS = sorted(SELECTION)
MANIFEST = {t["table"]: t["oracle"] for t in load_manifest()}
# The outcomes a job can have: the checkpoint reads no data file and is only run on logs delta-rs
# loads; log compaction reads no data file either.
ALLOWED = {"optimize": set(OUTCOMES), "vacuum": {"committed", "refused", "invalid", "log-only"},
           "checkpoint": {"committed", "refused"}, "compact-log": {"committed", "skipped", "refused", "invalid"}}


def test_the_file_is_in_its_canonical_form() -> None:
    """Sorted keys, one line per table: what the generator writes, so every change is a readable diff."""
    assert EXPECTED_FILE.read_text() == render(DATA)
    assert DATA["about"] == ABOUT and sorted(DATA["jobs"]) == JOBS


@pytest.mark.parametrize("job", JOBS)
def test_every_table_has_an_entry_and_no_other(job: str) -> None:
    selected = {n for n, o in MANIFEST.items() if SELECTION[job](o)}
    recorded = set(DATA["jobs"][job])
    assert not selected - recorded, f"tables without an expected {job} outcome: {sorted(selected - recorded)}"
    assert not recorded - selected, f"stale {job} entries: {sorted(recorded - selected)}"


@pytest.mark.parametrize("job", JOBS)
def test_entries_hold_the_fields_of_their_outcome(job: str) -> None:
    for name, entry in DATA["jobs"][job].items():
        assert entry["outcome"] in ALLOWED[job], (name, entry)
        assert set(entry) == {"outcome", *FIELDS[job][entry["outcome"]]}, (name, entry)
        for key, value in entry.items():
            if key.startswith(("rows", "files", "removed", "added", "deleted", "deletion", "version", "actions",
                               "tombstones", "missing")) and value is not None:
                assert isinstance(value, int) and value >= 0, (name, key, value)


@pytest.mark.parametrize("job", ["checkpoint", "optimize", "vacuum"])
def test_row_counts_are_those_delta_rs_read(job: str) -> None:
    """Where delta-rs read the whole table, every recorded row count is its count."""
    compared = 0
    for name, entry in DATA["jobs"][job].items():
        rows = MANIFEST[name].get("rows")
        for key in ("rows", "rows_before", "rows_after"):
            if entry.get(key) is not None and rows is not None:
                assert entry[key] == rows, (name, key, entry[key], rows)
                compared += 1
    assert compared > 0


def test_optimize_entries_add_up() -> None:
    for name, e in DATA["jobs"]["optimize"].items():
        if e["outcome"] not in ("committed", "skipped"):
            continue
        assert e["rows_after"] == e["rows_before"], name
        assert e["files_after"] == e["files_before"] - e["removed_files"] + e["added_files"], name
        assert sum(before - after for before, after in e["partitions"].values()) == \
            e["removed_files"] - e["added_files"], name
        if e["outcome"] == "skipped":
            assert e["removed_files"] == e["added_files"] == e["deletion_vectors_removed"] == 0, name
            assert e["version_committed"] is None and e["partitions"] == {}, name
        else:
            assert e["version_committed"] == e["version_read"] + 1 and e["removed_files"] > 0, name
            # a rewrite compacts some partition or purges deletion vectors
            assert e["partitions"] or e["deletion_vectors_removed"], name


def test_optimize_purges_the_deletion_vectors_of_every_dv_table() -> None:
    """The DV tables' live row counts are written by hand (tests/conftest.py), from their histories."""
    for name, (live, _, _) in CORPUS_DV_TABLES.items():
        e = DATA["jobs"]["optimize"][name]
        assert e["outcome"] == "committed" and e["deletion_vectors_removed"] > 0, name
        assert e["rows_before"] == e["rows_after"] == live, name


def test_vacuum_commits_start_and_end() -> None:
    for name, e in DATA["jobs"]["vacuum"].items():
        if e["outcome"] == "committed":
            assert e["version_committed"] == e["version_read"] + 2, name
            assert e["deleted_files"] >= 1, name  # at least the orphan at the root


@pytest.mark.parametrize("job", JOBS)
def test_refusals_name_what_the_protocol_says(job: str) -> None:
    """A refusal names the table's protocol version or a feature the job does not support."""
    refused = {n: e["reason"] for n, e in DATA["jobs"][job].items() if e["outcome"] == "refused"}
    assert refused
    for name, reason in refused.items():
        assert re.match(rf"cannot run {job} on this table: it uses .*(feature|minReaderVersion|minWriterVersion)",
                        reason), (name, reason)


def test_a_log_one_job_rejects_every_job_rejects_and_delta_rs_too() -> None:
    invalid = {job: {n: (e["error_type"], e["error"]) for n, e in DATA["jobs"][job].items()
                     if e["outcome"] == "invalid"} for job in JOBS}
    assert invalid["optimize"]
    assert invalid["vacuum"] == invalid["compact-log"] == invalid["optimize"]
    assert not invalid["checkpoint"]
    for name in invalid["optimize"]:
        assert MANIFEST[name]["loaded"] is False, name


def test_log_only_tables_agree_across_jobs() -> None:
    """A table is log-only for every job that reads its data files and does not refuse it."""
    optimize, vacuum = DATA["jobs"]["optimize"], DATA["jobs"]["vacuum"]
    for name in set(optimize) | set(vacuum):
        a, b = optimize[name], vacuum[name]
        if "log-only" in (a["outcome"], b["outcome"]) and "refused" not in (a["outcome"], b["outcome"]):
            assert a == b, name
