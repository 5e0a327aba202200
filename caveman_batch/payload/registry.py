"""The cuts, in the order they are tried, named by "module:attr" and loaded lazily.

Outside cuts register through the entry-point group below; they are tried after
the built-in content cuts and before the size fallback, so a plugin can claim a
format nobody knows without shadowing one that is already handled. A plugin that
fails to load is skipped with a warning; a reduce never crashes on it.
"""

from __future__ import annotations

import importlib
import re
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
    return getattr(importlib.import_module(module_name), attr)


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
            name = cut.name
            if not isinstance(name, str) or not name or not name.isprintable():
                # (the footer names the cut: a name of another type, or one holding a
                # newline, would break the view after its original was stored)
                raise TypeError(f"its name {name!r} is not a word of printable text")
        except Exception as exc:  # a broken plugin is skipped, never fatal
            warnings.append(f"payload cut plugin {ep.name!r} skipped: {exc!r}")
            continue
        found.append(cut)
    return tuple(found), tuple(warnings)


def refresh() -> None:
    """Forget the loaded plugins (after installing one, and in tests)."""
    _plugins.cache_clear()


#: what a command (or an MCP tool's name) says its output is, where that is clear: the cut
#: named goes first (it must still claim the text). `git log -p` is a log with patches, not a
#: diff; pip running gcc is an install, not a build.
_HINTED: Final = (
    (re.compile(r"^git(?: -\S+)* (?:log|show|whatchanged)\b|^git_(?:log|show)\b"), "gitlog"),
    (re.compile(r"^git(?: -\S+)* diff\b|^git_diff"), "diff"),
    (re.compile(r"^(?:pip3?|uv pip|python3?(?:\.\d+)? -m pip) (?:install|download|wheel)\b"
                r"|^(?:npm|pnpm|yarn) (?:install|i|ci|add)\b"), "install"),
    (re.compile(r"^(?:make|gmake|gcc|g\+\+|cc|clang|clang\+\+|javac|tsc|cargo (?:build|check|rustc))\b"),
     "build"),
)


def hinted(hint: Hint) -> str | None:
    """The cut a hint's command (else its tool name) names, if any."""
    for said in (hint.command, hint.tool):
        if not said:
            continue
        program = said.strip()
        program = program.split("/", program.count("/"))[-1] if program.startswith("/") else program
        for pattern, name in _HINTED:
            if pattern.search(program):
                return name
    return None


def cuts(hint: Hint, warnings: list[str]) -> list[Cut]:
    """Every cut in the order tried, the one a clear hint names first; problems loading
    plugins go to `warnings`."""
    plugins, problems = _plugins()
    warnings.extend(problems)
    order = [*_builtin(), *plugins]
    name = hinted(hint)
    if name is not None:
        order.sort(key=lambda cut: cut.name != name)  # stable: the rest keep their order
    return [*order, for_hint(hint)]
