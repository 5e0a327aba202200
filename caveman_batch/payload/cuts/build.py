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

from ..model import Hint
from ..view import Doc, Run, census, line_hits, needle_hits
from ._lines import LineCut, Stream, _hits, rx
from .install import INSTALLER, INSTALLER_PROBES

_ERROR = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: (?:fatal )?error:"  # gcc/clang
    r"|[^ \t\n(][^\n(]*\(\d+,\d+\): error TS\d+:"  # tsc
    r"|[^ \t\n:][^\n:]*:\d+:\d+ - error TS\d+:"  # tsc --pretty
    r"|error(?:\[E\d+\])?: "  # rustc
    r"|✘ \[ERROR\]|ERROR in |[^ \t\n:][^\n:]*:\d+: error:"  # javac, mypy
    r"|collect2: error: |(?:[^ \t\n:]*ld: )?[^ \t\n]*:\(\.[\w.]+\+0x[0-9a-f]+\): undefined reference to )"  # the linker
)
_WARNING = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: warning:|warning(?:\[\w+\])?: |▲ \[WARNING\]|WARNING in "
    r"|[^ \t\n:(][^\n:(]*:\d+:\d+: note:)"
)
_SUMMARY = rx(
    r"^(?:\d+ (?:errors?|warnings?)(?: and \d+ warnings?)? generated|Found \d+ errors?"
    r"|error: could not compile|make(?:\[\d+\])?: \*\*\*|webpack [\d.]+ compiled"
    r"|[ \t]*Finished |\d+ errors?\r?$|Build failed|error: aborting|collect2: error: "
    r"|make(?:\[\d+\])?: Target .* not remade|warning: .* generated \d+ warnings?)"
)
#: what every line _ERROR or _WARNING matches holds: detection matches only the lines these
#: substrings are on (found by str.find, in C)
_ERROR_NEEDLES: Final = census("error: ", "error[", "error TS", "[ERROR]", "ERROR in ", "undefined reference to ")
_WARNING_NEEDLES: Final = census("warning: ", "warning[", "[WARNING]", "WARNING in ", "note:")
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
    def detect(self, text: str, hint: Hint) -> bool:
        """An error line, or two warning lines (a build that passed with warnings), anywhere in
        the text; not when pip or npm ran the compiler (the install cut names the package)."""
        if not (needle_hits(_ERROR, text, _ERROR_NEEDLES, 1) or needle_hits(_WARNING, text, _WARNING_NEEDLES, 2)):
            return False
        return not (Doc.of(text).holds(INSTALLER_PROBES) and line_hits(INSTALLER, text, 1))

    def streams(self, doc: Doc) -> list[Stream]:
        return [(0, partial(_hits, doc, _SUMMARY, (), 0, 0)), (1, partial(_hits, doc, _ERROR, (), 1, 0)),
                (2, lambda: _frame_runs(doc, doc.igrep(_ERROR), 2)),
                (3, partial(_hits, doc, _WARNING, (), 3, 0)),
                (4, lambda: _frame_runs(doc, doc.igrep(_WARNING), 4))]


CUT = BuildCut(name="build", signal=_ERROR, keep=(), min_hits=1)
