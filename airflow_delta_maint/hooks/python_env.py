"""The application's Python runtime, packed to ship with a submission (``--archives ENV#environment``).

Spark's executors run the application's task functions in Python workers, which import pyarrow,
numpy, obstore and pyroaring. A cluster whose machines do not share the Airflow worker's Python has
none of them. As PySpark documents for venv-pack and conda-pack archives, the submission then
carries the packages along: an archive that Spark unpacks as ``./environment`` in every executor's
(and, in cluster deploy mode, the driver's) working folder, run as
``spark.pyspark.python=./environment/bin/python``.

The archive holds exactly the application's runtime dependencies (:data:`RUNTIME_DISTRIBUTIONS`
and what they require, at the versions installed on this worker) for one Python version and one
platform, and a small launcher ``bin/python``: it runs the machine's own Python of that version
(``python3.11`` on ``PATH``, or ``$DELTA_MAINT_BASE_PYTHON``) with the packed packages first on its
path. The cluster provides the interpreter and PySpark (every Spark install does); the archive
provides the rest. When no Python of the right version is there, the launcher says so on one line.

Why not venv-pack or PEX: a venv-pack archive's ``bin/python`` is a link to the interpreter that
built it (here the Airflow worker's own, the very path a cluster does not have) and it packs the
worker's platform only; a PEX hides the cluster's PySpark unless it carries its own copy. The
standard library (``tarfile``) and pip do all this needs: the worker's installed files when the
cluster runs the worker's Python version and platform (no download, nothing to resolve), else
``pip install --target --platform --python-version --only-binary=:all:`` of the same versions.

An archive is built once per dependency set (versions, Python version, platform) and cached under
the hook's cache folder, which may be on storage shared by the workers: builds take a lock and
land by rename, so workers never rebuild what another built, and a task never builds at all once
the archive exists. ``python -m airflow_delta_maint.hooks.python_env build`` builds one ahead of
time (to upload to HDFS, S3 or GCS and name with ``[delta_maint] python_env_uri``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata as metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Mapping

#: what the application's Spark tasks import besides the standard library and PySpark
RUNTIME_DISTRIBUTIONS = ("pyarrow", "numpy", "obstore", "pyroaring")
#: what a Spark Connect session adds: a Spark Connect server's Python has pyarrow already (its
#: ``mapInArrow`` workers import it before any task code runs), so the environment brings the rest
#: (numpy too, though the server's pyarrow must have found one of its own: see ``connect_tasks``)
CONNECT_DISTRIBUTIONS = ("numpy", "obstore", "pyroaring")
#: the folder name Spark unpacks the archive to (``--archives ENV#environment``)
ALIAS = "environment"
#: the executors' interpreter inside the unpacked archive
EXECUTOR_PYTHON = f"./{ALIAS}/bin/python"
#: bump when the archive's layout changes: a new layout is a new cache entry
FORMAT = 1
#: what the archive leaves out of the packages: test suites, C headers and sources, install records
_SKIPPED_DIRS = frozenset({"tests", "include", "__pycache__"})
_SKIPPED_SUFFIXES = (".pyx", ".pxd", ".pxi", ".h", ".hpp", ".c", ".cc", ".cpp")
_SKIPPED_DIST_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
_PREFIX = "delta-maint-python-"


class PythonEnvError(RuntimeError):
    """The environment cannot be built (one line: what failed and what to configure)."""


@dataclass(frozen=True)
class EnvTarget:
    """The cluster's Python: ``python`` (``"3.11"``) and wheel ``platforms`` (empty: this worker's).

    An empty ``platforms`` with this worker's Python version packs the installed files; anything else
    downloads wheels for the target with pip.
    """

    python: str = field(default_factory=lambda: "%d.%d" % sys.version_info[:2])
    platforms: tuple[str, ...] = ()

    @property
    def is_this_worker(self) -> bool:
        return not self.platforms and self.python == "%d.%d" % sys.version_info[:2]

    @property
    def platform_label(self) -> str:
        if self.platforms:
            return "+".join(self.platforms)
        return sysconfig.get_platform().replace("-", "_")

    @classmethod
    def parse(cls, python: str | None, platforms: str | Iterable[str] | None) -> "EnvTarget":
        """A target from settings; blank values mean this worker's."""
        version = (python or "").strip() or "%d.%d" % sys.version_info[:2]
        if not re.fullmatch(r"3\.\d+", version):
            raise PythonEnvError(f"the cluster's Python version must look like 3.11, got {python!r}")
        if isinstance(platforms, str):
            platforms = platforms.split(",")
        plats = tuple(p.strip() for p in (platforms or ()) if p and p.strip())
        return cls(version, plats)


@dataclass
class PackedEnv:
    """A built (or found) archive and what it holds."""

    path: Path
    target: EnvTarget
    packages: dict[str, str]
    #: seconds this call spent building it (0.0: it was in the cache)
    build_s: float = 0.0

    @property
    def spark_archive(self) -> str:
        """The ``--archives`` entry."""
        return f"{self.path}#{ALIAS}"


# -- what goes in -------------------------------------------------------------------------------
def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_env(python: str) -> dict[str, str]:
    env = {"python_version": python, "python_full_version": f"{python}.0",
           "implementation_name": "cpython", "platform_python_implementation": "CPython",
           "sys_platform": "linux", "os_name": "posix", "extra": ""}
    return env


def runtime_packages(target: EnvTarget | None = None,
                     roots: Iterable[str] = RUNTIME_DISTRIBUTIONS) -> dict[str, str]:
    """``{distribution: version}``: ``roots`` and their requirements (markers evaluated for the
    target's Python), at the versions installed on this worker."""
    from packaging.requirements import Requirement

    target = target or EnvTarget()
    env = _marker_env(target.python)
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = _canonical(name)
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise PythonEnvError(
                f"the application needs {name}, which is not installed on this worker: install "
                "airflow-delta-maint with its dependencies") from None
        found[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return dict(sorted(found.items()))


def cache_key(packages: dict[str, str], target: EnvTarget) -> str:
    text = json.dumps({"format": FORMAT, "python": target.python, "platform": target.platform_label,
                       "packages": packages, "launcher": launcher(target.python)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def archive_name(packages: dict[str, str], target: EnvTarget) -> str:
    return f"{_PREFIX}{target.python}-{target.platform_label}-{cache_key(packages, target)}.tar.gz"


def _skipped(rel: PurePosixPath) -> bool:
    parts = rel.parts
    if not parts or parts[0] == ".." or rel.is_absolute():
        return True  # console scripts and data outside site-packages
    if parts[0].endswith(".dist-info"):
        return parts[-1] in _SKIPPED_DIST_FILES
    return any(p in _SKIPPED_DIRS for p in parts[:-1]) or rel.name.endswith(_SKIPPED_SUFFIXES)


def _stage_installed(packages: dict[str, str], site: Path) -> None:
    """Copy the installed files of ``packages`` (with their bytecode) into ``site``."""
    for name in packages:
        dist = metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for entry in dist.files or []:
            rel = PurePosixPath(str(entry))
            if _skipped(rel):
                continue
            source = base / rel
            if not source.is_file():
                continue
            dest = site / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
            if rel.suffix == ".py":  # this interpreter's bytecode: the same Python version runs it
                tag = sys.implementation.cache_tag
                pyc = source.parent / "__pycache__" / f"{rel.stem}.{tag}.pyc"
                if pyc.is_file():
                    (dest.parent / "__pycache__").mkdir(exist_ok=True)
                    shutil.copy2(pyc, dest.parent / "__pycache__" / pyc.name)


def _stage_with_pip(packages: dict[str, str], target: EnvTarget, site: Path) -> None:
    """pip-install the pinned ``packages`` as wheels for the target into ``site``."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
           "--target", str(site), "--only-binary=:all:", "--no-deps", "--no-compile",
           "--implementation", "cp", "--python-version", target.python]
    for plat in expand_platforms(target.platforms):
        cmd += ["--platform", plat]
    cmd += [f"{name}=={version}" for name, version in packages.items()]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
        cause = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1] if lines else "pip failed")
        raise PythonEnvError(
            f"cannot build the Python environment for Python {target.python} on {target.platform_label}: {cause}")
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts, with this worker's shebang
    for path in sorted(site.rglob("*"), reverse=True):
        rel = PurePosixPath(path.relative_to(site).as_posix())
        if path.is_file() and _skipped(rel):
            path.unlink()
        elif path.is_dir() and (path.name in _SKIPPED_DIRS or not any(path.iterdir())):
            shutil.rmtree(path, ignore_errors=True)


_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def expand_platforms(platforms: Iterable[str]) -> list[str]:
    """pip's ``--platform`` values for the given tags: pip matches each tag exactly, while a machine
    with glibc 2.28 also runs wheels for every older glibc, so ``manylinux_2_28_x86_64`` brings
    ``manylinux_2_27_x86_64`` ... ``manylinux_2_5_x86_64`` and the legacy names along."""
    out: list[str] = []
    for plat in platforms:
        match = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", plat)
        if not match:
            out.append(plat)
            continue
        major, minor, arch = int(match.group(1)), int(match.group(2)), match.group(3)
        for m in range(minor, 4, -1) if major == 2 else [minor]:
            out.append(f"manylinux_{major}_{m}_{arch}")
            legacy = _LEGACY_MANYLINUX.get((major, m))
            if legacy and (legacy != "manylinux2010" or arch in ("x86_64", "i686")) \
                    and (legacy != "manylinux1" or arch in ("x86_64", "i686")):
                out.append(f"{legacy}_{arch}")
    return list(dict.fromkeys(out))


def launcher(python: str) -> str:
    """``bin/python``: the machine's Python ``python`` with the archive's packages first on its path."""
    return f"""#!/bin/sh
# airflow-delta-maint environment: this machine's Python {python}, with the packages of this
# archive first on its path. $DELTA_MAINT_BASE_PYTHON names the interpreter when python{python}
# is not on PATH.
case $0 in */*) bin_dir=${{0%/*}} ;; *) bin_dir=. ;; esac
env_dir=$(CDPATH= cd -- "$bin_dir/.." && pwd -P) || exit 1
for py in "${{DELTA_MAINT_BASE_PYTHON:-}}" python{python} python3 python; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    found=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
    if [ "$found" = "{python}" ]; then
        PYTHONPATH="$env_dir/site-packages${{PYTHONPATH:+:$PYTHONPATH}}"
        export PYTHONPATH
        exec "$py" "$@"
    fi
done
host=$(uname -n 2>/dev/null) || host="this machine"
echo "delta-maint environment error: no Python {python} on $host (neither \\$DELTA_MAINT_BASE_PYTHON nor\
 python{python}, python3 or python on PATH): install Python {python} there, or build the environment for the\
 cluster's Python version ([delta_maint] python_env_python_version)" >&2
exit 127
"""


def _write_archive(stage: Path, out: Path, compresslevel: int) -> None:
    def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(out, "w:gz", compresslevel=compresslevel) as tar:
        for path in sorted(stage.rglob("*")):
            tar.add(path, arcname=path.relative_to(stage).as_posix(), recursive=False, filter=reset)


# -- the cache --------------------------------------------------------------------------------
def build_python_env(cache_dir: str | os.PathLike, target: EnvTarget | None = None,
                     roots: Iterable[str] = RUNTIME_DISTRIBUTIONS, compresslevel: int = 6) -> PackedEnv:
    """
    The packed environment for ``target`` (default: this worker's Python and platform), from the
    cache, or built into it.

    :param cache_dir: the cache folder (may be shared by workers).
    :param target: the cluster's Python version and platform.
    :param roots: the distributions to pack (their requirements come along).
    :param compresslevel: gzip level of the archive.
    :raises PythonEnvError: when it cannot be built (one line saying why).
    """
    target = target or EnvTarget()
    packages = runtime_packages(target, roots)
    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / archive_name(packages, target)
    if out.exists():
        return PackedEnv(out, target, packages)
    started = time.perf_counter()
    with open(folder / f".{out.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build by another task (or worker, on shared storage) lands first
        if out.exists():
            return PackedEnv(out, target, packages)
        with tempfile.TemporaryDirectory(prefix=".delta-maint-env-", dir=folder) as tmp:
            stage = Path(tmp) / "env"
            site = stage / "site-packages"
            site.mkdir(parents=True)
            if target.is_this_worker:
                _stage_installed(packages, site)
            else:
                _stage_with_pip(packages, target, site)
            (stage / "bin").mkdir()
            script = stage / "bin" / "python"
            script.write_text(launcher(target.python))
            script.chmod(0o755)
            for alias in ("python3", f"python{target.python}"):
                (stage / "bin" / alias).symlink_to("python")
            (stage / "delta-maint-env.json").write_text(json.dumps({
                "python": target.python, "platform": target.platform_label, "packages": packages,
                "format": FORMAT, "built_on": sys.platform, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                     time.gmtime())}, indent=1))
            part = Path(tmp) / out.name
            _write_archive(stage, part, compresslevel)
            os.replace(part, out)
        _prune(folder, keep=out)
    return PackedEnv(out, target, packages, build_s=time.perf_counter() - started)


def _prune(folder: Path, keep: Path, max_age_s: float = 86400.0) -> None:
    """Remove archives of other dependency sets once they are a day old (no submit still reads them)."""
    now = time.time()
    for old in folder.glob(f"{_PREFIX}*.tar.gz"):
        with contextlib.suppress(OSError):
            if old != keep and now - old.stat().st_mtime > max_age_s:
                old.unlink()
                Path(folder, f".{old.name}.lock").unlink(missing_ok=True)


def read_manifest(archive: str | os.PathLike) -> dict:
    """The manifest (``delta-maint-env.json``) of a built archive."""
    with tarfile.open(archive, "r:gz") as tar:
        member = tar.extractfile("delta-maint-env.json")
        assert member is not None
        return json.load(io.TextIOWrapper(member, encoding="utf-8"))


# -- what a submission gets ------------------------------------------------------------------
#: how the executors get their Python: see :func:`plan_python`
MODES = ("auto", "ship", "worker", "off")
_PYTHON_CONF_KEYS = ("spark.pyspark.python", "spark.pyspark.driver.python")


@dataclass
class PythonPlan:
    """What one hook does about the executors' Python (resolved from the mode and the settings)."""

    #: ``ship``, ``worker`` or ``off``
    mode: str
    #: Spark configuration to set
    conf: dict[str, str] = field(default_factory=dict)
    #: a prebuilt archive to ship as it is (a path or a URI Spark can fetch: hdfs://, s3a://, ...)
    archive_uri: str | None = None
    target: EnvTarget | None = None
    why: str = ""

    def spark_archive(self, cache_dir: str | os.PathLike, log: Callable[..., Any] | None = None,
                      roots: Iterable[str] = RUNTIME_DISTRIBUTIONS) -> str | None:
        """The ``--archives`` entry (``ARCHIVE#environment``), built into ``cache_dir`` on first use
        (holding ``roots`` and their requirements)."""
        if self.mode != "ship":
            return None
        if self.archive_uri:
            return self.archive_uri if "#" in self.archive_uri else f"{self.archive_uri}#{ALIAS}"
        env = build_python_env(cache_dir, self.target, roots)
        if log is not None:
            size = env.path.stat().st_size / 2**20
            if env.build_s:
                log("Built the application's Python environment for Python %s (%s): %s, %.0f MiB in %.1f s",
                    env.target.python, env.target.platform_label, env.path, size, env.build_s)
            else:
                log("Shipping the application's Python environment %s (%.0f MiB, cached)", env.path, size)
        return env.spark_archive


def plan_python(mode: str | None, *, local_master: bool, cluster_mode: bool, conf: Mapping[str, Any],
                env_vars: Mapping[str, str], settings: Mapping[str, str | None]) -> PythonPlan:
    """
    How the executors (and a driver on the cluster) get the application's Python.

    ``ship``: the packed environment goes with the submission (``--archives ENV#environment``,
    ``spark.pyspark.python=./environment/bin/python``; a driver on this worker keeps this worker's
    interpreter). ``worker``: the executors run this worker's interpreter path, for a local master
    or a cluster whose machines share this worker's install. ``off``: nothing is shipped; the
    executors run ``executor_python`` when set, else what the cluster itself configures (its image,
    bootstrap script or ``PYSPARK_PYTHON``). ``auto`` (the default): a Python the deployment names
    (``spark.pyspark.python`` in conf, ``PYSPARK_PYTHON`` in env_vars, ``executor_python``) means
    ``off``; a local master means ``worker``; any other master means ``ship``.

    :param mode: one of :data:`MODES` (None or blank: ``settings["python_env"]``, else ``auto``).
    :param local_master: the master is ``local[...]``.
    :param cluster_mode: the driver runs on the cluster (deploy mode ``cluster``).
    :param conf: the submission's Spark configuration as given.
    :param env_vars: the submission's environment variables as given.
    :param settings: ``[delta_maint]`` options: ``python_env``, ``python_env_uri``,
        ``python_env_python_version``, ``python_env_platform``, ``executor_python``.
    :raises PythonEnvError: for an unknown mode or settings that contradict each other.
    """
    chosen = (str(mode).strip().lower() if mode is not None and str(mode).strip() else None) \
        or (settings.get("python_env") or "auto").strip().lower()
    if chosen not in MODES:
        raise PythonEnvError(f"python_env must be one of {', '.join(MODES)}, got {chosen!r}")
    named = next((k for k in _PYTHON_CONF_KEYS if conf.get(k)), None) or \
        ("PYSPARK_PYTHON" if env_vars.get("PYSPARK_PYTHON") else None)
    executor_python = (settings.get("executor_python") or "").strip()
    uri = (settings.get("python_env_uri") or "").strip()
    if chosen == "auto":
        if named or executor_python:
            chosen, why = "off", f"the executors' Python is named ({named or '[delta_maint] executor_python'})"
        elif local_master:
            chosen, why = "worker", "a local master runs the executors in this worker's Python"
        else:
            chosen, why = "ship", "a cluster master: the executors get the application's Python with the submission"
    else:
        why = f"python_env {chosen!r}"
    if chosen == "ship":
        if local_master:
            raise PythonEnvError("python_env 'ship' is for clusters: a local master runs the executors in this "
                                 "worker's own Python (use 'worker' or 'auto')")
        if named:
            raise PythonEnvError(f"python_env 'ship' runs the executors with {EXECUTOR_PYTHON}, but {named} names "
                                 "another interpreter: drop one of them")
        out = {"spark.pyspark.python": EXECUTOR_PYTHON,
               "spark.pyspark.driver.python": EXECUTOR_PYTHON if cluster_mode else sys.executable}
        target = None if uri else EnvTarget.parse(settings.get("python_env_python_version"),
                                                  settings.get("python_env_platform"))
        return PythonPlan("ship", out, archive_uri=uri or None, target=target, why=why)
    if chosen == "worker":
        out = {} if named else {"spark.pyspark.python": sys.executable}
        return PythonPlan("worker", out, why=why)
    out = {"spark.pyspark.python": executor_python} if executor_python and not named else {}
    return PythonPlan("off", out, why=why)


# -- command line -------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_delta_maint.hooks.python_env",
        description="Build the application's packed Python environment (to ship with spark-submit).")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build (or find) the archive and print its path")
    build.add_argument("--out", required=True, help="the folder to keep the archive in")
    build.add_argument("--python", help="the cluster's Python version, e.g. 3.12 (default: this one)")
    build.add_argument("--platform", action="append", default=[],
                       help="a wheel platform tag of the cluster, e.g. manylinux_2_28_aarch64 (repeatable; "
                            "default: this machine's)")
    args = parser.parse_args(argv)
    try:
        env = build_python_env(args.out, EnvTarget.parse(args.python, args.platform))
    except PythonEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = env.path.stat().st_size
    print(json.dumps({"archive": str(env.path), "bytes": size, "python": env.target.python,
                      "platform": env.target.platform_label, "packages": env.packages,
                      "build_s": round(env.build_s, 1),
                      "spark": {"--archives": f"{env.path}#{ALIAS}", "spark.pyspark.python": EXECUTOR_PYTHON}},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
