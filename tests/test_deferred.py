"""The deferred proxy's parts and its wire behaviour, with raw JSON-RPC lines.

The upstream is SCRIPTED, a small MCP server written by hand (run with this
interpreter): it logs every line it receives to $UPSTREAM_LOG, so a test can check
the exact bytes the proxy forwarded. End to end through the official SDK client:
tests/test_deferred_e2e.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caveman_batch import ccr, deferred, listing, rpc
from caveman_batch.catalog import Options, parse, serialize
from caveman_batch.cli import main
from caveman_batch.errors import ServersFileError
from caveman_batch.profile import profile_doc
from caveman_batch.store import open_store
from caveman_batch.upstreams import ServerSpec, expand, read_servers

SCRIPTED = r'''
import json, os, sys
TOOLS = [
    {"name": "echo", "description": "Echo a message back to the caller, word for word.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
    {"name": "crash", "description": "Stop the server at once with a failure status.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "grow", "description": "Register one more tool, the weather forecast, and say so.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "ask", "description": "Ask the client's language model a question by sampling.",
     "inputSchema": {"type": "object", "properties": {"question": {"type": "string"}}}},
    {"name": "hang", "description": "Never answer.", "inputSchema": {"type": "object"}},
]
FORECAST = {"name": "weather_forecast", "description": "Weather forecast for a city.",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}
grown, asked = False, {}
log = open(os.environ["UPSTREAM_LOG"], "a") if os.environ.get("UPSTREAM_LOG") else None
sys.stderr.write("scripted upstream started\n"); sys.stderr.flush()

def send(message):
    sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()

def result(mid, text):
    send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})

for line in sys.stdin:
    if log:
        log.write(line); log.flush()
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method is None and mid in asked:  # the client's answer to our sampling request
        result(asked.pop(mid), "sampled: " + msg["result"]["content"]["text"])
    elif method == "initialize":
        if os.environ.get("UPSTREAM_MUTE"):
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "scripted", "version": "1"}}})
    elif method == "tools/list" and os.environ.get("UPSTREAM_PAGES"):  # two tools a page
        at = int((msg.get("params") or {}).get("cursor", 0))
        page = {"tools": TOOLS[at:at + 2]}
        if at + 2 < len(TOOLS):
            page["nextCursor"] = str(at + 2)
        send({"jsonrpc": "2.0", "id": mid, "result": page})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS + ([FORECAST] if grown else [])}})
    elif method == "prompts/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"prompts": [{"name": "triage", "description":
            "Lists the open issues of a repository, newest first, with their labels and assignees "
            "and a short excerpt of the body for each one found. It is handy for triage sessions "
            "and for weekly reports about the state of the project board. Returns at most 100 "
            "issues per page."}]}})
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
        if name == "echo":
            result(mid, args["text"])
        elif name == "crash":
            sys.stderr.write("crashing on request\n"); sys.stderr.flush()
            os._exit(3)
        elif name == "grow":
            grown = True
            result(mid, "grown")
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif name == "ask":
            asked["s" + str(mid)] = mid  # a string id of our own: the proxy must map it back
            send({"jsonrpc": "2.0", "id": "s" + str(mid), "method": "sampling/createMessage",
                  "params": {"messages": [{"role": "user", "content": {
                      "type": "text", "text": args["question"]}}], "maxTokens": 20}})
        elif name == "hang":
            pass
        elif name == "progress":  # progress under the client's token, a log line, then the result
            token = msg["params"]["_meta"]["progressToken"]
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": 0.5, "total": 1}})
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "data": "half way"}})
            result(mid, "done")
        elif name == "weather_forecast" and grown:
            result(mid, "sunny in " + args["city"])
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "no " + name}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": method}})
'''


@pytest.fixture
def scripted(tmp_path: Path) -> list[str]:
    path = tmp_path / "scripted_server.py"
    path.write_text(SCRIPTED)
    return [sys.executable, str(path)]


# -- rpc ----------------------------------------------------------------------------------


def test_read_keeps_spans_and_replace_changes_one_member() -> None:
    line = b'{"jsonrpc":"2.0", "id":"a1","method":"tools/call","params":{"x":1.10,"n":1e3}}\r\n'
    msg = rpc.read(line)
    assert msg.method == "tools/call" and msg.id == "a1" and not msg.is_response
    assert msg.raw("params") == '{"x":1.10,"n":1e3}'
    assert rpc.replace(msg, "id", "7") == \
        b'{"jsonrpc":"2.0", "id":7,"method":"tools/call","params":{"x":1.10,"n":1e3}}\n'
    inner = rpc.member_spans(msg.text, msg.spans["params"])
    assert inner is not None and msg.text[slice(*inner["x"])] == "1.10"
    both = rpc.splice_many(msg.text, [(msg.spans["id"], "1"), (inner["n"], "2")])
    assert both == '{"jsonrpc":"2.0", "id":1,"method":"tools/call","params":{"x":1.10,"n":2}}'


@pytest.mark.parametrize("line, reason", [
    (b"not json", "not a JSON object"), (b"[1, 2]", "not a JSON object"),
    (b'{"id":1,"id":2}', "duplicate key"), (b'{"id":1} {"id":2}', "more than one"),
    (b'{"id":"\xff"}', "not UTF-8"), (b'{"id":1', "not JSON"),
])
def test_read_refuses_what_is_not_one_message(line: bytes, reason: str) -> None:
    with pytest.raises(rpc.BadMessage, match=reason):
        rpc.read(line)


def test_ids() -> None:
    assert rpc.id_key(1) != rpc.id_key("1") and rpc.id_key(True) is None
    assert rpc.id_key(None) is None and rpc.id_key(1.5) == rpc.id_key(1.5)
    # 2 and 2.0 are two requests (a cancellation of one went to the other)
    assert len({rpc.id_key(2), rpc.id_key(2.0), rpc.id_key("2")}) == 3


# -- one upstream's catalog -------------------------------------------------------------------

LONG = ("Lists the open issues of a repository, newest first, with their labels and assignees "
        "and a short excerpt of the body for each one found. It is handy for triage sessions "
        "and weekly reports. Returns at most 100 issues per page.")


def test_build_catalog_commits_exact_originals_and_exposes_compressed_tools() -> None:
    tool = {"name": "list_issues", "description": LONG, "inputSchema": {
        "type": "object", "title": "Args", "properties": {"state": {
            "type": "string", "enum": ["open", "closed"], "description": LONG}}}}
    pretty = json.dumps(tool, indent=2).encode()
    ping = b'{"name": "ping", "inputSchema": {"type": "object"}}'
    page = b'{"tools": [' + pretty + b', {"name": "list_issues"}, ' + ping + b'], "nextCursor": "2"}'
    catalog = deferred.build_catalog("gh", "gh__", [page, b'{"tools": 3}'], compressed=True,
                                     options=Options())
    assert list(catalog.tools) == ["list_issues", "ping"]  # a repeated name left out
    listed = catalog.tools["list_issues"]
    assert listed.handle == "ccr_" + hashlib.sha256(pretty).hexdigest()
    assert catalog.tools["ping"].handle == "ccr_" + hashlib.sha256(ping).hexdigest()
    assert [p.handle for p in catalog.originals] == [listed.handle, catalog.tools["ping"].handle]
    small = json.loads(listed.definition)
    assert small["name"] == "gh__list_issues" and list(small) == list(tool)
    assert len(listed.definition) < len(pretty) and "title" not in small["inputSchema"]
    assert profile_doc({"tools": [{**small, "name": "list_issues"}]}) == profile_doc({"tools": [tool]})
    doc = catalog.docs[0]
    assert doc.name == "list_issues" and json.loads(doc.definition)["name"] == "list_issues"
    assert "list issues" in doc.fields["name"] and "closed" in doc.fields["params"]

    plain = deferred.build_catalog("gh", "", [page], compressed=False, options=Options())
    assert plain.originals == [] and plain.tools["list_issues"].handle is None
    assert plain.tools["list_issues"].definition == serialize(parse(pretty)).decode()


# -- the servers file -------------------------------------------------------------------------


def write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_read_servers(tmp_path: Path) -> None:
    path = write(tmp_path, {"mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"]},
        "gh": {"command": "gh-mcp", "env": {"TOKEN": "x"}, "type": "stdio"}}})
    assert read_servers(path) == [ServerSpec("time", ("uvx", "mcp-server-time"), {}),
                                  ServerSpec("gh", ("gh-mcp",), {"TOKEN": "x"})]


def test_servers_disabled_are_skipped_and_cwd_is_the_files_folders(tmp_path: Path) -> None:
    """`"disabled": true` (Cline's, Roo Code's, Windsurf's key) is not started: it was, as
    if the key were not there. `cwd` is where the server starts (it was ignored); a relative
    one is the servers file's folder's, `~` the home folder."""
    path = write(tmp_path, {"mcpServers": {
        "off": {"command": "x", "disabled": True},
        "on": {"command": "y", "disabled": False, "cwd": "servers/on"},
        "abs": {"command": "z", "cwd": "/srv"},
        "home": {"command": "w", "cwd": "~/mcp"}}})
    assert read_servers(path) == [
        ServerSpec("on", ("y",), {}, str(tmp_path / "servers" / "on")),
        ServerSpec("abs", ("z",), {}, "/srv"),
        ServerSpec("home", ("w",), {}, str(Path.home() / "mcp"))]


@pytest.mark.parametrize("text, expanded, missing", [
    ("${TOKEN}", "t0k", []),
    ("Bearer ${env:TOKEN}", "Bearer t0k", []),  # Cursor's and VS Code's form
    ("${HOST:-localhost}:${PORT:-80}", "localhost:8080", []),  # PORT=8080, HOST unset
    ("${EMPTY:-x}|${EMPTY}", "x|", []),  # the shell's :- : empty takes the default too
    ("${NOPE}/${NOPE}", "${NOPE}/${NOPE}", ["NOPE", "NOPE"]),
    ("${DEEP}", "${TOKEN}", []),  # a value is never expanded in turn
    ("$TOKEN ${1} ${input:x} ${TOKEN ${ $", "$TOKEN ${1} ${input:x} ${TOKEN ${ $", []),
    ("${A-B}", "${A-B}", []),
])
def test_expand(text: str, expanded: str, missing: list[str]) -> None:
    unset: list[str] = []
    env = {"TOKEN": "t0k", "PORT": "8080", "EMPTY": "", "DEEP": "${TOKEN}"}
    assert (expand(text, env, unset), unset) == (expanded, missing)


@given(st.text(alphabet=st.sampled_from("${}:-_aZ9 e/nv"), max_size=30),
       st.dictionaries(st.sampled_from(["a", "Z9", "_", "env", "nv"]), st.text(max_size=5)))
def test_expand_changes_only_what_names_a_variable(text: str, env: dict[str, str]) -> None:
    """Laws: no "${" in it, nothing changes; with no variable set, what changes is exactly
    what names one with a default; each variable named without a default is `missing`."""
    unset: list[str] = []
    out = expand(text, env, unset)
    if "${" not in text:
        assert (out, unset) == (text, [])
    bare: list[str] = []
    assert expand(text, {}, bare) == re.sub(r"\$\{(?:env:)?[A-Za-z_]\w*:-([^}]*)\}",
                                            lambda m: m.group(1), text)
    assert all(v not in env for v in unset) and len(unset) <= len(bare)


def test_servers_variables_are_the_proxys_environments(tmp_path: Path) -> None:
    """${VAR} in a command, an argument, a variable's value or a cwd is the proxy's (it
    was passed on as the text "${VAR}": a server got that for its token); a server that
    names one not set, with no default, cannot start (named when it is left out)."""
    path = write(tmp_path, {"mcpServers": {
        "gh": {"command": "${BIN:-/usr/bin}/gh-mcp", "args": ["--org", "${env:ORG}"],
               "env": {"GITHUB_TOKEN": "${GH_TOKEN}", "LITERAL": "$GH_TOKEN"},
               "cwd": "${HOME_DIR}/gh"},
        "no": {"command": "x", "args": ["${MISSING}"], "env": {"K": "${ALSO:-}${NOT_SET}"}}}})
    environ = {"ORG": "acme", "GH_TOKEN": "ghp_1", "HOME_DIR": "/srv"}
    gh, no = read_servers(path, environ)
    assert gh == ServerSpec("gh", ("/usr/bin/gh-mcp", "--org", "acme"),
                            {"GITHUB_TOKEN": "ghp_1", "LITERAL": "$GH_TOKEN"}, "/srv/gh")
    assert no.cannot_start == (f"{path}: mcpServers.no.args[0] names ${{MISSING}}; mcpServers.no.env.K "
                        "names ${NOT_SET}, not set (nor given a default, ${VAR:-default})")


@pytest.mark.parametrize("key", ["url", "serverUrl", "httpUrl"])
def test_a_remote_server_in_any_clients_spelling_cannot_start(tmp_path: Path, key: str) -> None:
    """Windsurf names a remote server's address serverUrl, Gemini CLI httpUrl (its url is
    SSE's): such an entry refused the whole file, as a url one did."""
    path = write(tmp_path, {"mcpServers": {"ok": {"command": "x"},
                                           "remote": {key: "https://mcp.example.invalid/mcp"}}})
    ok, remote = read_servers(path, {})
    assert ok.cannot_start is None
    assert remote.cannot_start is not None and (
        f"mcpServers.remote is a remote server ({key}): only stdio servers") in remote.cannot_start


def test_a_server_naming_a_variable_not_set_or_remote_is_left_out_named(
        tmp_path: Path, scripted: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither can start; the others serve. (A remote server refused the whole file: a
    client's own file, holding one beside its stdio servers, could not be used.)"""
    monkeypatch.delenv("CAVEMAN_TEST_GH_TOKEN", raising=False)
    servers = write(tmp_path, {"mcpServers": {
        "ok": {"command": scripted[0], "args": ["${SERVER_SCRIPT}"]},
        "gh": {"command": scripted[0], "args": [scripted[1]],
               "env": {"T": "${CAVEMAN_TEST_GH_TOKEN}"}},
        "remote": {"type": "http", "url": "https://mcp.example.invalid/mcp"}}})
    wire = Wire(["--store", "memory://", "--servers", str(servers)],
                {"SERVER_SCRIPT": scripted[1]})
    wire.start()
    echoed = wire.call(1, "tools/call", {"name": "ok__echo", "arguments": {"text": "hi"}})
    assert echoed["result"]["content"][0]["text"] == "hi"
    code, err = wire.close()
    assert code == 0
    assert (f"cannot start the upstream 'gh': {servers}: mcpServers.gh.env.T names "
            "${CAVEMAN_TEST_GH_TOKEN}, not set") in err and "left out" in err
    assert (f"cannot start the upstream 'remote': {servers}: mcpServers.remote is a remote "
            "server (url): only stdio servers (command) can be proxied; a stdio bridge") in err


def test_a_file_whose_every_server_is_left_out_is_an_error_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 1 naming why each was left out, before reading the client: the proxy started
    with no upstream and refused the client's initialize ("no upstream initialized")."""
    monkeypatch.delenv("CAVEMAN_TEST_GH_TOKEN", raising=False)
    servers = write(tmp_path, {"mcpServers": {
        "gh": {"command": sys.executable, "env": {"T": "${CAVEMAN_TEST_GH_TOKEN}"}},
        "remote": {"url": "https://mcp.example.invalid/mcp"}}})
    done = subprocess.run([sys.executable, "-m", "caveman_batch", "proxy", "--deferred",
                           "--no-embed", "--store", "memory://", "--servers", str(servers)],
                          stdin=subprocess.PIPE, capture_output=True, timeout=60,
                          env={**os.environ, "CAVEMAN_ALLOW_MEMORY_STORE": "1"})
    err = done.stderr.decode()
    assert done.returncode == 1 and done.stdout == b"", err
    assert "cannot start the upstream 'gh'" in err and "cannot start the upstream 'remote'" in err
    assert "none of the 2 servers could start: nothing to proxy" in err
    assert "Traceback" not in err


def test_a_server_starts_in_its_cwd(tmp_path: Path, scripted: list[str]) -> None:
    """A server named by a path relative to its `cwd` (`node build/index.js`, as a checkout
    of a server is run) starts there; one whose cwd is not a folder is left out, named."""
    home = tmp_path / "checkout"
    home.mkdir()
    (home / "server.py").write_text(Path(scripted[1]).read_text())
    servers = write(tmp_path, {"mcpServers": {
        "ok": {"command": scripted[0], "args": ["server.py"], "cwd": "checkout"},
        "nowhere": {"command": scripted[0], "args": ["server.py"], "cwd": "missing"}}})
    wire = Wire(["--store", "memory://", "--servers", str(servers)])
    wire.start()
    echoed = wire.call(1, "tools/call", {"name": "ok__echo", "arguments": {"text": "hi"}})
    assert echoed["result"]["content"][0]["text"] == "hi"
    code, err = wire.close()
    assert code == 0
    assert f"cannot start the upstream 'nowhere': its cwd {str(tmp_path / 'missing')!r}" in err


@pytest.mark.parametrize("doc, key, words", [
    ("{", None, "is not JSON"),
    ({"servers": {}}, "mcpServers", "expected"),
    ({"mcpServers": {}}, "mcpServers", "names no server"),
    ({"mcpServers": {"a": []}}, "mcpServers.a", "must be an object"),
    ({"mcpServers": {"a": {"args": []}}}, "mcpServers.a", "needs a command"),
    ({"mcpServers": {"a": {"url": 7}}}, "mcpServers.a", "needs a command"),
    ({"mcpServers": {"a": {"url": "https://x", "command": ""}}}, "mcpServers.a",
     "needs a command"),
    ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "mcpServers.a.args", "list of strings"),
    ({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}, "mcpServers.a.env", "of strings"),
    ({"mcpServers": {"a__b": {"command": "x"}}}, "mcpServers.a__b", "not a usable server name"),
    ({"mcpServers": {"a": {"command": "x", "disabled": "yes"}}}, "mcpServers.a.disabled",
     "must be true or false"),
    ({"mcpServers": {"a": {"command": "x", "cwd": ""}}}, "mcpServers.a.cwd", "non-empty string"),
    ({"mcpServers": {"a": {"command": "x", "cwd": 7}}}, "mcpServers.a.cwd", "non-empty string"),
    ({"mcpServers": {"a": {"command": "x", "cwd": "a\0b"}}}, "mcpServers.a.cwd", "a NUL"),
    ({"mcpServers": {"a": {"command": "x", "disabled": True}}}, "mcpServers",
     "no server that is not disabled"),
])
def test_bad_servers_file(tmp_path: Path, doc: Any, key: str | None, words: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(ServersFileError, match=words) as caught:
        read_servers(path)
    assert caught.value.key == key and str(path) in str(caught.value)


def test_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proxy", "--always", "x", "--", "true"]) == 1
    assert "go with --deferred" in capsys.readouterr().err
    assert main(["proxy", "--no-embed", "--", "true"]) == 1
    assert "--embed/--no-embed go with --deferred" in capsys.readouterr().err
    assert main(["proxy", "--deferred"]) == 1
    assert "needs -- UPSTREAM_COMMAND" in capsys.readouterr().err
    servers = write(tmp_path, {"mcpServers": {"a": {"command": "true"}}})
    assert main(["proxy", "--deferred", "--servers", str(servers), "--", "true"]) == 1
    assert "not both" in capsys.readouterr().err
    assert main(["proxy", "--deferred", "--servers", str(write(tmp_path, "{"))]) == 1
    assert "is not JSON" in capsys.readouterr().err


def test_help_shows_always_once_per_name(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # `--always a b -- CMD` takes b for the upstream command: the usage line must not
    # read as one --always taking several names (it said `[--always NAME ...]`)
    monkeypatch.setenv("COLUMNS", "200")  # (the usage line unwrapped)
    assert main(["proxy", "-h"]) == 0
    out = capsys.readouterr().out
    assert "[--always NAME]..." in out and "NAME ...]" not in out


# -- on the wire --------------------------------------------------------------------------------


class Wire:
    """The client end of `proxy --deferred` as a subprocess: raw lines in and out."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        argv = [sys.executable, "-m", "caveman_batch", "proxy", "--deferred", *args]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE,
                                     # memory:// mints handles nothing can recover: for tests only
                                     env={**os.environ, "CAVEMAN_ALLOW_MEMORY_STORE": "1", **(env or {})})
        self.seen: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def call(self, rid: Any, method: str, params: Any = None) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method,
                   **({} if params is None else {"params": params})})
        return self.wait_for(lambda m: m.get("id") == rid and "method" not in m)

    def wait_for(self, wanted: Any) -> dict[str, Any]:
        for i, message in enumerate(self.seen):
            if wanted(message):
                return self.seen.pop(i)
        assert self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            message = json.loads(line)
            if wanted(message):
                return message
            self.seen.append(message)
        raise AssertionError("the proxy ended first")

    def start(self) -> dict[str, Any]:
        init = self.call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "t", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(60)
        return code, self.proc.stderr.read().decode()


def logged(path: Path, method: str) -> list[str]:
    for _ in range(200):
        lines = [ln for ln in path.read_text().splitlines() if f'"{method}"' in ln] \
            if path.exists() else []
        if lines:
            return lines
        time.sleep(0.05)
    return []


def test_calls_pass_through_byte_for_byte(tmp_path: Path, scripted: list[str]) -> None:
    log = tmp_path / "upstream.log"
    wire = Wire(["--store", "memory://", "--", *scripted], {"UPSTREAM_LOG": str(log)})
    assert wire.start()["result"]["serverInfo"]["name"] == "scripted"
    args = b'{"text": "1.10", "n": 1.10, "big": 123456789012345678901234567890}'
    wire.send(b'{"jsonrpc": "2.0", "id": "c-1", "method": "tools/call", "params": '
              b'{"name": "echo", "arguments": ' + args + b'}}\n')
    reply = wire.wait_for(lambda m: m.get("id") == "c-1")
    assert reply["result"]["content"][0]["text"] == "1.10"
    forwarded = logged(log, "echo")[0]
    assert forwarded.encode().endswith(b'"arguments": ' + args + b"}}")  # id renumbered only
    assert json.loads(forwarded)["id"] != "c-1"
    via = wire.call(2, "tools/call", {"name": "call_tool", "arguments": {
        "name": "echo", "arguments": {"text": "via"}}, "_meta": {"progressToken": 9}})
    assert via["result"]["content"][0]["text"] == "via"
    assert '"_meta":{"progressToken": 9}}}' in logged(log, "via")[0]  # as the client wrote it
    assert wire.close()[0] == 0


def test_cancel_bad_lines_and_in_flight_failure(tmp_path: Path, scripted: list[str]) -> None:
    log = tmp_path / "upstream.log"
    wire = Wire(["--store", "memory://", "--", *scripted], {"UPSTREAM_LOG": str(log)})
    wire.start()
    wire.send(b"this is not json\n")
    assert wire.wait_for(lambda m: "error" in m)["error"]["code"] == rpc.PARSE_ERROR
    wire.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "hang"}})
    upstream_id = json.loads(logged(log, "hang")[0])["id"]
    wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}})
    cancel = json.loads(logged(log, "notifications/cancelled")[0])
    assert cancel["params"]["requestId"] == upstream_id
    wire.send({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "hang"}})
    wire.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "crash"}})
    for rid in (6, 7):  # both in flight when it died: errors, not silence
        failed = wire.wait_for(lambda m, rid=rid: m.get("id") == rid)
        assert failed["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE
        assert "exited (status 3)" in failed["error"]["message"]
    code, err = wire.close()
    assert code == 3 and "exited with status 3" in err  # one upstream: its status is ours
    assert err.count("exited with status 3") == 1, err  # (said twice, once as 'upstream')
    assert not any(m.get("id") == 5 for m in wire.seen)  # a cancelled call is not answered


def test_always_tools_and_search_limits(scripted: list[str]) -> None:
    # BM25 alone: a query none of whose words any tool has finds nothing (hybrid, the
    # dense half always has a nearest tool: test_deferred_e2e)
    wire = Wire(["--store", "memory://", "--always", "echo", "--always", "nope", "--no-embed",
                 "--", *scripted])
    wire.start()
    names = [t["name"] for t in wire.call(1, "tools/list")["result"]["tools"]]
    assert names == ["search_tools", "call_tool", "echo"]
    found = wire.call(2, "tools/call", {"name": "search_tools", "arguments": {
        "query": "weather or echo or stop the server", "limit": 1}})
    assert len(json.loads(found["result"]["content"][0]["text"])) == 1
    bad = wire.call(3, "tools/call", {"name": "search_tools", "arguments": {"query": "x",
                                                                            "limit": 0}})
    assert bad["result"]["isError"] is True
    none = wire.call(4, "tools/call", {"name": "search_tools", "arguments": {"query": "zebra"}})
    assert none["result"]["content"][0]["text"].startswith("No tool matches")
    assert wire.call(5, "tools/call", {"name": "nope"})["error"]["code"] == rpc.INVALID_PARAMS
    code, err = wire.close()
    assert code == 0 and "--always names no tool of a running upstream: nope" in err


def test_handles_handed_out_stay_recoverable_across_a_prune(tmp_path: Path,
                                                            scripted: list[str]) -> None:
    """A proxy runs for longer than `prune --not-seen-for`: each handle it hands out (search
    results, tools/list) is refreshed then, and committed again if the store lost it."""
    url = f"lmdb://{tmp_path}/ccr"
    wire = Wire(["--store", url, "--always", "echo", "--no-embed", "--", *scripted])
    wire.start()

    def search(rid: int) -> dict[str, str]:
        found = wire.call(rid, "tools/call", {"name": "search_tools", "arguments": {
            "query": "echo a message back", "limit": 2}})
        return found["result"]["_meta"][listing.META_KEY]

    first = search(1)
    assert "echo" in first
    with open_store(url) as store:
        originals = {name: ccr.recover(store, h) for name, h in first.items()}
        assert ccr.prune(store, 0, now_ms=time.time_ns() // 1_000_000 + 1)  # all of them go
        assert ccr.missing(store, [h[4:] for h in first.values()])
    assert search(2) == first
    with open_store(url) as store:
        assert {name: ccr.recover(store, h) for name, h in first.items()} == originals
        ccr.prune(store, 0, now_ms=time.time_ns() // 1_000_000 + 1)
    listed = wire.call(3, "tools/list")["result"]["_meta"][listing.META_KEY]
    with open_store(url) as store:
        assert ccr.recover(store, listed["echo"]) == originals["echo"]
    code, _ = wire.close()
    assert code == 0


def test_an_upstream_that_never_answers_is_left_behind(tmp_path: Path, scripted: list[str]) -> None:
    servers = write(tmp_path, {"mcpServers": {
        "mute": {"command": scripted[0], "args": scripted[1:], "env": {"UPSTREAM_MUTE": "1"}},
        "ok": {"command": scripted[0], "args": scripted[1:]}}})
    client_in, proxy_in = os.pipe()
    proxy_out, client_out = os.pipe()
    err = tmp_path / "err.txt"
    settings = deferred.Settings(single=False, startup_timeout=1.0)
    status: list[int] = []

    def serve() -> None:
        with err.open("w") as stream:
            status.append(deferred.run(read_servers(servers), None, settings, stdin_fd=client_in,
                                       stdout_fd=client_out, err=stream))

    thread = threading.Thread(target=serve)
    thread.start()
    with os.fdopen(proxy_in, "wb", buffering=0) as to_proxy, os.fdopen(proxy_out, "rb") as reader:
        def call(rid: int, method: str, params: Any) -> dict[str, Any]:
            to_proxy.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                       "params": params}).encode() + b"\n")
            while True:
                message = json.loads(reader.readline())
                if message.get("id") == rid:
                    return message

        started = time.monotonic()
        init = call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        assert init["result"]["capabilities"] == {"tools": {"listChanged": True}}
        assert time.monotonic() - started >= 0.9
        to_proxy.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        echoed = call(1, "tools/call", {"name": "ok__echo", "arguments": {"text": "still here"}})
        assert echoed["result"]["content"][0]["text"] == "still here"
        hits = call(2, "tools/call", {"name": "search_tools", "arguments": {"query": "echo"}})
        names = [t["name"] for t in json.loads(hits["result"]["content"][0]["text"])]
        assert "ok__echo" in names and not any(n.startswith("mute__") for n in names)
    thread.join(60)
    os.close(client_in)
    os.close(client_out)
    assert status == [0]
    assert "upstream 'mute' did not list its tools within 1 s" in err.read_text()


def test_a_dead_server_leaves_the_search(tmp_path: Path, scripted: list[str]) -> None:
    same = {"command": scripted[0], "args": scripted[1:]}
    wire = Wire(["--store", "memory://", "--servers",
                 str(write(tmp_path, {"mcpServers": {"a": same, "b": same}}))])
    wire.start()

    def best(rid: int) -> list[str]:
        found = wire.call(rid, "tools/call", {"name": "search_tools", "arguments": {
            "query": "echo a message", "limit": 1}})
        text = found["result"]["content"][0]["text"]
        return [t["name"] for t in json.loads(text)] if text.startswith("[") else []

    assert best(1) == ["a__echo"]  # a tie: the server's name decides
    assert "error" in wire.call(2, "tools/call", {"name": "a__crash"})
    assert best(3) == ["b__echo"]  # a's tools are out of the index, not just hidden
    listed = [t["name"] for t in wire.call(4, "tools/list")["result"]["tools"]]
    assert listed == ["search_tools", "call_tool", "b__echo"]
    via = wire.call(5, "tools/call", {"name": "call_tool", "arguments": {
        "name": "a__echo", "arguments": {"text": "hi"}}})["result"]
    assert via["isError"] and "upstream 'a'" in via["content"][0]["text"]
    direct = wire.call(6, "tools/call", {"name": "a__echo", "arguments": {"text": "hi"}})
    assert direct["error"]["code"] == -32000 and "upstream 'a'" in direct["error"]["message"]
    code, err = wire.close()
    assert code == 0 and "[a] crashing on request" in err


def test_other_requests_go_to_the_one_upstream(tmp_path: Path, scripted: list[str]) -> None:
    store = f"sqlite:///{tmp_path / 'ccr.db'}"
    wire = Wire(["--store", store, "--", *scripted])
    wire.start()
    prompts = wire.call("p", "prompts/list")["result"]
    description = prompts["prompts"][0]["description"]
    assert "Returns at most 100 issues per page." in description and "weekly" not in description
    handle = prompts["_meta"]["dev.caveman-batch/ccr"]
    unknown = wire.call(1, "resources/list")
    assert unknown["error"] == {"code": -32601, "message": "resources/list"}  # the upstream's own
    assert wire.close()[0] == 0
    recovered = subprocess.run([sys.executable, "-m", "caveman_batch", "recover", "--store", store,
                                handle], capture_output=True, check=True).stdout
    assert "for weekly reports" in json.loads(recovered)["prompts"][0]["description"]


def test_servers_mode_serves_tools_only_and_leaves_out_what_cannot_start(
        tmp_path: Path, scripted: list[str]) -> None:
    servers = write(tmp_path, {"mcpServers": {
        "gone": {"command": str(tmp_path / "no-such-server")},
        "ok": {"command": scripted[0], "args": scripted[1:]}}})
    wire = Wire(["--store", "memory://", "--servers", str(servers)])
    assert wire.start()["result"]["serverInfo"]["name"] == "caveman-batch"
    assert wire.call(1, "prompts/list")["error"]["code"] == rpc.METHOD_NOT_FOUND
    assert wire.call(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
    echoed = wire.call(3, "tools/call", {"name": "ok__echo", "arguments": {"text": "hi"}})
    assert echoed["result"]["content"][0]["text"] == "hi"
    assert wire.call(4, "tools/call", {"name": "gone__echo"})["error"]["code"] == rpc.INVALID_PARAMS
    code, err = wire.close()
    assert code == 0 and "cannot start the upstream 'gone'" in err and "left out" in err


def test_a_signal_reaches_every_upstream(tmp_path: Path, scripted: list[str]) -> None:
    same = {"command": scripted[0], "args": scripted[1:]}
    wire = Wire(["--store", "memory://", "--servers",
                 str(write(tmp_path, {"mcpServers": {"a": same, "b": same}}))])
    wire.start()
    wire.proc.send_signal(signal.SIGTERM)
    assert wire.proc.wait(60) == 128 + signal.SIGTERM


def test_every_page_of_an_upstream_list_is_read(scripted: list[str]) -> None:
    wire = Wire(["--store", "memory://", "--always", "echo", "--always", "hang", "--", *scripted],
                {"UPSTREAM_PAGES": "1"})
    wire.start()
    names = [t["name"] for t in wire.call(1, "tools/list")["result"]["tools"]]
    assert names == ["search_tools", "call_tool", "echo", "hang"]  # pages 1 and 3 of 3
    assert wire.close()[0] == 0


def test_progress_and_logging_reach_the_client(scripted: list[str]) -> None:
    wire = Wire(["--store", "memory://", "--", *scripted])
    wire.start()
    done = wire.call(1, "tools/call", {"name": "progress", "_meta": {"progressToken": "tok"}})
    assert done["result"]["content"][0]["text"] == "done"
    assert wire.seen == [
        {"jsonrpc": "2.0", "method": "notifications/progress",
         "params": {"progressToken": "tok", "progress": 0.5, "total": 1}},
        {"jsonrpc": "2.0", "method": "notifications/message",
         "params": {"level": "info", "data": "half way"}}]
    assert wire.close()[0] == 0


def test_the_start_waits_longer_for_one_upstream_than_for_several() -> None:
    """One upstream: as long as the client would wait for it alone; several: short enough
    that one hung server does not hold the others past a client's own timeout."""
    assert deferred.Settings(single=True).start_wait == 60.0
    assert deferred.Settings(single=False).start_wait == 15.0
    assert deferred.Settings(single=False, startup_timeout=2.5).start_wait == 2.5
