"""An exact shuffle through DataFrame operations, for the rewrites that move rows between tasks on Spark Connect.

Z-order and liquid clustering send every sub-range of rows to the task that writes its output file. On a
classic session a Python RDD shuffle with an exact partitioner does it
(:mod:`airflow_delta_maint.app.rewrite.zorder`); Spark Connect has no RDDs, so :func:`shuffle_to_groups`
does it with the operations Spark Connect offers:

1. ``spark.range(n, numPartitions=n).mapInArrow``: task *i* runs the split function on slice *i* and emits
   ``(group, key, blob)`` rows (the group is the output file; the blob is the rows as Arrow IPC);
2. ``groupBy("group").applyInArrow`` with the iterator form (pyspark 4.1 on): each group's rows stream
   into one call of the write function as ``(key, blob)`` pairs, and it yields its results.

The functions travel pickled and run after the shipped environment is on the worker's path (as in
:mod:`~airflow_delta_maint.app.runners.connect_tasks`). Results come back pickled, in group order.
"""

from __future__ import annotations

import functools
import logging
import pickle
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Sequence, Tuple, TypeVar

import pyarrow as pa

from airflow_delta_maint.app.runners.connect_tasks import is_connect, slice_calls, use_shipped_environment
from airflow_delta_maint.app.runners.store_call_tasks import (TaskCalls, process_token, take_task_calls,
                                                              with_task_calls)
from airflow_delta_maint.app.runners.tasks import raise_worker_error, split_slices

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("delta_maint.tasks")

_ROWS = pa.schema([("group", pa.int64()), ("key", pa.int64()), ("blob", pa.binary())])
_ROWS_DDL = "group long, key long, blob binary"
_RESULTS = pa.schema([("group", pa.int64()), ("seq", pa.int32()), ("result", pa.binary())])
_RESULTS_DDL = "group long, seq int, result binary"
#: the group the split tasks send their store calls to (output groups count from 0)
CALLS_GROUP = -1


def _split(payload: bytes, slices: list[bytes], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _, rows in slice_calls(payload, slices, batches):
        for row in rows:
            if isinstance(row, TaskCalls):  # the slice's store calls and CPU: to the group that sends them back
                group, key, blob = CALLS_GROUP, 0, pickle.dumps(row)
            else:
                group, key, blob = row
            yield pa.RecordBatch.from_pydict({"group": [group], "key": [key], "blob": [blob]}, schema=_ROWS)


def _group_writer(payload: bytes) -> Callable[..., Iterator[pa.RecordBatch]]:
    """The function ``applyInArrow`` calls per group (its type hints choose the iterator form)."""
    driver = process_token()  # this process: a group written here reports no CPU of its own

    def write(group: Tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        use_shipped_environment()
        from pyspark import cloudpickle

        from airflow_delta_maint.app.runners.store_call_tasks import spent_since, task_mark  # this worker's own

        fn = cloudpickle.loads(payload)
        gid = group[0].as_py()

        def records() -> Iterator[tuple[int, bytes]]:
            for batch in batches:
                yield from zip(batch.column("key").to_pylist(), batch.column("blob").to_pylist())

        def results() -> Iterator[bytes]:
            if gid == CALLS_GROUP:  # the split tasks' store calls and CPU, as they were sent
                yield from (blob for _, blob in records())
                return
            mark = task_mark()
            yield from (pickle.dumps(result) for result in fn(gid, records()))
            yield pickle.dumps(spent_since(mark, driver))

        for seq, result in enumerate(results()):
            yield pa.RecordBatch.from_pydict({"group": [gid], "seq": [seq], "result": [result]}, schema=_RESULTS)

    return write


def shuffle_to_groups(spark: Any, split: Callable[[Iterator[T]], Iterable[tuple[int, int, bytes]]],
                      items: Sequence[T], slices: int,
                      write: Callable[[int, Iterator[tuple[int, bytes]]], Iterable[R]], label: str) -> list[R]:
    """Run ``split`` on ``slices`` slices of ``items``; send each ``(group, key, blob)`` it yields to the
    task of its group, where ``write(group, (key, blob) pairs)`` runs once per group; return what the
    writes yielded, by group, each group's in order."""
    from pyspark import cloudpickle

    parts = split_slices(list(items), slices)
    if not parts:
        return []
    tag = f"delta-maint-{uuid.uuid4().hex[:8]}"
    connect = is_connect(spark)
    started = time.perf_counter()
    try:
        if connect:
            spark.addTag(tag)  # interruptTag(tag) cancels these tasks
        rows = spark.range(0, len(parts), 1, len(parts)).mapInArrow(
            functools.partial(_split, cloudpickle.dumps(with_task_calls(split)), [pickle.dumps(p) for p in parts]),
            _ROWS_DDL)
        out = rows.groupBy("group").applyInArrow(_group_writer(cloudpickle.dumps(write)), _RESULTS_DDL).toArrow()
    except Exception as exc:
        raise_worker_error(exc)
        raise
    finally:
        if connect:
            spark.removeTag(tag)
    log.info("%s: %d tasks and a shuffle done in %.1f s", label, len(parts), time.perf_counter() - started)
    ordered = sorted(zip(out.column("group").to_pylist(), out.column("seq").to_pylist(),
                         out.column("result").to_pylist()))
    return take_task_calls(pickle.loads(r) for _, _, r in ordered)  # the tasks' store calls go to the job's
