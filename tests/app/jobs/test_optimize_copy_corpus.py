"""Every corpus table OPTIMIZE rewrites, with row groups copied wherever exact (``copy_row_groups="always"``)
and fully rewritten (``never``) on two copies, in Spark tasks: the same rows as before on both, the same
statistics in their ``add`` actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.jobs.copy_tables import run, stats_by_partition
from tests.app.jobs.test_optimize import REWRITTEN, copy_corpus, read_rows


@pytest.mark.parametrize("name", REWRITTEN)
def test_corpus_table_copied_as_a_full_rewrite(name: str, tmp_path: Path, spark) -> None:
    copied, full = copy_corpus(name, tmp_path / "always"), copy_corpus(name, tmp_path / "never")
    before = read_rows(copied, name)
    code, m = run(copied, local=False, copy_row_groups="always", row_group_bytes=128 << 20)
    assert code == 0, m.get("error")
    code, never = run(full, local=False, copy_row_groups="never", row_group_bytes=128 << 20)
    assert code == 0, never.get("error")
    assert m["status"] == never["status"] and m["numAddedFiles"] == never["numAddedFiles"]
    assert read_rows(copied, name) == before == read_rows(full, name)
    assert stats_by_partition(str(copied)) == stats_by_partition(str(full))
    if m["status"] == "committed":
        assert m["numRowGroupsCopied"] + sum(m["copyFallbacks"].values()) >= 1, m
