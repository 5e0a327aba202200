"""The compressor on real catalogs that are not in ../shared/corpora, checked independently.

The catalogs come live from real MCP servers installed from PyPI (the test extras):
each is started, asked tools/list through the official SDK client, and its answer is
compressed as an MCP list, a JSON-RPC response, OpenAI functions, OpenAI tools and an
Anthropic tool array. Every form must keep its selection profile and its structure,
stay idempotent, and lose no rule sentence.

"Rule sentence" is decided by caveman_batch.testing.issue_rules, a detector that
shares nothing with caveman_batch.rules: the word list of the issue that specified the
compressor, and a plain sentence splitter of its own. The same detector also runs over every catalog
of ../shared/corpora (skipped when absent).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from caveman_batch.catalog import compress
from caveman_batch.profile import profile
from caveman_batch.testing.issue_rules import independent_rule_sentences, lost_rule_sentences
from test_catalog_corpora import CORPUS_NAMES, catalogs, compressed, structure_problems


def test_the_independent_detector_sees_rules_and_splits_plainly() -> None:
    text = ("Fetches a URL. Use this tool when the page is public.\n\nThe timeout must be at most "
            "30 s. Returns markdown. Dates are ISO 8601 (e.g. 2024-01-01).")
    assert independent_rule_sentences(text) == [
        "Use this tool when the page is public.", "The timeout must be at most 30 s.",
        "Dates are ISO 8601 (e.g. 2024-01-01).",
    ]
    assert lost_rule_sentences({"description": text}, {"description": "Fetches a URL."}) == \
        independent_rule_sentences(text)


# -- live catalogs ----------------------------------------------------------------------


SERVERS = {
    "time": ["-m", "mcp_server_time"],
    "git": ["-m", "mcp_server_git"],
    "fetch": ["-m", "mcp_server_fetch"],
}


async def _list_tools(argv: list[str]) -> dict[str, Any]:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=argv)
    with anyio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
    return listed.model_dump(mode="json", by_alias=True, exclude_none=True)


@functools.cache
def live_catalog(name: str) -> dict[str, Any]:
    module = SERVERS[name][1]  # ["-m", module]
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("mcp", reason="the MCP SDK is a test extra (pip install -e '.[test]')")
    pytest.importorskip(module, reason=f"{module} is a test extra (pip install -e '.[test]')")
    return anyio.run(_list_tools, SERVERS[name])


def forms(listed: dict[str, Any]) -> dict[str, tuple[bytes, list[dict[str, Any]]]]:
    """The same real tools in every accepted catalog shape: (raw bytes, tool objects as sent)."""
    tools = listed["tools"]
    functions = [{"name": t["name"], "description": t.get("description", ""),
                  "parameters": t["inputSchema"]} for t in tools]
    anthropic = [{"name": t["name"], "description": t.get("description", ""),
                  "input_schema": t["inputSchema"]} for t in tools]
    wrapped = [{"type": "function", "function": f} for f in functions]
    docs: dict[str, tuple[Any, list[dict[str, Any]]]] = {
        "mcp-tools": (listed, tools),
        "jsonrpc-tools-list": ({"jsonrpc": "2.0", "id": 7, "result": listed}, tools),
        "openai-functions": ({"functions": functions}, functions),
        "openai-tools": (wrapped, functions),
        "tool-array": (anthropic, anthropic),
    }
    return {shape: (json.dumps(doc, indent=2, ensure_ascii=False).encode(), ts)
            for shape, (doc, ts) in docs.items()}


def tools_after(shape: str, out: bytes) -> list[dict[str, Any]]:
    doc = json.loads(out)
    return {"mcp-tools": lambda: doc["tools"], "jsonrpc-tools-list": lambda: doc["result"]["tools"],
            "openai-functions": lambda: doc["functions"], "tool-array": lambda: doc,
            "openai-tools": lambda: [item["function"] for item in doc]}[shape]()


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_live_catalog_keeps_profile_structure_and_every_rule(server: str) -> None:
    listed = live_catalog(server)
    assert listed["tools"], f"{server} listed no tools"
    for shape, (raw, tools) in forms(listed).items():
        out, result = compress(raw)
        assert result.status == "ok" or result.reason == "not smaller", (shape, result.reason)
        assert result.shape == shape and result.tools == len(tools)
        assert profile(out) == profile(raw), shape
        assert compress(out)[0] == out, f"{server}/{shape}: second pass changed the output"
        assert lost_rule_sentences(tools, tools_after(shape, out)) == [], shape
    raw, _ = forms(listed)["mcp-tools"]
    assert structure_problems(raw, compress(raw)[0]) == []


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_loses_no_rule_sentence_by_the_independent_detector(corpora: Path, name: str) -> None:
    lost: list[str] = []
    for path in catalogs(corpora, name):
        raw, out, _ = compressed(path)
        lost += [f"{path.name}: {s!r}" for s in lost_rule_sentences(json.loads(raw), json.loads(out))]
    assert not lost, f"{len(lost)} rule sentence(s) lost:\n" + "\n".join(lost[:10])
