"""The cuts, in the order they are tried, named by "module:attr" and loaded lazily.

Outside cuts register through the entry-point group below; they are tried after
the built-in content cuts and before the size fallback, so a plugin can claim a
format nobody knows without shadowing one that is already handled. A plugin that
fails to load is skipped with a warning; a reduce never crashes on it.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points
from typing import Final

from .cuts.size import for_hint
from .model import Cut, Hint

ENTRY_POINT_GROUP: Final = "caveman_batch.payload_cuts"

# Why this order: diff and tests have unmistakable markers and must win over the
# lines they contain (a diff of a log is a diff; a failing pytest run holds tracebacks);
# lint and build come before csv so "a.ts(3,5): error TS2322: x, y" is never a table.
BUILTIN: Final[tuple[str, ...]] = (
    "caveman_batch.payload.cuts.diff:CUT",
    "caveman_batch.payload.cuts.tests:CUT",
    "caveman_batch.payload.cuts.lint:CUT",
    "caveman_batch.payload.cuts.build:CUT",
    "caveman_batch.payload.cuts.stacktrace:CUT",
    "caveman_batch.payload.cuts.json_cut:CUT",
    "caveman_batch.payload.cuts.gitlog:CUT",
    "caveman_batch.payload.cuts.install:CUT",
    "caveman_batch.payload.cuts.csv_cut:CUT",
    "caveman_batch.payload.cuts.log:CUT",
    "caveman_batch.payload.cuts.tree:CUT",
    "caveman_batch.payload.cuts.repeat:CUT",
    "caveman_batch.payload.cuts.code:CUT",
)


def load(target: str) -> Cut:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]


@cache
def _builtin() -> tuple[Cut, ...]:
    return tuple(load(t) for t in BUILTIN)


@cache
def _plugins() -> tuple[tuple[Cut, ...], tuple[str, ...]]:
    """Entry points are read once per process: scanning metadata costs more than a cut."""
    found: list[Cut] = []
    warnings: list[str] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cut = ep.load()
            cut = cut() if isinstance(cut, type) else cut
            if not isinstance(cut, Cut):
                raise TypeError("does not implement the Cut protocol (name, detect, cut)")
        except Exception as exc:  # a broken plugin is skipped, never fatal  # noqa: BLE001
            warnings.append(f"payload cut plugin {ep.name!r} skipped: {exc!r}")
            continue
        found.append(cut)
    return tuple(found), tuple(warnings)


def refresh() -> None:
    """Forget the loaded plugins (after installing one, and in tests)."""
    _plugins.cache_clear()


def cuts(hint: Hint, warnings: list[str]) -> list[Cut]:
    """Every cut in the order tried; problems loading plugins go to `warnings`."""
    plugins, problems = _plugins()
    warnings.extend(problems)
    return [*_builtin(), *plugins, for_hint(hint)]
