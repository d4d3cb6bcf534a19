"""OPTIMIZE as an Airflow task: compaction, Z-order, liquid clustering, the auto-compaction policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.operators.base import DeltaMaintenanceOperator
from airflow_delta_maint.operators.options import as_bool, job_options


class OptimizeOperator(DeltaMaintenanceOperator):
    """
    Compact a table's small files into few large ones (OPTIMIZE), optionally Z-ordered.

    The rewrite is committed with ``dataChange=false``, so readers and streaming consumers see no
    new data. Returns the run's metrics (``numAddedFiles``, ``numRemovedFiles``, ``numAddedBytes``,
    ``numRemovedBytes``, ...).

    :param where: a partition predicate limiting the files considered, e.g. ``"day >= '2024-01-01'"``. (templated)
    :param zorder_by: columns to Z-order by (a list or a comma-separated string). (templated)
    :param min_file_size: files of at least this many bytes are left alone. (templated)
    :param max_file_size: the target size of the files written, in bytes. (templated)
    :param max_concurrent_bins: how many bins Spark rewrites at once. (templated)
    :param batch_bytes: commit once every this many input bytes. (templated)
    :param dv_ratio: also rewrite files whose deletion vectors delete more than this share of their
        rows (default 0.05). (templated)
    :param compression: parquet codec of the files written: ``snappy`` (default), ``zstd``,
        ``gzip``, ``lz4`` or ``none``. (templated)
    :param full: liquid-clustered tables: recluster every file, as after a change of the clustering
        columns (delta-spark's ``OPTIMIZE FULL``). (templated)
    :param min_cube_size: liquid-clustered tables: a ZCube of at least this many bytes is finished
        and left alone (default 100 GiB, delta-spark's). (templated)
    :param target_cube_size: liquid-clustered tables: at most this many input bytes are clustered
        together (default 150 GiB). (templated)
    :param rewrite_type_widened: rewrite exactly the files that still hold a widened column in its
        old type (before dropping the type-widening feature). (templated)
    :param policy: ``"all"`` (default) plans every partition the options select; ``"auto"`` applies
        the auto-compaction policy: only partitions that received data files since an OPTIMIZE last
        covered them and hold at least ``min_num_files`` small files or a file past
        ``max_deleted_rows_ratio`` deleted rows, at most ``max_partitions``, the worst first. The
        decision runs on the worker from the log: when nothing is chosen no Spark application
        starts. (templated)
    :param all_partitions: ``policy="auto"``: consider every partition. (templated)
    :param min_num_files: ``policy="auto"``: small files a partition needs (default 50). (templated)
    :param max_deleted_rows_ratio: ``policy="auto"``: deleted-rows share that makes a file worth
        rewriting (default 0.05). (templated)
    :param max_partitions: ``policy="auto"``: partitions per run (default 128). (templated)
    :param target_files: rewrite each selected partition into exactly this many files of even row
        counts, splitting files that are too large. (templated)
    :param lease_seconds: how long a run reserves its partitions against other OPTIMIZE runs of the
        table, renewed while it works (default 600; 0 turns reservations off). (templated)
    :param bins_per_commit: commit rewritten bins this many at a time as they are rewritten; ``0``: one
        commit per batch once all its bins are rewritten; unset: the run's path from the table's writers,
        each batch at once on a quiet table, bins one at a time on a busy one (see docs/optimize.md,
        "Busy tables"). (templated)
    :param min_file_age: leave out files younger than this many seconds, which writers may still be
        working on. (templated)
    :param skip_recent_partitions: leave out partitions that any of the newest N commits changed data
        in. (templated)
    :param wait_for_writer: hold the rewritten bins and commit them right after another writer's
        commit, waiting for one at most this many seconds. (templated)
    :param purge: rewrite only the files with deletion vectors, dropping their deleted rows (delta-spark's
        ``REORG TABLE ... APPLY (PURGE)``, which the delta-spark engine runs); takes no ``zorder_by``,
        ``policy="auto"`` or ``target_files``. (templated)
    :param dry_run: plan only; commit nothing. (templated, as the attribute ``dry_run_only``: an
        attribute named ``dry_run`` would hide ``BaseOperator.dry_run()``)

    Row-tracking, liquid-clustered and type-widened tables are handled as the Delta protocol
    says; ``where`` and ``zorder_by`` are refused on a liquid-clustered table.

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = "optimize"
    template_fields: Sequence[str] = (
        *DeltaMaintenanceOperator.template_fields,
        "where", "zorder_by", "min_file_size", "max_file_size", "max_concurrent_bins", "batch_bytes", "dv_ratio",
        "compression", "full", "min_cube_size", "target_cube_size", "rewrite_type_widened", "policy",
        "target_files", "all_partitions", "min_num_files", "max_deleted_rows_ratio", "max_partitions", "lease_seconds", "dry_run_only",
        "bins_per_commit", "min_file_age", "skip_recent_partitions", "wait_for_writer", "purge",
    )

    def __init__(
        self,
        *,
        where: str | None = None,
        zorder_by: str | Sequence[str] | None = None,
        min_file_size: int | str | None = None,
        max_file_size: int | str | None = None,
        max_concurrent_bins: int | str | None = None,
        batch_bytes: int | str | None = None,
        dv_ratio: float | str | None = None,
        compression: str | None = None,
        full: bool | str = False,
        min_cube_size: int | str | None = None,
        target_cube_size: int | str | None = None,
        rewrite_type_widened: bool | str = False,
        policy: str = "all",
        all_partitions: bool | str = False,
        min_num_files: int | str | None = None,
        max_deleted_rows_ratio: float | str | None = None,
        max_partitions: int | str | None = None,
        lease_seconds: int | str | None = None,
        target_files: int | str | None = None,
        bins_per_commit: int | str | None = None,
        min_file_age: float | str | None = None,
        skip_recent_partitions: int | str | None = None,
        wait_for_writer: float | str | None = None,
        purge: bool | str = False,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bins_per_commit = bins_per_commit
        self.min_file_age = min_file_age
        self.skip_recent_partitions = skip_recent_partitions
        self.wait_for_writer = wait_for_writer
        self.full = full
        self.min_cube_size = min_cube_size
        self.target_cube_size = target_cube_size
        self.rewrite_type_widened = rewrite_type_widened
        self.policy = policy
        self.all_partitions = all_partitions
        self.min_num_files = min_num_files
        self.max_deleted_rows_ratio = max_deleted_rows_ratio
        self.max_partitions = max_partitions
        self.lease_seconds = lease_seconds
        self.target_files = target_files
        self.where = where
        self.zorder_by = zorder_by
        self.min_file_size = min_file_size
        self.max_file_size = max_file_size
        self.max_concurrent_bins = max_concurrent_bins
        self.batch_bytes = batch_bytes
        self.dv_ratio = dv_ratio
        self.compression = compression
        self.dry_run_only = dry_run
        self.purge = purge

    def job_args(self) -> list[str]:
        policy = str(self.policy).strip().lower()
        if policy not in ("all", "auto"):
            raise AirflowException(f"policy must be 'all' or 'auto', got {self.policy!r}")
        return job_options({
            "where": self.where,
            "zorder_by": self.zorder_by,
            "min_file_size": self.min_file_size,
            "max_file_size": self.max_file_size,
            "max_concurrent_bins": self.max_concurrent_bins,
            "batch_bytes": self.batch_bytes,
            "dv_ratio": self.dv_ratio,
            "compression": self.compression,
            "full": as_bool(self.full),
            "min_cube_size": self.min_cube_size,
            "target_cube_size": self.target_cube_size,
            "rewrite_type_widened": as_bool(self.rewrite_type_widened),
            "auto": policy == "auto",
            "all_partitions": as_bool(self.all_partitions),
            "min_num_files": self.min_num_files,
            "max_deleted_rows_ratio": self.max_deleted_rows_ratio,
            "max_partitions": self.max_partitions,
            "lease_seconds": self.lease_seconds,
            "target_files": self.target_files,
            "bins_per_commit": self.bins_per_commit,
            "min_file_age": self.min_file_age,
            "skip_recent_partitions": self.skip_recent_partitions,
            "wait_for_writer": self.wait_for_writer,
            "purge": as_bool(self.purge),
            "dry_run": as_bool(self.dry_run_only),
        })
