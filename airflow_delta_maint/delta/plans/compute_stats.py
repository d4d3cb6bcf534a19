"""compute-stats: which live files need statistics, and which columns those must cover, from the log alone.

A reader skips files by their statistics. A file needs them when its ``add`` carries none (a writer
that never collects them), or when they leave out a column the table now covers: the columns
``delta.dataSkippingStatsColumns`` names (else the first ``delta.dataSkippingNumIndexedCols``, see
:func:`~airflow_delta_maint.delta.protocol.stats.stats_columns`), the clustering columns of a
liquid-clustered table, and the columns ``columns`` asks for. A column counts as covered when its
null count is there and, for a column with a min and max, both bounds are there unless every value
is null. The job recomputes such files' statistics and re-adds them unchanged otherwise
(``dataChange=false``).

:class:`ComputeStatsOptions` holds the run's options, checked once; :func:`plan_compute_stats`
selects the files through the state's scan (eager or streamed, one pass); :func:`nothing_to_do` is
the check without Spark that the operators, the fleet and dry runs share.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.table_state import read_table
from airflow_delta_maint.delta.plans.clustering import clustering_columns, is_clustered
from airflow_delta_maint.delta.plans.optimize import add_dicts, partition_filter
from airflow_delta_maint.delta.protocol.features import Operation, check_supported, table_features
from airflow_delta_maint.delta.protocol.schema import (Column, format_column_name, leaf_columns, resolve_column,
                                                       split_column_list)
from airflow_delta_maint.delta.protocol.stats import has_min_max, stats_columns
from airflow_delta_maint.delta.protocol.type_widening import type_changes

__all__ = ["ComputeStatsOptions", "ComputeStatsPlan", "JOB", "MISSING_COLUMNS", "OPERATION", "WITHOUT_STATS",
           "count_needing", "covered_columns", "first_file_needing", "missing_columns", "nothing_to_do",
           "plan_compute_stats", "stats_need", "table_stats_columns", "widened_columns"]

#: the feature gate's job and the commitInfo operation (delta-spark's name for recomputed statistics)
JOB = Operation.COMPUTE_STATS
OPERATION = "COMPUTE STATS"
#: why a file is selected
WITHOUT_STATS = "without_stats"
MISSING_COLUMNS = "missing_columns"

#: the add action's fields a re-add keeps
ADD_COLUMNS = ("partitionValues", "size", "modificationTime", "stats", "tags", "baseRowId",
               "defaultRowCommitVersion", "clusteringProvider")


def _columns(value: Any) -> tuple[str, ...]:
    """``columns`` as names: comma-separated text (back-quotes keep a comma in a name) or a list."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            parts = split_column_list(value)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"compute-stats columns {value!r}: {exc}") from None
        return tuple(format_column_name(path) for path in parts)
    if isinstance(value, (list, tuple)):
        return tuple(str(c).strip() for c in value if str(c).strip())
    raise InvalidArgumentError(f"compute-stats columns must be text or a list of names, got {value!r}")


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _max_files(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
        if isinstance(value, float) and number != value:
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"compute-stats max_files must be a whole number, got {value!r}") from None
    if number < 1:
        raise InvalidArgumentError(f"compute-stats max_files must be at least 1, got {number}")
    return number


@dataclasses.dataclass(frozen=True)
class ComputeStatsOptions:
    """Every option of a compute-stats run, typed; build it with :meth:`from_mapping`, which checks it."""

    #: the partition predicate: only files of matching partitions
    where: str | None = None
    #: columns whose statistics files must hold besides the table's own
    columns: tuple[str, ...] = ()
    #: report the files that need statistics; compute and commit nothing
    dry_run: bool = False
    #: at most this many files per run (the rest wait for the next run)
    max_files: int | None = None

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> ComputeStatsOptions:
        """The options of ``params`` (the parsed command line as a dict; other keys are ignored;
        None means the default), checked: a bad value raises ``InvalidArgumentError``."""
        where = params.get("where")
        if where is not None and not isinstance(where, str):
            raise InvalidArgumentError(f"compute-stats where must be text, got {where!r}")
        if where is not None and where.strip():
            from airflow_delta_maint.delta.plans.predicate import parse_predicate

            parse_predicate(where)  # a malformed predicate fails before the table is read
        return cls(where=where.strip() if where and where.strip() else None,
                   columns=_columns(params.get("columns")), dry_run=_bool(params.get("dry_run")),
                   max_files=_max_files(params.get("max_files")))


def table_stats_columns(header: TableHeader) -> list[Column]:
    """The leaf columns the table's own settings have statistics cover (its statistics columns, a
    liquid-clustered table's clustering columns), without ``columns`` and without the feature gate:
    what ``inspect`` counts files against.

    Raises:
        DeltaError: an unreadable clustering domain or statistics property.
    """
    return stats_columns(header.metadata, _clustering_paths(header))


def _clustering_paths(header: TableHeader) -> list[tuple[str, ...]]:
    if not is_clustered(header.protocol):
        return []
    return [c.logical_path for c in clustering_columns(header.metadata.schema_string, header.domains)]


def count_needing(texts: Sequence[str | None], columns: Sequence[Column]) -> tuple[int, int]:
    """(files without statistics, files missing a column) among the ``stats`` texts of some files."""
    without = missing = 0
    for text in texts:
        need = stats_need(text, columns)
        if need == WITHOUT_STATS:
            without += 1
        elif need == MISSING_COLUMNS:
            missing += 1
    return without, missing


def covered_columns(header: TableHeader, options: ComputeStatsOptions) -> list[Column]:
    """The leaf columns every file's statistics must cover (physical paths, schema order); checks the
    table and the options first.

    Raises:
        UnsupportedFeatureError: a table feature compute-stats does not honour.
        InvalidArgumentError: a ``columns`` name the schema lacks, a partition column, or a column
            of a type statistics do not bound.
    """
    check_supported(header.protocol, JOB, header.metadata)
    schema = header.metadata.schema_string
    partitions = {c.lower() for c in header.partition_columns}
    required: list[tuple[str, ...]] = []
    for name in options.columns:
        col = resolve_column(schema, name)
        if col.logical_path[0].lower() in partitions:
            raise InvalidArgumentError(f"column {name!r} is a partition column: its values are in the log, files hold "
                                       "no statistics of it")
        leaves = [c for c in leaf_columns(schema) if c.logical_path[:len(col.logical_path)] == col.logical_path]
        if not any(has_min_max(c) for c in leaves):
            kind = getattr(col.type, "name", type(col.type).__name__.replace("Type", "").lower())
            raise InvalidArgumentError(f"column {name!r} is of type {kind}, which statistics do not bound (min and "
                                       "max exist for numbers, decimals, dates, timestamps and strings)")
        required.append(col.logical_path)
    return stats_columns(header.metadata, required + _clustering_paths(header))


def widened_columns(header: TableHeader, columns: Sequence[Column]) -> tuple[str, ...]:
    """The physical top-level columns among ``columns`` whose type (or a nested field's) was widened:
    files may hold them in the old type, whose footer bounds say nothing of the new one."""
    changed = [change.physical_path for change in type_changes(header.metadata)]
    hit = [c.physical_path[0] for c in columns
           if any(c.physical_path[:len(p)] == p or p[:len(c.physical_path)] == c.physical_path for p in changed)]
    return tuple(dict.fromkeys(hit))


def _value(tree: Any, path: Sequence[str]) -> Any:
    for part in path:
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def missing_columns(stats: Mapping[str, Any], columns: Sequence[Column]) -> list[Column]:
    """The columns of ``columns`` that the parsed statistics ``stats`` do not cover (see the module
    docstring); none for a file without rows, which has nothing to bound."""
    records = stats.get("numRecords")
    if not isinstance(records, int) or records == 0:
        return []
    nulls, mins, maxs = stats.get("nullCount"), stats.get("minValues"), stats.get("maxValues")
    out = []
    for col in columns:
        count = _value(nulls, col.physical_path)
        if not isinstance(count, int) or isinstance(count, bool):
            out.append(col)
        elif has_min_max(col) and count < records and (_value(mins, col.physical_path) is None
                                                       or _value(maxs, col.physical_path) is None):
            out.append(col)
    return out


def stats_need(text: str | None, columns: Sequence[Column]) -> str | None:
    """Why a file with statistics ``text`` (the add's ``stats``) needs new ones: :data:`WITHOUT_STATS`,
    :data:`MISSING_COLUMNS`, or None when they are complete."""
    if not text:
        return WITHOUT_STATS
    try:
        stats = json.loads(text)
    except ValueError:
        return WITHOUT_STATS
    if not isinstance(stats, dict) or not isinstance(stats.get("numRecords"), int):
        return WITHOUT_STATS
    return MISSING_COLUMNS if missing_columns(stats, columns) else None


@dataclasses.dataclass
class ComputeStatsPlan:
    """The files one run gives statistics, and what the scan found.

    Attributes:
        version: the version planned from.
        columns: the leaf columns the statistics cover.
        files: the selected live files' add actions (at most ``max_files``), in scan order.
        num_files_considered: live files in the partitions the predicate selects.
        num_files_without_stats, num_files_missing_columns: of those, the files that need statistics.
        deletion_vectors: the table has the deletion-vectors feature (statistics say ``tightBounds``).
    """

    version: int
    columns: list[Column]
    files: list[dict] = dataclasses.field(default_factory=list)
    #: the physical top-level columns among ``columns`` that changed type (see :func:`widened_columns`)
    widened: tuple[str, ...] = ()
    num_files_considered: int = 0
    num_files_without_stats: int = 0
    num_files_missing_columns: int = 0
    deletion_vectors: bool = False

    @property
    def num_files_needing(self) -> int:
        return self.num_files_without_stats + self.num_files_missing_columns

    @property
    def num_files_left(self) -> int:
        """Files that need statistics but wait for a later run (``max_files``)."""
        return self.num_files_needing - len(self.files)

    def metrics(self) -> dict[str, Any]:
        """The plan's numbers under the job's metric names."""
        return {"version_read": self.version, "columns": [c.name for c in self.columns],
                "numFilesConsidered": self.num_files_considered, "numFilesWithoutStats": self.num_files_without_stats,
                "numFilesMissingColumns": self.num_files_missing_columns, "numFilesSelected": len(self.files),
                "numFilesLeftForLaterRuns": self.num_files_left}

    def reason(self, predicate: str | None) -> str:
        """The one-line reason to skip a run with nothing to do."""
        where = f" in the partitions {predicate!r} selects" if predicate else ""
        return (f"all {self.num_files_considered} live files{where} have statistics of the "
                f"{len(self.columns)} covered columns")


def _scan(header: TableHeader, options: ComputeStatsOptions, columns: Sequence[Column], add_columns: Sequence[str],
          on_file: Callable[[pa.Table, list[tuple[int, str]]], bool]) -> int:
    """Stream the live files in the predicate's partitions; hand each piece's files that need
    statistics (row, reason) to ``on_file``, which returns False to stop. Returns the files considered."""
    matches = partition_filter(header, options.where)
    considered = 0
    for kind, piece in header.scan(add_columns):
        if kind != "add" or not piece.num_rows:
            continue
        texts = piece.column("stats").to_pylist()
        rows: Sequence[int] = range(piece.num_rows)
        if matches is not None:
            values = piece.column("partitionValues").to_pylist()
            rows = [i for i, pv in enumerate(values) if matches(dict(pv or []))]
        needing = []
        for i in rows:
            considered += 1
            need = stats_need(texts[i], columns)
            if need is not None:
                needing.append((i, need))
        if needing and not on_file(piece, needing):
            break
    return considered


def plan_compute_stats(header: TableHeader, options: ComputeStatsOptions) -> ComputeStatsPlan:
    """Select the live files that need statistics, in one pass over the state's scan (eager or streamed).

    Raises:
        UnsupportedFeatureError, InvalidArgumentError: see :func:`covered_columns`; a bad predicate.
    """
    columns = covered_columns(header, options)
    plan = ComputeStatsPlan(header.version, columns, widened=widened_columns(header, columns),
                            deletion_vectors="deletionVectors" in table_features(header.protocol)[1])

    def keep(piece: pa.Table, needing: list[tuple[int, str]]) -> bool:
        for _, need in needing:
            if need == WITHOUT_STATS:
                plan.num_files_without_stats += 1
            else:
                plan.num_files_missing_columns += 1
        room = len(needing) if options.max_files is None else max(0, options.max_files - len(plan.files))
        if room:
            plan.files.extend(add_dicts(piece.take(pa.array([i for i, _ in needing[:room]], pa.int64()))))
        return True

    plan.num_files_considered = _scan(header, options, columns, ADD_COLUMNS, keep)
    return plan


def first_file_needing(header: TableHeader, options: ComputeStatsOptions) -> tuple[str | None, ComputeStatsPlan]:
    """The path of the first live file that needs statistics (None when none does) and the plan's
    counts up to it: the scan stops there, reading only ``stats`` and ``partitionValues``."""
    columns = covered_columns(header, options)
    plan = ComputeStatsPlan(header.version, columns)
    found: list[str] = []

    def stop(piece: pa.Table, needing: list[tuple[int, str]]) -> bool:
        found.append(piece.column("path")[needing[0][0]].as_py())
        return False

    plan.num_files_considered = _scan(header, options, columns, ("stats", "partitionValues"), stop)
    return (found[0] if found else None), plan


def nothing_to_do(table: str, storage_options: Mapping[str, str] | None, options: ComputeStatsOptions) -> str | None:
    """Without Spark, in bounded memory (the state streamed): why no live file needs statistics, or
    None as soon as one does.

    Raises:
        DeltaError: a missing or unsupported table, or bad options, as the job would.
    """

    def work(header: TableHeader) -> str | None:
        path, plan = first_file_needing(header, options)
        return None if path is not None else plan.reason(options.where)

    return read_table(table, work, storage_options=storage_options, what=JOB)

