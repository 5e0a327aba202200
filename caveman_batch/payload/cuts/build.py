"""Compiler and bundler output (gcc/clang, tsc, rustc/cargo, esbuild, webpack).

The closing summary first (it is one line and says how bad it is), then each distinct
error with its location (and the first with its code frame), then the other frames, then
warnings with theirs, and only then the repeats of an error; a message repeated is one lead
line with its count and first places. A code frame is the run of indented / gutter lines
after a message.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import partial
from itertools import chain, islice
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, Run, census, finish, line_hits, needle_hits, pick
from ._lines import LineCut, Stream, _hits, by_priority, rx
from .install import INSTALLER, INSTALLER_PROBES

_ERROR = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: (?:fatal )?error:"  # gcc/clang
    r"|[^ \t\n(][^\n(]*\(\d+,\d+\): error TS\d+:"  # tsc
    r"|[^ \t\n:][^\n:]*:\d+:\d+ - error TS\d+:"  # tsc --pretty
    r"|error(?:\[E\d+\])?: "  # rustc
    r"|✘ \[ERROR\]|ERROR in |[^ \t\n:][^\n:]*:\d+: error:"  # javac, mypy
    r"|collect2: error: |(?:[^ \t\n:]*ld: )?[^ \t\n]*:\(\.[\w.]+\+0x[0-9a-f]+\): undefined reference to )"  # the linker
)
_WARNING = rx(
    r"^(?:[^ \t\n:(][^\n:(]*:\d+:\d+: warning:|warning(?:\[\w+\])?: |▲ \[WARNING\]|WARNING in "
    r"|[^ \t\n:(][^\n:(]*:\d+:\d+: note:)"
)
_SUMMARY = rx(
    r"^(?:\d+ (?:errors?|warnings?)(?: and \d+ warnings?)? generated|Found \d+ errors?"
    r"|error: could not compile|make(?:\[\d+\])?: \*\*\*|webpack [\d.]+ compiled"
    r"|[ \t]*Finished |\d+ errors?\r?$|Build failed|error: aborting|collect2: error: "
    r"|make(?:\[\d+\])?: Target .* not remade|warning: .* generated \d+ warnings?)"
)
#: what every line _ERROR or _WARNING matches holds: detection matches only the lines these
#: substrings are on (found by str.find, in C)
_ERROR_NEEDLES: Final = census("error: ", "error[", "error TS", "[ERROR]", "ERROR in ", "undefined reference to ")
_WARNING_NEEDLES: Final = census("warning: ", "warning[", "[WARNING]", "WARNING in ", "note:")
#: what every line _ERROR (_WARNING) matches holds, with or without the text around it: the
#: cut reads only the lines these are on (`Doc.iled`)
_ERROR_LINES: Final = census("error", "ERROR", "undefined reference to ")
_WARNING_LINES: Final = census("warning", "WARNING", "note:")
_FRAME = re.compile(r"[ \t]|\d+ *\||~|\^|\|")
_FRAME_MAX: Final = 12
#: repeated messages the lead groups, and the locations it names for each
_GROUPS: Final = 8
_PLACES: Final = 4
#: error lines read up front to find distinct messages and group repeated ones: about as
#: many as the view could show (one per this many chars of budget), at least _SCAN_MIN
_SCAN_CHARS: Final = 32
_SCAN_MIN: Final = 48


def _frame_runs(doc: Doc, heads: Iterator[int], prio: int) -> Iterator[Run]:
    """The code frame under each message: following indented or gutter lines (lazily), across
    one blank line when indented lines follow it (esbuild puts the location and frame there)."""
    lines, n = doc.lines, len(doc)
    for i in heads:
        end = i + 1
        while end < n and end - i <= _FRAME_MAX:
            line = lines[end]
            if not line and end + 1 < n and lines[end + 1][:1] in (" ", "\t") and end == i + 1:
                end += 1  # the blank line esbuild writes between a message and its location
            elif line and _FRAME.match(line):
                end += 1
            else:
                break
        yield (prio, i, end)


def _message(line: str, words: tuple[str, ...]) -> str:
    """A message line without its location: identical messages at different places match."""
    for word in words:
        at = line.find(word)
        if at >= 0:
            return line[at:] if at > 0 else line
    return line


def _place(doc: Doc, i: int, words: tuple[str, ...]) -> str:
    """Where message line `i` points: its own `file:line:col` prefix, else rustc's `-->` line
    under it, else the location esbuild writes after a blank line."""
    line, lines = doc.lines[i], doc.lines
    at = next((a for a in map(line.find, words) if a >= 0), -1)
    if at > 0:
        return line[:at].rstrip(" :-([").removesuffix(": fatal").rstrip(" :")
    for j in (i + 1, i + 2):
        near = lines[j].strip() if j < len(lines) else ""
        if near.startswith("--> "):
            return near[4:]
        if _is_location(near):
            return near[:-1]
    return f"line {i + 1:,}"


def _is_location(text: str) -> bool:
    """esbuild's location line, stripped: `src/app.tsx:3:22:`."""
    return text.endswith(":") and text.count(":") >= 3 and " " not in text


_ERROR_WORDS: Final = ("error", "ERROR")
_WARNING_WORDS: Final = census("warning", "WARNING")


class _Messages:
    """The lines of one kind (errors, warnings), each marked first of its message or a repeat
    of one seen above.

    Only the first `scan` lines are read up front (a huge log of one error repeated
    must not cost a pass in Python); the repeats are found lazily, as far as the picker
    asks, and a repeated message's count past those is one C-level count."""

    def __init__(self, doc: Doc, pattern: re.Pattern[str], words: tuple[str, ...], scan: int,
                 needles: tuple[str, ...]) -> None:
        self.doc, self.pattern, self.words, self.needles = doc, pattern, words, needles
        self.lines = list(islice(doc.iled(pattern, needles), scan))
        self.messages = [_message(doc.lines[i], words) for i in self.lines]
        self.complete = len(self.lines) < scan  # every line of the kind is among them
        seen: set[str] = set()
        # a message's first line, in order: what a user fixes first
        self.first = [i for i, m in zip(self.lines, self.messages) if not (m in seen or seen.add(m))]  # type: ignore[func-returns-value]

    def repeats(self) -> Iterator[int]:
        """The other lines, in order, lazily: those read first, then (searched again only if
        the picker gets that far) the ones after them."""
        first = set(self.first)
        rest = () if self.complete else islice(self.doc.iled(self.pattern, self.needles), len(self.lines), None)
        return chain((i for i in self.lines if i not in first), rest)

    def last(self) -> list[int]:
        """The last line of the kind when it repeats a message and every line was read (else
        finding it would cost a pass over the whole text)."""
        if not self.complete or not self.lines or self.lines[-1] in self.first:
            return []
        return self.lines[-1:]

    def runs(self, which: Iterable[int], prio: int) -> Iterator[Run]:
        """Each message line with its location when that is under it: rustc's `-->` line, or
        esbuild's `file:line:col:` after a blank line."""
        lines, n = self.doc.lines, len(self.doc)
        for i in which:
            end = i + 1
            if end < n and lines[end].lstrip().startswith("--> "):
                end += 1
            elif end + 1 < n and not lines[end] and _is_location(lines[end + 1].strip()):
                end += 2
            yield (prio, i, end)

    def _count(self, message: str, seen: int) -> int:
        """How many lines end with `message`: counted among the lines read, or over the whole
        text when there may be more."""
        if self.complete:
            return seen
        text = self.doc.text
        return text.count(message + "\n") + (text.endswith(message) and not text.endswith("\n"))

    def lead(self, groups: int) -> list[str]:
        """One line per message repeated, most repeated first: its count and where it is."""
        if len(self.first) == len(self.lines):
            return []
        counts = {m: self._count(m, k) for m, k in Counter(self.messages).most_common(groups) if k > 1}
        places: dict[str, list[str]] = {m: [] for m in counts}
        for i, m in zip(self.lines, self.messages):
            found = places.get(m)
            if found is not None and len(found) < _PLACES:
                found.append(_place(self.doc, i, self.words))
        return [f"[×{k:,} {m}; at {', '.join(places[m])}"
                f"{f' and {k - len(places[m]):,} more' if k > len(places[m]) else ''}]"
                for m, k in sorted(counts.items(), key=lambda mk: -mk[1])]


class BuildCut(LineCut):
    def detect(self, text: str, hint: Hint) -> bool:
        """An error line, or two warning lines (a build that passed with warnings), anywhere in
        the text; not when pip or npm ran the compiler (the install cut names the package)."""
        if not (needle_hits(_ERROR, text, _ERROR_NEEDLES, 1) or needle_hits(_WARNING, text, _WARNING_NEEDLES, 2)):
            return False
        return not (Doc.of(text).holds(INSTALLER_PROBES) and line_hits(INSTALLER, text, 1))

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        scan = max(_SCAN_MIN, limits.chars // _SCAN_CHARS)
        errors = _Messages(doc, _ERROR, _ERROR_WORDS, scan, _ERROR_LINES)  # once, for the lead and the runs
        # warnings are read up front (and grouped) only when the text has any (the census
        # says): else they are searched only if the picker gets to them
        warnings = (_Messages(doc, _WARNING, _WARNING_WORDS, scan, _WARNING_LINES)
                    if doc.holds(_WARNING_WORDS) else None)
        lead = errors.lead(_GROUPS) + (warnings.lead(_GROUPS // 2) if warnings else [])
        view = pick(doc, by_priority(self._streams(doc, errors, warnings)), limits, lead=lead,
                    presorted=True, lead_after=self.lead_after)
        return finish(view, limits)

    def _streams(self, doc: Doc, errors: _Messages, warnings: _Messages | None) -> list[Stream]:
        """Distinct errors (the first with its frame), their frames, distinct warnings, theirs,
        then the repeats of errors and warnings with their frames."""
        first = [(1, lambda: _frame_runs(doc, iter(errors.first[:1]), 1))] if errors.first else []
        streams: list[Stream] = [
            (0, partial(_hits, doc, _SUMMARY, (), 0, 0)), (1, lambda: errors.runs(errors.first, 1)), *first,
            (2, lambda: _frame_runs(doc, iter(errors.first), 2)),
            # the last error of the run next (where a cascade ended), then the other repeats
            (5, lambda: errors.runs(errors.last(), 5)),
            (6, lambda: errors.runs(errors.repeats(), 6)), (7, lambda: _frame_runs(doc, errors.repeats(), 7))]
        if warnings is not None:
            streams += [(3, lambda: warnings.runs(warnings.first, 3)),
                        (4, lambda: _frame_runs(doc, iter(warnings.first), 4)),
                        (8, lambda: warnings.runs(warnings.repeats(), 8)),
                        (9, lambda: _frame_runs(doc, warnings.repeats(), 9))]
        else:
            streams += [(3, lambda: ((3, i, i + 1) for i in doc.iled(_WARNING, _WARNING_LINES))),
                        (4, lambda: _frame_runs(doc, doc.iled(_WARNING, _WARNING_LINES), 4))]
        return streams


CUT = BuildCut(name="build", signal=_ERROR, keep=(), min_hits=1, lead_after=1)
