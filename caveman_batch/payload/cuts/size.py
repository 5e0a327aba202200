"""The size fallback: whole lines from the head, the tail or both ends.

Which end matters depends on the tool: a shell command says what happened at the
end (exit status, last error), a search or a file read says it at the start.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Final, Literal

from ..model import Hint, Limits
from ..view import Doc, Run, finish, pick

Mode = Literal["head", "tail", "both"]
_SHELL: Final = re.compile(r"bash|\bsh\b|zsh|shell|terminal|\brun|exec|make|command|console")
_READ: Final = re.compile(r"grep|\brg\b|read|cat\b|search|find|\bls\b|glob|view|head|list|fetch")


def mode_for(hint: Hint) -> Mode:
    """By the tool's name, else by the program the command ran (`rg foo` reads, `make` runs)."""
    tool = (hint.tool or (hint.command or "").split(" ", 1)[0].rsplit("/", 1)[-1]).lower()
    if _READ.search(tool):
        return "head"
    if _SHELL.search(tool):
        return "tail"
    return "both"


def _runs(n: int, mode: Mode) -> Iterator[Run]:
    """One line at a time, most wanted first (already in priority order)."""
    if mode == "head":
        yield from ((i, i, i + 1) for i in range(n))
    elif mode == "tail":
        yield from ((n - 1 - i, i, i + 1) for i in range(n - 1, -1, -1))
    else:
        for k in range((n + 1) // 2):
            yield (k, k, k + 1)
            yield (k, n - 1 - k, n - k)


@dataclass(frozen=True, slots=True)
class SizeCut:
    mode: Mode
    name: str = "size"

    def detect(self, text: str, hint: Hint) -> bool:
        return True

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        runs = _runs(len(doc), self.mode)
        if self.mode == "tail" and len(doc) > 2 and _is_header(doc.lines[0]):
            runs = chain([(-1, 0, 1)], runs)  # the rows kept mean nothing without their columns' names
        return finish(pick(doc, runs, limits, presorted=True), limits)


#: a table's header (`pip list`, `ps aux`, `docker ps`, `kubectl get`): column names in
#: columns (two spaces or a tab apart), none starting with a digit, no sentence punctuation
_HEADER: Final = re.compile(r"[A-Za-z%#][^\d\t:;,.=()\[\]{}\\/\n]*(?: {2,}|\t)[A-Za-z%#][^\t:;,.=()\[\]{}\\/\n]*")


def _is_header(line: str) -> bool:
    return (len(line) <= 400 and _HEADER.fullmatch(line.rstrip()) is not None
            and not any(word[0].isdigit() for word in line.split()))


def for_hint(hint: Hint) -> SizeCut:
    mode = mode_for(hint)
    return SizeCut(mode, f"size-{mode}")
