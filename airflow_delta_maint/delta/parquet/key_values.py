"""The key-value metadata of a file made of other files' row groups.

Entries that describe one writer's view of the whole file (``DESCRIPTIVE``: ``ARROW:schema``,
Spark's schema, the writer's version) are taken from the reference (the table's current file
schema) only: an input's could disagree with the output's schema. Entries that
change how a reader decodes the rows (``DATA_SEMANTICS``: Spark's legacy calendar and INT96 flags,
its time zone) must have one value in every input and the reference (absent counts as a value),
else the copy is refused: the merged file could only say one thing for all its rows. Any other
entry is kept when every input carries it with one value (it holds for every row), else dropped.
"""

from __future__ import annotations

__all__ = ["DATA_SEMANTICS", "DESCRIPTIVE", "merge_key_values", "semantics_difference"]

DESCRIPTIVE = frozenset({"ARROW:schema", "pandas", "org.apache.spark.sql.parquet.row.metadata",
                         "org.apache.spark.version", "writer.model.name", "writer.time.zone"})
DATA_SEMANTICS = frozenset({"org.apache.spark.legacyDateTime", "org.apache.spark.legacyINT96",
                            "org.apache.spark.timeZone"})


def semantics_difference(kv: dict[str, str | None], reference: dict[str, str | None]) -> str | None:
    """Why a file's rows would read differently under the reference's metadata, or None."""
    for key in sorted(DATA_SEMANTICS):
        if kv.get(key) != reference.get(key):
            return (f"the key-value metadata {key} is {kv.get(key)!r} in the file and {reference.get(key)!r} in the "
                    "reference: the rows would read differently")
    return None


def merge_key_values(reference: dict[str, str | None],
                     inputs: list[dict[str, str | None]]) -> list[tuple[str, str | None]]:
    """The output's entries: the reference's descriptive and data-semantics ones, then the others
    every input carries with one value."""
    out = {k: v for k, v in reference.items() if k in DESCRIPTIVE or k in DATA_SEMANTICS}
    if inputs:
        first = inputs[0]
        for key, value in first.items():
            if key in out or key in DESCRIPTIVE or key in DATA_SEMANTICS:
                continue
            if all(key in kv and kv[key] == value for kv in inputs[1:]):
                out[key] = value
    return list(out.items())
