"""The C search text (caveman_batch._fastwalk.search_fields) against toolsearch's Python.

toolsearch._search_fields defines a tool's search text; wherever the C path gives one it
must be the same three strings, and search_fields() the same whether the C path is on or
off. Checked on every tool of ../shared/corpora, a generated registry, random tools, and
hand-written input the C path must hand back (Unicode or control characters in names, dict
subclasses, keys not str) or get right (camel case, separators, enum values of every type,
nesting past the depth limit).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caveman_batch import _accel, toolsearch
from caveman_batch.catalog import Passthrough, locate_tools, parse

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench_data.generate import generate_registry  # noqa: E402
from test_catalog_properties import json_data, schemas, tools  # noqa: E402
from test_fastwalk import corpus_documents  # noqa: E402

fastwalk = _accel.fastwalk
pytestmark = pytest.mark.skipif(
    fastwalk is None, reason="caveman_batch._fastwalk is not built (python setup.py build_ext "
    "--inplace) or CAVEMAN_PURE_PYTHON is set: nothing to compare")
LAW = settings(derandomize=True, database=None, deadline=None, max_examples=400,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _fast(tool: Any) -> tuple[str, str, str] | None:
    assert fastwalk is not None
    return fastwalk.search_fields(tool, *toolsearch._FAST_KEYS)  # type: ignore[no-any-return]


def check_same(tool: dict[str, Any]) -> bool:
    """C and Python agree (True if the C path gave the text, False if it handed it back)."""
    expected = toolsearch._search_fields(tool)
    assert toolsearch.search_fields(tool) == expected
    fast = _fast(tool)
    if fast is None:
        return False
    assert dict(zip(toolsearch.FIELDS, fast)) == expected
    assert all(type(text) is str for text in fast)
    return True


def _tools_of(raw: bytes) -> list[dict[str, Any]]:
    try:
        return locate_tools(orjson.loads(raw))[1]
    except (orjson.JSONDecodeError, Passthrough, RecursionError):
        try:
            return locate_tools(parse(raw))[1]  # literals kept: numbers of catalog.parse's types
        except (Passthrough, RecursionError):
            return []


def test_every_corpus_tool(corpora: Path) -> None:
    taken = declined = 0
    for _, raw in corpus_documents(corpora):
        for tool in _tools_of(raw):
            if check_same(tool):
                taken += 1
            else:
                declined += 1
    assert taken > 5_000 and declined < taken / 100


def test_generated_registry(tmp_path: Path) -> None:
    generate_registry(tmp_path / "tree", seed=7, servers=24, oversize_bytes=0)
    taken = 0
    for path in sorted((tmp_path / "tree").rglob("*.json")):
        taken += sum(check_same(tool) for tool in _tools_of(path.read_bytes()))
    assert taken > 100


names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=24) | st.text(
    st.sampled_from("aAzZ09_-.:/ \t\x1c\x85\u00a0\u2028éB"), max_size=12)
enum_values = st.lists(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                 st.text(max_size=5), json_data), max_size=4)


@LAW
@given(tools, names)
def test_random_tools(tool: dict[str, Any], name: str) -> None:
    check_same(tool)
    check_same({**tool, "name": name})
    check_same({**tool, "properties": {name: {}}, "inputSchema": {"properties": {name: {}}}})


@LAW
@given(st.dictionaries(st.sampled_from(["name", "description", "inputSchema", "input_schema",
                                        "parameters", "outputSchema", "x"]),
                       st.one_of(json_data, schemas, names), max_size=5),
       enum_values)
def test_random_keys_and_values(tool: dict[str, Any], values: list[Any]) -> None:
    check_same(tool)
    check_same({**tool, "parameters": {"enum": values, "items": [{"enum": values}],
                                       "not": {"description": values}}})


@pytest.mark.parametrize("name, words", [
    ("getPullRequest_v2.list-all", "get Pull Request v2 list all"),
    ("ABCDef", "ABC Def"), ("HTTPServer", "HTTP Server"), ("a1B", "a1 B"), ("A", "A"),
    ("__x__", "x"), ("", ""), ("a  b//c::d", "a b c d"), ("v2API", "v2 API"), ("aBC", "a BC"),
])
def test_names_split_as_python(name: str, words: str) -> None:
    assert check_same({"name": name})
    assert _fast({"name": name})[0] == words  # type: ignore[index]


@pytest.mark.parametrize("name", ["tab\tname", "x\x1cy", "nbsp\u00a0x", "caf\u00e9", "line\u2028x",
                                  "del\x7f"])
def test_names_it_cannot_split_exactly_go_to_python(name: str) -> None:
    assert not check_same({"name": name})
    assert not check_same({"name": "t", "inputSchema": {"properties": {name: {}}}})


@pytest.mark.parametrize("tool", [
    {"name": 3},
    {"name": "t", "inputSchema": OrderedDict(description="d")},
    {"name": "t", "inputSchema": {"properties": OrderedDict(a={})}},
    {"name": "t", "inputSchema": {1: "x"}},
    {"name": "t", "parameters": {"anyOf": type("L", (list,), {})([{"description": "d"}])}},
])
def test_what_it_does_not_walk_goes_to_python(tool: dict[str, Any]) -> None:
    assert not check_same(tool)


def test_enum_values_of_every_type_and_deep_schemas() -> None:
    schema: dict[str, Any] = {"description": "leaf"}
    for depth in range(80):
        schema = {"properties": {f"p{depth}": schema}, "description": f"d{depth}"}
    tool = {"name": "deep", "description": "top",
            "inputSchema": {"enum": ["s", 1, 2.5, True, None, [1], 10**30], **schema},
            "input_schema": {"items": {"enum": ["i"]}, "oneOf": [{"description": "o"}, 7]},
            "outputSchema": {"description": "not searched"}}
    assert check_same(tool)
    params = _fast(tool)[2]  # type: ignore[index]
    assert params.startswith("s 1 2.5 True 1000000000000000000000000000000 p79 p78 ")
    assert "leaf" not in params and "not searched" not in params and params.endswith("i o")
