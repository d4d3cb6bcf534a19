"""OPTIMIZE as an Airflow task: compaction, Z-order, liquid clustering, the auto-compaction policy."""

from __future__ import annotations



from airflow_delta_maint.app.job_definitions.optimize import OPTIMIZE
from airflow_delta_maint.operators.base import DeltaMaintenanceOperator


class OptimizeOperator(DeltaMaintenanceOperator):
    """
    Compact a table's small files into few large ones (OPTIMIZE), optionally Z-ordered.

    The rewrite is committed with ``dataChange=false``, so readers and streaming consumers see no
    new data. Returns the run's metrics (``numAddedFiles``, ``numRemovedFiles``, ``numAddedBytes``,
    ``numRemovedBytes``, ...).

    :param where: a partition predicate limiting the files considered, e.g. ``"day >= '2024-01-01'"``. (templated)
    :param zorder_by: columns to Z-order by (a list or a comma-separated string). (templated)
    :param min_file_size: files of at least this many bytes are left alone. (templated)
    :param target_file_size: the target size of the files written, in bytes (default: the table's
        ``delta.targetFileSize``, else 1 GiB); ``max_file_size``, its former name, is taken until the next
        release with an ``AirflowProviderDeprecationWarning``. (templated)
    :param max_concurrent_bins: how many bins Spark rewrites at once. (templated)
    :param batch_bytes: commit once every this many input bytes. (templated)
    :param dv_ratio: also rewrite files whose deletion vectors delete more than this share of their
        rows (default 0.05). (templated)
    :param compression: parquet codec of the files written: ``snappy`` (default), ``zstd``,
        ``gzip``, ``lz4`` or ``none``. (templated)
    :param copy_row_groups: bin-packing: ``"auto"`` (default) copies inputs' row groups byte for byte where
        that is exact and they reach a quarter of ``row_group_bytes``, re-encoding the rest together;
        ``"always"`` copies every input that can be copied; ``"never"`` re-encodes every row. (templated)
    :param row_group_bytes: Arrow bytes per row group of the files written (default 128 MiB). (templated)
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
        attribute named ``dry_run`` would hide the method ``BaseOperator.dry_run()``)

    Row-tracking, liquid-clustered and type-widened tables are handled as the Delta protocol
    says; ``where`` and ``zorder_by`` are refused on a liquid-clustered table.

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = OPTIMIZE.name

