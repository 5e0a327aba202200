"""Reversible, content-aware compression of large tool outputs (`caveman-batch payload`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import reduce
    from .model import Budget, Cut, Hint, Limits, PayloadResult, Stats

__all__ = ["Budget", "Cut", "Hint", "Limits", "PayloadResult", "Stats", "reduce"]
_FROM = {"reduce": ".core", **dict.fromkeys(("Budget", "Cut", "Hint", "Limits", "PayloadResult", "Stats"), ".model")}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use: `caveman-batch` starts without the cuts."""
    where = _FROM.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value
