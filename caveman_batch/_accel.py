"""The optional C accelerators: the compiled module, or None.

`setup.py` builds them when a C compiler is there. They never decide anything on
their own: each returns None whenever its input is outside what it handles exactly,
and the caller then runs the pure-Python reference path, which defines the output.
Tests compare the two on every corpus catalog and on random input.

CAVEMAN_PURE_PYTHON=1 in the environment turns them off (to compare, or to rule
them out when reporting a bug).
"""

from __future__ import annotations

import os
from types import ModuleType

DISABLED: bool = os.environ.get("CAVEMAN_PURE_PYTHON", "") not in ("", "0")


def _load(name: str) -> ModuleType | None:
    if DISABLED:
        return None
    try:
        return __import__(f"caveman_batch.{name}", fromlist=[name])
    except ImportError:
        return None


fastwalk: ModuleType | None = _load("_fastwalk")
fastreduce: ModuleType | None = _load("_fastreduce")
fastcount: ModuleType | None = _load("_fastcount")
fastscan: ModuleType | None = _load("_fastscan")
fastmean: ModuleType | None = _load("_fastmean")


def status() -> dict[str, bool]:
    """Which accelerators are active (shown by `caveman-batch --version` and in reports)."""
    return {"fastwalk": fastwalk is not None, "fastreduce": fastreduce is not None,
            "fastcount": fastcount is not None, "fastscan": fastscan is not None,
            "fastmean": fastmean is not None}
