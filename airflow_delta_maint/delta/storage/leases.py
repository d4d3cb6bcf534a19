"""Partition reservations: expiring leases that keep two OPTIMIZE runs of one table off the same
partition at the same time (two DAG runs, a retry beside a straggler).

A lease is a small JSON object beside the table, under ``_delta_maint/reservations/`` (a hidden
folder: readers and VACUUM ignore it), named ``<partition hash>.<generation>.json``. The
partition's live lease is the highest generation whose ``expires_at`` has not passed. A run
reserves a partition by creating the next generation with put-if-absent, so of two runs racing
for it exactly one wins, on local disk and object stores alike; it takes over an expired lease
the same way. A run releases its leases at the end by deleting them, and renews them while it works (a new
generation every third of the lease), so a short lease never expires under a live run. A lease
whose holder ran on this host in a process that is gone (killed, crashed) is taken over at once,
so a rerun after a crash converges without waiting; a holder on another host that died is taken
over when its lease expires. Reservations only save wasted work: optimistic commits stay the
safety net, so a clock that is off or a lease that expires under a stalled run costs time, never
rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage
from airflow_delta_maint.delta.storage.write_once import put_once

__all__ = ["DEFAULT_LEASE_SECONDS", "RESERVATIONS_DIR", "Reservation", "reserve_partitions"]

RESERVATIONS_DIR = "_delta_maint/reservations/"
DEFAULT_LEASE_SECONDS = 600
#: partitions reserved, renewed or released at once on an object store: each is a listing and a put (or a
#: delete) of 10-50 ms, so one after the other a hundred partitions would take seconds
LEASE_THREADS = 16
log = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")


def _each(storage: Storage, fn: Callable[[_T], _R], items: list[_T]) -> list[_R]:
    """``fn`` of every item, in order: on threads on an object store, one after the other on local disk."""
    if storage.is_local or len(items) < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(LEASE_THREADS, len(items)), thread_name_prefix="lease") as pool:
        return list(pool.map(fn, items))


def _hash(label: str) -> str:
    return hashlib.sha256(label.encode("utf-8")).hexdigest()[:32]


def _process_start(pid: int) -> str | None:
    """The start time of a process on this host (Linux ``/proc``), None when unknown or gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22, after the command name


def _holder() -> dict[str, object]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_start": _process_start(pid)}


def _holder_gone(lease: dict) -> bool:
    """The lease's holder ran on this host in a process that no longer exists."""
    if lease.get("host") != socket.gethostname() or not isinstance(lease.get("pid"), int):
        return False
    if not os.path.isdir("/proc/self"):
        return False  # cannot tell: wait for the lease to expire
    start = _process_start(int(lease["pid"]))
    return start is None or (lease.get("pid_start") is not None and start != lease.get("pid_start"))


@dataclass
class Reservation:
    """The partitions one run holds (by label) and those other runs hold."""

    storage: Storage
    run_id: str
    held: dict[str, str] = field(default_factory=dict)  # label -> lease key
    taken_by_others: dict[str, str] = field(default_factory=dict)  # label -> holder run id
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _renewer: threading.Thread | None = field(default=None, repr=False)

    def renew(self) -> None:
        """Extend every lease this run holds by writing its next generation."""
        labels = list(self.held)
        now = time.time()
        renewed = _each(self.storage, lambda label: _try_reserve(self.storage, label, self.run_id, self.lease_seconds,
                                                                 now)[0], labels)
        for label, key in zip(labels, renewed):
            if key is not None:
                self.held[label] = key

    def _renew_loop(self) -> None:
        while not self._stop.wait(max(1.0, self.lease_seconds / 3)):
            try:
                self.renew()
            except Exception as exc:  # the lease then expires; commits stay the safety net
                log.warning("could not renew partition reservations: %s", exc)

    def start_renewing(self) -> None:
        if self.held and self._renewer is None:
            self._renewer = threading.Thread(target=self._renew_loop, name="delta-maint-lease", daemon=True)
            self._renewer.start()

    def release(self) -> None:
        """Stop renewing and delete this run's leases (best effort: an undeleted lease expires)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        keys = list(self.held.values())
        self.held.clear()
        try:
            _each(self.storage, lambda key: self.storage.delete_many([key]), keys)
        except Exception as exc:
            log.warning("could not release %d partition reservations (they expire by themselves): %s",
                        len(keys), exc)

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _generations(storage: Storage, prefix: str) -> list[tuple[int, str]]:
    out = []
    for f in storage.list_from(prefix):
        rest = f.key[len(prefix):]
        gen, _, ext = rest.partition(".")
        if ext == "json" and gen.isdigit():
            out.append((int(gen), f.key))
    return sorted(out)


def _try_reserve(storage: Storage, label: str, run_id: str, lease_seconds: float, now: float) -> tuple[str | None, str]:
    """Reserve one partition: (lease key, "") when this run holds it, else (None, holder)."""
    prefix = f"{RESERVATIONS_DIR}{_hash(label)}."
    gens = _generations(storage, prefix)
    generation = 0
    if gens:
        top, key = gens[-1]
        try:
            lease = json.loads(storage.read(key))
        except FileNotFoundError:  # released just now: take the generation after it
            lease = {}
        except ValueError:
            lease = {}  # a torn or foreign object: treat as expired
        if lease and float(lease.get("expires_at", 0)) > now and lease.get("run_id") != run_id \
                and not _holder_gone(lease):
            return None, str(lease.get("run_id"))
        generation = top + 1
        with contextlib.suppress(Exception):  # leftovers of older generations
            storage.delete_many([k for _, k in gens[:-1]])
    key = f"{prefix}{generation:010d}.json"
    body = {"run_id": run_id, "partition": label, "acquired_at": now, "expires_at": now + lease_seconds,
            **_holder()}
    try:
        put_once(storage, key, json.dumps(body).encode("utf-8"))
    except AlreadyExistsError:
        try:
            winner = json.loads(storage.read(key)).get("run_id")
        except Exception:
            winner = "another run"
        return None, str(winner)
    return key, ""


def reserve_partitions(storage: Storage, labels: Iterable[str], *, run_id: str | None = None,
                       lease_seconds: float = DEFAULT_LEASE_SECONDS, now: float | None = None) -> Reservation:
    """Reserve each partition (by label) that no other run holds a live lease on.

    Returns a :class:`Reservation` (a context manager releasing the leases) listing what this run
    holds and what other runs hold.
    """
    res = Reservation(storage, run_id or uuid.uuid4().hex, lease_seconds=lease_seconds)
    clock = time.time() if now is None else now
    wanted = list(dict.fromkeys(labels))
    outcomes = _each(storage, lambda label: _try_reserve(storage, label, res.run_id, lease_seconds, clock), wanted)
    for label, (key, holder) in zip(wanted, outcomes):
        if key is not None:
            res.held[label] = key
        else:
            res.taken_by_others[label] = holder
    if now is None:
        res.start_renewing()
    return res
