"""Exact o200k_base token counts, computed offline.

The vocabulary ships inside the quicktok-v1 wheel (byte-identical to OpenAI's
o200k_base; tests check its sha256 against tiktoken's published hash and the counts
against tiktoken itself), so nothing is ever downloaded. Counts are of ordinary
text: special-token strings such as "<|endoftext|>" count as the text they are.
Counts are "inferred": exact for the named encoding, not verified by a provider.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final, Protocol

from ._accel import fastcount as _fastcount

ENCODING: Final = "o200k_base"
BASIS: Final = "inferred"


class _Counter(Protocol):
    def count(self, text: str) -> int: ...


@lru_cache(maxsize=1)
def _encoder() -> _Counter:
    import quicktok

    enc: _Counter = quicktok.get_encoding(ENCODING)
    return enc


def count_tokens(text: str | bytes) -> int:
    """Exact o200k_base token count of `text` (bytes are decoded as UTF-8, replacing errors)."""
    if _fastcount is not None:  # the same count, piece by piece with a cache (_fastcount.c)
        found: int | None = _fastcount.count(text, _count_text)
        if found is not None:
            return found
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8", "replace")
    return _count_text(text)


def _count_text(text: str) -> int:
    if not text:
        return 0
    try:
        return _encoder().count(text)
    except (TypeError, UnicodeEncodeError):  # lone surrogates: counted as U+FFFD, as tiktoken does
        return _encoder().count(_SURROGATE.sub("\ufffd", text))


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
