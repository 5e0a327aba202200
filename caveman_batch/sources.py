"""Reading inputs under a size cap: an oversize document is never read whole."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO, Final

from .errors import CatalogError, InputTooLargeError, UsageError

DEFAULT_MAX_BYTES: Final = 32 << 20
_CHUNK: Final = 1 << 20


def read_capped(stream: BinaryIO, source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """All of `stream`, or InputTooLargeError as soon as it passes `max_bytes`."""
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(min(_CHUNK, max_bytes + 1 - size))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(source, max_bytes)


def read_source(name: str, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, bytes]:
    """(source label, bytes) of a file path or "-" (stdin), under the cap."""
    if name == "-":
        if sys.stdin is None:  # (started with its stdin closed)
            raise UsageError("-: there is no standard input to read (it is closed)")
        return "<stdin>", read_capped(sys.stdin.buffer, "<stdin>", max_bytes)
    path = Path(name)
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > max_bytes:
                raise _too_large(str(path), max_bytes)
            return str(path), read_capped(fh, str(path), max_bytes)
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read: {exc.strerror or exc}", str(path)) from exc


def _too_large(source: str, max_bytes: int) -> InputTooLargeError:
    return InputTooLargeError(
        f"{source}: input is larger than {max_bytes:,} bytes (--max-bytes); not read whole",
        source, max_bytes,
    )
