"""UniForm's Iceberg side: whether a table has it and whether its Iceberg metadata exists.

With ``delta.universalFormat.enabledFormats`` naming ``iceberg``, delta-spark (with its delta-iceberg
jar) writes Iceberg metadata under ``<table>/metadata/`` after each of its commits, converting every
commit since the last one it converted. This core writes no Iceberg metadata, so the data-file jobs
refuse a UniForm table once that metadata exists; a table without it (UniForm recorded, no
converter ever ran) is maintained like any Iceberg-compatible table. VACUUM never lists the
``metadata`` folder (:mod:`~airflow_delta_maint.delta.storage.table_files`).
"""

from __future__ import annotations

from airflow_delta_maint.delta.errors import UnsupportedFeatureError
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.features import DATA_FILE_OPERATIONS, Operation, delta_spark_hint, operation_of
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.delta.storage.table_files import ICEBERG_METADATA_FOLDER

__all__ = ["ENABLED_FORMATS", "ICEBERG_METADATA_FOLDER", "check_no_iceberg_metadata", "iceberg_metadata_present",
           "uniform_iceberg_enabled"]

ENABLED_FORMATS = "delta.universalFormat.enabledFormats"


def uniform_iceberg_enabled(metadata: Metadata) -> bool:
    """Whether ``delta.universalFormat.enabledFormats`` names ``iceberg``."""
    formats = str(metadata.configuration.get(ENABLED_FORMATS) or "")
    return "iceberg" in {f.strip().lower() for f in formats.split(",")}


def iceberg_metadata_present(storage: Storage) -> bool:
    """Whether an Iceberg table metadata file (``metadata/*.metadata.json``) exists under the table root."""
    return any(f.key.endswith(".metadata.json") for f in storage.list_from(f"{ICEBERG_METADATA_FOLDER}/"))


def check_no_iceberg_metadata(storage: Storage, metadata: Metadata, job: Operation | str) -> None:
    """Refuse ``job``, an operation that writes or re-adds data files (:data:`~.features.DATA_FILE_OPERATIONS`;
    any other passes), on a UniForm Iceberg table whose Iceberg metadata exists; lists ``metadata/`` only on a
    UniForm Iceberg table.

    Raises:
        UnsupportedFeatureError: one line naming the case.
    """
    job = operation_of(job)
    if job in DATA_FILE_OPERATIONS and uniform_iceberg_enabled(metadata) and iceberg_metadata_present(storage):
        raise UnsupportedFeatureError(
            f"cannot run {job} on this table: it is a UniForm Iceberg table with Iceberg metadata under "
            f"{ICEBERG_METADATA_FOLDER}/, which {job} does not convert to Iceberg{delta_spark_hint(job)}")
