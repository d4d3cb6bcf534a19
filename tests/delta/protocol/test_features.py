"""The table-feature gate, on corpus tables and on synthetic protocols."""

from __future__ import annotations

import pytest

from airflow_delta_maint.delta.errors import UnsupportedFeatureError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.actions import Metadata, Protocol
from airflow_delta_maint.delta.protocol.features import (
    JOBS, KNOWN_WRITER_FEATURES, Operation, SUPPORTED_WRITER_FEATURES, check_supported, table_features,
    unsupported_features,
)
from tests.conftest import corpus_path

WRITING_JOBS = ("checkpoint", "compact-log", "vacuum", "optimize")


def proto(rv: int, wv: int, readers=(), writers=()) -> Protocol:
    return Protocol(rv, wv, tuple(readers), tuple(writers))


def meta(**configuration: str) -> Metadata:
    return Metadata(id="t", schema_string="", partition_columns=(), configuration=dict(configuration))


def load(name: str) -> Snapshot:
    return Snapshot.load(str(corpus_path(name)))


# -- legacy versions imply features ------------------------------------------------------------

@pytest.mark.parametrize("wv, expected", [
    (1, set()),
    (2, {"appendOnly", "invariants"}),
    (3, {"appendOnly", "invariants", "checkConstraints"}),
    (4, {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}),
    (5, {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping"}),
    (6, {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping",
         "identityColumns"}),
])
def test_legacy_writer_versions_imply_features(wv, expected):
    reader, writer = table_features(proto(1, wv))
    assert reader == frozenset()
    assert writer == expected


def test_legacy_reader_2_implies_column_mapping_and_explicit_lists_count_only_at_3_7():
    assert table_features(proto(2, 5))[0] == {"columnMapping"}
    # Feature lists below reader 3 / writer 7 are not part of the protocol: ignored.
    reader, writer = table_features(proto(2, 6, ["deletionVectors"], ["rowTracking"]))
    assert reader == {"columnMapping"} and "rowTracking" not in writer and "identityColumns" in writer
    reader, writer = table_features(proto(3, 7, ["deletionVectors"], ["appendOnly"]))
    assert reader == {"deletionVectors"} and writer == {"deletionVectors", "appendOnly"}


def test_every_legacy_protocol_passes_every_job():
    for rv in (1, 2):
        for wv in range(1, 7):
            if rv == 2 and wv < 5:
                continue
            for job in JOBS:
                check_supported(proto(rv, wv), job, meta())


# -- versions and unknown names -------------------------------------------------------------------

@pytest.mark.parametrize("job", JOBS)
def test_reader_version_above_3_is_refused(job):
    with pytest.raises(UnsupportedFeatureError, match=rf"minReaderVersion 4.*{job}"):
        check_supported(proto(4, 7), job)


@pytest.mark.parametrize("job", WRITING_JOBS)
def test_writer_version_above_7_is_refused_for_writing_jobs(job):
    with pytest.raises(UnsupportedFeatureError, match="minWriterVersion 8"):
        check_supported(proto(1, 8), job)


def test_readers_ignore_writer_only_features_and_versions():
    # The protocol asks readers to check reader features only.
    for job in ("read", "inspect"):
        check_supported(proto(1, 8), job)
        check_supported(proto(3, 7, [], ["someFutureWriterFeature", "rowTracking"]), job)


def test_unknown_reader_feature_is_refused_by_every_job():
    for job in JOBS:
        with pytest.raises(UnsupportedFeatureError, match="unknown reader feature 'teleport'"):
            check_supported(proto(3, 7, ["teleport"], ["teleport"]), job)


def test_message_names_every_feature_and_the_job():
    p = proto(3, 7, ["deletionVectors", "variantType"],
              ["deletionVectors", "variantType", "rowTracking", "clustering", "typeWidening", "mystery"])
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_supported(p, "read", meta())
    message = str(exc.value)
    for name in ("variantType", "read"):
        assert name in message
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_supported(p, "optimize", meta())
    message = str(exc.value)
    for name in ("mystery", "optimize"):
        assert name in message
    for honoured in ("'deletionVectors'", "variantType", "rowTracking", "clustering", "typeWidening"):
        assert honoured not in message


def test_unknown_job_is_a_value_error():
    with pytest.raises(ValueError, match="unknown job"):
        check_supported(proto(1, 2), "defrag")


# -- per-job decisions on synthetic protocols -------------------------------------------------

@pytest.mark.parametrize("feature", ["rowTracking", "clustering", "typeWidening", "typeWidening-preview"])
def test_optimize_honours_row_tracking_clustering_and_type_widening(feature):
    p = proto(3, 7, [feature] if feature.startswith("typeWidening") else [], ["domainMetadata", feature])
    for job in JOBS:
        check_supported(p, job, meta())


@pytest.mark.parametrize("feature", ["collations", "collations-preview"])
def test_optimize_refuses_writer_features_a_rewrite_cannot_honour(feature):
    p = proto(1, 7, [], ["appendOnly", feature])
    with pytest.raises(UnsupportedFeatureError, match=rf"writer feature '{feature}'"):
        check_supported(p, "optimize", meta())
    for job in ("vacuum", "compact-log", "checkpoint", "inspect", "read"):
        check_supported(p, job, meta())


@pytest.mark.parametrize("feature", ["variantType", "variantType-preview", "variantShredding",
                                     "variantShredding-preview"])
def test_optimize_and_compute_stats_honour_variant_types(feature):
    p = proto(3, 7, [feature], [feature])
    for job in ("optimize", "compute-stats", "vacuum", "compact-log", "checkpoint", "inspect",
                Operation.OPTIMIZE_BY_DELTA_SPARK):
        check_supported(p, job, meta())
    with pytest.raises(UnsupportedFeatureError, match=feature):  # reading rows does not decode variants
        check_supported(p, "read", meta())


@pytest.mark.parametrize("readers, writers, configuration, why", [
    ([], ["columnMapping", "icebergCompatV1"], {"delta.enableIcebergCompatV1": "true"}, "enableIcebergCompatV1 enabled"),
])
def test_native_optimize_says_why_and_that_delta_spark_honours_it(readers, writers, configuration, why):
    p = proto(3 if readers else 2, 7, readers, writers)
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_supported(p, "optimize", meta(**configuration))
    message = str(exc.value)
    assert why in message and message.endswith(
        "; delta-spark's OPTIMIZE does: run it with engine='delta-spark'"), message
    check_supported(p, Operation.OPTIMIZE_BY_DELTA_SPARK, meta(**configuration))


def test_collations_are_refused_by_both_engines_with_the_native_reason():
    p = proto(1, 7, [], ["collations"])
    with pytest.raises(UnsupportedFeatureError) as exc:
        check_supported(p, "optimize", meta())
    assert "(the native statistics and Z-order do not follow collations)" in str(exc.value)
    assert "engine='delta-spark'" not in str(exc.value)
    with pytest.raises(UnsupportedFeatureError, match="writer feature 'collations'"):
        check_supported(p, Operation.OPTIMIZE_BY_DELTA_SPARK, meta())


@pytest.mark.parametrize("readers, writers, named", [
    (["teleport"], ["teleport"], "unknown reader feature 'teleport'"),
    ([], ["newFileKind"], "unknown writer feature 'newFileKind'"),
    (["catalogManaged"], ["catalogManaged", "inCommitTimestamp"], "catalogManaged"),
    ([], ["liquid"], "writer feature 'liquid'"),
])
def test_what_neither_engine_supports_is_refused_without_the_hint(readers, writers, named):
    p = proto(3 if readers else 1, 7, readers, writers)
    for job in ("optimize", Operation.OPTIMIZE_BY_DELTA_SPARK):
        with pytest.raises(UnsupportedFeatureError, match=named) as exc:
            check_supported(p, job, meta())
        assert "engine='delta-spark'" not in str(exc.value)


def test_optimize_with_delta_spark_reads_what_inspect_reads():
    """delta-spark writes; this core plans from the log, so it needs only the log's reader features."""
    for readers in (["variantType"], ["typeWidening"], ["deletionVectors", "columnMapping", "v2Checkpoint"]):
        check_supported(proto(3, 7, readers, readers + ["domainMetadata", "rowTracking", "clustering"]),
                        Operation.OPTIMIZE_BY_DELTA_SPARK, meta())
    with pytest.raises(UnsupportedFeatureError, match="minWriterVersion 8"):
        check_supported(proto(1, 8), Operation.OPTIMIZE_BY_DELTA_SPARK, meta())


def test_read_converts_widened_types_but_not_variants():
    check_supported(proto(3, 7, ["typeWidening"], ["typeWidening"]), "read")
    with pytest.raises(UnsupportedFeatureError, match="variantType"):
        check_supported(proto(3, 7, ["variantType"], ["variantType"]), "read")


def test_optimize_allows_identity_columns_and_deletion_vectors_and_ict():
    p = proto(3, 7, ["deletionVectors", "columnMapping", "timestampNtz", "vacuumProtocolCheck", "v2Checkpoint"],
              ["deletionVectors", "columnMapping", "timestampNtz", "vacuumProtocolCheck", "v2Checkpoint",
               "identityColumns", "inCommitTimestamp", "domainMetadata", "changeDataFeed", "appendOnly",
               "invariants", "checkConstraints", "generatedColumns", "checkpointProtection"])
    check_supported(p, "optimize", meta())
    check_supported(proto(1, 6), "optimize", meta())


def test_iceberg_compat_v1_refused_by_optimize_only_while_enabled():
    p = proto(2, 7, [], ["columnMapping", "icebergCompatV1"])
    check_supported(p, "optimize", meta(**{"delta.enableIcebergCompatV1": "false"}))
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1.*enabled"):
        check_supported(p, "optimize", meta(**{"delta.enableIcebergCompatV1": "true"}))
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        check_supported(p, "optimize")  # no metadata: assume the worst
    check_supported(p, "vacuum", meta(**{"delta.enableIcebergCompatV1": "true"}))


@pytest.mark.parametrize("readers, writers, key", [
    ([], ["columnMapping", "icebergCompatV2"], "delta.enableIcebergCompatV2"),
    (["columnMapping", "deletionVectors"], ["columnMapping", "deletionVectors", "rowTracking", "domainMetadata",
                                            "icebergCompatV3"], "delta.enableIcebergCompatV3"),
])
def test_iceberg_compat_v2_and_v3_honoured_enabled_by_every_job(readers, writers, key):
    p = proto(3 if readers else 2, 7, readers, writers)
    on = meta(**{key: "true", "delta.universalFormat.enabledFormats": "iceberg"})
    for job in ("optimize", "compute-stats", "checkpoint", "compact-log", "cleanup-log", "vacuum",
                Operation.OPTIMIZE_BY_DELTA_SPARK):
        check_supported(p, job, on)


def test_materialized_partition_columns_honoured_on_partitioned_tables():
    p = proto(1, 7, [], ["appendOnly", "materializePartitionColumns"])
    partitioned = Metadata(id="t", schema_string="", partition_columns=("p",), configuration={})
    for job in ("optimize", "compute-stats", "checkpoint", "compact-log", "cleanup-log", "vacuum",
                Operation.OPTIMIZE_BY_DELTA_SPARK):
        check_supported(p, job, partitioned)
    check_supported(p, "optimize")  # without metadata too: nothing about it is conditional


def test_vacuum_supports_vacuum_protocol_check_and_checks_writer_features():
    check_supported(proto(3, 7, ["vacuumProtocolCheck"], ["vacuumProtocolCheck"]), "vacuum", meta())
    with pytest.raises(UnsupportedFeatureError, match="unknown writer feature 'newFileKind'"):
        check_supported(proto(3, 7, ["vacuumProtocolCheck"], ["vacuumProtocolCheck", "newFileKind"]), "vacuum")


def test_v2_checkpoint_tables_are_fine_for_every_job():
    p = proto(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    for job in JOBS:
        check_supported(p, job, meta())


@pytest.mark.parametrize("job", [j for j in JOBS if j != "inspect"])
def test_catalog_managed_tables_are_refused_by_every_job_but_inspect(job):
    p = proto(3, 7, ["catalogManaged"], ["catalogManaged", "inCommitTimestamp"])
    with pytest.raises(UnsupportedFeatureError, match="catalogManaged"):
        check_supported(p, job, meta())


@pytest.mark.parametrize("feature", ["catalogManaged", "catalogOwned-preview"])
def test_inspect_reads_the_published_commits_of_a_catalog_managed_table(feature):
    check_supported(proto(3, 7, [feature], [feature, "inCommitTimestamp"]), "inspect", meta())


def test_supported_writer_features_are_known_names():
    assert set(SUPPORTED_WRITER_FEATURES) == set(JOBS)
    for job, names in SUPPORTED_WRITER_FEATURES.items():
        assert names <= KNOWN_WRITER_FEATURES, job


# -- corpus tables ------------------------------------------------------------------------------

CORPUS_EXPECTATIONS = [
    # (table, jobs allowed, jobs refused, feature named in the refusal)
    ("spark/table-with-dv-small", JOBS, (), None),
    ("rs/table-with-dv-small", JOBS, (), None),
    ("golden/table-with-columnmapping-mode-name", JOBS, (), None),
    ("golden/data-reader-timestamp_ntz-id-mode", JOBS, (), None),
    ("golden/basic-with-vacuum-protocol-check-feature", JOBS, (), None),
    ("rs/cdc_ict_table", JOBS, (), None),
    ("golden/v2-checkpoint-json", JOBS, (), None),
    ("rs/table-with-domain-metadata", JOBS, (), None),
    ("golden/type-widening", JOBS, (), None),
    ("golden/collations-table", ("read", "inspect", "checkpoint", "compact-log", "vacuum"),
     ("optimize", Operation.OPTIMIZE_BY_DELTA_SPARK), "collations"),
    ("golden/table-with-icebegCompatV2Enabled", JOBS, (), None),
    ("rs/spark-variant-stable-feature-checkpoint", ("inspect", "checkpoint", "compact-log", "vacuum", "optimize",
                                                    "compute-stats", Operation.OPTIMIZE_BY_DELTA_SPARK), ("read",),
     "variantType"),
    # 'liquid' is no feature name the protocol defines: writers refuse it, readers ignore writer-only names.
    ("rs/table_with_liquid_clustering", ("read", "inspect"),
     ("checkpoint", "compact-log", "vacuum", "optimize", Operation.OPTIMIZE_BY_DELTA_SPARK), "liquid"),
    # Invalid on purpose: reader version 5 with an unknown reader feature 'blahabl'.
    ("rs/simple_table_features", (), JOBS, "blahabl"),
    # Invalid on purpose: reader version 99.
    ("golden/deltalog-invalid-protocol-version", (), JOBS, "minReaderVersion 99"),
]


@pytest.mark.parametrize("table, allowed, refused, named", CORPUS_EXPECTATIONS,
                         ids=[c[0] for c in CORPUS_EXPECTATIONS])
def test_corpus_tables(table, allowed, refused, named):
    snap = load(table)
    for job in allowed:
        check_supported(snap.protocol, job, snap.metadata)
    for job in refused:
        with pytest.raises(UnsupportedFeatureError) as exc:
            check_supported(snap.protocol, job, snap.metadata)
        assert named in str(exc.value) and job in str(exc.value)


def test_every_loadable_corpus_table_is_classified_without_error(manifest):
    """The gate answers for every table: no crash, and plain tables pass every job."""
    plain = 0
    for entry in manifest:
        oracle = entry["oracle"]
        if not oracle.get("loaded"):
            continue
        p = proto(oracle["min_reader_version"], oracle["min_writer_version"], oracle["reader_features"],
                  oracle["writer_features"])
        for job in JOBS:
            unsupported_features(p, job, None)
        if oracle["min_reader_version"] == 1 and oracle["min_writer_version"] <= 6:
            plain += 1
            for job in JOBS:
                check_supported(p, job)
    assert plain > 50
