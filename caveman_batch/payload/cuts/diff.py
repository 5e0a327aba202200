"""Unified diffs: every file name first, then the other file headers, hunk headers, every
changed line, and one line of context each side of a change."""

from __future__ import annotations

from collections.abc import Iterator

from ..view import Doc, Run
from ._lines import LineCut, Stream, rx

_GIT = rx(r"^diff --git ")
_FILE = rx(r"^(?:diff --git |Binary files )")
_HEADER = rx(r"^(?:--- |\+\+\+ |index [0-9a-f]|new file mode|deleted file mode|old mode|new mode"
             r"|rename (?:from|to) |similarity index)")
_HUNK = rx(r"^@@ ")
_CHANGED = rx(r"^[-+]")


def _context(doc: Doc) -> Iterator[Run]:
    """One line of context on each side of a change, lazily."""
    lines, n = doc.lines, len(doc)
    for i in doc.igrep(_CHANGED):
        for j in (i - 1, i + 1):
            if 0 <= j < n and lines[j][:1] == " ":
                yield (4, j, j + 1)


def _files(doc: Doc) -> list[str]:
    """One line per changed file: its name and its added/removed line counts."""
    starts = list(doc.positions(_GIT))
    if not starts:
        return []
    text, out = doc.nl_text, []
    for a, b in zip(starts, [*starts[1:], len(text)]):
        head = text[a + 1:text.find("\n", a + 1) if text.find("\n", a + 1) >= 0 else b]
        name = head[len("diff --git "):].partition(" b/")[0].removeprefix("a/")
        added = text.count("\n+", a, b) - text.count("\n+++ ", a, b)  # counted in C
        removed = text.count("\n-", a, b) - text.count("\n--- ", a, b)
        out.append(f"  {name} +{added:,} -{removed:,}")
    return out


class DiffCut(LineCut):
    def lead(self, doc: Doc) -> list[str]:
        files = _files(doc)
        return [f"[diff cut: {len(files):,} files changed]", *files] if files else []

    def streams(self, doc: Doc) -> list[Stream]:
        return [*super().streams(doc), (4, lambda: _context(doc))]


CUT = DiffCut(
    name="diff",
    signal=rx(r"^(?:diff --git |@@ -\d+(?:,\d+)? \+\d+)"),
    lead_after=-1,  # the file list first; the diff --git lines name files when it cannot fit
    keep=((0, _FILE), (1, _HEADER), (2, _HUNK), (3, _CHANGED)),
)
