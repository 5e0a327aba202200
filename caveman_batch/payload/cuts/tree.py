"""Directory listings (`find`, `ls -R`): per directory a few entries and the count of the rest.

Directories keep the order in which the listing first shows them; the number of
entries shown per directory shrinks until the listing fits.
"""

from __future__ import annotations

import re
from itertools import compress, count, islice, pairwise, repeat
from operator import itemgetter, ne
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, fits, sample

_PATH: Final = re.compile(r"^(?:\.{1,2}|~)?/?[^ \t/][^\n]*$")
_PER_DIR: Final = (8, 5, 3, 2, 1, 0)


#: directory -> [entries in it, its first few entry names (at most _PER_DIR[0])]
Groups = dict[str, list]  # type: ignore[type-arg]


def _groups(text: str, lines: list[str]) -> Groups:
    """`find` paths (a/b/c) or `ls -R` blocks ("a/b:" then names) by directory."""
    if ":\n" not in text and not text.endswith(":"):  # no line ends with ":": not ls -R
        return _find_groups(lines)
    return {d: [len(names), names[:_PER_DIR[0]]] for d, names in _ls_groups(lines).items()}


def _ls_groups(lines: list[str]) -> dict[str, list[str]]:
    """`ls -R` blocks: each directory's entry names, in order."""
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


def _find_groups(lines: list[str]) -> Groups:
    """`find` output: consecutive paths mostly share a parent, so work a run at a time.

    The parents come from one C-level pass, the runs from comparing neighbours in C;
    the Python loop then goes over runs, and names are cut out only for the few shown."""
    entries = list(filter(None, lines))
    parents = list(map(itemgetter(0), map(str.rpartition, entries, repeat("/"))))
    edges = [0, *compress(count(1), map(ne, parents, islice(parents, 1, None))), len(entries)]
    groups: Groups = {}
    most = _PER_DIR[0]
    for a, b in pairwise(edges):
        if a == b:
            continue
        group = groups.get(parents[a] or ".")
        if group is None:
            group = groups[parents[a] or "."] = [0, []]
        group[0] += b - a
        names = group[1]
        if len(names) < most:
            names.extend(e.rpartition("/")[2] for e in entries[a:min(b, a + most - len(names))])
    return groups


def _render(groups: Groups, per_dir: int, total: int) -> str:
    out = [f"[tree cut: {total:,} entries in {len(groups):,} directories]"]
    for directory, (n, names) in groups.items():
        out.append(f"{directory}/ ({n:,} entr{'y' if n == 1 else 'ies'})")
        out.extend(f"  {name}" for name in names[:per_dir])
        if n > per_dir > 0:  # with none shown, the count above says it all
            out.append(f"  (… {n - per_dir:,} more entries)")
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
        groups = _groups(text, Doc.of(text).lines)  # the lines reduce split (empty ones are skipped)
        total = sum(n for n, _ in groups.values())
        for per_dir in _PER_DIR:
            view = _render(groups, per_dir, total)
            if fits(view, limits):
                return view
        return None


CUT = TreeCut()
