"""The install is deterministic: pyspark and pyspark-client (which share the pyspark/ folder) are the
same release, so every file they both ship is the same whichever wheel was unpacked last."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.metadata import distribution
from pathlib import Path

import pyspark


REPO = Path(__file__).resolve().parents[1]


def _recorded(name: str) -> dict[str, str]:
    return {str(f): f.hash.value for f in distribution(name).files or [] if f.hash and str(f).startswith("pyspark/")}


def test_pyspark_and_pyspark_client_are_one_release():
    full, client = distribution("pyspark"), distribution("pyspark-client")
    assert full.version == client.version == pyspark.__version__


def test_shared_files_are_what_both_wheels_recorded():
    full, client = _recorded("pyspark"), _recorded("pyspark-client")
    shared = sorted(set(full) & set(client))
    assert len(shared) > 100  # the Python sources they both ship
    located = distribution("pyspark")
    wrong = []
    for name in shared:
        data = located.locate_file(name).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if not digest == full[name] == client[name]:
            wrong.append(name)
    assert not wrong, f"{len(wrong)} files differ between the two wheels or on disk, e.g. {wrong[:3]}"


def test_the_makefile_installs_with_the_constraints():
    pins = dict(re.findall(r"^([\w-]+)==(\S+)$", (REPO / "constraints.txt").read_text(), re.M))
    assert pins["pyspark"] == pins["pyspark-client"] == pyspark.__version__
    makefile = (REPO / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "uv pip install" in line and " -e " in line]
    assert installs and all("--constraint constraints.txt" in line for line in installs)
