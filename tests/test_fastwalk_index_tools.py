"""The C walker's per-document index work (caveman_batch._fastwalk.index_tools) against
toolspans' Python (_python_located_tools, and the search text's definition,
toolsearch._search_fields of the parsed tool).

Wherever the C path builds a tool's name and search text from its bytes it must be the
same as Python's from the parsed tool; what it leaves (None) Python fills, so
_located_tools is the same whether the C path is on or off. Checked on every tool of
../shared/corpora, random tools written compact, indented and ASCII-escaped, and hand-written
input the C path must hand back or get right.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caveman_batch import _accel, toolsearch, toolspans
from caveman_batch.catalog import Passthrough, compress_located, parse, serialize
from caveman_batch.toolspans import _FAST_KEYS, load

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from test_catalog_properties import schemas, tools  # noqa: E402
from test_fastwalk import corpus_documents  # noqa: E402
from test_fastwalk_search_text import enum_values, names  # noqa: E402

fastwalk = _accel.fastwalk
pytestmark = pytest.mark.skipif(
    fastwalk is None, reason="caveman_batch._fastwalk is not built (python setup.py build_ext "
    "--inplace) or CAVEMAN_PURE_PYTHON is set: nothing to compare")
LAW = settings(derandomize=True, database=None, deadline=None, max_examples=400,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _fast_one(piece: bytes, known: dict[str, Any] | None = None, compact: bool = False
              ) -> tuple[Any, ...] | None:
    """index_tools of one tool object given as its own document (and its output)."""
    assert fastwalk is not None
    found = fastwalk.index_tools(piece, piece, [(0, len(piece), 0, len(piece))],
                                 {} if known is None else known, 8192, hashlib.sha256,
                                 *_FAST_KEYS, compact)
    return None if found is None else found[0]


def _compact(piece: bytes) -> str | None:
    try:
        return serialize(parse(piece)).decode("utf-8")
    except Passthrough:
        return None


def check_same(piece: bytes) -> bool:
    """C and Python agree on the tool object `piece` (True if the C path built its text,
    False if it left it to Python), its definition as written or made compact."""
    compact = _fast_one(piece, compact=True)
    if compact is not None:  # (None: a value the copier does not write; Python's)
        assert compact[4] == _compact(piece)
        assert compact[:4] + compact[5:] == _fast_one(piece)[:4] + _fast_one(piece)[5:]  # type: ignore[index]
    fast = _fast_one(piece)
    assert fast is not None
    name, digest, start, length, definition, fields = fast
    assert (digest, start, length, definition) == (
        hashlib.sha256(piece).hexdigest(), 0, len(piece), piece.decode("utf-8"))
    if fields is None:
        assert name is None
        return False
    tool = load(piece)
    assert name == str(tool.get("name", "")) and type(name) is str
    assert fields == toolsearch._search_fields(tool)
    assert list(fields) == list(toolsearch.FIELDS)
    return True


def _encodings(tool: dict[str, Any]) -> list[bytes]:
    """One tool object written as catalogs write them: compact, indented, ASCII-escaped."""
    return [json.dumps(tool, ensure_ascii=False, separators=(",", ":")).encode(),
            json.dumps(tool, indent=2).encode(),
            json.dumps(tool, ensure_ascii=False, separators=(", ", ": ")).encode()]


def _located_alike(raw: bytes) -> int:
    """_located_tools of one document, C on, is the Python definition's, with its
    definitions from the output and made compact (as for a passthrough); the tools."""
    out, _, located = compress_located(raw)
    if located is None or not located[4]:
        return 0
    spans = located[4]
    for output, compact in ((out, False), (raw, True)):
        if output == raw and not compact:
            continue  # a passthrough: the output spans are the rewrite's, not its
        toolspans.clear_cache()
        expected = toolspans._python_located_tools(raw, output, spans, compact)
        toolspans.clear_cache()
        assert toolspans._located_tools(raw, output, spans, compact) == expected
        assert toolspans._located_tools(raw, output, spans, compact) == expected  # cached
    return len(spans)


def test_every_corpus_tool(corpora: Path) -> None:
    taken = declined = 0
    for _, raw in corpus_documents(corpora):
        assert fastwalk is not None
        out, _, located = compress_located(raw)
        if located is None or out == raw:
            continue
        for a, b, _, _ in located[4]:
            if check_same(raw[a:b]):
                taken += 1
            else:
                declined += 1
        _located_alike(raw)
    assert taken > 5_000 and declined < taken / 100


@LAW
@given(tools, names)
def test_random_tools(tool: dict[str, Any], name: str) -> None:
    for piece in (*_encodings(tool), *_encodings({**tool, "name": name}),
                  *_encodings({"inputSchema": {"properties": {name: {}}}, **tool})):
        check_same(piece)


@LAW
@given(st.dictionaries(st.sampled_from(["name", "description", "inputSchema", "input_schema",
                                        "parameters", "outputSchema", "x"]),
                       st.one_of(schemas, names, enum_values), max_size=5),
       enum_values)
def test_random_keys_and_values(tool: dict[str, Any], values: list[Any]) -> None:
    for piece in (*_encodings(tool), *_encodings(
            {**tool, "parameters": {"enum": values, "items": [{"enum": values}],
                                    "not": {"description": values}}})):
        check_same(piece)


@LAW
@given(st.lists(tools, min_size=1, max_size=4), st.integers(0, 2))
def test_random_catalogs_are_located_alike(found: list[dict[str, Any]], indent: int) -> None:
    raw = json.dumps({"tools": found}, indent=indent or None, ensure_ascii=indent == 1).encode()
    _located_alike(raw)


def test_a_passthrough_s_definitions_are_its_tools_made_compact() -> None:
    tool = b'{"name":"t","description":"d\xc3\xa9/","inputSchema":{"default":1.10,"maximum":1e3}}'
    raw = b'{"server":"s","tools":[' + tool + b'],"x":1.50}'
    out, result, located = compress_located(raw)
    assert result.status == "passthrough" and out == raw and located is not None
    assert located[4][0][:2] == (raw.index(tool), raw.index(tool) + len(tool))
    assert toolspans.index_tools(raw, out, located)[1][0][4] == tool.decode()  # type: ignore[index]
    assert _located_alike(raw) == 1


@pytest.mark.parametrize("piece", [
    b'{"name":"getPullRequest_v2","description":"D\\u00e9j\\u00e0 \\"q\\"","inputSchema":'
    b'{"type":"object","properties":{"pr_id":{"type":"integer","description":"The PR.",'
    b'"enum":[1,-0,true,false,null,"x",[1],{"a":1}]},"items":{"properties":{"n":{}}}}}}',
    b'{"parameters":{"description":"second"},"inputSchema":{"description":"first"}}',
    b'{"inputSchema":{"anyOf":[{"description":"a"},3,{"items":{"description":"b"}}],'
    b'"items":[{"description":"c"}],"not":"x","if":{"enum":["d"]}}}',
    b'{"name":"a","inputSchema":{"properties":{"":{},"_":{"description":""}}}}',
    b'{"description":5,"inputSchema":{"description":5,"enum":{"a":1},"properties":[1]}}',
    b'{}',
    b' {"name" : "spaced" , "description" :\n"d"\t} ',
])
def test_text_built_as_python(piece: bytes) -> None:
    assert check_same(piece)


def test_deep_schemas_stop_at_python_s_depth() -> None:
    deep: dict[str, Any] = {"description": "bottom"}
    for level in range(70):
        deep = {"properties": {f"p{level}": deep}, "description": f"d{level}"}
    assert check_same(orjson.dumps({"name": "deep", "inputSchema": deep}))


@pytest.mark.parametrize("piece", [
    b'{"name":5}', b'{"name":"caf\xc3\xa9"}', b'{"name":"tab\\there"}',
    b'{"inputSchema":{"properties":{"caf\xc3\xa9":{}}}}',
    b'{"inputSchema":{"enum":[1.5]}}', b'{"inputSchema":{"enum":[1e3]}}',
    b'{"inputSchema":{"enum":[1234567890123456789]}}',
    b'{"name":"a","name":"b"}',
])
def test_what_python_builds_is_handed_back(piece: bytes) -> None:
    assert not check_same(piece)


def test_the_cache_is_read_and_filled_as_python_fills_it() -> None:
    piece = b'{"name":"t","description":"d"}'
    digest = hashlib.sha256(piece).hexdigest()
    known: dict[str, Any] = {digest: ("known", {"name": "k", "description": "", "params": ""})}
    assert _fast_one(piece, known)[0] == "known"  # type: ignore[index]
    full = {str(i): ("x", {}) for i in range(8192)}
    assert _fast_one(piece, full)[0] == "t"  # type: ignore[index]
    assert list(full) == [digest]  # emptied when full, as toolspans._described empties it


def test_a_span_that_is_not_one_hands_the_document_back() -> None:
    assert fastwalk is not None
    raw = b'{"name":"t"}'
    for spans in ([(0, 99, 0, 1)], [(2, 1, 0, 1)], [(0, 1)], [(0, 1, 0, "1")]):
        assert fastwalk.index_tools(raw, raw, spans, {}, 8192, hashlib.sha256,
                                    *_FAST_KEYS) is None
