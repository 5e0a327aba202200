"""Stack traces (Python, JS, Java, Go): the message and the program's own frames;
runs of dependency frames (site-packages, node_modules, /usr/lib, java.*) collapse
into one line that counts them."""

from __future__ import annotations

from itertools import chain
from typing import Final

from ..model import Hint, Limits
from ..view import (
    Doc,
    Run,
    count_between,
    count_lines,
    finish,
    lines_marker,
    pick,
    sample,
)
from ._lines import LineCut, rx

_FRAME = rx(r"^(?:[ \t]+File \"|[ \t]+at |goroutine \d+ \[|[ \t]+[^ \t\n]+\.go:\d+)")
# substring tests: an alternation regex searched over every frame costs several times more
_DEP: Final = ("site-packages", "dist-packages", "node_modules", "/usr/lib/", "/usr/local/lib/",
               "lib/python3", "lib/python2", "<frozen ", "(node:", "at java.", "at javax.", "at jdk.",
               "at sun.", "at kotlin.", "at scala.", "/go/pkg/mod/", "GOROOT", "/usr/local/go/src/",
               ".rustup/", "/rustc/")
_MESSAGE = rx(
    r"^(?:Traceback \(most recent call last\):|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt"
    r"|Warning)\b|panic: |Caused by: |Exception in thread |fatal error: |\w*Error: |During handling"
    r"|The above exception)"
)


def _dep_lines(doc: Doc) -> list[bool]:
    """A dependency frame and the source line printed under it (Python) are both dep.

    Frames are found from the needles (substring search over the whole text), not by
    testing every frame: a long trace has thousands."""
    dep = [False] * len(doc)
    lines, n = doc.lines, len(doc)
    for i in doc.grep(_FRAME, _DEP):
        dep[i] = True
        if i + 1 < n and lines[i + 1].startswith("    ") and lines[i].lstrip().startswith("File "):
            dep[i + 1] = True
    return dep


def _own_frames(doc: Doc, dep: list[bool]) -> list[Run]:
    """The program's own frames, nearest the error first: Python prints that frame last,
    Java, JS and Go print it first. A Python frame keeps its source line with it."""
    python = "Traceback (most recent call last):" in doc.text
    frames = [i for i in doc.grep(_FRAME) if not dep[i]]
    n, lines = len(doc), doc.lines
    runs: list[Run] = []
    for rank, i in enumerate(reversed(frames) if python else frames):
        end = i + 2 if python and i + 1 < n and not _FRAME.match(lines[i + 1]) else i + 1
        runs.append((1 + rank, i, end))
    return runs


class StackCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """A trace, not a long log that happens to hold one (the log cut serves that)."""
        part = sample(text)
        if not self.signal.search(part):
            return False
        return len(_FRAME.findall(part)) * 5 >= count_lines(part)

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc(text)
        dep = _dep_lines(doc)
        runs: list[Run] = [(0, i, i + 1) for i in doc.grep(_MESSAGE)]
        runs += _own_frames(doc, dep)
        rest = ((1 << 30, i, i + 1) for i in range(len(doc)) if not dep[i])
        frames = doc.grep(_FRAME, _DEP)

        def label(start: int, end: int) -> str:
            n = count_between(frames, start, end)
            extra = f" ({n:,} dependency frame{'s' if n != 1 else ''})" if n else ""
            k = end - start
            return f"[… {k:,} line{'s' if k != 1 else ''} omitted{extra} …]"

        room = len(lines_marker(len(doc))) + len(f"{len(doc):,}") + 24
        ordered = chain(sorted(runs), rest)
        return finish(pick(doc, ordered, limits, label=label, label_room=room, presorted=True),
                      limits)


CUT = StackCut(
    name="stacktrace",
    signal=rx(r"^(?:Traceback \(most recent call last\):|[ \t]+at [\w$.<>]+ ?\(|goroutine \d+ \["
              r"|panic: |Exception in thread )"),
    keep=(),
)
