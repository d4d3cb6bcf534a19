"""``describe-table``: a table's schema, protocol and features, read from its log; changes nothing."""

from __future__ import annotations

from airflow_delta_maint.delta.protocol.features import Operation

from .definition import JobDefinition
from .options import Option, options

DESCRIBE_TABLE = JobDefinition(
    name="describe-table",
    summary="Report a table's schema, protocol, features, partition columns and properties; changes nothing.",
    runner="airflow_delta_maint.app.jobs.describe_table",
    operation=Operation.INSPECT,
    writes=False,
    driver_only=True,
    options=options(Option("version", "int", "describe this version (time travel)")),
)
