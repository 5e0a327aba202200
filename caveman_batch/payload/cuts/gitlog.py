"""`git log`: every commit's id and subject first (newest first), then authors and dates,
then bodies; file stats (--stat) last."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from ..view import Doc, Run
from ._lines import LineCut, Stream, _hits, rx

_COMMIT = rx(r"^commit [0-9a-f]{7,64}\b")
_BODY = rx(r"^    ")
_META = rx(r"^(?:Author|Date|Merge|AuthorDate|Commit|CommitDate): ")


def _headlines(doc: Doc) -> Iterator[Run]:
    """Each commit line with its subject (the first indented line after it), lazily."""
    lines, n = doc.lines, len(doc)
    for i in doc.igrep(_COMMIT):
        yield (0, i, i + 1)
        j = i + 1
        while j < n and j - i < 8 and not lines[j].startswith("    "):
            j += 1
        if j < n and lines[j].startswith("    "):
            yield (0, j, j + 1)


class GitLogCut(LineCut):
    def streams(self, doc: Doc) -> list[Stream]:
        return [(0, lambda: _headlines(doc)), (2, partial(_hits, doc, _META, (), 2, 0)),
                (3, partial(_hits, doc, _BODY, (), 3, 0))]


CUT = GitLogCut(name="gitlog", signal=_COMMIT, keep=(), min_hits=2)
