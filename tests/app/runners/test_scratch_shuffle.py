"""The shuffle through the driver's scratch folder (local masters): every record reaches the reduce
of its output once, in the order of the chunks, whatever a retried map task wrote before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_delta_maint.app.runners import scratch_shuffle
from airflow_delta_maint.app.runners.scratch_shuffle import scratch_shared, shuffle_through_scratch


def test_every_record_reaches_its_output_once_in_chunk_order(spark, tmp_path: Path) -> None:
    chunks = [list(range(i, 400, 5)) for i in range(5)]

    def split(chunk: list[int]):  # defined here: the Python workers get it by value
        for value in chunk:
            yield value % 7, f"v{value}".encode() * (value % 5 + 1)

    def reduce(records):
        records = list(records)
        if records:
            yield records[0][0] % 3, [(sub, blob) for sub, blob in records]

    out = shuffle_through_scratch(spark, chunks, 3, split, lambda sub: sub % 3, reduce, str(tmp_path))
    got = {k: v for k, v in out}
    expected: dict[int, list] = {0: [], 1: [], 2: []}
    for chunk in chunks:
        for sub, blob in split(chunk):
            expected[sub % 3].append((sub, blob))
    assert got == expected
    assert os.listdir(tmp_path) == []  # the scratch folder is gone


def test_a_retried_map_task_replaces_what_its_earlier_attempt_wrote(tmp_path: Path) -> None:
    folder = str(tmp_path)
    scratch_shuffle.write_map_outputs(folder, 0, iter([(1, b"a"), (2, b"b")]), lambda sub: sub)
    scratch_shuffle.write_map_outputs(folder, 0, iter([(1, b"a"), (2, b"b")]), lambda sub: sub)  # the retry
    scratch_shuffle.write_map_outputs(folder, 1, iter([(1, b"c")]), lambda sub: sub)
    assert list(scratch_shuffle.read_output(folder, 1)) == [(1, b"a"), (1, b"c")]
    assert list(scratch_shuffle.read_output(folder, 2)) == [(2, b"b")]
    assert list(scratch_shuffle.read_output(folder, 3)) == []
    assert not [n for d in tmp_path.iterdir() for n in os.listdir(d) if n.endswith(".tmp")]


@pytest.mark.parametrize("master, env, shared", [("local[2]", None, True), ("local-cluster[2,1,1024]", None, True),
                                                 ("spark://10.0.0.1:7077", None, False),
                                                 ("spark://10.0.0.1:7077", "/mnt/shared", True)])
def test_scratch_is_shared_on_local_masters_or_a_named_folder(monkeypatch, master, env, shared) -> None:
    if env:
        monkeypatch.setenv(scratch_shuffle.SCRATCH_ENV, env)
    else:
        monkeypatch.delenv(scratch_shuffle.SCRATCH_ENV, raising=False)
    assert scratch_shared(master) is shared
