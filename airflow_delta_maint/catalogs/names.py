"""Table names as catalogs spell them, and include/exclude patterns over them."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from airflow_delta_maint.catalogs.errors import CatalogError


def split_name(name: str, parts: int, catalog: str) -> list[str]:
    """``name`` cut into its ``parts`` dot-separated parts (``db.table``: 2; ``catalog.schema.table``: 3).

    Back-quoted parts may hold dots (```my.db`.t``).

    :raises CatalogError: when the name has another number of parts or an empty one.
    """
    text = str(name or "").strip()
    out: list[str] = []
    current, quoted = "", False
    for ch in text:
        if ch == "`":
            quoted = not quoted
        elif ch == "." and not quoted:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    if quoted or len(out) != parts or not all(out):
        shape = "database.table" if parts == 2 else "catalog.schema.table"
        raise CatalogError(f"{catalog} table name {name!r} is not of the form {shape}")
    return out


def as_patterns(patterns: str | Sequence[str] | None) -> list[str]:
    """Patterns from one string (comma-separated) or a list; None and empty give none."""
    if patterns is None:
        return []
    if isinstance(patterns, str):
        return [p.strip() for p in patterns.split(",") if p.strip()]
    return [str(p).strip() for p in patterns if str(p).strip()]


def select_names(names: Iterable[str], include: str | Sequence[str] | None = None,
                 exclude: str | Sequence[str] | None = None) -> list[str]:
    """The names (a table's own name, without its schema) matching any ``include`` pattern (all when none
    is given) and no ``exclude`` pattern, sorted. Patterns are shell-style (``orders_*``, ``tmp_?``),
    case-insensitive, as catalogs compare names."""
    keep, drop = as_patterns(include), as_patterns(exclude)

    def matches(name: str, patterns: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(name.lower(), p.lower()) for p in patterns)

    return sorted(n for n in names if (not keep or matches(n, keep)) and not matches(n, drop))


__all__ = ["as_patterns", "select_names", "split_name"]
