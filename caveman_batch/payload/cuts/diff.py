"""Unified diffs: the changed-file list first, then the hunks file by file (each file's header
line, its `@@` headers and every changed line), as many files as fit, the rest counted; then
one line of context each side of a change; the index and ---/+++ lines last."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, Run, count_between, finish, first_hit, pick
from ._lines import LineCut, rx

_GIT = rx(r"^diff --git ")
#: a commit header: before the first diff line it makes the text `git log -p` / `git show`
_COMMIT = rx(r"^commit [0-9a-f]{7,64}\b")
_RANGES: Final = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
#: header lines that say what happened to a file (made, deleted, renamed, binary): kept with it
_FILE_NEWS: Final = ("diff ", "Binary files ", "new file mode", "deleted file mode", "old mode", "new mode",
                     "rename from ", "rename to ", "copy from ", "copy to ", "similarity index")
_HEADERS: Final = ("--- ", "+++ ", "index ")
#: what a diff line is
FILE, HUNK, CHANGED, CONTEXT, HEADER, OTHER = range(6)
#: the file list takes at most this share of the budget: the rest is for the hunks
_LIST_SHARE: Final = 2


def _kinds(doc: Doc) -> Iterator[tuple[int, int]]:
    """(line index, kind) of every line, lazily. A hunk's lines are counted off the line
    ranges in its `@@` header, so a removed line reading `--- x` is a change, not a file
    header; a hunk header without ranges (a combined diff) is read line by line."""
    old = new = 0
    for i, line in enumerate(doc.lines):
        first = line[:1]
        if first == "\\":  # "\ No newline at end of file": part of the hunk
            yield i, CONTEXT
        elif old > 0 or new > 0:
            if first == "-":
                old -= 1
                yield i, CHANGED
            elif first == "+":
                new -= 1
                yield i, CHANGED
            else:  # context (a blank one may have lost its space)
                old, new = old - 1, new - 1
                yield i, CONTEXT
        elif first == "@":
            ranges = _RANGES.match(line)
            old, new = (int(ranges[1] or 1), int(ranges[2] or 1)) if ranges else (0, 0)
            yield i, HUNK if line.startswith("@@") else OTHER
        else:
            yield i, _outside(line)


def _outside(line: str) -> int:
    """The kind of a line outside any hunk."""
    if line.startswith(_FILE_NEWS):
        return FILE
    if line.startswith(_HEADERS):
        return HEADER
    if line[:1] in ("-", "+"):
        return CHANGED
    return CONTEXT if line[:1] == " " else OTHER


def _runs(doc: Doc) -> Iterator[Run]:
    """File by file, each file's header line, hunk headers and changed lines; then context,
    then the other header lines. Each phase is a lazy walk: most budgets end in the first."""
    yield from ((0, i, i + 1) for i, kind in _kinds(doc) if kind <= CHANGED)
    yield from _context(doc)
    yield from ((2, i, i + 1) for i, kind in _kinds(doc) if kind == HEADER)


def _context(doc: Doc) -> Iterator[Run]:
    """One line of context on each side of a change, lazily."""
    before = (-1, OTHER)
    for i, kind in _kinds(doc):
        if kind == CONTEXT and before[1] == CHANGED:
            yield (1, i, i + 1)
        elif kind == CHANGED and before[1] == CONTEXT:
            yield (1, before[0], before[0] + 1)
        before = (i, kind)


def _files(doc: Doc, limits: Limits) -> list[str]:
    """The file list: one line per changed file with its added/removed line counts, as many
    as fit half the budget, then how many more there are. Only the listed files' lines are
    counted (in C, over each file's part of the text)."""
    starts = list(doc.positions(_GIT))
    if not starts:
        return []
    text = doc.nl_text
    # a file touched by two sections (diffs of several commits, one after another) is one file
    total = len({text[a + 1:_line_end(text, a + 1)] for a in starts})
    head, more = f"[diff cut: {total:,} files changed]", f"  … {total:,} more files"
    width = limits.line_chars or limits.chars
    room = limits.chars // _LIST_SHARE - len(head) - len(more) - 2
    rows = total if limits.lines is None else (limits.lines - 1) // _LIST_SHARE - 2
    if room < 0 or rows < 0:
        return []  # not even the count fits its share
    out: list[str] = []
    listed: set[str] = set()
    for a, b in zip(starts, [*starts[1:], len(text)]):
        end = text.find("\n", a + 1)
        name = text[a + 1 + len("diff --git "):end if end >= 0 else b].partition(" b/")[0].removeprefix("a/")
        # the ---/+++ header lines stand before the first hunk: a removed line reading
        # `--- x` (an SQL or Lua comment, `-- x`) further on is a change
        hunks = text.find("\n@@", a, b)
        hunks = b if hunks < 0 else hunks
        added = text.count("\n+", a, b) - text.count("\n+++ ", a, hunks)
        removed = text.count("\n-", a, b) - text.count("\n--- ", a, hunks)
        line = f"  {name} +{added:,} -{removed:,}"
        room -= min(len(line), width) + 1
        if room < 0 or len(out) >= rows:
            break
        out.append(line)
        listed.add(name)
    return [head, *out, *([f"  … {total - len(listed):,} more files"] if len(listed) < total else [])]


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


def _plural(n: int, what: str) -> str:
    return f"{n:,} {what}{'s' if n != 1 else ''}"


class DiffCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """Diff lines, and no commit header before the first of them (that is a git log with
        patches, or git show: the gitlog cut keeps its commit ids and subjects)."""
        if not super().detect(text, hint):
            return False
        commit = first_hit(_COMMIT, text) if Doc.of(text).has("\ncommit ") else -1
        return commit < 0 or commit > first_hit(self.signal, text)

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        files = doc.grep(_GIT)

        def label(start: int, end: int) -> str:
            hidden = count_between(files, start, end)
            extra = f" ({_plural(hidden, 'file')})" if hidden else ""
            return f"[… {_plural(end - start, 'line')} omitted{extra} …]"

        view = pick(doc, _runs(doc), limits, lead=_files(doc, limits), label=label, presorted=True)
        return finish(view, limits)


CUT = DiffCut(
    name="diff",
    signal=rx(r"^(?:diff --git |@@ -\d+(?:,\d+)? \+\d+)"),
    keep=(),
    probes=("\ndiff --git ", "\n@@ -"),
)
