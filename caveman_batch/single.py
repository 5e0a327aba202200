"""One catalog at a time: what `shrink`, `lint` and `profile` do, as library calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import ccr
from .catalog import (
    DEFAULT_OPTIONS,
    Options,
    Passthrough,
    compress,
    locate_tools,
    parse,
    rewrite,
    serialize,
    tool_pointers,
)
from .errors import StoreError
from .store import open_store, printable
from .tokens import BASIS, ENCODING, count_tokens


@dataclass
class ShrinkOutcome:
    output: bytes
    report: dict[str, Any]


def shrink(raw: bytes, source: str, store_url: str | None,
           options: Options = DEFAULT_OPTIONS) -> ShrinkOutcome:
    """Compress one catalog and commit its original BEFORE the output is handed back.

    If the store cannot be opened or written, the original passes through unchanged
    and no handle is given: an output never names an original that is not stored.
    """
    output, result = compress(raw, options)
    report: dict[str, Any] = {"source": source, **result.as_dict(), "handle": None,
                              "store": None if store_url is None else printable(store_url)}
    if store_url is None:
        return ShrinkOutcome(output, report)
    try:
        with open_store(store_url) as store:
            report["handle"] = ccr.store_original(store, raw, result.content_type)
    except StoreError as exc:
        report.update(status="passthrough", reason=f"store unavailable: {exc}",
                      bytes_after=len(raw), tokens_after=report["tokens_before"], ratio=0.0,
                      descriptions_reduced=0, annotations_dropped=0)
        return ShrinkOutcome(raw, report)
    return ShrinkOutcome(output, report)


@dataclass
class ToolLint:
    name: str
    tokens_before: int
    tokens_after: int
    changes: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tokens_before": self.tokens_before,
                "tokens_after": self.tokens_after, "changes": self.changes}


def lint(raw: bytes, source: str, options: Options = DEFAULT_OPTIONS) -> dict[str, Any]:
    """Per tool: tokens before/after (compact JSON of the tool) and every change made.

    The catalog's totals count the input as given (white space included) and the
    output; a tool's line counts that tool's compact JSON before and after.
    """
    try:
        return _lint(raw, source, options)
    except (Passthrough, UnicodeEncodeError) as exc:  # what compress() would pass through
        reason = str(exc) if isinstance(exc, Passthrough) else "a lone surrogate escape"
        return {"source": source, "status": "passthrough", "reason": reason, "tools": []}


def _lint(raw: bytes, source: str, options: Options) -> dict[str, Any]:
    doc = parse(raw)
    shape, tools = locate_tools(doc)
    pointers = tool_pointers(doc, shape, tools)  # (before the rewrite, which is in place)
    before = [(str(t.get("name")), count_tokens(serialize(t))) for t in tools]
    trace: list[dict[str, Any]] = []
    shape, _, _ = rewrite(doc, options, trace)
    report = []
    for changes, (name, tokens_before), tool in zip(_by_tool(trace, pointers), before, tools):
        report.append(ToolLint(name, tokens_before, count_tokens(serialize(tool)), changes).as_dict())
    return {"source": source, "status": "ok", "shape": shape, "encoding": ENCODING,
            "basis": BASIS, "tokens_before": count_tokens(raw),
            "tokens_after": count_tokens(serialize(doc)), "tools": report}


def _by_tool(trace: list[dict[str, Any]], pointers: list[str]) -> list[list[dict[str, Any]]]:
    """Each tool's changes (those whose path lies under its pointer), in trace order: each
    change's tool found by its path's prefixes in one pass (a filter of the whole trace per
    tool took the square of the catalog's size: 26 s for 8,000 tools; by that square, hours
    near the default --max-bytes)."""
    index = {pointer: i for i, pointer in enumerate(pointers)}
    grouped: list[list[dict[str, Any]]] = [[] for _ in pointers]
    for change in trace:
        path = change["path"]
        at = path.find("/")
        while at != -1:
            i = index.get(path[:at])
            if i is not None:  # (the tools' pointers are siblings: none lies under another)
                grouped[i].append(change)
                break
            at = path.find("/", at + 1)
    return grouped
