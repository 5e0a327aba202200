"""The tool-schema compressor: one catalog in, a smaller catalog that selects the same.

`compress(raw)` is pure (bytes in, bytes + CompressResult out), so the pipeline's
workers call it directly. It changes only two things, in schema positions only:
descriptions (through `describe.reduce`) and annotation keys (title, examples,
example, $comment, $schema). Names, types, enum, required, default, const, $ref,
every validation keyword, every envelope field, key order and number literals as
written all survive. Anything it cannot handle passes through unchanged, byte for
byte, with a reason (fail-open).

The code here is the reference: `parse`, `rewrite` (the `_Walk`) and `serialize`.
When the C accelerator `_fastwalk` is built (see `_accel`), `compress` first asks
it to do the three in one pass over the bytes, following a plan of where the
tools are (`_fast_compress`); it gives the same bytes, or None for anything
outside what it handles exactly, and then this reference path runs and decides.
Tracing (`rewrite(..., trace=...)`, for lint) is always pure Python.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from . import _accel, describe
from .tokens import BASIS, ENCODING, count_tokens

CONTENT_TYPE: Final = "application/json"
ANNOTATION_KEYS: Final = frozenset({"title", "examples", "example", "$comment", "$schema"})
SCHEMA_KEYS: Final = ("inputSchema", "input_schema", "parameters", "outputSchema", "output_schema")
# Keys whose value maps NAMES to schemas: the names are data, the values schemas.
NAME_MAPS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions",
                              "dependentSchemas", "dependencies"})
# Keys whose value is one schema; keys whose value is a list of schemas ("items" is
# either). A value of the other container type is not a schema: it is data, left alone.
ONE_SCHEMA: Final = frozenset({"items", "additionalItems", "additionalProperties", "contains",
                               "unevaluatedItems", "unevaluatedProperties", "propertyNames",
                               "not", "if", "then", "else", "contentSchema"})
SCHEMA_LIST: Final = frozenset({"anyOf", "oneOf", "allOf", "prefixItems", "items"})
SUBSCHEMA: Final = ONE_SCHEMA | SCHEMA_LIST
MAX_DEPTH: Final = 200  # orjson refuses deeper documents anyway (255)
_ACTIVE_KEYS: Final = ANNOTATION_KEYS | NAME_MAPS | SUBSCHEMA | {"description"}


class Passthrough(Exception):
    """This catalog goes through unchanged; the message is the reason.

    `broken` says the document itself is bad (not UTF-8, not JSON, duplicate keys):
    a batch reports it as an error. Otherwise it is sound JSON we leave alone.
    """

    def __init__(self, reason: str, *, broken: bool = False) -> None:
        super().__init__(reason)
        self.broken = broken


@dataclass(frozen=True, slots=True)
class Options:
    """What the compressor may do; part of the incremental-refresh key."""

    short_bytes: int = describe.SHORT_BYTES
    lead_bytes: int = describe.LEAD_BYTES
    drop_annotations: bool = True
    count_tokens: bool = True

    def key(self) -> str:
        # count_tokens off skips the "not fewer tokens" passthrough, so it may change the
        # output: keyed too, as a suffix only when off (the default's key stays as it was)
        tokens = "" if self.count_tokens else "-t0"
        return f"s{self.short_bytes}-l{self.lead_bytes}-a{int(self.drop_annotations)}{tokens}"


DEFAULT_OPTIONS: Final = Options()


@dataclass(slots=True)
class CompressResult:
    status: str  # "ok" or "passthrough"
    reason: str | None
    shape: str | None
    tools: int
    bytes_before: int
    bytes_after: int
    tokens_before: int | None = None
    tokens_after: int | None = None
    descriptions_reduced: int = 0
    annotations_dropped: int = 0
    broken: bool = False  # passed through because the input itself is bad
    content_type: str = CONTENT_TYPE
    encoding: str = ENCODING
    basis: str = BASIS

    @property
    def ratio(self) -> float:
        """Share of tokens saved, in [0, 1]; 0 when unknown."""
        if not self.tokens_before or self.tokens_after is None:
            return 0.0
        return max(0.0, 1.0 - self.tokens_after / self.tokens_before)

    def as_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}
        data["ratio"] = round(self.ratio, 4)
        return data


# -- parsing that keeps what we promised to keep -------------------------------


def _raw_number(literal: str) -> orjson.Fragment:
    return orjson.Fragment(literal)  # 1.10 stays 1.10, 1e3 stays 1e3


def _int(literal: str) -> Any:
    # -0 and integers orjson cannot hold (> 64 bits) stay as written
    if literal == "-0" or len(literal) > 18:
        return orjson.Fragment(literal)
    return int(literal)


def _no_constants(name: str) -> Any:
    raise Passthrough(f"non-standard JSON constant {name}", broken=True)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()  # the first key seen twice, in linear time (100k-key objects)
        for dup, _ in pairs:
            if dup in seen:
                break
            seen.add(dup)
        raise Passthrough(f"duplicate key {dup!r}: dropping either value would change data",
                          broken=True)
    return obj


def parse(raw: bytes) -> Any:
    """Parse one JSON document strictly; Passthrough with the reason if it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Passthrough(f"not UTF-8 (byte {exc.start})", broken=True) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise Passthrough("empty document", broken=True)
    try:
        return json.loads(text, parse_float=_raw_number, parse_int=_int,
                          parse_constant=_no_constants, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        what = "a second top-level value" if exc.msg == "Extra data" else exc.msg
        raise Passthrough(f"invalid JSON at line {exc.lineno} column {exc.colno}: {what}",
                          broken=True) from None
    except RecursionError:
        raise Passthrough("nesting too deep to parse") from None


def serialize(doc: Any) -> bytes:
    try:
        return orjson.dumps(doc)
    except orjson.JSONEncodeError as exc:
        raise Passthrough(f"cannot re-serialize: {exc}") from None


# -- where the tools are --------------------------------------------------------


_TOOL_KEYS: Final = frozenset({"description", *SCHEMA_KEYS})


def _is_tool(obj: Any) -> bool:
    return (isinstance(obj, dict) and isinstance(obj.get("name"), str)
            and not _TOOL_KEYS.isdisjoint(obj.keys()))


def _has_schema(obj: Any) -> bool:
    return isinstance(obj, dict) and any(isinstance(obj.get(k), dict) for k in SCHEMA_KEYS)


def _tool_of(item: Any) -> dict[str, Any] | None:
    if isinstance(item, dict):
        if item.get("type") == "function":
            fn = item.get("function")
            if isinstance(fn, dict):
                return fn
        if _is_tool(item):
            return item
    return None


# Where each shape keeps its tools: the keys from the root to the list (or, for a
# single tool, to the object that is the tool or holds it under "function").
TOOLS_PATH: Final = {"jsonrpc-tools-list": ("result", "tools"), "mcp-tools": ("tools",),
                     "openai-functions": ("functions",), "openai-tools": (), "tool-array": (),
                     "single-tool": ()}


def locate_tools(doc: Any) -> tuple[str, list[dict[str, Any]]]:
    """(shape, tool objects) of a catalog; Passthrough if it is not one we know."""
    if isinstance(doc, dict):
        result = doc.get("result")
        if isinstance(result, dict) and isinstance(result.get("tools"), list) and "jsonrpc" in doc:
            return "jsonrpc-tools-list", _listed_tools(result["tools"], "tools")
        for key, shape in (("tools", "mcp-tools"), ("functions", "openai-functions")):
            if isinstance(doc.get(key), list):
                return shape, _listed_tools(doc[key], key)
        tool = _tool_of(doc)
        if tool is not None and _has_schema(tool):  # a package.json has a name and a description too
            return "single-tool", [tool]
    elif isinstance(doc, list) and doc:
        tools = _tools_in(doc)
        # every entry a tool, or an OpenAI built-in ({"type": "web_search"}); one with a schema
        others_typed = all(isinstance(i, dict) and ("type" in i or _tool_of(i)) for i in doc)
        wrapped = any(isinstance(i, dict) and i.get("type") == "function" for i in doc)
        if tools and others_typed and (wrapped or any(_has_schema(t) for t in tools)):
            kind = "openai-tools" if any(isinstance(i, dict) and i.get("type") == "function"
                                         for i in doc) else "tool-array"
            return kind, tools
    raise Passthrough("unknown shape: not an MCP, JSON-RPC, OpenAI or Anthropic tool catalog")


def _listed_tools(items: list[Any], key: str) -> list[dict[str, Any]]:
    tools = _tools_in(items)
    if items and not tools:
        raise Passthrough(f"unknown shape: {key!r} holds no tool objects")
    return tools


def _tools_in(items: list[Any]) -> list[dict[str, Any]]:
    return [t for t in map(_tool_of, items) if t is not None]


# -- the rewrite ----------------------------------------------------------------


@dataclass(slots=True)
class _Walk:
    options: Options
    reducer: Callable[[str], str]
    descriptions_reduced: int = 0
    annotations_dropped: int = 0
    trace: list[dict[str, Any]] | None = field(default=None)

    def description(self, text: str, path: str) -> str:
        out = self.reducer(text)
        if out != text:
            self.descriptions_reduced += 1
            if self.trace is not None:
                self.trace.append(_description_change(text, out, path, self.options))
        return out

    def tool(self, tool: dict[str, Any], path: str) -> None:
        tracing = self.trace is not None
        if isinstance(tool.get("description"), str):
            tool["description"] = self.description(tool["description"],
                                                   f"{path}/description" if tracing else "")
        for key in SCHEMA_KEYS:
            if key in tool:
                tool[key] = self.schema(tool[key], f"{path}/{key}" if tracing else "", 0)

    def schema(self, node: Any, path: str, depth: int) -> Any:
        """The schema with annotations dropped and descriptions reduced (in place)."""
        if depth > MAX_DEPTH:
            raise Passthrough(f"schema nested deeper than {MAX_DEPTH} levels")
        if not isinstance(node, dict):
            return node
        hits = node.keys() & _ACTIVE_KEYS  # most nodes: type/enum/default only, done in C
        if not hits:
            return node
        tracing = self.trace is not None
        if not hits.isdisjoint(ANNOTATION_KEYS):
            if self.options.drop_annotations:
                node = self._drop_annotations(node, path)
            hits -= ANNOTATION_KEYS  # kept or not, their values are data: never walked
        for key in [k for k in node if k in hits] if tracing else hits:  # traces in key order
            value = node[key]
            where = f"{path}/{key}" if tracing else ""
            if key == "description":
                if isinstance(value, str):
                    node[key] = self.description(value, where)
            elif key in NAME_MAPS:
                if isinstance(value, dict):
                    for name, sub in value.items():
                        value[name] = self.schema(sub, f"{where}/{_esc(name)}" if tracing else "",
                                                  depth + 1)
            else:
                node[key] = self._subschema(key, value, where, depth + 1)
        return node

    def _drop_annotations(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        kept: dict[str, Any] = {}
        for key, value in node.items():
            if key in ANNOTATION_KEYS:
                self.annotations_dropped += 1
                if self.trace is not None:
                    self.trace.append({"path": f"{path}/{key}", "kind": "annotation"})
            else:
                kept[key] = value
        return kept

    def _subschema(self, key: str, value: Any, path: str, depth: int) -> Any:
        if isinstance(value, list) and key in SCHEMA_LIST:
            return [self.schema(v, f"{path}/{i}" if path else "", depth) for i, v in enumerate(value)]
        if isinstance(value, dict) and key in ONE_SCHEMA:
            return self.schema(value, path, depth)
        return value


def _description_change(before: str, after: str, path: str, options: Options) -> dict[str, Any]:
    why = describe.explain(before, short_bytes=options.short_bytes, lead_bytes=options.lead_bytes)
    return {"path": path, "kind": "description", "before": before, "after": after,
            "dropped": why.dropped, "lead_cut": bool(why.lead and why.lead.endswith(describe.ELLIPSIS)
                                                    and why.lead not in before)}


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _reducer(options: Options) -> Callable[[str], str]:
    if (options.short_bytes, options.lead_bytes) == (describe.SHORT_BYTES, describe.LEAD_BYTES):
        return describe.reduce
    return lambda text: describe.reduce(text, short_bytes=options.short_bytes,
                                        lead_bytes=options.lead_bytes)


def rewrite(doc: Any, options: Options = DEFAULT_OPTIONS,
            trace: list[dict[str, Any]] | None = None) -> tuple[str, int, _Walk]:
    """Rewrite `doc` in place; (shape, tool count, walk stats)."""
    shape, tools = locate_tools(doc)
    walk = _Walk(options, _reducer(options), trace=trace)
    for tool, pointer in zip(tools, tool_pointers(doc, shape, tools)):
        walk.tool(tool, pointer)
    return shape, len(tools), walk


def tool_pointers(doc: Any, shape: str, tools: list[dict[str, Any]]) -> list[str]:
    """The JSON pointer of each tool `locate_tools` found in `doc` (as `lint` names it):
    /result/tools/3, /functions/0, /1/function (an OpenAI tool), "" (a single tool)."""
    if shape == "single-tool":
        return ["/function" if tools[0] is not doc else ""]
    container: Any = doc
    for key in TOOLS_PATH[shape]:
        container = container[key]
    base = "".join(f"/{key}" for key in TOOLS_PATH[shape])
    wanted = {id(tool) for tool in tools}
    pointers = []
    for at, item in enumerate(container):
        tool = _tool_of(item)
        if tool is not None and id(tool) in wanted:
            pointers.append(f"{base}/{at}" + ("" if tool is item else "/function"))
    return pointers


def compress(raw: bytes, options: Options = DEFAULT_OPTIONS) -> tuple[bytes, CompressResult]:
    """Compress one catalog. Never raises on bad input: it passes through with a reason."""
    fast = _fast_compress(raw, options)
    if fast is not None:
        out, shape, ntools, reduced, dropped = fast
        return _finish(raw, out, shape, ntools, reduced, dropped, options)
    return _reference_compress(raw, options)


# Where the C path found a catalog's tools: the document's skim (its top levels, see
# SKIM_DEPTH), its shape, the tools as skimmed (their top-level scalars are real, their
# containers empty), the plan (path, kinds), and each tool's (start, end) in the input
# and (out_start, out_end) in the rewritten output.
Located = tuple[Any, str, list[dict[str, Any]], tuple[tuple[str, ...], bytes | int],
                list[tuple[int, int, int, int]]]


def compress_located(raw: bytes, options: Options = DEFAULT_OPTIONS
                     ) -> tuple[bytes, CompressResult, Located | None]:
    """`compress`, and where the C path found the tools (None if it did not run): what
    the search index needs of each tool, without a second walk of either document (the
    output spans are the rewrite's, whatever the result: a passthrough's are not its)."""
    located: list[Any] = []
    fast = _fast_compress(raw, options, located)
    if fast is not None:
        out, shape, ntools, reduced, dropped = fast
        return (*_finish(raw, out, shape, ntools, reduced, dropped, options),
                tuple(located))
    return (*_reference_compress(raw, options), None)


def _reference_compress(raw: bytes, options: Options) -> tuple[bytes, CompressResult]:
    """The Python path (the definition of every behaviour the C path mirrors)."""
    try:
        doc = parse(raw)
        shape, ntools, walk = rewrite(doc, options)
        out = serialize(doc)
    except Passthrough as exc:
        result = _passthrough(raw, str(exc), None, 0, options)
        result.broken = exc.broken
        return raw, result
    except RecursionError:
        return raw, _passthrough(raw, "nesting too deep", None, 0, options)
    except UnicodeEncodeError:
        return raw, _passthrough(raw, "a lone surrogate escape (not valid Unicode)", None, 0, options)
    return _finish(raw, out, shape, ntools, walk.descriptions_reduced, walk.annotations_dropped,
                   options)


def _finish(raw: bytes, out: bytes, shape: str, ntools: int, reduced: int, dropped: int,
            options: Options) -> tuple[bytes, CompressResult]:
    """The rewritten catalog, unless it is not smaller (in bytes, or in tokens when counted)."""
    if len(out) >= len(raw):
        return raw, _passthrough(raw, "not smaller", shape, ntools, options)
    result = CompressResult("ok", None, shape, ntools, len(raw), len(out),
                            descriptions_reduced=reduced, annotations_dropped=dropped)
    if options.count_tokens:
        result.tokens_before = count_tokens(raw)
        result.tokens_after = count_tokens(out)
        if result.tokens_after > result.tokens_before:
            return raw, _passthrough(raw, "not fewer tokens", shape, ntools, options)
    return out, result


# How deep _fastwalk.skim builds the document for the plan (the root is depth 0; a
# deeper dict or list comes back empty, a scalar anywhere it returns is its real value).
# locate_tools and _plan read, per shape, at most:
#   jsonrpc-tools-list  root 0 -> "result" 1 -> "tools" 2 -> item 3: _tool_of reads the
#                       item's keys and tests its members' values (4): "type" == "function"
#                       and "name" a str (scalars: real), "function" a dict (its type; _plan
#                       then only compares it by identity). Listed tools never go through
#                       _has_schema, so nothing at depth 4 is looked into.
#   mcp-tools, openai-functions  root 0 -> "tools"/"functions" 1 -> item 2 -> members 3.
#   openai-tools, tool-array  root 0 -> item 1 -> "function" 2 -> _has_schema tests the
#                       types of its members (3).
#   single-tool         root 0 -> "function" 1 -> _has_schema: members (2).
# ("jsonrpc" in doc reads a key only; no number's value is ever read, so skim's None for
# an integer over int()'s digit limit changes nothing.) So every container down to depth
# 3 must hold its members; at depth 4 only the type counts, and an empty dict or list has
# it. With 2, a JSON-RPC item would come back empty: no tool
# (tests/test_fastwalk.py::test_skim_depth_is_the_smallest_that_plans_alike).
SKIM_DEPTH: Final = 3


def _fast_compress(raw: bytes, options: Options, located: list[Any] | None = None
                   ) -> tuple[bytes, str, int, int, int] | None:
    """The C path: (output, shape, tools, descriptions reduced, annotations dropped), or None.
    `located`, if given, is filled with what `Located` says (when the result is not None).

    _fastwalk.skim parses as strictly as the C walker, building only the top SKIM_DEPTH
    levels (all locate_tools looks at); locate_tools on its result gives the plan. None
    means "run the reference path": that path then gives the result or the passthrough
    reason.
    """
    fastwalk = _accel.fastwalk
    if fastwalk is None or type(raw) is not bytes:
        return None
    doc = fastwalk.skim(raw, SKIM_DEPTH)
    if doc is None:
        return None  # not a document rewrite() takes: the reference path says why
    try:
        shape, tools = locate_tools(doc)
    except Passthrough:
        return None
    plan = _plan(doc, shape, tools)
    if plan is None:
        return None
    spans: list[tuple[int, int, int, int]] = []
    done = fastwalk.rewrite(raw, plan[0], plan[1], options.drop_annotations,
                            options.short_bytes, _reducer(options),
                            *(() if located is None else (spans,)))
    if done is None:
        return None
    if located is not None:
        located.extend((doc, shape, tools, plan, spans))
    out, reduced, dropped = done
    return out, shape, len(tools), reduced, dropped


def _plan(doc: Any, shape: str, tools: list[dict[str, Any]]
          ) -> tuple[tuple[str, ...], bytes | int] | None:
    """(path, kinds) for _fastwalk.rewrite, from locate_tools' own objects.

    path leads to the tools' container. For a list, kinds has one byte per element:
    0 not a tool, 1 the element is the tool, 2 its "function" member is; for a single
    tool it is that 1 or 2. None if the tools are not where the plan can say.
    """
    path = TOOLS_PATH[shape]
    container = doc
    for key in path:
        container = container.get(key) if isinstance(container, dict) else None
    if shape == "single-tool":
        tool: dict[str, Any] | None = tools[0]  # (below: the next tool to place, or None)
        if tool is container:
            return path, 1
        if isinstance(container, dict) and tool is container.get("function"):
            return path, 2
        return None
    if not isinstance(container, list):
        return None
    kinds = bytearray(len(container))
    pending = iter(tools)  # locate_tools keeps the container's order
    tool = next(pending, None)
    for i, item in enumerate(container):
        if tool is None:
            break
        if tool is item:
            kinds[i] = 1
        elif isinstance(item, dict) and tool is item.get("function"):
            kinds[i] = 2
        else:
            continue
        tool = next(pending, None)
    if tool is not None:
        return None  # a tool the container does not hold
    return path, bytes(kinds)


def _passthrough(raw: bytes, reason: str, shape: str | None, ntools: int,
                 options: Options) -> CompressResult:
    result = CompressResult("passthrough", reason, shape, ntools, len(raw), len(raw))
    if options.count_tokens:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            pass  # not text: no honest token count
        else:
            result.tokens_before = result.tokens_after = count_tokens(raw)
    return result
