"""The C reducer (caveman_batch._fastreduce) against the Python reference path.

_fastreduce.reduce(text, short_bytes, lead_bytes) must return exactly
describe.explain(text, ...).text, or None (then describe.reduce runs the Python
path). Checked on every description of the shared corpora, the bench samples and
the bench generator, on random text biased to the hard parts (hypothesis), for
linear time, and for the one source of truth of what it mirrors: the rule
fragments and abbreviations it compiles come from rules.py and describe.py, and
the patterns it mirrors by hand must still read as they did when it was written.

The stages reduce() runs are exported alone (split_sentences, units, rule_units, which
the benchmarks time) and are checked the same way against describe.split_sentences,
describe.units and RuleScan.states_rule / opens_with_instruction, on folded text.
"""

from __future__ import annotations

import gc
import json
import os
import random
import re
import string
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caveman_batch import _accel, catalog, describe, markup, rules

if _accel.fastreduce is None:
    pytest.skip("caveman_batch._fastreduce is not built (python setup.py build_ext --inplace) "
                "or CAVEMAN_PURE_PYTHON is set", allow_module_level=True)

fast = _accel.fastreduce
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # bench_data runs from the repo, it is not installed
    sys.path.insert(0, str(REPO))

from bench_data.generate import generate_registry  # noqa: E402

S, L = describe.SHORT_BYTES, describe.LEAD_BYTES
F1 = "The output is shown as a friendly table in the terminal window."
F2 = "This is a friendly helper for people who like gardens and flowers."
MAX_NONE_SHARE = 0.01  # of the long descriptions, by count and by bytes


def c_reduce(text: str, short_bytes: int = S, lead_bytes: int = L) -> str | None:
    return fast.reduce(text, short_bytes, lead_bytes)


def assert_same(text: str, short_bytes: int = S, lead_bytes: int = L) -> str | None:
    """The C result equals the Python reference, or is None; returns the C result."""
    got = c_reduce(text, short_bytes, lead_bytes)
    if got is not None:
        want = describe.explain(text, short_bytes=short_bytes, lead_bytes=lead_bytes).text
        assert got == want, f"C and Python differ on {text!r}"
    return got


# -- configuration: one source of truth -----------------------------------------------------


def test_describe_uses_the_configured_module() -> None:
    assert describe._FAST is fast, "configure() rejected rules._ALL: see the ValueError it raises"
    config = fast.configuration()
    assert config["fragments"] == tuple(rules._ALL)
    assert config["abbreviations"] == describe._ABBREVIATIONS
    assert 0 < config["dfa_states"] < 100_000


def test_mirrored_patterns_and_constants_are_unchanged() -> None:
    """A change to one of these in Python must be made in _fastreduce.c too (then update MIRRORED there)."""
    live: dict[str, object] = {}
    for name in fast.MIRRORED:
        module_name, attr = name.split(".")
        value = getattr({"describe": describe, "markup": markup, "rules": rules}[module_name], attr)
        if isinstance(value, re.Pattern):
            live[name] = value.pattern
        elif isinstance(value, tuple):
            live[name] = "".join(value)
        else:
            live[name] = value
    assert live == fast.MIRRORED
    assert rules._IMPERATIVE.flags & re.IGNORECASE and not rules._SIGNAL.flags & re.IGNORECASE
    assert not describe._LIST_MARKER.flags & re.IGNORECASE


@pytest.mark.parametrize("fragment", [".", "a.b", "^a", "a$", "[^a]", r"\bword", "a(?=b)", "(?i)a",
                                      "a?", "(?:a|)", "a**", "[é]", "a{2,1}", "(a"])
def test_configure_rejects_what_it_cannot_compile_and_keeps_the_old_table(fragment: str) -> None:
    with pytest.raises(ValueError):
        fast.configure([*rules._ALL, fragment], describe._ABBREVIATIONS)
    assert fast.configuration()["fragments"] == tuple(rules._ALL)
    assert c_reduce(f"Lists files. {F1} {F2} {F1} It must be set.") == "Lists files. It must be set."


def test_reconfigure_changes_the_rules() -> None:
    text = f"Lists files. {F1} {F2} {F1} Tulips are nice."
    try:
        fast.configure([*rules._ALL, "tulips?"], describe._ABBREVIATIONS)
        assert c_reduce(text) == "Lists files. Tulips are nice."
    finally:
        fast.configure(rules._ALL, describe._ABBREVIATIONS)
    assert c_reduce(text) == "Lists files."


def test_greek_fragments_leave_capital_sigma_to_python() -> None:
    """str.lower() turns a final "Σ" into "ς", not "σ": only a Greek fragment could tell."""
    text = f"Lists files. {F1} {F2} {F1} ΟΔΟΣ here. Σ."
    assert fast.configuration()["sigma_sensitive"] == 0
    assert assert_same(text) is not None
    try:
        fast.configure([*rules._ALL, "οδοσ"], describe._ABBREVIATIONS)
        assert fast.configuration()["sigma_sensitive"] == 1
        assert c_reduce(text) is None
        assert c_reduce(text.replace("Σ", "S")) is not None
    finally:
        fast.configure(rules._ALL, describe._ABBREVIATIONS)


# The fragments' own language, sampled: strings each fragment matches (with Python's
# parser, whose syntax RE2 shares for this subset; \d and \w are ASCII as in RE2).
from re import _constants as sre_c  # private, but the parser `re` itself uses  # noqa: E402
from re import _parser as sre_parse  # noqa: E402

WORD_CHARS = string.ascii_letters + string.digits + "_"


def _sample(parsed: Any, rnd: random.Random) -> str:
    out: list[str] = []
    for op, av in parsed:
        if op is sre_c.LITERAL:
            out.append(chr(av))
        elif op is sre_c.IN:
            choices: list[str] = []
            for kind, value in av:
                if kind is sre_c.LITERAL:
                    choices.append(chr(value))
                elif kind is sre_c.RANGE:
                    choices += [chr(c) for c in range(value[0], value[1] + 1)]
                elif kind is sre_c.CATEGORY:
                    choices += string.digits if value is sre_c.CATEGORY_DIGIT else WORD_CHARS
            out.append(rnd.choice(choices))
        elif op is sre_c.CATEGORY:
            out.append(rnd.choice(string.digits if av is sre_c.CATEGORY_DIGIT else WORD_CHARS))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            low, high, sub = av
            high = min(high, low + 4)
            out += [_sample(sub, rnd) for _ in range(rnd.randint(low, high))]
        elif op is sre_c.SUBPATTERN:
            out.append(_sample(av[-1], rnd))
        elif op is sre_c.BRANCH:
            out.append(_sample(rnd.choice(av[1]), rnd))
        else:
            raise AssertionError(f"sampler does not know {op}")
    return "".join(out)


PARSED = {f: sre_parse.parse(f) for f in rules._ALL}


def fragment_sample(fragment: str, seed: int) -> str:
    return _sample(PARSED[fragment], random.Random(seed))


def test_every_fragment_sample_is_a_rule_word_for_python_too() -> None:
    for fragment in rules._ALL:
        for seed in range(5):
            sample = fragment_sample(fragment, seed)
            assert re.fullmatch(fragment, sample), (fragment, sample)


@pytest.mark.parametrize("fragment", rules._ALL)
def test_each_fragment_decides_as_re2_does(fragment: str) -> None:
    """Each fragment's samples, bare, glued to a word character, shouted, in a span."""
    for seed in range(6):
        sample = fragment_sample(fragment, seed)
        for variant in (sample, sample.upper(), "x" + sample, sample + "x", "_" + sample, sample + "7",
                        "é" + sample, sample + "é", f'"{sample}"', f"({sample})", sample[:-1]):
            assert_same(f"Lists files. {F1} {F2} Then {variant} here.")
            assert_same(f"Lists files. {F1} {F2} {variant}")  # ends at the end of the text
            assert_same(f"Lists files. {F1} {variant}. {F2}")


# -- targeted cases ------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "",
    " ",
    "\n\n",
    "x",
    "  Lists   files. ",
    "a" * 500,
    "日本語のテキスト。" * 30,
    f"İstanbul must be there. {F1} {F2} İİİ. Lists files.",
    f"Lists files. {F1} {F2} \u212aelvin MUST. Then ſet it.",
    f"uſe the İNCLUDE flag. {F1} {F2}",
    f"ınclude it. {F1} {F2}",
    f"Σ ΑΣ ΟΔΟΣ. {F1} {F2} ΣΑΣ must. Σ.",
    f"Lists files. {F1} {F2} Straße ẞ must. ß.",
    f"Lists files. {F1} {F2} \u00a0\u2028\u3000 Must\u2029be.",
    f"Lists files.\r\n\r\n{F1}\r\n- a\r\n- b\r\n{F2}",
    f"Valid values:\n- A\n- B\n{F1} {F2}",
    f"Steps:\n1. Open it.\n2. Close it.\n{F1}\n{F2}",
    f"Lists files. {F1} {F2}\n(iv) Provide it.\n(a) set it",
    f"Lists files. {F1} {F2} project_id* is needed. Use x*, y* or z*.",
    f"Lists files. {F1} {F2} Pass a value > 0. Or ≥5. Or <= 10.",
    f"Lists files. {F1} {F2} ⚠ Careful. ‼ Really. 🛑 Stop.",
    f"Lists files. {F1} {F2} IMPORTANT: yes. NOTE the thing. ABC use it. AB: no. ABC1: no.",
    f'Lists files. {F1} {F2} He said "Stop. This must end" loudly. `a. B` and “c. D”.',
    f"Lists files. {F1} {F2} See https://example.com/A.B/c?x=1. Next one. e.g. Apples. J. R. R. Tolkien.",
    f"Lists files. {F1} {F2} Version v1.2.3. Value 1.5. Config.Json. 12. Thirteen. 123. Go.",
    f"Lists files. {F1} {F2} Wait… Next one. Done...Really? Yes!) Next.",
    "Returns data " + "é" * 40 + f" and more text here. {F1} {F2}",
    "Returns the weather report for the city that is named in the request\n- " + "x" * 100,
    "Gibt die Wetterdaten für Köln zurück, mit Wind, Regen und Sonnenstunden für die Woche. " + F1 + F2,
    "Returns — a, list; of: things – " * 10,
    "word (" * 40,
    '"' + "a. B " * 70 + '"',
    "a.\n" * 100,
    "You must pass a token.\n- https://api.example.com/v1/organisations/{organisation_id}/projects/"
    "{project_id}/artifacts/latest\nReturns the newest build artifact of the project.",
    "* " + "x" * 200 + " and more",
])
def test_targeted(text: str) -> None:
    for short_bytes, lead_bytes in ((S, L), (20, 15), (0, 3), (1000, 4), (60, 200)):
        got = assert_same(text, short_bytes, lead_bytes)
        assert got is not None or (text, lead_bytes) == (_CUT_TO_NOTHING, 3), (short_bytes, lead_bytes)


_CUT_TO_NOTHING: Final = ("You must pass a token.\n- https://api.example.com/v1/organisations/"
                          "{organisation_id}/projects/{project_id}/artifacts/latest\nReturns the "
                          "newest build artifact of the project.")


def test_a_text_made_that_fold_changes_is_folded_by_python_and_left_to_it_by_c() -> None:
    """A lead cut to "…" alone (3 bytes: room for nothing else) after a list item's break
    made 'You must pass a token.\n…', which reduce then folded to '… token. …' (not a
    fixed point, in C and Python alike). The text made is folded as the next pass would;
    the C reducer leaves such a text to Python."""
    for short_bytes in (0, 20):
        want = describe.explain(_CUT_TO_NOTHING, short_bytes=short_bytes, lead_bytes=3).text
        assert want == "You must pass a token. …"
        assert describe.explain(want, short_bytes=short_bytes, lead_bytes=3).text == want
        assert c_reduce(_CUT_TO_NOTHING, short_bytes, 3) is None


def test_none_for_input_it_leaves_to_python() -> None:
    long = f"Lists files. {F1} {F2} {F1}"
    assert c_reduce(long + " \udc00") is None  # a lone surrogate: Python decides (and raises)
    assert c_reduce(long, S, 2) is None  # cut_lead slices with limit - 3 < 0
    assert c_reduce(long, -1, L) is None
    assert c_reduce(long, 10**30, 10**30) == describe.explain(long, short_bytes=10**30, lead_bytes=10**30).text
    with pytest.raises(TypeError):
        fast.reduce(b"bytes", S, L)


def test_reduce_uses_the_c_result(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Spy:
        @staticmethod
        def reduce(text: str, short_bytes: int, lead_bytes: int) -> str | None:
            calls.append(text)
            return None if "python" in text else "from C"

    monkeypatch.setattr(describe, "_FAST", Spy)
    describe._reduce_cached.cache_clear()
    try:
        long = f"Lists files. {F1} {F2} {F1}"
        assert describe.reduce(long) == "from C"
        assert describe.reduce(long, short_bytes=100) == "from C"
        assert describe.reduce("python " + long) == describe.explain("python " + long).text
        assert describe.reduce("Lists files.") == "Lists files."  # short and folded: never asked
        assert len(calls) == 3
    finally:
        describe._reduce_cached.cache_clear()


# -- differential on real and generated catalogs ---------------------------------------------


def descriptions(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield value
            else:
                yield from descriptions(value)
    elif isinstance(node, list):
        for value in node:
            yield from descriptions(value)


def documents(path: Path) -> Iterator[object]:
    raw = path.read_bytes().decode("utf-8", "replace")
    try:
        yield json.loads(raw)
    except ValueError:
        for line in raw.splitlines():  # JSONL, or a malformed file: whatever lines parse
            try:
                yield json.loads(line)
            except ValueError:
                pass


def texts_under(root: Path) -> list[str]:
    found: dict[str, None] = {}
    for path in sorted(root.rglob("*")):
        if path.suffix in (".json", ".jsonl") and path.is_file():
            for doc in documents(path):
                found.update(dict.fromkeys(descriptions(doc)))
    return list(found)


def check_all(texts: list[str], label: str) -> None:
    mismatches: list[str] = []
    long = none = long_bytes = none_bytes = 0
    for text in texts:
        size = len(text.encode("utf-8", "surrogatepass"))
        is_long = len(describe.fold(text).encode("utf-8", "surrogatepass")) > S
        got = c_reduce(text)
        long += is_long
        long_bytes += size * is_long
        if got is None:
            none += 1
            none_bytes += size
        elif got != describe.explain(text).text:
            mismatches.append(text)
    print(f"\n{label}: {len(texts)} descriptions, {long} long ({long_bytes:,} B); "
          f"None for {none} ({none_bytes:,} B)")
    assert not mismatches, f"{len(mismatches)} differ, first: {mismatches[0]!r}"
    assert none <= MAX_NONE_SHARE * max(long, 1), f"None for {none} of {long} long descriptions"
    assert none_bytes <= MAX_NONE_SHARE * max(long_bytes, 1)


@pytest.mark.slow
def test_corpora(corpora: Path) -> None:
    texts = texts_under(corpora)
    assert len(texts) > 1000
    check_all(texts, "shared corpora")


def test_bench_samples() -> None:
    check_all(texts_under(REPO / "bench_data" / "samples"), "bench_data/samples")


def test_bench_generator(tmp_path: Path) -> None:
    generate_registry(tmp_path, seed=99, servers=30)
    check_all(texts_under(tmp_path), "bench_data.generate")


# -- the stages alone: split_sentences, units, rule_units -------------------------------------


def spans_of(sentences: list[describe.Sentence]) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in sentences]


def py_rule_units(folded: str, spans: list[tuple[int, int]]) -> list[bool]:
    """What describe._reduce_once asks of each unit."""
    scan = rules.RuleScan(folded)
    return [scan.states_rule(s, e) or rules.opens_with_instruction(folded[s:e]) for s, e in spans]


def assert_same_stages(folded: str) -> bool:
    """The C stages of folded text equal the Python ones, or all are None; True if C answered."""
    sentences = fast.split_sentences(folded)
    units = fast.units(folded)
    if sentences is None:  # one loader: None for one is None for all
        assert units is None and fast.rule_units(folded, []) is None, folded
        return False
    assert sentences == spans_of(describe.split_sentences(folded)), f"sentences differ on {folded!r}"
    assert units == spans_of(describe.units(folded)), f"units differ on {folded!r}"
    assert fast.rule_units(folded, units) == py_rule_units(folded, units), f"rules differ on {folded!r}"
    # states_rule asks about any span in order: sentences are finer spans of the same text
    assert fast.rule_units(folded, sentences) == py_rule_units(folded, sentences), folded
    return True


def check_stages(texts: list[str], label: str) -> None:
    """Every long folded description (what reduce runs the stages on), as check_all."""
    folded = [f for f in dict.fromkeys(map(describe.fold, texts))
              if len(f.encode("utf-8", "surrogatepass")) > S]
    none = none_bytes = 0
    for text in folded:
        if not assert_same_stages(text):
            none += 1
            none_bytes += len(text.encode("utf-8", "surrogatepass"))
    total_bytes = sum(len(f.encode("utf-8", "surrogatepass")) for f in folded)
    print(f"\n{label}: {len(folded)} long folded descriptions ({total_bytes:,} B); "
          f"stages None for {none} ({none_bytes:,} B)")
    assert none <= MAX_NONE_SHARE * max(len(folded), 1), f"None for {none} of {len(folded)}"
    assert none_bytes <= MAX_NONE_SHARE * max(total_bytes, 1)


@pytest.mark.slow
def test_stages_on_corpora(corpora: Path) -> None:
    texts = texts_under(corpora)
    assert len(texts) > 1000
    check_stages(texts, "shared corpora")


def test_stages_on_bench_samples() -> None:
    check_stages(texts_under(REPO / "bench_data" / "samples"), "bench_data/samples")


def test_stages_on_bench_generator(tmp_path: Path) -> None:
    generate_registry(tmp_path, seed=99, servers=30)
    check_stages(texts_under(tmp_path), "bench_data.generate")


@pytest.mark.parametrize("text", [
    "", "x", "Lists files.", f"Lists files. {F1} {F2}", f"Valid values:\n- A\n- B\n\n{F1} {F2}",
    f"Steps:\n1. Open it.\n2. Close it.\n\n{F1}\n- use it. Then more", 'He said "Stop. Now" ok. Next.',
    f"İstanbul must. {F1} ΟΔΟΣ. Wait… Next. e.g. Apples. J. R. Tolkien. ⚠ Careful. IMPORTANT: yes.",
])
def test_stages_targeted(text: str) -> None:
    assert describe.fold(text) == text
    assert assert_same_stages(text)


def test_stages_refuse_what_reduce_would_not_split() -> None:
    long = f"Lists files. {F1} {F2} {F1}"
    for unfolded in (" " + long, long + "\n", long.replace(" ", "  ", 1), long.replace(" ", "\t", 1),
                     long.replace(" ", "\n", 1)):
        assert describe.fold(unfolded) != unfolded
        for stage in (fast.split_sentences, fast.units, lambda t: fast.rule_units(t, [])):
            with pytest.raises(ValueError, match="folded"):
                stage(unfolded)
    surrogate = long + " \udc00"
    assert fast.split_sentences(surrogate) is None and fast.units(surrogate) is None
    assert fast.rule_units(surrogate, [(0, 5)]) is None
    for bad in ([(0, len(long) + 1)], [(-1, 3)], [(5, 4)]):
        with pytest.raises(IndexError):
            fast.rule_units(long, bad)
    with pytest.raises(ValueError):
        fast.rule_units(long, [(0, 1, 2)])
    with pytest.raises(TypeError):
        fast.rule_units(long, [("0", 1)])
    with pytest.raises(TypeError):
        fast.split_sentences(b"bytes")
    assert fast.rule_units(long, [(0, 12), [0, 12], (3, 3)]) == [False, False, False]
    assert fast.rule_units(long, [(len(long) - 12, len(long))]) == [False]


# -- hypothesis: random text biased to the hard parts --------------------------------------------

PIECES = [
    "Returns", "the", "weather", "for", "a", "city", "Lists", "files", "friendly", "table", "gardens",
    "e.g.", "i.e.", "etc.", "Mr.", "Dr.", "Prof.", "J.", "J. R. R.", "vs.", "approx.", "No.", "Fig.", "a.m.",
    "U.S.", "E.g.", "Etc.", "1.5", "3.14", "0.5.", "v1.2.3", "10.", "1.", "12.", "123.", "1234.",
    "(a)", "(iv)", "a)", "2)", "https://example.com/A.B/c?x=1.", "/srv/Data.Old/x", "C:\\Users\\Me.Txt",
    "config.json", "Config.Json", '"', "“", "”", "‘", "’", "'", "`", "``", "(", ")", "[", "]",
    "- ", "* ", "+ ", "• ", "▪ ", "1. ", "(a) ", "iv) ", "\n", "\n\n", "\n\n\n", "\n- ", "\n1. ", "\n* ",
    "\r\n", " \n ", " ", "  ", "\t", "\u00a0", "\u2028", "\u3000", ".", "!", "?", "…", "...", ". ", "! ",
    "? ", "… ", ".) ", '." ', ".”) ", ".'\") ", ":", ";", ",", "-", "–", "—",
    "must", "not", "Must", "MUST", "NOT", "ONLY", "IMPORTANT:", "WARNING!", "NOTE the", "DO use", "AB:",
    "Provide", "provide", "use", "Use this", "call", "Set", "include", "omit", "leave", "SELECT", "- Use",
    "x Use", "é\u00a0Provide", "\tLeave", " Settings", " Use_it", "Example: Use", " Usé",
    "1. Pass", "1) choose", "•  supply", "⚠", "❗", "‼", "🚨", "⛔", "🛑", "> 5", "<= 10", "≤ 3", "≥4",
    "<x", "id*", "project_id* ", "a*,", "é", "ü", "ß", "ẞ", "İ", "ı", "ſ", "\u212a", "Σ", "ΑΣ", "日本語",
    "😀", "Ω", "\u0130STANBUL", "sólo", "máximo", "par défaut", "standardmäßig", "müssen", "10-20",
    "10 – 20", "5 to 10", "100ms", "5 MiB", "30 s", "ISO 8601", "rfc3339", "e.164", "call foo first",
    "Valid values:", "(Optional, default true)", "at most 5", "Do not use", "Use this tool when",
]
fragment_samples = st.builds(fragment_sample, st.sampled_from(rules._ALL), st.integers(0, 1 << 16))
piece = st.one_of(st.sampled_from(PIECES), fragment_samples,
                  fragment_samples.map(str.upper), st.text(max_size=4))
hard_text = st.one_of(
    st.lists(piece, max_size=120).map(" ".join),
    st.lists(piece, max_size=120).map("".join),
    st.lists(st.one_of(piece, st.sampled_from([F1, F2])), max_size=40).map(" ".join),
    st.text(max_size=400),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=400),
)
HYPOTHESIS = settings(derandomize=True, database=None, deadline=None, max_examples=1500,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@HYPOTHESIS
@given(hard_text)
def test_random_text_matches_python_and_is_idempotent(text: str) -> None:
    once = assert_same(text)
    if once is not None:
        assert c_reduce(once) in (None, once)
        assert describe.reduce(once) == once


@settings(derandomize=True, database=None, deadline=None, max_examples=500,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hard_text, st.integers(0, 400), st.integers(3, 200))
def test_random_text_and_thresholds_match_python(text: str, short_bytes: int, lead_bytes: int) -> None:
    assert_same(text, short_bytes, lead_bytes)


@HYPOTHESIS
@given(hard_text)
def test_random_text_stages_match_python(text: str) -> None:
    assert_same_stages(describe.fold(text))


# -- linear time -------------------------------------------------------------------------------


def cpu_seconds(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    gc.disable()
    try:
        for _ in range(repeat):
            started = time.process_time()
            fn()
            best = min(best, time.process_time() - started)
    finally:
        gc.enable()
    return best


PROBES = {
    "dots": ".", "period-space": ". ", "digits": "1", "digit-dots": "1.", "quotes": '"', "backticks": "`",
    "curly": "“", "curly-pair": "“a ", "quote-words": '"a. B ', "spaces": " ", "newlines": "\n",
    "blank-lines": "x\n\n", "list-items": "\n- a", "caps": "A", "shout": "ABC ", "words": "must ",
    "eg": "e.g. ", "initials": "J. ", "star": "a* ", "ellipsis": "… ", "closers": '.") ', "number-range": "1-",
    "call-first": "call x ", "sigma": "Σ", "dotted-i": "İ", "non-ascii": "é ", "unterminated-lines": "word\n",
}


@pytest.mark.parametrize("probe", list(PROBES))
def test_linear_on_runs(probe: str) -> None:
    unit = PROBES[probe]
    small = "Lead sentence. " + unit * (25_000 // len(unit))
    large = "Lead sentence. " + unit * (100_000 // len(unit))
    assert_same(small)
    t_small = cpu_seconds(lambda: c_reduce(small), 5)
    t_large = cpu_seconds(lambda: c_reduce(large), 3)
    assert t_large < 8 * t_small + 0.01, f"{probe}: {t_small:.4f}s at n, {t_large:.4f}s at 4n"


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["prose", "one-sentence", "lines", "quotes"])
def test_thirty_megabytes(shape: str) -> None:
    unit = {
        "prose": f"{F1} Paths must be absolute, e.g. /srv/data. {F2} ",
        "one-sentence": "word, another, more and more ",
        "lines": "- an item without a stop\n",
        "quotes": 'He said "Stop. Now" and `a. B` then “c. D” ok. ',
    }[shape]
    text = unit * (30_000_000 // len(unit))
    baseline = cpu_seconds(lambda: text.lower().encode().count(b"."), 2)  # three linear scans
    took = cpu_seconds(lambda: c_reduce(text), 1)
    assert c_reduce(text) is not None
    assert took < 40 * baseline + 1.0, f"{shape}: {took:.2f}s, a linear scan {baseline:.2f}s"


# -- markup: handed back to Python ------------------------------------------------------------

MARKUP_TEXTS = [
    f"Lists files. {F1}\nExample:\n```\ncreate_team(organizationSlug='x')\n```\n{F2}",
    f"Lists files. {F1}\n  ~~~yaml\n  a:  1\n  ~~~\n{F2}",
    f"```\nunclosed   code\n\n{F1} {F2}",
    f"Lists files. {F1}\n## Limits\nAt most 10. {F2}",
    f"#\n{F1} {F2} {F1}",
    f"Lists files. {F1}\n<hints>\n- Must be set.\n</hints>\n{F2}",
    f"Lists files. {F1} <tip>{F2} Must be set.</tip> {F1}",
    f"Lists files. {F1}\n\t<x\n{F2} {F1}",
]
NEAR_MISSES = [  # what markup.MARKUP does not match: the C reducer answers
    f"Lists files. {F1}\n`` two backticks\n{F2} {F1}",
    f"Lists files. {F1} issue #12 and a < b and </ b> and <1>. {F2}",
    f"Lists files. {F1}\n- ~~ not a fence\n{F2}",
]


@pytest.mark.parametrize("text", MARKUP_TEXTS)
def test_markup_is_left_to_python(text: str) -> None:
    assert markup.may_hold(text)
    assert c_reduce(text) is None
    folded = describe.fold(text)
    assert (fast.split_sentences(folded) is None) == markup.may_hold(folded)  # "\t<x" folds away
    describe._reduce_cached.cache_clear()
    assert describe.reduce(text) == describe.explain(text).text


# a fence inside a line (no markup): left to Python all the same, whose lead is never a cut
# that opens with one and would open a block (the C reducer kept such a lead: other bytes)
FENCES_INSIDE_A_LINE = [
    f"Lists files. {F1} ``` not at a line start. {F2}",
    "a" + "`" * 500,
    "Use this for searching. ~~~ separates fields in a query string\n\nThe query string is "
    "parsed by the server according to the rules of the index and returns results quickly.",
]


def _left_to_python(text: str) -> bool:
    return markup.may_hold(text) or "```" in text or "~~~" in text


@pytest.mark.parametrize("text", FENCES_INSIDE_A_LINE)
def test_a_fence_inside_a_line_is_left_to_python(text: str) -> None:
    assert not markup.may_hold(text) and _left_to_python(text)
    assert c_reduce(text) is None
    describe._reduce_cached.cache_clear()
    assert describe.reduce(text) == describe.explain(text).text


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_of_markup_stay_in_c(text: str) -> None:
    assert not markup.may_hold(text)
    assert assert_same(text) is not None


markup_pieces = st.sampled_from(["```", "~~~", "``", "~~", "#", "##", "<a>", "</a>", "<", "</", "< /a>",
                                 "<1>", "\n", "\n  ", " ", "\t", "x", F1, "Must be set."])


@HYPOTHESIS
@given(st.lists(markup_pieces, max_size=40).map("".join))
def test_c_hands_back_exactly_what_markup_may_hold(text: str) -> None:
    got = assert_same(text)
    assert (got is None) == _left_to_python(text), text


def test_catalogs_with_markup_compress_alike_with_and_without_accelerators(tmp_path: Path) -> None:
    """catalog.compress gives the same bytes with the C paths (walker and reducer) and
    without them, in this process and in one started with CAVEMAN_PURE_PYTHON=1."""
    tools = [{"name": f"t{i}", "description": text, "inputSchema": {"type": "object", "properties": {
        "q": {"type": "string", "description": text}}}} for i, text in enumerate(MARKUP_TEXTS + NEAR_MISSES + FENCES_INSIDE_A_LINE)]
    raw = json.dumps({"tools": tools}, ensure_ascii=False).encode()
    path = tmp_path / "catalog.json"
    path.write_bytes(raw)
    out, result = catalog.compress(raw)
    assert result.status == "ok"
    saved = _accel.fastwalk, describe._FAST
    _accel.fastwalk = describe._FAST = None
    describe._reduce_cached.cache_clear()
    try:
        assert catalog.compress(raw)[0] == out
    finally:
        _accel.fastwalk, describe._FAST = saved
        describe._reduce_cached.cache_clear()
    script = ("import sys; from caveman_batch import catalog, _accel; assert not any(_accel.status().values()); "
              "sys.stdout.buffer.write(catalog.compress(open(sys.argv[1], 'rb').read())[0])")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAVEMAN_")}
    pure = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, timeout=120,
                          env={**env, "CAVEMAN_PURE_PYTHON": "1"}, check=True)
    assert pure.stdout == out
    assert "```\ncreate_team(organizationSlug='x')\n```" in json.loads(out)["tools"][0]["description"] or \
        "create_team" not in json.loads(out)["tools"][0]["description"]
