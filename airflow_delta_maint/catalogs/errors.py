"""The one error of catalog lookups."""

from __future__ import annotations


class CatalogError(ValueError):
    """A table name a catalog cannot resolve for maintenance, told in one line (nothing was written)."""


__all__ = ["CatalogError"]
