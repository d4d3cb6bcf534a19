"""A copied file's footer as the Delta statistics should see it: the same row groups, each
chunk's statistics holding only bounds that are the exact minimum and maximum
(``bounds.view_statistics``), read back by pyarrow as ``pq.FileMetaData`` for
``delta/protocol/stats.py``.

That module trusts float and double bounds only in files parquet-mr wrote (other writers leave NaN
out). A copied file mixes writers, so the view applies the rule per input instead: float bounds of
other writers are removed from the view, and the view names parquet-mr as its writer, so the rest
are read. The view is never written anywhere.
"""

from __future__ import annotations

import io

import pyarrow.parquet as pq

from airflow_delta_maint.delta.parquet.bounds import view_statistics
from airflow_delta_maint.delta.parquet.compact import Struct
from airflow_delta_maint.delta.parquet.footer import MAGIC, file_bytes
from airflow_delta_maint.delta.parquet.row_group_copy import CopyResult

__all__ = ["VIEW_CREATED_BY", "delta_bounds_view"]

#: the view's writer: a parquet-mr release whose bounds every reader trusts
VIEW_CREATED_BY = "parquet-mr version 1.13.1 (build airflow-delta-maint bounds view)"


def _view_row_group(rg: Struct, leaves: list[Struct], created_by: str) -> Struct:
    out = rg.copy()
    columns = []
    for leaf, cc in enumerate(rg["columns"]):
        meta = cc["meta_data"]
        stats = meta.get("statistics")
        if stats is not None:
            meta = meta.copy()
            meta["statistics"] = view_statistics(stats, leaves[leaf], created_by)
            cc = cc.copy()
            cc["meta_data"] = meta
        columns.append(cc)
    out["columns"] = columns
    return out


def delta_bounds_view(result: CopyResult) -> pq.FileMetaData:
    """The Delta bounds view of a copied file (see the module's docstring)."""
    md = result.metadata.copy()
    leaves = [el for el in md["schema"][1:] if not el.get("num_children")]
    row_groups = list(md["row_groups"])
    for part in result.parts:
        for i in part.row_groups:
            row_groups[i] = _view_row_group(row_groups[i], leaves, part.created_by)
    md["row_groups"] = row_groups
    md["created_by"] = VIEW_CREATED_BY
    return pq.read_metadata(io.BytesIO(MAGIC + file_bytes(md)))
