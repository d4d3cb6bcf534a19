"""The Z-order writer's spill: a task that holds more than ``SPILL_BYTES`` of shuffled rows writes
them to a scratch folder and still writes the same file, every row once, in Z order; the folder is
gone when the task ends, whether it wrote or failed."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from airflow_delta_maint.app.rewrite import zorder
from airflow_delta_maint.app.rewrite.data_files import RewriteSpec
from airflow_delta_maint.delta.log.snapshot import Snapshot


def _spec(path: Path) -> RewriteSpec:
    write_deltalake(str(path), pa.table({"id": pa.array([0], pa.int64()), "v": pa.array([0.0])}))
    snap = Snapshot.load(str(path))
    return RewriteSpec(snap.storage, snap.metadata.to_action(), target_file_size=1 << 30)


def _records(n: int, seed: int) -> tuple[zorder._Layout, list[tuple[int, bytes]], np.ndarray]:
    """Rows with Z-values over three sub-ranges of one output file, sent in small blobs in a
    shuffled order, as a shuffle delivers them."""
    rng = np.random.default_rng(seed)
    layout = zorder._Layout([np.array([300, 600], np.uint64)], [1])
    z = rng.permutation(n).astype(np.uint64)
    table = pa.table({"id": pa.array(np.arange(n), pa.int64()), "v": pa.array(rng.random(n)),
                      zorder.Z_COL: pa.array(z)})
    subs = layout.sub_ids(0, z)
    blobs = []
    for sub in np.unique(subs):
        rows = table.take(pa.array(np.flatnonzero(subs == sub)))
        blobs += [(int(sub), zorder._ipc(rows.slice(i, 7))) for i in range(0, rows.num_rows, 7)]
    order = rng.permutation(len(blobs))
    return layout, [blobs[k] for k in order], z


def _write(spec: RewriteSpec, root: Path, layout, records) -> pa.Table:
    out = list(zorder._write_output(spec, {0: ("", {})}, layout, iter(records)))
    assert len(out) == 1
    _file_id, add, _row_map = out[0]
    return pq.read_table(root / json.loads(add)["path"])


def test_a_spilling_task_writes_the_file_a_task_in_memory_writes(tmp_path, monkeypatch):
    spec = _spec(tmp_path / "t")
    layout, records, z = _records(1_000, seed=3)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    in_memory = _write(spec, tmp_path / "t", layout, records)
    made: list[str] = []
    original = zorder.make_scratch
    monkeypatch.setattr(zorder, "make_scratch", lambda *a, **k: made.append(original(*a, **k)) or made[-1])
    monkeypatch.setattr(zorder, "SPILL_BYTES", 2_000)  # a spill every few blobs
    spilled = _write(spec, tmp_path / "t", layout, records)
    assert len(made) == 1 and not Path(made[0]).exists() and list((tmp_path / "scratch").iterdir()) == []
    assert spilled.equals(in_memory)
    assert sorted(spilled.column("id").to_pylist()) == list(range(1_000))
    # in Z order (the ids were given Z-values in a random permutation), the Z column left out
    assert np.all(np.diff(z[spilled.column("id").to_numpy()].astype(np.int64)) > 0)
    assert zorder.Z_COL not in spilled.column_names


def test_a_failing_task_removes_its_spill(tmp_path, monkeypatch):
    spec = _spec(tmp_path / "t")
    layout, records, _z = _records(500, seed=5)
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    monkeypatch.setattr(zorder, "SPILL_BYTES", 1_000)
    made: list[str] = []
    original = zorder.make_scratch
    monkeypatch.setattr(zorder, "make_scratch", lambda *a, **k: made.append(original(*a, **k)) or made[-1])

    def broken():
        yield from records[:40]
        raise OSError("the shuffle lost a block")

    with pytest.raises(OSError, match="lost a block"):
        list(zorder._write_output(spec, {0: ("", {})}, layout, broken()))
    assert len(made) == 1 and not Path(made[0]).exists()
    assert list((tmp_path / "scratch").iterdir()) == []
