"""The census of a text (one pass answering every literal detection asks about) and the
shortcuts built on it give the answers of the plain searches they replace.

`_fastscan.present` in C is `tuple(needle in text for needle in needles)`; a cut that skips
its regex when none of its probes occurs decides as the plain line-by-line rule does
(test_payload_fast._plain_detect), on random text and on every real output of the corpus;
the log cut's level-word count is the plain regex loop's. The cuts' own shortcuts (frames
found in C, ls -R blocks counted, the tree renderings skipped, numbered lines made when
asked) give the views of the plain rules.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caveman_batch import _accel
from caveman_batch.payload import Hint, registry
from caveman_batch.payload.cuts import code, log, stacktrace, tree
from caveman_batch.payload.model import Limits
from caveman_batch.payload.view import _CENSUS, Doc, NumberedDoc, fits, plain
from caveman_batch.testing import payload_outputs as po
from test_payload_fast import _plain_detect

_DETECTED = ("diff", "tests", "lint", "build", "stacktrace", "gitlog", "install", "log")
_PIECES = ("\n", "\n\n", " ", "\t", "e", "error", "rror: ", "Ran ", "at ", "é", "✖ ", "😀", "\x00", "=", "commit ",
           "npm ", "INFO", "ERR", "xERROR", "_WARN", "WARN ")


def _cuts() -> list:  # type: ignore[type-arg]
    return [c for c in registry.cuts(Hint(), []) if c.name in _DETECTED]


def _needles() -> tuple[str, ...]:
    _cuts()  # the cuts register their needles when imported
    return tuple(_CENSUS)


@pytest.mark.skipif(_accel.fastscan is None, reason="the C scanner is not built")
@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=6)), max_size=40),
       st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=4)), max_size=12))
def test_present_in_c_is_in(pieces: list[str], needles: list[str]) -> None:
    text = "".join(pieces)
    asked = (*needles, *(text[i:i + k] for i in range(0, len(text), 7) for k in (1, 2, 5)), *_needles())
    assert _accel.fastscan.present(text, asked) == tuple(n in text for n in asked)


@pytest.mark.skipif(_accel.fastscan is None, reason="the C scanner is not built")
def test_present_edges() -> None:
    fast = _accel.fastscan
    assert fast.present("", ("", "a")) == (True, False)
    assert fast.present("ab", ("ab", "abc", "b", "ba")) == (True, False, True, False)
    assert fast.present("x\U0001F600y", ("\U0001F600", "x\U0001F600", "\U0001F600y", "é")) == (True, True, True, False)
    assert fast.present("aé", ("é", "aé")) == (True, True)  # latin-1 text, latin-1 needle
    assert fast.present("\u0101\u0181", ("\u0001\u0001", "\u0101\u0181")) == (False, True)  # same hash, other chars
    with pytest.raises(TypeError):
        fast.present("x", ["x"])
    with pytest.raises(TypeError):
        fast.present("x", (b"x",))


def _level_lines_plain(part: str, enough: int) -> int:
    hits, pos = 0, 0
    while hits < enough and (m := log._LEVEL.search(part, pos)) is not None:
        hits += 1
        pos = part.find("\n", m.end()) + 1
        if not pos:
            break
    return hits


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(("ERROR", "ERR", "WARNING", "WARN", "INFO", "xINFO", "INFOx", "_DEBUG", "TRACE ",
                                 "é", "ÉERROR", "1ERR", " ", "\n", "-", "NOTICE", "PANIC", "SEVERE")), max_size=40),
       st.integers(1, 12))
def test_level_lines_is_the_plain_search(words: list[str], enough: int) -> None:
    text = "".join(words)
    assert log._level_lines(text, enough) == _level_lines_plain(text, enough)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=10)), max_size=80))
def test_has_is_in_behind_a_newline(pieces: list[str]) -> None:
    text = "".join(pieces)
    doc = Doc(text)
    for needle in (*_needles(), "\n", "x", "\nx"):
        assert doc.has(needle) == (needle in "\n" + text)


def test_fast_detection_is_the_plain_one_on_real_outputs(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every detecting cut, on every real output of the corpus (colours stripped, as reduce
    reads it) and on a random mix of their lines, decides as the plain rule does."""
    made, _ = po.shared_corpus(lambda: tmp_path_factory.mktemp("payload-corpus"))
    if len(made) < 20:
        pytest.skip(f"only {len(made)} real outputs made here")
    texts = [plain(o.data.decode("utf-8", "replace")) for o in made]
    lines = [line for text in texts for line in text.split("\n")[:400]]
    rng = random.Random(17)
    texts += ["\n".join(rng.choices(lines, k=rng.randint(1, 300))) for _ in range(60)]
    for text in texts:
        for cut in _cuts():
            assert cut.detect(text, Hint()) == _plain_detect(cut, text), (cut.name, text[:200])
        lines = text.split("\n")
        assert code.CUT.detect(text, Hint()) == (sum(1 for line in lines if code._SIGNAL.match(line)) >= 3)


def test_pure_python_routes_as_the_census_does() -> None:
    """Without the C scanner (CAVEMAN_PURE_PYTHON=1) every cut decides the same."""
    texts = ["error: x\na.c:1:2: error: y\nCollecting pkg\ncommit 0123456789\nAuthor: a",
             "\n".join(["INFO a", "WARN b", "x"] * 40), "Ran 3 tests in 0.1s\n\nFAILED (failures=1)"]
    script = ("import sys, json; from caveman_batch.payload import Hint, registry; "
              "texts = json.load(sys.stdin); "
              "print(json.dumps([[c.detect(t, Hint()) for c in registry.cuts(Hint(), [])] for t in texts]))")
    env = {**os.environ, "CAVEMAN_PURE_PYTHON": "1"}
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(texts), capture_output=True, text=True,
                          env=env, check=True, timeout=120)
    here = [[c.detect(t, Hint()) for c in registry.cuts(Hint(), [])] for t in texts]
    assert json.loads(done.stdout) == here


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from([" ", "\t", "  ", 'File "', "at ", "File", "at", "\r", "a", "(",
                                          "\u00a0", "\u2003", "x"]), max_size=5).map("".join), max_size=40))
def test_frames_led_by_blanks_are_the_frame_pattern_s(lines: list[str]) -> None:
    """The way a trace's frames are found when they are most of its lines (in C, line by line)."""
    doc = Doc("\n".join(lines))
    want = [i for i, line in enumerate(doc.lines) if stacktrace._FRAME_NOT_GO.match(line)]
    assert stacktrace._led_frames(doc.lines) == want
    assert stacktrace._frames(doc) == want


def _tree_cut_plain(text: str, limits: Limits) -> str | None:
    """The tree cut trying every rendering in turn, then the directories alone."""
    groups = tree._groups(text, Doc(text).lines)
    total = sum(n for n, _ in groups.values())
    for per_dir in tree._PER_DIR:
        view = tree._render(groups, per_dir, total)
        if fits(view, limits):
            return view
    return tree._render_dirs(groups, total, limits)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b/c", "./d", "very/long/folder/name" * 3]),
                          st.lists(st.sampled_from(["x", "y.py", "z" * 40, "n" * 90]), max_size=12)), max_size=30),
       st.integers(400, 3_000), st.one_of(st.none(), st.integers(5, 60)), st.one_of(st.none(), st.integers(60, 300)))
def test_tree_cut_skips_renderings_only_when_none_fits(dirs: list[tuple[str, list[str]]], chars: int,
                                                       lines: int | None, width: int | None) -> None:
    text = "\n".join(f"{d}/{name}" for d, names in dirs for name in names)
    limits = Limits(chars, lines, width)
    assert tree.CUT.cut(text, limits) == _tree_cut_plain(text, limits)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["", "a", " b", "x\r", "é", "def f():", "\t"]), max_size=120), st.booleans())
def test_numbered_doc_is_the_numbered_text(lines: list[str], newline: bool) -> None:
    """The code cut's numbered lines, made when asked, are those of the whole numbered text."""
    doc = Doc("\n".join(lines) + ("\n" if newline else ""))
    width = len(str(len(doc)))
    want = Doc("\n".join(f"{i + 1:>{width}}| {line}" for i, line in enumerate(doc.lines)))
    got = NumberedDoc(doc)
    assert len(got) == len(want) and got.lines[:] == want.lines and got.text == want.text
    assert [got.lines[i] for i in range(-len(want), len(want))] == want.lines * 2
    assert got.lines[2:7] == want.lines[2:7] and got.lines[5:1] == []


def _ls_groups_plain(lines: list[str]) -> dict[str, list]:  # type: ignore[type-arg]
    """`ls -R` blocks, line by line (tree._ls_groups), as the cut keeps them."""
    return {d: [len(names), names[:tree._PER_DIR[0]]] for d, names in tree._ls_groups(lines).items()}


_LS_LINES = ["", ".:", "./a:", "./a/b:", "a:", "x/", "x/y", "total 12", "total x", "file", "dir/", ".", "..", " .",
             "-rw-r--r-- 1 me me 120 Jan  1 12:00 file.txt", "drwxr-xr-x 2 me me 4096 Jan  1 12:00 .",
             "drwxr-xr-x 2 me me 4096 Jan  1  2020 ..", "drwxr-xr-x 2 me me 4096 Jan  1  2020 sub/dir:",
             "lrwxrwxrwx 1 me me 4 Jan  1 12:00 link -> x", "-rw-r--r-- 1 me me 1,2 Jan  1 12:00 ",
             "d-not-long ..", "n" * 30]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_LS_LINES), max_size=60))
def test_ls_groups_counted_are_the_line_by_line_groups(lines: list[str]) -> None:
    assert tree._ls_counted(lines) == _ls_groups_plain(lines)


def test_ls_groups_on_real_listings(tmp_path: Path) -> None:
    for make in (po.ls_long_recursive, po.ls_recursive):
        try:
            out = make(tmp_path / make.__name__)
        except Exception as exc:  # a tool the machine lacks
            pytest.skip(f"{make.__name__}: {exc}")
        lines = Doc(out.data.decode("utf-8", "replace")).lines
        assert tree._ls_counted(lines) == _ls_groups_plain(lines)
