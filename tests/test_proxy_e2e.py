"""End to end: real MCP servers from PyPI, the official SDK client, the installed proxy.

Each server is asked the same things directly and through `caveman-batch proxy`;
the proxied catalog must be smaller, select the same, and its handle must recover
the very result the server sent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from caveman_batch import listing  # noqa: E402
from caveman_batch.profile import profile_doc  # noqa: E402
from caveman_batch.tokens import count_tokens  # noqa: E402


def entry_point() -> list[str]:
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


def dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def session_run(argv: list[str], calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """initialize, tools/list, prompts/list (if offered) and the given tool calls."""
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    with anyio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            out: dict[str, Any] = {"tools": await session.list_tools(), "prompts": None}
            if init.capabilities.prompts is not None:
                out["prompts"] = dump(await session.list_prompts())
            out["calls"] = [dump(await session.call_tool(n, a)) for n, a in calls]
            return out


def compare(server: list[str], calls: list[tuple[str, dict[str, Any]]], store: str,
            prompts: int = 0, rewritten: bool = True) -> None:
    """The proxied session equals the direct one but for the compressed tools/list; the
    server lists `prompts` prompts (so their comparison compares something, or says none)."""
    direct = anyio.run(session_run, server, calls)
    proxied = anyio.run(session_run, [*entry_point(), "proxy", "--store", store, "--", *server],
                        calls)
    assert proxied["calls"] == direct["calls"]
    assert len(direct["prompts"]["prompts"]) == prompts
    assert proxied["prompts"] == direct["prompts"]
    if rewritten:
        _check_rewritten(direct["tools"], proxied["tools"], store)
    else:  # it would not be smaller once its handle is added: passed as listed
        assert proxied["tools"] == direct["tools"]


def _check_rewritten(direct: Any, proxied: Any, store: str) -> None:
    before, after = dump(direct), dump(proxied)
    handle = after["_meta"].pop(listing.META_KEY)
    if not after["_meta"]:
        del after["_meta"]
    assert count_tokens(json.dumps(after)) < count_tokens(json.dumps(before))
    assert profile_doc({"tools": after["tools"]}) == profile_doc({"tools": before["tools"]})
    assert [t["name"] for t in after["tools"]] == [t["name"] for t in before["tools"]]
    recovered = subprocess.run([*entry_point(), "recover", "--store", store, handle],
                               capture_output=True, timeout=60, check=True).stdout
    assert type(direct).model_validate_json(recovered) == direct


def test_time_server(tmp_path: Path) -> None:
    calls = [("convert_time", {"source_timezone": "UTC", "time": "12:00",
                               "target_timezone": "Asia/Tokyo"})]
    compare([sys.executable, "-m", "mcp_server_time"], calls, f"lmdb://{tmp_path / 'ccr'}")


def git_repo(tmp_path: Path) -> Path:
    """A real git repository for mcp-server-git: one commit, one untracked file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("hello\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (repo / "b.txt").write_text("untracked\n")
    return repo


def test_git_server(tmp_path: Path) -> None:
    repo = git_repo(tmp_path)
    calls = [("git_status", {"repo_path": str(repo)}), ("git_log", {"repo_path": str(repo)})]
    compare([sys.executable, "-m", "mcp_server_git", "--repository", str(repo)], calls,
            f"sqlite:///{tmp_path / 'ccr.db'}")


def test_fetch_server_and_its_prompt(tmp_path: Path) -> None:
    """A server with a prompt (fetch's "fetch"): the proxy passes the prompts list as listed,
    and its one-tool catalog, which would not be smaller with a handle, unchanged. No tool
    call: fetching needs the network, which the tests never use."""
    compare([sys.executable, "-m", "mcp_server_fetch"], [], f"lmdb://{tmp_path / 'ccr'}",
            prompts=1, rewritten=False)
