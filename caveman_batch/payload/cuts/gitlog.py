"""`git log` (also -p, --stat) and `git show`: the newest commits whole (id, author, date,
subject), then every older commit's id and subject (newest first), then the older authors
and dates and `--stat` totals, then bodies, then the files each patch touches and its hunk
headers; the rest of the patches and file stats last."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

from ..model import Hint, Limits
from ..view import Doc, Run, finish, line_hits, pick
from ._lines import LineCut, _hits, rx

_COMMIT = rx(r"^commit [0-9a-f]{7,64}\b")
# four spaces then text (or nothing): a patch's context line of indented code has five or more
_BODY = rx(r"^    (?:[^ \n]|\r?$)")
_META = rx(r"^(?:(?:Author|Date|Merge|AuthorDate|Commit|CommitDate): | \d+ files? changed, )")
_AUTHOR = rx(r"^Author: ")
_STAT_TOTAL = rx(r"^ \d+ files? changed, ")
_PATCH_FILE = rx(r"^diff --git ")
_HUNK = rx(r"^@@ ")
#: the newest commits are shown whole while they take at most this share of the budget
_WHOLE_SHARE = 8


def _commits(doc: Doc) -> Iterator[tuple[int, int | None]]:
    """Each commit line with its subject (the first indented line after it), lazily."""
    lines, n = doc.lines, len(doc)
    for i in doc.igrep(_COMMIT):
        j = i + 1
        while j < n and j - i < 8 and not lines[j].startswith("    "):
            j += 1
        yield i, j if j < n and lines[j].startswith("    ") else None


def _runs(doc: Doc, whole_room: int) -> Iterator[Run]:
    """The newest commits whole while they fit `whole_room` chars (the newest one always),
    then the headlines of the rest, then their other header lines, then bodies."""
    commits, lines = _commits(doc), doc.lines
    total = next(doc.igrep(_STAT_TOTAL), None)  # --stat: how much the newest commit changed
    if total is not None:
        yield (0, total, total + 1)
    for n, (i, subject) in enumerate(commits):
        end = (i if subject is None else subject) + 1
        cost = sum(map(len, lines[i:end])) + end - i
        if n and cost > whole_room:
            yield from _headline(i, subject)
            break
        whole_room -= cost
        yield (0, i, end)
    for i, subject in commits:
        yield from _headline(i, subject)
    yield from chain(_hits(doc, _META, (), 2, 0), _hits(doc, _BODY, (), 3, 0),
                     _hits(doc, _PATCH_FILE, (), 4, 0), _hits(doc, _HUNK, (), 5, 0))


def _headline(commit: int, subject: int | None) -> Iterator[Run]:
    yield (1, commit, commit + 1)
    if subject is not None:
        yield (1, subject, subject + 1)


class GitLogCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """Two commit headers, or one with its Author line (`git show`, `git log -1`)."""
        doc = Doc.of(text)
        if not doc.has("\ncommit "):
            return False
        return line_hits(self.signal, text, 2) or (line_hits(self.signal, text, 1) and doc.has("\nAuthor: ")
                                                    and line_hits(_AUTHOR, text, 1))

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        return finish(pick(doc, _runs(doc, limits.chars // _WHOLE_SHARE), limits, presorted=True), limits)


CUT = GitLogCut(name="gitlog", signal=_COMMIT, keep=(), min_hits=2, probes=("\ncommit ", "\nAuthor: "))
