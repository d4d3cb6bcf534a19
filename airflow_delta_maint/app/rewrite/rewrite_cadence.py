"""How OPTIMIZE rewrites its bins when ``bins_per_commit`` is not set: the quiet path or the busy one.

- **Quiet** (no writer at work): each batch of bins is one unit, rewritten at once (all its bins in
  one Spark job; one shuffle for Z-order and liquid clustering) and committed as soon as it is done.
- **Busy** (a writer commits while the run works): bins are rewritten a unit of one (or a few) at a
  time and each goes in as soon as it is rewritten, so that a bin lands before the writer can change
  its inputs, and each rebase is onto few writer commits.

The path is chosen once per run from the log's recent commit cadence
(:mod:`airflow_delta_maint.delta.plans.write_cadence`) and switched at most once: a quiet run
that sees another writer's commit after a unit turns busy for the units left. The metrics say which
path was taken and why (``rewritePath``).
"""

from __future__ import annotations

import contextvars
import math
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from airflow_delta_maint.delta.plans.optimize import Bin
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions
from airflow_delta_maint.delta.plans.write_cadence import WriteCadence, read_write_cadence
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["MAX_COMMITS_PER_RUN", "QUIET", "BUSY", "RewriteCadence", "busy_unit_bins", "commit_groups",
           "rewrite_and_commit", "rewrite_units"]

#: on the busy path a run makes at most about this many commits
MAX_COMMITS_PER_RUN = 50
QUIET = "quiet"
_MAX_THREADS = 1024
BUSY = "busy"

T = TypeVar("T")


def busy_unit_bins(num_bins: int) -> int:
    """Bins per unit on the busy path: one, or as many as keep a run within ``MAX_COMMITS_PER_RUN`` units."""
    return max(1, math.ceil(num_bins / MAX_COMMITS_PER_RUN))


def commit_groups(bins: Sequence[Bin], batch_bytes: int, per_commit: int) -> list[list[int]]:
    """Consecutive bins rewritten and committed together: at most ``per_commit`` bins (0: no limit)
    and ``batch_bytes`` input bytes each."""
    groups: list[list[int]] = [[]]
    total = 0
    for i, b in enumerate(bins):
        if groups[-1] and (total + b.input_bytes > batch_bytes or (per_commit and len(groups[-1]) >= per_commit)):
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += b.input_bytes
    return [g for g in groups if g]


@dataclass
class RewriteCadence:
    """The run's cadence (quiet: each batch at once; busy: a bin at a time), decided on first use and shared
    by every plan of the run (a large table's rounds); switched from quiet to busy at most once."""

    path: str | None = None
    cadence: WriteCadence | None = None
    #: why the run turned busy, when it started quiet
    switched: str | None = None

    def decide(self, storage: Storage, version: int, now_ms: int | None = None) -> str:
        """The path to start on (or the one already taken), from the commits up to ``version``."""
        if self.path is None:
            self.cadence = read_write_cadence(storage, version, now_ms)
            self.path = BUSY if self.cadence.active else QUIET
        return self.path

    @property
    def busy(self) -> bool:
        return self.path == BUSY

    def turn_busy(self, why: str) -> bool:
        """Switch a quiet run to the busy path; False when it already is (or was switched before)."""
        if self.path != QUIET:
            return False
        self.path = BUSY
        self.switched = why
        return True

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rewritePath": f"{QUIET}, then {BUSY}" if self.switched else self.path}
        if self.cadence is not None:
            out["rewritePathReason"] = self.switched or self.cadence.reason()
            out["writeCadence"] = self.cadence.metrics()
        return out


def rewrite_and_commit(bins: Sequence[Bin], groups: list[list[int]], rewrite: Callable[[int, list[Bin]], T],
                       commit: Callable[[int, T], None], concurrency: Callable[[], int]) -> None:
    """Rewrite the groups (up to ``concurrency()`` at a time, on threads that each run a Spark job
    or a slice of local work) and commit each on this thread as
    soon as it is rewritten. ``commit`` may replace the groups not yet started (``groups[n + 1:]``
    while no other group runs), and ``concurrency`` may change between groups. A failure stops the
    groups not yet started and waits for the running ones before it goes on."""
    def run(n: int) -> T:
        return rewrite(n, [bins[i] for i in groups[n]])

    if len(groups) == 1:
        commit(0, run(0))
        return
    # threads start on demand: never more than the highest concurrency asked for
    pool = ThreadPoolExecutor(max_workers=_MAX_THREADS, thread_name_prefix="delta-maint-optimize")
    futures: dict[Future, int] = {}
    started = 0
    try:
        while True:
            while started < len(groups) and len(futures) < min(max(1, concurrency()), _MAX_THREADS):
                # each group in a copy of this thread's context: the job's settings, and the store-call counter its
                # Spark tasks' calls come back to, reach the group's thread
                futures[pool.submit(contextvars.copy_context().run, run, started)] = started
                started += 1
            if not futures:
                return
            done, _ = wait(list(futures), return_when=FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: futures[f]):
                n = futures.pop(f)
                commit(n, f.result())
    finally:
        for f in futures:
            f.cancel()
        pool.shutdown(wait=True)


def rewrite_units(options: OptimizeOptions, num_bins: int, path: RewriteCadence | None = None) -> tuple[int, bool]:
    """How many bins are rewritten together (one Spark job, or one slice of local work; 0: a whole
    batch) and whether each unit is committed as soon as it is rewritten (else rewritten units are
    held and committed together when the log moves; see ``optimize_execution``).

    ``bins_per_commit=N``: N bins, each unit committed at once; 0: whole batches, each committed
    once rewritten (one shuffle for Z-order and clustering). Unset: the run's path: whole batches on a
    quiet table; on a busy one, one bin (or as many as keep the run within ``MAX_COMMITS_PER_RUN``
    units) held until the log moves.
    """
    value = options.bins_per_commit
    if value is None:
        if path is not None and not path.busy:
            return 0, True
        return busy_unit_bins(num_bins), False
    return value, True
