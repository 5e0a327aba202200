"""The whole-text shortcuts the cuts take for speed give the answers of the line-by-line rules
they stand for: the lines found by searching the text (blank ones, ones ending with a suffix,
a pattern's lines with their numbers counted in C, a pattern's lines read only where a needle
is), the `ls -R` lines that may list nothing, the census's scan of latin-1 text, four
positions at a time, and ANSI codes taken out in C."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caveman_batch import _accel
from caveman_batch.payload import view
from caveman_batch.payload.cuts import _lines, build, code, lint, stacktrace, tree
from caveman_batch.payload.cuts._lines import newlines_and_one
from caveman_batch.payload.model import Limits
from caveman_batch.payload.view import Doc, shared
from test_payload_census import _tree_cut_plain  # the tree cut, every rendering tried

_PIECES = ("", "\n", "\n\n", ":", ":\n", " .", " ..", " .\n", " ..\n", "a", "./a/b:", "total 4", "total ",
           "\r", "é", "😀", " ", "x:", ".:", "-rw-r--r-- 1 me me 120 Jan  1 12:00 .",
           "drwxr-xr-x 2 me me 4096 Jan  1  2020 ..")
_texts = st.lists(st.sampled_from(_PIECES), max_size=50).map("".join)


@settings(max_examples=500, deadline=None)
@given(_texts, st.lists(st.sampled_from((":", " .", " ..", "a", "é:", "\r", "")), max_size=3).map(tuple))
def test_ending_with_is_endswith(text: str, suffixes: tuple[str, ...]) -> None:
    doc = Doc(text)
    assert doc.ending_with(suffixes) == [i for i, line in enumerate(doc.lines) if line.endswith(suffixes)]


@settings(max_examples=500, deadline=None)
@given(_texts)
def test_blank_and_line_index_are_the_lines(text: str) -> None:
    doc = Doc(text)
    assert doc.blank() == [i for i, line in enumerate(doc.lines) if not line]
    offsets = sorted({min(k * 7, len(text)) for k in range(len(text) // 7 + 1)})
    assert doc.line_index(offsets) == [text.count("\n", 0, at) for at in offsets]


@settings(max_examples=300, deadline=None)
@given(_texts, st.sampled_from((r"^total ", r"^$", r"^[^\n]*:$", r"^\.", r"^[ \t]*+\S")))
def test_grep_counts_lines_as_the_lazy_search(text: str, pattern: str) -> None:
    compiled = re.compile(pattern, re.MULTILINE)
    assert Doc(text).grep(compiled) == list(Doc(text).igrep(compiled))
    assert Doc(text).grep(compiled) == [i for i, line in enumerate(Doc(text).lines) if compiled.match(line)]


@settings(max_examples=500, deadline=None)
@given(_texts)
def test_ls_lines_found_in_the_text_are_those_looked_at(text: str) -> None:
    doc = Doc(text)
    assert tree._maybe_in(doc) == tree._maybe(doc.lines)
    assert tree._ls_counted(doc.lines, tree._marks_in(doc)) == tree._ls_counted(doc.lines)
    assert tree._marks_in(doc) == tree._marks(doc.lines, tree._maybe(doc.lines))


@settings(max_examples=500, deadline=None)
@given(_texts, st.sampled_from((None, 0, 40, 10_000)))
def test_ls_blocks_counted_from_the_text_are_the_lines_looked_at(text: str, room: int | None) -> None:
    """Blank lines counted a block at a time as "\n\n" in the text (no run of them: the
    census), the other marks found and looked at: the groups of the line-by-line rule."""
    with shared(text) as doc:
        assert tree._ls_counted_in(doc, room) == tree._ls_counted(doc.lines, None, room)


@settings(max_examples=300, deadline=None)
@given(_texts, st.booleans())
def test_newlines_counted_from_the_lines_are_the_text_s(text: str, split: bool) -> None:
    doc = Doc(text)
    if split:
        _ = doc.lines  # as `reduce` leaves it
    assert newlines_and_one(doc) == text.count("\n") + 1


@pytest.mark.skipif(_accel.fastscan is None, reason="the C scanner is not built")
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\né\xff", max_size=14), st.lists(st.integers(0, 13), max_size=3),
       st.text(alphabet="ab\né\xff\u0101", min_size=1, max_size=4))
def test_present_in_latin1_text_at_every_position(text: str, starts: list[int], other: str) -> None:
    """The latin-1 scan tests positions four at a time: a needle at any position, the last
    ones too, is found, and one that is not there is not."""
    needles = (*(text[i:i + k] for i in starts for k in (2, 3, 4)), other, other + "b", "\u0101a")
    assert _accel.fastscan.present(text, needles) == tuple(n in text for n in needles)


_BUILD_LINES = ("a.c:1:2: error: x", "a.c:1:2: error:", "a.c:1:2: fatal error: y", "error[E0308]: z", "error: ",
                "a.ts(1,2): error TS2322: t", "✘ [ERROR] e", "ERROR in ./a",
                "x.c:(.text+0x1f): undefined reference to f",
                "a.c:3:4: warning: w", "warning[W]: v", "▲ [WARNING] u", "WARNING in b", "a.c:5:6: note: n",
                "an error here", "warning", "no note: here", "  error: indented", "3 errors", "", "é", "ERROR")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_BUILD_LINES), max_size=40), st.integers(0, 200), st.booleans())
def test_lines_read_where_a_needle_is_are_the_pattern_s(lines: list[str], misses: int, newline: bool) -> None:
    """`Doc.iled` finds the lines `igrep` does, also past the misses that hand it to the plain
    search (`misses` lines that hold a needle and do not match, before the rest)."""
    text = "\n".join(["an error here"] * misses + lines) + ("\n" if newline else "")
    for pattern, needles in ((build._ERROR, build._ERROR_LINES), (build._WARNING, build._WARNING_LINES)):
        assert list(Doc(text).iled(pattern, needles)) == list(Doc(text).igrep(pattern))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(("a.c", ":1", ":2:", " ", "error", "ERROR", "warning", "WARNING", "note", ":", "[", "]",
                                 "(", ")", ".text+0x1f", "undefined reference to ", "TS12", "✘ ", "▲ ", " in ",
                                 "E0", ":1:2: note:")),
                max_size=12).map("".join))
def test_every_build_line_holds_a_needle(line: str) -> None:
    """What `Doc.iled` leans on: a line the build cut's patterns match holds one of their needles."""
    for pattern, needles in ((build._ERROR, build._ERROR_LINES), (build._WARNING, build._WARNING_LINES)):
        assert not pattern.match(line) or any(n in line for n in needles)


_TRACE_LINES = ("Traceback (most recent call last):", '  File "a.py", line 1, in f', "ValueError: bad", "KeyError",
                "thread 'main' panicked at src/main.rs:2:5:", "boom", "panic: x", "Caused by: y", "a.b.MyException",
                "Exception in thread main", "fatal error: z", "TypeError: t", "During handling of the above",
                "The above exception was", "    at f (a.js:1:2)", "an Error inside", "ok", "", "SystemExit", "Warning")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TRACE_LINES), max_size=60), st.integers(0, 120))
def test_trace_messages_read_lazily_are_the_pattern_s(lines: list[str], misses: int) -> None:
    """The messages, read where a needle is and lazily, are the lines the message pattern matches
    and each line after a rust `panicked at` (what the cut shows first)."""
    doc = Doc("\n".join(["an Error inside"] * misses + lines))
    found = [i for i, line in enumerate(doc.lines) if stacktrace._MESSAGE.match(line)]
    after = [i + 1 for i in found if i + 1 < len(doc.lines) and "panicked at " in doc.lines[i]]
    assert list(stacktrace._messages(doc)) == sorted({*found, *after})
    assert all(any(n in doc.lines[i] for n in stacktrace._MESSAGE_NEEDLES) for i in found)


_ANSI_PIECES = ("\x1b", "\x1b[", "\x1b]", "\x1b\\", "[", "]", "0", "1;31", "?", " ", "/", "m", "K", "@", "~",
                "\x7f", "\x07", "\\", "Z", "_", "^", "a", "é", "😀", "\u0101", "\n", "title", ";", "8;;http://x")


@pytest.mark.skipif(_accel.fastscan is None, reason="the C scanner is not built")
@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(_ANSI_PIECES), max_size=40).map("".join))
def test_ansi_codes_taken_out_in_c_are_the_pattern_s(text: str) -> None:
    """`plain` in C is `_ANSI.sub` (the definition), on texts dense with escapes and their parts,
    of every storage kind; the result is the narrowest str, so it equals the regex's."""
    got = _accel.fastscan.plain(text)
    assert got == view._ANSI.sub("", text)
    assert view.plain(text) == view._ANSI.sub("", text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(("  ", " ", "code", "$x", "'k'", '"k"', "[a]", ":", ": 'E1',", ",", "\r", "x", "é",
                                 "{")),
                max_size=10).map("".join))
def test_error_object_fields_are_found_up_to_their_colon(line: str) -> None:
    """The node error object's field lines, matched up to their first colon, are those the field
    pattern matches (its rest after the colon takes any rest of a line)."""
    assert bool(stacktrace._OBJECT_FIELD_LINE.match(line)) == bool(stacktrace._OBJECT_FIELD.match(line))


@settings(max_examples=400, deadline=None)
@given(_texts, st.lists(st.sampled_from(("a", ":", "total", " .", "é", "\na", "\n.", "x", "😀")), min_size=1,
                        max_size=3).map(tuple))
def test_grep_by_needles_is_the_lines_holding_one(text: str, needles: tuple[str, ...]) -> None:
    """`Doc.grep` with needles: the lines holding one (behind the newline that starts them) that
    the pattern is found in, whether the census or a search says which needles are there."""
    pattern = re.compile(r"[a.:]", re.MULTILINE)
    doc = Doc(text)
    want = [i for i, line in enumerate(doc.lines) if any(n in "\n" + line for n in needles) and pattern.search(line)]
    assert doc.grep(pattern, needles) == want


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["./a", "./b/c", "./d" * 20, "."]),
                          st.lists(st.sampled_from(["x", "y.py", "z" * 30, "total 4", ""]), max_size=8)), max_size=40),
       st.booleans(), st.integers(-40, 400))
def test_tree_views_read_names_only_when_a_line_per_directory_may_fit(blocks: list[tuple[str, list[str]]], ls: bool,
                                                                       spare: int) -> None:
    """No name is read when not even one line per directory fits: the views are those made
    with every name read (ls -R blocks and find paths), at budgets around the size of the
    directories alone (`spare` chars more or fewer)."""
    if ls:
        text = "\n\n".join(f"{d}:\n" + "\n".join(names) for d, names in blocks)
    else:
        text = "\n".join(f"{d}/{name}" for d, names in blocks for name in names if name)
    groups = tree._groups(text, Doc(text).lines)
    least = tree._render(groups, 0, sum(n for n, _ in groups.values()))
    limits = Limits(max(40, len(least) + spare), None, None)
    with shared(text):
        assert tree.CUT.cut(text, limits) == _tree_cut_plain(text, limits)


_CODE_LINES = ("#include <stdio.h>", "import os", "from a.b import c", "use std::io;", 'require("x")', "using X;",
               "package main", "static int f(int a)", "int main(void)", "void *g(char *p);", "return f(1)",
               "if (x) {", "def f():", "    def m(self):", "class A:", "\tfn g() {", "pub fn h() {",
               "export async function k() {", "struct S {", "const f = async (", "type T = int", "  type ",
               "", "    x = 1", "}", "# def not", "import", "é", "typedef struct x(y)")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_CODE_LINES), max_size=80), st.booleans())
def test_code_outline_made_lazily_is_the_sorted_outline(lines: list[str], c_family: bool) -> None:
    """The runs by priority, a bisection level made when reached, are the whole outline sorted."""
    doc = Doc("\n".join(lines))
    assert list(code._outline_runs(doc, c_family)) == sorted(code._outline(doc, c_family))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300))
def test_code_bisection_levels_are_the_spread_s(n: int) -> None:
    spread = code._spread(n)
    assert code._depth(n) == max(spread, default=0)
    for level in range(code._depth(n) + 2):
        assert code._level(n, level) == [k for k, v in enumerate(spread) if v == level]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_CODE_LINES + ("(", "  f(", "x(y)", "A_b(c", "returnx(", "ifa(b")), max_size=30))
def test_c_function_letter_first_is_the_pattern_without_it(lines: list[str]) -> None:
    """The C function pattern's letter lookahead only fails an indented line sooner."""
    plain = re.compile(code._C_FUNCTION.pattern.replace("(?=[A-Za-z_])", "", 1), re.MULTILINE)
    doc = Doc("\n".join(lines))
    assert doc.grep(code._C_FUNCTION) == [i for i, line in enumerate(doc.lines) if plain.match(line)]


_FRAME_PIECES = ("\n", " ", "\t", "at ", "at", 'File "', "File", "x", "é", "😀", "\r", "  at f (a.js:1:2)")


@pytest.mark.skipif(_accel.fastscan is None, reason="the C scanner is not built")
@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_FRAME_PIECES), max_size=40).map("".join))
def test_frame_lines_found_in_c_are_the_lines_looked_at(text: str) -> None:
    """The trace's frame lines found in one pass in C are `_led_frames`'s, and the pattern's."""
    doc = Doc(text)
    found = _accel.fastscan.led_lines(text, stacktrace._FRAME_WORDS)
    assert found == stacktrace._led_frames(doc.lines)
    assert found == [i for i, line in enumerate(doc.lines) if stacktrace._FRAME_NOT_GO.match(line)]


_OBJECT_LINES = ("Error: boom", "    at f (/a.js:1:2)", "    at g (/a.js:3:4) {", "  code: 'E1',", "  errno: -1,",
                 "  'k': 1", "  [x]: 2", "}", "", "x", "   three: 3", "  nocolon", "panic: p", "  at h (b.js:1:1)")


def _plain_stack_detect(text: str) -> bool:
    """The trace detection's definition: every frame and every error object field counted."""
    doc = Doc(text)
    if not (doc.holds(stacktrace.CUT.probes) and view.line_hits(stacktrace.CUT.signal, text, 1)):
        return False
    lines = view.count_lines(text)
    frames = len(stacktrace._FRAME.findall(text)) if doc.holds(stacktrace._GO_NEEDLES) else len(
        stacktrace._FRAME_NOT_GO.findall(text))
    if frames >= stacktrace._fifth(lines):
        return True
    if not doc.has(" {\n") or not view.line_hits(stacktrace._OBJECT_AFTER_FRAMES, text, 1):
        return False
    fields = sum(1 for line in doc.lines if stacktrace._OBJECT_FIELD.match(line))
    return frames >= stacktrace._fifth(lines - fields)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_OBJECT_LINES), max_size=60), st.booleans())
def test_trace_detected_counting_only_what_it_needs_is_the_whole_count_s(lines: list[str], end: bool) -> None:
    """Frames counted up to a fifth of the lines, error object fields up to what the frames
    still need: the answer of counting them all."""
    text = "\n".join(lines) + ("\n" if end else "")
    with shared(text):
        assert stacktrace.CUT.detect(text, None) == _plain_stack_detect(text)  # type: ignore[arg-type]


_LINT_LINES = ("Found 3 errors.", "Found 1 error", "3 errors", "12 error", "x 3 errors", " error", "✖ 2 problems",
               "All checks passed!", "error: could not compile `a`", "warning: `a` generated 2 warnings",
               "warning: x", "F401 [*] `os` imported but unused", " --> a.py:1:8", "  --> b.py:2:1", " -->",
               "E711 x", "  |", "", "é", "error", "Found", *(f"Found 1{d} errors" for d in "0123456789"))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_LINT_LINES), max_size=60))
def test_lint_lines_read_where_a_needle_is_are_the_pattern_s(lines: list[str]) -> None:
    """The summary lines found a needle at a time, merged, are the pattern's; ruff's full-form
    rules counted alone are those of the pattern with the location."""
    doc = Doc("\n".join(lines))
    want = [i for i, line in enumerate(doc.lines) if lint._SUMMARY.match(line)]
    assert list(_lines.led_lines(doc, lint._SUMMARY, lint._SUMMARY_NEEDLES)) == want
    assert lint._RUFF_FULL_RULES.findall(doc.nl_text) == [r for r, _ in lint._RUFF_FULL_ALL.findall(doc.nl_text)]
