"""The bundle spark-submit ships: this package zipped for ``--py-files`` (sources and bytecode,
built once per version and content, and cached), and the application file ``app/main.py``."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import py_compile
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

import airflow_delta_maint
from airflow_delta_maint.app.settings import Settings

PACKAGE_DIR = Path(airflow_delta_maint.__file__).resolve().parent
APPLICATION = PACKAGE_DIR / "app" / "main.py"
_EXCLUDED_DIRS = {"__pycache__", "tests", ".pytest_cache"}
_EXCLUDED_SUFFIXES = (".pyc", ".pyo")


def default_cache_dir() -> Path:
    """Where package bundles are cached: the application's ``cache_dir`` setting
    (``$DELTA_MAINT_CACHE_DIR``, else a folder in the temp dir; :class:`~airflow_delta_maint.app.settings.Settings`)."""
    return Settings.from_environ(os.environ).cache_dir


def _package_files() -> list[Path]:
    files = []
    for root, dirs, names in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d not in _EXCLUDED_DIRS and not d.startswith("."))
        for name in sorted(names):
            if name.endswith(_EXCLUDED_SUFFIXES) or name.startswith("."):
                continue
            files.append(Path(root) / name)
    return files


def build_package_zip(cache_dir: str | os.PathLike | None = None) -> str:
    """
    Zip this package for ``--py-files`` and return the zip's path.

    The zip is named after the package version and a hash of the package's content, so it is built
    once per version and content (and Python version: each module's bytecode is included beside
    its source) and reused until either changes; bundles of other contents are removed once they
    are a day old. Tests and ``__pycache__`` folders are left out. The zip is written whole or not at all (temp file, then rename).

    :param cache_dir: folder to keep the zip in (default: :func:`default_cache_dir`).
    :return: absolute path of the zip.
    """
    files = _package_files()
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)  # the bytecode inside is this interpreter's
    contents: list[tuple[str, bytes, Path]] = []
    for path in files:
        arcname = "airflow_delta_maint/" + path.relative_to(PACKAGE_DIR).as_posix()
        data = path.read_bytes()
        contents.append((arcname, data, path))
        digest.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"airflow_delta_maint-{airflow_delta_maint.__version__}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return str(target)
    tmp = folder / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for arcname, data, path in contents:
                _write_entry(zf, arcname, data)
                if arcname.endswith(".py"):
                    _write_entry(zf, arcname + "c", _bytecode(path, f"{target}/{arcname}"))
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    _prune_bundles(folder, keep=target)
    return str(target)


def _write_entry(zf: zipfile.ZipFile, arcname: str, data: bytes) -> None:
    info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _bytecode(source: Path, filename: str) -> bytes:
    """A module's bytecode as an unchecked hash-based ``.pyc`` (PEP 552), which ``zipimport`` loads
    instead of compiling the source in every driver and Python worker. An interpreter of another
    version rejects its magic number and compiles the ``.py`` beside it, as before."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "module.pyc"
        py_compile.compile(str(source), cfile=str(out), dfile=filename, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        return out.read_bytes()


def _prune_bundles(folder: Path, keep: Path, max_age_s: float = 86400.0) -> None:
    """Remove bundles of other versions or content once they are a day old (no submit still reads them)."""
    now = time.time()
    for old in folder.glob("airflow_delta_maint-*.zip"):
        with contextlib.suppress(OSError):
            if old != keep and now - old.stat().st_mtime > max_age_s:
                old.unlink()
