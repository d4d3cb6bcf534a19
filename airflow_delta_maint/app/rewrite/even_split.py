"""``optimize target_files=N``: rewrite each selected partition into exactly N files of even row
counts, splitting files that are too large (bin-packing never splits).

The driver cuts each partition's live rows (deletion vectors applied, counted from the log's
``numRecords`` and vector cardinalities) into N consecutive ranges, file order by path; output
file *i* is one Spark task that reads the files overlapping its range and writes rows
``[i * rows // N, (i + 1) * rows // N)``. A file whose rows disagree with its ``numRecords``
fails the task (``CorruptLogError``) before anything is committed: a wrong count could otherwise
drop or repeat rows.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.plans.optimize import OptimizePlan, live_rows

from airflow_delta_maint.app.rewrite.data_files import RewriteSpec, output_dir, read_data_file, write_file
from airflow_delta_maint.app.rewrite.variant_columns import with_variant_layout
from airflow_delta_maint.app.runners.tasks import Tasks

Slice = tuple[dict, int, int, int]  # (add action, first row, end row, the file's live rows)


def split_tasks(plan: OptimizePlan) -> list[tuple[int, list[Slice]]]:
    """One (bin index, row slices) per output file of every bin."""
    target = plan.target_files or 1
    tasks: list[tuple[int, list[Slice]]] = []
    for b, bin_ in enumerate(plan.bins):
        counts = [live_rows(a) for a in bin_.files]
        total = sum(counts)
        n = min(target, max(1, total))
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        for i in range(n):
            lo, hi = i * total // n, (i + 1) * total // n
            slices = [(a, max(lo, s) - s, min(hi, s + c) - s, c)
                      for a, s, c in zip(bin_.files, starts, counts) if s < hi and s + c > lo and c]
            if not slices and i == 0:  # every row deleted: the partition's files go, nothing is written
                slices = [(a, 0, 0, c) for a, c in zip(bin_.files, counts)]
            tasks.append((b, slices))
    return tasks


def _slices(spec: RewriteSpec, slices: list[Slice]) -> Iterator[pa.Table]:
    for add, start, end, expected in slices:
        table = read_data_file(spec, add)
        if table.num_rows != expected:
            raise CorruptLogError(
                f"{add['path']} holds {table.num_rows} live rows but its numRecords statistic (minus deleted "
                f"rows) says {expected}: cannot split rows evenly without risking a row")
        yield table.slice(start, end - start)


def write_even_file(spec: RewriteSpec, out_dir: str, partition_values: dict[str, Any],
                    slices: list[Slice]) -> list[dict]:
    """Write one output file from its row slices; returns its add action (none without rows)."""
    spec = with_variant_layout(spec, [add for add, _, _, _ in slices])
    return write_file(spec, out_dir, partition_values, _slices(spec, slices))


def execute_even(tasks: Tasks, spec: RewriteSpec, plan: OptimizePlan, label: str = "even split") -> list[list[dict]]:
    """Write every output file of the plan as a task of its own; returns the add actions per bin."""
    work = split_tasks(plan)
    dirs = [output_dir(spec.storage, b.files) for b in plan.bins]
    pvs = [b.partition_values for b in plan.bins]
    results = tasks.map_slices(lambda items: [(b, write_even_file(spec, dirs[b], pvs[b], s)) for b, s in items],
                               work, len(work), f"{label} files")
    per_bin: list[list[dict]] = [[] for _ in plan.bins]
    for b, adds in results:
        per_bin[b].extend(adds)
    return per_bin
