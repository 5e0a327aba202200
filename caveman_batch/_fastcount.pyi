"""Type stub for the C extension caveman_batch._fastcount (source: _fastcount.c)."""

from collections.abc import Callable
from typing import TypedDict

class _CacheInfo(TypedDict):
    entries: int
    arena_bytes: int
    hits: int
    misses: int
    encoded: int  # misses encoded here (the others went to the fallback)
    vocabulary: int  # tokens loaded by load_ranks (0: none)
    max_entries: int
    max_key_bytes: int

def count(text: str | bytes | bytearray | memoryview, fallback: Callable[[str], int], /) -> int | None:
    """Exact token count of text: the sum of its pre-tokenizer pieces' counts, each cached.

    A piece not cached is encoded here once load_ranks() has the vocabulary, else (and for
    text this module cannot split) counted by fallback. Bytes are UTF-8 (invalid bytes
    count as U+FFFD); None for a str with lone surrogates.
    """

def segments(text: str | bytes | bytearray | memoryview, /) -> list[tuple[int, int, bool]] | None:
    """(start, end, whole) byte spans as count() splits them (for the tests)."""

def load_ranks(vocab: bytes, /) -> int:
    """Load an o200k_base vocabulary in quicktok's file layout; ValueError if malformed."""

def rank(token: bytes, /) -> int | None: ...
def cache_info() -> _CacheInfo: ...
def cache_clear() -> None: ...
