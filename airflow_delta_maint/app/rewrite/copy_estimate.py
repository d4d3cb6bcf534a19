"""A bin-packing plan as the execution choice weighs it on the worker: the bytes its bins rewrite and,
read from the candidate inputs' footers, how many of them the row-group copy would take byte for byte.

Copying costs I/O, not CPU (no row is decoded or encoded), so ``execution="auto"`` may keep a plan far
past the re-encoding budget on the worker when nearly all of it is copied (``app/execution.py``). The
estimate follows :mod:`.copy_choice`'s first checks: ``copy_row_groups`` not ``never``, no table-wide
reason (materialized row tracking), no deletion vector, every row group at least the copy threshold in
compressed bytes (under ``auto``) and the run's codec. The checks of the physical schema are left to the
run, which re-encodes what it finds it cannot copy: the estimate is an upper bound the run rarely misses.
Footers are read only when asked (:meth:`PlannedRewrite.copied_bytes`), a few at a time, and at most
:data:`MAX_FOOTERS` of them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.parquet.eligibility import codec_number
from airflow_delta_maint.delta.parquet.footer import Footer, ParquetFooterError, read_footer
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions, copy_threshold
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import Storage

from .copy_choice import FOOTER_READS
from .data_files import footer_source

__all__ = ["MAX_FOOTERS", "BinFile", "PlannedRewrite", "copyable"]

#: the most footers the estimate reads (more candidates: nothing is counted as copied)
MAX_FOOTERS = 1024

#: one input of a bin: (path as in the log, size, deletion vector or not)
BinFile = tuple[str, int, bool]


def copyable(footer: Footer, threshold: int, codec: int) -> bool:
    """Whether every row group of ``footer`` reaches ``threshold`` compressed bytes and every chunk is
    unencrypted and compressed with ``codec``."""
    groups = footer.row_groups
    if not groups or "encryption_algorithm" in footer.metadata:
        return False
    for rg in groups:
        if int(rg.get("total_compressed_size") or 0) < threshold:
            return False
        for cc in rg.get("columns") or ():
            meta = cc.get("meta_data")
            if meta is None or meta.get("codec") != codec or "crypto_metadata" in cc:
                return False
    return True


@dataclass(frozen=True)
class PlannedRewrite:
    """The bytes a plan made on the worker rewrites, and what it needs to estimate its copied bytes.

    ``bins``: each bin's files (empty for a plan the copy does not apply to: ``even`` splits);
    ``copies``: False when no input can be copied whatever its file (``copy_row_groups="never"``,
    materialized row tracking)."""

    bytes: int
    storage: Storage | None = None
    options: OptimizeOptions | None = None
    bins: Sequence[Sequence[BinFile]] = ()
    copies: bool = False

    def candidates(self) -> list[BinFile]:
        """The inputs the copy may take, by the log alone: no deletion vector, at least the threshold."""
        if not self.copies or self.options is None:
            return []
        threshold = self._threshold()
        return [f for files in self.bins for f in files if not f[2] and f[1] >= threshold]

    def _threshold(self) -> int:
        assert self.options is not None
        return copy_threshold(self.options.row_group_bytes) if self.options.copy_row_groups == "auto" else 0

    def copied_bytes(self, max_footers: int = MAX_FOOTERS) -> int:
        """The bytes of the inputs whose footers say the copy would take them (0 past ``max_footers``)."""
        wanted = self.candidates()
        if not wanted or len(wanted) > max_footers or self.storage is None or self.options is None:
            return 0
        codec, threshold = codec_number(self.options.compression), self._threshold()

        def one(f: BinFile) -> int:
            assert self.storage is not None
            source: str | RangeReader | None = None
            try:
                source = footer_source(self.storage, {"path": f[0], "size": f[1]})
                return f[1] if copyable(read_footer(source), threshold, codec) else 0
            except (ParquetFooterError, OSError, DeltaError):
                return 0  # the run tells what is wrong with the file: the estimate only weighs
            finally:
                if isinstance(source, RangeReader):
                    source.close()

        with ThreadPoolExecutor(max_workers=min(FOOTER_READS, len(wanted))) as pool:
            return sum(pool.map(one, wanted))
