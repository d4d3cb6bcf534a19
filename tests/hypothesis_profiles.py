"""Hypothesis profiles: how many examples the property tests draw, and whether a run can be replayed.

- ``dev`` (the default outside CI): a tenth of each test's examples (at least 3), for a quick answer;
- ``ci`` (the default when ``CI`` is set): each test's own count, derandomized by a fixed seed
  (:data:`CI_SEED`, given to Hypothesis' pytest plugin), so that every run draws the same examples and a
  failure found once is found again; the example database is kept in the clone's ``.cache/hypothesis``
  (Hypothesis' own ``derandomize`` setting would turn the database off) and a failure prints its
  ``@reproduce_failure`` blob;
- ``nightly`` (``make test-nightly``): ten times each test's count, random, with the same database.

``HYPOTHESIS_PROFILE`` picks one. Tests give their example count through :func:`examples`, which scales it.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

#: profile -> the factor each test's own example count is multiplied by
SCALE = {"dev": 0.1, "ci": 1.0, "nightly": 10.0}
#: the seed of every property test under the ``ci`` profile
CI_SEED = 20261127


def profile_name() -> str:
    """The profile of this run: ``HYPOTHESIS_PROFILE``, else ``ci`` under CI, else ``dev``."""
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    if name not in SCALE:
        raise ValueError(f"HYPOTHESIS_PROFILE must be one of {', '.join(SCALE)}, not {name!r}")
    return name


def load_profile(repo: Path) -> str:
    """Register the three profiles and load this run's."""
    database = DirectoryBasedExampleDatabase(str(repo / ".cache" / "hypothesis"))
    settings.register_profile("dev", max_examples=25, database=database, deadline=None)
    settings.register_profile("ci", max_examples=100, database=database, deadline=None, print_blob=True)
    settings.register_profile("nightly", max_examples=1000, database=database, deadline=None, print_blob=True)
    name = profile_name()
    settings.load_profile(name)
    return name


def examples(count: int) -> int:
    """A test's example count under this run's profile (never fewer than 3)."""
    return max(3, round(count * SCALE[profile_name()]))
