"""The selection profile: everything an agent uses to pick a tool and build its call.

Per tool: its name and, per schema, every parameter (by path) with its type, enum,
required flag, default and const, plus the schema's whole selection surface (the
schema minus descriptions and annotation keys). The compressor's law is
`profile(input) == profile(output)` for every catalog.

This walker is written apart from the compressor's on purpose: the law is only a
check if the two do not share their mistakes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from .catalog import ANNOTATION_KEYS, SCHEMA_KEYS, Passthrough, locate_tools, parse

_PROSE = ANNOTATION_KEYS | {"description"}
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ONE = ("items", "additionalProperties", "additionalItems", "contains", "propertyNames", "not",
        "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_FIELDS = ("type", "enum", "const", "default", "format", "$ref")


def _canon(value: Any) -> Any:
    """Values compared as their canonical JSON, number literals exactly as written: an
    integer of any size is itself (one of over int()'s 4,300 digits a BigInteger, `dumps`
    writing it as it is), a float that reads back as its own text is itself, any
    other literal (1.10, 1e2, 1.0, -0, 1e400) is {"$number": its text}. (Read back through
    orjson, 1.10 was 1.1, 1 was 1.0 and 2**64 + 1 a float: a literal the compressor
    changed went unseen, and `profile` printed 18446744073709551617 as 1.8e19.)

    What orjson cannot write (nesting past 255 levels) is kept as its canonical JSON
    text instead, so a profile never fails on odd data.
    """
    if isinstance(value, str | bool | int) or value is None:
        return value
    try:
        return json.loads(orjson.dumps(value), parse_float=_number, parse_int=_integer,
                          parse_constant=_number)
    except (orjson.JSONEncodeError, ValueError, RecursionError):
        return {"$json": _text(value)}


def _number(text: str) -> Any:
    value = float(text)
    return value if repr(value) == text and not value.is_integer() else {"$number": text}


def _integer(text: str) -> Any:
    if text == "-0":
        return {"$number": text}
    try:
        return int(text)
    except ValueError:  # over int()'s digits (4,300): the whole value was {"$json": …}
        return BigInteger(text)


class BigInteger:
    """An integer literal of more digits than int() reads (sys.get_int_max_str_digits,
    4,300 by default: a conversion costs the square of the digits, and a 32 MiB literal
    would take hours): its text, compared as such, and written as that number by `dumps`."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BigInteger) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return self.text


def dumps(value: Any, **kwargs: Any) -> str:
    """json.dumps(value, **kwargs) with each BigInteger written as its digits (json.dumps
    cannot write an int past the digit limit: it goes through a placeholder string that
    no input can hold, its random name drawn for this call, replaced in the text)."""
    import secrets

    found: list[str] = []
    nonce = secrets.token_hex(8)

    def default(item: Any) -> str:
        if not isinstance(item, BigInteger):
            raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
        found.append(item.text)
        return f"\x00{nonce}:{len(found) - 1}\x00"

    text = json.dumps(value, default=default, **kwargs)
    if not found:
        return text
    return re.sub(r'"\\u0000' + nonce + r':(\d+)\\u0000"', lambda m: found[int(m.group(1))], text)


def _leaf(item: Any) -> str:
    try:
        return orjson.dumps(item).decode()
    except orjson.JSONEncodeError:  # a lone surrogate: json escapes it as \udXXX
        return json.dumps(item)


def _text(value: Any) -> str:
    """Canonical compact JSON of `value`, without recursion (any depth)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item)
        elif isinstance(item, dict):
            parts: list[Any] = [_Raw("{")]
            for i, (k, v) in enumerate(item.items()):
                parts += [_Raw(("," if i else "") + _leaf(k) + ":"), v]
            stack.extend(reversed([*parts, _Raw("}")]))
        elif isinstance(item, list):
            parts = [_Raw("[")]
            for i, v in enumerate(item):
                parts += [_Raw(","), v] if i else [v]
            stack.extend(reversed([*parts, _Raw("]")]))
        else:
            out.append(_leaf(item))
    return "".join(out)


class _Raw(str):
    """Already-serialized JSON text on the `_text` stack."""


def surface(node: Any) -> Any:
    """`node` without prose: descriptions and annotation keys, in schema positions only."""
    if not isinstance(node, dict):
        return _canon(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _PROSE and (key != "description" or isinstance(value, str)):
            continue
        if key in _MAPS and isinstance(value, dict):
            out[key] = {name: surface(sub) for name, sub in value.items()}
        elif key == "dependencies" and isinstance(value, dict):
            out[key] = {n: surface(s) if isinstance(s, dict) else _canon(s) for n, s in value.items()}
        elif key in _ONE and isinstance(value, dict):
            out[key] = surface(value)
        elif key in _MANY and isinstance(value, list):
            out[key] = [surface(v) for v in value]
        else:
            out[key] = _canon(value)
    return out


def parameters(schema: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Flat list of parameters under `schema` (nested objects and arrays by path)."""
    found: list[dict[str, Any]] = []
    if not isinstance(schema, dict):
        return found
    required = schema.get("required")
    if not isinstance(required, list):
        required = []
    props = schema.get("properties")
    for name, sub in (props.items() if isinstance(props, dict) else ()):
        path = f"{prefix}{name}"
        entry: dict[str, Any] = {"path": path, "required": name in required}
        if isinstance(sub, dict):
            entry.update({f: _canon(sub[f]) for f in _FIELDS if f in sub})
        found.append(entry)
        found += parameters(sub, path + ".")
        items = sub.get("items") if isinstance(sub, dict) else None
        if isinstance(items, dict):
            found += parameters(items, path + "[].")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, alt in enumerate(schema.get(key) or [] if isinstance(schema.get(key), list) else []):
            found += parameters(alt, f"{prefix}{key}[{i}].")
    return found


def profile_doc(doc: Any) -> dict[str, Any]:
    try:
        shape, tools = locate_tools(doc)
    except Passthrough:
        return {"shape": None, "tools": []}
    out = []
    for tool in tools:
        entry: dict[str, Any] = {"name": tool.get("name")}
        for key in SCHEMA_KEYS:
            if key in tool:
                entry[key] = {"parameters": parameters(tool[key]), "surface": surface(tool[key])}
        out.append(entry)
    return {"shape": shape, "tools": out}


def profile(raw: bytes) -> dict[str, Any]:
    """The selection profile of a catalog's bytes (empty for what is not a catalog)."""
    try:
        return profile_doc(parse(raw))
    except Passthrough:
        return {"shape": None, "tools": []}
