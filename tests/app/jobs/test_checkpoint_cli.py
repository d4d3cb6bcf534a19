"""`delta-maint checkpoint`: writes a checkpoint delta-rs loads with the earlier commits hidden."""

from __future__ import annotations

import json
import shutil

from deltalake import DeltaTable

from airflow_delta_maint.app.cli import run


def test_checkpoint_cli_then_delta_rs_reads_from_it_alone(copy_table, tmp_path, capsys):
    path = copy_table("rs/simple_table")
    before = DeltaTable(str(path))
    files_before, version = sorted(before.file_uris()), before.version()

    code, metrics = run(["checkpoint", str(path), "--json"])
    assert code == 0, metrics
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "committed" and printed["checkpoint_version"] == version
    assert printed["checkpoint"]["num_add_files"] == len(files_before)

    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for f in (path / "_delta_log").glob("*.json"):
        if int(f.name.split(".")[0]) <= version:
            shutil.move(str(f), hidden / f.name)
    after = DeltaTable(str(path))
    assert after.version() == version
    assert sorted(after.file_uris()) == files_before

    code, again = run(["checkpoint", str(path), "--json"])
    assert code == 0 and again["status"] == "skipped" and again["checkpoint"]["already_existed"]


def test_checkpoint_cli_missing_table_is_one_clear_error(tmp_path, capsys):
    code, metrics = run(["checkpoint", str(tmp_path / "nope")])
    assert code == 2 and metrics["status"] == "failed"
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("delta-maint checkpoint: error: table path does not exist")
