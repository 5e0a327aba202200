"""Where each tool object lies in a catalog's bytes, and what the index needs of it.

`tool_spans(raw)` gives the byte range of every tool object `catalog.locate_tools` finds,
so that each tool's exact original bytes can be stored on their own (recover gives them
back byte for byte). It follows the path the compressor takes to the tools (TOOLS_PATH,
the plan's kinds) over the bytes: by the C walker when it can (it reads the document as
strictly as the compressor's C path, so its spans are the tools' values), else by a small
JSON scanner here, every slice of which is checked by parsing it and comparing it with
the tool parsed from the whole document: a span that does not check out is never
returned.

`index_tools(raw, out)` is what a pipeline worker computes per document for the index
(pure: bytes in, bytes and strings out): the catalog's label, and per tool its name, the
sha256 of its original bytes and where they lie, its compressed definition and its search
text; `index_entries(raw, out)` the same with each tool's original bytes. With one worker
(and an index file, and a store other processes can open), the compressing process hands
most documents over as `LocatedTools` instead (`located_later`), and the index's writer
process builds the same tools of them (`built_tools`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import orjson

from . import _accel, ccr
from .catalog import Located, Passthrough, _plan, locate_tools, parse, serialize

# the key sets toolsearch's C path is handed: the C walker reads the very sets the
# search text's definition (toolsearch._search_fields) does
from .toolsearch import _FAST_KEYS, search_fields

_WS: Final = re.compile(rb"[ \t\r\n]*+")
_STRING: Final = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_SCALAR: Final = re.compile(rb"[^,\]}\s]++")
# Inside a container: everything up to its next bracket, strings skipped whole (possessive:
# the document is valid JSON, there is nothing to backtrack into).
_TO_BRACKET: Final = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+', re.DOTALL)
_OPEN: Final = frozenset(b"[{")


def _skip_ws(raw: bytes, i: int) -> int:
    return _WS.match(raw, i).end()  # type: ignore[union-attr]


def _value_end(raw: bytes, i: int) -> int:
    """End of the JSON value starting at i (the document is known to be valid JSON)."""
    first = raw[i]
    if first == 0x22:  # '"'
        return _STRING.match(raw, i).end()  # type: ignore[union-attr]
    if first not in _OPEN:
        return _SCALAR.match(raw, i).end()  # type: ignore[union-attr]
    depth, i = 1, i + 1
    while True:
        i = _TO_BRACKET.match(raw, i).end()  # type: ignore[union-attr]
        depth += 1 if raw[i] in _OPEN else -1  # (IndexError past the end: not a catalog)
        i += 1
        if depth == 0:
            return i


def _elements(raw: bytes, i: int) -> list[tuple[int, int]]:
    """(start, end) of each element of the array at i."""
    spans: list[tuple[int, int]] = []
    i = _skip_ws(raw, i + 1)
    if raw[i] == 0x5D:  # ']'
        return spans
    while True:
        end = _value_end(raw, i)
        spans.append((i, end))
        i = _skip_ws(raw, end)
        if raw[i] == 0x5D:
            return spans
        i = _skip_ws(raw, i + 1)  # past ','


def _member(raw: bytes, i: int, key: str) -> int | None:
    """Start of the value of `key` in the object at i, or None."""
    i = _skip_ws(raw, i + 1)
    if raw[i] == 0x7D:  # '}'
        return None
    while True:
        key_end = _STRING.match(raw, i).end()  # type: ignore[union-attr]
        name = orjson.loads(raw[i:key_end])
        i = _skip_ws(raw, _skip_ws(raw, key_end) + 1)  # past ':'
        if name == key:
            return i
        i = _skip_ws(raw, _value_end(raw, i))
        if raw[i] == 0x7D:
            return None
        i = _skip_ws(raw, i + 1)


def load(raw: bytes) -> Any:
    """raw parsed: by orjson (fast) when it can hold every number, else by catalog.parse
    (strict, literals kept). Passthrough if it is not one JSON document."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return parse(raw)  # a BOM, an integer over 64 bits, or really not JSON: it says why


def _same(piece: bytes, tool: dict[str, Any]) -> bool:
    """Whether `piece` parses to `tool`. A number orjson cannot hold (1e400, an integer of
    4,301 digits; every float and long integer once the whole document went to
    catalog.parse, as a BOM sends it) is an orjson.Fragment, which compares by identity:
    then the literal-keeping serializations are compared (such a catalog's tools were left
    out of the index by the pure-Python path, and by both paths with a BOM)."""
    try:
        return load(piece) == tool or serialize(parse(piece)) == serialize(tool)
    except (Passthrough, RecursionError, ValueError, TypeError):  # (serialize: a lone surrogate)
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
    return None if plan is None else _planned_spans(raw, plan, tools)


def _planned_spans(raw: bytes, plan: tuple[tuple[str, ...], bytes | int],
                   tools: list[dict[str, Any]]) -> list[tuple[int, int]] | None:
    """tool_spans of `raw`, given what locate_tools found in it and its plan."""
    path, kinds = plan
    spans = _fast_spans(raw, path, kinds)
    if spans is not None:
        # the C walker read every byte strictly (no duplicate keys, valid UTF-8) along
        # the plan: each span is the very value locate_tools found, no need to parse it
        return spans if len(spans) == len(tools) else None
    try:
        spans = _spans(raw, path, kinds)
    except (ValueError, IndexError, AttributeError, orjson.JSONDecodeError):
        return None
    if spans is None or len(spans) != len(tools):
        return None
    if not all(_same(raw[a:b], tool) for (a, b), tool in zip(spans, tools)):
        return None
    return spans


def _fast_spans(raw: bytes, path: tuple[str, ...],
                kinds: bytes | int) -> list[tuple[int, int]] | None:
    """The C walker's spans (the same, checked alike below), or None: then _spans runs."""
    fastwalk = _accel.fastwalk
    if fastwalk is None or type(raw) is not bytes:
        return None
    return fastwalk.spans(raw, path, kinds)


def _spans(raw: bytes, path: tuple[str, ...], kinds: bytes | int) -> list[tuple[int, int]] | None:
    """Byte spans of the tools, following the plan catalog._plan made."""
    at: int | None = _skip_ws(raw, 3 if raw.startswith(b"\xef\xbb\xbf") else 0)
    for key in path:
        at = _member(raw, at, key) if at is not None and raw[at] == 0x7B else None
    if at is None:
        return None
    if isinstance(kinds, int):  # a single tool: the container, or its "function"
        return [_kind_span(raw, at, kinds)]
    if raw[at] != 0x5B:
        return None
    elements = _elements(raw, at)
    if len(elements) != len(kinds):
        return None
    return [_kind_span(raw, start, kind) for (start, _), kind in zip(elements, kinds) if kind]


def _kind_span(raw: bytes, start: int, kind: int) -> tuple[int, int]:
    if kind == 2:
        inner = _member(raw, start, "function")
        if inner is None:
            raise ValueError("no function member")
        start = inner
    return start, _value_end(raw, start)


# -- what a worker computes for the index ----------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolEntry:
    name: str
    original: bytes  # the tool object's exact bytes in the source
    start: int  # where they start in it
    definition: str  # the compressed tool object, compact JSON
    fields: dict[str, str]


_WRAPPED: Final = frozenset({"mcp-tools", "jsonrpc-tools-list", "openai-functions"})


def _label(doc: Any, shape: str) -> str | None:
    """A catalog's own name, if its wrapper says one ("server", "name"; a single tool's
    "name" is the tool's), a lone surrogate escape in it as U+FFFD (it names the catalog
    in the index, whose text is UTF-8), as in a tool's name."""
    if shape in _WRAPPED:
        for key in ("server", "name"):
            value = doc.get(key)
            if isinstance(value, str) and value.strip():
                return replace_surrogates(value.strip())
    return None


# A registry repeats its tools: each distinct tool object's name and search text are
# built once per process, found by the sha256 of its bytes (which its record needs anyway:
# a dict keyed by the bytes themselves hashed a kilobyte a tool again), emptied when full.
_FIELDS: dict[str, tuple[str, dict[str, str]]] = {}
_FIELDS_MAX: Final = 8192

# One tool of a document for the index: its name, the sha256 (hex) of its bytes, where
# they start in the document and their length, its compressed definition, its search text.
IndexedTool = tuple[str, str, int, int, str, dict[str, str]]


def clear_cache() -> None:
    _FIELDS.clear()


def _described(piece: bytes, digest: str, tool: dict[str, Any] | None
               ) -> tuple[str, dict[str, str]]:
    """A tool's name and search text, from its parsed object (`tool`), or parsed here
    from its own bytes (`piece`, of sha256 `digest`) when not known yet."""
    found = _FIELDS.get(digest)
    if found is None:
        if tool is None:
            tool = load(piece)
        if len(_FIELDS) >= _FIELDS_MAX:
            _FIELDS.clear()
        found = _FIELDS[digest] = (str(tool.get("name", "")), search_fields(tool))
    return found


def index_entries(raw: bytes, out: bytes, located: Located | None = None
                  ) -> tuple[str | None, list[ToolEntry]] | None:
    """(label, entries) of one document for the index, or None if it holds no tools:
    index_tools, each tool with its original bytes."""
    found = index_tools(raw, out, located)
    if found is None:
        return None
    label, tools = found
    return label, [ToolEntry(name, raw[start:start + length], start, definition, fields)
                   for name, _, start, length, definition, fields in tools]


def _every_tool_located(located: Located | None) -> TypeGuard[Located]:
    """Whether compress's C path found tools, and where each lies in both documents."""
    return located is not None and bool(located[2]) and len(located[2]) == len(located[4])


def index_tools(raw: bytes, out: bytes, located: Located | None = None
                ) -> tuple[str | None, list[IndexedTool]] | None:
    """(label, tools) of one document for the index, or None if it holds no tools.

    Search text comes from the original tools, definitions from the output (compact:
    a passthrough's tools are re-serialized, number literals as written). `located`:
    where compress's C path found the tools (catalog.compress_located), so that neither
    document is walked or parsed whole again."""
    if _every_tool_located(located):
        # a passthrough's definitions are its tools made compact (the rewrite's output
        # spans are not its)
        found = _located_tools(raw, out, located[4], out is raw or out == raw)
        return None if found is None else (_label(located[0], located[1]), found)
    try:
        doc = load(raw)
        shape, tools = locate_tools(doc)
    except (Passthrough, RecursionError):
        return None
    if not tools:
        return None
    plan = _plan(doc, shape, tools)
    spans = None if plan is None else _planned_spans(raw, plan, tools)
    if plan is None or spans is None:
        return None
    if out is raw or out == raw:
        return _entries(raw, out, doc, shape, spans, [], tools)
    # the compressor keeps a catalog's shape: where the C walker finds the original's
    # plan in the output, those are its tools (the output need not be parsed again)
    out_spans = _fast_spans(out, *plan) or tool_spans(out)
    if out_spans is None or len(out_spans) != len(tools):
        return None
    return _entries(raw, out, doc, shape, spans, [out[a:b] for a, b in out_spans], tools)


def _located_tools(raw: bytes, out: bytes, spans: list[tuple[int, int, int, int]],
                   compact: bool = False) -> list[IndexedTool] | None:
    """The tools at `spans` (start, end in raw, then in out): by the C walker, one call a
    document, when it can (the text it leaves to Python built here), else
    _python_located_tools, which defines them."""
    fastwalk = _accel.fastwalk
    if fastwalk is None or type(raw) is not bytes or type(out) is not bytes:
        return _python_located_tools(raw, out, spans, compact)
    tools = fastwalk.index_tools(raw, out, spans, _FIELDS, _FIELDS_MAX, hashlib.sha256,
                                 *_FAST_KEYS, compact)
    if tools is None:
        return _python_located_tools(raw, out, spans, compact)
    for at, tool in enumerate(tools):
        if tool[5] is None:  # a text the C walker does not build exactly
            _, digest, start, length, definition, _ = tool
            name, fields = _described(raw[start:start + length], digest, None)
            tools[at] = (name, digest, start, length, definition, fields)
    return tools


def _python_located_tools(raw: bytes, out: bytes, spans: list[tuple[int, int, int, int]],
                          compact: bool = False) -> list[IndexedTool] | None:
    """The tools at `spans`, each parsed from its own bytes only when its search text is
    not known yet, their definitions out[c:d] or (`compact`: a passthrough) their bytes
    in raw re-serialized: the definition of _located_tools. None if one has a lone
    surrogate (no UTF-8 text to index)."""
    tools = []
    sha256 = hashlib.sha256
    for a, b, c, d in spans:
        piece = raw[a:b]
        try:
            definition = serialize(parse(piece)) if compact else out[c:d]  # literals as written
        except Passthrough:
            return None
        digest = sha256(piece).hexdigest()
        name, fields = _described(piece, digest, None)
        tools.append((name, digest, a, b - a, definition.decode("utf-8"), fields))
    return tools


def _entries(raw: bytes, out: bytes, doc: Any, shape: str, spans: list[tuple[int, int]],
             definitions: list[bytes], tools: list[dict[str, Any]]
             ) -> tuple[str | None, list[IndexedTool]] | None:
    """The tools at `spans` in raw, parsed (`tools`), their definitions in the output
    (ignored for a passthrough: re-serialized here)."""
    escaped: set[int] = set()  # tools holding a lone surrogate (an escape such as \ud800)
    if out is raw or out == raw:
        definitions = []
        for at, (a, b) in enumerate(spans):
            try:
                definitions.append(serialize(parse(raw[a:b])))  # literals as written
            except Passthrough:
                # no UTF-8 text can hold it: the tool as written (JSON text, its escapes
                # kept) is its definition, and its search text has U+FFFD in its place (the
                # catalog's other tools were left out of the index with it)
                definitions.append(raw[a:b])
                escaped.add(at)
    found = []
    for at, ((a, b), definition) in enumerate(zip(spans, definitions)):
        piece = raw[a:b]
        digest = hashlib.sha256(piece).hexdigest()
        name, fields = _described(piece, digest, tools[at])
        if at in escaped:
            name = replace_surrogates(name)
            fields = {key: replace_surrogates(text) for key, text in fields.items()}
        found.append((name, digest, a, b - a, definition.decode("utf-8"), fields))
    return _label(doc, shape), found


_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(text: str) -> str:
    """`text`, each lone surrogate (a \\ud800 escape read as it is) as U+FFFD: what the
    index, whose text is UTF-8, holds in its place."""
    return _SURROGATE.sub("\ufffd", text)


# -- tools built by the index's writer -------------------------------------------------

# One tool as the index's writer is handed it: its name, the sha256 (hex) of its bytes, its
# record's value (a span of its catalog's record, ccr.span_value_of), their length, its
# compressed definition, its search text.
WorkerTool = tuple[str, str, bytes, int, str, dict[str, str]]


@dataclass(frozen=True, slots=True)
class LocatedTools:
    """A document's tools where compress located them, not built yet: what
    `_located_tools` builds from the bytes alone, with the document's own record digest
    (each tool's record is a span of that record). Its length is its number of tools."""

    raw: bytes
    out: bytes
    spans: list[tuple[int, int, int, int]]  # (start, end) in raw, then in out, per tool
    digest: str

    def __len__(self) -> int:
        return len(self.spans)


def located_later(raw: bytes, out: bytes, digest: str, located: Located | None
                  ) -> tuple[str | None, LocatedTools] | None:
    """index_tools' label and tools of a document, the tools left to build (built_tools),
    when compress located every one of them and the output is not the input (a
    passthrough's definitions are re-serialized, which a lone surrogate fails): then the
    tools are built from the bytes alone and never come out None, so the document has
    tools whichever process builds them. Else None: index_tools, here."""
    if not _every_tool_located(located) or out is raw or out == raw:
        return None
    return _label(located[0], located[1]), LocatedTools(raw, out, located[4], digest)


def built_tools(tools: Sequence[WorkerTool] | LocatedTools) -> Sequence[WorkerTool]:
    """The tools as a worker makes them (see indexing.BatchWork): LocatedTools built."""
    if not isinstance(tools, LocatedTools):
        return tools
    found = _located_tools(tools.raw, tools.out, tools.spans)
    if found is None:  # (not for a document located_later took: see there)
        raise ValueError("tools located in a document could not be built")
    return worker_tools(found, tools.digest)


def worker_tools(found: list[IndexedTool], digest: str) -> list[WorkerTool]:
    """A document's tools (index_tools') with their records' values, spans of the
    document's own record (of sha256 `digest`)."""
    value = ccr.span_value_of(digest)
    return [(name, sha256, value(length, start), length, definition, fields)
            for name, sha256, start, length, definition, fields in found]
