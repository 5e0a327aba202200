"""Where each tool object lies in a catalog's bytes, and what the index needs of it.

`tool_spans(raw)` gives the byte range of every tool object `catalog.locate_tools` finds,
so that each tool's exact original bytes can be stored on their own (recover gives them
back byte for byte). It follows the path the compressor takes to the tools (TOOLS_PATH,
the plan's kinds) over the bytes with a small JSON scanner, and every slice is checked by
parsing it and comparing it with the tool parsed from the whole document: a span that
does not check out is never returned.

`index_entries(raw, out)` is what a pipeline worker computes per document for the
index (pure: bytes in, bytes and strings out): the catalog's label, and per tool its
name, its original bytes, its compressed definition and its search text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

import orjson

from .catalog import TOOLS_PATH, Passthrough, _plan, locate_tools, parse, serialize
from .toolsearch import search_fields

_WS: Final = re.compile(r"[ \t\r\n]*")
_DECODER: Final = json.JSONDecoder()  # its C scanner finds where a value ends


def _skip_ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _value_end(text: str, i: int) -> int:
    """End of the JSON value starting at i (the document is known to be valid JSON)."""
    return _DECODER.raw_decode(text, i)[1]


def _elements(text: str, i: int) -> list[tuple[int, int]]:
    """(start, end) of each element of the array at i."""
    spans: list[tuple[int, int]] = []
    i = _skip_ws(text, i + 1)
    if text[i] == "]":
        return spans
    while True:
        end = _value_end(text, i)
        spans.append((i, end))
        i = _skip_ws(text, end)
        if text[i] == "]":
            return spans
        i = _skip_ws(text, i + 1)  # past ','


def _member(text: str, i: int, key: str) -> int | None:
    """Start of the value of `key` in the object at i, or None."""
    i = _skip_ws(text, i + 1)
    if text[i] == "}":
        return None
    while True:
        name, key_end = _DECODER.raw_decode(text, i)
        i = _skip_ws(text, _skip_ws(text, key_end) + 1)  # past ':'
        if name == key:
            return i
        i = _skip_ws(text, _value_end(text, i))
        if text[i] == "}":
            return None
        i = _skip_ws(text, i + 1)


def _byte_offsets(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character offsets (in order) as UTF-8 byte offsets, in one pass over the text."""
    if text.isascii():
        return spans
    done_chars = done_bytes = 0
    out = []
    for start, end in spans:
        done_bytes += len(text[done_chars:start].encode("utf-8", "surrogatepass"))
        first = done_bytes
        done_bytes += len(text[start:end].encode("utf-8", "surrogatepass"))
        done_chars = end
        out.append((first, done_bytes))
    return out


def load(raw: bytes) -> Any:
    """raw parsed: by orjson (fast) when it can hold every number, else by catalog.parse
    (strict, literals kept). Passthrough if it is not one JSON document."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return parse(raw)  # a BOM, an integer over 64 bits, or really not JSON: it says why


def _same(piece: bytes, tool: dict[str, Any]) -> bool:
    """Whether `piece` parses to `tool`."""
    try:
        return load(piece) == tool
    except (Passthrough, RecursionError):
        return False


def tool_spans(raw: bytes, doc: Any | None = None) -> list[tuple[int, int]] | None:
    """(start, end) of each tool object in `raw`, in locate_tools' order; None if `raw`
    is not a catalog or a span does not check out. `doc`: raw already parsed by
    `load` (parsed here if not given)."""
    try:
        if doc is None:
            doc = load(raw)
        shape, tools = locate_tools(doc)
    except (Passthrough, RecursionError):
        return None
    plan = _plan(doc, shape, tools)
    if plan is None:
        return None
    path, kinds = plan
    try:
        text = raw.decode("utf-8")
        spans = _spans(text, path, kinds)
    except (ValueError, IndexError, AttributeError, RecursionError):
        return None
    if spans is None or len(spans) != len(tools):
        return None
    spans = _byte_offsets(text, spans)
    if not all(_same(raw[a:b], tool) for (a, b), tool in zip(spans, tools)):
        return None
    return spans


def _spans(text: str, path: tuple[str, ...], kinds: bytes | int) -> list[tuple[int, int]] | None:
    """Character spans of the tools, following the plan catalog._plan made."""
    at: int | None = _skip_ws(text, 1 if text.startswith("\ufeff") else 0)
    for key in path:
        at = _member(text, at, key) if at is not None and text[at] == "{" else None
    if at is None:
        return None
    if isinstance(kinds, int):  # a single tool: the container, or its "function"
        return [_kind_span(text, at, kinds)]
    if text[at] != "[":
        return None
    elements = _elements(text, at)
    if len(elements) != len(kinds):
        return None
    return [_kind_span(text, start, kind) for (start, _), kind in zip(elements, kinds) if kind]


def _kind_span(text: str, start: int, kind: int) -> tuple[int, int]:
    if kind == 2:
        inner = _member(text, start, "function")
        if inner is None:
            raise ValueError("no function member")
        start = inner
    return start, _value_end(text, start)


# -- what a worker computes for the index ----------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolEntry:
    name: str
    original: bytes  # the tool object's exact bytes in the source
    definition: str  # the compressed tool object, compact JSON
    fields: dict[str, str]


_WRAPPED: Final = frozenset({"mcp-tools", "jsonrpc-tools-list", "openai-functions"})


def _label(doc: Any, shape: str) -> str | None:
    """A catalog's own name, if its wrapper says one ("server", "name"; a single tool's
    "name" is the tool's)."""
    if shape in _WRAPPED:
        for key in ("server", "name"):
            value = doc.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def index_entries(raw: bytes, out: bytes) -> tuple[str | None, list[ToolEntry]] | None:
    """(label, entries) of one document for the index, or None if it holds no tools.

    Search text comes from the original tools, definitions from the output (compact:
    a passthrough's tools are re-serialized, number literals as written)."""
    try:
        doc = load(raw)
        shape, tools = locate_tools(doc)
    except (Passthrough, RecursionError):
        return None
    if not tools:
        return None
    spans = tool_spans(raw, doc)
    if spans is None:
        return None
    if out is raw or out == raw:
        definitions = [serialize(parse(raw[a:b])) for a, b in spans]  # literals as written
    else:
        out_spans = tool_spans(out)
        if out_spans is None or len(out_spans) != len(tools):
            return None
        definitions = [out[a:b] for a, b in out_spans]
    entries = [ToolEntry(str(tool.get("name", "")), raw[a:b], definition.decode("utf-8"),
                         search_fields(tool))
               for tool, (a, b), definition in zip(tools, spans, definitions)]
    return _label(doc, shape), entries
