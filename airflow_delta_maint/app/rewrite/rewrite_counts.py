"""What the bin-packing rewrite did with its inputs' row groups: copied byte for byte or re-encoded,
and why inputs that could not be copied fell back (files per reason). Summed over the committed bins
into the run's metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

__all__ = ["COPY_METRICS", "FALLBACK_REASONS", "RewriteCounts", "merge_copy_metrics"]

#: why an input's row groups were re-encoded instead of copied (the keys of ``copyFallbacks``)
FALLBACK_REASONS = {
    "smallRowGroups": "a row group below the copy threshold (copy_row_groups auto)",
    "deletionVector": "the file has a deletion vector: its deleted rows must be dropped",
    "codec": "compressed with another codec than the output's (compression)",
    "schema": "another physical schema: an older table schema, a column in its type before widening, "
              "another writer's encoding",
    "encrypted": "the file is encrypted",
    "metadata": "key-value metadata that changes how the rows read (Spark's calendar flags, say)",
    "fileLayout": "column chunks the copy cannot carry over",
    "unreadableFooter": "the footer could not be read",
    "rowTracking": "the table materializes row ids and row commit versions",
    "clustering": "the rewrite needs statistics of clustering columns",
    "corruptChunk": "a column chunk's pages did not match its metadata: the bin was re-encoded",
}
#: the run's metrics these counts give (plus ``copyFallbacks``)
COPY_METRICS = ("numRowGroupsCopied", "numBytesCopied", "numRowGroupsReencoded", "numBytesReencoded")


@dataclass
class RewriteCounts:
    """Row groups and compressed bytes of the output copied and re-encoded; inputs that fell back, per
    reason."""

    row_groups_copied: int = 0
    bytes_copied: int = 0
    row_groups_reencoded: int = 0
    bytes_reencoded: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)

    def fell_back(self, reason: str, files: int = 1) -> None:
        """``files`` inputs were re-encoded for ``reason`` (one of ``FALLBACK_REASONS``)."""
        if files:
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + files

    def add(self, other: RewriteCounts) -> None:
        """Add ``other``'s counts to these."""
        self.row_groups_copied += other.row_groups_copied
        self.bytes_copied += other.bytes_copied
        self.row_groups_reencoded += other.row_groups_reencoded
        self.bytes_reencoded += other.bytes_reencoded
        for reason, files in other.fallbacks.items():
            self.fell_back(reason, files)

    def metrics(self) -> dict[str, Any]:
        """The counts under the run's metric names."""
        return {"numRowGroupsCopied": self.row_groups_copied, "numBytesCopied": self.bytes_copied,
                "numRowGroupsReencoded": self.row_groups_reencoded, "numBytesReencoded": self.bytes_reencoded,
                "copyFallbacks": dict(sorted(self.fallbacks.items()))}

    @classmethod
    def total(cls, counts: Iterable[RewriteCounts | None]) -> RewriteCounts:
        """The sum of ``counts`` (None counts nothing)."""
        out = cls()
        for c in counts:
            if c is not None:
                out.add(c)
        return out


def merge_copy_metrics(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The copy metrics of several runs' metrics (rounds of one run) summed; empty when none has them."""
    results = [r for r in results if "numRowGroupsCopied" in r]
    if not results:
        return {}
    out: dict[str, Any] = {key: sum(int(r.get(key) or 0) for r in results) for key in COPY_METRICS}
    fallbacks: dict[str, int] = {}
    for r in results:
        for reason, files in (r.get("copyFallbacks") or {}).items():
            fallbacks[reason] = fallbacks.get(reason, 0) + int(files)
    out["copyFallbacks"] = dict(sorted(fallbacks.items()))
    return out
