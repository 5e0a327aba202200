"""Directory listings (`find`, `ls -R`, `ls -laR`): per directory a few entries and the count
of the rest.

Directories keep the order in which the listing first shows them; the number of
entries shown per directory shrinks until the listing fits, and when even one line per
directory does not (13k folders), the total and the first directories that fit, the rest
counted.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from itertools import compress, count, islice, pairwise, repeat
from operator import add, is_, itemgetter, ne, not_, sub
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, census, fits, line_hits
from ._lines import newlines_and_one, rx

_PER_DIR: Final = (8, 5, 3, 2, 1, 0)
_MIN_ENTRIES: Final = 10
#: what no listing of paths has: grep's `path:12:` (the rest, `key: value` and tabs, counted
#: as substrings)
_GREP_LIKE = re.compile(r":\d+[:\s]")
#: `ls -R` block headers: "./a/b:" after a blank line
_LS_HEADER = rx(r"^\r?\n[^\n]*/[^\n]*:\r?$")
#: `ls -l` entries: mode, links, owner, group, size, date (two forms), then the name
_MODES: Final = frozenset("-dlcbpsD")
_LONG = re.compile(r"[-dlcbpsD][-rwxsStT]{9}[.+@]? +\d+ +\S+ +\S+ +[\d, ]+ +\S+ +\d+ +[\d:]+ (.*)")


#: directory -> [entries in it, its first few entry names (at most _PER_DIR[0])]
Groups = dict[str, list]  # type: ignore[type-arg]


def _groups(text: str, lines: list[str], room: int | None = None) -> Groups:
    """`find` paths (a/b/c) or `ls -R` blocks ("a/b:" then names) by directory; the first
    names of each only if a rendering of the directories alone could fit in `room` chars
    (none that shows a name is tried otherwise)."""
    if ":\n" not in text and not text.endswith(":"):  # no line ends with ":": not ls -R
        return _find_groups(lines, room)
    doc = Doc.of(text)
    return _ls_counted_in(doc, room) if doc.lines is lines else _ls_counted(lines, None, room)


def _names_wanted(directories: Collection[str], room: int | None) -> bool:
    """Whether one line per directory (at least its name and "/ (1 entry)") may fit in `room`
    chars: else no rendering that shows an entry's name is made."""
    return room is None or sum(map(len, directories)) + 12 * len(directories) <= room + 1


def _ls_groups(lines: list[str]) -> dict[str, list[str]]:
    """`ls -R` blocks: each directory's entry names, in order, line by line (the rule
    `_ls_counted` stands for)."""
    groups: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        if not line or line.startswith("total ") and line[6:].isdigit():
            continue
        long = _LONG.match(line) if line[:1] in _MODES else None
        if long is not None:  # ls -l: the name is what follows the date
            if long[1] in (".", ".."):
                continue
            line = long[1]
        elif line.endswith(":") and "/" in line or line in (".:",):
            current = line[:-1]
            groups.setdefault(current, [])
            continue
        if current is not None:
            groups[current].append(line)
        else:
            parent, _, name = line.rstrip("/").rpartition("/")
            groups.setdefault(parent or ".", []).append(name or line)
    return groups


def _entry(line: str) -> str | None:
    """The name an `ls -R` line lists (what follows the date in `ls -l`), None for a line that
    lists none: a blank, `total N`, `.` and `..`; a block header is the caller's."""
    if not line or line.startswith("total ") and line[6:].isdigit():
        return None
    long = _LONG.match(line) if line[:1] in _MODES else None
    if long is None:
        return line
    return None if long[1] in (".", "..") else long[1]


def _is_header(line: str) -> bool:
    """"a/b:" (or ".:"), not an `ls -l` entry whose name ends with a colon."""
    return (line.endswith(":") and "/" in line or line == ".:") and not (line[:1] in _MODES and _LONG.match(line))


def _maybe(lines: list[str]) -> list[int]:
    """The lines that may not be entries: blank ones, `total N`, ones ending with ":" (a header)
    or with " ." or " .." (`ls -l`'s `.` and `..`), each line looked at (the definition)."""
    return sorted({*compress(count(), map(not_, lines)),
                   *compress(count(), map(str.startswith, lines, repeat("total "))),
                   *compress(count(), map(str.endswith, lines, repeat(_MAYBE_ENDS)))})


_MAYBE_ENDS: Final = (":", " .", " ..")
#: behind a newline: the next line is blank, or starts with "total " (where it starts in the text)
_BLANK_NEXT, _TOTAL_NEXT = re.compile(r"\n(?=\n)"), re.compile(r"\ntotal ")
#: a line's end: ":", " ." or " .." before its newline (each hit inside the line it ends)
_COLON_END, _DOTS_END = re.compile(r":\n"), re.compile(r" \.\.?\n")


def _maybe_in(doc: Doc) -> list[int]:
    """`_maybe(doc.lines)` from three searches of the whole text (C), every hit's line
    counted in one pass: no method call a line."""
    text, lines = doc.text, doc.lines
    if not text:
        return [0]  # the one line, blank
    totals = doc.has(_TOTAL_LINE)
    offsets = [*map(re.Match.start, _BLANK_NEXT.finditer(doc.nl_text)),  # a line's start in `text`
               *(map(re.Match.start, _TOTAL_NEXT.finditer(doc.nl_text)) if totals else ()),
               *map(re.Match.start, _COLON_END.finditer(text)), *map(re.Match.start, _DOTS_END.finditer(text))]
    found = doc.line_index(sorted(offsets))
    if totals:  # a "total N" line may also end with ":" (no other two hits share a line)
        found = list(dict.fromkeys(found))
    if not text.endswith("\n") and lines[-1].endswith(_MAYBE_ENDS) and (not found or found[-1] != len(lines) - 1):
        found.append(len(lines) - 1)  # no newline ends the last line
    return found


#: (the block headers, the lines that list nothing): what `ls -R` lines are not entries
Marks = tuple[list[int], list[int]]


def _marks(lines: list[str], maybe: Iterable[int], blank: list[int] | None = None) -> Marks:
    """The headers and the lines that list nothing among the lines `maybe` (of `_maybe`), each
    looked at, and the `blank` lines (which list nothing) if given apart."""
    headers: list[int] = []
    nothing: list[int] = []
    for i in maybe:
        line = lines[i]
        if _is_header(line):
            headers.append(i)
        elif _entry(line) is None:
            nothing.append(i)
    return headers, sorted([*nothing, *blank]) if blank else nothing


def _marks_in(doc: Doc) -> Marks:
    """`_marks(doc.lines, _maybe(doc.lines))`, the lines found by searches of the whole text
    (C), each distinct line looked at once: `ls -R` repeats its blank lines, `ls -laR` its
    `total N`, `.` and `..` ones."""
    lines, maybe = doc.lines, _maybe_in(doc)
    found = list(map(lines.__getitem__, maybe))
    kind = {line: _kind(line) for line in set(found)}
    kinds = list(map(kind.__getitem__, found))
    return (list(compress(maybe, map(is_, kinds, repeat(_HEADER)))),
            list(compress(maybe, map(is_, kinds, repeat(_NOTHING)))))


_HEADER, _NOTHING, _ENTRY = "header", "nothing", "entry"


def _kind(line: str) -> str:
    """What `_marks` makes of a line: a block header, a line that lists nothing, an entry."""
    if _is_header(line):
        return _HEADER
    return _NOTHING if _entry(line) is None else _ENTRY


def _ls_counted(lines: list[str], marks: Marks | None = None, room: int | None = None) -> Groups:
    """`_ls_groups` as the cut keeps it: each directory's count of entries and its first few
    names, in order.

    Only the lines that may not be entries are looked at one by one (`marks`: what `_marks`
    makes of those of `_maybe`), and only the names shown are cut out: a block's count is
    its lines less those that list nothing, counted in C for every block at once."""
    headers, nothing = _marks(lines, _maybe(lines)) if marks is None else marks
    return _tally(lines, headers, _between(headers, nothing), room)


def _ls_counted_in(doc: Doc, room: int | None = None) -> Groups:
    """`_ls_counted(doc.lines, _marks_in(doc), room)`, the blank lines not found one by one:
    with no run of them (no "\n\n\n"), the blank lines in a block are the "\n\n" in its span
    of the text, counted in C a block at a time; only the other lines that may list nothing
    are found and looked at (each distinct one once)."""
    text, lines = doc.text, doc.lines
    if not text.endswith("\n") or doc.has(_BLANK_RUN):
        return _ls_counted(lines, _marks_in(doc), room)
    totals = doc.has(_TOTAL_LINE)
    offsets = sorted([*(map(re.Match.start, _TOTAL_NEXT.finditer(doc.nl_text)) if totals else ()),
                      *map(re.Match.start, _COLON_END.finditer(text)), *map(re.Match.start, _DOTS_END.finditer(text))])
    found = doc.line_index(offsets)
    if totals:  # a "total N" line may also end with ":": one offset a line
        at = dict(zip(found, offsets))
        found, offsets = list(at), list(at.values())
    seen = list(map(lines.__getitem__, found))
    kind = {line: _kind(line) for line in set(seen)}
    kinds = list(map(kind.__getitem__, seen))
    is_header = list(map(is_, kinds, repeat(_HEADER)))
    headers, header_at = list(compress(found, is_header)), list(compress(offsets, is_header))
    nothing_at = list(compress(offsets, map(is_, kinds, repeat(_NOTHING))))
    blank = map(text.count, repeat("\n\n"), header_at, [*header_at[1:], len(text)])  # one "\n\n" a blank line
    return _tally(lines, headers, map(add, blank, _between(header_at, nothing_at)), room)


def _tally(lines: list[str], headers: list[int], hidden: Iterable[int], room: int | None) -> Groups:
    """The groups of `ls -R` lines given its block headers and how many lines of each block,
    after its header, list nothing: the paths before any header counted one by one."""
    groups: Groups = {}
    for line in lines[:headers[0] if headers else len(lines)]:  # before any header: paths
        name = _entry(line)
        if name is not None:
            parent, _, leaf = name.rstrip("/").rpartition("/")
            _add(groups.setdefault(parent or ".", [0, []]), 1, [leaf or name])
    firsts = list(map(add, headers, repeat(1)))  # each block's first line after its header
    ends = [*headers[1:], len(lines)]
    entries = map(sub, map(sub, ends, firsts), hidden)
    directories = list(map(itemgetter(slice(None, -1)), map(lines.__getitem__, headers)))  # "a/b:" -> "a/b"
    counts = dict.fromkeys(directories, 0)  # in the order the listing first shows them
    for directory, k in zip(directories, entries):
        counts[directory] += k
    for directory, k in counts.items():
        groups.setdefault(directory, [0, []])[0] += k
    if _names_wanted(counts.keys(), room):
        _first_names(groups, lines, directories, firsts, ends)
    return groups


def _between(headers: list[int], nothing: list[int]) -> Iterator[int]:
    """How many of `nothing` (lines, or offsets in the text) lie after each header, before the
    next one (or the end): each header's place among both, sorted (they never share one), told
    apart in C, less the place of the header before it."""
    marks = sorted([*headers, *nothing])  # two sorted runs: merged, not sorted
    places = list(compress(count(), map(set(headers).__contains__, marks)))
    return map(sub, map(sub, [*places[1:], len(marks)], places), repeat(1))


def _first_names(groups: Groups, lines: list[str], directories: list[str], firsts: list[int],
                 ends: list[int]) -> None:
    """Each directory's first few names, from its blocks in order until it has them."""
    most = _PER_DIR[0]
    seen: dict[str, str | None] = {}
    for directory, start, end in zip(directories, firsts, ends):
        shown = groups[directory][1]
        if len(shown) < most:  # a directory listed again: its first names are known
            shown += _names(lines, start, end, most - len(shown), seen)


def _names(lines: list[str], start: int, end: int, most: int, seen: dict[str, str | None]) -> list[str]:
    """The first `most` entry names in lines [start, end) (no header among them); `seen` holds
    what `_entry` made of the lines read before (a directory listed again repeats its lines)."""
    names: list[str] = []
    for i in range(start, end):  # not islice: it would step over the lines before `start`
        if len(names) >= most:
            break
        line = lines[i]
        name = seen.get(line, _UNSEEN)
        if name is _UNSEEN:
            name = seen[line] = _entry(line)
        if name is not None:
            names.append(name)
    return names


_UNSEEN: Final = "\n"  # no line holds a newline


def _add(group: list, k: int, names: list[str]) -> None:  # type: ignore[type-arg]
    group[0] += k
    group[1].extend(names[:_PER_DIR[0] - len(group[1])])


def _find_groups(lines: list[str], room: int | None = None) -> Groups:
    """`find` output: consecutive paths mostly share a parent, so work a run at a time.

    The parents come from one C-level pass, the runs from comparing neighbours in C;
    the Python loop then goes over runs, and names are cut out only for the few shown."""
    entries = list(filter(None, lines))
    if len(entries) > 1 and entries[1].startswith(entries[0].rstrip("/") + "/"):
        # find's starting point (`.`, `src`, `/usr/include`), its entries after it: the
        # folder listed, no entry of its own parent
        entries = entries[1:]
    parents = list(map(itemgetter(0), map(str.rpartition, entries, repeat("/"))))
    edges = [0, *compress(count(1), map(ne, parents, islice(parents, 1, None))), len(entries)]
    groups: Groups = {}
    distinct = set(parents)  # a path with no folder is in "."
    most = _PER_DIR[0] if _names_wanted(distinct - {""} | ({"."} if "" in distinct else set()), room) else 0
    for a, b in pairwise(edges):
        if a == b:
            continue
        group = groups.get(parents[a] or ".")
        if group is None:
            group = groups[parents[a] or "."] = [0, []]
        group[0] += b - a
        shown = group[1]
        if len(shown) < most:
            shown.extend(e.rpartition("/")[2] for e in entries[a:min(b, a + most - len(shown))])
    return groups


def _render_dirs(groups: Groups, total: int, limits: Limits) -> str | None:
    """The total, then one line per directory while they fit, the rest counted."""
    head = f"[tree cut: {total:,} entries in {len(groups):,} directories]"
    out, room, rows = [head], limits.chars - len(head), (limits.lines or len(groups) + 2) - 1
    tail = len(f"(… {len(groups):,} more directories, {total:,} entries)") + 1
    shown = 0
    for directory, (n, _) in groups.items():
        line = f"{directory}/ ({n:,} entr{'y' if n == 1 else 'ies'})"
        if len(line) + 1 + tail > room or len(out) + 1 >= rows:
            break
        out.append(line)
        room -= len(line) + 1
        shown += n
    rest = len(groups) - len(out) + 1
    if rest:
        out.append(f"(… {rest:,} more directories, {total - shown:,} entries)")
    view = "\n".join(out)
    return view if fits(view, limits) else None


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
        """`ls -R`: it opens with a folder header ("dir:") and more follow, each after a blank
        line. `find`: at least 98% of its lines start with the first line's first folder
        ("./", "/usr/") and hardly any reads like something else (grep's `path:12:`, a log,
        `key: value`). Counted over the whole text, a search from newline to newline."""
        first = text[:text.find("\n")] if "\n" in text else text
        ls_like, root = first.endswith(":") and " " not in first, _root(first)
        if not ls_like and root is None:  # neither form can claim it: nothing to count
            return False
        doc = Doc.of(text)
        entries = newlines_and_one(doc) - _counted(doc, _BLANK_LINE)
        if entries < _MIN_ENTRIES:
            return False
        if ls_like and line_hits(_LS_HEADER, text, 2):
            return True
        if root is None:
            return False
        starting = text.count("\n" + root) + (text.startswith(root))
        if starting * 50 < entries * 49:
            return False
        odd = _counted(doc, _KEY_VALUE) + text.count("\t") + len(_GREP_LIKE.findall(text))  # each in C
        return odd * 100 <= entries

    def cut(self, text: str, limits: Limits) -> str | None:
        # the lines reduce split (empty ones are skipped); no name is read when not even one line
        # per directory fits
        groups = _groups(text, Doc.of(text).lines, limits.chars)
        total = sum(n for n, _ in groups.values())
        # with no entry shown, a rendering's lines are some of every other one's (the head and
        # a line per directory): when it does not fit, no rendering does (13k folders: 6 built)
        least = _render(groups, 0, total)
        if not fits(least, limits):
            return _render_dirs(groups, total, limits)
        for per_dir in _PER_DIR:
            view = least if per_dir == 0 else _render(groups, per_dir, total)
            if fits(view, limits):
                return view
        return _render_dirs(groups, total, limits)


#: two-char substrings the tree detection counts: the census says first whether there are any
_BLANK_LINE, _KEY_VALUE = census("\n\n", ": ")
#: `ls -l`'s block opening: only `ls -laR` is searched for it
_TOTAL_LINE, = census("\ntotal ")
#: blank lines in a row: then they are found line by line
_BLANK_RUN, = census("\n\n\n")


def _counted(doc: Doc, needle: str) -> int:
    """`doc.text.count(needle)`, no pass when the census says there is none (most texts: a
    two-char count costs what three one-char ones do). The census reads the text behind a
    newline: a needle that starts with one is also there when the text starts with its rest."""
    return doc.text.count(needle) if doc.has(needle) else 0


def _root(first: str) -> str | None:
    """The part of a `find` listing's first line every line starts with: up to its first
    folder's slash ("./", "/usr/"; "." and "/usr" themselves are the root listed)."""
    if first in (".", "..", "~"):
        return first + "/"
    if not first or any(c in first for c in " \t"):
        return None
    slash = first.find("/", 1)
    return first + "/" if slash < 0 else first[:slash + 1]  # `find src`: "src", then "src/…"


CUT = TreeCut()
