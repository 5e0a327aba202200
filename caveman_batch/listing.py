"""Rewriting MCP list responses: one JSON-RPC line in, a smaller line (or None) out.

What the proxy hands the client is the upstream's line with ONLY the `result` value
replaced; the envelope (`jsonrpc`, `id`, key order, spacing) stays byte for byte.
The original stored in the CCR store is the `result` value exactly as received (its
bytes sliced out of the line), so identical catalogs share one record whatever the
request id, and `recover` gives back the result the upstream sent, byte for byte.
Its handle goes into the rewritten `result._meta` under META_KEY.

Everything here is pure: the proxy commits the original and decides what to send.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Final

from . import ccr, describe
from .catalog import DEFAULT_OPTIONS, Options, Passthrough, compress, parse, serialize
from .tokens import count_tokens

META_KEY: Final = "dev.caveman-batch/ccr"
TOOLS_LIST: Final = "tools/list"
# method -> (list key, per-item rewrite); tools/list goes through the catalog compressor
LIST_KEYS: Final = {
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}
METHODS: Final = frozenset({TOOLS_LIST, *LIST_KEYS})

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class NotRewritten(Exception):
    """This line goes to the client unchanged; the message says why (for --debug)."""


@dataclass(frozen=True, slots=True)
class Response:
    """A JSON-RPC response line we may rewrite: its id and where its result sits."""

    id: Any
    result_start: int  # character offsets into the decoded line; -1: an error response
    result_end: int

    @property
    def ok(self) -> bool:
        return self.result_start >= 0


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A rewritten result: the new line content and what to commit first."""

    content: bytes  # the new line, without its line ending
    original: ccr.Prepared  # the original result, ready to commit
    items: int
    tokens_before: int | None
    tokens_after: int | None


# -- finding the response's parts without re-serializing the envelope -------------


def _skip_ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def read_response(text: str, wanted: Callable[[Any], bool]) -> Response | None:
    """The response in `text` if it is a response (success or error) whose id is `wanted`.

    Walks the top-level members with the stdlib's C scanner, stopping as soon as
    the line cannot be one (a request, an error, an id nobody waits for), so most
    lines cost a few member decodes, not a parse of their whole payload.
    """
    try:
        return _read_response(text, wanted)
    except (ValueError, IndexError, RecursionError):  # not JSON, not an object, too deep:
        return None  # forwarded as is


def _read_response(text: str, wanted: Callable[[Any], bool]) -> Response | None:
    i = _skip_ws(text, 0)
    if text[i] != "{":
        return None
    seen: dict[str, Any] = {}
    span: tuple[int, int] | None = None
    i = _skip_ws(text, i + 1)
    while text[i] != "}":
        key, i = scanstring(text, i + 1) if text[i] == '"' else _bad()
        i = _skip_ws(text, i)
        i = _skip_ws(text, i + 1) if text[i] == ":" else _bad()
        if key in seen or key == "method":  # a duplicate key or a request: untouched
            return None
        value, end = _DECODER.raw_decode(text, i)
        seen[key] = value
        if key == "result":
            span = (i, end)
        if key == "id" and not wanted(value):
            return None
        i = _skip_ws(text, end)
        if text[i] == ",":
            i = _skip_ws(text, i + 1)
        elif text[i] != "}":
            return None
    if _skip_ws(text, i + 1) != len(text) or "id" not in seen:
        return None
    if "error" in seen or span is None:
        return Response(seen["id"], -1, -1)
    return Response(seen["id"], span[0], span[1])


def _bad() -> Any:
    raise ValueError("not a JSON object member")


# -- rewriting one result -----------------------------------------------------------


def rewrite_line(line: bytes, method: str, response: Response, text: str,
                 options: Options = DEFAULT_OPTIONS) -> Rewrite:
    """The line with its result rewritten and the original's handle in result._meta.

    Raises NotRewritten (with the reason) whenever the client should get the
    original: the compressor passed it through, nothing changed, or the new line
    would not be smaller than the old one.
    """
    original = text[response.result_start:response.result_end].encode("utf-8")
    if method == TOOLS_LIST:
        new_result, items, before, after = _tools(original, options)
    else:
        new_result, items, before, after = _listed(original, LIST_KEYS[method], options)
    prepared = ccr.prepare(original)
    new_result = _with_handle(new_result, prepared.handle)
    head = len(text[:response.result_start].encode("utf-8"))
    tail = len(text[response.result_end:].encode("utf-8"))
    content = line[:head] + new_result + line[len(line) - tail:]
    if len(content) >= len(line):
        raise NotRewritten("not smaller once the handle is added")
    return Rewrite(content, prepared, items, before, after)


def _tools(original: bytes, options: Options) -> tuple[bytes, int, int | None, int | None]:
    out, result = compress(original, options)
    if result.status != "ok":
        raise NotRewritten(f"compressor passed it through: {result.reason}")
    return out, result.tools, result.tokens_before, result.tokens_after


def _listed(original: bytes, key: str,
            options: Options) -> tuple[bytes, int, int | None, int | None]:
    """prompts, resources, templates: their descriptions through the reducer."""
    try:
        doc = parse(original)
        items = doc.get(key) if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise NotRewritten(f"result holds no {key!r} list")
        if not sum(_reduce_item(item) for item in items):
            raise NotRewritten("no description to reduce")
        out = serialize(doc)
    except Passthrough as exc:
        raise NotRewritten(str(exc)) from None
    except (RecursionError, UnicodeEncodeError):
        raise NotRewritten("cannot re-serialize (nesting or a lone surrogate)") from None
    if not options.count_tokens:
        return out, len(items), None, None
    return out, len(items), count_tokens(original), count_tokens(out)


def _reduce_item(item: Any) -> int:
    """Reduce an item's description and its prompt arguments'; how many changed."""
    if not isinstance(item, dict):
        return 0
    changed = _reduce_description(item)
    arguments = item.get("arguments")
    if isinstance(arguments, list):
        changed += sum(_reduce_description(a) for a in arguments if isinstance(a, dict))
    return changed


def _reduce_description(obj: dict[str, Any]) -> int:
    text = obj.get("description")
    if not isinstance(text, str):
        return 0
    reduced = describe.reduce(text)
    obj["description"] = reduced
    return int(reduced != text)


def _with_handle(result: bytes, handle: str) -> bytes:
    """`result` (compact JSON, as serialize() writes it) with _meta[META_KEY] = handle."""
    entry = json.dumps(META_KEY) + ":" + json.dumps(handle)
    if b'"_meta"' not in result:  # the common case: append a member, no re-parse
        if result == b"{}":
            return b'{"_meta":{' + entry.encode() + b"}}"
        return result[:-1] + b',"_meta":{' + entry.encode() + b"}}"
    try:
        doc = parse(result)
    except Passthrough as exc:
        raise NotRewritten(str(exc)) from None
    meta = doc.get("_meta", {})
    if not isinstance(meta, dict):
        raise NotRewritten("result._meta is not an object")
    meta[META_KEY] = handle
    doc["_meta"] = meta
    return serialize(doc)
