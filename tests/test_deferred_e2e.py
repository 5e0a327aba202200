"""End to end: `proxy --deferred` as a real subprocess, driven by the official SDK client.

Upstreams are real MCP servers from PyPI (time, git, fetch) and, for what those cannot
do on demand (crash, change their tool list, ask the client for a sampling), a small
scripted server run with this interpreter (`test_deferred.SCRIPTED`: it speaks the
protocol by hand over stdio, so each test says exactly what the upstream does).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from caveman_batch.embedding import EMBED_EXTRA_HINT, extra_installed  # noqa: E402
from caveman_batch.listing import META_KEY  # noqa: E402
from caveman_batch.profile import profile_doc  # noqa: E402
from test_deferred import SCRIPTED  # noqa: E402
from test_proxy_e2e import dump, entry_point, git_repo  # noqa: E402


@pytest.fixture
def scripted(tmp_path: Path) -> list[str]:
    path = tmp_path / "scripted_server.py"
    path.write_text(SCRIPTED)
    return [sys.executable, str(path)]


def deferred(store: str, *args: str) -> list[str]:
    return [*entry_point(), "proxy", "--deferred", "--store", store, *args]


class Client:
    """An SDK session that records the notifications it gets."""

    def __init__(self, session: ClientSession, changed: list[anyio.Event]) -> None:
        self.session = session
        self._changed = changed

    async def search(self, query: str, limit: int | None = None) -> tuple[list[dict[str, Any]], Any]:
        args: dict[str, Any] = {"query": query} if limit is None else {"query": query, "limit": limit}
        result = await self.session.call_tool("search_tools", args)
        assert not result.is_error, result
        text = result.content[0].text
        return (json.loads(text) if text.startswith("[") else []), result

    async def names(self) -> list[str]:
        return [t.name for t in (await self.session.list_tools()).tools]

    async def list_changed(self) -> None:
        with anyio.fail_after(20):
            await self._changed[0].wait()
        self._changed[0] = anyio.Event()


def session_run(argv: list[str], body: Callable[[Client], Awaitable[Any]],
                errlog: Path | None = None, **callbacks: Any) -> Any:
    changed = [anyio.Event()]

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/tools/list_changed":
            changed[0].set()

    async def main() -> Any:
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        with anyio.fail_after(120):
            with (errlog or Path("/dev/null")).open("w") as err:
                async with stdio_client(params, errlog=err) as (read, write), \
                        ClientSession(read, write, message_handler=on_message,
                                      **callbacks) as session:
                    init = await session.initialize()
                    assert init.capabilities.tools is not None
                    assert init.capabilities.tools.list_changed is True
                    return await body(Client(session, changed))

    return anyio.run(main)


def direct_run(argv: list[str], body: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                return await body(s)

    return anyio.run(main)


TIME = [sys.executable, "-m", "mcp_server_time"]
CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}


def test_one_server_search_list_changed_and_calls(tmp_path: Path) -> None:
    store = f"lmdb://{tmp_path / 'ccr'}"

    async def through(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {"first": await client.names()}
        out["hits"], result = await client.search("current time in a timezone")
        out["handles"] = result.meta[META_KEY]
        await client.list_changed()
        out["listed"] = dump(await client.session.list_tools())
        out["direct"] = dump(await client.session.call_tool("get_current_time",
                                                            {"timezone": "Etc/UTC"}))
        out["via"] = dump(await client.session.call_tool("call_tool", {
            "name": "convert_time", "arguments": CONVERT}))
        out["unknown"] = dump(await client.session.call_tool("call_tool", {"name": "nope"}))
        return out

    async def plain(session: ClientSession) -> dict[str, Any]:
        return {"tools": dump(await session.list_tools()),
                "convert": dump(await session.call_tool("convert_time", CONVERT))}

    got = session_run(deferred(store, "--always", "convert_time", "--", *TIME), through)
    want = direct_run(TIME, plain)
    originals = {t["name"]: t for t in want["tools"]["tools"]}

    assert got["first"] == ["search_tools", "call_tool", "convert_time"]
    assert got["hits"][0]["name"] == "get_current_time"
    listed = {t["name"]: t for t in got["listed"]["tools"]}
    assert list(listed) == ["search_tools", "call_tool", "convert_time", "get_current_time"]
    for name in ("convert_time", "get_current_time"):  # compressed, selecting the same
        assert profile_doc({"tools": [listed[name]]}) == profile_doc({"tools": [originals[name]]})
    assert got["direct"]["structuredContent"]["timezone"] == "Etc/UTC"
    assert got["via"] == want["convert"]
    assert got["unknown"]["isError"] is True
    # each found tool's handle gives back the tool object exactly as the server listed it
    recovered = subprocess.run([*entry_point(), "recover", "--store", store,
                                got["handles"]["get_current_time"]],
                               capture_output=True, timeout=60, check=True).stdout
    assert json.loads(recovered) == originals["get_current_time"]


def test_many_servers_one_crashing(tmp_path: Path, scripted: list[str]) -> None:
    repo = git_repo(tmp_path)
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {
        "time": {"command": TIME[0], "args": TIME[1:]},
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository",
                                                    str(repo)]},
        "fetch": {"command": sys.executable, "args": ["-m", "mcp_server_fetch"]},
        "flaky": {"command": scripted[0], "args": scripted[1:], "env": {"FLAKY": "1"}},
    }}))
    errlog = tmp_path / "proxy.err"

    async def body(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {"first": await client.names()}
        out["time"] = [t["name"] for t in (await client.search("current time in a timezone"))[0]]
        out["git"] = [t["name"] for t in (await client.search("working tree status git"))[0]]
        out["fetch"] = [t["name"] for t in (await client.search("fetch a URL from the internet"))[0]]
        out["echo"] = [t["name"] for t in (await client.search("echo a message back"))[0]]
        await client.list_changed()
        out["status"] = dump(await client.session.call_tool("call_tool", {
            "name": "git__git_status", "arguments": {"repo_path": str(repo)}}))
        out["echoed"] = dump(await client.session.call_tool("flaky__echo", {"text": "hi"}))
        with pytest.raises(MCPError) as crash:  # a JSON-RPC error, not a hang
            await client.session.call_tool("flaky__crash", {})
        out["crash"] = crash.value.error.message
        await client.list_changed()  # its found tools left the list
        out["after"] = await client.names()
        out["echo_after"] = (await client.search("echo a message back"))[0]
        out["time_after"] = dump(await client.session.call_tool(
            "time__get_current_time", {"timezone": "Etc/UTC"}))
        with pytest.raises(MCPError):
            await client.session.call_tool("flaky__echo", {"text": "hi"})
        return out

    got = session_run(deferred(f"sqlite:///{tmp_path / 'ccr.db'}", "--servers", str(servers)),
                      body, errlog)
    assert got["first"] == ["search_tools", "call_tool"]
    assert "time__get_current_time" in got["time"]
    assert "git__git_status" in got["git"]
    assert "fetch__fetch" in got["fetch"]
    assert got["echo"][0] == "flaky__echo"
    assert "b.txt" in json.dumps(got["status"]) and not got["status"].get("isError")
    assert got["echoed"]["content"][0]["text"] == "hi"
    assert "flaky" in got["crash"] and "exited" in got["crash"]
    assert not any(name.startswith("flaky__") for name in got["after"])
    assert "git__git_status" in got["after"]
    assert not any(t["name"].startswith("flaky__") for t in got["echo_after"])
    assert got["time_after"]["structuredContent"]["timezone"] == "Etc/UTC"
    err = errlog.read_text()
    assert "[flaky] scripted upstream started" in err
    assert "[flaky] crashing on request" in err
    assert "upstream 'flaky' exited with status 3" in err


def test_upstream_list_changed_refreshes_the_index(tmp_path: Path, scripted: list[str]) -> None:
    async def body(client: Client) -> dict[str, Any]:
        out = {"before": (await client.search("weather forecast for a city"))[0]}
        await client.session.call_tool("grow", {})
        for _ in range(100):  # the proxy re-lists the upstream on its list_changed
            hits = (await client.search("weather forecast for a city"))[0]
            if hits and hits[0]["name"] == "weather_forecast":
                break
            await anyio.sleep(0.05)
        out["after"] = hits
        await client.list_changed()
        out["listed"] = await client.names()
        out["called"] = dump(await client.session.call_tool("weather_forecast", {"city": "Oslo"}))
        return out

    got = session_run(deferred(f"lmdb://{tmp_path / 'ccr'}", "--", *scripted), body)
    assert all(t["name"] != "weather_forecast" for t in got["before"])
    assert got["after"][0]["name"] == "weather_forecast"
    assert "weather_forecast" in got["listed"]
    assert got["called"]["content"][0]["text"] == "sunny in Oslo"


def test_upstream_requests_reach_the_client(tmp_path: Path, scripted: list[str]) -> None:
    from mcp import types

    async def sampling(_context: Any, params: Any) -> Any:
        asked = params.messages[0].content.text
        return types.CreateMessageResult(role="assistant", model="test",
                                         content=types.TextContent(type="text", text=asked.upper()))

    async def body(client: Client) -> Any:
        return dump(await client.session.call_tool("ask", {"question": "why?"}))

    got = session_run(deferred(f"lmdb://{tmp_path / 'ccr'}", "--", *scripted), body,
                      sampling_callback=sampling)
    assert got["content"][0]["text"] == "sampled: WHY?"


@pytest.mark.skipif(not extra_installed(), reason=f"embed extra not installed: {EMBED_EXTRA_HINT}")
def test_search_is_hybrid_when_the_extra_is_installed(tmp_path: Path) -> None:
    """No word of the query is in any tool's text: BM25 finds nothing, the dense half does
    (as `search` ranks); --no-embed is BM25 alone, --embed the default made explicit."""
    store = f"lmdb://{tmp_path / 'ccr'}"
    query = "wall clock"

    async def body(client: Client) -> list[str]:
        return [hit["name"] for hit in (await client.search(query))[0]]

    hybrid = session_run(deferred(store, "--", *TIME), body)
    embed = session_run(deferred(store, "--embed", "--", *TIME), body)
    bm25 = session_run(deferred(store, "--no-embed", "--", *TIME), body)
    assert bm25 == []
    assert hybrid == embed and set(hybrid) == {"get_current_time", "convert_time"}
