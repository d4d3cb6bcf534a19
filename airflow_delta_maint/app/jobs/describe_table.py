"""Run ``describe-table``: the header of the table's state (no data file, no file list), as metrics."""

from __future__ import annotations

import argparse
import json
from typing import Any

from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.features import check_supported, table_features

from ..context import JobContext
from ..job_definitions.describe_table import DESCRIBE_TABLE
from ..state_reading import read_state


def describe(state: TableHeader) -> dict[str, Any]:
    """The table's schema (Delta's own JSON form), protocol, features, partition columns and properties."""
    check_supported(state.protocol, DESCRIBE_TABLE.operation)
    readers, writers = table_features(state.protocol)
    metadata = state.metadata
    return {
        "status": "skipped", "version_read": state.version, "version": state.version,
        "schema": json.loads(metadata.schema_string) if metadata.schema_string else None,
        "partition_columns": list(metadata.partition_columns),
        "protocol": {"min_reader_version": state.protocol.min_reader_version,
                     "min_writer_version": state.protocol.min_writer_version,
                     "reader_features": sorted(readers), "writer_features": sorted(writers)},
        "properties": dict(metadata.configuration), "table_id": metadata.id, "name": metadata.name,
        "description": metadata.description, "created_time": metadata.created_time,
    }


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Describe ``ctx.table`` at ``version`` (default: the latest)."""
    described = read_state(ctx.storage, describe, args.version, DESCRIBE_TABLE.name, paths_only=True)
    ctx.version_read = described["version"]
    return described


def format_human(m: dict[str, Any]) -> str:
    fields = (m.get("schema") or {}).get("fields") or []
    columns = "\n".join(f"  {f['name']}: {json.dumps(f['type']) if not isinstance(f['type'], str) else f['type']}"
                        f"{'' if f.get('nullable', True) else ' not null'}" for f in fields)
    features = sorted(set(m["protocol"]["reader_features"]) | set(m["protocol"]["writer_features"]))
    return (f"table        {m['table']} (version {m['version']})\n"
            f"protocol     reader {m['protocol']['min_reader_version']}, writer "
            f"{m['protocol']['min_writer_version']}; features {', '.join(features) or '-'}\n"
            f"partitioned  {', '.join(m['partition_columns']) or '-'}\n"
            f"columns\n{columns}")
