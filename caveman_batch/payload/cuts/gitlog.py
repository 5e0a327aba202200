"""`git log`: the newest commits whole (id, author, date, subject), then every older commit's
id and subject (newest first), then the older authors and dates, then bodies; file stats
(--stat) last."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

from ..model import Limits
from ..view import Doc, Run, finish, pick
from ._lines import LineCut, _hits, rx

_COMMIT = rx(r"^commit [0-9a-f]{7,64}\b")
_BODY = rx(r"^    ")
_META = rx(r"^(?:Author|Date|Merge|AuthorDate|Commit|CommitDate): ")
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
    yield from chain(_hits(doc, _META, (), 2, 0), _hits(doc, _BODY, (), 3, 0))


def _headline(commit: int, subject: int | None) -> Iterator[Run]:
    yield (1, commit, commit + 1)
    if subject is not None:
        yield (1, subject, subject + 1)


class GitLogCut(LineCut):
    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        return finish(pick(doc, _runs(doc, limits.chars // _WHOLE_SHARE), limits, presorted=True), limits)


CUT = GitLogCut(name="gitlog", signal=_COMMIT, keep=(), min_hits=2)
