"""An inventory streamed a batch at a time (VACUUM full of a large table) keeps exactly the files
the in-memory reading keeps: the same keys, sizes and times, the same rows left out as outside
the table, hidden or folders, the same folders; in parquet (several row groups), CSV and gzipped
CSV, on random inventories."""

from __future__ import annotations

import gzip
import random

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.plans import vacuum_inventory as vi
from airflow_delta_maint.delta.storage.store import Storage

CUTOFF = 1_000_000


def _rows(rnd: random.Random, root: str, n: int) -> pa.Table:
    names = ["a.parquet", "p=1/b.parquet", "p=2/deep/c.parquet", "_delta_log/00000.json", "_hidden/x.parquet",
             "p=1/.tmp.crc", "_change_data/cdc.parquet", "_p=3/d.parquet", "sub/", "part%201.parquet", ""]
    out: dict[str, list] = {"path": [], "length": [], "isDir": [], "modificationTime": [], "extra": []}
    for i in range(n):
        name = rnd.choice(names)
        if name and rnd.random() < 0.5:
            name = name.replace(".parquet", f"-{i}.parquet")
        form = rnd.choice(["relative", "file", "local", "elsewhere", "s3", None])
        path = {"relative": name, "file": f"file://{root}/{name}", "local": f"{root}/{name}",
                "elsewhere": f"file:///elsewhere/{name}", "s3": f"s3://bucket/{name}", None: None}[form]
        out["path"].append(path)
        out["length"].append(rnd.choice([None, 0, 1, 123, 10**12]))
        out["isDir"].append(rnd.choice([None, False, False, True]))
        out["modificationTime"].append(rnd.choice([None, 0, CUTOFF - 1, CUTOFF, CUTOFF + 5]))
        out["extra"].append(rnd.choice(["x", "1", "2.5"]))
    return pa.table(out)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), form=st.sampled_from(["parquet", "csv", "csv.gz",
                                                                                        "folder"]))
def test_streamed_inventory_keeps_what_the_in_memory_one_keeps(tmp_path_factory, monkeypatch, seed, n, form):
    monkeypatch.setattr(vi, "BATCH_ROWS", 17)
    rnd = random.Random(seed)
    base = tmp_path_factory.mktemp("inv")
    table_root = base / "t"
    table_root.mkdir()
    storage = Storage(str(table_root))
    rows = _rows(rnd, str(table_root), n)
    if form == "parquet":
        target = base / "inventory.parquet"
        pq.write_table(rows, target, row_group_size=23)
    elif form == "folder":
        target = base / "inventory"
        target.mkdir()
        for i in range(3):
            pq.write_table(rows.slice(i * n // 3, (i + 1) * n // 3 - i * n // 3), target / f"part-{i}.parquet")
    else:
        target = base / f"inventory.{form}"
        pacsv.write_csv(rows, base / "plain.csv")
        data = (base / "plain.csv").read_bytes()
        target.write_bytes(gzip.compress(data) if form.endswith("gz") else data)
    whole = vi.read_inventory(str(target))
    files, outside = vi.inventory_files(whole, storage, ("p",))
    source = vi.open_inventory(str(target))
    assert (source.source, source.kind, source.taken_at_ms) == (whole.source, whole.kind, whole.taken_at_ms)
    folder = base / "listing"
    found = vi.write_inventory_listing(source, storage, ("p",), CUTOFF, str(folder))
    assert (found.files, found.bytes, found.outside) == (len(files), sum(f.size for f in files), outside)
    old = sorted((f.key, f.size, f.mtime_ms) for f in files if f.mtime_ms < CUTOFF)
    written = pq.read_table(folder)
    assert found.old == written.num_rows == len(old)
    assert sorted(zip(*(written.column(c).to_pylist() for c in ("key", "size", "mtime")))) == old
    dirs: dict[str, int] = {}
    for f in files:
        d = f.key.rpartition("/")[0]
        while d and d not in dirs:
            dirs[d] = 0
            d = d.rpartition("/")[0]
    assert found.dirs == dirs


def test_a_bad_row_is_one_clear_error(tmp_path):
    (tmp_path / "t").mkdir()
    bad = tmp_path / "bad.csv"
    bad.write_text("path,length,isDir,modificationTime\na,1,false,1\nb,many,false,1\n")
    source = vi.open_inventory(str(bad))
    with pytest.raises(InvalidArgumentError, match="cannot read the inventory file bad.csv"):
        vi.write_inventory_listing(source, Storage(str(tmp_path / "t")), (), CUTOFF, str(tmp_path / "out"))
    lacking = tmp_path / "lacking.parquet"
    pq.write_table(pa.table({"path": ["a"], "length": [1]}), lacking)
    with pytest.raises(InvalidArgumentError, match="lacks the column"):
        list(vi.open_inventory(str(lacking)).batches())
