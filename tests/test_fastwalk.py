"""The C fast path (caveman_batch._fastwalk) against the pure-Python reference path.

catalog.py is the specification: wherever the C path gives a result it must be the
bytes and counts of parse + rewrite + serialize, and compress() must give the same
(bytes, CompressResult) with the accelerator on as with it off. Wherever it is unsure
it returns None and the reference path decides. Checked on every real catalog of
../shared/corpora, the committed samples, generated registries, random JSON and
catalogs, random byte mutations of real catalogs, and hand-written adversarial input.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from caveman_batch import _accel, catalog, describe
from caveman_batch.catalog import (
    DEFAULT_OPTIONS,
    MAX_DEPTH,
    Options,
    Passthrough,
    compress,
    parse,
    rewrite,
    serialize,
)

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # bench_data is not an installed package: it runs from the repo
    sys.path.insert(0, str(REPO))

from bench_data.generate import generate_registry  # noqa: E402
from test_catalog_properties import catalogish, catalogs, encoded, json_data  # noqa: E402

fastwalk = _accel.fastwalk
pytestmark = pytest.mark.skipif(
    fastwalk is None, reason="caveman_batch._fastwalk is not built (python setup.py build_ext "
    "--inplace) or CAVEMAN_PURE_PYTHON is set: nothing to compare")

SAMPLES = REPO / "bench_data" / "samples"
OPTION_SETS = [DEFAULT_OPTIONS, Options(drop_annotations=False),
               Options(short_bytes=40, lead_bytes=20), Options(short_bytes=0, count_tokens=False)]
LAW = settings(derandomize=True, database=None, deadline=None, max_examples=200,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- the comparison ---------------------------------------------------------------


@contextmanager
def pure_python() -> Iterator[None]:
    saved = _accel.fastwalk
    _accel.fastwalk = None
    try:
        yield
    finally:
        _accel.fastwalk = saved


def reference_rewrite(raw: bytes, options: Options) -> tuple[bytes, str, int, int, int] | None:
    """What the Python path computes before its size checks; None where it passes through."""
    try:
        doc = parse(raw)
        shape, ntools, walk = rewrite(doc, options)
        out = serialize(doc)
    except (Passthrough, RecursionError, UnicodeEncodeError):
        return None
    return out, shape, ntools, walk.descriptions_reduced, walk.annotations_dropped


def check_same(raw: bytes, options: Options = DEFAULT_OPTIONS) -> bool:
    """Both paths agree on `raw`; True if the C path gave the result (False: it fell back)."""
    fast = catalog._fast_compress(raw, options)
    if fast is not None:  # compared before the size checks, which could hide a difference
        assert fast == reference_rewrite(raw, options)
    out, result = compress(raw, options)
    with pure_python():
        ref_out, ref_result = compress(raw, options)
    assert out == ref_out
    assert result.as_dict() == ref_result.as_dict()
    return fast is not None


def rewrite_c(raw: bytes, path: tuple[str, ...] = ("tools",), kinds: bytes | int = b"\x01",
              reducer: Callable[[str], str] = describe.reduce, drop: bool = True,
              short_bytes: int = describe.SHORT_BYTES) -> tuple[bytes, int, int] | None:
    assert fastwalk is not None
    return fastwalk.rewrite(raw, path, kinds, drop, short_bytes, reducer)


def skim(raw: bytes, max_depth: int) -> Any:
    assert fastwalk is not None
    return fastwalk.skim(raw, max_depth)


BOM = b"\xef\xbb\xbf"


def truncated(value: Any, max_depth: int, depth: int = 0) -> Any:
    """`value` with every dict and list deeper than max_depth emptied (the root is depth 0)."""
    if isinstance(value, dict):
        return {} if depth > max_depth else {k: truncated(v, max_depth, depth + 1)
                                              for k, v in value.items()}
    if isinstance(value, list):
        return [] if depth > max_depth else [truncated(v, max_depth, depth + 1) for v in value]
    return value


def nesting(value: Any) -> int:
    """Containers open at the deepest point of `value` (what MAX_NESTING bounds)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in node)
    return deepest


def _int_or_none(literal: str) -> int | None:
    limit = sys.get_int_max_str_digits()
    return int(literal) if not limit or len(literal.lstrip("-")) <= limit else None


def skim_reference(raw: bytes, max_depth: int) -> Any:
    """What skim(raw, max_depth) must give: None for any document rewrite() refuses whatever
    the plan (what parse() refuses, a BOM, lone surrogates, more than MAX_DEPTH containers
    open), else json.loads' value truncated to max_depth."""
    if raw.startswith(BOM):
        return None
    try:
        doc = parse(raw)
        serialize(doc)  # refuses lone surrogates
    except Passthrough:
        return None
    if nesting(doc) > MAX_DEPTH:
        return None
    return truncated(json.loads(raw, parse_int=_int_or_none), max_depth)


def tagged(value: Any) -> Any:
    """`value` in a form whose equality also sees types and key order (1, 1.0, True; -0.0)."""
    if isinstance(value, dict):
        return "dict", [(k, tagged(v)) for k, v in value.items()]
    if isinstance(value, list):
        return "list", [tagged(v) for v in value]
    if isinstance(value, float):
        return "float", repr(value)
    return type(value).__name__, value


def assert_skim_refuses(raw: bytes) -> None:
    for max_depth in (-1, 0, catalog.SKIM_DEPTH, MAX_DEPTH + 1):
        assert skim(raw, max_depth) is None, max_depth


def one_tool(**fields: Any) -> dict[str, Any]:
    return {"tools": [{"name": "t", **fields}]}


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


# -- real and generated catalogs --------------------------------------------------------


def corpus_documents(root: Path) -> Iterator[tuple[str, bytes]]:
    """Every *.json (and the *.snap tool snapshots, JSON too) and every JSONL line."""
    for path in sorted([*root.rglob("*.json"), *root.rglob("*.snap")]):
        yield str(path.relative_to(root)), path.read_bytes()
    for path in sorted(root.rglob("*.jsonl")):
        for i, line in enumerate(path.read_bytes().splitlines()):
            yield f"{path.relative_to(root)}:{i + 1}", line


def test_every_corpus_catalog(corpora: Path) -> None:
    fell_back: Counter[str] = Counter()
    taken = 0
    for name, raw in corpus_documents(corpora):
        if check_same(raw):
            taken += 1
            continue
        with pure_python():
            _, result = compress(raw)
        # a fallback is fine only where the reference path could not rewrite either
        assert result.status == "passthrough" and result.reason not in (
            "not smaller", "not fewer tokens"), f"{name} fell back but the Python path rewrote it"
        fell_back[(result.reason or "").split(":")[0]] += 1
    print(f"\n_fastwalk on the corpora: {taken} rewritten in C, {sum(fell_back.values())} fell "
          f"back: {dict(fell_back)}")
    assert taken >= 900
    assert sum(fell_back.values()) <= 20


@pytest.mark.parametrize("options", OPTION_SETS[1:], ids=["annotations-kept", "short-40", "short-0"])
def test_corpus_catalogs_under_other_options(corpora: Path, options: Options) -> None:
    for _name, raw in list(corpus_documents(corpora))[::7]:
        check_same(raw, options)


def test_committed_samples() -> None:
    docs = list(corpus_documents(SAMPLES))
    assert len(docs) > 20
    taken = sum(check_same(raw, options) for _, raw in docs for options in OPTION_SETS[:2])
    assert taken >= 2 * 14


def test_generated_registry(tmp_path: Path) -> None:
    generate_registry(tmp_path / "tree", seed=99, servers=24, oversize_bytes=64 * 1024,
                      jsonl=tmp_path / "all.jsonl", array=tmp_path / "all-array.json")
    docs = list(corpus_documents(tmp_path))
    taken = sum(check_same(raw) for _, raw in docs)
    assert taken >= 2 * 24


# -- hypothesis -------------------------------------------------------------------


@LAW
@given(encoded(catalogs()), st.sampled_from(OPTION_SETS))
def test_random_catalogs(raw: bytes, options: Options) -> None:
    event("C path" if check_same(raw, options) else "fell back")


@LAW
@given(encoded(st.one_of(json_data, catalogish)))
def test_random_json(raw: bytes) -> None:
    event("C path" if check_same(raw) else "fell back")


def _mutation_seeds() -> list[bytes]:
    seeds = [p.read_bytes() for p in sorted((SAMPLES / "registry").rglob("*.json"))
             if "_quirks" not in p.parts and p.stat().st_size < 8000]
    seeds.append(dumps(one_tool(
        description="Escapes \" \\ / \b \f \n \r \t \x00 \x1f \x7f é \u2028 😀 and a long tail " * 3,
        inputSchema={"type": "object", "title": "T", "properties": {
            "a\u0000b": {"type": "number", "default": 1.10, "description": "ünïcode  spaced ",
                         "examples": [1e3, -0, 123456789012345678901234567890]}}})))
    return seeds


SEEDS = _mutation_seeds()
INTERESTING = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b" ", b"\x00", b"\x1f", b"\x7f",
               b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\u", b"\\ud800", b"\\udc00", b"0", b"-", b"e",
               b"1", b"n", b"\xef\xbb\xbf", b"\\u0061", b"title", b'"description"']


def _plan_of(raw: bytes) -> tuple[tuple[str, ...], bytes | int] | None:
    doc = parse(raw)
    return catalog._plan(doc, *catalog.locate_tools(doc))


SEED_PLANS = [_plan_of(raw) for raw in SEEDS]


@st.composite
def mutated(draw: st.DrawFn, seed: int | None = None) -> bytes:
    raw = bytearray(SEEDS[seed] if seed is not None else draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(raw)))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        piece = draw(st.one_of(st.sampled_from(INTERESTING), st.binary(min_size=1, max_size=3)))
        if op == "insert":
            raw[at:at] = piece
        elif op == "delete":
            del raw[at:at + draw(st.integers(1, 8))]
        else:
            raw[at:at + len(piece)] = piece
    return bytes(raw)


@LAW
@given(mutated())
def test_mutated_catalogs(raw: bytes) -> None:
    event("C path" if check_same(raw) else "fell back")


@LAW
@given(st.data())
def test_mutations_under_the_seed_plan(data: st.DataObject) -> None:
    """The C walker alone, on broken bytes with the plan of the intact catalog: whatever it
    accepts is strict JSON that parse() accepts, and when the plan still fits, it is right."""
    seed = data.draw(st.integers(0, len(SEEDS) - 1))
    raw = data.draw(mutated(seed))
    plan = SEED_PLANS[seed]
    assert plan is not None
    done = rewrite_c(raw, *plan)
    event("C accepted" if done is not None else "C declined")
    skimmed = skim(raw, catalog.SKIM_DEPTH)
    assert tagged(skimmed) == tagged(skim_reference(raw, catalog.SKIM_DEPTH))
    if done is None:
        return
    assert skimmed is not None  # what rewrite() takes, skim() takes
    try:
        fits = _plan_of(raw) == plan  # parse() must not raise: the C walker is as strict
    except Passthrough as exc:
        assert "unknown shape" in str(exc)
        return
    if fits:
        ref = reference_rewrite(raw, DEFAULT_OPTIONS)
        assert ref is not None and done == (ref[0], ref[3], ref[4])


@settings(derandomize=True, database=None, deadline=None, max_examples=500)
@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60),
       st.integers(0, 70))
def test_the_skipped_reducer_calls_change_nothing(text: str, short_bytes: int) -> None:
    """C skips reduce() on short folded printable ASCII: reduce() returns those unchanged."""
    calls: list[str] = []
    raw = dumps(one_tool(description=text))
    done = rewrite_c(raw, short_bytes=short_bytes, reducer=lambda s: calls.append(s) or s)
    assert done is not None
    skipped = not calls
    if skipped:
        assert describe.reduce(text, short_bytes=short_bytes) == text
        assert len(text) <= short_bytes and "  " not in text and text.strip(" ") == text


# -- adversarial ------------------------------------------------------------------


def test_deep_nesting_declines_quickly() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    started = time.perf_counter()
    assert rewrite_c(deep, (), b"") is None
    schema = b'{"not":' * 100_000 + b"{}" + b"}" * 100_000
    assert rewrite_c(b'{"tools":[{"name":"t","inputSchema":' + schema + b"}]}") is None
    assert_skim_refuses(deep)
    assert_skim_refuses(b'{"tools":[{"name":"t","inputSchema":' + schema + b"}]}")
    assert time.perf_counter() - started < 1.0
    check_same(b'{"tools":[' + deep + b"]}")


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_nesting_at_the_limit(depth: int) -> None:
    """Up to MAX_DEPTH open containers are handled; one more goes to Python."""
    assert fastwalk is not None and fastwalk.MAX_NESTING == MAX_DEPTH
    inner = depth - 3  # the root object, the tools array and the tool are open around _meta
    raw = (b'{"tools":[{"name":"t","description":"A  tool.","_meta":' + b"[" * inner + b"1"
           + b"]" * inner + b"}]}")
    done = rewrite_c(raw)
    assert (done is None) == (depth > MAX_DEPTH)
    for max_depth in (-1, catalog.SKIM_DEPTH, MAX_DEPTH + 5):
        assert (skim(raw, max_depth) is None) == (depth > MAX_DEPTH)
    check_same(raw)
    schema = b'{"description":"deep  x","type":"string"}'
    for _ in range(depth - 4):  # root, array, tool, inputSchema
        schema = b'{"not":' + schema + b"}"
    raw = b'{"tools":[{"name":"t","inputSchema":' + schema + b"}]}"
    assert (rewrite_c(raw) is None) == (depth > MAX_DEPTH)
    check_same(raw)


def test_a_big_object_and_a_late_duplicate() -> None:
    members = b",".join(b'"k%d":%d' % (i, i) for i in range(100_000))
    raw = b'{"tools":[{"name":"t","description":"d","_meta":{' + members + b"}}]}"
    dup = raw.replace(b"}}]}", b',"k7":0}}]}')
    escaped_dup = raw.replace(b"}}]}", b',"\\u006b7":0}}]}')
    started = time.perf_counter()
    done = rewrite_c(raw)
    assert done is not None and done[0] == orjson.dumps(orjson.loads(raw))
    assert rewrite_c(dup) is None
    assert rewrite_c(escaped_dup) is None
    assert time.perf_counter() - started < 2.0
    out, result = compress(dup)
    assert out == dup and result.broken and "duplicate key" in (result.reason or "")


@pytest.mark.parametrize("raw", [
    b'{"tools":[{"name":"t","a":1,"a":2}]}',
    b'{"tools":[{"name":"t","a":1,"\\u0061":2}]}',
    b'{"tools":[{"name":"t","\\/":1,"/":2}]}',
    b'{"tools":[{"name":"t","\\ud83d\\ude00":1,"\xf0\x9f\x98\x80":2}]}',
    b'{"tools":[{"name":"t"}],"x":{"b":{},"b":[]}}',
    b'{"tools":[{"name":"t","inputSchema":{"title":"a","title":"b"}}]}',
    b'{"tools":[],"tools":[{"name":"t"}]}',
    b'{"tools":[{"name":"t","":1,"":2}]}',
    b'{"tools":[{"name":"t","x":{"":1,"b":2,"\\u0000":3,"\\u0000":4}}]}',
])
def test_duplicate_keys_decline(raw: bytes) -> None:
    assert rewrite_c(raw) is None
    assert_skim_refuses(raw)
    check_same(raw)


ESCAPES = "\" \\ / \b \f \n \r \t \x00 \x01 \x1f \x7f é \u2028 \u2029 \ufeff 😀 \U0010ffff"


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_escapes_of_every_kind(ensure_ascii: bool) -> None:
    doc = {"tools": [{"name": "t" + ESCAPES, "description": ESCAPES * 9,
                      ESCAPES: ESCAPES, "inputSchema": {"properties": {ESCAPES: {
                          "description": ESCAPES, "title": ESCAPES, "enum": [ESCAPES]}}}}]}
    raw = json.dumps(doc, ensure_ascii=ensure_ascii).encode()
    raw = raw.replace(b"/", b"\\/").replace(b"\\u00e9", b"\\u00E9")  # both legal, both decoded
    done, ref = rewrite_c(raw), reference_rewrite(raw, DEFAULT_OPTIONS)
    assert done is not None and ref is not None and done == (ref[0], ref[3], ref[4])
    assert b"\\u001f" in done[0] and b"\\/" not in done[0] and b"\\u2028" not in done[0]
    assert orjson.loads(done[0])["tools"][0][ESCAPES] == ESCAPES
    check_same(raw)


@pytest.mark.parametrize("string", [
    b'"\\ud800"', b'"\\udc00"', b'"x\\ud800x"', b'"\\ud800\\u0041"', b'"\\ud800\\ud800"',
    b'"\\udc00\\ud800"', b'"\\ud800\\"', b'"\\ud83d"',
])
@pytest.mark.parametrize("where", ["value", "key", "description", "schema-description"])
def test_lone_surrogates_decline(string: bytes, where: str) -> None:
    raw = {
        "value": b'{"tools":[{"name":"t","x":' + string + b"}]}",
        "key": b'{"tools":[{"name":"t",' + string + b":1}]}",
        "description": b'{"tools":[{"name":"t","description":' + string + b"}]}",
        "schema-description": b'{"tools":[{"name":"t","inputSchema":{"description":' + string
                              + b"}}]}",
    }[where]
    assert rewrite_c(raw) is None
    assert_skim_refuses(raw)
    check_same(raw)


@pytest.mark.parametrize("raw", [
    b"", b"   ", b"\xef\xbb\xbf", b'\xef\xbb\xbf{"tools":[{"name":"t","description":"x"}]}',
    b'{"tools":[]} x', b'{"tools":[]}{"tools":[]}', b'{"tools":[]},', b'{"tools":[]}\x00',
    b'{"tools":[]', b'{"tools":[],}', b'{"tools" []}', b"{'tools':[]}", b'{"tools":[]}\xc2\xa0',
    b'\xc2\xa0{"tools":[]}', b'\x0c{"tools":[]}', b'{"tools":[]}\x0b', b'{"tools":[}',
])
def test_what_is_not_one_strict_json_document_declines(raw: bytes) -> None:
    assert rewrite_c(raw, kinds=b"") is None
    assert_skim_refuses(raw)
    check_same(raw)


@pytest.mark.parametrize("value", [
    b"tru", b"True", b"nulll", b"NaN", b"Infinity", b"-Infinity", b"01", b"-01", b"1.", b".5",
    b"+1", b"-", b"1e", b"1e+", b"0x1", b"1.5e3.2", b"1 2", b'"\\x41"', b'"\\u12"', b'"\\u12G4"',
    b'"abc', b'"\\', b'"\t"', b'"\n"', b'"\x00"', b'"\x1f"', b"[1,]", b"[,1]", b"[1 2]",
    b'{"a":1,}', b'{"a" 1}', b'{"a":}', b"{1:2}", b'{"a":1 "b":2}', b"]", b"}", b",", b":",
])
def test_what_is_not_strict_json_declines(value: bytes) -> None:
    for raw in (b'{"tools":[],"x":' + value + b"}", b'{"tools":[],"x":[' + value + b"]}"):
        assert rewrite_c(raw, kinds=b"") is None
        assert_skim_refuses(raw)
        check_same(raw)


@pytest.mark.parametrize("bad", [
    b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc3", b"\xe0\x80\x80", b"\xe0\x9f\xbf",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xef\xbf", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe", b"\xf0\x9f\x98",
])
def test_invalid_utf8_declines(bad: bytes) -> None:
    for raw in (b'{"tools":[{"name":"t","x":"a' + bad + b'b"}]}',
                b'{"tools":[{"name":"t","description":"a' + bad + b'"}]}',
                b'{"tools":[{"name":"t","a' + bad + b'":1}]}'):
        assert rewrite_c(raw) is None
        assert_skim_refuses(raw)
        check_same(raw)


@pytest.mark.parametrize("good", [
    b"\xc2\x80", b"\xdf\xbf", b"\xe0\xa0\x80", b"\xed\x9f\xbf", b"\xee\x80\x80", b"\xef\xbf\xbf",
    b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\x7f",
])
def test_valid_utf8_edges_pass(good: bytes) -> None:
    raw = b'{"tools":[{"name":"t","x":"a' + good + b'b","description":"' + good + b'"}]}'
    assert rewrite_c(raw) is not None
    assert skim(raw, 5) == json.loads(raw)
    check_same(raw)


def test_numbers_are_copied_as_written() -> None:
    numbers = [b"0", b"-0", b"1.10", b"1e3", b"1E+3", b"1e-0", b"-0.0", b"10.0", b"2.5E-10",
               b"123456789012345678901234567890", b"-123456789012345678", b"1234567890123456789",
               b"1e999", b"-1e-999", b"0.000000000000000000000000000001"]
    raw = b'{"tools":[{"name":"t","description":"d","inputSchema":{"properties":{"x":{"enum":['
    raw += b", ".join(numbers) + b'],"default":1.10,"minimum":-0}}}}],"n":1E400}'
    done = rewrite_c(raw)
    assert done is not None
    assert b",".join(numbers) in done[0] and b'"default":1.10' in done[0] and b'"n":1E400' in done[0]
    assert parse(raw) is not None and done[0] == serialize(parse(raw))
    check_same(raw)  # orjson.loads refuses 1E400: compress falls back, with the same result


def test_empty_keys_and_strings() -> None:
    raw = b'{"":"","tools":[{"name":"","description":"","":{"":[]},"inputSchema":{"":""}}]}'
    assert rewrite_c(raw) == (raw, 0, 0)
    check_same(raw)


def test_whitespace_everywhere() -> None:
    raw = (b' \t\r\n{ "tools" :\n [ \r\n { "name" : "t" ,\t"description" : "x  y" , "inputSchema" '
           b': { "type" : "object" , "title" : "T" , "properties" : { } } } ] , "z" : [ ] , "o" '
           b': { } }\n\n')
    done = rewrite_c(raw)
    assert done is not None
    assert done[0] == (b'{"tools":[{"name":"t","description":"x y","inputSchema":{"type":"object",'
                       b'"properties":{}}}],"z":[],"o":{}}')
    assert done[1:] == (1, 1)
    check_same(raw)


def test_the_walk_follows_the_rules() -> None:
    """Data stays data: annotations' values, enum/const/default/required, non-schema containers."""
    default_obj = {"description": "A  default  holding prose.", "title": "kept"}
    schema = {
        "title": "gone", "$schema": "gone", "$comment": "gone", "examples": [{"title": "x"}],
        "example": {"description": "data  data"}, "description": "Top  level.",
        "properties": {"title": {"type": "string", "description": "The  title."},
                       "description": {"title": "gone", "default": default_obj},
                       "n": 5, "l": [{"description": "list  member"}]},
        "items": [{"description": "tuple  item"}, 3, {"title": "gone"}],
        "anyOf": {"description": "not a list: data  stays"},
        "not": [{"description": "not an object: data  stays"}],
        "additionalProperties": {"description": "one  schema", "examples": []},
        "$defs": {"d": {"description": "def  desc", "enum": [{"description": "enum  data"}]}},
        "dependencies": {"a": ["b"], "c": {"description": "dep  schema"}},
        "const": {"title": "data"}, "required": ["title"], "x-ext": {"description": "ext  data"},
    }
    for key in ("inputSchema", "input_schema", "parameters", "outputSchema", "output_schema"):
        doc = {"tools": [{"name": "t", "title": "tool title stays", "description": "Tool  desc.",
                          key: schema, "annotations": {"title": "stays"},
                          "other": {"description": "not  a schema"}}]}
        raw = dumps(doc)
        for options in OPTION_SETS:
            check_same(raw, options)
        done = rewrite_c(raw)
        assert done is not None
        out = orjson.loads(done[0])["tools"][0]
        assert out["title"] == "tool title stays" and out["other"]["description"] == "not  a schema"
        walked = out[key]
        assert "title" not in walked and "$schema" not in walked and "examples" not in walked
        assert walked["properties"]["description"]["default"] == default_obj
        assert walked["anyOf"] == schema["anyOf"] and walked["not"] == schema["not"]
        assert walked["items"][2] == {} and walked["properties"]["l"] == schema["properties"]["l"]
        assert walked["dependencies"]["c"]["description"] == "dep schema"
        assert done[1:] == reference_rewrite(raw, DEFAULT_OPTIONS)[3:]  # type: ignore[index]


@pytest.mark.parametrize("doc", [
    [{"type": "function", "function": {"name": "f", "description": "A  b.", "parameters": {
        "type": "object", "title": "x"}}}, {"type": "web_search", "description": "x  y"}],
    [{"name": "f", "description": "A  b.", "input_schema": {"type": "object", "title": "x"}},
     {"type": "other", "description": "not  a tool"}],
    {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a", "description": "x  y"}],
                                            "nextCursor": "c"}, "tools": "decoy"},
    {"functions": [{"name": "a", "description": "x  y", "parameters": {"title": "t"}}, "junk"]},
    {"name": "single", "description": "One  tool.", "inputSchema": {"title": "t"}},
    {"type": "function", "function": {"name": "f", "description": "A  b.",
                                      "parameters": {"title": "t"}}, "description": "outer  stays"},
    {"tools": [{"type": "function", "function": {"name": "f", "description": "A  b.",
                                                  "parameters": {"title": "t"}}}]},
])
def test_every_shape(doc: Any) -> None:
    raw = dumps(doc)
    assert check_same(raw), "the C path should take every known shape"


def test_a_plan_that_does_not_fit_declines() -> None:
    raw = b'{"tools":[{"name":"t","description":"x"},{"type":"function","function":{"name":"f"}}]}'
    assert rewrite_c(raw, kinds=b"\x01\x02") is not None
    for path, kinds in [(("tool",), b"\x01\x02"), (("tools", "x"), b"\x01\x02"),
                        (("tools",), b"\x01"), (("tools",), b"\x01\x02\x00"),
                        (("tools",), b"\x02\x02"), (("tools",), b"\x01\x03"), ((), b"\x01\x02"),
                        (("tools",), 1), (("tools",), 0), (("tools",), 3), (("tools",), -1),
                        (("tools",), 2**80), (("tools",), "x"), ((5,), b""), (("\udc00",), b"")]:
        assert rewrite_c(raw, path, kinds) is None, (path, kinds)  # type: ignore[arg-type]
    single = b'{"name":"t","description":"x  y","function":{"name":"f","description":"a  b"}}'
    assert rewrite_c(single, (), 1) == (
        b'{"name":"t","description":"x y","function":{"name":"f","description":"a  b"}}', 1, 0)
    assert rewrite_c(single, (), 2) == (
        b'{"name":"t","description":"x  y","function":{"name":"f","description":"a b"}}', 1, 0)
    assert rewrite_c(b'{"name":"t"}', (), 2) is None
    assert rewrite_c(b'[{"name":"t"}]', (), 1) is None


class Boom(Exception):
    pass


class Text(str):
    pass


@pytest.mark.parametrize("reducer", [
    lambda s: (_ for _ in ()).throw(Boom("no")), lambda s: None, lambda s: 5, lambda s: b"x",
    lambda s: "lone \ud800", lambda s: Text(s), lambda s: (_ for _ in ()).throw(MemoryError()),
    lambda s: (_ for _ in ()).throw(RecursionError()),
])
def test_an_odd_reducer_declines(reducer: Callable[[str], Any]) -> None:
    raw = dumps(one_tool(description="Needs  reducing."))
    assert rewrite_c(raw, reducer=reducer) is None  # (an error left set would be a SystemError)


def test_keyboard_interrupt_in_the_reducer_propagates() -> None:
    def reducer(text: str) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rewrite_c(dumps(one_tool(description="Needs  reducing.")), reducer=reducer)


def test_reducer_results_are_escaped_and_counted() -> None:
    raw = dumps({"tools": [{"name": "t", "description": "Needs  reducing.",
                            "inputSchema": {"description": "Same", "properties": {
                                "a": {"description": " edge"}, "b": {"description": "é"}}}}]})
    seen: list[str] = []

    def reducer(text: str) -> str:
        seen.append(text)
        return text if text == "é" else text + '\n"\x01\u2028😀'

    done = rewrite_c(raw, reducer=reducer)
    assert done is not None and done[1] == 2 and seen == ["Needs  reducing.", " edge", "é"]
    assert b'"Needs  reducing.\\n\\"\\u0001\xe2\x80\xa8\xf0\x9f\x98\x80"' in done[0]
    assert b'"description":"Same"' in done[0]


def test_the_reducer_may_reenter() -> None:
    inner = dumps(one_tool(description="Inner  text."))

    def reducer(text: str) -> str:
        done = rewrite_c(inner)
        assert done is not None
        return orjson.loads(done[0])["tools"][0]["description"]

    done = rewrite_c(dumps(one_tool(description="Outer  text.")), reducer=reducer)
    assert done is not None and orjson.loads(done[0])["tools"][0]["description"] == "Inner text."


def test_a_30_mb_description_is_linear() -> None:
    chunk = "Lorem ipsum dolor sit amet.\n\"quoted\" \\ tab\t é 😀 "
    text = chunk * (30_000_000 // len(chunk.encode()))
    raw = dumps(one_tool(description=text, other=text[:3_000_000]))
    assert len(raw) > 30_000_000
    started = time.perf_counter()
    done = rewrite_c(raw, reducer=lambda s: s[:40])
    elapsed = time.perf_counter() - started
    assert done is not None and done[1] == 1
    assert done[0] == orjson.dumps({"tools": [{"name": "t", "description": text[:40], "other": text[:3_000_000]}]})
    assert elapsed < 5.0


@pytest.mark.parametrize("short_bytes", [-5, 1, 2**70, -(2**70)])
def test_odd_limits(short_bytes: int) -> None:
    raw = dumps(one_tool(description="Short  one.", inputSchema={"description": "Folded.",
                                                                 "title": "x"}))
    check_same(raw, Options(short_bytes=short_bytes, count_tokens=False))


def test_bad_arguments_raise_type_errors() -> None:
    assert fastwalk is not None
    with pytest.raises(TypeError):
        fastwalk.rewrite("str", (), 1, True, 160, describe.reduce)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fastwalk.rewrite(b"{}", [], 1, True, 160, describe.reduce)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fastwalk.rewrite(b"{}", (), 1, True, 160, "not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fastwalk.rewrite(b"{}", (), 1, True, 160.0, describe.reduce)  # type: ignore[arg-type]
    assert compress(bytearray(b'{"tools":[]}'))[1].status == "passthrough"  # type: ignore[arg-type]


# -- skim: the top of the document, for the plan ----------------------------------------


def check_skim(raw: bytes, depths: tuple[int, ...] = (catalog.SKIM_DEPTH,)) -> bool:
    """skim(raw, d) is the reference (and orjson's value, truncated, where orjson reads it)
    for each d; True if skim took the document."""
    taken = False
    for max_depth in depths:
        got = skim(raw, max_depth)
        assert tagged(got) == tagged(skim_reference(raw, max_depth)), max_depth
        if got is None:
            continue
        taken = True
        try:
            full = orjson.loads(raw)
        except orjson.JSONDecodeError:  # 1e400, integers beyond a double
            continue
        assert tagged(as_orjson_reads(got)) == tagged(truncated(full, max_depth))
    return taken


def as_orjson_reads(value: Any) -> Any:
    """`value` with the integers orjson reads as floats (outside -2**63 .. 2**64 - 1)
    made floats."""
    if isinstance(value, dict):
        return {k: as_orjson_reads(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_orjson_reads(v) for v in value]
    if type(value) is int and not -(2**63) <= value < 2**64:
        return float(value)
    return value


def plan_of(doc: Any) -> Any:
    """What _fast_compress decides from a document: shape, tool count and plan, or why not."""
    try:
        shape, tools = catalog.locate_tools(doc)
    except Passthrough as exc:
        return str(exc)
    return shape, len(tools), catalog._plan(doc, shape, tools)


def plans_alike(raw: bytes, max_depth: int = catalog.SKIM_DEPTH) -> bool:
    """The plan from skim(raw, max_depth) is the plan from the whole document (parse())."""
    skimmed = skim(raw, max_depth)
    assert skimmed is not None or skim_reference(raw, 0) is None
    return skimmed is None or plan_of(skimmed) == plan_of(parse(raw))


ALL_DEPTHS = (-1, 0, 1, 2, catalog.SKIM_DEPTH, catalog.SKIM_DEPTH + 1, MAX_DEPTH + 1)


def test_skim_every_corpus_catalog(corpora: Path) -> None:
    docs = list(corpus_documents(corpora))
    taken = 0
    for i, (name, raw) in enumerate(docs):
        depths = ALL_DEPTHS if i % 5 == 0 else (catalog.SKIM_DEPTH, MAX_DEPTH + 1)
        taken += check_skim(raw, depths)
        assert plans_alike(raw), name
    assert taken >= len(docs) - 5


def test_skim_samples_and_a_generated_registry(tmp_path: Path) -> None:
    generate_registry(tmp_path / "tree", seed=7, servers=24, oversize_bytes=64 * 1024,
                      jsonl=tmp_path / "all.jsonl", array=tmp_path / "all-array.json")
    docs = list(corpus_documents(SAMPLES)) + list(corpus_documents(tmp_path))
    refused = [raw for _, raw in docs if not check_skim(raw, ALL_DEPTHS)]
    assert len(refused) < len(docs) // 4
    for raw in refused:  # the samples broken on purpose
        with pytest.raises(Passthrough):
            parse(raw)
    assert all(plans_alike(raw) for _, raw in docs)


@LAW
@given(encoded(st.one_of(json_data, catalogish, catalogs())), st.integers(-1, 7))
def test_skim_random_json(raw: bytes, max_depth: int) -> None:
    event("taken" if check_skim(raw, (max_depth, catalog.SKIM_DEPTH)) else "refused")


@LAW
@given(mutated(), st.integers(-1, 5))
def test_skim_mutated_catalogs(raw: bytes, max_depth: int) -> None:
    event("taken" if check_skim(raw, (max_depth,)) else "refused")


@LAW
@given(encoded(catalogs()))
def test_skim_plans_alike_on_generated_catalogs(raw: bytes) -> None:
    assert plans_alike(raw)
    skimmed = skim(raw, catalog.SKIM_DEPTH)
    plan = plan_of(skimmed) if skimmed is not None else None
    event(plan[0] if isinstance(plan, tuple) else "refused" if plan is None else "no plan")


FUNCTION = {"name": "f", "description": "A  b.", "parameters": {"type": "object", "title": "x",
                                                                  "properties": {"a": {}}}}
SHAPES = {
    "jsonrpc": {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "a", "description": "x  y", "inputSchema": {"type": "object"}},
        {"type": "function", "function": FUNCTION}, {"type": "function", "function": "junk"},
        {"name": 5, "description": "not a tool"}, "junk", 3,
        {"name": "b", "type": "function", "function": {"name": "inner"}}], "nextCursor": "c"},
        "tools": "decoy"},
    "jsonrpc-wrapped-only": {"jsonrpc": "2.0", "result": {"tools": [
        {"type": "function", "function": {"name": "f"}}]}},
    "jsonrpc-no-tools": {"jsonrpc": "2.0", "result": {"tools": [{"type": "web_search"}]}},
    "result-without-jsonrpc": {"result": {"tools": [{"name": "a", "description": "x"}]},
                               "tools": [{"name": "b", "inputSchema": {}}]},
    "mcp": {"tools": [{"name": "a", "description": "x  y", "inputSchema": {"type": "object"}},
                      {"type": "function", "function": FUNCTION}, {"nameless": 1}]},
    "functions": {"functions": [FUNCTION, {"name": "g", "parameters": []}, "junk"]},
    "openai-tools": [{"type": "function", "function": FUNCTION}, {"type": "web_search"},
                     {"type": "file_search", "vector_store_ids": ["v"]}],
    "openai-tools-no-schema": [{"type": "function", "function": {"name": "f"}},
                               {"type": "web_search_preview"}],
    "tool-array": [{"name": "f", "description": "A  b.", "input_schema": {"type": "object"}},
                   {"type": "other", "description": "not  a tool"}],
    "tool-array-schema-not-object": [{"name": "f", "input_schema": []}],
    "tool-array-untyped-other": [{"name": "f", "input_schema": {}}, {"x": 1}],
    "single": {"name": "single", "description": "One  tool.", "inputSchema": {"title": "t"}},
    "single-wrapped": {"type": "function", "function": FUNCTION, "description": "outer  stays"},
    "single-wrapped-no-schema": {"type": "function", "function": {"name": "f", "parameters": 1}},
    "single-no-schema": {"name": "package", "description": "a package.json", "version": "1.0"},
    "single-schema-in-list": {"name": "t", "parameters": [{"type": "object"}]},
}
KNOWN = {"jsonrpc", "jsonrpc-wrapped-only", "result-without-jsonrpc", "mcp", "functions",
         "openai-tools", "openai-tools-no-schema", "tool-array", "single", "single-wrapped"}


@pytest.mark.parametrize("name", list(SHAPES))
def test_skim_plans_alike_on_every_shape(name: str) -> None:
    raw = dumps(SHAPES[name])
    assert plans_alike(raw)
    assert isinstance(plan_of(parse(raw)), tuple) == (name in KNOWN)
    check_same(raw)


def test_skim_depth_is_the_smallest_that_plans_alike() -> None:
    """One level less and JSON-RPC items come back empty: their tools are not found."""
    too_shallow = [name for name, doc in SHAPES.items()
                   if not plans_alike(dumps(doc), catalog.SKIM_DEPTH - 1)]
    assert "jsonrpc" in too_shallow and "jsonrpc-wrapped-only" in too_shallow
    for max_depth in (catalog.SKIM_DEPTH, catalog.SKIM_DEPTH + 1, MAX_DEPTH + 1):
        assert all(plans_alike(dumps(doc), max_depth) for doc in SHAPES.values())


def test_skim_returns_deep_containers_empty_of_their_type() -> None:
    raw = b'{"a": {"b": [{"c": [1, {"d": 2}]}, []], "e": {}}, "f": [[["g"]]], "h": "i"}'
    full = json.loads(raw)
    assert skim(raw, MAX_DEPTH) == full
    assert skim(raw, -1) == {}
    assert skim(b"[1, [2]]", -1) == []
    assert skim(raw, 0) == {"a": {}, "f": [], "h": "i"}
    assert skim(raw, 1) == {"a": {"b": [], "e": {}}, "f": [[]], "h": "i"}
    assert skim(raw, 2) == {"a": {"b": [{}, []], "e": {}}, "f": [[[]]], "h": "i"}
    for max_depth in ALL_DEPTHS:
        assert skim(raw, max_depth) == truncated(full, max_depth)
    for scalar in (b'"x"', b"1", b"-2.5", b"true", b"false", b" null "):
        assert skim(scalar, -1) == json.loads(scalar)


def test_skim_numbers_are_json_loads_values() -> None:
    literals = [b"0", b"-0", b"7", b"-7", b"1.10", b"1e3", b"1E+3", b"1e-0", b"-0.0", b"10.0",
                b"2.5E-10", b"123456789012345678", b"-123456789012345678", b"1234567890123456789",
                b"-9223372036854775809", b"123456789012345678901234567890", b"1e999", b"-1e999",
                b"-1e-999", b"0.000000000000000000000000000001", b"1" + b"0" * 4299]
    raw = b"[" + b",".join(literals) + b"]"
    assert tagged(skim(raw, 0)) == tagged(json.loads(raw))
    huge = b"9" * 5000  # over int()'s digit limit: json.loads refuses it, skim gives None
    assert skim(b'{"n":' + huge + b',"m":-' + huge + b"}", 0) == {"n": None, "m": None}
    assert skim(b'{"n":[' + huge + b"]}", 0) == {"n": []}


def test_skim_refuses_what_hides_deep() -> None:
    deep = b'{"tools":[{"name":"t","inputSchema":{"properties":{"a":{"enum":[%s]}}}}]}'
    assert skim(deep % b"1", 0) == {"tools": []}
    for bad in (b'{"x":1,"x":2}', b'"\\ud800"', b"NaN", b"01", b'"\t"', b"1,", b'"\xff"',
                b'{"\\u0078":1,"x":2}'):
        assert_skim_refuses(deep % bad)


def test_skim_bad_arguments() -> None:
    assert fastwalk is not None
    with pytest.raises(TypeError):
        fastwalk.skim("{}", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fastwalk.skim(bytearray(b"{}"), 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fastwalk.skim(b"{}", 3.0)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        fastwalk.skim(b"{}", 2**40)


# -- no leaks -----------------------------------------------------------------------


def memory_kept(run: Callable[[int], None]) -> int:
    """Bytes still allocated (tracemalloc sees PyMem) after run(5_000), once warmed up."""
    gc.collect()
    tracemalloc.start()
    try:
        run(200)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        run(5_000)
        gc.collect()
        return int(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()


def test_skim_keeps_no_memory() -> None:
    """20k calls over every exit path (a value; None after building objects; a cached key
    released) keep no memory."""
    good = dumps({"tools": [{"name": f"t{i}", "description": "d", "inputSchema": {
        "type": "object", "properties": {f"p{j}": {"type": "string"} for j in range(20)}}}
        for i in range(5)], "k": list(range(30)), "z": "@@", "x" * 40: 1.5})
    late_dup = good[:-1] + b',"z":1}'
    late_bad = good.replace(b'"@@"', b'"\\ud800"')
    late_huge = good.replace(b'"@@"', b"9" * 5000)

    def run(n: int) -> None:
        for _ in range(n):
            assert skim(good, catalog.SKIM_DEPTH) is not None
            assert skim(late_dup, catalog.SKIM_DEPTH) is None
            assert skim(late_bad, 10) is None
            assert skim(late_huge, 1)["z"] is None

    run(200)
    grown = memory_kept(run)
    assert grown < 64 * 1024, f"{grown} bytes kept after 20k calls"



def test_no_leaks() -> None:
    """20k calls over every exit path (result, decline mid-document, reducer failure) keep
    neither memory (tracemalloc sees PyMem allocations) nor references to the reducer's results."""
    result_text = "the reduced text"
    good = dumps({"tools": [{"name": "t", "description": "Needs  reducing. " * 3, "inputSchema": {
        "title": "x", "properties": {f"p{i}": {"description": "p  desc", "type": "string"}
                                     for i in range(20)}}}], "k": list(range(30)), "z": "@@"})
    bad = good.replace(b'"@@"', b'"\\ud800"')
    dup = good.replace(b'"p1"', b'"p0"')

    def reducer(text: str) -> str:
        return result_text

    def failing(text: str) -> str:
        raise Boom(text)

    def run(n: int) -> None:
        for _ in range(n):
            assert rewrite_c(good, reducer=reducer) is not None
            assert rewrite_c(bad, reducer=reducer) is None
            assert rewrite_c(dup, reducer=reducer) is None
            assert rewrite_c(good, reducer=failing) is None

    run(200)
    refs = sys.getrefcount(result_text)
    grown = memory_kept(run)  # 20k rewrite calls
    assert sys.getrefcount(result_text) == refs
    assert grown < 64 * 1024, f"{grown} bytes kept after 20k calls"
