"""The processes of one spark-submit run (spark-submit, the driver JVM, the Python driver and its
workers): noted while it runs, stopped when the task is killed or when the run leaves some behind."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence

import psutil


def note_tree(proc: subprocess.Popen | None, known: list[psutil.Process]) -> list[psutil.Process]:
    """Add the running ``proc`` and its descendants to ``known`` (each once); return them all."""
    if proc is None or proc.poll() is not None:
        return list(known)
    try:
        parent = psutil.Process(proc.pid)
        tree = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return list(known)
    pids = {p.pid for p in known}
    known.extend(p for p in tree if p.pid not in pids)
    return list(known)


def terminate(processes: Sequence[psutil.Process], grace_s: float = 10.0) -> None:
    """SIGTERM ``processes``, then SIGKILL those still alive after ``grace_s`` seconds."""
    alive = []
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
            alive.append(p)
    _, still = psutil.wait_procs(alive, timeout=grace_s)
    for p in still:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(still, timeout=5)


def stop_leftovers(processes: Sequence[psutil.Process]) -> None:
    """After spark-submit ends, stop whatever of ``processes`` still runs (normally none)."""
    leftovers = []
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                leftovers.append(p)
    if leftovers:
        terminate(leftovers, grace_s=5.0)
