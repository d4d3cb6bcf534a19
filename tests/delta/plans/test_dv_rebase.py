"""The pure logic of rebasing a rewrite onto concurrent deletion vectors (delta/plans/dv_rebase.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples

from airflow_delta_maint.delta.plans.dv_rebase import (ExplicitRowMap, InOrderRowMap, RowMapError, decode_row_map,
                                                       encode_row_map, input_changes, locate_row_ids, merge_locations,
                                                       new_deletions, pack_sources, with_deletion_vector)

ROOT = "file:///tmp/t"


def rows(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_new_deletions_of_a_superset_and_refusal_of_anything_else() -> None:
    assert new_deletions(rows(1, 5), rows(1, 2, 5, 9)).tolist() == [2, 9]
    assert new_deletions(rows(), rows(3, 4)).tolist() == [3, 4]
    assert new_deletions(rows(1, 5), rows(1, 5)).tolist() == []
    assert new_deletions(rows(1, 5), rows(1, 2)) is None  # row 5 came back
    assert new_deletions(rows(1), rows()) is None  # the vector went away


def _add(path: str, dv: str | None = None) -> dict:
    body: dict = {"path": path, "size": 1, "dataChange": True}
    if dv:
        body["deletionVector"] = {"storageType": "u", "pathOrInlineDv": dv, "offset": 1, "sizeInBytes": 4,
                                  "cardinality": 1}
    return {"add": body}


def test_input_changes_replaced_removed_untouched_and_schema_changes() -> None:
    commits = [
        (3, [{"commitInfo": {"operation": "DELETE"}}, {"remove": {"path": "a.parquet"}}, _add("a.parquet", "dv1"),
             {"remove": {"path": "gone.parquet"}}]),
        (4, [{"commitInfo": {"operation": "WRITE"}}, _add("new.parquet")]),
        (5, [{"commitInfo": {"operation": "MERGE"}}, {"remove": {"path": "a.parquet"}}, _add("a.parquet", "dv2")]),
        (6, [{"commitInfo": {"operation": "UPDATE"}}, {"remove": {"path": "file:///tmp/t/b%20c.parquet"}}]),
    ]
    scan = input_changes(commits, ["a.parquet", "gone.parquet", "b%20c.parquet", "untouched.parquet"], ROOT)
    assert scan.schema_change is None
    a = scan.changes["a.parquet"]
    assert (a.kind, a.version, a.operation) == ("replaced", 5, "MERGE")
    assert a.add is not None and a.add["deletionVector"]["pathOrInlineDv"] == "dv2"
    assert (scan.changes["gone.parquet"].kind, scan.changes["gone.parquet"].operation) == ("removed", "DELETE")
    assert scan.changes["b%20c.parquet"].kind == "removed"  # another spelling of the same file
    assert "untouched.parquet" not in scan.changes and "new.parquet" not in scan.changes
    changed = input_changes(commits + [(7, [{"metaData": {"id": "x"}}])], [], ROOT)
    assert changed.schema_change == (7, "metaData")


def test_in_order_row_map_across_inputs_and_outputs() -> None:
    # input 0: 6 rows, rows 1 and 4 deleted when read -> live rows 0,2,3,5; input 1: 4 rows, none deleted
    # live sequence: (0,0) (0,2) (0,3) (0,5) (1,0) (1,1) (1,2) (1,3), cut into outputs of 3, 3 and 2 rows
    m = InOrderRowMap([6, 4], [rows(1, 4), rows()], [3, 3, 2])
    assert {f: r.tolist() for f, r in m.locate(0, rows(3, 5)).items()} == {0: [2], 1: [0]}
    assert {f: r.tolist() for f, r in m.locate(1, rows(0, 3)).items()} == {1: [1], 2: [1]}
    with pytest.raises(RowMapError):
        m.locate(0, rows(4))  # deleted when read: it was never written
    with pytest.raises(RowMapError):
        m.locate(1, rows(4))  # beyond the file
    with pytest.raises(RowMapError):
        InOrderRowMap([6, 4], [rows(1, 4), rows()], [3, 3])  # the outputs lack rows


def test_explicit_row_map_and_its_encoding() -> None:
    out0 = np.concatenate([pack_sources(1, rows(2, 0)), pack_sources(0, rows(7))])
    out1 = np.concatenate([pack_sources(0, rows(3)), pack_sources(1, rows(1))])
    m = ExplicitRowMap([decode_row_map(encode_row_map(out0)), decode_row_map(encode_row_map(out1))])
    assert {f: r.tolist() for f, r in m.locate(1, rows(0, 1)).items()} == {0: [1], 1: [1]}
    assert {f: r.tolist() for f, r in m.locate(0, rows(7, 3)).items()} == {0: [2], 1: [0]}
    with pytest.raises(RowMapError):
        m.locate(0, rows(5))  # a row the rewrite never saw


def test_row_ids_locate_rows_and_refuse_what_they_cannot_find() -> None:
    outputs = [np.array([10, 4, 7]), np.array([1, 12])]
    assert {f: r.tolist() for f, r in locate_row_ids(np.array([7, 12, 10]), outputs).items()} == {0: [0, 2], 1: [1]}
    with pytest.raises(RowMapError):
        locate_row_ids(np.array([99]), outputs)


def test_merge_locations_and_the_carried_add() -> None:
    merged = merge_locations([{0: rows(3, 1)}, {0: rows(1, 2), 2: rows(0)}])
    assert {f: r.tolist() for f, r in merged.items()} == {0: [1, 2, 3], 2: [0]}
    add = {"path": "x.parquet", "stats": json.dumps({"numRecords": 9, "tightBounds": True})}
    carried = with_deletion_vector(add, {"storageType": "u", "pathOrInlineDv": "abc", "cardinality": 2})
    assert carried["deletionVector"]["cardinality"] == 2
    assert json.loads(carried["stats"]) == {"numRecords": 9, "tightBounds": False}
    assert "deletionVector" not in add


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_in_order_row_map_agrees_with_writing_the_rows_out(data) -> None:
    """Lay the inputs' live rows out in order, cut them into outputs, and check every row is found
    where it was written."""
    sizes = data.draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
    read = [np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))) if n else [], dtype=np.uint64)
            for n in sizes]
    sequence = [(k, p) for k, n in enumerate(sizes) for p in range(n) if p not in set(read[k].tolist())]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(sequence)), max_size=3)))
    bounds = [0, *cuts, len(sequence)]
    outputs = [sequence[a:b] for a, b in zip(bounds, bounds[1:])]
    m = InOrderRowMap(sizes, read, [len(o) for o in outputs])
    for k, n in enumerate(sizes):
        live = [p for p in range(n) if p not in set(read[k].tolist())]
        pick = data.draw(st.sets(st.sampled_from(live), max_size=len(live))) if live else set()
        found = m.locate(k, np.array(sorted(pick), dtype=np.uint64))
        expected: dict[int, list[int]] = {}
        for f, out in enumerate(outputs):
            hits = [i for i, src in enumerate(out) if src[0] == k and src[1] in pick]
            if hits:
                expected[f] = hits
        assert {f: r.tolist() for f, r in found.items()} == expected
