"""_fastcount: o200k_base counts piece by piece with a cache, equal to quicktok's whole-text count.

The segmentation is compared with the encoding's own pre-tokenizer pattern (run by the
regex module, as tiktoken's Python reference does), the loaded ranks with quicktok's
tokenizer, the counts with quicktok's count of the whole text; tests/test_tokens.py compares
count_tokens (which runs this module) with tiktoken itself.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import unicodedata
from importlib import resources
from pathlib import Path

import pytest
import quicktok
import regex
import tiktoken_ext.openai_public
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caveman_batch import tokens
from caveman_batch.tokens import _count_text

fc = tokens._fast()  # the accelerator with the vocabulary loaded (when quicktok's file is the pinned one)
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
# (U+017F long s: only in test_examples and test_tokens.py, quicktok splits "'ſ'" apart
# from tiktoken and this counter, which follow the pattern's case folding)
UNICODE_PIECES = ["é", "K", "\u00a0", "\u0085", "\u2028", "\u3000", "中文", "\u0301", "٣", "😀",
                  "\ufffd", "—", "’", "ǅ", "ª", "\u02b0", "\u0903", "Ⅻ", "²", "\u200b", "ß", "Ω", "\u20dd"]
UNASSIGNED = "\u0378"  # no character in any Unicode version: left to quicktok whole


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


def assigned(text: str) -> bool:
    return all(unicodedata.category(c) != "Cn" for c in text)


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
def test_unicode_text_splits_as_the_pattern_does(text: str) -> None:
    segments = fast_segments(text)
    assert [piece for piece, _ in segments] == regex_pieces(text)
    assert not any(whole for _, whole in segments)


@MANY
@given(st.text(max_size=80))
def test_random_text_splits_as_the_pattern_does_or_leaves_whole_pieces(text: str) -> None:
    """A code point this Python's Unicode does not assign widens to a region of whole pieces."""
    segments = fast_segments(text)
    assert "".join(piece for piece, _ in segments) == text
    assert boundaries([piece for piece, _ in segments]) <= boundaries(regex_pieces(text))
    for piece, whole in segments:
        assert assigned(piece) != whole  # a region holds the unassigned code point it widened for
        if not whole:
            assert regex_pieces(piece) == [piece]
    if assigned(text):
        assert [piece for piece, _ in segments] == regex_pieces(text)


def test_examples() -> None:
    def split(text: str) -> list[str]:
        return [piece for piece, _ in fast_segments(text)]

    assert split('{"name":"get_weather"}') == ['{"', "name", '":"', "get", "_weather", '"}']
    assert split("HTTPServer don't WE'LL it'ſ") == ["HTTPServer", " don't", " WE'LL", " it'ſ"]
    assert split("  \n  x  1") == ["  \n", " ", " x", " ", " ", "1"]
    assert split("12345 ,\n/\n") == ["123", "45", " ,\n/\n"]
    assert split("a café—\u00a0\u00a0x \u0301a ªA!") == ["a", " café", "—", "\u00a0", "\u00a0x", " \u0301a", " ª", "A", "!"]
    # an unassigned code point: a region to the first ASCII letter followed by an ASCII non-letter
    assert fast_segments(f"a b{UNASSIGNED}c, bon.") == [("a", False), (f" b{UNASSIGNED}c", True), (",", False),
                                                        (" bon", False), (".", False)]
    raw = b"ok \xff\xfe end."  # invalid UTF-8: likewise
    assert fc.segments(raw) == [(0, 2, False), (2, 9, True), (9, 10, False)]


# -- the vocabulary ---------------------------------------------------------------------


def vocabulary_file() -> bytes:
    return resources.files("quicktok").joinpath(*tokens.VOCAB_FILE).read_bytes()


def test_the_pinned_vocabulary_is_loaded_and_every_rank_is_quicktoks() -> None:
    if hashlib.sha256(vocabulary_file()).hexdigest() != tokens.VOCAB_SHA256:
        pytest.skip("quicktok's vocabulary file is not the pinned one: counts go through quicktok "
                    "(exact, slower to start); check the new file and re-pin tokens.VOCAB_SHA256")
    assert fc.cache_info()["vocabulary"] == 199_998
    token = encoder().decode_single_token_bytes
    assert [r for r in range(199_998) if fc.rank(token(r)) != r] == []
    assert fc.rank(b"\xff\xff\xff\xffnot a token") is None


def test_a_malformed_vocabulary_is_refused_and_the_loaded_one_kept() -> None:
    good = vocabulary_file()
    for bad in (b"", b"\x00\x01", good[:-1], good + b"x", good[:4] + good[4:6] + b"\x00" * 10,
                b"\xff\xff\xff\x7f" + good[4:]):
        with pytest.raises(ValueError, match="not a vocabulary"):
            fc.load_ranks(bad)
    assert fc.cache_info()["vocabulary"] == 199_998
    assert count("still counting") == encoder().count("still counting")


def test_compressing_the_samples_does_not_load_quicktoks_tokenizer(tmp_path: Path) -> None:
    """quicktok's tokenizer takes ~0.7 s and ~64 MB to load; ordinary catalogs never need it."""
    root = Path(__file__).resolve().parents[1]
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from caveman_batch import tokens\n"
            "from caveman_batch.pipeline import Config, run\n"
            "out = Path(sys.argv[1])\n"
            "summary = run(Config([sys.argv[2]], out / 'out', f'lmdb://{out}/ccr', workers=1))\n"
            "assert summary.tokens_before > 1000, summary\n"
            "print(tokens._encoder.cache_info().currsize)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(root / "bench_data" / "samples")],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


# -- the counts -------------------------------------------------------------------------


def count(text: str | bytes) -> int:
    got = fc.count(text, _count_text)
    assert isinstance(got, int)
    return got


@MANY
@given(st.lists(st.sampled_from(ASCII_PIECES + UNICODE_PIECES + [UNASSIGNED]), max_size=60).map("".join))
def test_count_equals_the_whole_text_count(text: str) -> None:
    assert count(text) == count(text.encode()) == encoder().count(text)


@MANY
@given(st.text(max_size=120))
def test_count_of_random_unicode(text: str) -> None:
    assert count(text) == count(text.encode()) == encoder().count(text)


def test_every_code_point_in_context_equals_quicktok() -> None:
    """Each character alone, doubled, after a digit, inside words, after an apostrophe and a
    space, before a mark: every code point of planes 0-3 and 14, a sample of the rest."""
    dense = (cp for cp in range(0x40000) if not 0xD800 <= cp <= 0xDFFF)
    points = [*dense, *range(0xE0000, 0xF0000), *range(0x40000, 0x110000, 97)]
    enc = encoder()
    mismatched = []
    for i in range(0, len(points), 1024):
        chunk = points[i:i + 1024]
        text = " ".join(f"a{chr(c)}'s {chr(c)}{chr(c)}1{chr(c)}A{chr(c)}b '{chr(c)} {chr(c)}\u0301x !{chr(c)}"
                        for c in chunk)
        if count(text) != enc.count(text):
            mismatched.append(f"U+{chunk[0]:04X}..U+{chunk[-1]:04X}")
    assert mismatched == []


def test_bytes_like_inputs_and_invalid_utf8() -> None:
    raw = "café 日本 😀 <b>&amp;</b> it's".encode()
    assert count(raw) == count(bytearray(raw)) == count(memoryview(raw)) == count(raw.decode())
    assert count(b"ok \xff\xfe end \xed\xa0\x80") == encoder().count("ok \ufffd\ufffd end \ufffd\ufffd\ufffd")
    assert count(b"\xc3") == encoder().count("\ufffd")  # truncated sequences: one U+FFFD each
    assert count(b"a\xe2\x82 b\xf0\x9f\x98") == encoder().count("a\ufffd b\ufffd")
    assert count(b"") == count("") == 0


def test_lone_surrogates_are_left_to_the_caller() -> None:
    assert fc.count("a\ud800b", _count_text) is None


def test_long_pieces() -> None:
    for text in ("a" * 5000, "ab" * 100, " " * 5000 + "x", "1" * 999, "{" * 300, "é" * 400, "aé" * 300 + " b",
                 "x" * 255 + " y", "x" * 256 + " y", "x" * 257 + " y"):
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

    with pytest.raises(RuntimeError, match="boom"):  # a region goes to the fallback
        fc.count(f"fresh{UNASSIGNED}words here", broken)
    with pytest.raises(ValueError, match="negative"):
        fc.count(f"other{UNASSIGNED}fresh words", lambda text: -1)
    with pytest.raises(TypeError):
        fc.count(12, _count_text)
    fc.cache_clear()


def test_the_cache_serves_repeats() -> None:
    fc.cache_clear()
    doc = '{"type":"string","description":"The name."}'
    assert count(doc) == encoder().count(doc)
    first = fc.cache_info()["misses"]
    assert first > 0
    assert count(doc * 3) == encoder().count(doc * 3)
    assert fc.cache_info()["misses"] <= first + 3  # only the chunks across the joins are new
    fc.cache_clear()


def test_corpora_counts_equal_quicktok(corpora: Path) -> None:
    files = sorted(p for p in corpora.rglob("*") if p.is_file())
    assert files
    enc = encoder()
    mismatched = [p.name for p in files
                  if count(p.read_bytes()) != enc.count(p.read_bytes().decode("utf-8", "replace"))]
    assert mismatched == []
