"""Stack traces (Python, JS, Java, Go): the message and the program's own frames;
runs of dependency frames (site-packages, node_modules, /usr/lib, java.*) collapse
into one line that counts them."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, compress, repeat
from operator import contains
from typing import Final

from ... import _accel
from ..model import Hint, Limits
from ..view import (
    Doc,
    Run,
    census,
    count_between,
    count_lines,
    finish,
    hit_count,
    led_lines,
    line_hits,
    pick,
)
from ._lines import LineCut, rx

_GO_FRAMES: Final = r"goroutine \d+ \[|[ \t]+[^ \t\n]+\.go:\d+"  # also searched alone (_frames)
_FRAME = rx(r"^(?:[ \t]+File \"|[ \t]+at |" + _GO_FRAMES + ")")
#: _FRAME for a text with neither literal of Go's frames (most): no indented line's first
#: word is read to the end for a ".go:"
_FRAME_NOT_GO = rx(r"^[ \t]++(?:File \"|at )")  # possessive: neither word starts with a blank
#: what a _FRAME_NOT_GO line's rest starts with, after its blanks
_FRAME_WORDS: Final = ('File "', "at ")
_GO_NEEDLES: Final = census("goroutine ", ".go:", " {\n")[:2]
# substring tests: an alternation regex searched over every frame costs several times more
_DEP: Final = ("site-packages", "dist-packages", "node_modules", "/usr/lib/", "/usr/local/lib/",
               "lib/python3", "lib/python2", "<frozen ", "(node:", "at java.", "at javax.", "at jdk.",
               "at sun.", "at kotlin.", "at scala.", "/go/pkg/mod/", "GOROOT", "/usr/local/go/src/",
               ".rustup/", "/rustc/")
census(*_DEP)  # a needle the text does not hold is in none of its frames
_MESSAGE = rx(
    r"^(?:Traceback \(most recent call last\):|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt"
    r"|Warning)\b|panic: |Caused by: |Exception in thread |fatal error: |\w*Error: |During handling"
    r"|The above exception|thread '[^'\n]*'(?: \(\d+\))? panicked at )"
)

#: what every line _MESSAGE matches holds (`Doc.iled` reads only those lines)
_MESSAGE_NEEDLES: Final = census("Traceback (most recent call last):", "Error", "Exception", "Exit", "Interrupt",
                                 "Warning", "panic: ", "Caused by: ", "fatal error: ", "During handling",
                                 "The above exception", "panicked at ")


_GO_FRAME = rx(r"^(?:" + _GO_FRAMES + ")")


def _frames(doc: Doc) -> list[int]:
    """The indexes of the lines `_FRAME` matches.

    A blank-led line whose rest starts with 'File "' or 'at ' is a frame: where they are
    most lines, str methods mapped over the lines find them, else one search of the text.
    Go's frames are searched only when the text has them."""
    lines = doc.lines
    if _accel.fastscan is not None:  # one pass in C, the line numbers with it (and detect's)
        found = doc.led(_FRAME_WORDS)
    elif (doc.count("at ") + doc.count('File "')) * 2 > len(lines):  # frames on most lines (Java, JS)
        found = _led_frames(lines)
    else:  # one search, the lines counted in C: a str method a line cost more
        found = doc.grep(_FRAME_NOT_GO)
    if doc.holds(_GO_NEEDLES):  # the census: no pass of its own
        found = sorted({*found, *doc.igrep(_GO_FRAME)})
    return found


def _led_frames(lines: list[str]) -> list[int]:
    """The lines that a blank or tab leads and whose rest starts with 'File "' or 'at ', each
    line looked at in C (map), no Python step per line: when most lines are frames."""
    return led_lines(lines, _FRAME_WORDS)


def _dep_frames(doc: Doc, frames: list[int]) -> list[int]:
    """The frames holding a dependency needle: substring tests over the frame lines only,
    a needle looked for only when the text holds it."""
    texts = [doc.lines[i] for i in frames]
    dep: set[int] = set()
    for needle in filter(doc.has, _DEP):  # the census: no scan for a needle the text lacks
        dep.update(compress(frames, map(contains, texts, repeat(needle))))
    return sorted(dep)


class _Frames:
    """The frame lines of a trace, and the lines each frame owns, found when asked: a Python
    frame's `File` line owns the code, caret (`^^^^`) and `[Previous line repeated …]` lines
    printed under it. A long trace has thousands of frames and a view shows a few."""

    def __init__(self, doc: Doc, frames: list[int], dep: list[int]) -> None:
        self.lines, self.n = doc.lines, len(doc)
        self.starts, self.dep = set(frames), set(dep)
        self.own = sorted(self.starts - self.dep) if self.dep else frames

    def end(self, i: int) -> int:
        """Where frame `i` ends (exclusive)."""
        lines, j = self.lines, i + 1
        if lines[i].lstrip(" \t").startswith('File "'):
            while j < self.n and j not in self.starts and (
                    lines[j].startswith("    ") or lines[j].startswith("  [Previous line repeated")):
                j += 1
        return j


#: how many of the program's outermost frames are kept early: where the call came in
#: (`<module>`, `main`, the handler) says what the program was doing
_OUTER = 3


def _own_frames(doc: Doc, frames: _Frames) -> Iterator[Run]:
    """The program's own frames, whole, by how much they tell: the one nearest the error,
    the outermost ones, then inwards from the error, so a deep trace keeps both ends and
    its middle collapses into one marker. Python prints the frame nearest the error last;
    Java, JS and Go print it first."""
    python = "Traceback (most recent call last):" in doc.text
    inner = frames.own[::-1] if python else frames.own
    outer = inner[::-1]
    seen: set[int] = set()
    for rank, start in enumerate(chain(inner[:1], outer[:2], inner[1:2], outer[2:_OUTER], inner[2:])):
        if start not in seen:
            seen.add(start)
            yield (1 + rank, start, frames.end(start))


def _rest(frames: _Frames) -> Iterator[Run]:
    """Every other line the program printed, in order, a frame still whole (never a frame's
    `File` line without its code); dependency frames are left to the markers."""
    i = 0
    while i < frames.n:
        end = frames.end(i) if i in frames.starts else i + 1
        if i not in frames.dep:
            yield (1 << 30, i, end)
        i = end


def _counted(n: int, what: str) -> str:
    return f"{n:,} {what}{'s' if n != 1 else ''}"


def _messages(doc: Doc) -> Iterator[int]:
    """The message lines, in order, lazily (the view shows a few: the rest are never searched
    for); a rust panic says what happened on the line after `panicked at`."""
    found = doc.iled(_MESSAGE, _MESSAGE_NEEDLES)
    if "panicked at " not in doc.text:
        yield from found
        return
    lines, last = doc.lines, -1
    for i in found:
        if i > last:
            yield i
        if i + 1 < len(lines) and "panicked at " in lines[i]:
            yield i + 1
            last = i + 1


class StackCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """A trace, not a long log that happens to hold one (the log cut serves that): frames
        are a fifth of the whole text's lines, the fields of an error object node prints
        after the frames (`at … {`, then `  code: 'E…',` lines) not counted against them."""
        doc = Doc.of(text)
        if not (doc.holds(self.probes) and line_hits(self.signal, text, 1)):
            return False
        lines = count_lines(text)
        need = _fifth(lines)
        frames = _frame_count(doc, need)
        if frames >= need:  # the count stops once there are enough; short of that it is whole
            return True
        if not frames or not doc.has(" {\n") or not line_hits(_OBJECT_AFTER_FRAMES, text, 1):
            return False
        # frames >= _fifth(lines - fields): the fields are counted only as far as that needs
        return hit_count(_OBJECT_FIELD_LINE, text, lines - 5 * frames) >= lines - 5 * frames

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        all_frames, messages = _frames(doc), _messages(doc)
        frames = _dep_frames(doc, all_frames)
        found = _Frames(doc, all_frames, frames)

        def label(start: int, end: int) -> str:
            deps = count_between(frames, start, end)
            own = count_between(all_frames, start, end) - deps
            hidden = [_counted(n, what) for n, what in ((own, "frame"), (deps, "dependency frame")) if n]
            extra = f" ({', '.join(hidden)})" if hidden else ""
            return f"[… {_counted(end - start, 'line')} omitted{extra} …]"

        # messages (priority 0, in order) then own frames (1 + rank): already sorted
        ordered = chain(((0, i, i + 1) for i in messages), _own_frames(doc, found), _rest(found))
        return finish(pick(doc, ordered, limits, label=label, presorted=True), limits)


def _frame_count(doc: Doc, most: int) -> int:
    """How many lines `_FRAME` matches, counted up to `most`: with the C scanner and no Go in
    the text, from the frame lines the cut lists too (one pass)."""
    go = doc.holds(_GO_NEEDLES)
    if _accel.fastscan is not None and not go:
        return min(len(doc.led(_FRAME_WORDS)), most)
    return hit_count(_FRAME if go else _FRAME_NOT_GO, doc.text, most)


def _fifth(lines: int) -> int:
    """The frames a text of `lines` lines needs to be a trace: a fifth of them, at least one."""
    return max(1, -(-lines // 5))


_OBJECT_AFTER_FRAMES = rx(r"^[ \t]+at [^\n]* \{\r?$")
_OBJECT_FIELD = rx(r"^  [\w$'\"\[][^\n]*:[^\n]*,?\r?$")
#: the lines _OBJECT_FIELD matches (its tail after the colon matches any rest of a line): up to
#: the first colon, with no reading to the line's end and back
_OBJECT_FIELD_LINE = rx(r"^  [\w$'\"\[][^\n:]*+:")

CUT = StackCut(
    name="stacktrace",
    signal=rx(r"^(?:Traceback \(most recent call last\):|[ \t]+at [\w$.<>]+ ?\(|goroutine \d+ \["
              r"|panic: |Exception in thread |thread '[^'\n]*'(?: \(\d+\))? panicked at )"),
    # what each of the signal's alternatives holds (behind the newline it starts after)
    probes=("\nTraceback (most recent call last):", " at ", "\tat ", "\ngoroutine ", "\npanic: ",
            "\nException in thread ", "\nthread '"),
    keep=(),
)
