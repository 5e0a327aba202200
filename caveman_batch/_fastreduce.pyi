"""Type stub for the C extension caveman_batch._fastreduce (source: _fastreduce.c)."""

from collections.abc import Iterable, Sequence
from typing import Final, TypedDict

class _Configuration(TypedDict):
    fragments: tuple[str, ...]  # what the rule DFA was compiled from (rules._ALL)
    abbreviations: frozenset[str]  # describe._ABBREVIATIONS
    dfa_states: int
    byte_classes: int
    sigma_sensitive: int  # a fragment holds a Greek letter: texts with "Σ" go to Python

# The Python source mirrored by hand ("describe._SPANS": its pattern, ...); tests compare.
MIRRORED: Final[dict[str, str | int]]

def configure(fragments: Iterable[str], abbreviations: Iterable[str], /) -> None:
    """Compile the rule fragments and load the abbreviations (describe.py does this on import).

    Raises ValueError for a fragment outside the regex subset it compiles; the previous
    configuration then stays in effect.
    """

def configuration() -> _Configuration | None:
    """What configure() compiled, or None before it ran."""

def reduce(text: str, short_bytes: int, lead_bytes: int, /) -> str | None:
    """describe.explain(text, short_bytes=..., lead_bytes=...).text, or None to run the Python path."""

# The stages of reduce(), run alone by the same code (for tests and benchmarks). Each takes a
# folded text (describe.fold(text) == text, else ValueError) and answers None where reduce()
# would leave the text to Python (or before configure()). Offsets are str indices.

def split_sentences(text: str, /) -> list[tuple[int, int]] | None:
    """(start, end) of each sentence of describe.split_sentences(text)."""

def units(text: str, /) -> list[tuple[int, int]] | None:
    """(start, end) of each unit of describe.units(text)."""

def rule_units(text: str, spans: Sequence[tuple[int, int]], /) -> list[bool] | None:
    """Per span: RuleScan(text).states_rule(s, e) or opens_with_instruction(text[s:e]).

    What describe._reduce_once asks of each unit. A span outside the text raises IndexError.
    """
