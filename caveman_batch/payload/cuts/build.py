"""Compiler and bundler output (gcc/clang, tsc, rustc/cargo, esbuild, webpack).

The closing summary first (it is one line and says how bad it is), then every
error, then the code frames of errors, then warnings
with theirs. A code frame is the run of indented / gutter lines after a message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from typing import Final

from ..view import Doc, Run
from ._lines import LineCut, Stream, _hits, rx

_ERROR = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: (?:fatal )?error:"  # gcc/clang
    r"|[^ \t\n(][^\n(]*\(\d+,\d+\): error TS\d+:"  # tsc
    r"|[^ \t\n:][^\n:]*:\d+:\d+ - error TS\d+:"  # tsc --pretty
    r"|error(?:\[E\d+\])?: "  # rustc
    r"|✘ \[ERROR\]|ERROR in |[^ \t\n:][^\n:]*:\d+: error:)"
)
_WARNING = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: warning:|warning(?:\[\w+\])?: |▲ \[WARNING\]|WARNING in "
    r"|[^ \t\n:(][^\n:(]*:\d+:\d+: note:)"
)
_SUMMARY = rx(
    r"^(?:\d+ (?:errors?|warnings?)(?: and \d+ warnings?)? generated|Found \d+ errors?"
    r"|error: could not compile|make(?:\[\d+\])?: \*\*\*|webpack [\d.]+ compiled"
    r"|[ \t]*Finished |\d+ errors?\r?$|Build failed|error: aborting)"
)
_FRAME = re.compile(r"[ \t]|\d+ *\||~|\^|\|")
_FRAME_MAX: Final = 12


def _frame_runs(doc: Doc, heads: Iterator[int], prio: int) -> Iterator[Run]:
    """The code frame under each message: following indented or gutter lines (lazily)."""
    lines, n = doc.lines, len(doc)
    for i in heads:
        end = i + 1
        while end < n and end - i <= _FRAME_MAX and lines[end] and _FRAME.match(lines[end]):
            end += 1
        yield (prio, i, end)


class BuildCut(LineCut):
    def streams(self, doc: Doc) -> list[Stream]:
        return [(0, partial(_hits, doc, _SUMMARY, (), 0, 0)), (1, partial(_hits, doc, _ERROR, (), 1, 0)),
                (2, lambda: _frame_runs(doc, doc.igrep(_ERROR), 2)),
                (3, partial(_hits, doc, _WARNING, (), 3, 0)),
                (4, lambda: _frame_runs(doc, doc.igrep(_WARNING), 4))]


# every alternative of _ERROR holds "error" or "ERROR": a sample with neither is not searched
CUT = BuildCut(name="build", signal=_ERROR, keep=(), min_hits=1, signal_needles=("error", "ERROR"))
