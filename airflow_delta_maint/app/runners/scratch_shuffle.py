"""A shuffle through the driver's scratch folder, for sessions whose executors share it (a local
master, or ``DELTA_MAINT_SCRATCH_DIR`` on a folder every machine mounts).

Z-order's records (a sub-range id and an Arrow IPC blob) need no Spark shuffle there: in a first
Spark job each map task appends its records to one file per output, in a second each reduce task
reads its output's files. No record crosses into the JVM and back, which on two cores is most of
what a Python RDD shuffle of large blobs costs. A map task writes under temporary names and renames
when done, so a retried task replaces, never doubles, what an earlier attempt wrote (the records of
a chunk are the same in every attempt).
"""

from __future__ import annotations

import os
import struct
import uuid
from typing import Any, Callable, Iterator, Sequence, TypeVar

from airflow_delta_maint.delta.storage.scratch import make_scratch, remove_scratch

from .store_call_tasks import count_into, spark_task_calls

__all__ = ["SCRATCH_ENV", "read_output", "scratch_shared", "shuffle_through_scratch", "write_map_outputs"]

SCRATCH_ENV = "DELTA_MAINT_SCRATCH_DIR"
#: records a map task holds per output before appending them to its file
_BUFFER_BYTES = 32 << 20
_HEAD = struct.Struct("<qq")  # sub-range id, blob length

T = TypeVar("T")
C = TypeVar("C")


def scratch_shared(master: str) -> bool:
    """Whether the executors under ``master`` read what the driver writes to its scratch folder: a
    local master, or ``DELTA_MAINT_SCRATCH_DIR`` set (to a folder every machine mounts)."""
    return bool(os.environ.get(SCRATCH_ENV)) or str(master).startswith("local")


def write_map_outputs(folder: str, index: int, records: Iterator[tuple[int, bytes]],
                 output_of: Callable[[int], int]) -> int:
    """Append the records to ``<folder>/<output>/<index>``, written under temporary names and renamed
    at the end; returns the bytes written."""
    token = uuid.uuid4().hex[:8]
    buffers: dict[int, list[bytes]] = {}
    held = 0
    written = 0
    touched: set[int] = set()

    def flush() -> None:
        nonlocal held, written
        for out, parts in buffers.items():
            os.makedirs(os.path.join(folder, str(out)), exist_ok=True)
            with open(os.path.join(folder, str(out), f"{index}.{token}.tmp"), "ab") as fh:
                for part in parts:
                    fh.write(part)
                    written += len(part)
            touched.add(out)
        buffers.clear()
        held = 0

    for sub, blob in records:
        parts = buffers.setdefault(output_of(sub), [])
        parts.append(_HEAD.pack(sub, len(blob)))
        parts.append(blob)
        held += len(blob)
        if held >= _BUFFER_BYTES:
            flush()
    flush()
    for out in touched:
        os.replace(os.path.join(folder, str(out), f"{index}.{token}.tmp"), os.path.join(folder, str(out), str(index)))
    return written


def read_output(folder: str, out: int) -> Iterator[tuple[int, bytes]]:
    """The records every map task wrote for output ``out``, task by task."""
    where = os.path.join(folder, str(out))
    try:
        names = sorted((n for n in os.listdir(where) if n.isdigit()), key=int)
    except FileNotFoundError:
        return
    for name in names:
        with open(os.path.join(where, name), "rb") as fh:
            while True:
                head = fh.read(_HEAD.size)
                if not head:
                    break
                sub, size = _HEAD.unpack(head)
                yield sub, fh.read(size)


def shuffle_through_scratch(spark: Any, chunks: Sequence[C], num_outputs: int,
                            split: Callable[[C], Iterator[tuple[int, bytes]]], output_of: Callable[[int], int],
                            reduce: Callable[[Iterator[tuple[int, bytes]]], Iterator[T]],
                            scratch_parent: str | None = None) -> list[T]:
    """Every chunk's records (``split``) grouped by output (``output_of`` a record's sub-range id) and
    each output's records, in the order of the chunks, handed to ``reduce``; what the reduces yield."""
    sc = spark.sparkContext
    folder = make_scratch("delta-maint-shuffle-", scratch_parent or os.environ.get(SCRATCH_ENV) or None)
    try:
        def map_task(items: Iterator[tuple[int, C]]) -> Iterator[int]:
            for index, chunk in items:
                yield write_map_outputs(folder, index, split(chunk), output_of)

        def reduce_task(items: Iterator[int]) -> Iterator[T]:
            for out in items:
                yield from reduce(read_output(folder, out))

        with spark_task_calls(sc) as calls:  # the tasks' store calls, added to the job's
            sc.parallelize(list(enumerate(chunks)), max(1, len(chunks))).mapPartitions(
                count_into(map_task, calls)).collect()
            return sc.parallelize(range(num_outputs), max(1, num_outputs)).mapPartitions(
                count_into(reduce_task, calls)).collect()
    finally:
        remove_scratch(folder)
