"""Bytes copied from one local file to another inside the kernel (``copy_file_range``): the copied column
chunks of a local table never pass through the interpreter, only their page headers are read."""

from __future__ import annotations

import io
import os
from typing import Any

__all__ = ["copy_file_range", "file_descriptor"]


def file_descriptor(stream: Any) -> int | None:
    """The operating system's descriptor of ``stream`` when it is a plain local file, else None (an Arrow
    buffer, a ranged reader of an object, an upload)."""
    if not isinstance(stream, (io.BufferedReader, io.BufferedWriter, io.FileIO)):
        return None
    try:
        return stream.fileno()
    except (OSError, ValueError):
        return None


def copy_file_range(source: int, sink: int, offset: int, length: int) -> bool:
    """Copy ``length`` bytes of ``source`` from ``offset`` to ``sink`` at its current position (which moves past
    them); False when the kernel cannot (nothing was copied then), so the caller copies them itself.

    Raises:
        OSError: the copy stopped part way, or the source ends before ``offset + length``.
    """
    copy = getattr(os, "copy_file_range", None)
    if copy is None:
        return False
    done = 0
    while done < length:
        try:
            n = copy(source, sink, length - done, offset + done)
        except OSError:
            if done == 0:
                return False
            raise
        if n == 0:
            raise OSError(f"the file ends {length - done} bytes before the end of the range it is copied from")
        done += n
    return True
