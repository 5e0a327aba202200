"""The fast paths of the payload cuts give the answers of the plain rules they replace.

Each fast path (C-level passes over lines or columns, lazily started searches,
substring probes before regexes) is checked against the one-item-at-a-time rule it
stands for, on generated inputs made to hit the edge cases of that rule.
"""

from __future__ import annotations

import heapq
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from caveman_batch.payload import Hint, registry
from caveman_batch.payload.cuts import json_cut, log, stacktrace
from caveman_batch.payload.cuts._lines import by_priority
from caveman_batch.payload.view import Doc

# -- json: error items and outliers, a column at a time ---------------------------------

_KEYS = ["id", "status", "Status", "error", "ERR", "errors", "level", "state", "fault", "name", "x"]
_SCALARS = st.sampled_from([None, False, True, 0, 1, 0.0, "", "ok", "error", "Failed", "FATAL",
                            "critical", "warn", [], {}, [1], "x"])
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)), max_leaves=12)
_ROWS = st.lists(st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=5), min_size=1, max_size=8)


@st.composite
def _arrays(draw: st.DrawFn) -> list[Any]:
    """Arrays of a few row layouts repeated (keys in either order), with stray non-dicts."""
    rows: list[Any] = draw(_ROWS) + draw(st.lists(_VALUES, max_size=2))
    picks = draw(st.lists(st.tuples(st.integers(0, len(rows) - 1), st.booleans()), min_size=1, max_size=80))
    items = [dict(reversed(rows[k].items())) if flip and isinstance(rows[k], dict) else rows[k]
             for k, flip in picks]
    return json.loads(json.dumps(items))  # what json.loads hands the cut


def _plain_notable(arr: list[Any]) -> tuple[list[int], list[int]]:
    first = json_cut._shape(arr[0])
    errors = [i for i, item in enumerate(arr) if isinstance(item, dict) and json_cut._is_error(item)]
    outliers = [i for i, item in enumerate(arr) if json_cut._shape(item) != first][:64]
    return errors, outliers


@settings(max_examples=300, deadline=None)
@given(_arrays())
def test_json_notable_items_are_the_item_by_item_rule(arr: list[Any]) -> None:
    assert json_cut._notable_items(arr) == _plain_notable(arr)


def test_json_notable_items_with_many_layouts_and_deep_errors() -> None:
    arr: list[Any] = [{"id": i, "v": i} for i in range(300)]  # one layout: checked by columns
    arr += [{f"k{i % 40}": i, "id": i} for i in range(300, 400)]  # more layouts than grouped
    arr[17]["v"] = {"a": {"b": {"error": "deep"}}}  # an error at depth 3 does not count
    arr[18]["v"] = {"a": {"error": "deep"}}  # at depth 2 it does
    arr[390] = {"k10": 1, "id": 390, "status": "ERROR"}
    arr += [1, "x", None, {"state": "failure"}]
    assert json_cut._notable_items(arr) == _plain_notable(arr)
    assert json_cut._notable_items(arr)[0] == [18, 390, 403]


def _json_result(text: str, loads: Any) -> tuple[str, str]:
    try:
        return "ok", repr(loads(text))  # repr tells 1 from 1.0 from True, -0.0 from 0.0, key order
    except RecursionError:
        return "error", "RecursionError"
    except ValueError:
        return "error", "ValueError"


_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70), st.floats(),
              st.text(), st.text(alphabet=st.characters(max_codepoint=0xDFFF))),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=15)
_JSON_NOISE = st.sampled_from(['"', "[", "]", "{", "}", ",", ":", "1e400", "NaN", "-0", "01", "\\ud800",
                               '"\\ud83d\\ude00"', "\t", "\u00a0", "\ufeff", "9" * 19, "-9223372036854775809",
                               '{"a":1,"a":2}', "1.5E+3", "\ud800", " "])


@st.composite
def _json_texts(draw: st.DrawFn) -> str:
    text = json.dumps(draw(_JSON_VALUES), ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1])))
    for _ in range(draw(st.integers(0, 3))):  # and some that json.loads may refuse
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(_JSON_NOISE) + text[at:]
    return text


@settings(max_examples=500, deadline=None)
@given(_json_texts())
def test_json_loads_fast_path_reads_what_json_loads_reads(text: str) -> None:
    assert _json_result(text, json_cut._loads) == _json_result(text, json_cut._exact)


def test_json_loads_fast_path_edges() -> None:
    for text in ["[18446744073709551616]", "[-9223372036854775809]", "[1e400]", "[NaN]", '["\\ud800"]',
                 '{"a":1,"b":2,"a":3}', "[-0]", "[-0.0]", "[" * 3000 + "]" * 3000, '["\ud800"]',
                 '["2024-01-01", -0]', '["v1.2", 3]']:
        assert _json_result(text, json_cut._loads) == _json_result(text, json_cut._exact), text
        # the exact parse is json.loads' but for the numbers it keeps as written (-0 a float)
        if text not in ("[-0]", '["2024-01-01", -0]'):
            assert _json_result(text, json_cut._exact) == _json_result(text, json.loads), text


# -- stacktrace: frames found by str methods -------------------------------------------

_FRAME_BITS = st.sampled_from([" ", "\t", "  ", "File \"", "at ", "goroutine 1 [", "goroutine x [",
                               "main.go:12", "x.go:", ".go:1", "File", "at", "\r", "a", "(", ":", "\u00a0",
                               "\u2003", "site-packages", "/usr/lib/", "at java.", "GOROOT"])
_FRAME_LINES = st.lists(_FRAME_BITS, max_size=6).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(_FRAME_LINES, max_size=40))
def test_stacktrace_frames_are_the_lines_the_frame_pattern_matches(lines: list[str]) -> None:
    doc = Doc("\n".join(lines))
    assert stacktrace._frames(doc) == [i for i, line in enumerate(doc.lines) if stacktrace._FRAME.match(line)]
    frames = stacktrace._frames(doc)
    want = [i for i in frames if any(n in doc.lines[i] for n in stacktrace._DEP)]
    assert stacktrace._dep_frames(doc, frames) == want


# -- the lazy merge of single-priority streams ------------------------------------------

@given(st.lists(st.tuples(st.integers(0, 4), st.lists(st.tuples(st.integers(0, 30), st.integers(1, 3)),
                                                      max_size=8)), max_size=6))
def test_by_priority_is_heapq_merge(spec: list[tuple[int, list[tuple[int, int]]]]) -> None:
    streams = [(prio, sorted((prio, a, a + w) for a, w in runs)) for prio, runs in spec]
    want = list(heapq.merge(*(s for _, s in streams)))
    assert list(by_priority((p, iter(s)) for p, s in streams)) == want
    assert list(by_priority((p, (lambda s=s: iter(s))) for p, s in streams)) == want


def test_by_priority_starts_a_stream_only_when_its_priority_is_reached() -> None:
    started: list[int] = []

    def stream(prio: int) -> Any:
        def make() -> Any:
            started.append(prio)
            return iter([(prio, 0, 1), (prio, 5, 6)])
        return make

    runs = by_priority([(2, stream(2)), (0, stream(0)), (1, stream(1))])
    assert next(runs) == (0, 0, 1) and next(runs) == (0, 5, 6)
    assert started == [0]
    assert next(runs) == (1, 0, 1) and started == [0, 1]


def test_frame_pattern_is_what_the_fast_path_assumes() -> None:
    """The str-method path hard-codes these alternatives: a changed pattern must fail here."""
    assert stacktrace._FRAME.pattern == r'^(?:[ \t]+File \"|[ \t]+at |goroutine \d+ \[|[ \t]+[^ \t\n]+\.go:\d+)'


# -- routing: signals searched line by line, substring probes first ---------------------

_ROUTE_TOKENS = [
    "diff --git a/x b/x", "@@ -1,2 +1,2 @@", "=== 1 failed, 2 passed in 0.1s ===", "Ran 3 tests in 0.1s",
    "  1:2  error  msg  rule", "x.py:1:1: F401 z", "clippy::needless_return", "  1:2  error  clippy::x",
    "✖ 5 problems", "src/a.ts(3,5): error TS2322: x", "a.c:1:2: error: y", "error[E0308]: m", "ERROR in x",
    "Traceback (most recent call last):", '  File "x.py", line 1, in f', "    at f (a.js:1:2)",
    "goroutine 1 [running]:", "\tmain.go:12 +0x1d", "commit 0123456789abcdef0123", "Collecting pkg",
    "npm WARN x", "INFO ok", "WARN x", "Exception", "ERRORS", "plain", "", " ", "\r", "a:b", "😀",
    "INFO WARN x ERROR", "xINFO", "DEBUG\tTRACE",
    # issue 17's signals: git show, npm 11, pip, warnings-only builds, ruff's full format,
    # node's error objects, rust panics, the linker
    "Author: A <a@b>", "npm error code E404", "npm warn old", "Using pip 24.0", "  error: subprocess-exited-with-error",
    "a.c:1:2: warning: w", "warning: unused", "F401 [*] `os` imported", " --> x.py:1:2", "invalid-syntax: x",
    "    at f (a.js:1:2) {", "  code: 'ECONNREFUSED',", "thread 'main' (12) panicked at src/main.rs:1:2:",
    "collect2: error: ld returned 1", "m.c:(.text+0x10): undefined reference to `f'",
]


def _plain_detect(cut: Any, text: str) -> bool:
    """Each cut's detection written the plain way: a Python loop over the whole text's lines."""
    from caveman_batch.payload.cuts import build, diff, gitlog, install, lint
    from caveman_batch.payload.view import count_lines

    lines = text.split("\n")

    def where(pattern: Any) -> list[int]:
        return [i for i, line in enumerate(lines) if pattern.match(line)]

    if cut.name == "stacktrace":
        if not where(cut.signal):
            return False
        frames, n = len(where(stacktrace._FRAME)), count_lines(text)
        if frames >= max(1, -(-n // 5)):
            return True
        if " {\n" in text and where(stacktrace._OBJECT_AFTER_FRAMES):
            n -= len(where(stacktrace._OBJECT_FIELD))
            return frames >= max(1, -(-n // 5))
        return False
    if cut.name == "log":
        hits = sum(1 for line in lines if any(w in line for w in log._WORDS) and log._LEVEL.search(line))
        return hits * 3 >= len(lines)
    if cut.name == "diff":
        found, commits = where(cut.signal), where(diff._COMMIT)
        return bool(found) and (not commits or commits[0] > found[0])
    if cut.name == "gitlog":
        return len(where(cut.signal)) >= 2 or bool(where(cut.signal)) and bool(where(gitlog._AUTHOR))
    if cut.name == "build":
        return (bool(where(cut.signal)) or len(where(build._WARNING)) >= 2) and not where(install.INSTALLER)
    if cut.name == "lint" and "clippy::" not in text:
        return (len(where(lint._SIGNAL_AT_LINES_SHORT)) >= 2
                or len(where(lint._SIGNAL_AT_LINES)) >= 2 and len(where(lint._ARROW)) >= 2)
    return len(cut.signal.findall(text)) >= cut.min_hits


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_ROUTE_TOKENS), st.text(max_size=12)), max_size=60),
       st.sampled_from(["diff", "tests", "lint", "build", "stacktrace", "gitlog", "install", "log"]))
def test_fast_detect_is_the_plain_signal_count(lines: list[str], name: str) -> None:
    cut = next(c for c in registry.cuts(Hint(), []) if c.name == name)
    text = "\n".join(lines)
    assert cut.detect(text, Hint()) == _plain_detect(cut, text)
    big = text + "\n" + "x" * 17_000 + "\n" + text  # the whole text counts, not a head and a tail
    assert cut.detect(big, Hint()) == _plain_detect(cut, big)


def test_anchored_tells_line_patterns_from_the_rest() -> None:
    from caveman_batch.payload.view import _anchored

    assert _anchored(r"^(?:a|b)") and _anchored(r"^commit [0-9a-f]{7}\b")
    assert _anchored(r"^[|(]x\(y") and _anchored(r"^[]|]x") and _anchored(r"^(?:a\|b)") and _anchored(r"^[^]|]")
    assert not _anchored(r"^a|b") and not _anchored(r"a|^b") and not _anchored(r"^(?:a)|b")
    assert not _anchored(r"^[(]a|b") and not _anchored(r"\b(?:x)")
    assert not _anchored(r"^a|^b")  # anchored, but only a whole "^(...)" is recognized


# -- diff: the file list's counts, made in C over each file's part of the text -----------

@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=40),
       st.sampled_from([0, 3, 12, 30]), st.integers(60, 3_000), st.one_of(st.none(), st.integers(1, 60)),
       st.sampled_from([None, 20, 45, 300]))
def test_diff_file_list_is_the_line_by_line_count_within_its_share(
        files: list[tuple[int, int]], name_len: int, chars: int, lines: int | None,
        line_chars: int | None) -> None:
    from caveman_batch.payload.cuts import diff
    from caveman_batch.payload.model import Limits

    parts = []
    for k, (added, removed) in enumerate(files):
        # every other removed line reads `--- ...` (an SQL comment `-- ...` removed), every
        # other added one `+++ ...`: changes, not file headers
        body = ("".join(f"-old {j}\n" if j % 2 else f"--- old {j}\n" for j in range(removed))
                + "".join(f"+new {j}\n" if j % 2 else f"+++ new {j}\n" for j in range(added)))
        parts.append(f"diff --git a/{'d' * name_len}{k} b/{'d' * name_len}{k}\nindex 1..2 100644\n--- a/x{k}\n"
                     f"+++ b/x{k}\n@@ -1,{removed} +1,{added} @@\n{body}")
    text = "".join(parts)
    limits = Limits(chars, lines, line_chars)
    lead = diff._files(Doc(text), limits)
    head, more = f"[diff cut: {len(files):,} files changed]", f"  … {len(files):,} more files"
    if not lead:  # only when not even the count line and the "more" line fit half the budget
        assert len(head) + len(more) + 2 > chars // 2 or (lines is not None and lines < 5)
        return
    assert lead[0] == head
    listed = [line for line in lead[1:] if not line.startswith("  … ")]
    for k, line in enumerate(listed):  # the plain rule: count the hunk's lines one by one
        own = parts[k].split("\n")[5:]  # (after the headers and the @@ line)
        added = sum(1 for x in own if x.startswith("+"))
        removed = sum(1 for x in own if x.startswith("-"))
        assert line == f"  {'d' * name_len}{k} +{added:,} -{removed:,}"
    if len(listed) < len(files):
        assert lead[-1] == f"  … {len(files) - len(listed):,} more files"
    assert sum(min(len(x), line_chars or chars) + 1 for x in lead) <= chars // 2
    assert lines is None or len(lead) <= (lines - 1) // 2


# -- one split per reduce ------------------------------------------------------------------

@given(st.text(alphabet="ab\n\r", max_size=12))
def test_doc_line_count_is_count_lines(text: str) -> None:
    from caveman_batch.payload.view import count_lines

    assert Doc(text).line_count() == count_lines(text)  # from the split lines
    doc = Doc(text)
    doc.line_count(split=False)
    assert "lines" not in doc.__dict__  # counted without splitting


def test_reduce_splits_the_text_once_for_every_cut(monkeypatch: Any) -> None:
    from caveman_batch.payload import Budget, reduce, view

    made: list[str] = []
    original = view.Doc.__init__

    def init(self: Any, text: str) -> None:
        made.append(text)
        original(self, text)

    monkeypatch.setattr(view.Doc, "__init__", init)
    text = "".join(f"src/a{i}.c:{i}:1: warning: unused x [-Wunused]\n" for i in range(3_000))  # not lint:
    text += "src/b.c:9:2: error: 'count' undeclared\n"  # build takes it after lint passes on it
    result = reduce(text, None, Budget(2_000))
    assert result.strategy == "build"
    assert sum(1 for t in made if t == text) == 1
    assert view._SHARED.get() is None  # nothing kept after the reduce


@given(st.text(alphabet="ab\n", max_size=30), st.lists(st.integers(0, 40), max_size=12))
def test_doc_offset_walks_or_builds_the_table_to_the_same_answers(text: str, asks: list[int]) -> None:
    doc, starts = Doc(text), [0]
    for line in doc.lines:
        starts.append(starts[-1] + len(line) + 1)
    for line in sorted(asks[: len(asks) // 2]) + asks:  # in order first, then any order
        assert doc.offset(line) == starts[min(line, len(doc.lines))]


# -- lint: rules counted per distinct message, forms with no hit not searched again --------

_LINT_TOKENS = ["src/a.py:1:2: F401 [*] `os` imported but unused", "b.py:3:4: E501 line too long (90 > 88)",
                "/home/x/Widget.jsx", "  1:7  error  'x' is defined but never used  no-unused-vars",
                "  2:1  warning  Unexpected console statement  no-console", "  3:3  error  Parsing error: x",
                "  4:4  warning  trailing   ", "warning: unused variable `x`", " --> src/lib.rs:3:4",
                "  = help: https://rust-lang.github.io/rust-clippy/master/index.html#needless_return",
                "  = note: `#[warn(clippy::needless_return)]` on by default", "✖ 5 problems", "Found 3 errors.", ""]


def _plain_rules(doc: Doc) -> tuple[Any, Any]:
    from collections import Counter, defaultdict

    from caveman_batch.payload.cuts import lint

    text = doc.nl_text
    counts = Counter(lint._RUFF_RULES.findall(text))
    counts.update(map(lint._eslint_rule, (rest for _, rest in lint._ESLINT_ALL.findall(text))))
    if "clippy" in text:
        counts.update(a or f"clippy::{b}" for a, b in lint._CLIPPY_ALL.findall(text))
    top = {rule for rule, _ in counts.most_common(lint._TOP)}
    where: dict[str, list[str]] = defaultdict(list)
    for rule, loc, offset in lint._problems(doc):
        if rule in top and len(where[rule]) < 2:
            where[rule].append(lint._where(doc, loc, offset))
            if all(len(where[r]) >= 2 or counts[r] < 2 for r in top) and len(where) == len(top):
                break
    return list(counts.most_common()), dict(where)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_LINT_TOKENS), max_size=60))
def test_lint_rules_are_the_plain_counts(lines: list[str]) -> None:
    from caveman_batch.payload.cuts import lint

    doc = Doc("\n".join(lines))
    counts, where = lint._rules(doc)
    assert (list(counts.most_common()), dict(where)) == _plain_rules(doc)


# -- tree: find output grouped a run of one parent at a time ------------------------------

def _plain_groups(lines: list[str]) -> dict[str, list[Any]]:
    """The old grouping of find output (groupby), the reference for _find_groups; ls -R
    blocks go through tree's own _ls_groups (unchanged: nothing to compare it with)."""
    from itertools import groupby
    from operator import itemgetter, methodcaller

    from caveman_batch.payload.cuts import tree

    groups: dict[str, list[str]] = {}
    if not any(line.endswith(":") for line in lines):  # find output
        paths = list(filter(None, lines))
        if len(paths) > 1 and paths[1].startswith(paths[0].rstrip("/") + "/"):
            paths = paths[1:]  # find's starting point, its entries after it: no entry
        split = map(methodcaller("rpartition", "/"), paths)
        for parent, items in groupby(split, key=itemgetter(0)):
            groups.setdefault(parent or ".", []).extend(map(itemgetter(2), items))
    else:  # ls -R blocks
        groups = tree._ls_groups(lines)
    return {d: [len(names), names[:8]] for d, names in groups.items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["./a", "./a/x", "./a/y", "./b/x", "a/b/c/", "/r/s", "x", "x/y", "", ".", "./a:",
                                 "a/b:", ".:", "/", "//", "./b/./y"]), max_size=60),
       st.booleans())
def test_tree_groups_are_the_plain_grouping(lines: list[str], final_newline: bool) -> None:
    """(a first line with its own entries after it is find's starting point: no entry)"""
    from caveman_batch.payload.cuts import tree

    text = "\n".join(lines) + ("\n" if final_newline else "")
    assert tree._groups(text, Doc(text).lines) == _plain_groups(text.split("\n"))
