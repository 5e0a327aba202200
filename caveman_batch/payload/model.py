"""The shapes `reduce` works with: what the caller says (hint, budget), what a cut is,
and what comes back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from ..errors import BudgetError

# A budget below these cannot hold a marker, a line and the footer naming a handle.
MIN_CHARS: Final = 400
MIN_LINE_CHARS: Final = 256
MIN_LINES: Final = 5


@dataclass(frozen=True, slots=True)
class Hint:
    """What produced the output, when the caller knows: routes cuts and the size fallback."""

    tool: str | None = None
    command: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True)
class Budget:
    """The most the view may hold, every marker and the footer included."""

    max_chars: int = 20_000
    max_lines: int | None = None
    max_line_chars: int | None = None

    def __post_init__(self) -> None:
        for name, least in (("max_chars", MIN_CHARS), ("max_lines", MIN_LINES),
                            ("max_line_chars", MIN_LINE_CHARS)):
            value = getattr(self, name)
            if value is not None and value < least:
                raise BudgetError(name, value, least)


@dataclass(frozen=True, slots=True)
class Limits:
    """A budget as a cut sees it: the footer's room already taken out, no floors."""

    chars: int
    lines: int | None = None
    line_chars: int | None = None


@dataclass(frozen=True, slots=True)
class Stats:
    chars_before: int
    chars_after: int
    lines_before: int
    lines_after: int
    omitted: str  # in the cut's own words, e.g. "597 passing tests, 3,000 lines"

    def as_dict(self) -> dict[str, object]:
        return {"chars_before": self.chars_before, "chars_after": self.chars_after,
                "lines_before": self.lines_before, "lines_after": self.lines_after,
                "omitted": self.omitted}


@dataclass(frozen=True, slots=True)
class PayloadResult:
    content: str
    strategy: str  # the cut's name; "none" when the output already fit
    note: str
    stats: Stats
    handle: str | None = None
    warnings: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        return {"strategy": self.strategy, "note": self.note, "handle": self.handle,
                "stats": self.stats.as_dict(), "warnings": list(self.warnings)}


@runtime_checkable
class Cut(Protocol):
    """One content-aware cut. `cut` returns a view within `limits`, or None to pass."""

    @property  # read-only: a frozen dataclass's field or a class attribute satisfies it
    def name(self) -> str: ...

    def detect(self, text: str, hint: Hint) -> bool: ...

    def cut(self, text: str, limits: Limits) -> str | None: ...
