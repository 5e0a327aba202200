"""Each tool's byte span in its catalog (toolspans), by the Python scanner and the C walker."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from caveman_batch import _accel, toolspans
from caveman_batch.catalog import _plan, compress, compress_located, locate_tools, parse, serialize
from caveman_batch.toolspans import _fast_spans, _spans, index_entries, load, tool_spans

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from test_catalog_properties import catalogs, encoded  # noqa: E402

LAW = settings(derandomize=True, database=None, deadline=None, max_examples=200,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TOOL_A = {"name": "a", "description": "Ä tool, «quoted» \"x\" \\ [not a bracket] {}",
          "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
TOOL_B = {"name": "b", "description": "second", "parameters": {"type": "object"}}


def _check(raw: bytes) -> list[bytes]:
    """The slices, each parsing to its tool; C and Python scanners agree."""
    _, tools = locate_tools(json.loads(raw.decode("utf-8-sig")))  # plain values: comparable
    spans = tool_spans(raw)
    assert spans is not None and len(spans) == len(tools)
    pieces = [raw[a:b] for a, b in spans]
    assert [json.loads(p) for p in pieces] == tools
    loaded = load(raw)
    path, kinds = _plan(loaded, *locate_tools(loaded))
    assert _spans(raw, path, kinds) == spans
    if _accel.fastwalk is not None and not raw.startswith(b"\xef\xbb\xbf"):
        assert _fast_spans(raw, path, kinds) == spans
    return pieces


@pytest.mark.parametrize("indent", [None, 1, 4])
@pytest.mark.parametrize("wrap", ["mcp", "jsonrpc", "openai-functions", "openai-tools",
                                  "array", "single", "single-function"])
def test_every_shape(indent: int | None, wrap: str) -> None:
    tools = [TOOL_A, TOOL_B]
    doc = {"mcp": {"server": "s", "tools": tools},
           "jsonrpc": {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}},
           "openai-functions": {"functions": tools},
           "openai-tools": [{"type": "function", "function": t} for t in tools]
                           + [{"type": "web_search"}],
           "array": tools,
           "single": TOOL_A,
           "single-function": {"type": "function", "function": TOOL_A}}[wrap]
    raw = json.dumps(doc, indent=indent, ensure_ascii=False).encode()
    pieces = _check(raw)
    assert json.loads(pieces[0]) == TOOL_A
    if indent is None:
        assert pieces[0] == json.dumps(TOOL_A, ensure_ascii=False).encode()


def test_a_bom_and_odd_white_space() -> None:
    raw = b'\xef\xbb\xbf \r\n{ "tools" :\t[ {"name":"x","description":"d"}\n ,\n{"name":"y","description":"]"} ] }\n'
    assert _check(raw) == [b'{"name":"x","description":"d"}', b'{"name":"y","description":"]"}']


def test_not_a_catalog() -> None:
    assert tool_spans(b'{"a": 1}') is None
    assert tool_spans(b"not json") is None
    assert index_entries(b'{"a": 1}', b'{"a": 1}') is None


def test_a_span_that_does_not_parse_to_its_tool_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from caveman_batch import toolspans

    raw = json.dumps({"tools": [TOOL_A, TOOL_B]}).encode()
    monkeypatch.setattr(toolspans, "_fast_spans", lambda *a: None)
    monkeypatch.setattr(toolspans, "_spans", lambda raw, path, kinds: [(0, 5), (6, 9)])
    assert tool_spans(raw) is None


@pytest.mark.parametrize("raw", [
    b'{"tools":[{"name":"a","description":"d","inputSchema":{"default":1.5}}],"x":1e400}',
    b'{"tools":[{"name":"a","inputSchema":{"default":' + b"9" * 4301 + b'}}]}',
    b'\xef\xbb\xbf{"tools":[{"name":"a","inputSchema":{"default":1.5}}]}',
], ids=["1e400", "4301 digits", "BOM"])
def test_a_catalog_with_a_number_orjson_cannot_hold_is_spanned_by_both_paths(
        raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Such a document is parsed by catalog.parse, whose numbers are orjson.Fragments, which
    compare by identity: each span's check failed, and the pure-Python path (and, with a BOM,
    the C one, which refuses a BOM) left the catalog's tools out of the index."""
    from caveman_batch import toolspans

    with_c = tool_spans(raw)
    monkeypatch.setattr(toolspans, "_fast_spans", lambda *a: None)
    spans = tool_spans(raw)
    assert spans is not None and len(spans) == 1
    assert with_c in (None, spans)  # (C refuses a BOM: the Python path then decides)
    start, end = spans[0]
    assert raw[start:start + 1] == b"{" and raw[end - 1:end] == b"}"
    out, _ = compress(raw)
    entries = index_entries(raw, out)
    assert entries is not None and [e.name for e in entries[1]] == ["a"]


def test_every_corpus_catalog(corpora: Path) -> None:
    checked = 0
    for path in sorted(corpora.rglob("*.json")):
        raw = path.read_bytes()
        out, result = compress(raw)
        if result.status == "ok" or (result.tools and not result.broken):
            _check(raw)
            entries = index_entries(raw, out)
            assert entries is not None
            _, tools = locate_tools(parse(out))
            assert [e.definition.encode() for e in entries[1]] == [serialize(t) for t in tools]
            checked += 1
    assert checked > 800


def _entries_as_located(raw: bytes) -> Any:
    """index_entries from compress's C path (catalog.compress_located), its cache empty
    first, and again from the cache; and as a whole parse finds them."""
    out, _, located = compress_located(raw)
    toolspans.clear_cache()
    expected = index_entries(raw, out)
    toolspans.clear_cache()
    found = index_entries(raw, out, located)
    assert index_entries(raw, out, located) == found
    return located, found, expected


@pytest.mark.skipif(_accel.fastwalk is None, reason="caveman_batch._fastwalk is not built or "
                    "CAVEMAN_PURE_PYTHON is set: nothing located to compare")
def test_the_c_path_locates_what_a_whole_parse_does_in_every_corpus_catalog(
        corpora: Path) -> None:
    """Names, bytes, offsets, definitions and search text alike, each tool parsed from
    its own bytes (its text not known yet) or not at all (known)."""
    located_ones = 0
    for path in sorted(corpora.rglob("*.json")):
        located, found, expected = _entries_as_located(path.read_bytes())
        assert found == expected, path
        located_ones += located is not None and expected is not None
    assert located_ones > 800


@LAW
@given(encoded(catalogs()))
def test_random_catalogs_are_located_alike(raw: bytes) -> None:
    _, found, expected = _entries_as_located(raw)
    assert found == expected


@LAW
@given(encoded(catalogs()))
def test_random_catalogs(raw: bytes) -> None:
    try:
        serialize(parse(raw))  # (a lone surrogate escape: no text to index, spans or not)
        locate_tools(parse(raw))
    except Exception:
        assert index_entries(raw, raw) is None
        return
    _check(raw)
    out, result = compress(raw)
    entries = index_entries(raw, out)
    if entries is not None and out != raw:  # definitions: the tools where the output has them
        _, tools = locate_tools(parse(out))
        assert [e.definition.encode() for e in entries[1]] == [serialize(t) for t in tools]


def test_a_passthrough_with_a_lone_surrogate_is_indexed_as_written() -> None:
    raw = b'{"tools":[{"name":"t","description":"\\udc00"},{"name":"u","description":"U."}]}'
    out, result = compress(raw)
    assert result.status == "passthrough" and not result.broken
    found = index_entries(raw, out)
    assert found is not None
    odd, plain = found[1]
    assert odd.definition == '{"name":"t","description":"\\udc00"}' and odd.original == raw[10:45]
    assert odd.fields["description"] == "\ufffd"
    assert plain.definition == '{"name":"u","description":"U."}'


def test_definitions_are_the_compressed_tools_and_keep_number_literals() -> None:
    long = "Lists things. " + "This sentence says nothing much at all here. " * 8
    raw = (b'{"tools":[{"name":"t","description":"' + long.encode()
           + b'","inputSchema":{"type":"object","properties":{"x":{"type":"number",'
             b'"default":1.10,"maximum":1e3}}}}]}')
    out, result = compress(raw)
    assert result.status == "ok"
    label, (entry,) = index_entries(raw, out)
    assert label is None
    assert entry.original == raw[len(b'{"tools":['):-2]
    assert '"default":1.10,"maximum":1e3' in entry.definition
    assert entry.definition.encode() in out
    assert entry.fields["name"] == "t" and "Lists things." in entry.fields["description"]


def test_a_passthrough_catalog_gets_compact_definitions() -> None:
    raw = (b'{"server":"srv","tools":[{"name":"t","description":"short",'
           b'"inputSchema":{"type":"object"}}],"x":1.50}')
    out, result = compress(raw)
    assert result.status == "passthrough" and out == raw
    label, (entry,) = index_entries(raw, out)
    assert label == "srv"
    assert entry.definition == '{"name":"t","description":"short","inputSchema":{"type":"object"}}'
