"""`proxy --deferred` against the MCP specification as the official Python SDK speaks it.

The proxy runs as a real subprocess, driven by the SDK's own client (`ClientSession` over
`stdio_client`, and the high-level `mcp.Client`), in front of real upstream processes:
small servers written here, each doing the one thing the SDK accepts and the proxy must
too. The proxy's subprocess gets this process's environment, so it runs the code under
test (an installed copy elsewhere would not).
"""

from __future__ import annotations

import json
import os
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

from caveman_batch import rpc  # noqa: E402

# An upstream that echoes every request id as a string ("7" for 7): JSON-RPC wants the id
# as sent, but both official SDKs correlate the decimal text (`coerce_request_id`), so such
# a server works with an SDK client; through the proxy it must too.
TEXT_IDS = r'''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "text-ids", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "echo", "description": "Echo a message back, word for word.",
                             "inputSchema": {"type": "object",
                                             "properties": {"text": {"type": "string"}}}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": msg["params"]["arguments"]["text"]}]}
    else:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": str(mid), "result": result}), flush=True)
'''


def proxy_params(*args: str) -> StdioServerParameters:
    argv = [sys.executable, "-m", "caveman_batch", "proxy", "--deferred", "--no-embed",
            "--store", "memory://", *args]
    # memory:// mints handles nothing can recover: tests only
    return StdioServerParameters(command=argv[0], args=argv[1:],
                                 env={**os.environ, "CAVEMAN_ALLOW_MEMORY_STORE": "1"})


def upstream(tmp_path: Path, name: str, source: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return [sys.executable, str(path)]


def servers(tmp_path: Path, **commands: list[str]) -> str:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {
        name: {"command": argv[0], "args": argv[1:]} for name, argv in commands.items()}}))
    return str(path)


def session_run(params: StdioServerParameters, body: Callable[[ClientSession], Awaitable[Any]],
                *, initialize: bool = True, seconds: float = 60) -> Any:
    async def main() -> Any:
        with anyio.fail_after(seconds), Path(os.devnull).open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write) as session:
                if initialize:
                    await session.initialize()
                return await body(session)

    return anyio.run(main)


@pytest.mark.parametrize("several", [False, True], ids=["one", "servers"])
def test_an_upstream_that_echoes_ids_as_text_is_served(tmp_path: Path, several: bool) -> None:
    """Its answers to the proxy's initialize, tools/list and calls were dropped (only an
    integer id was looked up): the client's initialize failed once the start's deadline
    passed ("did not initialize"), 60 s by default."""
    text_ids = upstream(tmp_path, "text_ids", TEXT_IDS)
    args = ["--servers", servers(tmp_path, t=text_ids)] if several else ["--", *text_ids]
    echo = "t__echo" if several else "echo"

    async def body(session: ClientSession) -> dict[str, Any]:
        found = await session.call_tool("search_tools", {"query": "echo a message"})
        direct = await session.call_tool(echo, {"text": "hi"})
        via = await session.call_tool("call_tool", {"name": echo, "arguments": {"text": "ho"}})
        return {"found": json.loads(found.content[0].text), "direct": direct, "via": via}

    got = session_run(proxy_params("--startup-timeout", "10", *args), body)
    assert [tool["name"] for tool in got["found"]] == [echo]
    assert got["direct"].content[0].text == "hi" and not got["direct"].is_error
    assert got["via"].content[0].text == "ho" and not got["via"].is_error


TIME = [sys.executable, "-m", "mcp_server_time"]
MODERN = "2026-07-28"  # the SDK's first protocol revision without an initialize handshake


def time_args(tmp_path: Path, several: bool) -> list[str]:
    return ["--servers", servers(tmp_path, time=TIME)] if several else ["--", *TIME]


@pytest.mark.parametrize("several", [False, True], ids=["one", "servers"])
def test_a_request_before_initialize_is_answered_at_once(tmp_path: Path, several: bool) -> None:
    """The SDK's client (`mcp.Client`, mode "auto", its default) first probes
    `server/discover` and falls back to initialize on an error: the proxy held the probe
    (as every request until the start was done, which only an initialize begins), so each
    connection waited out the probe's 10 s; a client pinned to a revision without the
    handshake waited for ever. Before initialize only initialize and ping are served."""
    if not hasattr(ClientSession, "send_discover"):
        pytest.skip("this SDK has no server/discover probe")
    get_time = "time__get_current_time" if several else "get_current_time"

    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with pytest.raises(MCPError) as probe:
            await session.send_discover(MODERN)
        out["probe"] = probe.value.error.code
        with pytest.raises(MCPError) as early:
            await session.list_tools()
        out["early"] = early.value.error.code
        await session.initialize()
        out["time"] = await session.call_tool(get_time, {"timezone": "Etc/UTC"})
        return out

    params = proxy_params(*time_args(tmp_path, several))
    got = session_run(params, body, initialize=False)
    assert got["probe"] == rpc.METHOD_NOT_FOUND and got["early"] == rpc.INVALID_REQUEST
    assert not got["time"].is_error and "Etc/UTC" in got["time"].content[0].text

    async def client(mode: str) -> Any:
        with anyio.fail_after(60):
            async with mcp.Client(params, mode=mode) as connected:
                if mode != "auto":
                    with pytest.raises(MCPError):
                        await connected.list_tools()
                    return None
                result = await connected.call_tool(get_time, {"timezone": "Etc/UTC"})
                return connected.session.protocol_version, result

    version, result = anyio.run(client, "auto")  # the probe refused, the handshake follows
    assert version != MODERN and "Etc/UTC" in result.content[0].text
    anyio.run(client, MODERN)  # no handshake to follow: an error, not a wait for ever


def test_integer_id() -> None:
    assert rpc.integer_id(7) == 7 and rpc.integer_id("7") == 7
    for other in (True, 7.0, "07", "+7", " 7", "7_0", "\u0667", "-1", "1" * 30, None):
        assert rpc.integer_id(other) is None, other
