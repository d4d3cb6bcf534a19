"""Small text files the application writes for a process it starts (Ivy settings, a log4j2
configuration): written whole and only when their text changed, so that concurrent runs never
read half a file."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_text_once"]


def write_text_once(path: Path, text: str) -> Path:
    """``text`` at ``path``: left alone when it is there already, else written beside it and moved
    into place whole."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path
