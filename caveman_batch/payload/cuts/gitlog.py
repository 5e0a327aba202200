"""`git log`: every commit's id and subject first (newest first), then authors and dates,
then bodies; file stats (--stat) last."""

from __future__ import annotations

from ..view import Doc, Run
from ._lines import LineCut, rx

_COMMIT = rx(r"^commit [0-9a-f]{7,64}\b")
_META = rx(r"^(?:Author|Date|Merge|AuthorDate|Commit|CommitDate): ")


class GitLogCut(LineCut):
    def runs(self, doc: Doc) -> list[Run]:
        commits = doc.grep(_COMMIT)
        lines, n = doc.lines, len(doc)
        runs: list[Run] = [(0, i, i + 1) for i in commits]
        for i in commits:  # the subject: first indented line after the header
            j = i + 1
            while j < n and j - i < 8 and not lines[j].startswith("    "):
                j += 1
            if j < n and lines[j].startswith("    "):
                runs.append((0, j, j + 1))  # beside its commit line
        runs += [(2, i, i + 1) for i in doc.grep(_META)]
        return runs + [(3, i, i + 1) for i in range(n) if lines[i].startswith("    ")]


CUT = GitLogCut(name="gitlog", signal=_COMMIT, keep=(), min_hits=2)
