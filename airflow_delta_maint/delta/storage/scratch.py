"""Scratch folders on local disk that no killed run leaves behind for good.

A run that spills (OPTIMIZE's rounds, the streamed state, VACUUM's listing, Z-order's buckets) makes
its folder here. The folder holds a lock file the making process keeps locked (``flock``) until it
removes the folder, and the kernel releases that lock when the process ends, however it ends. The next
run that makes a folder of the same kind removes every folder of that kind on this machine whose lock
it can take: a run killed outright (SIGKILL, out of memory) leaves its spill only until then.

Only folders named for this host are swept, so a scratch folder on a mount several machines share
is never judged by a lock another machine holds. A folder without a lock file (made by an older
version, or by anything else) is left alone, and so is one whose lock cannot be tested.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

__all__ = ["LOCK_NAME", "make_scratch", "remove_scratch", "sweep_scratch"]

LOCK_NAME = ".owner.lock"
log = logging.getLogger("delta_maint.scratch")

#: folders this process made and still holds, by path: the open lock file of each
_held: dict[str, int] = {}


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname() or "host")


def _stem(prefix: str) -> str:
    return f"{prefix}{_host()}-"


def make_scratch(prefix: str, parent: str | os.PathLike[str] | None = None) -> str:
    """A new, empty folder named ``<prefix><host>-…`` under ``parent`` (default: the temporary
    folder), locked by this process until :func:`remove_scratch`. Sweeps the folders of the same
    kind that killed runs left first."""
    base = str(parent) if parent is not None else tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    sweep_scratch(prefix, base)
    path = tempfile.mkdtemp(prefix=_stem(prefix), dir=base)
    # lock under another name, then rename: a sweep never sees the lock file unlocked
    pending = os.path.join(path, LOCK_NAME + ".new")
    fd = os.open(pending, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        # a file system without locks: the folder works, but a crash leaves it for good
        os.close(fd)
        os.unlink(pending)
        log.debug("scratch folder %s cannot be locked (%s); it is removed at the end of the run only", path, exc)
        return path
    os.rename(pending, os.path.join(path, LOCK_NAME))
    _held[path] = fd
    return path


def remove_scratch(path: str | os.PathLike[str]) -> None:
    """Remove a folder :func:`make_scratch` made (and anything in it), and release its lock."""
    key = str(path)
    shutil.rmtree(key, ignore_errors=True)
    fd = _held.pop(key, None)
    if fd is not None:
        os.close(fd)


def sweep_scratch(prefix: str, parent: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the folders ``<prefix><host>-…`` under ``parent`` whose making process has ended;
    the paths removed."""
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    stem = _stem(prefix)
    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith(stem) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    for entry in entries:
        if entry.path in _held:
            continue
        try:
            fd = os.open(os.path.join(entry.path, LOCK_NAME), os.O_RDWR)
        except OSError:
            continue  # no lock file: not a folder this module can judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its process still runs (or locks cannot be tested here)
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
        finally:
            os.close(fd)
        removed.append(entry.path)
    if removed:
        log.info("removed %d scratch folder(s) that ended runs left behind: %s", len(removed), ", ".join(removed))
    return removed
