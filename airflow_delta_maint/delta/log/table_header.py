"""A table's header at one version: what every reader of a table knows before its files.

The header is the log segment, the protocol, the metadata with its typed properties, the app
transactions, the domain metadata, the newest commit's timestamp, and the derived log files the
reader could not vouch for. Both states of a table are headers:

* :class:`~airflow_delta_maint.delta.log.snapshot.Snapshot`, the eager state: the files in memory;
* :class:`~airflow_delta_maint.delta.log.state_stream.StreamedState`: the files left in the log.

Both offer the same :meth:`TableHeader.scan`: the live files (and, when asked, the tombstones) in
batches of the columns asked for. A job that needs the files reads them through the scan, and is
then written once for both; a job that needs only the header takes any :class:`TableHeader`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterator, Sequence

import pyarrow as pa

from airflow_delta_maint.delta.log.listing import LogSegment
from airflow_delta_maint.delta.protocol.actions import Metadata, Protocol
from airflow_delta_maint.delta.protocol.table_properties import TableProperties
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["TableHeader"]


class TableHeader(ABC):
    """A table's state at one version, without its files.

    Attributes:
        storage: where the table lives.
        segment: the log files that make up this version.
        version: the table version.
        protocol, metadata: the newest Protocol and Metadata.
        txns: the newest txn per appId.
        domains: live domain metadata per domain (tombstoned domains left out).
        domain_tombstones: domains whose newest action has ``removed: true``.
        commit_timestamp: the newest commit's time (in-commit timestamp, else commitInfo's or the
            file's), None when unknown.
        distrusted: derived log files (checkpoints, compaction files) found not to agree with the
            log, each ``{"file", "reason"}``; none of them shaped the state.
    """

    def __init__(self, storage: Storage, segment: LogSegment, protocol: Protocol, metadata: Metadata,
                 txns: dict[str, dict], domains: dict[str, dict], domain_tombstones: dict[str, dict],
                 commit_timestamp: int | None, distrusted: list[dict[str, str]] | None = None):
        self.storage = storage
        self.segment = segment
        self.version = segment.version
        self.protocol = protocol
        self.metadata = metadata
        self.txns = txns
        self.domains = domains
        self.domain_tombstones = domain_tombstones
        self.commit_timestamp = commit_timestamp
        self.distrusted: list[dict[str, str]] = list(distrusted or [])

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def properties(self) -> TableProperties:
        """The table's properties, typed."""
        return self.metadata.properties

    @abstractmethod
    def eager(self, paths_only: bool = False) -> Any:
        """This version with every file in memory (a ``Snapshot``): the state itself when it is eager."""

    @abstractmethod
    def scan(self, add_columns: Sequence[str], remove_columns: Sequence[str] | None = None
             ) -> Iterator[tuple[str, pa.Table]]:
        """Yield ``("add", table)`` pieces of the live files and, with ``remove_columns``,
        ``("remove", table)`` pieces of the tombstones, each with the columns asked for (``path``
        and ``deletionVector`` always included)."""
