"""Deletion vector decoding: protocol examples, handcrafted DVs, corruption, and the corpus tables."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from pyroaring import BitMap

from airflow_delta_maint.delta.errors import CorruptLogError, DeltaError, InvalidArgumentError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.deletion_vectors import (
    DV_MAGIC,
    decode_bitmap_array,
    deleted_row_count,
    dv_file_key,
    dv_file_name,
    encode_deletion_vector,
    live_row_mask,
    read_deletion_vector,
    write_deletion_vector,
    z85_decode,
    z85_encode,
)
from airflow_delta_maint.delta.storage.store import Storage

from tests.conftest import CORPUS_DV_TABLES, SPARK_TEST_PREFIX, corpus_path, load_manifest, restore_dv_file_names

# -- helpers built from the protocol text, independent of the module under test ----------------------

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data: bytes) -> str:
    """Plain Z85 encoder (zero-padded to whole 4-byte words)."""
    data += b"\x00" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        out.append("".join(_Z85[(value // 85 ** p) % 85] for p in (4, 3, 2, 1, 0)))
    return "".join(out)


def bitmap_array(rows: list[int], run_optimize: bool = False) -> bytes:
    """Magic number + portable 64-bit Roaring bytes, bucket by bucket with pyroaring."""
    buckets: dict[int, list[int]] = {}
    for r in rows:
        buckets.setdefault(r >> 32, []).append(r & 0xFFFFFFFF)
    out = struct.pack("<I", DV_MAGIC) + struct.pack("<Q", len(buckets))
    for key in sorted(buckets):
        bm = BitMap(buckets[key])
        if run_optimize:
            bm.run_optimize()
        out += struct.pack("<I", key) + bm.serialize()
    return out


def inline_dv(rows: list[int], run_optimize: bool = False) -> dict:
    data = bitmap_array(rows, run_optimize)
    return {"storageType": "i", "pathOrInlineDv": z85(data), "sizeInBytes": len(data),
            "cardinality": len(set(rows))}


def dv_file(*payloads: bytes) -> tuple[bytes, list[int]]:
    """A DV file (version byte + framed DVs); returns its bytes and each DV's offset."""
    out, offsets = b"\x01", []
    for p in payloads:
        offsets.append(len(out))
        out += struct.pack(">I", len(p)) + p + struct.pack(">I", zlib.crc32(p))
    return out, offsets


# -- Z85 and the protocol's examples -------------------------------------------------------------


def test_z85_matches_the_spec_test_vector():
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw
    with pytest.raises(ValueError):
        z85_decode("Hell")  # not a multiple of 5
    with pytest.raises(ValueError):
        z85_decode("Hello~orld")  # '~' is not in the alphabet


def test_protocol_inline_example_decodes_to_its_row_indexes():
    dv = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
          "sizeInBytes": 40, "cardinality": 6}
    rows = read_deletion_vector(Storage("/"), dv)
    assert rows.dtype == np.uint64
    assert rows.tolist() == [3, 4, 7, 11, 18, 29]
    assert dv_file_key(Storage("/"), dv) is None


def test_protocol_relative_path_example_with_random_prefix(tmp_path):
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4, "sizeInBytes": 40,
          "cardinality": 6}
    assert dv_file_name(dv) == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv_file_key(Storage(str(tmp_path)), dv) == dv_file_name(dv)
    no_prefix = dict(dv, pathOrInlineDv="^-aqEH.-t@S}K{vb[*k^")
    assert dv_file_name(no_prefix) == "deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"


# -- handcrafted DVs ----------------------------------------------------------------------------------

HANDCRAFTED = {
    "empty": [],
    "one row": [0],
    "three rows": [1, 2, 1000],
    "dense container": list(range(0, 60000, 2)),
    "runs": list(range(100, 70000)) + list(range(200000, 200010)),
    "several containers": [3, 65536 + 3, 2 * 65536 + 9, 10 * 65536],
    "several buckets": [7, (1 << 32) + 1, (5 << 32) + 65536, (1 << 40) + 3],
}


@pytest.mark.parametrize("run_optimize", [False, True])
@pytest.mark.parametrize("case", list(HANDCRAFTED))
def test_handcrafted_inline_dv(case, run_optimize):
    rows = HANDCRAFTED[case]
    dv = inline_dv(rows, run_optimize)
    got = read_deletion_vector(Storage("/"), dv)
    assert got.tolist() == sorted(set(rows))
    assert deleted_row_count(dv) == len(rows)


def test_inline_dv_with_size_not_a_multiple_of_four():
    dv = inline_dv([1, 2, 9])
    assert dv["sizeInBytes"] % 4 != 0
    assert read_deletion_vector(Storage("/"), dv).tolist() == [1, 2, 9]


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=(1 << 63) - 1), max_size=200)
       | st.lists(st.integers(min_value=0, max_value=300_000), max_size=3000))
def test_encode_decode_round_trip(rows):
    data = encode_deletion_vector(rows)
    assert decode_bitmap_array(data).tolist() == sorted(set(rows))
    assert decode_bitmap_array(bitmap_array(rows)).tolist() == sorted(set(rows))


def test_encode_rejects_bad_row_indexes():
    with pytest.raises(InvalidArgumentError):
        encode_deletion_vector([-1])
    with pytest.raises(InvalidArgumentError):
        encode_deletion_vector(np.array([1 << 63], dtype=np.uint64))


def test_write_then_read_relative_dv_with_prefix(tmp_path):
    storage = Storage(str(tmp_path))
    rows = [0, 17, 4096, 70000, (2 << 32) + 1]
    dv = write_deletion_vector(storage, rows, prefix="xy")
    assert dv["storageType"] == "u" and dv["offset"] == 1 and dv["cardinality"] == len(rows)
    key = dv_file_key(storage, dv)
    assert key.startswith("xy/deletion_vector_") and key.endswith(".bin")
    assert (tmp_path / key).is_file()
    assert read_deletion_vector(storage, dv).tolist() == rows


def test_several_dvs_in_one_file_are_read_at_their_offsets(tmp_path):
    a, b = bitmap_array([1, 2, 3]), bitmap_array([10, 1 << 33])
    blob, offsets = dv_file(a, b)
    dv = {"storageType": "u", "pathOrInlineDv": z85(bytes(range(16))), "offset": offsets[1],
          "sizeInBytes": len(b), "cardinality": 2}
    key = dv_file_name(dv)
    (tmp_path / key).write_bytes(blob)
    storage = Storage(str(tmp_path))
    assert read_deletion_vector(storage, dv).tolist() == [10, 1 << 33]
    first = dict(dv, offset=offsets[0], sizeInBytes=len(a), cardinality=3)
    assert read_deletion_vector(storage, first).tolist() == [1, 2, 3]


def test_dv_far_into_a_file_is_read_from_its_offset(tmp_path):
    payloads = [bitmap_array([i]) for i in range(400)]  # > 4 KiB before the last DV
    blob, offsets = dv_file(*payloads)
    (tmp_path / "dvs.bin").write_bytes(blob)
    dv = {"storageType": "p", "pathOrInlineDv": f"file://{tmp_path}/dvs.bin", "offset": offsets[-1],
          "sizeInBytes": len(payloads[-1]), "cardinality": 1}
    assert offsets[-1] > 4096
    assert read_deletion_vector(Storage(str(tmp_path)), dv).tolist() == [399]


def test_absolute_path_dv_inside_and_outside_the_table(tmp_path):
    table, elsewhere = tmp_path / "table", tmp_path / "other dir"
    table.mkdir()
    elsewhere.mkdir()
    payload = bitmap_array([4, 8])
    blob, offsets = dv_file(payload)
    (table / "my dv.bin").write_bytes(blob)
    (elsewhere / "my dv.bin").write_bytes(blob)
    storage = Storage(str(table))
    inside = {"storageType": "p", "pathOrInlineDv": f"file://{table}/my%20dv.bin", "offset": offsets[0],
              "sizeInBytes": len(payload), "cardinality": 2}
    outside = dict(inside, pathOrInlineDv=f"file://{tmp_path}/other%20dir/my%20dv.bin")
    assert dv_file_key(storage, inside) == "my dv.bin"
    assert dv_file_key(storage, outside) is None
    assert read_deletion_vector(storage, inside).tolist() == [4, 8]
    assert read_deletion_vector(storage, outside).tolist() == [4, 8]


def test_deleted_row_count_and_live_row_mask():
    assert deleted_row_count(None) == 0
    assert deleted_row_count({"storageType": "u", "cardinality": 7}) == 7
    mask = live_row_mask(np.array([0, 3], dtype=np.uint64), 5)
    assert mask.tolist() == [False, True, True, False, True]
    assert live_row_mask(np.empty(0, dtype=np.uint64), 2).tolist() == [True, True]
    with pytest.raises(CorruptLogError, match="row 5"):
        live_row_mask(np.array([5], dtype=np.uint64), 5)


# -- corruption -----------------------------------------------------------------------------------

def _one_dv_table(tmp_path) -> tuple[Storage, dict, Path]:
    """A table folder with one DV file holding rows [2, 5, 11]."""
    payload = bitmap_array([2, 5, 11])
    blob, offsets = dv_file(payload)
    dv = {"storageType": "u", "pathOrInlineDv": z85(bytes(range(100, 116))), "offset": offsets[0],
          "sizeInBytes": len(payload), "cardinality": 3}
    path = tmp_path / dv_file_name(dv)
    path.write_bytes(blob)
    return Storage(str(tmp_path)), dv, path


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


def test_corrupt_data_fails_the_checksum_naming_the_file(tmp_path):
    storage, dv, path = _one_dv_table(tmp_path)
    assert read_deletion_vector(storage, dv).tolist() == [2, 5, 11]
    _flip(path, 1 + 4 + 20)  # inside the bitmap bytes
    with pytest.raises(CorruptLogError, match="checksum") as err:
        read_deletion_vector(storage, dv)
    assert path.name in str(err.value)


def test_corrupt_stored_checksum_is_detected(tmp_path):
    storage, dv, path = _one_dv_table(tmp_path)
    _flip(path, path.stat().st_size - 1)
    with pytest.raises(CorruptLogError, match="checksum") as err:
        read_deletion_vector(storage, dv)
    assert path.name in str(err.value)


def test_bad_magic_number_with_valid_checksum(tmp_path):
    payload = bytearray(bitmap_array([1]))
    payload[0] ^= 0xFF
    blob, offsets = dv_file(bytes(payload))
    (tmp_path / "bad.bin").write_bytes(blob)
    dv = {"storageType": "p", "pathOrInlineDv": "bad.bin", "offset": offsets[0], "sizeInBytes": len(payload),
          "cardinality": 1}
    with pytest.raises(CorruptLogError, match="magic number") as err:
        read_deletion_vector(Storage(str(tmp_path)), dv)
    assert "bad.bin" in str(err.value)


@pytest.mark.parametrize("change, message", [
    ({"sizeInBytes": 999}, "ends before"),
    ({"cardinality": 4}, "cardinality is 4"),
])
def test_descriptor_that_disagrees_with_the_file(tmp_path, change, message):
    storage, dv, path = _one_dv_table(tmp_path)
    with pytest.raises(CorruptLogError, match=message) as err:
        read_deletion_vector(storage, dict(dv, **change))
    assert path.name in str(err.value)


def test_size_field_mismatch(tmp_path):
    storage, dv, path = _one_dv_table(tmp_path)
    with pytest.raises(CorruptLogError, match="stored size"):
        read_deletion_vector(storage, dict(dv, sizeInBytes=dv["sizeInBytes"] - 4))


def test_wrong_file_format_version(tmp_path):
    storage, dv, path = _one_dv_table(tmp_path)
    _flip(path, 0)
    with pytest.raises(CorruptLogError, match="format version"):
        read_deletion_vector(storage, dv)


def test_missing_and_truncated_files(tmp_path):
    storage, dv, path = _one_dv_table(tmp_path)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(CorruptLogError, match="ends before"):
        read_deletion_vector(storage, dv)
    path.unlink()
    with pytest.raises(CorruptLogError, match="does not exist") as err:
        read_deletion_vector(storage, dv)
    assert path.name in str(err.value)


def test_truncated_bitmap_with_valid_checksum(tmp_path):
    payload = bitmap_array(list(range(0, 50, 3)))[:-6]
    blob, offsets = dv_file(payload)
    (tmp_path / "short.bin").write_bytes(blob)
    dv = {"storageType": "p", "pathOrInlineDv": "short.bin", "offset": offsets[0], "sizeInBytes": len(payload),
          "cardinality": 17}
    with pytest.raises(CorruptLogError, match="truncated"):
        read_deletion_vector(Storage(str(tmp_path)), dv)


def test_trailing_bytes_after_the_bitmap_are_rejected():
    with pytest.raises(CorruptLogError, match="unexpected bytes"):
        decode_bitmap_array(bitmap_array([1, 2]) + b"\x00\x00\x00\x00")


def test_bucket_key_with_the_sign_bit_is_rejected():
    with pytest.raises(CorruptLogError, match="most significant bit"):
        decode_bitmap_array(bitmap_array([(1 << 63) + 5]))


@pytest.mark.parametrize("dv, message", [
    ({"storageType": "x", "pathOrInlineDv": "", "sizeInBytes": 0, "cardinality": 0}, "storage type"),
    ({"storageType": "i", "pathOrInlineDv": "abc", "sizeInBytes": 0, "cardinality": 0}, "Z85"),
    ({"storageType": "i", "pathOrInlineDv": "HelloWorld", "sizeInBytes": 40, "cardinality": 1}, "sizeInBytes"),
    ({"storageType": "i", "pathOrInlineDv": "HelloWorld", "sizeInBytes": 8, "cardinality": 1}, "magic"),
    ({"storageType": "u", "pathOrInlineDv": "short", "offset": 1, "sizeInBytes": 8, "cardinality": 1}, "UUID"),
])
def test_invalid_descriptors(dv, message):
    with pytest.raises(CorruptLogError, match=message):
        read_deletion_vector(Storage("/"), dv)


# -- the conformance corpus --------------------------------------------------------------------

# CORPUS_DV_TABLES (conftest) holds every corpus table whose snapshot has files with DVs. Expected
# values come from the tables' own commit history (commitInfo operationMetrics and DELETE
# predicates), not from the DV files: live rows = sum(numOutputRows) - sum(numDeletedRows), and the
# values of the rows the active DVs remove are among the values the DELETE predicates name (files
# emptied by a DELETE are removed whole, so their rows show up in no DV).

# delta-spark's own test suites wrote the spark/ tables with a test-only file name prefix: the DV
# files are named "test%dv%prefix-deletion_vector_<uuid>.bin" while the log names no prefix, so the
# protocol places them at "deletion_vector_<uuid>.bin". Reading them from the corpus is expected to
# fail as a missing file; the data checks run on a copy with the files at their protocol names.


def _readable_copy(name: str, tmp_path: Path) -> Path:
    src = corpus_path(name)
    if not any(f.startswith(SPARK_TEST_PREFIX) for f in os.listdir(src)):
        return src
    dest = tmp_path / name.replace("/", "__")
    shutil.copytree(src, dest)
    restore_dv_file_names(dest)
    return dest


def _physical_name(snapshot: Snapshot, column: str) -> str:
    for field in snapshot.metadata.schema["fields"]:
        if field["name"] == column:
            return field.get("metadata", {}).get("delta.columnMapping.physicalName", column)
    raise KeyError(column)


def test_corpus_dv_tables_are_all_covered():
    found = []
    for entry in load_manifest():
        try:
            snapshot = Snapshot.load(str(corpus_path(entry["table"])))
        except DeltaError:
            continue  # tables that are invalid on purpose are covered by the snapshot tests
        if snapshot.files.column("deletionVector").null_count < snapshot.num_files:
            found.append(entry["table"])
    assert sorted(found) == sorted(CORPUS_DV_TABLES)


@pytest.mark.parametrize("name", list(CORPUS_DV_TABLES))
def test_corpus_table_dvs_against_data(name, tmp_path):
    expected_live, column, expected_deleted = CORPUS_DV_TABLES[name]
    snapshot = Snapshot.load(str(_readable_copy(name, tmp_path)))
    storage = snapshot.storage
    physical = _physical_name(snapshot, column)
    live = deleted = 0
    deleted_values: list = []
    stated_live = 0
    with_dv = 0
    for add in snapshot.add_actions():
        num_records = json.loads(add["stats"])["numRecords"]
        dv = add.get("deletionVector")
        table = pq.read_table(storage.local_path(storage.key_for_path(add["path"])))
        assert table.num_rows == num_records
        rows = np.empty(0, dtype=np.uint64)
        if dv:
            with_dv += 1
            rows = read_deletion_vector(storage, dv)
            assert rows.dtype == np.uint64
            assert len(rows) == dv["cardinality"] == deleted_row_count(dv)
            assert np.all(np.diff(rows.astype(np.int64)) > 0)  # sorted and unique
            assert len(rows) == 0 or int(rows[-1]) < num_records
            assert dv_file_key(storage, dv) is not None and storage.exists(dv_file_key(storage, dv))
        mask = live_row_mask(rows, table.num_rows)
        values = table.column(physical).to_numpy()
        live += int(mask.sum())
        deleted += len(rows)
        deleted_values.extend(values[~mask].tolist())
        stated_live += num_records - deleted_row_count(dv)
    assert with_dv > 0
    assert live == stated_live == expected_live
    assert sorted(deleted_values) == expected_deleted
    oracle = next((e["oracle"] for e in load_manifest() if e["table"] == name), {})
    if oracle.get("rows") is not None:
        assert live == oracle["rows"]


@pytest.mark.parametrize("name", list(CORPUS_DV_TABLES))
def test_every_dv_in_the_log_decodes(name, tmp_path):
    """DVs of every add and remove in the commits, including several DVs sharing one file."""
    root = _readable_copy(name, tmp_path)
    storage = Storage(str(root))
    seen = 0
    for commit in sorted((root / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            for kind in ("add", "remove"):
                dv = (action.get(kind) or {}).get("deletionVector")
                if dv:
                    rows = read_deletion_vector(storage, dv)
                    assert len(rows) == dv["cardinality"]
                    seen += 1
    assert seen > 0


@pytest.mark.parametrize("name", [n for n in CORPUS_DV_TABLES if n.startswith("spark/")])
def test_spark_test_prefixed_dv_files_are_not_at_protocol_paths(name):
    snapshot = Snapshot.load(str(corpus_path(name)))
    dv = next(a["deletionVector"] for a in snapshot.add_actions() if a.get("deletionVector"))
    with pytest.raises(CorruptLogError, match="does not exist") as err:
        read_deletion_vector(snapshot.storage, dv)
    assert dv_file_name(dv) in str(err.value)
