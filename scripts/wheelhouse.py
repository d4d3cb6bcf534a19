"""Wheels for the pinned packages that the index serves only as source (pyspark, pyspark-client), built once per
machine into a folder the installs read with ``--find-links``.

Without it every fresh virtualenv (``make``'s, the lowest Airflow's, each of the install tests') builds pyspark
from its 450 MB source again, and each build can leave another 1.4 GB revision in uv's cache.

Usage: ``python scripts/wheelhouse.py FOLDER`` (the Makefile's ``WHEELS``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the pins of constraints.txt published as source distributions only
SOURCE_ONLY = ("pyspark", "pyspark-client")


def pins() -> dict[str, str]:
    """The versions constraints.txt pins, by distribution name."""
    return dict(re.findall(r"^([\w-]+)==(\S+)$", (REPO / "constraints.txt").read_text(), re.M))


def wheel_name(name: str, version: str) -> str:
    """The file name pip gives the universal wheel of ``name`` at ``version``."""
    return f"{name.replace('-', '_')}-{version}-py2.py3-none-any.whl"


def ensure(folder: Path) -> list[Path]:
    """The source-only pins' wheels in ``folder``, built (and other versions of them removed) when missing."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {name: pins()[name] for name in SOURCE_ONLY}
    missing = [f"{name}=={version}" for name, version in wanted.items()
               if not (folder / wheel_name(name, version)).exists()]
    if missing:
        print(f"building wheels once for this machine: {' '.join(missing)} (into {folder})", file=sys.stderr)
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir",
                            "--disable-pip-version-check", "--wheel-dir", scratch, *missing], check=True)
            for built in Path(scratch).glob("*.whl"):
                built.replace(folder / built.name)
    for name, version in wanted.items():
        for old in folder.glob(f"{name.replace('-', '_')}-*.whl"):
            if old.name != wheel_name(name, version):
                old.unlink()
    return [folder / wheel_name(name, version) for name, version in wanted.items()]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/wheelhouse.py FOLDER")
    for wheel in ensure(Path(sys.argv[1]).expanduser()):
        if not wheel.exists():
            sys.exit(f"pip built no {wheel.name}")
