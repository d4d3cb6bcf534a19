"""A local head reads the file's own stat, with obstore's answers: the size and modification time its local
store gives, and not found for a missing file or a folder."""

from __future__ import annotations

import os

import obstore
import pytest
from obstore.store import LocalStore

from airflow_delta_maint.delta.storage.store import Storage


def test_a_local_head_answers_as_obstore_does(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.json").write_bytes(b"0123456789")
    os.utime(tmp_path / "sub" / "f.json", (1_700_000_000.1234, 1_700_000_000.1234))
    storage = Storage(str(tmp_path))
    theirs = obstore.head(LocalStore(str(tmp_path)), "sub/f.json")
    info = storage.head("sub/f.json")
    assert (info.key, info.size, info.mtime_ms) == (
        "sub/f.json", theirs["size"], int(theirs["last_modified"].timestamp() * 1000))
    assert storage.exists("sub/f.json")
    # the listing and the head agree on the file
    assert next(storage.list_from("sub/")) == info


@pytest.mark.parametrize("key", ["missing.json", "sub", "sub/f.json/under"])
def test_a_local_head_of_no_file_is_not_found(tmp_path, key):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.json").write_bytes(b"x")
    storage = Storage(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        storage.head(key)
    assert not storage.exists(key)
