"""What compute-stats runs inside Spark tasks (threads of the process under local execution): each
file's statistics from its parquet footer, and from its data only where the footer cannot prove a
value (:mod:`airflow_delta_maint.delta.protocol.stats`). A remote file is read by byte ranges: the
footer, then only the columns that need their data. A file written before a column's type was widened
gets that column's statistics from its data cast to the current type. No pyspark import here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.app.rewrite.data_files import conform_array
from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.schema import to_arrow_schema
from airflow_delta_maint.delta.protocol.stats import StatsCollector, stats_json, table_stats
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["StatsSpec", "StatsTarget", "collector_of", "file_statistics", "stats_slice"]

#: files whose footers one task reads at once from an object store (reads wait on the network)
REMOTE_THREADS = 8

#: (path, size in bytes, has a deletion vector)
StatsTarget = tuple[str, int, bool]


@dataclass(frozen=True)
class StatsSpec:
    """What every task of one run shares."""

    storage: Storage
    metadata_action: dict
    #: the logical paths of every column the statistics cover
    columns: tuple[tuple[str, ...], ...]
    #: the table has the deletion-vectors feature: statistics say whether their bounds are tight
    deletion_vectors: bool
    #: the physical top-level columns among them that changed type (type widening): a file holding one in
    #: its old type gets its statistics from its data cast to the table's type
    widened: tuple[str, ...] = ()


class _WatchedFile(pq.ParquetFile):
    """A parquet file that notes whether any of its data (not just its footer) was read."""

    data_read = False

    def read(self, *args: Any, **kwargs: Any) -> Any:
        self.data_read = True
        return super().read(*args, **kwargs)


def file_statistics(spec: StatsSpec, collector: StatsCollector, target: StatsTarget) -> tuple[str, str, bool]:
    """(path, statistics as JSON, whether any column's data was read) of one data file.

    ``numRecords`` counts the file's physical rows; a file with a deletion vector gets
    ``tightBounds: false`` (its bounds may belong to deleted rows), the others ``true`` on a table with
    deletion vectors.

    Raises:
        CorruptLogError: the file is outside the table or missing.
    """
    path, size, has_dv = target
    storage = spec.storage
    key = storage.key_for_path(path)
    if key is None:
        raise CorruptLogError(f"data file outside the table root: {path}")
    source: Any = storage.local_path(key) if storage.is_local else RangeReader(storage, key, size)
    try:
        parquet = _WatchedFile(source, coerce_int96_timestamp_unit="us")
    except FileNotFoundError:
        raise CorruptLogError(f"data file referenced by the log is missing: {path}") from None
    tight = (not has_dv) if spec.deletion_vectors else None
    old = _old_types(spec, collector, parquet)
    if old:  # bounds in the file's old type (a decimal's old scale, a date) are no bounds in the new one
        stats = table_stats(_in_table_types(collector, parquet), collector.metadata, tight, spec.columns)
        return path, stats_json(stats), True
    stats = collector.file_stats(parquet, tight_bounds=tight)
    return path, stats_json(stats), parquet.data_read


def _expected(collector: StatsCollector) -> pa.Schema:
    return to_arrow_schema(collector.metadata, physical=True)


def _old_types(spec: StatsSpec, collector: StatsCollector, parquet: pq.ParquetFile) -> list[str]:
    """The widened columns this file holds in another type than the table's."""
    if not spec.widened:
        return []
    have, want = parquet.schema_arrow, _expected(collector)
    return [name for name in spec.widened
            if have.get_field_index(name) >= 0 and not have.field(name).type.equals(want.field(name).type)]


def _in_table_types(collector: StatsCollector, parquet: pq.ParquetFile) -> pa.Table:
    """The covered top-level columns of the file, cast to the table's types (columns the file lacks left out)."""
    want = _expected(collector)
    names = [n for n in dict.fromkeys(c.physical_path[0] for c in collector.cols)
             if parquet.schema_arrow.get_field_index(n) >= 0]
    data = parquet.read(columns=names)
    return pa.table([conform_array(data.column(n), want.field(n).type) for n in names], names=names)


def collector_of(spec: StatsSpec) -> StatsCollector:
    """The statistics collector of a run's files (its columns resolved once; it is handed no data, so one
    collector serves every file)."""
    return StatsCollector(Metadata.from_action(spec.metadata_action), spec.columns)


def stats_slice(targets: Iterable[StatsTarget], spec: StatsSpec) -> Iterator[tuple[str, str, bool]]:
    """Spark task: the statistics of its files, in order (a few at a time from an object store)."""
    collector = collector_of(spec)
    targets = list(targets)
    if spec.storage.is_local or len(targets) < 2:
        for target in targets:
            yield file_statistics(spec, collector, target)
        return
    with ThreadPoolExecutor(max_workers=min(REMOTE_THREADS, len(targets))) as pool:
        yield from pool.map(lambda t: file_statistics(spec, collector, t), targets)
