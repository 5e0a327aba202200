"""_fastcount: o200k_base counts piece by piece with a cache, equal to quicktok's whole-text count.

The segmentation is compared with the encoding's own pre-tokenizer pattern (run by the
regex module, as tiktoken's Python reference does), the counts with quicktok's count of the
whole text; tests/test_tokens.py compares count_tokens (which runs this module) with
tiktoken itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import quicktok
import regex
import tiktoken_ext.openai_public
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caveman_batch import _accel
from caveman_batch.tokens import _count_text

fc = _accel.fastcount
pytestmark = pytest.mark.skipif(fc is None, reason="the _fastcount C extension is not built or is disabled")

def _o200k_pattern() -> str:
    """The pre-tokenizer pattern, from tiktoken's own o200k_base definition (no ranks loaded)."""
    patch = pytest.MonkeyPatch()
    patch.setattr(tiktoken_ext.openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    try:
        return str(tiktoken_ext.openai_public.o200k_base()["pat_str"])
    finally:
        patch.undo()


O200K = regex.compile(_o200k_pattern())

MANY = settings(derandomize=True, database=None, deadline=None, max_examples=600,
                suppress_health_check=[HealthCheck.too_slow])

ASCII_PIECES = [" ", "  ", "   ", "\n", "\r\n", "\r", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "\x00", "\x7f",
                "'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'d", "'x", "a", "b", "Z", "AB", "Ab",
                "aB", "HTTPServer", "1", "12", "123", "4567", "/", "//", "{", "\"", "\":\"", "\",\"", "}", "]",
                ".", "...", "-", "_", "@", "`", "|"]
UNICODE_PIECES = ["é", "ſ", "K", "\u00a0", "\u0085", "\u2028", "\u3000", "中文", "\u0301", "٣", "😀",
                  "\ufffd", "—", "’", "ǅ"]


def encoder() -> quicktok.Encoding:
    return quicktok.get_encoding("o200k_base")


def regex_pieces(text: str) -> list[str]:
    return O200K.findall(text)


def fast_segments(text: str) -> list[tuple[str, bool]]:
    raw = text.encode()
    return [(raw[start:end].decode(), whole) for start, end, whole in fc.segments(raw)]


def boundaries(parts: list[str]) -> set[int]:
    out, at = set(), 0
    for part in parts:
        at += len(part)
        out.add(at)
    return out


# -- the segmentation -------------------------------------------------------------------


@MANY
@given(st.lists(st.sampled_from(ASCII_PIECES), max_size=40).map("".join))
def test_ascii_pieces_are_the_patterns_pieces(text: str) -> None:
    segments = fast_segments(text)
    assert [piece for piece, _ in segments] == regex_pieces(text)
    assert not any(whole for _, whole in segments)


@MANY
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=80))
def test_any_ascii_text_splits_as_the_pattern_does(text: str) -> None:
    assert [piece for piece, _ in fast_segments(text)] == regex_pieces(text)


@MANY
@given(st.lists(st.sampled_from(ASCII_PIECES + UNICODE_PIECES), max_size=40).map("".join))
def test_regions_start_and_end_on_piece_boundaries(text: str) -> None:
    """Around non-ASCII text a segment is a run of whole pieces, never a part of one."""
    segments = fast_segments(text)
    assert "".join(piece for piece, _ in segments) == text
    assert boundaries([piece for piece, _ in segments]) <= boundaries(regex_pieces(text))
    for piece, whole in segments:
        assert whole == (not piece.isascii())
        if not whole:
            assert regex_pieces(piece) == [piece]


def test_examples() -> None:
    def split(text: str) -> list[str]:
        return [piece for piece, _ in fast_segments(text)]

    assert split('{"name":"get_weather"}') == ['{"', "name", '":"', "get", "_weather", '"}']
    assert split("HTTPServer don't WE'LL") == ["HTTPServer", " don't", " WE'LL"]
    assert split("  \n  x  1") == ["  \n", " ", " x", " ", " ", "1"]
    assert split("12345 ,\n/\n") == ["123", "45", " ,\n/\n"]
    # a region ends after the first ASCII letter that is followed by an ASCII non-letter
    assert fast_segments("a café, bon.") == [("a", False), (" café, bon", True), (".", False)]


# -- the counts -------------------------------------------------------------------------


def count(text: str | bytes) -> int:
    got = fc.count(text, _count_text)
    assert isinstance(got, int)
    return got


@MANY
@given(st.lists(st.sampled_from(ASCII_PIECES + UNICODE_PIECES), max_size=60).map("".join))
def test_count_equals_the_whole_text_count(text: str) -> None:
    assert count(text) == count(text.encode()) == encoder().count(text)


@MANY
@given(st.text(max_size=120))
def test_count_of_random_unicode(text: str) -> None:
    assert count(text) == count(text.encode()) == encoder().count(text)


def test_bytes_like_inputs_and_invalid_utf8() -> None:
    raw = "café 日本 😀 <b>&amp;</b> it's".encode()
    assert count(raw) == count(bytearray(raw)) == count(memoryview(raw)) == count(raw.decode())
    assert count(b"ok \xff\xfe end \xed\xa0\x80") == encoder().count("ok \ufffd\ufffd end \ufffd\ufffd\ufffd")
    assert count(b"") == count("") == 0


def test_lone_surrogates_are_left_to_the_caller() -> None:
    assert fc.count("a\ud800b", _count_text) is None


def test_long_pieces_are_counted_without_the_cache() -> None:
    for text in ("a" * 5000, " " * 5000 + "x", "1" * 999, "{" * 300, "é" * 400, "aé" * 300 + " b"):
        assert count(text) == encoder().count(text), text[:8]


def test_a_full_cache_is_emptied_and_refills() -> None:
    fc.cache_clear()
    limit = fc.cache_info()["max_entries"]
    words = [f"w{i:07d}x" for i in range(limit + 5000)]  # each a new chunk and new pieces
    text = " ".join(words)
    assert count(text) == encoder().count(text)
    info = fc.cache_info()
    assert 0 < info["entries"] < limit  # it was emptied at least once on the way
    assert count(text) == encoder().count(text)


def test_fallback_errors_propagate() -> None:
    fc.cache_clear()

    def broken(text: str) -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fc.count("fresh words here", broken)
    with pytest.raises(ValueError, match="negative"):
        fc.count("other fresh words", lambda text: -1)
    with pytest.raises(TypeError):
        fc.count(12, _count_text)
    fc.cache_clear()


def test_the_cache_serves_repeats() -> None:
    fc.cache_clear()
    calls: list[str] = []

    def counting(text: str) -> int:
        calls.append(text)
        return _count_text(text)

    doc = '{"type":"string","description":"The name."}'
    assert fc.count(doc, counting) == fc.count(doc, counting) == encoder().count(doc)
    first = len(calls)
    assert first > 0
    assert fc.count(doc * 3, counting) == encoder().count(doc * 3)
    assert len(calls) <= first + 3  # only the chunks across the joins are new
    fc.cache_clear()


def test_corpora_counts_equal_quicktok(corpora: Path) -> None:
    files = sorted(p for p in corpora.rglob("*") if p.is_file())
    assert files
    enc = encoder()
    mismatched = [p.name for p in files
                  if count(p.read_bytes()) != enc.count(p.read_bytes().decode("utf-8", "replace"))]
    assert mismatched == []
