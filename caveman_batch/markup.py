"""The markup of a description that reduction keeps as written.

Three shapes (see `describe` for what the reducer does with them):

* A fenced block: a line opening with ``` or ~~~ (indented or not, a language or
  other words after it; a backtick fence's words hold no backtick), up to the first
  later line holding only a fence of the same character at least as long, or to the
  end of the text when none closes it. The block runs from the start of its opening
  line (indentation included) to the last character of its closing fence (of the
  text, when unclosed).
* A line that stands alone: a Markdown heading (one to six "#" then white space, or
  the end of the line) or a line holding one tag and nothing else ("<hints>",
  "</hints>").
* A paired tag: "<word>" and a later "</word>" outside every block, paired as
  nested markup is (a closing tag closes the nearest open tag of its name; a tag
  left without a partner is plain text).

`may_hold` is the cheap test every description passes first: on a text it refuses,
the reducer runs exactly as it would without this module, and the C reducer mirrors
only those texts (it hands every other one back to Python, see _fastreduce.c).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Final

# What any of the shapes needs somewhere: a line opening with ``` ~~~ # or a tag, or
# a closing tag. Mirrored by has_markup() in _fastreduce.c (MIRRORED there).
MARKUP: Final = re.compile(r"^[^\S\n]*(?:```|~~~|#|<[A-Za-z/])|</[A-Za-z]", re.MULTILINE)
# An opening fence at a line start: the run is possessive (a backtracking run would
# re-read the line once per backtick), a backtick fence's words hold no backtick.
_OPENING: Final = re.compile(r"^[^\S\n]*+(?:(`{3,}+)(?=[^`\n]*$)|(~{3,}+))", re.MULTILINE)
_CLOSING: Final = re.compile(r"^[^\S\n]*+(`{3,}+|~{3,}+)[^\S\n]*$", re.MULTILINE)
# A line that stands alone, from its start (leading white space allowed); anchored,
# so that a scan does not re-read a run of white space from each of its characters.
_ALONE: Final = re.compile(r"^[^\S\n]*+(?:#{1,6}(?=\s|\Z)|</?[A-Za-z][\w-]*>[^\S\n]*(?=\n|\Z))", re.MULTILINE)
_TAG: Final = re.compile(r"<(/?)([A-Za-z][\w-]*)>")


def may_hold(text: str) -> bool:
    """Can `text` hold a fenced block, a line that stands alone or a paired tag?"""
    # str.__contains__ runs at C speed; the pattern only where one of them is there
    return ("```" in text or "~~~" in text or "#" in text or "<" in text) and MARKUP.search(text) is not None


def fenced_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of every fenced block of `text`, in order (see the module docstring)."""
    blocks: list[tuple[int, int]] = []
    pos = 0
    while (opening := _OPENING.search(text, pos)) is not None:
        fence = opening.group(1) or opening.group(2)
        start = opening.start()  # the opening line's indentation is the block's
        end = len(text.rstrip())  # unclosed: the rest of the text
        pos = len(text)
        for closing in _CLOSING.finditer(text, opening.end()):
            run = closing.group(1)
            if closing.start() > opening.end() and run[0] == fence[0] and len(run) >= len(fence):
                end, pos = closing.end(1), closing.end()
                break
        blocks.append((start, end))
    return blocks


def opens_block(text: str) -> bool:
    """Does `text` open with a fenced block's opening line?"""
    return _OPENING.match(text) is not None


def lone_tag_line(text: str) -> bool:
    """Is `text` one tag and nothing else (white space aside)?"""
    return _TAG.fullmatch(text.strip(" \t")) is not None


def stands_alone_at(text: str, line_start: int) -> bool:
    """Is the line of `text` that starts at `line_start` (0 or just after a "\\n") a
    heading or a lone tag?"""
    return _ALONE.match(text, line_start) is not None


@dataclass(frozen=True, slots=True)
class Pair:
    """A paired tag: the spans of its opening and closing tags; alone when each has its own line."""

    open_start: int
    open_end: int
    close_start: int
    close_end: int
    alone: bool


@dataclass(frozen=True, slots=True)
class Markup:
    """The markup of one folded description: its blocks, lines that stand alone, paired tags."""

    blocks: list[tuple[int, int]]
    alone_lines: frozenset[int]  # where each line that stands alone starts (outside blocks)
    pairs: list[Pair]  # in the order they close
    lone_tags: dict[int, int]  # start -> end of each tag of the pairs that stand alone
    tag_starts: list[int]  # where each tag of a pair starts, in order

    def _block(self, pos: int) -> tuple[int, int] | None:
        i = bisect_right(self.blocks, (pos, 1 << 62)) - 1
        return self.blocks[i] if i >= 0 else None

    def in_block(self, pos: int) -> bool:
        block = self._block(pos)
        return block is not None and pos < block[1]

    def block_at(self, pos: int) -> bool:
        """Does a block start at `pos`?"""
        block = self._block(pos)
        return block is not None and block[0] == pos

    def block_ends_at(self, pos: int) -> bool:
        block = self._block(pos - 1)
        return block is not None and block[1] == pos

    def tag_between(self, start: int, end: int) -> bool:
        """Does a tag of a pair start in [start, end)?"""
        i = bisect_right(self.tag_starts, start - 1)
        return i < len(self.tag_starts) and self.tag_starts[i] < end


def of(text: str) -> Markup | None:
    """The markup of folded `text`, or None when it holds none (the common case)."""
    if not may_hold(text):
        return None
    blocks = fenced_blocks(text)
    outside = Markup(blocks, frozenset(), [], {}, [])  # for in_block() alone
    alone = frozenset(m.start() for m in _ALONE.finditer(text) if not outside.in_block(m.start()))
    pairs = _pairs(text, outside)
    if not (blocks or alone or pairs):
        return None
    lone = {start: end for p in pairs if p.alone
            for start, end in ((p.open_start, p.open_end), (p.close_start, p.close_end))}
    tags = sorted(start for p in pairs for start in (p.open_start, p.close_start))
    return Markup(blocks, alone, pairs, lone, tags)


def _pairs(text: str, outside: Markup) -> list[Pair]:
    """Paired tags outside blocks: a closing tag closes the nearest open tag of its name."""
    if "</" not in text:
        return []
    pairs: list[Pair] = []
    stack: list[tuple[str, int, int]] = []
    depth_of: dict[str, list[int]] = {}  # name -> its open tags' places in the stack
    for tag in _TAG.finditer(text):
        if outside.in_block(tag.start()):
            continue
        name = tag.group(2)
        if not tag.group(1):
            depth_of.setdefault(name, []).append(len(stack))
            stack.append((name, tag.start(), tag.end()))
            continue
        if not depth_of.get(name):
            continue  # a closing tag nothing opened: plain text
        depth = depth_of[name][-1]
        _, start, end = stack[depth]
        while len(stack) > depth:  # open tags left inside are plain text: each is popped once
            depth_of[stack.pop()[0]].pop()
        alone = _alone(text, start, end) and _alone(text, tag.start(), tag.end())
        pairs.append(Pair(start, end, tag.start(), tag.end(), alone))
    return pairs


def _alone(text: str, start: int, end: int) -> bool:
    # folded text: a lone tag's line is exactly the tag (fold kept the breaks around it)
    return (start == 0 or text[start - 1] == "\n") and (end == len(text) or text[end] == "\n")
