"""A local range read reads the file itself, with obstore's answers: a range past the end is cut, one that starts
past it refused, a missing file not found."""

from __future__ import annotations

import pytest

from airflow_delta_maint.delta.storage.store import Storage


def test_a_local_range_read_answers_as_obstore_does(tmp_path):
    (tmp_path / "f").write_bytes(b"0123456789")
    storage = Storage(str(tmp_path))
    assert storage.read_range("f", 2, 5) == b"234"
    assert storage.read_range("f", 5, 64 * 1024) == b"56789"
    assert storage.read_range("f", 3, 3) == b""
    with pytest.raises(ValueError, match="starts past the end"):
        storage.read_range("f", 10, 20)
    with pytest.raises(FileNotFoundError):
        storage.read_range("missing", 0, 4)
