"""A fleet's runs recorded in the maintenance history in batches, not one commit a table.

Each append to the history reads its log and writes a file and a commit: on a lake of small tables that costs
more than the tables' own jobs. So the fleet gathers its tables' runs and appends them together once
:data:`FLUSH_S` seconds have passed since the last append, and at the end of the application (also when it
fails). An application that dies between two appends loses the records of at most that many seconds of runs,
never the runs' own commits to their tables.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .run_history import record_runs

__all__ = ["FLUSH_S", "HistoryBatch"]

#: seconds of runs the history's next append waits for at most
FLUSH_S = 30.0


@dataclass
class HistoryBatch:
    """The runs waiting for the history's next append (with each one's Spark application)."""

    uri: str | None
    #: the history's object-store options (credentials among them: kept in memory, never written)
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    flush_s: float = field(default_factory=lambda: FLUSH_S)
    runs: list[dict[str, Any]] = field(default_factory=list)
    app_ids: list[str | None] = field(default_factory=list)
    last: float = field(default_factory=time.monotonic)

    def add(self, runs: list[dict[str, Any]], spark_app_id: str | None) -> None:
        """Keep ``runs`` for the next append; append now when :attr:`flush_s` seconds have passed."""
        if not self.uri or not runs:
            return
        self.runs.extend(runs)
        self.app_ids.extend([spark_app_id] * len(runs))
        if time.monotonic() - self.last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        """Append every waiting run in one commit (never raises); each run's metrics get ``history``, what the
        append did."""
        self.last = time.monotonic()
        if not self.uri or not self.runs:
            return
        runs, apps = self.runs, self.app_ids
        self.runs, self.app_ids = [], []
        recorded = record_runs(self.uri, runs, storage_options=self.storage_options, app_ids=apps)
        for metrics in runs:
            metrics["history"] = recorded
