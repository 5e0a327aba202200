"""The deferred proxy against hostile peers: a client's odd lines, an upstream's odd answers.

Each test drives `proxy --deferred` as a real subprocess (the startup deadline's test runs
`deferred.run` in a thread, as test_deferred does, for a short timeout) with UPSTREAM, a
hand-written MCP server whose quirks the test picks: its tools/list is $TOOLS verbatim, it
refuses an initialize without a protocolVersion (as the SDK's servers do), and it answers
a call of `latin1` with a line that is not UTF-8. Every wait has a deadline: the defects
these tests keep out were hangs.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caveman_batch import deferred, rpc
from caveman_batch.catalog import Options
from caveman_batch.listing import META_KEY
from caveman_batch.store import open_store
from caveman_batch.upstreams import ServerSpec, pump_lines
from test_deferred import SCRIPTED

UPSTREAM = r'''
import json, os, signal, subprocess, sys, time
if os.environ.get("DEAF") == "term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("DEAF") == "int":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
TOOLS = os.environ.get("TOOLS") or json.dumps([
    {"name": "echo", "description": "Echo a message back.", "inputSchema": {"type": "object"}}])
log = open(os.environ["UPSTREAM_LOG"], "a") if os.environ.get("UPSTREAM_LOG") else None
initialized = False

def send(line):
    sys.stdout.buffer.write(line + b"\n"); sys.stdout.flush()

for line in sys.stdin.buffer:
    if log:
        log.write(line.decode()); log.flush()
    msg = json.loads(line)
    method, mid = msg.get("method"), json.dumps(msg.get("id")).encode()
    initialized = initialized or method == "notifications/initialized"
    if method == "initialize" and os.environ.get("INIT_GATE"):  # late: once the file is there
        while not os.path.exists(os.environ["INIT_GATE"]):
            time.sleep(0.02)
        if os.environ.get("INIT_THEN") == "die":  # instead, what it was sent meanwhile logged
            time.sleep(0.3)
            os.set_blocking(0, False)
            if log:
                log.write((sys.stdin.buffer.read() or b"").decode()); log.flush()
            os._exit(3)
        if os.environ.get("INIT_THEN") == "refuse":
            msg["params"].pop("protocolVersion")
    if method == "initialize" and "protocolVersion" not in msg.get("params", {}):
        send(b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"no protocolVersion"}}'
             % mid)
    elif method == "initialize":
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%s,'
             b'"capabilities":%s,"serverInfo":{"name":"up","version":"1"}}}'
             % (mid, json.dumps(os.environ.get("VERSION", "2025-06-18")).encode(),
                os.environ.get("CAPABILITIES", '{"tools":{}}').encode()))
    elif "id" in msg and method != "ping" and not initialized:  # as the Python SDK's servers
        send(b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"Received request '
             b'before initialization was complete"}}' % mid)
    elif method == "tools/list" and os.environ.get("HANG") == "list":
        pass  # never answered: the start's deadline decides for it
    elif method == "tools/list" and os.environ.get("PAGE2") and "cursor" in msg.get("params", {}):
        send(b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"page 2 broke"}}' % mid)
    elif method == "tools/list" and os.environ.get("PAGE2"):  # a next page, which fails
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"tools":%s,"nextCursor":"2"}}'
             % (mid, TOOLS.encode()))
    elif method == "tools/list":
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"tools":%s}}' % (mid, TOOLS.encode()))
    elif method == "tools/call" and msg["params"]["name"] == "chatty":  # notifies, then answers
        own = msg["params"].get("_meta", {}).get("progressToken")
        for token in (msg["params"]["arguments"].get("token"), own):  # another's, then its own
            send(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                             "params": {"progressToken": token, "progress": 1}}).encode())
        send(b'{"jsonrpc":"2.0","method":"notifications/message","params":'
             b'{"level":"info","logger":"db","data":{"n":1.0}}}')
        send(b'{"jsonrpc":"2.0","method":"notifications/message","params":'
             b'{"level":"info","data":"bare"}}')
        send(b'{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}')
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"content":[]}}' % mid)
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",  # too late
                         "params": {"progressToken": own, "progress": 2}}).encode())
    elif method == "tools/call" and msg["params"]["name"] == "doubled":  # a log, then answers
        send(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info",'
             b'"logger":"x","data":{"n":1e400,"m":-0.0,"big":123456789012345678901234567890},'
             b'"logger":"db"}}')
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"content":[]}}' % mid)
    elif method == "tools/call" and msg["params"]["name"] == "nan":  # as json.dumps writes nan
        send(b'{"jsonrpc":"2.0","method":"notifications/message","params":'
             b'{"level":"info","data":{"mean":NaN}}}')
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"content":[],"structuredContent":'
             b'{"mean":NaN,"max":Infinity}}}' % mid)
    elif method == "tools/call" and msg["params"]["name"] == "latin1":
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"caf\xe9"}]}}'
             % mid)
    elif method == "tools/call" and msg["params"]["name"] == "bare":  # neither result nor error
        send(b'{"jsonrpc":"2.0","id":%s}' % mid)  # (JSON.stringify of a result: undefined)
    elif method == "tools/call" and msg["params"]["name"] == "hang":
        pass  # never answered: the client cancels it
    elif method == "tools/call" and msg["params"]["name"] == "orphan":  # a child keeps stdout
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"],
                         stdin=subprocess.DEVNULL)
        os._exit(9)
    elif method == "tools/call" and msg["params"]["name"] == "closeout":  # then lingers
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.close(1)
        time.sleep(30)
        sys.exit(0)
    elif method == "tools/call" and msg["params"]["name"] == "die":
        os._exit(3)
    elif method == "tools/call" and msg["params"]["name"] == "ask":  # asks the client first
        send(b'{"jsonrpc":"2.0","id":"q1","method":"roots/list",'
             b'"params":{"_meta":{"progressToken":"tok"}}}')
    elif method == "tools/call" and msg["params"]["name"] == "askbad":  # unreadable asks
        send(b'{"jsonrpc":"2.0","id":"q8","method":"roots/list","params":{"n":"caf\xe9"}}')
        send(b'{"jsonrpc":"2.0","id":"q9","method":"roots/list","params":{"n":NaN}}')
        send(b'{"jsonrpc":"2.0","id":9,"method":"roots/list","id":10}')
        send(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"n":NaN}}')
        send(b'{"jsonrpc":"2.0","id":%s,"result":{"content":[]}}' % mid)
    elif method == "tools/call" and msg["params"]["name"] == "unask":  # gives up on it
        send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"q1"}}')
    elif method == "tools/call":
        text = "ran " + msg["params"]["name"] + " " + json.dumps(msg["params"].get("arguments"))
        send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "content": [{"type": "text", "text": text}]}}).encode())
    elif method is not None and "id" in msg:
        send(b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}' % mid)
if os.environ.get("DEAF"):  # its input ended: it lingers anyway
    time.sleep(30)
'''

WAIT = 10.0  # for one answer: far more than any takes, so only a hang fails
INIT = {"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}


class Wire:
    """The client end of `proxy --deferred` as a subprocess: raw lines in, messages out."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 stderr: int = subprocess.PIPE) -> None:
        argv = [sys.executable, "-m", "caveman_batch", "proxy", "--deferred", "--no-embed",
                "--store", "memory://", *args]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr,
                                     # memory:// mints handles nothing can recover: tests only
                                     env={**os.environ, "CAVEMAN_ALLOW_MEMORY_STORE": "1",
                                          **(env or {})})
        self.buffer = b""
        self.seen: list[dict[str, Any]] = []
        self.lines: list[bytes] = []  # every line read, as it came

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def call(self, rid: Any, method: str, params: Any = None) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method,
                   **({} if params is None else {"params": params})})
        return self.answer(rid)

    def answer(self, rid: Any) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("id") == rid and "method" not in m)

    def wait_for(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for i, message in enumerate(self.seen):
            if wanted(message):
                return self.seen.pop(i)
        while True:
            message = json.loads(self._line(time.monotonic() + WAIT))
            if wanted(message):
                return message
            self.seen.append(message)

    def _line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise AssertionError(f"no answer within {WAIT:g} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise AssertionError("the proxy ended first")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.lines.append(line)
        return line

    def start(self, params: dict[str, Any] = INIT) -> dict[str, Any]:
        init = self.call(0, "initialize", params)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(30)
        return code, self.proc.stderr.read().decode()


@pytest.fixture
def wire() -> Iterator[Callable[..., Wire]]:
    """Wire's constructor; whatever a failed test leaves running is killed."""
    made: list[Wire] = []

    def make(args: list[str], env: dict[str, str] | None = None) -> Wire:
        made.append(Wire(args, env))
        return made[-1]

    yield make
    for w in made:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


@pytest.fixture
def upstream(tmp_path: Path) -> list[str]:
    path = tmp_path / "upstream.py"
    path.write_text(UPSTREAM)
    return [sys.executable, str(path)]


def servers(tmp_path: Path, command: list[str], *names: str) -> str:
    path = tmp_path / "servers.json"
    entry = {"command": command[0], "args": command[1:]}
    path.write_text(json.dumps({"mcpServers": dict.fromkeys(names, entry)}))
    return str(path)


def one_upstream(tmp_path: Path, upstream: list[str], wire: Callable[..., Wire],
                 *tools: str) -> tuple[Wire, Path]:
    """A started proxy of UPSTREAM as server `a`, listing `tools`, and the log of every line
    the upstream reads."""
    log = tmp_path / "upstream.log"
    listed = json.dumps([{"name": n, "description": f"{n.title()}.",
                          "inputSchema": {"type": "object"}} for n in tools])
    w = wire(["--servers", servers(tmp_path, upstream, "a")],
             {"UPSTREAM_LOG": str(log), "TOOLS": listed})
    w.start()
    return w, log


def text(reply: dict[str, Any]) -> str:
    return reply["result"]["content"][0]["text"]


# -- a key given twice --------------------------------------------------------------------


def test_a_key_given_twice_is_refused_and_nothing_is_called(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    log = tmp_path / "upstream.log"
    w = wire(["--servers", servers(tmp_path, upstream, "a")], {"UPSTREAM_LOG": str(log)})
    w.start()
    # which `name` to rename is not the proxy's to guess
    w.send(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
           b'{"name":"a__echo","name":"a__echo","arguments":{}}}\n')
    assert w.answer(1)["error"]["code"] == rpc.INVALID_PARAMS
    # nor which of call_tool's arguments: the upstream must not run the tool with none
    w.send(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"call_tool",'
           b'"arguments":{"name":"a__echo","arguments":{"text":"keep me"},"name":"a__echo"}}}\n')
    refused = w.answer(2)
    assert refused["result"]["isError"] is True and "twice" in text(refused)
    after = w.call(3, "tools/call", {"name": "call_tool", "arguments": {
        "name": "a__echo", "arguments": {"text": "after"}}})
    assert text(after) == 'ran echo {"text": "after"}'
    calls = [ln for ln in log.read_text().splitlines() if '"tools/call"' in ln]
    assert len(calls) == 1 and "after" in calls[0]  # written before it answered
    assert w.close()[0] == 0


def test_a_cancellation_giving_a_key_twice_still_reaches_the_upstream(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """Its params cannot be spliced (a key twice): written anew with the upstream's id (a
    KeyError inside the proxy dropped it, and the upstream ran on)."""
    log = tmp_path / "upstream.log"
    tools = [{"name": n, "description": f"{n.title()}.", "inputSchema": {"type": "object"}}
             for n in ("echo", "hang")]
    w = wire(["--servers", servers(tmp_path, upstream, "a")],
             {"UPSTREAM_LOG": str(log), "TOOLS": json.dumps(tools)})
    w.start()
    w.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "a__hang", "arguments": {}}})
    deadline = time.monotonic() + WAIT
    while '"hang"' not in log.read_text():
        assert time.monotonic() < deadline, "the call never reached the upstream"
        time.sleep(0.02)
    upstream_id = next(json.loads(ln)["id"] for ln in log.read_text().splitlines()
                       if '"hang"' in ln)
    w.send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":'
           b'{"requestId":7,"reason":"gave up","requestId":7}}\n')
    while "notifications/cancelled" not in log.read_text():
        assert time.monotonic() < deadline, "the cancellation never reached the upstream"
        time.sleep(0.02)
    cancel, = [json.loads(ln) for ln in log.read_text().splitlines() if "cancelled" in ln]
    assert cancel["params"] == {"requestId": upstream_id, "reason": "gave up"}
    assert text(w.call(8, "tools/call", {"name": "a__echo", "arguments": {}})) == "ran echo {}"
    code, err = w.close()
    assert code == 0 and "Traceback" not in err and "KeyError" not in err, err


@pytest.mark.parametrize("end", ["cancel", "close"])
def test_an_id_given_to_two_calls_in_flight_keeps_both(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire], end: str) -> None:
    """MCP says a client must not reuse an id before its answer; one that does had the
    second call take the first's place: the first could no longer be cancelled, and once
    the second was answered the proxy took nothing for in flight and, the client's input
    closed, ended without answering the first. A cancellation of such an id cancels both."""
    w, log = one_upstream(tmp_path, upstream, wire, "echo", "hang")
    w.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "a__hang", "arguments": {}, "_meta": {"progressToken": 1}}})
    hang_id = _logged(log, '"hang"')[0]["id"]
    assert text(w.call(5, "tools/call", {"name": "call_tool", "arguments": {
        "name": "a__echo", "arguments": {}}})) == "ran echo {}"
    if end == "cancel":
        w.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 5}})
        cancel, = _logged(log, "notifications/cancelled")
        assert cancel["params"] == {"requestId": hang_id}
        assert text(w.call(6, "tools/call", {"name": "a__echo", "arguments": {}})) \
            == "ran echo {}"
        code, err = w.close()
    else:
        code, err = w.close()
        assert w.proc.stdout is not None
        late = [json.loads(ln) for ln in w.proc.stdout.read().splitlines()]
        assert [m["id"] for m in late if "method" not in m] == [5]  # answered as it exited
        assert "error" in late[-1] and "exited" in late[-1]["error"]["message"], late
    assert code == 0 and "Traceback" not in err, err


def test_an_answer_holding_nan_answers_its_call_with_an_error(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """NaN and Infinity are not JSON, but Python's json.dumps writes them: a line holding
    one reached the client as it came, and a client's JSON.parse (every Node client's)
    refused it, dropped it and waited for the call's answer until its timeout. The call
    is answered with an error naming the upstream, as for any line that is not JSON-RPC;
    a notification holding one is dropped."""
    w, _ = one_upstream(tmp_path, upstream, wire, "nan", "echo")
    direct = w.call(1, "tools/call", {"name": "a__nan", "arguments": {}})
    assert direct["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE
    assert "upstream 'a'" in direct["error"]["message"]
    called = w.call(2, "tools/call", {"name": "call_tool", "arguments": {"name": "a__nan"}})
    assert called["result"]["isError"] is True and "upstream 'a'" in text(called)
    assert text(w.call(3, "tools/call", {"name": "a__echo", "arguments": {}})) == "ran echo {}"
    code, err = w.close()
    assert code == 0 and "Traceback" not in err, err
    assert not [m for m in w.seen if m.get("method") == "notifications/message"]
    for line in w.lines:
        _strict(line)


def _strict(line: str | bytes) -> Any:
    """JSON as RFC 8259 has it: NaN and Infinity are not JSON."""
    def refuse(word: str) -> None:
        raise ValueError(f"{word} is not JSON")
    return json.loads(line, parse_constant=refuse)


def test_params_written_anew_keep_every_value_as_written(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """A log message or a cancellation whose params give a key twice is written anew, since
    there is nothing to splice into; its numbers go as written (1e400 was read as a float
    and came out as `Infinity`, which no JSON parser of the client's takes)."""
    w, log = one_upstream(tmp_path, upstream, wire, "doubled", "hang")
    assert w.call(1, "tools/call", {"name": "a__doubled", "arguments": {}})["result"] == {
        "content": []}
    note = next(m for m in w.seen if m.get("method") == "notifications/message")
    assert note["params"] == {"level": "info", "logger": "a/db", "data": {
        "n": float("inf"), "m": -0.0, "big": 123456789012345678901234567890}}
    w.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "a__hang", "arguments": {}}})
    assert _logged(log, '"hang"'), "the call never reached the upstream"
    w.send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":'
           b'{"requestId":2,"reason":{"after":1e400},"requestId":2}}\n')
    assert _logged(log, "notifications/cancelled"), "the cancellation never reached it"
    cancel, = [ln for ln in log.read_text().splitlines() if "cancelled" in ln]
    assert '"reason":{"after":1e400}' in cancel and _strict(cancel)["params"]["requestId"] != 2
    code, err = w.close()
    assert code == 0 and "Traceback" not in err, err
    lines = [ln for ln in w.lines if b"notifications/message" in ln]
    assert len(lines) == 1 and b'"n":1e400' in lines[0] and b"-0.0" in lines[0]
    _strict(lines[0])


@given(st.dictionaries(st.text(max_size=4), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4), lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8), max_size=5),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), st.booleans())
def test_an_object_written_anew_is_the_object_with_its_changes(
        value: dict[str, Any], changes: dict[str, int], spaced: bool) -> None:
    text = json.dumps(value, indent=1 if spaced else None, ensure_ascii=spaced)
    anew = rpc.object_with(text, (0, len(text)), {k: json.dumps(v) for k, v in changes.items()})
    assert anew is not None and json.loads(anew) == {**value, **changes}


def test_an_object_written_anew_keeps_the_last_of_a_key_given_twice() -> None:
    text = '{"a": 1, "b": 1e400, "a": [2]}'
    assert rpc.object_with(text, (0, len(text)), {"c": '"x"'}) == '{"a":[2],"b":1e400,"c":"x"}'
    assert rpc.object_with("[1]", (0, 3), {}) is None  # (no object)


def _logged(log: Path, needle: str) -> list[dict[str, Any]]:
    """The lines an upstream logged that hold `needle`, once one has come (or a deadline)."""
    deadline = time.monotonic() + WAIT
    while True:
        lines = [json.loads(ln) for ln in log.read_text().splitlines() if needle in ln] \
            if log.exists() else []
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


def test_progress_on_an_upstreams_request_reaches_that_upstream_alone(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """The client's progress on a request an upstream sent it goes back to that upstream,
    under the token it gave; before, every upstream got it (another's data)."""
    tools = json.dumps([{"name": "ask", "description": "Asks the client.",
                         "inputSchema": {"type": "object"}}])
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {
        name: {"command": upstream[0], "args": upstream[1:],
               "env": {"TOOLS": tools, "UPSTREAM_LOG": str(tmp_path / f"{name}.log")}}
        for name in ("a", "b")}}))
    w = wire(["--servers", str(path)])
    w.start()
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "a__ask", "arguments": {}}})
    asked = w.wait_for(lambda m: m.get("method") == "roots/list")
    token = asked["params"]["_meta"]["progressToken"]
    assert token == asked["id"]  # the proxy's own: two upstreams' tokens cannot collide
    w.send({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": 1, "message": "a's secret"}})
    w.send({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": 999, "progress": 1}})  # nobody's: dropped
    w.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": []}})
    got = _logged(tmp_path / "a.log", "notifications/progress")
    assert [m["params"] for m in got] == [
        {"progressToken": "tok", "progress": 1, "message": "a's secret"}]
    assert _logged(tmp_path / "a.log", '"roots"')[0]["id"] == "q1"
    assert text(w.call(2, "tools/call", {"name": "b__echo", "arguments": {}})) != ""
    assert "progress" not in (tmp_path / "b.log").read_text()
    code, err = w.close()  # the call of `ask` in flight fails as a's input closes and it exits
    assert code == 0 and "Traceback" not in err, err


def test_an_upstreams_request_the_proxy_cannot_read_is_answered(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """A request to the client that is not UTF-8, holds NaN or gives a key twice cannot be
    sent on: the upstream is answered with an error under its id (it was dropped, and the
    upstream waited for its answer for ever); a notification is dropped alone."""
    w, log = one_upstream(tmp_path, upstream, wire, "askbad")
    assert w.call(1, "tools/call", {"name": "a__askbad", "arguments": {}})["result"] == {
        "content": []}
    answers = {}
    deadline = time.monotonic() + WAIT
    while len(answers) < 3:
        assert time.monotonic() < deadline, f"not every request answered: {answers}"
        answers = {m["id"]: m for m in map(json.loads, log.read_text().splitlines())
                   if "error" in m}
        time.sleep(0.02)
    assert set(answers) == {"q8", "q9", 10}  # (the last of a key given twice, as JSON reads)
    assert {m["error"]["code"] for m in answers.values()} == {-32600}
    assert not [m for m in w.seen if m.get("method") == "roots/list"]
    code, err = w.close()
    assert code == 0 and err.count("not JSON-RPC") == 4, err


def test_an_upstream_id_given_to_two_requests_in_flight_keeps_both(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """An upstream that gives one id ("q1") to a request to the client before the last
    under it was answered: once the client answered the first, the upstream's cancellation
    of that id reached the client no more (the second had taken the first's place, and
    the first's answer forgot it). A cancellation of such an id cancels each in flight."""
    w, _ = one_upstream(tmp_path, upstream, wire, "ask", "unask")
    for rid in (1, 2):
        w.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": "a__ask", "arguments": {}}})
    first = w.wait_for(lambda m: m.get("method") == "roots/list")
    second = w.wait_for(lambda m: m.get("method") == "roots/list")
    assert first["id"] != second["id"]
    w.send({"jsonrpc": "2.0", "id": first["id"], "result": {"roots": []}})
    w.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "a__unask", "arguments": {}}})
    cancel = w.wait_for(lambda m: m.get("method") == "notifications/cancelled")
    assert cancel["params"] == {"requestId": second["id"]}
    w.send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "a__unask", "arguments": {}}})  # q1 is no one's now: dropped
    assert text(w.call(5, "tools/call", {"name": "a__echo", "arguments": {}})) == "ran echo {}"
    assert not [m for m in w.seen if m.get("method") == "notifications/cancelled"]
    w.proc.kill()


def test_an_upstreams_progress_reaches_the_client_only_on_its_own_calls_in_flight(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """With several upstreams, one could report progress under the token of a call the
    client made to another (the SDKs' tokens are small integers: easy to guess), keeping
    that call alive past its timeout; or after its own call was answered. Both are dropped.
    Its log messages reach the client named after it; resources changes, which a proxy of
    several servers does not serve, do not."""
    tools = json.dumps([{"name": n, "description": f"{n.title()}.",
                         "inputSchema": {"type": "object"}} for n in ("chatty", "hang")])
    w = wire(["--servers", servers(tmp_path, upstream, "a", "b")], {"TOOLS": tools})
    w.start()
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",  # in flight at a, for ever
            "params": {"name": "a__hang", "arguments": {}, "_meta": {"progressToken": 1}}})
    chatty = {"name": "b__chatty", "arguments": {"token": 1}}  # names a's token, then its own
    assert w.call(2, "tools/call", {**chatty, "_meta": {"progressToken": 2}})["result"] == {
        "content": []}
    assert w.call(3, "tools/call", {"name": "call_tool", "arguments": chatty,
                                    "_meta": {"progressToken": 3}})["result"] == {"content": []}
    assert w.call(4, "tools/call", {"name": "a__chatty", "arguments": {}})["result"] == {
        "content": []}  # (no token of its own: its progress, on None, is no one's)
    assert text(w.call(5, "tools/call", {"name": "b__echo", "arguments": {}})) == "ran echo {}"
    notes = [m for m in w.seen if "method" in m]
    assert [m["params"] for m in notes if m["method"] == "notifications/progress"] == [
        {"progressToken": 2, "progress": 1}, {"progressToken": 3, "progress": 1}]
    assert [m["params"]["logger"] for m in notes if m["method"] == "notifications/message"] \
        == ["b/db", "b", "b/db", "b", "a/db", "a"]
    assert {m["method"] for m in notes} == {"notifications/progress", "notifications/message"}
    w.proc.kill()


@pytest.mark.parametrize("second", ["a", "b"])
def test_a_progress_token_given_to_two_calls_stays_open_until_both_are_answered(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire], second: str) -> None:
    """A client that gives one token to two calls in flight (at one upstream or two): the
    first answered took the token from the other, whose progress was then dropped."""
    tools = json.dumps([{"name": n, "description": f"{n.title()}.",
                         "inputSchema": {"type": "object"}} for n in ("chatty", "hang")])
    w = wire(["--servers", servers(tmp_path, upstream, "a", "b")], {"TOOLS": tools})
    w.start()
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",  # in flight at a, for ever
            "params": {"name": "a__hang", "arguments": {}, "_meta": {"progressToken": 7}}})
    assert w.call(2, "tools/call", {"name": f"{second}__chatty", "arguments": {},
                                    "_meta": {"progressToken": 7}})["result"] == {"content": []}
    assert w.call(3, "tools/call", {"name": "a__chatty", "arguments": {"token": 7}})[
        "result"] == {"content": []}  # (on call 1's token, in flight at a)
    assert text(w.call(4, "tools/call", {"name": "a__echo", "arguments": {}})) == "ran echo {}"
    progress = [m["params"] for m in w.seen if m.get("method") == "notifications/progress"]
    late = [{"progressToken": 7, "progress": 2}] if second == "a" else []  # (call 1's, at a)
    assert progress == [{"progressToken": 7, "progress": 1}, *late,
                        {"progressToken": 7, "progress": 1}]
    w.proc.kill()


def test_a_tools_list_whose_later_page_fails_serves_the_pages_read(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """Before, a first listing that failed on its second page served none of the first's
    tools (a re-list that fails still keeps the tools it had)."""
    w = wire(["--servers", servers(tmp_path, upstream, "a")], {"PAGE2": "fail"})
    w.start()
    found = w.call(1, "tools/call", {"name": "search_tools", "arguments": {"query": "echo"}})
    assert json.loads(text(found))[0]["name"] == "a__echo"
    listed = w.call(2, "tools/list")["result"]["tools"]
    assert [t["name"] for t in listed] == ["search_tools", "call_tool", "a__echo"]
    code, err = w.close()
    assert code == 0 and "failed on page 2" in err and "the tools of the 1 read are served" in err


def test_progress_on_a_request_its_upstream_cancelled_is_dropped(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """Once an upstream cancels its request to the client, the client's progress on it is
    no one's: it reached the upstream still (and the proxy kept its token for ever)."""
    log = tmp_path / "up.log"
    w = wire(["--", *upstream], {"UPSTREAM_LOG": str(log)})
    w.start()
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask"}})
    asked = w.wait_for(lambda m: m.get("method") == "roots/list")
    w.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "unask"}})
    cancelled = w.wait_for(lambda m: m.get("method") == "notifications/cancelled")
    assert cancelled["params"]["requestId"] == asked["id"]
    w.send({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": asked["params"]["_meta"]["progressToken"],
                       "progress": 1}})
    assert text(w.call(3, "tools/call", {"name": "echo"})) == "ran echo null"
    assert "notifications/progress" not in log.read_text()  # (it logs each line it reads)
    w.proc.kill()


def test_a_client_answer_without_a_result_or_an_error_goes_to_the_upstream_that_asked(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """The client's `{"jsonrpc":"2.0","id":N}` to an upstream's request (N: the proxy's own
    id) was answered to the client, "no method" under N, which is in the client's own ids:
    its request 1, the call that made the upstream ask, got that error; and the upstream's
    request was never answered. The upstream now gets the error, the client nothing."""
    log = tmp_path / "up.log"
    w = wire(["--", *upstream], {"UPSTREAM_LOG": str(log)})
    w.start()
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask"}})
    asked = w.wait_for(lambda m: m.get("method") == "roots/list")
    assert asked["id"] == 1  # (the proxy numbers its requests to the client from 1 too)
    w.send({"jsonrpc": "2.0", "id": asked["id"]})
    assert w.call(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert w.seen == []  # nothing under the client's id 1
    answered = _logged(log, '"q1"')
    assert [m["error"]["code"] for m in answered] == [rpc.INTERNAL_ERROR]
    assert "neither a result nor an error" in answered[0]["error"]["message"]
    w.proc.kill()


def test_a_client_answer_that_is_not_json_rpc_still_answers_the_upstream_that_asked(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """A client's answer the proxy cannot read (not UTF-8) got the client its parse error,
    and the upstream's request waited for ever; it gets an error now, as a call does
    whose upstream answers so."""
    log = tmp_path / "up.log"
    w = wire(["--", *upstream], {"UPSTREAM_LOG": str(log)})
    w.start()
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask"}})
    asked = w.wait_for(lambda m: m.get("method") == "roots/list")
    w.send(b'{"jsonrpc":"2.0","id":%d,"result":{"roots":[{"uri":"file:///caf\xe9"}]}}\n'
           % asked["id"])
    assert w.wait_for(lambda m: "id" in m)["error"]["code"] == rpc.PARSE_ERROR
    answered = _logged(log, '"q1"')
    assert [m["error"]["code"] for m in answered] == [rpc.INTERNAL_ERROR]
    assert "not UTF-8" in answered[0]["error"]["message"]
    w.proc.kill()


@pytest.mark.parametrize("several", [False, True], ids=["one", "servers"])
def test_a_client_that_closes_its_input_gets_every_answer(
        tmp_path: Path, upstream: list[str], several: bool) -> None:
    """Requests written all at once and the input closed at once (a script piping them):
    each is answered, held ones and calls in flight too, then the proxy exits 0. Before,
    it ended at the end of its input and answered nothing, not even initialize."""
    args = ["--servers", servers(tmp_path, upstream, "a")] if several else ["--", *upstream]
    echo = "a__echo" if several else "echo"
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": echo, "arguments": {"n": 1}}},
             {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "search_tools", "arguments": {"query": "echo"}}}]
    run = subprocess.run(
        [sys.executable, "-m", "caveman_batch", "proxy", "--deferred", "--no-embed",
         "--store", "memory://", *args],
        input=b"".join(json.dumps(m).encode() + b"\n" for m in lines), capture_output=True,
        timeout=60, env={**os.environ, "CAVEMAN_ALLOW_MEMORY_STORE": "1"})
    answers = {m["id"]: m for m in map(json.loads, run.stdout.splitlines()) if "id" in m}
    assert sorted(answers) == [0, 1, 2, 3], run.stderr.decode()
    assert text(answers[2]) == 'ran echo {"n": 1}'
    assert echo in text(answers[3])
    assert run.returncode == 0 and b"exited with status" not in run.stderr, run.stderr


def _servers_file(tmp_path: Path, upstream: list[str], envs: dict[str, dict[str, str]]) -> str:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {
        name: {"command": upstream[0], "args": upstream[1:], "env": env}
        for name, env in envs.items()}}))
    return str(path)


HOSTILE_TOOLS = json.dumps([{"name": n, "description": f"The {n} tool.",
                             "inputSchema": {"type": "object"}}
                            for n in ("echo", "orphan", "closeout", "die")])


def test_an_upstream_whose_child_keeps_its_output_open_is_seen_to_exit(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """It exits, but a child of its (a wrapper's) holds its stdout: its call fails once it
    has exited, rather than waiting for the child; the other server carries on."""
    w = wire(["--servers", _servers_file(tmp_path, upstream, {
        "a": {"TOOLS": HOSTILE_TOOLS}, "b": {}})])
    w.start()
    failed = w.call(1, "tools/call", {"name": "a__orphan", "arguments": {}})
    assert failed["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE
    assert "'a' exited (status 9)" in failed["error"]["message"]
    assert text(w.call(2, "tools/call", {"name": "b__echo", "arguments": {}})) == "ran echo {}"
    assert w.close()[0] == 0


def test_an_upstream_that_lingers_after_closing_its_output_holds_up_no_one(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """It closes its stdout and ignores SIGTERM: it is stopped by a thread of its own, while
    ping and the other server answer (the dispatcher waited 4-6 s for it to exit)."""
    w = wire(["--servers", _servers_file(tmp_path, upstream, {
        "a": {"TOOLS": HOSTILE_TOOLS}, "b": {}})])
    w.start()
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "a__closeout", "arguments": {}}})
    failed = w.answer(1)
    assert "'a' closed its output" in failed["error"]["message"]
    began = time.monotonic()
    assert w.call(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert text(w.call(3, "tools/call", {"name": "b__echo", "arguments": {}})) == "ran echo {}"
    assert time.monotonic() - began < 1.5  # (the old wait: 2 s, then 2 s after SIGTERM)
    code, err = w.close()
    assert code == 0 and "'a' closed its output (still running: it is being stopped)" in err


def test_upstreams_that_ignore_their_end_of_input_are_stopped_side_by_side(
        tmp_path: Path, upstream: list[str]) -> None:
    """Three servers that linger after their stdin closes: each gets SIGTERM after the one
    grace period they share (5 s; one after another it was 15 s)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "caveman_batch", "proxy", "--deferred", "--no-embed",
         "--servers", _servers_file(tmp_path, upstream, {n: {"DEAF": "eof"} for n in "abc"})],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    began = time.monotonic()
    _, err = proc.communicate(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                          "params": INIT}).encode() + b"\n", timeout=30)
    assert proc.returncode == 0, err
    assert time.monotonic() - began < 10


@pytest.mark.parametrize(("signum", "deaf"), [(signal.SIGTERM, "term"), (signal.SIGINT, "int")],
                         ids=["term", "int"])
def test_a_signal_ends_the_proxy_even_if_an_upstream_ignores_it(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire], signum: int,
        deaf: str) -> None:
    """The signal goes to every upstream; one that ignores it is stopped 5 s later (the
    proxy waited for it for ever), and the proxy exits 128+N. Not waited for again on its
    end of file: after a SIGTERM it is killed at once, after a SIGINT sent SIGTERM, which
    it heeds (it took 15 s, as if it had never been signalled)."""
    w = wire(["--servers", _servers_file(tmp_path, upstream, {"a": {"DEAF": deaf}, "b": {}})])
    w.start()
    assert text(w.call(1, "tools/call", {"name": "b__echo", "arguments": {}})) == "ran echo {}"
    began = time.monotonic()
    w.proc.send_signal(signum)
    assert w.proc.wait(30) == 128 + signum
    assert time.monotonic() - began < 9


SIGNAL_IN_THE_QUEUES_LOCK = r"""
import queue, signal, sys
from caveman_batch import deferred
from caveman_batch.upstreams import MAX_EVENTS
events = queue.Queue(MAX_EVENTS)
proxy = deferred.DeferredProxy([], None, deferred.Settings(single=False), events, 1, sys.stderr)
restore = deferred._forward_signals(proxy)
with events.mutex:  # where the dispatcher is between a get's lock and its wait
    signal.raise_signal(signal.SIGTERM)
proxy.loop()
restore()
print(proxy.status)
"""


def test_a_signal_that_comes_inside_the_event_queues_lock_still_ends_the_proxy() -> None:
    """The handler runs in the dispatcher's thread, wherever it is: inside the queue's
    lock too, which the handler took again to post its wake-up: the proxy hung for good,
    deaf to every later signal (SIGKILL alone ended it)."""
    done = subprocess.run([sys.executable, "-c", SIGNAL_IN_THE_QUEUES_LOCK],
                          capture_output=True, text=True, timeout=WAIT)
    assert (done.returncode, done.stdout) == (0, f"{128 + signal.SIGTERM}\n"), done.stderr


@pytest.mark.parametrize("unbuffered", ["1", None], ids=["unbuffered", "buffered"])
def test_an_upstream_dying_while_stderr_is_gone_takes_no_one_down(
        tmp_path: Path, upstream: list[str], monkeypatch: pytest.MonkeyPatch,
        unbuffered: str | None) -> None:
    """The proxy's stderr is a pipe no one reads (closed): a warning cannot be written, and
    the client is still served (the BrokenPipeError ended the proxy), and the exit is 0
    (buffered, the interpreter's own flush of stderr at exit failed: exit 120)."""
    if unbuffered is None:
        monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    else:
        monkeypatch.setenv("PYTHONUNBUFFERED", unbuffered)
    read_end, write_end = os.pipe()
    os.close(read_end)
    w = Wire(["--servers", _servers_file(tmp_path, upstream, {"a": {"TOOLS": HOSTILE_TOOLS},
                                                              "b": {}})], stderr=write_end)
    os.close(write_end)
    try:
        w.start()
        assert w.call(1, "tools/call", {"name": "a__die", "arguments": {}})["error"]["code"] \
            == rpc.UPSTREAM_UNAVAILABLE
        assert text(w.call(2, "tools/call", {"name": "b__echo", "arguments": {}})) == \
            "ran echo {}"
        assert w.proc.stdin is not None
        w.proc.stdin.close()
        assert w.proc.wait(30) == 0
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


@pytest.mark.parametrize("result", ['"x"', "{}", "null"])
def test_a_tools_list_result_without_a_list_of_tools_is_named(
        upstream: list[str], wire: Callable[..., Wire], result: str) -> None:
    w = wire(["--", *upstream], {"TOOLS": result})
    w.start()
    listed = w.call(1, "tools/list")["result"]["tools"]
    assert [t["name"] for t in listed] == ["search_tools", "call_tool"]
    code, err = w.close()
    assert "upstream 'upstream' tools/list answered a result without a list of tools" in err


# -- an upstream's unreadable answer --------------------------------------------------------


@pytest.mark.parametrize("tool, reason, warning", [
    ("latin1", "not UTF-8", "wrote a line that is not JSON-RPC (not UTF-8"),
    # `{"jsonrpc":"2.0","id":7}`, a response that is neither, was dropped unread and the
    # call it answers waited for ever (as the client did)
    ("bare", "neither a result nor an error", "neither a result nor an error"),
])
def test_an_answer_the_proxy_cannot_forward_is_answered_with_an_error(
        upstream: list[str], wire: Callable[..., Wire], tool: str, reason: str,
        warning: str) -> None:
    w = wire(["--", *upstream])
    w.start()
    direct = w.call(1, "tools/call", {"name": tool, "arguments": {}})
    assert direct["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE
    assert "upstream 'upstream'" in direct["error"]["message"]
    assert reason in direct["error"]["message"]
    via = w.call(2, "tools/call", {"name": "call_tool", "arguments": {"name": tool}})
    assert via["result"]["isError"] is True
    assert "upstream 'upstream'" in text(via) and reason in text(via)
    assert text(w.call(3, "tools/call", {"name": "echo"})) == "ran echo null"  # still serving
    code, err = w.close()
    assert code == 0 and warning in err


@pytest.mark.parametrize("capabilities", ['[1, 2]', '"tools"', "7"])
def test_capabilities_that_are_not_an_object_still_answer_the_initialize(
        upstream: list[str], wire: Callable[..., Wire], capabilities: str) -> None:
    """One upstream's capabilities are the client's, with tools.listChanged set: read as
    an object, a list or a string of them raised, and the client's initialize was never
    answered."""
    w = wire(["--", *upstream], {"CAPABILITIES": capabilities})
    assert w.start()["result"]["capabilities"] == {"tools": {"listChanged": True}}
    assert text(w.call(1, "tools/call", {"name": "echo"})) == "ran echo null"
    assert w.close()[0] == 0


# -- an upstream tool named like one of the proxy's --------------------------------------------


def test_an_upstream_tool_named_like_a_proxy_tool_keeps_its_name(
        upstream: list[str], wire: Callable[..., Wire]) -> None:
    tools = [{"name": name, "description": f"The tracker's own {name}, by keyword.",
              "inputSchema": {"type": "object"}} for name in ("search_tools", "call_tool")]
    w = wire(["--", *upstream], {"TOOLS": json.dumps(tools)})
    w.start()
    listed = [t["name"] for t in w.call(1, "tools/list")["result"]["tools"]]
    assert listed == ["search_tools_proxy", "call_tool_proxy"]
    direct = w.call(2, "tools/call", {"name": "search_tools", "arguments": {"keyword": "bug"}})
    assert text(direct) == 'ran search_tools {"keyword": "bug"}'  # the upstream's, unchanged
    assert text(w.call(3, "tools/call", {"name": "call_tool"})) == "ran call_tool null"
    found = w.call(4, "tools/call", {"name": "search_tools_proxy", "arguments": {
        "query": "tracker keyword search", "limit": 1}})
    assert [t["name"] for t in json.loads(text(found))] == ["search_tools"]
    via = w.call(5, "tools/call", {"name": "call_tool_proxy", "arguments": {
        "name": "search_tools", "arguments": {"keyword": "x"}}})
    assert text(via) == 'ran search_tools {"keyword": "x"}'
    listed = [t["name"] for t in w.call(6, "tools/list")["result"]["tools"]]
    assert listed == ["search_tools_proxy", "call_tool_proxy", "search_tools"]  # once
    code, err = w.close()
    assert code == 0 and "the proxy's own is 'search_tools_proxy'" in err


def test_free_name() -> None:
    assert deferred.free_name("call_tool", {"echo"}) == "call_tool"
    taken = {"call_tool", "call_tool_proxy", "call_tool_proxy_2"}
    assert deferred.free_name("call_tool", taken) == "call_tool_proxy_3"


# -- an initialize every upstream refuses ------------------------------------------------------


@pytest.mark.parametrize("several", [False, True], ids=["one", "servers"])
def test_an_initialize_every_upstream_refuses_is_refused_and_may_be_retried(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire], several: bool) -> None:
    args = ["--servers", servers(tmp_path, upstream, "a", "b")] if several else ["--", *upstream]
    w = wire(args)
    w.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
    w.send({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})  # held behind it
    refused = w.answer(0)
    assert refused["error"] == {"code": -32602, "message": "no protocolVersion"}  # the upstream's
    assert w.answer(9)["error"]["code"] == rpc.INVALID_REQUEST  # answered, not left waiting
    init = w.start()
    assert init["result"]["protocolVersion"] == "2025-06-18"
    echo = "a__echo" if several else "echo"
    assert text(w.call(1, "tools/call", {"name": echo, "arguments": {}})) == "ran echo {}"
    code, err = w.close()
    assert code == 0 and "refused initialize: no protocolVersion" in err


@pytest.mark.parametrize("version", ["1.0", "0.1.0", ""])
def test_a_version_that_is_no_date_does_not_take_the_others_answer(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire], version: str) -> None:
    """The proxy answers with the oldest version its upstreams gave, dated versions sorting
    as dates; one that is no date sorted before them all, and the client, which knows dated
    versions alone (both SDKs refuse another), refused every server for that one."""
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {
        "a": {"command": upstream[0], "args": upstream[1:]},
        "b": {"command": upstream[0], "args": upstream[1:], "env": {"VERSION": version}},
        "c": {"command": upstream[0], "args": upstream[1:], "env": {"VERSION": "2024-11-05"}}}}))
    w = wire(["--servers", str(path)])
    assert w.start()["result"]["protocolVersion"] == "2024-11-05"
    assert text(w.call(1, "tools/call", {"name": "b__echo", "arguments": {}})) == "ran echo {}"
    code, err = w.close()
    assert code == 0 and "Traceback" not in err, err


# -- one tool the catalog reader cannot read -----------------------------------------------------

GOOD = [{"name": f"tool{i}", "description": f"Does thing {i}.", "inputSchema": {"type": "object"}}
        for i in range(3)]


@pytest.mark.parametrize("compressed", [True, False])
def test_a_tool_with_a_lone_surrogate_is_served_as_written(compressed: bool) -> None:
    """An escape no UTF-8 can hold (\\ud83d, an emoji cut in half): the tool is searchable
    (U+FFFD in its search text) and listed with its bytes as written, as the bulk index has it."""
    odd = '{"name": "odd", "description": "cut mid-emoji \\ud83d", "inputSchema": {"type": "object"}}'
    good = json.dumps(GOOD)
    page = ('{"tools": ' + good[:1] + odd + ", " + good[1:] + "}").encode()
    catalog = deferred.build_catalog("s", "", [page], compressed=compressed,
                                     options=Options(count_tokens=False))
    assert list(catalog.tools) == ["odd", "tool0", "tool1", "tool2"] and not catalog.left_out
    assert "\\ud83d" in catalog.tools["odd"].definition and json.loads(catalog.tools["odd"].definition)


@pytest.mark.parametrize("bad", [
    '{"name": "odd", "inputSchema": {"type": "object", "properties": {"n": {"default": NaN}}}}',
], ids=["NaN"])
@pytest.mark.parametrize("compressed", [True, False])
def test_one_bad_tool_leaves_out_only_itself(bad: str, compressed: bool) -> None:
    good = json.dumps(GOOD)
    page = ('{"tools": ' + good[:1] + bad + ", " + good[1:] + "}").encode()
    catalog = deferred.build_catalog("s", "", [page], compressed=compressed,
                                     options=Options(count_tokens=False))
    assert list(catalog.tools) == ["tool0", "tool1", "tool2"] and catalog.left_out == ["odd"]
    assert [d.name for d in catalog.docs] == ["tool0", "tool1", "tool2"]
    if compressed:  # each handle names the tool's original bytes as they were in the page
        assert [p.handle for p in catalog.originals] == [
            "ccr_" + hashlib.sha256(json.dumps(t).encode()).hexdigest() for t in GOOD]


def test_one_bad_tool_is_named_and_the_others_serve(
        upstream: list[str], wire: Callable[..., Wire]) -> None:
    tools = json.dumps([
        {"name": "create_issue", "description": "Create an issue in the tracker.",
         "inputSchema": {"type": "object"}},
        {"name": "list_issues", "description": "List the open issues of the tracker.",
         "inputSchema": {"type": "object"}}])
    tools = tools[:-1] + (', {"name": "close_issue", "description": "Close an issue.", "inputSchema":'
                          ' {"type": "object", "properties": {"n": {"default": NaN}}}}]')
    w = wire(["--always", "list_issues", "--", *upstream], {"TOOLS": tools})
    w.start()
    found = text(w.call(1, "tools/call", {"name": "search_tools", "arguments": {
        "query": "create an issue in the tracker", "limit": 1}}))
    assert found.startswith("[") and [t["name"] for t in json.loads(found)] == ["create_issue"]
    listed = [t["name"] for t in w.call(2, "tools/list")["result"]["tools"]]
    assert listed == ["search_tools", "call_tool", "list_issues", "create_issue"]
    assert text(w.call(3, "tools/call", {"name": "close_issue"})) == "ran close_issue null"
    code, err = w.close()
    assert code == 0 and "upstream 'upstream': tool 'close_issue' cannot be read" in err


DOUBLED = ('{"name": "odd", "description": "Reads a value twice typed.", "inputSchema": '
           '{"type": "object", "properties": {"a": {"type": "string", "type": "number"}}}}')


@pytest.mark.parametrize("compressed", [True, False])
def test_a_key_given_twice_inside_a_tool_keeps_every_tool(compressed: bool) -> None:
    """The compressor passes such a page through: its tools are listed as written, the
    odd one too, renamed by splicing its name (parsing it raised, and the whole server's
    tools were lost)."""
    good = json.dumps(GOOD)
    page = ('{"tools": ' + good[:1] + DOUBLED + ", " + good[1:] + "}").encode()
    catalog = deferred.build_catalog("s", "s__", [page], compressed=compressed,
                                     options=Options(count_tokens=False))
    assert list(catalog.tools) == ["odd", "tool0", "tool1", "tool2"] and not catalog.left_out
    assert catalog.tools["odd"].definition == DOUBLED.replace('"odd"', '"s__odd"')
    twice = '{"name": "a", "name": "b", "inputSchema": {"type": "object"}}'
    page = ('{"tools": ' + good[:1] + twice + ", " + good[1:] + "}").encode()
    catalog = deferred.build_catalog("s", "s__", [page], compressed=compressed,
                                     options=Options(count_tokens=False))
    assert list(catalog.tools) == ["tool0", "tool1", "tool2"] and catalog.left_out == ["b"]


def test_a_server_with_a_key_given_twice_in_a_tool_serves_at_once(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """Its tools join the search as soon as it lists them, beside the other server's; before,
    the proxy's internal error left it unlisted, and every held request waited 60 s."""
    tools = json.dumps(GOOD)
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {
        "a": {"command": upstream[0], "args": upstream[1:],
              "env": {"TOOLS": tools[:1] + DOUBLED + ", " + tools[1:]}},
        "b": {"command": upstream[0], "args": upstream[1:]}}}))
    w = wire(["--servers", str(path)])
    w.start()
    found = json.loads(text(w.call(1, "tools/call", {"name": "search_tools", "arguments": {
        "query": "reads a value twice typed", "limit": 1}})))
    assert [t["name"] for t in found] == ["a__odd"]
    assert text(w.call(2, "tools/call", {"name": "a__odd", "arguments": {"a": 1}})) == \
        'ran odd {"a": 1}'
    assert text(w.call(3, "tools/call", {"name": "b__echo", "arguments": {}})) == "ran echo {}"
    code, err = w.close()
    assert code == 0 and "internal error" not in err, err


# -- a client's hostile lines -------------------------------------------------------------------


def test_what_is_not_a_request_gets_json_rpc_codes(scripted: list[str],
                                                   wire: Callable[..., Wire]) -> None:
    w = wire(["--", *scripted])
    w.start()
    for line, code in [
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', rpc.INVALID_REQUEST),  # a batch
        (b"[]", rpc.INVALID_REQUEST), (b"42", rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":[2],"method":"tools/call","params":{"name":"echo"}}',
         rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":18,"id":19,"method":"ping"}', rpc.INVALID_REQUEST),
        (b"not json", rpc.PARSE_ERROR), (b'{"jsonrpc":"2.0","id":3', rpc.PARSE_ERROR),
    ]:
        w.send(line + b"\n")
        # an id that is not one, or none read: JSON-RPC answers under null
        answer = w.wait_for(lambda m: "id" in m and "method" not in m)
        assert answer["id"] is None and answer["error"]["code"] == code, line
    assert w.call(5, "ping") == {"jsonrpc": "2.0", "id": 5, "result": {}}
    assert w.close()[0] == 0
    assert w.seen == []  # nothing else answered


@pytest.fixture
def scripted(tmp_path: Path) -> list[str]:
    path = tmp_path / "scripted_server.py"
    path.write_text(SCRIPTED)
    return [sys.executable, str(path)]


# -- a client that initializes late ---------------------------------------------------------------


def test_the_startup_deadline_runs_from_the_clients_initialize(
        tmp_path: Path, upstream: list[str]) -> None:
    client_in, proxy_in = os.pipe()
    proxy_out, client_out = os.pipe()
    settings = deferred.Settings(single=True, startup_timeout=1.0, embed=False)
    status: list[int] = []
    err = tmp_path / "err.txt"

    def serve() -> None:
        with err.open("w") as stream:
            status.append(deferred.run([ServerSpec("upstream", tuple(upstream))], None, settings,
                                       stdin_fd=client_in, stdout_fd=client_out, err=stream))

    thread = threading.Thread(target=serve)
    thread.start()
    # the client comes later than the timeout after the start; the upstream, idle by then,
    # has the whole second from the initialize to answer it
    time.sleep(1.3)
    with os.fdopen(proxy_in, "wb", buffering=0) as to_proxy, os.fdopen(proxy_out, "rb") as reader:
        to_proxy.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                   "params": INIT}).encode() + b"\n")
        ready = select.select([reader], [], [], WAIT)[0]
        answer = json.loads(reader.readline()) if ready else None
    thread.join(WAIT)
    os.close(client_in)
    os.close(client_out)
    assert answer is not None and answer["result"]["serverInfo"]["name"] == "up"
    assert status == [0] and "did not list its tools" not in err.read_text()


UNSERVABLE = {  # tools an SDK client refuses in a tools/list (MCP's Tool), with why
    "no_schema": ({"name": "no_schema", "description": "Has none."}, "has no inputSchema object"),
    "null_schema": ({"name": "null_schema", "inputSchema": None}, "has no inputSchema object"),
    "text_schema": ({"name": "text_schema", "inputSchema": "object"}, "has no inputSchema object"),
    "number_description": ({"name": "number_description", "description": 42,
                            "inputSchema": {"type": "object"}}, "has a description that is not"),
    "list_title": ({"name": "list_title", "title": ["x"], "inputSchema": {"type": "object"}},
                   "has a title that is not a string"),
    "text_output": ({"name": "text_output", "inputSchema": {"type": "object"},
                     "outputSchema": "x"}, "has an outputSchema that is not an object"),
    "list_annotations": ({"name": "list_annotations", "inputSchema": {"type": "object"},
                          "annotations": []}, "has an annotations that is not an object"),
    "untyped_schema": ({"name": "untyped_schema", "inputSchema": {"properties": {}}},
                       'has an inputSchema whose type is not "object"'),
    "maybe_hint": ({"name": "maybe_hint", "inputSchema": {"type": "object"},
                    "annotations": {"readOnlyHint": "maybe"}}, "has an annotations readOnlyHint"),
    "number_note_title": ({"name": "number_note_title", "inputSchema": {"type": "object"},
                           "annotations": {"title": 5}}, "has an annotations title"),
    "text_meta": ({"name": "text_meta", "inputSchema": {"type": "object"}, "_meta": "x"},
                  "has an _meta that is not an object"),
    "text_icons": ({"name": "text_icons", "inputSchema": {"type": "object"}, "icons": "x"},
                   "has icons that are not"),
    "icon_without_src": ({"name": "icon_without_src", "inputSchema": {"type": "object"},
                          "icons": [{"foo": 1}]}, "has icons that are not"),
    "text_execution": ({"name": "text_execution", "inputSchema": {"type": "object"},
                        "execution": "x"}, "has an execution that is not an object"),
}


@pytest.mark.parametrize("compressed", [True, False])
def test_a_tool_a_client_would_refuse_is_left_out_with_why(compressed: bool) -> None:
    """The SDKs validate a tools/list whole: one such tool found by a search and listed made
    the client refuse every server's tools and the proxy's own (a helper's hunt)."""
    accepted = [  # (what the SDKs take: none, null, extra keys, unknown annotations)
        {"name": "null_description", "description": None, "inputSchema": {"type": "object"}},
        {"name": "rich", "title": "Rich", "inputSchema": {"type": "object", "$defs": {}},
         "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True, "x": 1},
         "_meta": {"k": "v"}, "icons": [{"src": "https://x/i.png", "sizes": ["48x48"]}],
         "execution": {}, "other": [1]}]
    tools = [GOOD[0], *(tool for tool, _ in UNSERVABLE.values()), GOOD[1], *accepted]
    catalog = deferred.build_catalog("s", "", [json.dumps({"tools": tools}).encode()],
                                     compressed=compressed, options=Options(count_tokens=False))
    assert list(catalog.tools) == ["tool0", "tool1", "null_description", "rich"]
    assert catalog.left_out == list(UNSERVABLE)
    for name, (_, why) in UNSERVABLE.items():
        assert catalog.why[name].startswith(why), name


def test_a_tool_a_client_would_refuse_takes_no_other_tool_down(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    bad = json.dumps([
        {"name": "create_issue", "description": "Create an issue in the tracker."},
        {"name": "list_issues", "description": "List the open issues of the tracker.",
         "inputSchema": {"type": "object"}}])
    w = wire(["--servers", _servers_file(tmp_path, upstream, {"a": {}, "b": {"TOOLS": bad}})])
    w.start()
    found = text(w.call(1, "tools/call", {"name": "search_tools", "arguments": {
        "query": "an issue in the tracker echo", "limit": 5}}))
    assert sorted(t["name"] for t in json.loads(found)) == ["a__echo", "b__list_issues"]
    listed = [t["name"] for t in w.call(2, "tools/list")["result"]["tools"]]
    assert sorted(listed) == ["a__echo", "b__list_issues", "call_tool", "search_tools"]
    assert text(w.call(3, "tools/call", {"name": "b__create_issue"})) == "ran create_issue null"
    code, err = w.close()
    assert code == 0 and ("upstream 'b': tool 'create_issue' has no inputSchema object (MCP "
                          "requires one): left out of the search and the list") in err


def test_a_search_naming_the_server_or_the_name_as_exposed_finds_its_tools(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """With several servers the client sees NAME__tool; neither NAME nor NAME__tool found a
    thing, although search_tools' own description names the servers."""
    issues = json.dumps([{"name": "create_issue", "description": "Open a new ticket.",
                          "inputSchema": {"type": "object"}}])
    clock = json.dumps([{"name": "get_current_time", "description": "The time now.",
                         "inputSchema": {"type": "object"}}])
    w = wire(["--servers", _servers_file(tmp_path, upstream, {
        "github": {"TOOLS": issues}, "time": {"TOOLS": clock}})])
    w.start()
    for rid, (query, wanted) in enumerate([("github", "github__create_issue"),
                                           ("github__create_issue", "github__create_issue"),
                                           ("time__get_current_time", "time__get_current_time")]):
        found = text(w.call(rid, "tools/call", {"name": "search_tools", "arguments": {
            "query": query, "limit": 1}}))
        assert found.startswith("[") and [t["name"] for t in json.loads(found)] == [wanted], query
    assert w.close()[0] == 0


def test_a_call_of_a_listed_upstream_waits_for_no_other_one(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """Server a never answers its tools/list: every request was held until the start's
    deadline (60 s, a client's own timeout), calls of b's tools too. A call (direct or
    through call_tool) needs only its own upstream initialized: it goes at once."""
    w = wire(["--startup-timeout", "300", "--servers", _servers_file(tmp_path, upstream, {
        "a": {"HANG": "list"}, "b": {}})])
    w.start()
    assert text(w.call(1, "tools/call", {"name": "b__echo", "arguments": {}})) == "ran echo {}"
    assert text(w.call(2, "tools/call", {"name": "call_tool", "arguments": {
        "name": "b__echo", "arguments": {"x": 1}}})) == 'ran echo {"x": 1}'
    assert text(w.call(3, "tools/call", {"name": "a__echo", "arguments": {}})) == "ran echo {}"
    assert w.close()[0] == 0


def _late(tmp_path: Path, upstream: list[str], wire: Callable[..., Wire],
          then: str = "") -> tuple[Wire, Path, Path]:
    """A proxy of a and b, whose initialize is answered once the gate file is there (then
    it dies, or refuses it, if `then` says so): past the start's deadline (1 s), b is late.
    Its input is logged."""
    log, gate = tmp_path / "b.log", tmp_path / "gate"
    w = wire(["--startup-timeout", "1", "--servers", _servers_file(tmp_path, upstream, {
        "a": {}, "b": {"INIT_GATE": str(gate), "INIT_THEN": then, "UPSTREAM_LOG": str(log)}})])
    w.start()  # answered at the deadline, b left behind
    return w, log, gate


def _methods(log: Path) -> list[str | None]:
    return [json.loads(line).get("method") for line in log.read_text().splitlines()]


@pytest.mark.parametrize("end", ["answer", "close"])
def test_a_call_of_a_late_upstream_waits_for_its_initialized(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire], end: str) -> None:
    """A call of a late upstream's tool went to it at once, before its initialize was
    answered and `initialized` sent (MCP allows a client no request but a ping then; the
    Python SDK's servers refuse one, as UPSTREAM does): it waits until then, in order, and
    a client whose input closed meanwhile still gets its answer."""
    w, log, gate = _late(tmp_path, upstream, wire)
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "b__echo", "arguments": {}}})
    w.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "call_tool", "arguments": {"name": "b__echo", "arguments": {"x": 1}}}})
    assert w.call(3, "ping")["result"] == {}  # (the proxy has read both calls)
    if end == "close":
        assert w.proc.stdin is not None
        w.proc.stdin.close()
    gate.touch()
    assert text(w.answer(1)) == "ran echo {}"
    assert text(w.answer(2)) == 'ran echo {"x": 1}'
    methods = _methods(log)
    assert methods[:2] == ["initialize", "notifications/initialized"], methods
    assert methods.count("tools/call") == 2
    code, err = w.close()
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.parametrize(("then", "said"), [("die", "exited (status 3)"),
                                            ("refuse", "refused initialize")])
def test_a_held_call_of_a_late_upstream_that_fails_is_answered_with_an_error(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire], then: str,
        said: str) -> None:
    """A late upstream that dies or refuses initialize instead: each call held for it is
    answered as a call to a dead upstream is, and none reached it."""
    w, log, gate = _late(tmp_path, upstream, wire, then)
    w.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "b__echo", "arguments": {}}})
    w.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "call_tool", "arguments": {"name": "b__echo", "arguments": {}}}})
    assert w.call(3, "ping")["result"] == {}
    gate.touch()
    direct, through = w.answer(1), w.answer(2)
    assert direct["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE, direct
    assert said in direct["error"]["message"]
    assert through["result"]["isError"] is True and said in text(through), through
    assert text(w.call(4, "tools/call", {"name": "a__echo", "arguments": {}})) == "ran echo {}"
    code, err = w.close()
    assert code == 0 and "tools/call" not in _methods(log), err


def test_a_held_call_cancelled_is_never_sent(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    w, log, gate = _late(tmp_path, upstream, wire)
    for rid in (1, 2):
        w.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": "b__echo", "arguments": {"n": rid}}})
        if rid == 1:
            w.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 1, "reason": "gave up"}})
    assert w.call(3, "ping")["result"] == {}
    gate.touch()
    assert text(w.answer(2)) == 'ran echo {"n": 2}'
    code, err = w.close()
    assert w.proc.stdout is not None
    rest = [json.loads(ln) for ln in (w.buffer + w.proc.stdout.read()).splitlines()]
    assert 1 not in [m.get("id") for m in [*w.seen, *rest]]  # (as after any cancellation)
    calls = [json.loads(ln) for ln in log.read_text().splitlines() if '"tools/call"' in ln]
    assert [c["params"]["arguments"] for c in calls] == [{"n": 2}]
    assert "notifications/cancelled" not in _methods(log)
    assert code == 0, err


def test_a_late_upstream_holds_so_many_requests_and_no_more(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """Past deferred.MAX_HELD requests held for it, the next fails at once: a client cannot
    grow the proxy's memory without end while an upstream initializes."""
    w, _, gate = _late(tmp_path, upstream, wire)
    most = deferred.MAX_HELD
    w.send(b"".join(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
        "name": "b__echo", "arguments": {}}}).encode() + b"\n" for rid in range(1, most + 2)))
    over = w.answer(most + 1)  # (before the upstream has answered a thing)
    assert over["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE
    assert "has not initialized yet" in over["error"]["message"]
    gate.touch()
    assert all(text(w.answer(rid)) == "ran echo {}" for rid in range(1, most + 1))
    assert w.close()[0] == 0


def test_the_start_of_several_servers_waits_its_own_deadline(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """--startup-timeout: a search waits for a hung upstream that long, then goes on
    without it (named), the others' tools found."""
    w = wire(["--startup-timeout", "1", "--servers", _servers_file(tmp_path, upstream, {
        "a": {"HANG": "list"}, "b": {}})])
    w.start()
    found = text(w.call(1, "tools/call", {"name": "search_tools", "arguments": {
        "query": "echo a message"}}))
    assert [t["name"] for t in json.loads(found)] == ["b__echo"]
    code, err = w.close()
    assert code == 0 and "upstream 'a' did not list its tools within 1 s" in err


def test_odd_lists_and_limits_are_said_not_dropped_in_silence(
        tmp_path: Path, upstream: list[str], wire: Callable[..., Wire]) -> None:
    """A tool listed twice is named (the first served); a limit of 5.0 is JSON Schema's
    integer 5 (it was refused); a query that matches nothing is echoed cut, not whole."""
    tools = json.dumps([
        {"name": "echo", "description": "Echo a message back.", "inputSchema": {"type": "object"}},
        {"name": "echo", "description": "Another echo.", "inputSchema": {"type": "object"}}])
    w = wire(["--", *upstream], {"TOOLS": tools})
    w.start()
    found = text(w.call(1, "tools/call", {"name": "search_tools", "arguments": {
        "query": "echo a message", "limit": 5.0}}))
    assert [(t["name"], t["description"]) for t in json.loads(found)] == [
        ("echo", "Echo a message back.")]
    none = text(w.call(2, "tools/call", {"name": "search_tools", "arguments": {
        "query": "zzzq " * 20_000}}))
    assert none.startswith("No tool matches") and len(none) < 200
    code, err = w.close()
    assert code == 0 and "tool 'echo' is listed more than once: the first is served" in err


# -- an upstream whose tools change as it runs ----------------------------------------------------

CHURNING = r'''
import json, sys
changes = 0
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        print(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "churning", "version": "1"}}}), flush=True)
    elif method == "tools/list":  # its description counts the changes so far
        print(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            {"name": "churn", "description": f"Changed {changes} times.",
             "inputSchema": {"type": "object"}}]}}), flush=True)
    elif method == "tools/call":
        changes += 1
        print(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"content": []}}), flush=True)
        print(json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
              flush=True)
'''


def test_the_originals_held_are_those_of_the_tools_listed_now(tmp_path: Path) -> None:
    """Each list of an upstream whose tools change as it runs (a count in a description)
    left every earlier list's originals in the proxy's memory, for as long as it ran."""
    script = tmp_path / "churning.py"
    script.write_text(CHURNING)
    client_in, proxy_in = os.pipe()
    proxy_out, client_out = os.pipe()
    settings = deferred.Settings(always=("churn",), single=True, embed=False)
    events: deferred.Events = queue.Queue(deferred.MAX_EVENTS)
    with open_store(f"lmdb://{tmp_path}/ccr") as store, (tmp_path / "err.txt").open("w") as err:
        servers = deferred._start([ServerSpec("up", (sys.executable, str(script)))], settings,
                                  events, err)
        proxy = deferred.DeferredProxy(servers, store, settings, events, client_out, err)
        threading.Thread(target=pump_lines, args=(client_in, None, events), daemon=True).start()
        loop = threading.Thread(target=proxy.loop)
        loop.start()
        with os.fdopen(proxy_in, "wb", buffering=0) as to_proxy, \
                os.fdopen(proxy_out, "rb") as reader:

            def send(message: dict[str, Any]) -> None:
                to_proxy.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

            def next_message() -> dict[str, Any]:
                assert select.select([reader], [], [], WAIT)[0], f"nothing within {WAIT:g} s"
                return json.loads(reader.readline())

            send({"id": 0, "method": "initialize", "params": INIT})
            assert "result" in next_message()
            send({"method": "notifications/initialized"})
            send({"id": 1, "method": "tools/list"})
            assert "result" in next_message()
            for rid in range(2, 12):  # each call changes the list: the client is told
                send({"id": rid, "method": "tools/call", "params": {"name": "churn"}})
                got = {m.get("id", m.get("method")) for m in (next_message(), next_message())}
                assert got == {rid, "notifications/tools/list_changed"}
            send({"id": 12, "method": "tools/list"})
            listed = next_message()["result"]
            assert "Changed 10 times." in json.dumps(listed)
            assert list(proxy.originals) == [listed["_meta"][META_KEY]["churn"][4:]]
        loop.join(WAIT)
    for up in servers:
        up.up.stop()
    assert not loop.is_alive()
    os.close(client_in)
    os.close(client_out)
