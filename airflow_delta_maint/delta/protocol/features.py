"""The table-feature gate: which tables each job may touch.

A table declares what a client must understand through its protocol: reader and writer
versions and, from reader version 3 / writer version 7 on, named features. Legacy versions
imply fixed feature sets (writer 2: ``appendOnly`` + ``invariants``; 3: + ``checkConstraints``;
4: + ``changeDataFeed`` + ``generatedColumns``; 5: + ``columnMapping``; 6: + ``identityColumns``;
reader 2: ``columnMapping``).

Every job calls :func:`check_supported` before it writes anything. The decision per job:

- ``read`` reads rows; ``inspect`` reads the log only (snapshot, history, planning). Both
  check reader features only, as the protocol asks of readers; unknown writer-only features
  do not stop them.
- ``vacuum``, ``checkpoint``, ``compact-log`` and ``optimize`` check reader *and* writer
  features. VACUUM checks the writer protocol on every table (that is what
  ``vacuumProtocolCheck`` exists to enforce): it deletes files, so it must understand every
  way the log can reference one.
- ``optimize`` rewrites data files (``dataChange=false``). It honours row tracking (stable row
  ids and commit versions kept, see ``row_tracking.py``), clustering (liquid clustering, see
  ``clustering.py``), type widening (old files read in their old types and written in the
  current ones) and variant types, shredded or not (each output keeps a shredded shape of its
  inputs, the parquet VARIANT annotation and required fields: ``variant_layout.py``). It refuses
  features whose writer requirements a rewrite cannot yet honour: collations (collation-aware
  statistics) and, while enabled, Iceberg compatibility V1 (superseded by V2;
  delta-spark 4.4 writes it only when a table names it). It honours Iceberg compatibility V2 and V3
  (UniForm's included) and ``materializePartitionColumns``: new files hold the partition columns
  after the data columns, field ids on every parquet field, INT64 timestamps, ``numRecords`` and the
  ``ICEBERG_COMPAT_VERSION`` tag (see ``iceberg_compat.py``). A UniForm table whose Iceberg metadata
  exists (``<table>/metadata/``) is refused by the jobs themselves (``uniform_iceberg.py``): this core
  does not convert its commits to Iceberg. The log-only jobs honour all of these: they write no data file. Identity columns are allowed: a
  rewrite generates no identity values, so the high-water mark is untouched.
- ``optimize with delta-spark``: OPTIMIZE handed to delta-spark. This core only reads the log to plan
  (the reader features ``inspect`` reads); delta-spark writes, and honours the writer features
  itself (variant types, Iceberg compatibility, materialized partition columns), except
  collations, which delta-spark 4.4 does not know. The native refusal of a feature delta-spark
  would honour says so.
- ``compute-stats`` re-adds live files with new statistics (``dataChange=false``) and writes no
  data file. It honours what OPTIMIZE honours (a variant column's statistics are its null count, as
  delta-spark keeps them); it refuses collations (collation-aware statistics) and, while enabled,
  Iceberg compatibility V1.
- ``geospatial`` (geometry and geography columns: ``geospatial.py``) is honoured by every job, the
  delta-spark engine's included. Rows are read as WKB; OPTIMIZE writes them as the parquet GEOMETRY
  or GEOGRAPHY type with the column's CRS and edge algorithm spelled out as delta-spark writes them,
  geometry chunks with their bounding boxes, and copies delta-spark's row groups as they are
  (``geospatial_files.py``). Statistics count a geospatial column's nulls and never bound it (nor
  does delta-spark); Z-order by a geospatial column is refused (its values have no order).
- ``liquid`` (a Databricks preview name of clustering, with its domain ``delta.liquid``) is not
  a protocol feature: its writer requirements were never published, and neither delta-spark
  nor delta-rs writes to such tables. Every writing job refuses it, naming the feature.
- ``checkpoint`` and ``compact-log`` copy reconciled state into new log files; every known
  feature allows that (the checkpoint writer writes V2-spec checkpoints on ``v2Checkpoint``
  tables). A job that writes both checks each.
- Catalog-managed tables (``catalogManaged``) are refused by every job but ``inspect``: their commits go
  through a catalog, which this core does not commit through, and their newest commits may not be
  published to the log yet. ``inspect`` reads the commits published so far.
- ``cleanup-log`` deletes expired log files; it honours every known writer feature, and
  ``checkpointProtection`` through :func:`checkpoint_protection_version`: history before
  ``delta.requireCheckpointProtectionBeforeVersion`` goes only as the protocol allows (see
  :mod:`.log_cleanup`), and :func:`check_checkpoint_allowed` refuses a checkpoint of a version
  before it. Every other job deletes no commit or checkpoint.
"""

from __future__ import annotations

from enum import Enum
from typing import Mapping

from airflow_delta_maint.delta.errors import UnsupportedFeatureError
from airflow_delta_maint.delta.protocol.actions import Metadata, Protocol

__all__ = [
    "DATA_FILE_OPERATIONS", "DELTA_SPARK", "DELTA_SPARK_ALTERNATIVES", "JOBS", "Operation", "KNOWN_READER_WRITER_FEATURES", "KNOWN_WRITER_FEATURES", "MAX_READER_VERSION",
    "MAX_WRITER_VERSION", "SUPPORTED_READER_FEATURES", "SUPPORTED_WRITER_FEATURES", "UNPARTITIONED_WRITER_FEATURES",
    "check_checkpoint_allowed", "check_supported", "checkpoint_protection_version", "delta_spark_hint", "operation_of", "table_features",
    "unsupported_features",
]

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

#: the name of the engine that runs delta-spark's own commands (the application's ``engine``)
DELTA_SPARK = "delta-spark"


class Operation(str, Enum):
    """What the core is asked to do to a table, as the feature gate knows it (a job's definition names its
    operation). A plain string of the same value is accepted wherever an operation is."""

    READ = "read"
    INSPECT = "inspect"
    CHECKPOINT = "checkpoint"
    COMPACT_LOG = "compact-log"
    CLEANUP_LOG = "cleanup-log"
    VACUUM = "vacuum"
    OPTIMIZE = "optimize"
    #: OPTIMIZE run by delta-spark: planned by this core, written (and its writer features honoured) by delta-spark
    OPTIMIZE_BY_DELTA_SPARK = "optimize with delta-spark"
    COMPUTE_STATS = "compute-stats"

    def __str__(self) -> str:
        return self.value


JOBS: tuple[str, ...] = tuple(op.value for op in Operation)

#: Features that appear in both ``readerFeatures`` and ``writerFeatures``.
KNOWN_READER_WRITER_FEATURES: frozenset[str] = frozenset({
    "columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck",
    "typeWidening", "typeWidening-preview", "variantType", "variantType-preview",
    "variantShredding", "variantShredding-preview", "catalogManaged", "catalogOwned-preview", "geospatial",
})

#: Writer-only features.
KNOWN_WRITER_FEATURES: frozenset[str] = frozenset({
    "appendOnly", "invariants", "checkConstraints", "generatedColumns", "allowColumnDefaults",
    "changeDataFeed", "identityColumns", "rowTracking", "domainMetadata", "icebergCompatV1",
    "icebergCompatV2", "icebergCompatV3", "clustering", "inCommitTimestamp", "collations", "collations-preview",
    "checkpointProtection", "materializePartitionColumns",
}) | KNOWN_READER_WRITER_FEATURES

_LEGACY_WRITER: dict[int, frozenset[str]] = {
    1: frozenset(),
    2: frozenset({"appendOnly", "invariants"}),
    3: frozenset({"appendOnly", "invariants", "checkConstraints"}),
    4: frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}),
    5: frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
                  "columnMapping"}),
    6: frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
                  "columnMapping", "identityColumns"}),
}
_LEGACY_READER: dict[int, frozenset[str]] = {1: frozenset(), 2: frozenset({"columnMapping"})}

_CATALOG = frozenset({"catalogManaged", "catalogOwned-preview"})
_VARIANT = frozenset({"variantType", "variantType-preview", "variantShredding", "variantShredding-preview"})
_TYPE_WIDENING = frozenset({"typeWidening", "typeWidening-preview"})
_READ_CORE = frozenset({"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint",
                        "vacuumProtocolCheck", "geospatial"})

#: Reader features each job understands (``read`` also converts widened types on read).
SUPPORTED_READER_FEATURES: dict[str, frozenset[str]] = {
    Operation.READ: _READ_CORE | _TYPE_WIDENING,
    Operation.INSPECT: _READ_CORE | _TYPE_WIDENING | _VARIANT | _CATALOG,  # the published commits
    Operation.CHECKPOINT: _READ_CORE | _TYPE_WIDENING | _VARIANT,
    Operation.COMPACT_LOG: _READ_CORE | _TYPE_WIDENING | _VARIANT,
    Operation.CLEANUP_LOG: _READ_CORE | _TYPE_WIDENING | _VARIANT,
    Operation.VACUUM: _READ_CORE | _TYPE_WIDENING | _VARIANT,
    Operation.OPTIMIZE: _READ_CORE | _TYPE_WIDENING | _VARIANT,
    Operation.OPTIMIZE_BY_DELTA_SPARK: _READ_CORE | _TYPE_WIDENING | _VARIANT,
    Operation.COMPUTE_STATS: _READ_CORE | _TYPE_WIDENING | _VARIANT,
}

_LOG_ONLY_WRITER = KNOWN_WRITER_FEATURES - _CATALOG
#: writer features a job that writes or re-adds data files honours (some only while off: see
#: :data:`CONDITIONAL_WRITER_FEATURES`)
_DATA_FILE_WRITER = frozenset({
    "appendOnly", "invariants", "checkConstraints", "generatedColumns", "allowColumnDefaults",
    "changeDataFeed", "columnMapping", "identityColumns", "deletionVectors", "timestampNtz",
    "domainMetadata", "v2Checkpoint", "vacuumProtocolCheck", "inCommitTimestamp",
    "checkpointProtection", "icebergCompatV1", "icebergCompatV2", "icebergCompatV3", "rowTracking",
    "clustering", "typeWidening", "typeWidening-preview", "materializePartitionColumns", "geospatial",
})
#: the Iceberg compatibility features a data-file job honours only while their property is off (V2 and
#: V3 are honoured enabled too: ``iceberg_compat.py``)
_ICEBERG_COMPAT_PROPERTIES = {"icebergCompatV1": "delta.enableIcebergCompatV1"}

#: Writer features each job honours; ``read`` and ``inspect`` write nothing and check none.
SUPPORTED_WRITER_FEATURES: dict[str, frozenset[str]] = {
    Operation.READ: frozenset(),
    Operation.INSPECT: frozenset(),
    Operation.CHECKPOINT: _LOG_ONLY_WRITER,
    Operation.COMPACT_LOG: _LOG_ONLY_WRITER,
    Operation.CLEANUP_LOG: _LOG_ONLY_WRITER,
    Operation.VACUUM: _LOG_ONLY_WRITER,
    Operation.OPTIMIZE: _DATA_FILE_WRITER | _VARIANT,
    # delta-spark 4.4 has no collations feature: it refuses such tables itself, so the gate does first
    Operation.OPTIMIZE_BY_DELTA_SPARK: _LOG_ONLY_WRITER - {"collations", "collations-preview"},
    # re-adds live files with new statistics (dataChange=false): no data file is written
    Operation.COMPUTE_STATS: _DATA_FILE_WRITER | _VARIANT,
}

#: Why the native OPTIMIZE refuses a feature it knows, in the words of its refusal.
_WHY_NOT_NATIVE: dict[str, str] = {
    **{name: "the native statistics and Z-order do not follow collations"
       for name in ("collations", "collations-preview")},
}
#: Why compute-stats refuses a feature it knows, in the words of its refusal.
_WHY_NOT_STATS: dict[str, str] = {
    **{name: "the statistics do not follow collations" for name in ("collations", "collations-preview")},
}

#: Features a job honours only while the table property that activates them is off.
CONDITIONAL_WRITER_FEATURES: dict[str, dict[str, str]] = {
    Operation.OPTIMIZE: _ICEBERG_COMPAT_PROPERTIES,
    Operation.COMPUTE_STATS: _ICEBERG_COMPAT_PROPERTIES,
}

#: Features a job honours only on a table without partition columns (none now: OPTIMIZE writes the
#: partition columns into new files where ``materializePartitionColumns`` asks it to).
UNPARTITIONED_WRITER_FEATURES: dict[str, frozenset[str]] = {}

#: the delta-spark operation that does a native operation's work (a native refusal it would not make says so)
DELTA_SPARK_ALTERNATIVES: dict[Operation, Operation] = {Operation.OPTIMIZE: Operation.OPTIMIZE_BY_DELTA_SPARK}
#: the operations this core runs that write or re-add data files (what UniForm's Iceberg metadata would follow)
DATA_FILE_OPERATIONS: frozenset[Operation] = frozenset({Operation.OPTIMIZE, Operation.COMPUTE_STATS})

_WRITES = frozenset(set(Operation) - {Operation.READ, Operation.INSPECT})
PROTECTION_PROPERTY = "delta.requireCheckpointProtectionBeforeVersion"


def table_features(protocol: Protocol) -> tuple[frozenset[str], frozenset[str]]:
    """The table's (reader, writer) features, with the features legacy versions imply.

    Explicit feature lists count only at reader version 3 / writer version 7, as the protocol
    says. Reader-writer features of a reader-version-3 table are also writer features.

    Returns:
        ``(reader_features, writer_features)`` as frozensets of feature names.
    """
    rv, wv = protocol.min_reader_version, protocol.min_writer_version
    if rv >= 3:
        reader = frozenset(protocol.reader_features)
    else:
        reader = _LEGACY_READER.get(rv, frozenset())
    if wv >= 7:
        writer = frozenset(protocol.writer_features)
    else:
        writer = _LEGACY_WRITER.get(wv, frozenset())
    return reader, writer | reader


def _is_true(configuration: Mapping[str, str], key: str) -> bool:
    return str(configuration.get(key, "false")).strip().lower() == "true"


def operation_of(job: Operation | str) -> Operation:
    """``job`` as an :class:`Operation` (its value as a string is accepted too).

    Raises:
        ValueError: no operation has that name.
    """
    try:
        return Operation(str(job.value if isinstance(job, Operation) else job))
    except ValueError:
        raise ValueError(f"unknown job {job!r}; expected one of {', '.join(JOBS)}") from None


def unsupported_features(protocol: Protocol, job: Operation | str, metadata: Metadata | None = None) -> list[str]:
    """What keeps ``job`` (an operation) from this table, one phrase each (empty when it may proceed).

    Raises:
        ValueError: ``job`` is not one of :data:`JOBS`.
    """
    job = operation_of(job).value
    problems: list[str] = []
    rv, wv = protocol.min_reader_version, protocol.min_writer_version
    if rv > MAX_READER_VERSION or rv < 1:
        problems.append(f"minReaderVersion {rv} (supported: 1..{MAX_READER_VERSION})")
    if job in _WRITES and (wv > MAX_WRITER_VERSION or wv < 1):
        problems.append(f"minWriterVersion {wv} (supported: 1..{MAX_WRITER_VERSION})")
    reader, writer = table_features(protocol)
    supported_reader = SUPPORTED_READER_FEATURES[job]
    for name in sorted(reader):
        if name not in KNOWN_READER_WRITER_FEATURES:
            problems.append(f"unknown reader feature '{name}'")
        elif name not in supported_reader:
            problems.append(f"reader feature '{name}'")
    if job in _WRITES:
        configuration = metadata.configuration if metadata is not None else {}
        conditional = CONDITIONAL_WRITER_FEATURES.get(job, {})
        for name in sorted(writer - reader):
            if name == "liquid":
                problems.append("writer feature 'liquid' (a Databricks preview name of liquid clustering that "
                                "is not part of the Delta protocol; upgrade the table to the 'clustering' feature "
                                "with the engine that created it)")
            elif name not in KNOWN_WRITER_FEATURES:
                problems.append(f"unknown writer feature '{name}'")
            elif name not in SUPPORTED_WRITER_FEATURES[job]:
                problems.append(f"writer feature '{name}'")
            elif name in conditional and (metadata is None or _is_true(configuration, conditional[name])):
                why = "enabled" if metadata is not None else "possibly enabled; no metadata given"
                problems.append(f"writer feature '{name}' ({conditional[name]} {why})")
            elif name in UNPARTITIONED_WRITER_FEATURES.get(job, ()) and (metadata is None or metadata.partition_columns):
                why = "on a partitioned table" if metadata is not None else "possibly partitioned; no metadata given"
                problems.append(f"writer feature '{name}' ({why}: new files must hold the partition columns)")
        # Reader-writer features: a writing job must honour their writer side too.
        for name in sorted(reader & KNOWN_READER_WRITER_FEATURES):
            if name in supported_reader and name not in SUPPORTED_WRITER_FEATURES[job]:
                problems.append(f"writer feature '{name}'")
    return problems


def _reasons(protocol: Protocol, job: Operation | str) -> str:
    """Why ``job`` refuses the features it knows but does not honour, once per reason."""
    why = {Operation.OPTIMIZE: _WHY_NOT_NATIVE, Operation.COMPUTE_STATS: _WHY_NOT_STATS}.get(operation_of(job))
    if why is None:
        return ""
    reader, writer = table_features(protocol)
    reasons = dict.fromkeys(why[n] for n in sorted(reader | writer) if n in why)
    return f" ({'; '.join(reasons)})" if reasons else ""


def checkpoint_protection_version(protocol: Protocol, metadata: Metadata) -> int | None:
    """``delta.requireCheckpointProtectionBeforeVersion`` when the table has the
    ``checkpointProtection`` writer feature (None otherwise, or when the property is unset).

    Raises:
        UnsupportedFeatureError: the property is not a whole number.
    """
    if "checkpointProtection" not in table_features(protocol)[1]:
        return None
    value = metadata.configuration.get(PROTECTION_PROPERTY)
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise UnsupportedFeatureError(
            f"the table property {PROTECTION_PROPERTY}={value!r} is not a version number") from None


def check_checkpoint_allowed(protocol: Protocol, metadata: Metadata, version: int) -> None:
    """Refuse a checkpoint of ``version`` where ``checkpointProtection`` forbids one: before
    ``delta.requireCheckpointProtectionBeforeVersion`` (``protocol``/``metadata``: the latest).

    Raises:
        UnsupportedFeatureError: naming the version and the property.
    """
    protected = checkpoint_protection_version(protocol, metadata)
    if protected is not None and version < protected:
        raise UnsupportedFeatureError(
            f"cannot write a checkpoint of version {version}: the table's checkpointProtection forbids "
            f"checkpoints before version {protected} ({PROTECTION_PROPERTY})")


def delta_spark_hint(job: Operation | str) -> str:
    """What a refusal of ``job`` adds when delta-spark does that work (empty when it has no delta-spark
    alternative): ``; delta-spark's OPTIMIZE does: run it with engine='delta-spark'``."""
    job = operation_of(job)
    if job not in DELTA_SPARK_ALTERNATIVES:
        return ""
    return f"; delta-spark's {job.value.upper()} does: run it with engine='{DELTA_SPARK}'"


def check_supported(protocol: Protocol, job: Operation | str, metadata: Metadata | None = None) -> None:
    """Refuse a table that uses a protocol version or feature ``job`` does not implement.

    Args:
        protocol: the table's protocol.
        job: one of ``read``, ``inspect``, ``checkpoint``, ``compact-log``, ``vacuum``, ``optimize``.
        metadata: the table's metadata; lets features that matter only while enabled through a
            table property pass when they are off. Without it such features are refused.

    Raises:
        UnsupportedFeatureError: naming the job and every unsupported version or feature.
        ValueError: ``job`` is unknown.
    """
    job = operation_of(job)
    problems = unsupported_features(protocol, job, metadata)
    if problems:
        alternative = DELTA_SPARK_ALTERNATIVES.get(job)
        hint = delta_spark_hint(job) if alternative and not unsupported_features(protocol, alternative, metadata) else ""
        raise UnsupportedFeatureError(
            f"cannot run {job} on this table: it uses {', '.join(problems)}, which {job} does not support"
            f"{_reasons(protocol, job)}{hint}")
