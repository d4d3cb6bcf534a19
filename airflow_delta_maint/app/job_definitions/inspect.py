"""``inspect``: a table's health, read from its log alone; changes nothing."""

from __future__ import annotations

from airflow_delta_maint.delta.protocol.features import Operation

from .definition import JobDefinition
from .options import Option, options

#: files below this size count as small
DEFAULT_SMALL_FILE_BYTES = 128 * 1024 * 1024

INSPECT = JobDefinition(
    name="inspect",
    summary="Report a table's health (files, sizes, small files, deletion vectors, log) from its log.",
    runner="airflow_delta_maint.app.jobs.inspect",
    operation=Operation.INSPECT,
    writes=False,
    driver_only=True,
    options=options(
        Option("version", "int", "inspect this version (time travel)"),
        Option("small_file_bytes", "int", "files below this size count as small (default 128 MiB)",
               default=DEFAULT_SMALL_FILE_BYTES),
        Option("files", "bool", "also list the active file paths"),
    ),
)
