"""Exact o200k_base token counts, computed offline.

The vocabulary ships inside the quicktok-v1 wheel (byte-identical to OpenAI's
o200k_base; tests check its sha256 against tiktoken's published hash and the counts
against tiktoken itself), so nothing is ever downloaded. Counts are of ordinary
text: special-token strings such as "<|endoftext|>" count as the text they are.
Counts are "inferred": exact for the named encoding, not verified by a provider.

With the _fastcount accelerator, counts are summed piece by piece with a cache, and
a piece not seen before is encoded in C from quicktok's own vocabulary file (used
only if its sha256 is the one pinned here): quicktok's tokenizer, which takes
about 0.7 s and 64 MB to load, is then loaded only for the rare text the C
pre-tokenizer leaves to it (code points newer than this Python's Unicode, invalid
UTF-8, pieces over 256 bytes).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib import resources
from types import ModuleType
from typing import Final, Protocol

from . import _accel

ENCODING: Final = "o200k_base"
BASIS: Final = "inferred"


class _Counter(Protocol):
    def count(self, text: str) -> int: ...


@lru_cache(maxsize=1)
def _encoder() -> _Counter:
    import quicktok

    enc: _Counter = quicktok.get_encoding(ENCODING)
    return enc


# quicktok-v1's o200k_base vocabulary file (rank order; tests compare every rank with
# quicktok's tokenizer) and its sha256 as shipped in quicktok-v1 0.4.0.
VOCAB_FILE: Final = ("data", "o200k.vocab")
VOCAB_SHA256: Final = "6b17521f79788c7ace48fc75f6edde125637a90b0018427e68f28d051b2ac1fe"


@lru_cache(maxsize=1)
def _fast() -> ModuleType | None:
    """The _fastcount accelerator, given the vocabulary when quicktok's file is the pinned one."""
    fast = _accel.fastcount
    if fast is None:
        return None
    try:
        vocab = resources.files("quicktok").joinpath(*VOCAB_FILE).read_bytes()
    except (OSError, ImportError):
        return fast  # misses go to quicktok's tokenizer
    if hashlib.sha256(vocab).hexdigest() == VOCAB_SHA256:
        fast.load_ranks(vocab)
    return fast


def warm() -> None:
    """Load what counting needs now (a parent does this before forking its workers)."""
    fast = _fast()
    if fast is None or not fast.cache_info()["vocabulary"]:
        _encoder()  # every count (or every piece not cached) goes to quicktok's tokenizer


def count_tokens(text: str | bytes) -> int:
    """Exact o200k_base token count of `text` (bytes are decoded as UTF-8, replacing errors)."""
    fast = _fast()
    if fast is not None:  # the same count, piece by piece with a cache (_fastcount.c)
        found: int | None = fast.count(text, _count_text)
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
