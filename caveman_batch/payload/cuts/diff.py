"""Unified diffs: every file name first, then the other file headers, hunk headers, every
changed line, and one line of context each side of a change."""

from __future__ import annotations

from collections.abc import Iterator

from ..model import Limits
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


def _files(doc: Doc, limits: Limits) -> list[str]:
    """One line per changed file: its name and its added/removed line counts.

    Empty when even the names cannot fit the budget: the lead would be dropped whole, so
    its counts (four passes over the text) are not worth making."""
    starts = list(doc.positions(_GIT))
    if not starts:
        return []
    text = doc.nl_text
    names = []
    for a, b in zip(starts, [*starts[1:], len(text)]):
        end = text.find("\n", a + 1)
        head = text[a + 1:end if end >= 0 else b]
        names.append(head[len("diff --git "):].partition(" b/")[0].removeprefix("a/"))
    if not _may_fit(names, limits):
        return []
    out = []
    for name, a, b in zip(names, starts, [*starts[1:], len(text)]):
        added = text.count("\n+", a, b) - text.count("\n+++ ", a, b)  # counted in C
        removed = text.count("\n-", a, b) - text.count("\n--- ", a, b)
        out.append(f"  {name} +{added:,} -{removed:,}")
    return out


def _may_fit(names: list[str], limits: Limits) -> bool:
    """Whether a lead of these file lines could pass `pick`'s test for a lead.

    A file line is "  {name} +{a} -{r}" (at least the name and 6 chars) and a clipped line
    keeps at least 20 chars (its marker), so this undercounts what `pick` counts."""
    if limits.lines is not None and len(names) + 2 > limits.lines:
        return False
    least = sum(min(len(name) + 6, 20) + 1 for name in names)
    return least <= limits.chars


class DiffCut(LineCut):
    def lead(self, doc: Doc, limits: Limits) -> list[str]:
        files = _files(doc, limits)
        return [f"[diff cut: {len(files):,} files changed]", *files] if files else []

    def streams(self, doc: Doc) -> list[Stream]:
        return [*super().streams(doc), (4, lambda: _context(doc))]


CUT = DiffCut(
    name="diff",
    signal=rx(r"^(?:diff --git |@@ -\d+(?:,\d+)? \+\d+)"),
    lead_after=-1,  # the file list first; the diff --git lines name files when it cannot fit
    keep=((0, _FILE), (1, _HEADER), (2, _HUNK), (3, _CHANGED)),
)
