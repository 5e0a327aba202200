"""Reversible, content-aware compression of large tool outputs (`caveman-batch payload`)."""

from __future__ import annotations

from .core import reduce
from .model import Budget, Cut, Hint, Limits, PayloadResult, Stats

__all__ = ["Budget", "Cut", "Hint", "Limits", "PayloadResult", "Stats", "reduce"]
