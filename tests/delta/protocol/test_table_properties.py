"""Table properties parsed once: typed values, defaults, and one error text for a bad value."""

from __future__ import annotations

import pytest

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.table_properties import (InvalidTablePropertyError, TableProperties,
                                                                 parse_byte_size)

DAY_MS = 86_400_000


def test_defaults_when_nothing_is_set():
    p = TableProperties({})
    assert p.log_retention_ms == 30 * DAY_MS and p.deleted_file_retention_ms == 7 * DAY_MS
    assert p.in_commit_timestamps is False and p.ict_enablement_version is None
    assert p.checkpoint_policy == "v2" and p.checkpoint_interval == 10 and p.log_compaction_interval == 5
    assert p.write_stats_as_struct is False and p.write_stats_as_json is True
    assert p.target_file_size is None and p.append_only is False and p.expired_log_cleanup is True
    assert p.compression_codec == "zstd" and p.num_indexed_cols == 32 and p.stats_columns is None


def test_values_are_typed():
    p = TableProperties({"delta.logRetentionDuration": "interval 2 days", "delta.deletedFileRetentionDuration": "36 hours",
                         "delta.enableInCommitTimestamps": "TRUE", "delta.inCommitTimestampEnablementVersion": " 4 ",
                         "delta.checkpointPolicy": "Classic", "delta.checkpointInterval": "3",
                         "delta.checkpoint.writeStatsAsStruct": "true", "delta.targetFileSize": "128mb",
                         "delta.appendOnly": "true", "delta.parquet.compression.codec": "SNAPPY",
                         "delta.logCompactionInterval": "7", "delta.enableExpiredLogCleanup": "false",
                         "delta.dataSkippingNumIndexedCols": "-1"})
    assert p.log_retention_ms == 2 * DAY_MS and p.deleted_file_retention_ms == 36 * 3_600_000
    assert p.in_commit_timestamps and p.ict_enablement_version == 4
    assert p.checkpoint_policy == "classic" and p.checkpoint_interval == 3 and p.log_compaction_interval == 7
    assert p.write_stats_as_struct and p.target_file_size == 128 * 1024 * 1024 and p.append_only
    assert p.compression_codec == "snappy" and not p.expired_log_cleanup and p.num_indexed_cols == -1


def test_in_commit_timestamps_from_creation_start_at_version_0():
    assert TableProperties({"delta.enableInCommitTimestamps": "true"}).ict_enablement_version == 0
    assert TableProperties({"delta.inCommitTimestampEnablementVersion": "9"}).ict_enablement_version is None


@pytest.mark.parametrize("key, value, why", [
    ("delta.logRetentionDuration", "3 months", "months and years are not allowed"),
    ("delta.deletedFileRetentionDuration", "soon", "expected '<number> <unit>' pairs"),
    ("delta.enableInCommitTimestamps", "yes", "expected true or false"),
    ("delta.checkpointPolicy", "v3", "expected v2 or classic"),
    ("delta.checkpointInterval", "0", "expected a whole number of at least 1"),
    ("delta.targetFileSize", "big", "expected a size in bytes"),
    ("delta.parquet.compression.codec", "brotli", "expected one of"),
    ("delta.logCompactionInterval", "1", "expected a whole number of at least 2"),
])
def test_a_bad_value_gets_one_error_text(key, value, why):
    attribute = {"delta.logRetentionDuration": "log_retention_ms",
                 "delta.deletedFileRetentionDuration": "deleted_file_retention_ms",
                 "delta.enableInCommitTimestamps": "in_commit_timestamps", "delta.checkpointPolicy": "checkpoint_policy",
                 "delta.checkpointInterval": "checkpoint_interval", "delta.targetFileSize": "target_file_size",
                 "delta.parquet.compression.codec": "compression_codec",
                 "delta.logCompactionInterval": "log_compaction_interval"}[key]
    with pytest.raises(InvalidTablePropertyError) as caught:
        getattr(TableProperties({key: value}), attribute)
    assert isinstance(caught.value, InvalidArgumentError)
    assert str(caught.value).startswith(f"the table property {key}={value!r} is invalid: ") and why in str(caught.value)


def test_a_malformed_enablement_version_is_refused_wherever_it_is_read():
    """One rule for every reader of commit times (VACUUM, expired-log cleanup): refused, not guessed."""
    from airflow_delta_maint.delta.log.commit_time import commit_times, latest_commit_at_or_before
    from airflow_delta_maint.delta.log.listing import LogListing

    conf = {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": "v1"}
    with pytest.raises(InvalidTablePropertyError, match="inCommitTimestampEnablementVersion"):
        TableProperties(conf).ict_enablement_version
    with pytest.raises(InvalidTablePropertyError):
        commit_times(None, LogListing(commits={0: None}), conf)  # type: ignore[arg-type]
    with pytest.raises(InvalidTablePropertyError):
        latest_commit_at_or_before(None, 0, conf, LogListing(commits={0: None}))  # type: ignore[arg-type]


def test_a_bad_value_stops_only_the_jobs_that_read_it():
    p = TableProperties({"delta.targetFileSize": "big"})
    assert p.deleted_file_retention_ms == 7 * DAY_MS  # VACUUM's property reads fine
    with pytest.raises(InvalidTablePropertyError):
        p.target_file_size


def test_metadata_parses_its_properties_once():
    m = Metadata.from_action({"id": "t", "configuration": {"delta.checkpointInterval": "4"}})
    assert m.properties is m.properties and m.properties.checkpoint_interval == 4


@pytest.mark.parametrize("text, size", [("1", 1), ("134217728", 134217728), ("128mb", 128 << 20), ("1g", 1 << 30),
                                        ("2 KB", 2048), ("1t", 1 << 40)])
def test_byte_sizes_read_as_delta_spark_reads_them(text, size):
    assert parse_byte_size(text) == size
