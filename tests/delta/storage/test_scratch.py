"""Scratch folders: a live run's folder is never swept, by this process or another; a folder whose
process was killed outright is removed by the next folder of its kind; folders of another host, or
without a lock file, are left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from airflow_delta_maint.delta.storage import scratch
from airflow_delta_maint.delta.storage.scratch import LOCK_NAME, make_scratch, remove_scratch, sweep_scratch

PREFIX = "delta-test-scratch-"
ROOT = Path(__file__).resolve().parents[3]


def _python(code: str, *args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                            stdout=subprocess.PIPE, text=True, **kw)


def _made_by_a_child(parent: Path) -> tuple[subprocess.Popen, Path]:
    """A child process that makes a scratch folder (with a file in it) and waits."""
    child = _python("""
        import sys, time
        from pathlib import Path
        from airflow_delta_maint.delta.storage.scratch import make_scratch
        path = make_scratch(sys.argv[1], sys.argv[2])
        (Path(path) / "spill.parquet").write_bytes(b"x" * 1000)
        print(path, flush=True)
        time.sleep(600)
    """, PREFIX, str(parent))
    line = child.stdout.readline().strip()
    assert line, "the child made no folder"
    return child, Path(line)


def test_a_folder_is_named_for_the_host_and_locked_until_removed(tmp_path):
    path = Path(make_scratch(PREFIX, tmp_path))
    assert path.parent == tmp_path and path.name.startswith(f"{PREFIX}{scratch._host()}-")
    assert (path / LOCK_NAME).exists() and str(path) in scratch._held
    assert sweep_scratch(PREFIX, tmp_path) == [] and path.is_dir()  # its own folder, held
    remove_scratch(path)
    assert not path.exists() and str(path) not in scratch._held
    remove_scratch(path)  # twice is harmless


def test_a_live_process_keeps_its_folder_and_a_killed_one_loses_it(tmp_path):
    child, theirs = _made_by_a_child(tmp_path)
    try:
        # another process's live folder: neither this process's sweep nor a third process's touches it
        assert sweep_scratch(PREFIX, tmp_path) == [] and (theirs / "spill.parquet").exists()
        third = _python("""
            import sys
            from airflow_delta_maint.delta.storage.scratch import sweep_scratch
            print(len(sweep_scratch(sys.argv[1], sys.argv[2])))
        """, PREFIX, str(tmp_path))
        assert third.communicate(timeout=60)[0].strip() == "0" and theirs.is_dir()
        mine = Path(make_scratch(PREFIX, tmp_path))
        assert theirs.is_dir() and mine.is_dir()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # killed outright: the next folder of the kind removes what it left
    other_kind = Path(make_scratch("delta-test-other-", tmp_path))
    assert theirs.is_dir(), "a folder of another kind swept it"
    again = Path(make_scratch(PREFIX, tmp_path))
    assert not theirs.exists() and again.is_dir() and mine.is_dir()
    for p in (mine, again, other_kind):
        remove_scratch(p)
    assert list(tmp_path.iterdir()) == []


def test_folders_it_cannot_judge_are_left_alone(tmp_path):
    unlocked = tmp_path / f"{PREFIX}{scratch._host()}-old"  # made by an older version: no lock file
    unlocked.mkdir()
    elsewhere = tmp_path / f"{PREFIX}another-host-abc"  # another machine's, on a shared mount
    elsewhere.mkdir()
    (elsewhere / LOCK_NAME).write_text("")
    unrelated = tmp_path / f"{scratch._host()}-{PREFIX}x"
    unrelated.mkdir()
    (unrelated / LOCK_NAME).write_text("")
    assert sweep_scratch(PREFIX, tmp_path) == []
    assert unlocked.is_dir() and elsewhere.is_dir() and unrelated.is_dir()
    # the same folder with an unheld lock file is a dead run's: swept
    dead = tmp_path / f"{PREFIX}{scratch._host()}-dead"
    dead.mkdir()
    (dead / LOCK_NAME).write_text("")
    assert sweep_scratch(PREFIX, tmp_path) == [str(dead)] and not dead.exists()


def test_a_missing_parent_is_made_and_sweeping_it_before_is_harmless(tmp_path):
    parent = tmp_path / "not" / "yet"
    assert sweep_scratch(PREFIX, parent) == []
    path = make_scratch(PREFIX, parent)
    assert Path(path).parent == parent
    remove_scratch(path)
