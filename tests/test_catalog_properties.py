"""The compressor's laws, on random catalogs and random JSON (hypothesis).

For any input: compress never raises; the output parses; profile(input) ==
profile(output); compress(compress(x)) == compress(x); the output is never longer
than the input; the ratio is in [0, 1]. For any text: reduce is idempotent and
keeps every unit our own detector calls a rule, word for word.

Runs are derandomized (the same examples every run) so the suite is deterministic.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from caveman_batch import describe
from caveman_batch.catalog import compress
from caveman_batch.describe import ELLIPSIS, explain, fold, reduce, units
from caveman_batch.profile import profile
from caveman_batch.rules import is_rule

LAW = settings(derandomize=True, database=None, deadline=None, max_examples=150,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Pieces of prose that exercise every splitting and rule decision, glued at random.
PIECES = [
    "Returns", "the", "weather", "report", "for", "a", "city", "Lists", "files", "friendly", "table",
    "garden", "flowers", "must", "not", "only", "never", "Use this tool when", "Do not use", "default",
    "optional", "at most 5", "between 1 and 10", "ISO 8601", "should be omitted", "(Optional, default true)",
    "Provide", "IMPORTANT:", "x*", "> 5", "Valid values:", ".", ". ", "! ", "? ", "…", "\n", "\n\n", "\n- ",
    "\n1. ", "e.g.", "i.e.", "etc.", "vs.", "J.", "1.5", "v1.2.3", "config.json", "https://ex.com/a.B",
    "/srv/Data.x", "e.g. /srv/data.", "`", '"', "“", "”", "'", "(", ")", ":", ",", " ", "  ", "\t",
    "é", "日本語", "😀", "İ", "ß", "<b>&amp;</b>",
]
prose = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=120).map(" ".join),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=120).map("".join),
    st.text(max_size=300),
)

# Descriptions as real catalogs have them: longer than the short limit, plain sentences the
# reducer may drop between rule sentences it must keep, with random prose mixed in.
PLAIN = ["returns", "the", "weather", "report", "for", "a", "city", "lists", "files", "in",
         "friendly", "table", "garden", "flowers", "station", "data", "of", "each", "page", "and"]
RULES = ["You must pass the owner.", "Do not use this for private data.", "Returns at most 50 items.",
         "Dates are in ISO 8601 format.", "(Optional, default true)", "Use this tool when the user asks.",
         "Provide the run ID for get_run.", "IMPORTANT: this is destructive.", "Der Wert muss positiv sein."]
plain_sentence = st.lists(st.sampled_from(PLAIN), min_size=4, max_size=14).map(
    lambda words: " ".join(words).capitalize() + ".")
long_prose = st.lists(st.one_of(plain_sentence, plain_sentence, st.sampled_from(RULES),
                                prose.map(lambda t: t[:60])), min_size=4, max_size=12).map(" ".join)
descriptions = st.one_of(long_prose, long_prose, long_prose, prose)

names = st.one_of(st.text(min_size=1, max_size=12),
                  st.sampled_from(["title", "description", "examples", "type", "properties", "$ref"]))
# A lone surrogate (not UTF-8 once written as bytes) only ever tests the passthrough: it is a
# key of the random JSON below, not of the catalogs (where it sent 30% to "not UTF-8").
SURROGATE = "lone \udc00 surrogate"
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**25), 10**25),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
json_data = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                       st.dictionaries(names, c, max_size=3)), max_leaves=6)
# Random JSON that often looks like a catalog: its keys are those the compressor and profile act on.
catalog_keys = st.one_of(names, st.just(SURROGATE), st.sampled_from([
    "tools", "name", "functions", "function", "type", "result", "jsonrpc", "inputSchema", "input_schema",
    "parameters", "outputSchema", "anyOf", "allOf", "items", "not", "if", "default", "enum", "const",
    "required", "$defs", "definitions", "patternProperties", "dependencies", "additionalProperties"]))
catalogish = st.recursive(st.one_of(scalars, st.just("function"), prose.map(lambda t: t[:200])),
                          lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(catalog_keys, c, max_size=5)),
                          max_leaves=14)


def schema_node(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["string", "integer", "number", "object", "array", "boolean", "null"]),
        "title": st.text(max_size=20),
        "description": descriptions,
        "examples": st.lists(json_data, max_size=2),
        "example": json_data,
        "$comment": st.text(max_size=10),
        "enum": st.lists(scalars, min_size=1, max_size=4),
        "default": json_data,
        "const": json_data,
        "format": st.sampled_from(["date-time", "uri", "email"]),
        "minimum": st.integers(-5, 5),
        "maxLength": st.integers(0, 99),
        "properties": st.dictionaries(names, children, max_size=4),
        "required": st.lists(names, max_size=3),
        "items": children,
        "anyOf": st.lists(children, min_size=1, max_size=3),
        "oneOf": st.lists(children, min_size=1, max_size=2),
        "additionalProperties": st.one_of(st.booleans(), children),
        "$defs": st.dictionaries(names, children, max_size=2),
        "$ref": st.sampled_from(["#/$defs/a", "#/definitions/title"]),
        "not": children,
        "x-extension": json_data,
    })


schemas = st.recursive(schema_node(st.just({})), schema_node, max_leaves=6)

tools = st.fixed_dictionaries({"name": names, "description": descriptions}, optional={
    "title": st.text(max_size=20),
    "inputSchema": schemas,
    "outputSchema": schemas,
    "annotations": st.dictionaries(names, json_data, max_size=3),
    "_meta": json_data,
})
anthropic_tools = st.builds(lambda t: {("input_schema" if k == "inputSchema" else k): v for k, v in t.items()},
                            tools)
openai_functions = st.builds(lambda t: {("parameters" if k == "inputSchema" else k): v for k, v in t.items()},
                             tools)


@st.composite
def catalogs(draw: st.DrawFn) -> Any:
    shape = draw(st.sampled_from(["mcp", "jsonrpc", "functions", "openai-tools", "array", "single"]))
    if shape == "mcp":
        return {"tools": draw(st.lists(tools, max_size=4)), **draw(st.dictionaries(names, json_data, max_size=2))}
    if shape == "jsonrpc":
        return {"jsonrpc": "2.0", "id": draw(st.integers(0, 99)),
                "result": {"tools": draw(st.lists(tools, max_size=4)), "nextCursor": draw(st.none() | st.text())}}
    if shape == "functions":
        return {"functions": draw(st.lists(openai_functions, max_size=4))}
    if shape == "openai-tools":
        return [{"type": "function", "function": f} for f in draw(st.lists(openai_functions, min_size=1, max_size=4))]
    if shape == "array":
        return draw(st.lists(anthropic_tools, min_size=1, max_size=4))
    return draw(tools)


@st.composite
def encoded(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> bytes:
    """A JSON document as some writer would have written it: indented or not, escaped or not."""
    value = draw(values)
    indent = draw(st.sampled_from([None, 2, "\t"]))
    ascii_only = draw(st.booleans())
    # a lone surrogate comes out as a \\udc00 escape, or (not ascii_only) as bytes that are not UTF-8
    return json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def check_laws(raw: bytes) -> None:
    out, result = compress(raw)
    event(f"{result.status}: {result.reason or result.shape}")
    if result.descriptions_reduced:
        event("a description reduced")
    assert isinstance(out, bytes)
    assert result.status in ("ok", "passthrough")
    if result.status == "passthrough":
        assert out == raw and result.reason
    else:
        assert result.reason is None and len(out) < len(raw)
        json.loads(out.decode("utf-8"))
    assert len(out) <= len(raw)
    assert result.bytes_after == len(out) and result.bytes_before == len(raw)
    assert 0.0 <= result.ratio <= 1.0
    if result.tokens_before is not None:
        assert result.tokens_after is not None and result.tokens_after <= result.tokens_before
    assert profile(raw) == profile(out)
    if result.status == "ok" and result.tools:
        assert profile(out)["tools"]  # a compressed catalog has a profile to keep
    again, second = compress(out)
    assert again == out and second.status == "passthrough"


@LAW
@given(encoded(catalogs()))
def test_random_catalogs_keep_the_laws(raw: bytes) -> None:
    check_laws(raw)
    out, result = compress(raw)
    if result.status == "ok":  # only descriptions and annotation keys changed
        assert strip_prose(json.loads(out)) == strip_prose(json.loads(raw))
        # and every rule sentence of the frozen list above survived, word for word
        before, after = _descriptions(json.loads(raw)), _descriptions(json.loads(out))
        for rule in RULES:
            assert before.count(rule) == after.count(rule), rule


def _descriptions(node: Any) -> str:
    """Every description string of a document, one per line."""
    if isinstance(node, dict):
        return "\n".join(v if k == "description" and isinstance(v, str) else _descriptions(v)
                         for k, v in node.items())
    if isinstance(node, list):
        return "\n".join(_descriptions(v) for v in node)
    return ""


@LAW
@given(encoded(st.one_of(json_data, catalogish)))
def test_random_json_keeps_the_laws(raw: bytes) -> None:
    check_laws(raw)


@LAW
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_random_bytes_never_raise(raw: bytes) -> None:
    out, result = compress(raw)
    assert out == raw or result.status == "ok"
    profile(raw)


def strip_prose(node: Any) -> Any:
    """The document with every description string (anywhere) and annotation-looking key removed.

    Coarser than the compressor on purpose (it removes these everywhere), so what is left
    must be equal if the compressor touched nothing else.
    """
    if isinstance(node, dict):
        return {k: strip_prose(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))
                and k not in ("title", "examples", "example", "$comment", "$schema")}
    if isinstance(node, list):
        return [strip_prose(v) for v in node]
    return node


@settings(derandomize=True, database=None, deadline=None, max_examples=600)
@given(prose)
def test_reduce_idempotent_and_keeps_every_rule(text: str) -> None:
    once = reduce(text)
    assert reduce(once) == once
    assert explain(text).text == once
    assert len(once.encode()) <= len(fold(text).encode())
    folded = fold(text)
    for unit in units(folded):
        body = folded[unit.start:unit.end]
        if is_rule(body):
            assert body in once, (body, once)


@settings(derandomize=True, database=None, deadline=None, max_examples=300)
@given(prose, st.integers(20, 400), st.integers(8, 200))
def test_reduce_with_other_thresholds(text: str, short_bytes: int, lead_bytes: int) -> None:
    once = describe.reduce(text, short_bytes=short_bytes, lead_bytes=lead_bytes)
    assert describe.reduce(once, short_bytes=short_bytes, lead_bytes=lead_bytes) == once
    assert len(once.encode()) <= len(fold(text).encode())
    if len(fold(text).encode()) <= short_bytes:
        assert once == fold(text)
    lead = describe.explain(text, short_bytes=short_bytes, lead_bytes=lead_bytes).lead
    if lead is not None and lead.endswith(ELLIPSIS) and lead not in fold(text):
        assert len(lead.encode()) <= lead_bytes


@LAW
@given(encoded(st.builds(lambda schema, desc: {"tools": [{"name": "t", "description": desc, "inputSchema": schema}]},
                         catalogish, prose)))
def test_tools_with_random_json_schemas_keep_the_laws(raw: bytes) -> None:
    check_laws(raw)
