"""Type stub for the C extension caveman_batch._fastcount (source: _fastcount.c)."""

from collections.abc import Callable
from typing import TypedDict

class _CacheInfo(TypedDict):
    entries: int
    arena_bytes: int
    hits: int
    misses: int
    max_entries: int
    max_key_bytes: int

def count(text: str | bytes | bytearray | memoryview, fallback: Callable[[str], int], /) -> int | None:
    """Exact token count of text: the sum of fallback(piece) over its pre-tokenizer pieces.

    Bytes are UTF-8 (invalid bytes count as U+FFFD); None for a str with lone surrogates.
    """

def segments(text: str | bytes | bytearray | memoryview, /) -> list[tuple[int, int, bool]] | None:
    """(start, end, whole) byte spans as count() splits them (for the tests)."""

def cache_info() -> _CacheInfo: ...
def cache_clear() -> None: ...
