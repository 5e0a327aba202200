"""upstreams.py against hostile upstreams and servers files, with real subprocesses.

An upstream that stops reading its stdin, servers-file values Popen or routing cannot
take, lines of several MB and a flood of stderr. A wait here gives up after a generous
timeout, so a proxy that froze fails its test instead of hanging the run.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from caveman_batch import rpc
from caveman_batch.errors import ServersFileError, UsageError
from caveman_batch.upstreams import (
    MAX_UNWRITTEN,
    Events,
    ServerSpec,
    Upstream,
    pump_lines,
    read_servers,
)
from test_deferred import SCRIPTED, Wire, write

WAIT = 20.0  # seconds for what takes well under one


def joined(name: str) -> bool:
    """Whether the thread called `name` has ended (or never ran), given WAIT to."""
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join(WAIT)
            return not thread.is_alive()
    return True


def drain(events: Events, source: str) -> list[bytes]:
    """The lines `source` posts, up to its end of file."""
    lines = []
    while (event := events.get(timeout=WAIT)) != (source, None):
        assert event[0] == source and event[1] is not None
        lines.append(event[1])
    return lines


# -- an upstream that stops reading ------------------------------------------------------

GATED = r'''
import os, sys
open(os.environ["GATE"], "rb").read()  # reads no stdin until the test opens the gate
sys.stdout.buffer.write(sys.stdin.buffer.read())
'''


def gated(tmp_path: Path, **limit: int) -> tuple[Upstream, Events, Path]:
    """An upstream that reads nothing until its gate (a FIFO) is opened, then echoes."""
    script, gate = tmp_path / "gated.py", tmp_path / "gate"
    script.write_text(GATED)
    os.mkfifo(gate)
    events: Events = Events()
    up = Upstream(ServerSpec("gated", (sys.executable, str(script)), {"GATE": str(gate)}),
                  events, sys.stderr, prefix_stderr=False, **limit)
    return up, events, gate


def sent_at_once(up: Upstream, lines: list[bytes]) -> list[bool]:
    """What send said of each line; fails if a send waited (old: blocked in os.write)."""
    sent: list[bool] = []
    sender = threading.Thread(target=lambda: sent.extend(up.send(line) for line in lines),
                              daemon=True)
    sender.start()
    sender.join(WAIT)
    assert not sender.is_alive(), "a send waited on an upstream that does not read"
    return sent


def open_gate(gate: Path) -> None:
    os.close(os.open(gate, os.O_WRONLY))


# each more than a pipe holds: none is written out whole while the gate is shut
A, B, C = b"a" * (2 << 20), b'{"small":1}', b"c" * (2 << 20)


def test_a_send_to_an_upstream_that_stops_reading_never_waits(tmp_path: Path) -> None:
    """Sends are queued and written in order; stdin closes after what was queued, and
    the writer thread ends with the upstream."""
    up, events, gate = gated(tmp_path)
    try:
        assert sent_at_once(up, [A + b"\n", B + b"\n", C + b"\n"]) == [True] * 3
        up.close_stdin()
        assert not up.send(b"late\n")
    finally:
        open_gate(gate)
    assert drain(events, "gated") == [A, B, C]
    assert up.stop() == 0
    assert joined("stdin-gated")


def test_a_send_beyond_the_bound_is_refused_at_once(tmp_path: Path) -> None:
    """Once more than max_unwritten bytes wait, a send fails; one within it goes out."""
    up, events, gate = gated(tmp_path, max_unwritten=3 << 20)
    try:
        # 2 MiB, 2 MiB: 4 MiB wait, more than 3, so the next is refused
        assert sent_at_once(up, [A + b"\n", C + b"\n", B + b"\n"]) == [True, True, False]
        up.close_stdin()
    finally:
        open_gate(gate)
    assert drain(events, "gated") == [A, C]
    assert up.stop() == 0


STUCK = r'''
import json, os, sys, time
def send(message):
    sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "stuck", "version": "1"}}})
    elif msg.get("method") == "tools/list":
        with open(os.environ["PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": [{"name": "echo",
              "description": "Echo a message back.", "inputSchema": {"type": "object"}}]}})
        time.sleep(600)  # alive, reading nothing more: the test kills it
'''


class TimedWire(Wire):
    """Wire, but a wait that gives up after WAIT seconds."""

    buffered = b""

    def wait_for(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for i, message in enumerate(self.seen):
            if wanted(message):
                return self.seen.pop(i)
        assert self.proc.stdout is not None
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + WAIT
        while True:
            while b"\n" not in self.buffered:
                left = deadline - time.monotonic()
                assert left > 0 and select.select([fd], [], [], left)[0], "no answer: frozen?"
                chunk = os.read(fd, 1 << 16)
                assert chunk, "the proxy ended first"
                self.buffered += chunk
            line, self.buffered = self.buffered.split(b"\n", 1)
            message = json.loads(line)
            if wanted(message):
                return message
            self.seen.append(message)


def test_a_stuck_upstream_leaves_the_others_and_ping_answered(tmp_path: Path) -> None:
    """A 1 MB call to an upstream that stopped reading; the other upstream and ping still
    answer, and the call itself fails once that upstream is gone."""
    (tmp_path / "stuck.py").write_text(STUCK)
    (tmp_path / "ok.py").write_text(SCRIPTED)
    pid_file = tmp_path / "stuck.pid"
    servers = write(tmp_path, {"mcpServers": {
        "stuck": {"command": sys.executable, "args": [str(tmp_path / "stuck.py")],
                  "env": {"PID_FILE": str(pid_file)}},
        "ok": {"command": sys.executable, "args": [str(tmp_path / "ok.py")]}}})
    wire = TimedWire(["--store", "memory://", "--no-embed", "--servers", str(servers)])
    try:
        wire.start()
        wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "stuck__echo", "arguments": {"text": "x" * (1 << 20)}}})
        echoed = wire.call(2, "tools/call", {"name": "ok__echo", "arguments": {"text": "hi"}})
        assert echoed["result"]["content"][0]["text"] == "hi"
        assert wire.call(3, "ping") == {"jsonrpc": "2.0", "id": 3, "result": {}}
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        failed = wire.wait_for(lambda m: m.get("id") == 1)
        assert failed["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE
        assert "upstream 'stuck' exited" in failed["error"]["message"]
    except BaseException:
        wire.proc.kill()  # it may be frozen: close() would wait on it
        raise
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    code, _err = wire.close()
    assert code == 0


# -- servers files --------------------------------------------------------------------------


def _server(**entry: Any) -> dict[str, Any]:
    return {"mcpServers": {"ok": {"command": "true"}, "bad": {"command": "true", **entry}}}


@pytest.mark.parametrize("doc, key", [
    (_server(env={"A=B": "1"}), "mcpServers.bad.env"),
    (_server(env={"": "1"}), "mcpServers.bad.env"),
    (_server(env={"A\0": "1"}), "mcpServers.bad.env"),
    (_server(env={"A": "1\0"}), "mcpServers.bad.env"),
    (_server(env={"A": "\ud800"}), "mcpServers.bad.env"),
    (_server(args=["a\0b"]), "mcpServers.bad.args"),
    (_server(command="tr\0ue"), "mcpServers.bad.command"),
])
def test_values_popen_cannot_take_refuse_the_file(tmp_path: Path, doc: Any, key: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(ServersFileError) as caught:
        read_servers(path)
    assert caught.value.key == key and str(path) in str(caught.value)


def test_popen_refusing_a_spec_is_a_usage_error() -> None:
    """What Popen refuses with ValueError cannot start, as a command that does not exist:
    the proxy leaves the server out (several) or says why (one), no traceback."""
    for spec in [ServerSpec("nul", (sys.executable, "a\0b")),
                 ServerSpec("envkey", (sys.executable, "-c", ""), {"A=B": "1"})]:
        with pytest.raises(UsageError, match=f"cannot start the upstream {spec.name!r}"):
            Upstream(spec, Events(), sys.stderr, prefix_stderr=False)


@pytest.mark.parametrize("text, key, words", [
    ('{"mcpServers": {"a": {"command": "x", "env": {"WHO": "1"}}, "a": {"command": "x"}}}',
     "mcpServers.a", "names the server 'a' more than once"),
    ('{"mcpServers": {"a": {"command": "x"}}, "mcpServers": {"b": {"command": "y"}}}',
     "mcpServers", "given more than once"),
    ('{"mcpServers": {"a": {"command": "x", "command": "y"}}}',
     "mcpServers.a", "gives 'command' more than once"),
    ('{"mcpServers": {"a": {"command": "x", "env": {"K": "1", "K": "2"}}}}',
     "mcpServers.a.env", "sets 'K' more than once"),
])
def test_a_name_given_twice_refuses_the_file(tmp_path: Path, text: str, key: str,
                                             words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ServersFileError, match=words) as caught:
        read_servers(path)
    assert caught.value.key == key and str(path) in str(caught.value)


@pytest.mark.parametrize("name", ["my_", "a.b_", "a__b"])
def test_a_name_routing_would_split_wrongly_is_refused(tmp_path: Path, name: str) -> None:
    """"my_" with tool "x" is exposed as "my___x", which routes to "my" and "_x"; names
    with single underscores inside, dots and dashes stay usable."""
    path = write(tmp_path, {"mcpServers": {name: {"command": "x"}}})
    with pytest.raises(ServersFileError, match="not a usable server name") as caught:
        read_servers(path)
    assert caught.value.key == f"mcpServers.{name}" and str(path) in str(caught.value)
    kept = ["a_b", "a.b-c", "x", "a_b_c.", "gh-"]
    path = write(tmp_path, {"mcpServers": {name: {"command": "x"} for name in kept}})
    assert [spec.name for spec in read_servers(path)] == kept


# -- long lines and a flood of stderr --------------------------------------------------------


def test_lines_of_several_mb_arrive_whole() -> None:
    """Lines across many reads, newlines at odd places, a last line without one."""
    pattern = bytes(b for b in range(256) if b != ord("\n"))
    big = pattern * ((6 << 20) // len(pattern))  # 6 MB: about a hundred reads
    lines = [b"first", big, b"", big[:65535], big[:65536], b"x", big[:1 << 20]]
    data = b"\n".join(lines)  # the last one without a newline
    read_end, write_end = os.pipe()

    def feed() -> None:
        view = memoryview(data)
        while view:  # in pieces no read lines up with
            view = view[os.write(write_end, view[:100_003]):]
        os.close(write_end)

    feeder = threading.Thread(target=feed)
    feeder.start()
    events: Events = Events()
    try:
        pump_lines(read_end, "up", events)
    finally:
        feeder.join(WAIT)
        os.close(read_end)
    assert drain(events, "up") == lines



def test_lines_of_a_pipe_numbered_past_1023() -> None:
    """An upstream's stdout whose descriptor is 1024 or more (a proxy with some 340
    upstreams has such), read with the writer's exit watched: its lines, then its end
    (select refused the descriptor: the reading thread died, posting no end, and the
    upstream's calls waited for ever)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"a descriptor limit of {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    r, w = os.pipe()
    read_end = os.dup2(r, 1060)
    os.close(r)
    events: Events = Events()
    try:
        os.write(w, b"one\ntwo\n")
        os.close(w)
        pump_lines(read_end, "up", events, exited=lambda: True)
    finally:
        os.close(read_end)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert drain(events, "up") == [b"one", b"two"]

CHATTY = r'''
import sys
out = sys.stderr.buffer
for i in range(20000):
    out.write(b"line %d\n" % i)
out.write(b"w" * 200000 + b"\nwindows\r\n" + "caf\xe9\n".encode() + b"bad \xff byte\n")
out.write(b"no newline at the end")
'''


def test_stderr_lines_arrive_whole_and_in_order(tmp_path: Path) -> None:
    script, log = tmp_path / "chatty.py", tmp_path / "stderr.txt"
    script.write_text(CHATTY)
    with log.open("w", encoding="utf-8") as err:
        up = Upstream(ServerSpec("chatty", (sys.executable, str(script))), Events(), err,
                      prefix_stderr=True)
        assert up.stop() == 0
        assert joined("stderr-chatty")
    expected = [f"[chatty] line {i}" for i in range(20000)] + [
        "[chatty] " + "w" * 200000, "[chatty] windows", "[chatty] caf\xe9",
        "[chatty] bad \ufffd byte", "[chatty] no newline at the end"]
    assert log.read_text(encoding="utf-8").split("\n") == [*expected, ""]


FLOOD = r'''
import sys
for i in range(100000):
    sys.stdout.buffer.write(b"x" * 1000 + b"\n")
sys.stdout.flush()
'''


def test_lines_read_and_not_handled_are_bounded(tmp_path: Path) -> None:
    """An upstream that floods while the dispatcher is behind waits (its stdout's pipe
    fills) instead of the proxy holding all it writes: the proxy's memory went past 1 GB
    when a client did not read."""
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    events: Events = Events(8)
    up = Upstream(ServerSpec("flood", (sys.executable, str(script))), events, sys.stderr,
                  prefix_stderr=False)
    try:
        time.sleep(1.0)
        assert events.qsize() == 8 and up.proc.poll() is None  # held up: 100 MB not read
        assert len(drain(events, "flood")) == 100000  # and it all comes, in order, once read
    finally:
        assert up.stop() == 0


def test_stderr_that_cannot_be_written_is_still_read(tmp_path: Path) -> None:
    """The proxy's stderr failing drops an upstream's stderr lines, and never stops
    reading them (an upstream would block on a full pipe)."""
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    closed = (tmp_path / "err.txt").open("w")
    closed.close()  # writes raise ValueError
    up = Upstream(ServerSpec("chatty", (sys.executable, str(script))), Events(), closed,
                  prefix_stderr=True)
    assert up.proc.wait(WAIT) == 0 and up.stop() == 0


def test_calls_beyond_what_a_stuck_upstream_may_hold_fail_at_once(tmp_path: Path) -> None:
    """Once more than MAX_UNWRITTEN bytes wait for an upstream that stopped reading, a call
    to it is answered at once with an error saying so (it would never be answered)."""
    (tmp_path / "stuck.py").write_text(STUCK)
    pid_file = tmp_path / "stuck.pid"
    servers = write(tmp_path, {"mcpServers": {
        "stuck": {"command": sys.executable, "args": [str(tmp_path / "stuck.py")],
                  "env": {"PID_FILE": str(pid_file)}},
        "ok": {"command": sys.executable, "args": [str(tmp_path / "stuck.py")],
               "env": {"PID_FILE": str(tmp_path / "ok.pid")}}}})
    wire = TimedWire(["--store", "memory://", "--no-embed", "--servers", str(servers)])
    big = "x" * (12 << 20)
    calls = MAX_UNWRITTEN // len(big) + 2  # the last one is refused
    try:
        wire.start()
        for n in range(1, calls + 1):
            wire.send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "stuck__echo", "arguments": {"text": big}}})
        refused = wire.wait_for(lambda m: m.get("id") == calls)
        assert refused["error"]["code"] == rpc.UPSTREAM_UNAVAILABLE
        assert "upstream 'stuck' is not reading its input" in refused["error"]["message"]
        assert wire.call(calls + 1, "ping") == {"jsonrpc": "2.0", "id": calls + 1, "result": {}}
    except BaseException:
        wire.proc.kill()
        raise
    finally:
        for pid in (pid_file, tmp_path / "ok.pid"):
            if pid.exists():
                try:
                    os.kill(int(pid.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    wire.close()


PAUSING = r'''
import json, os, sys, time
def send(message):
    sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()
def tool(name):
    return {"name": name, "description": f"The {name} tool.", "inputSchema": {"type": "object"}}
def wait(path):
    while not os.path.exists(path):
        time.sleep(0.02)
tools = [tool("echo"), tool("pause"), tool("change")]
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {"listChanged": True}},
              "serverInfo": {"name": "pausing", "version": "1"}}})
    elif msg.get("method") == "tools/list":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": tools}})
    elif msg.get("method") == "tools/call" and msg["params"]["name"] == "pause":
        wait(os.environ["GATE"] + ".1")  # reads nothing meanwhile: what is sent waits
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": "changed"}})
        wait(os.environ["GATE"] + ".2")
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": []}})
    elif msg.get("method") == "tools/call" and msg["params"]["name"] == "change":
        tools = [*tools, tool("wombat")]
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": []}})
    elif msg.get("method") == "tools/call":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": []}})
'''


def test_a_relist_an_upstream_could_not_take_does_not_stop_its_next(tmp_path: Path) -> None:
    """An upstream's list changed while it was not reading (MAX_UNWRITTEN bytes waited for
    it): the proxy's tools/list could not be sent. That failed request left the proxy
    taking a listing for in flight, so every change after it, once the upstream read
    again, waited on that one and its tools were never listed again."""
    (tmp_path / "pausing.py").write_text(PAUSING)
    gate = tmp_path / "gate"
    servers = write(tmp_path, {"mcpServers": {"a": {
        "command": sys.executable, "args": [str(tmp_path / "pausing.py")],
        "env": {"GATE": str(gate)}}}})
    wire = TimedWire(["--store", "memory://", "--no-embed", "--servers", str(servers)])
    big = "x" * (12 << 20)
    calls = MAX_UNWRITTEN // len(big) + 1  # past the bound: a send after them is refused
    try:
        wire.start()
        wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "a__pause", "arguments": {}}})
        for n in range(2, calls + 2):
            wire.send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "a__echo", "arguments": {"text": big}}})
        assert wire.call(100, "ping")["result"] == {}  # (so every call is queued)
        (tmp_path / "gate.1").touch()
        wire.wait_for(lambda m: m.get("method") == "notifications/message")
        (tmp_path / "gate.2").touch()
        for n in range(1, calls + 2):
            assert wire.wait_for(lambda m, n=n: m.get("id") == n)["result"] == {"content": []}
        assert wire.call(101, "tools/call", {"name": "a__change", "arguments": {}})["result"]
        deadline, found = time.monotonic() + WAIT, ""
        while "a__wombat" not in found and time.monotonic() < deadline:
            found = wire.call(102, "tools/call", {"name": "search_tools", "arguments": {
                "query": "wombat"}})["result"]["content"][0]["text"]
            time.sleep(0.1)
        assert "a__wombat" in found, found
    except BaseException:
        wire.proc.kill()
        raise
    code, err = wire.close()
    assert code == 0 and "Traceback" not in err, err
    assert "upstream 'a' tools/list failed: upstream 'a' is not reading its input" in err
