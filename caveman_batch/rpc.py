"""JSON-RPC lines for the deferred proxy: read one, change one member, keep the rest.

A proxy that renumbers requests must not re-serialize what it forwards: `1.10` would
become `1.1`, key order and escapes could change. So a message is read once into its
members' values AND their spans (character offsets into the decoded line), and a
forwarded line is the original text with one member's value spliced in (`replace`).
The same walker finds spans inside a member (`member_spans`, `element_spans`): a
tools/call's `name`, call_tool's `arguments`, each tool of a tools/list page.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Final

Span = tuple[int, int]

_WS = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()


class BadMessage(ValueError):
    """A line that is not one JSON-RPC message (the reason is the message)."""


class InvalidRequest(BadMessage):
    """A line of JSON that is still not one message (an array, a number, a key twice):
    JSON-RPC's Invalid Request, where other bad lines are its Parse error."""


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _members(text: str, i: int, twice: bool = False
             ) -> tuple[dict[str, Any], dict[str, Span], int]:
    """The object starting at text[i]: its values, their spans, and the index after it. A
    key given twice is refused, or with `twice` has its last value (in its first place)."""
    if text[i] != "{":
        raise BadMessage("not a JSON object")
    values: dict[str, Any] = {}
    spans: dict[str, Span] = {}
    i = _skip(text, i + 1)
    while text[i] != "}":
        if text[i] != '"':
            raise BadMessage("an object member without a string key")
        key, i = scanstring(text, i + 1)
        i = _skip(text, i)
        if text[i] != ":":
            raise BadMessage("an object member without ':'")
        i = _skip(text, i + 1)
        if key in values and not twice:
            raise BadMessage(f"duplicate key {key!r}")
        values[key], end = _DECODER.raw_decode(text, i)
        spans[key] = (i, end)
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
        elif text[i] != "}":
            raise BadMessage("an object member not followed by ',' or '}'")
    return values, spans, i + 1


def member_spans(text: str, span: Span) -> dict[str, Span] | None:
    """Spans of the members of the object at `span`; None if it is not an object."""
    try:
        return _members(text, span[0])[1]
    except (BadMessage, ValueError, IndexError):
        return None


def object_with(text: str, span: Span, changes: Mapping[str, str]) -> str | None:
    """The object at `span` written anew, each key of `changes` set to its JSON text (added
    if absent) and every other member's value as written (a number such as 1e400, read as a
    float, would come out as Infinity, which is not JSON); a key given twice keeps its last
    value, as the parsers that take repeated keys read it. None if it is not an object."""
    try:
        spans = _members(text, span[0], twice=True)[1]
    except (ValueError, IndexError, RecursionError):
        return None
    members = {key: text[start:end] for key, (start, end) in spans.items()} | dict(changes)
    return "{" + ",".join(dumps(key) + ":" + value for key, value in members.items()) + "}"


def element_spans(text: str, span: Span) -> list[Span] | None:
    """Spans of the elements of the array at `span`; None if it is not an array."""
    try:
        return _elements(text, span[0])
    except (ValueError, IndexError, RecursionError):
        return None


def _elements(text: str, i: int) -> list[Span]:
    if text[i] != "[":
        raise BadMessage("not a JSON array")
    spans: list[Span] = []
    i = _skip(text, i + 1)
    while text[i] != "]":
        _, end = _DECODER.raw_decode(text, i)
        spans.append((i, end))
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
        elif text[i] != "]":
            raise BadMessage("an array element not followed by ',' or ']'")
    return spans


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message: its text, its members' values and their spans."""

    text: str
    values: dict[str, Any]
    spans: dict[str, Span]

    @property
    def method(self) -> str | None:
        method = self.values.get("method")
        return method if isinstance(method, str) else None

    @property
    def has_id(self) -> bool:
        return "id" in self.values

    @property
    def id(self) -> Any:
        return self.values.get("id")

    @property
    def is_response(self) -> bool:
        return self.method is None and self.has_id and ("result" in self.values
                                                        or "error" in self.values)

    def raw(self, key: str) -> str:
        """A member's value exactly as written (KeyError if absent)."""
        start, end = self.spans[key]
        return self.text[start:end]

    @property
    def params(self) -> dict[str, Any]:
        params = self.values.get("params")
        return params if isinstance(params, dict) else {}


def read(line: bytes) -> Message:
    """The message on one line (its line ending, if any, stripped); BadMessage if none."""
    try:
        text = line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise BadMessage(f"not UTF-8 (byte {exc.start})") from None
    try:
        start = _skip(text, 0)
        values, spans, end = _members(text, start)
    except (ValueError, IndexError) as exc:  # BadMessage is a ValueError too
        reason = str(exc) if isinstance(exc, BadMessage) else "not JSON"
        raise (InvalidRequest if _is_json(text) else BadMessage)(reason) from None
    except RecursionError:
        raise BadMessage("nesting too deep") from None
    if _skip(text, end) != len(text):
        raise BadMessage("more than one JSON value on the line")
    return Message(text, values, spans)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def strict(text: str) -> bool:
    """Whether `text`, which `read` took, is JSON as RFC 8259 has it: no NaN, Infinity or
    -Infinity, which json reads (and Python's json.dumps writes) and a client's JSON.parse
    refuses. Only a text holding one of those words is parsed again."""
    if "NaN" not in text and "Infinity" not in text:
        return True
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return False
    return True


def _refuse_constant(word: str) -> None:
    raise ValueError(f"{word} is not JSON")


def lenient(line: bytes) -> dict[str, Any] | None:
    """The message on a line `read` refuses (not UTF-8, a key twice) or that is not strict
    JSON, or None if it is no JSON object. A line that cannot be forwarded must still end
    the request it answers, or answer the one it makes, so its bytes are read leniently
    here: bad UTF-8 as U+FFFD, the last of repeated keys."""
    try:
        value = json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def response_id(message: dict[str, Any] | None) -> Any:
    """The id of the response a `lenient` message is, or None."""
    if message is None or "method" in message:
        return None
    return message.get("id") if "result" in message or "error" in message else None


def request_id(message: dict[str, Any] | None) -> str | None:
    """The id, as JSON text, of the request a `lenient` message is; None if it is none, or
    its id cannot be answered (not a string or a finite number: see id_key)."""
    if message is None or not isinstance(message.get("method"), str):
        return None
    found = message.get("id")
    if id_key(found) is None or (isinstance(found, float) and not math.isfinite(found)):
        return None
    return dumps(found)


def splice(text: str, span: Span, value: str) -> str:
    return text[:span[0]] + value + text[span[1]:]


def splice_many(text: str, changes: Iterable[tuple[Span, str]]) -> str:
    """`text` with each (span, value) spliced in; the spans must not overlap."""
    for span, value in sorted(changes, key=lambda change: change[0], reverse=True):
        text = splice(text, span, value)
    return text


#: a request id as a dict key (id_key)
IdKey = tuple[type, Any]


def id_key(value: Any) -> IdKey | None:
    """A request id as a dict key: 1, 1.0 and "1" differ (three requests, each answered
    under its own id); anything but a string or number is none."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return (type(value), value)


_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,17}")


def integer_id(value: Any) -> int | None:
    """The integer request id that a peer's response or progress token names, or None: the
    integer, or its decimal text, which both official SDKs take for it (a peer that echoes
    ids as strings still correlates, as `coerce_request_id`); never "07", "+7" or " 7"."""
    if type(value) is int:
        return value
    return int(value) if isinstance(value, str) and _DECIMAL.fullmatch(value) else None


def replace(message: Message, key: str, value: str) -> bytes:
    """The message's line with member `key`'s value replaced by JSON text `value`."""
    return line(splice(message.text, message.spans[key], value))


def line(text: str) -> bytes:
    # a lone surrogate (decoded from a peer's \udXXX) can only sit inside a JSON string,
    # where its backslash escape is the same value again
    return text.encode("utf-8", "backslashreplace") + b"\n"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def response(raw_id: str, result_json: str) -> bytes:
    return line('{"jsonrpc":"2.0","id":' + raw_id + ',"result":' + result_json + "}")


def error(raw_id: str, code: int, message: str) -> bytes:
    return line('{"jsonrpc":"2.0","id":' + raw_id + ',"error":'
                + dumps({"code": code, "message": message}) + "}")


def request(request_id: int, method: str, params_json: str | None = None) -> bytes:
    params = "" if params_json is None else ',"params":' + params_json
    return line(f'{{"jsonrpc":"2.0","id":{request_id},"method":{dumps(method)}{params}}}')


def notification(method: str, params_json: str | None = None) -> bytes:
    params = "" if params_json is None else ',"params":' + params_json
    return line(f'{{"jsonrpc":"2.0","method":{dumps(method)}{params}}}')


# JSON-RPC error codes
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
UPSTREAM_UNAVAILABLE: Final = -32000  # the implementation-defined server-error range
