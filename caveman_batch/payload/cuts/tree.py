"""Directory listings (`find`, `ls -R`): per directory a few entries and the count of the rest.

Directories keep the order in which the listing first shows them; the number of
entries shown per directory shrinks until the listing fits.
"""

from __future__ import annotations

import re
from itertools import groupby
from operator import itemgetter, methodcaller
from typing import Final

from ..model import Hint, Limits
from ..view import fits, sample

_PATH: Final = re.compile(r"^(?:\.{1,2}|~)?/?[^ \t/][^\n]*$")
_PER_DIR: Final = (8, 5, 3, 2, 1, 0)


def _groups(lines: list[str]) -> dict[str, list[str]]:
    """`find` paths (a/b/c) or `ls -R` blocks ("a/b:" then names) by directory."""
    if not any(line.endswith(":") for line in lines if line[-1:] == ":"):
        return _find_groups(lines)
    groups: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        if not line:
            continue
        if line.endswith(":") and "/" in line or line in (".:",):
            current = line[:-1]
            groups.setdefault(current, [])
        elif current is not None:
            groups[current].append(line)
        else:
            parent, _, name = line.rstrip("/").rpartition("/")
            groups.setdefault(parent or ".", []).append(name or line)
    return groups


def _find_groups(lines: list[str]) -> dict[str, list[str]]:
    """`find` output: consecutive paths mostly share a parent, so group runs in C."""
    groups: dict[str, list[str]] = {}
    split = map(methodcaller("rpartition", "/"), filter(None, lines))
    for parent, items in groupby(split, key=itemgetter(0)):
        groups.setdefault(parent or ".", []).extend(map(itemgetter(2), items))
    return groups


def _render(groups: dict[str, list[str]], per_dir: int, total: int) -> str:
    out = [f"[tree cut: {total:,} entries in {len(groups):,} directories]"]
    for directory, names in groups.items():
        out.append(f"{directory}/ ({len(names):,} entr{'y' if len(names) == 1 else 'ies'})")
        out.extend(f"  {name}" for name in names[:per_dir])
        if len(names) > per_dir > 0:  # with none shown, the count above says it all
            out.append(f"  (… {len(names) - per_dir:,} more entries)")
    return "\n".join(out)


class TreeCut:
    name = "tree"

    def detect(self, text: str, hint: Hint) -> bool:
        lines = [line for line in sample(text).split("\n")[:200] if line]
        if len(lines) < 10:
            return False
        pathy = sum(1 for line in lines if "/" in line and _PATH.match(line) and "  " not in line)
        return pathy * 10 >= len(lines) * 8

    def cut(self, text: str, limits: Limits) -> str | None:
        lines = text.split("\n")
        groups = _groups(lines)
        total = sum(map(len, groups.values()))
        for per_dir in _PER_DIR:
            view = _render(groups, per_dir, total)
            if fits(view, limits):
                return view
        return None


CUT = TreeCut()
