"""The Hypothesis profiles: under CI two runs draw the same examples (a failure found once is found again);
outside CI they draw new ones; each test's example count scales with the profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hypothesis_profiles import SCALE, examples, profile_name

REPO = Path(__file__).resolve().parents[1]
PROBE = '''
import os
from hypothesis import given, settings, strategies as st
from tests.hypothesis_profiles import examples

@settings(max_examples=examples(20))
@given(st.integers(), st.text(max_size=5))
def test_probe(a, b):
    with open(os.environ["PROBE_OUT"], "a") as fh:
        fh.write(f"{a!r} {b!r}\\n")
'''


def _draws(tmp_path: Path, run: int, **env: str) -> list[str]:
    """The examples one pytest run of the probe draws, in a clone-like folder with an empty example database."""
    probe = REPO / "tests" / f"test_probe_{os.getpid()}_{run}.py"
    out = tmp_path / f"draws{run}.txt"
    probe.write_text(PROBE)
    try:
        environment = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
        environment.update(env, PROBE_OUT=str(out))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                               "-o", "addopts=", str(probe)], cwd=REPO, env=environment, capture_output=True,
                              text=True, timeout=120)
    finally:
        probe.unlink()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out.read_text().splitlines()


def test_ci_runs_draw_the_same_examples(tmp_path):
    first, second = _draws(tmp_path, 1, CI="true"), _draws(tmp_path, 2, CI="true")
    assert len(first) >= 20 and first == second


def test_dev_runs_draw_new_examples(tmp_path):
    first, second = _draws(tmp_path, 1), _draws(tmp_path, 2)
    assert first != second


def test_example_counts_scale_with_the_profile(monkeypatch):
    for name, scale in SCALE.items():
        monkeypatch.setenv("HYPOTHESIS_PROFILE", name)
        assert profile_name() == name and examples(100) == max(3, round(100 * scale))
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "weekly")
    with pytest.raises(ValueError, match="HYPOTHESIS_PROFILE must be one of dev, ci, nightly"):
        profile_name()
