"""The fast paths of the payload cuts give the answers of the plain rules they replace.

Each fast path (C-level passes over lines or columns, lazily started searches,
substring probes before regexes) is checked against the one-item-at-a-time rule it
stands for, on generated inputs made to hit the edge cases of that rule.
"""

from __future__ import annotations

import heapq
import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from caveman_batch.payload.cuts import json_cut, stacktrace
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
    assert re.compile(stacktrace._GO_FRAME.pattern)
