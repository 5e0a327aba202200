"""The proxy against a scripted upstream: framing, what is rewritten, what is not, exits.

The upstream is a small Python script run with this interpreter: for each request it
reads, it writes the scripted bytes for that method (with @ID@ replaced by the
request's id as JSON), so every test states exactly which bytes the client must see.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from caveman_batch import ccr, listing
from caveman_batch.profile import profile
from caveman_batch.proxy import (
    ClientRelay,
    Pending,
    ServerRelay,
    exit_status,
    read_chunk,
    write_all,
)
from caveman_batch.store import open_store

UPSTREAM = r'''
import base64, json, os, signal, sys, time
spec = json.load(open(sys.argv[1]))
out = sys.stdout.buffer

def act(actions, rid):
    for a in actions:
        if "write" in a:
            out.write(base64.b64decode(a["write"]).replace(b"@ID@", rid))
            out.flush()
        if "err" in a:
            sys.stderr.write(a["err"]); sys.stderr.flush()
        if "sleep" in a:
            time.sleep(a["sleep"])
        if "exit" in a:
            os._exit(a["exit"])
        if "kill" in a:
            os.kill(os.getpid(), a["kill"])

act(spec.get("start", []), b"null")
for line in sys.stdin.buffer:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if isinstance(msg, dict) and "id" in msg and "method" in msg:
        act(spec["on"].get(msg["method"], []), json.dumps(msg["id"]).encode())
act(spec.get("eof", []), b"null")
'''

LONG = ("Lists the open issues of a repository, newest first, with their labels and "
        "assignees and a short excerpt of the body for each one found. It is handy for "
        "triage sessions and for weekly reports about the state of the project board. "
        "Returns at most 100 issues per page.")


def tool(name: str, description: str = LONG) -> dict[str, Any]:
    return {"name": name, "description": description,
            "inputSchema": {"type": "object", "title": f"{name}Arguments",
                            "properties": {"state": {"type": "string", "enum": ["open", "closed"],
                                                     "title": "State", "description": LONG}},
                            "required": ["state"]}}


def response(result: Any, rid: str = "@ID@") -> bytes:
    return b'{"jsonrpc":"2.0","id":' + rid.encode() + b',"result":' + json.dumps(result).encode() + b"}"


def request(rid: Any, method: str, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode() + b"\n"


def w(data: bytes) -> dict[str, str]:
    return {"write": base64.b64encode(data).decode()}


def entry_point() -> list[str]:
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


class Upstream:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.script = tmp_path / "upstream.py"
        self.script.write_text(UPSTREAM)
        self.store = f"lmdb://{tmp_path / 'ccr'}"

    def command(self, spec: dict[str, Any]) -> list[str]:
        path = self.tmp / "spec.json"
        path.write_text(json.dumps({"on": {}, **spec}))
        return [sys.executable, str(self.script), str(path)]

    def run(self, spec: dict[str, Any], client: bytes, *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        argv = [*entry_point(), "proxy", "--store", self.store, *args, "--", *self.command(spec)]
        return subprocess.run(argv, input=client, capture_output=True, timeout=60, check=False,
                              env={**os.environ, **(env or {})})

    def recover(self, handle: str) -> bytes:
        with open_store(self.store, create=False) as store:
            return ccr.recover(store, handle)


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path)


def lines(out: bytes) -> list[bytes]:
    return out.splitlines(keepends=True)


def handle_of(line: bytes) -> str:
    return json.loads(line)["result"]["_meta"][listing.META_KEY]


def check_rewritten(up: Upstream, sent: bytes, original_result: bytes) -> dict[str, Any]:
    """`sent` is a smaller rewrite whose handle recovers `original_result` exactly."""
    assert len(sent) < len(original_result)  # envelope and handle included
    doc = json.loads(sent)
    assert up.recover(handle_of(sent)) == original_result
    assert profile(json.dumps(doc["result"]).encode()) == profile(original_result)
    return doc


# -- tools/list ------------------------------------------------------------------------


def test_tools_list_is_rewritten_and_recoverable(upstream: Upstream) -> None:
    result = json.dumps({"tools": [tool("list_issues"), tool("get_issue")]}).encode()
    spec = {"on": {"tools/list": [w(b'{"jsonrpc":"2.0","id":@ID@,"result":' + result + b"}\n")]}}
    proc = upstream.run(spec, request(1, "tools/list"))
    assert proc.returncode == 0, proc.stderr
    [sent] = lines(proc.stdout)
    assert sent.startswith(b'{"jsonrpc":"2.0","id":1,"result":') and sent.endswith(b"}\n")
    doc = check_rewritten(upstream, sent, result)
    assert doc["result"]["tools"][0]["description"] != LONG  # really compressed
    assert "title" not in doc["result"]["tools"][0]["inputSchema"]


def test_pages_string_and_number_ids_crlf_and_meta(upstream: Upstream) -> None:
    page1 = json.dumps({"tools": [tool("a")], "nextCursor": "p2", "_meta": {"x": 1}}).encode()
    page2 = json.dumps({"tools": [tool("b")]}).encode()
    spec = {"eof": [
        w(b'{"jsonrpc":"2.0","id":"first","result":' + page1 + b"}\r\n"),
        w(b'{"jsonrpc":"2.0","id":2,"result":' + page2 + b"}\n"),
        w(b'{"jsonrpc":"2.0","id":"2","result":' + page2 + b"}\n"),  # nobody asked "2"
    ]}
    client = request("first", "tools/list") + request(2, "tools/list", {"cursor": "p2"})
    proc = upstream.run(spec, client)
    assert proc.returncode == 0, proc.stderr
    first, second, third = lines(proc.stdout)
    assert first.endswith(b"}\r\n") and second.endswith(b"}\n")
    doc = check_rewritten(upstream, first, page1)
    assert doc["id"] == "first" and doc["result"]["nextCursor"] == "p2"
    assert doc["result"]["_meta"]["x"] == 1
    check_rewritten(upstream, second, page2)
    assert third == b'{"jsonrpc":"2.0","id":"2","result":' + page2 + b"}\n"


def test_twenty_megabyte_line(upstream: Upstream) -> None:
    tools = [tool(f"tool_{i}", LONG + f" Variant {i}.") for i in range(26_000)]
    result = json.dumps({"tools": tools}).encode()
    assert len(result) > 20_000_000
    spec = {"on": {"tools/list": [w(b'{"jsonrpc":"2.0","id":@ID@,"result":' + result + b"}\n")]}}
    proc = upstream.run(spec, request(5, "tools/list") + request(6, "ping"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    [sent] = lines(proc.stdout)
    assert len(sent) < len(result)
    assert upstream.recover(handle_of(sent)) == result


def test_last_message_without_newline(upstream: Upstream) -> None:
    result = json.dumps({"tools": [tool("x")]}).encode()
    spec = {"on": {"tools/list": [w(b'{"jsonrpc":"2.0","id":@ID@,"result":' + result + b"}")]}}
    proc = upstream.run(spec, request(1, "tools/list"))
    assert proc.returncode == 0
    assert proc.stdout.endswith(b"}") and b"\n" not in proc.stdout
    check_rewritten(upstream, proc.stdout, result)


def test_multibyte_character_split_across_writes(upstream: Upstream) -> None:
    result = json.dumps({"tools": [tool("naïve", "Überprüft 日本語 " + LONG)]},
                        ensure_ascii=False).encode()
    line = b'{"jsonrpc":"2.0","id":@ID@,"result":' + result + b"}\n"
    cut = line.index("本".encode()) + 1  # inside the 3-byte character
    note = '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"日本"}}\n'.encode()
    ncut = note.index("日".encode()) + 2
    spec = {"on": {"tools/list": [w(line[:cut]), {"sleep": 0.2}, w(line[cut:]),
                                  w(note[:ncut]), {"sleep": 0.2}, w(note[ncut:])]}}
    proc = upstream.run(spec, request(1, "tools/list"))
    assert proc.returncode == 0
    sent, passed = lines(proc.stdout)
    assert "日本語" in json.loads(sent)["result"]["tools"][0]["description"]
    assert json.loads(sent)["result"]["tools"][0]["name"] == "naïve"
    check_rewritten(upstream, sent, result)
    assert passed == note


def test_untouched_lines_pass_byte_for_byte(upstream: Upstream) -> None:
    tools_in_call = json.dumps({"content": [], "tools": [tool("t")]}).encode()
    odd = [
        b"this is not json {\n",
        b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n',
        # a server request reusing the client's pending id, with "result" in its params
        b'{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"result":{"tools":[]}}}\n',
        b'{"jsonrpc":"2.0","id":9,"result":' + tools_in_call + b"}\n",  # tools/call holding "tools"
        b'{"jsonrpc" : "2.0", "id":3, "error":{"code":-32603,"message":"tools \\u00e9"}}\n',
    ]
    spec = {"eof": [w(b"".join(odd))]}
    client = (request(1, "tools/list") + request(9, "tools/call", {"name": "t"})
              + request(3, "tools/list") + b"not json either\n")
    proc = upstream.run(spec, client)
    assert proc.returncode == 0
    assert proc.stdout == b"".join(odd)


def test_a_line_nested_too_deep_passes_through(upstream: Upstream) -> None:
    """A result nested deeper than the JSON reader recurses, while a list is awaited, is
    forwarded as is; the proxy relays on (it crashed, exit 2, and lost every message)."""
    result = json.dumps({"tools": [tool("x")]}).encode()
    deep = b'{"jsonrpc":"2.0","result":' + b"[" * 100_000 + b"]" * 100_000 + b',"id":5}\n'
    after = b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}\n'
    spec = {"on": {"tools/list": [w(deep), w(response(json.loads(result)) + b"\n"), w(after)]}}
    proc = upstream.run(spec, request(1, "tools/list"))
    assert proc.returncode == 0, proc.stderr
    first, listed, last = lines(proc.stdout)
    assert first == deep and last == after
    check_rewritten(upstream, listed, result)


def test_error_answer_clears_the_request(upstream: Upstream) -> None:
    result = json.dumps({"tools": [tool("x")]}).encode()
    spec = {"eof": [w(b'{"jsonrpc":"2.0","id":4,"error":{"code":1,"message":"no"}}\n'),
                    w(b'{"jsonrpc":"2.0","id":4,"result":' + result + b"}\n")]}
    proc = upstream.run(spec, request(4, "tools/list"))
    # the id was answered (with an error): a second answer is not a tools/list result
    assert proc.stdout.endswith(b'{"jsonrpc":"2.0","id":4,"result":' + result + b"}\n")


def test_a_catalog_that_would_not_shrink_goes_unchanged(upstream: Upstream) -> None:
    line = b'{"jsonrpc":"2.0","id":@ID@,"result":{"tools":[{"name":"t","description":"Short."}]}}\n'
    proc = upstream.run({"on": {"tools/list": [w(line)]}}, request(1, "tools/list"))
    assert proc.stdout == line.replace(b"@ID@", b"1")


# -- prompts and resources -------------------------------------------------------------


def test_prompts_resources_and_templates(upstream: Upstream) -> None:
    prompts = json.dumps({"prompts": [{"name": "review", "description": LONG, "arguments": [
        {"name": "code", "description": LONG, "required": True},
        {"name": "style", "description": "Short one."}]}]}).encode()
    resources = json.dumps({"resources": [{"uri": "file:///a", "name": "a", "description": LONG}],
                            "nextCursor": "n"}).encode()
    templates = json.dumps({"resourceTemplates": [{"uriTemplate": "file:///{p}", "name": "t",
                                                   "description": LONG}]}).encode()
    spec = {"on": {m: [w(b'{"jsonrpc":"2.0","id":@ID@,"result":' + r + b"}\n")] for m, r in
                   [("prompts/list", prompts), ("resources/list", resources),
                    ("resources/templates/list", templates)]}}
    client = (request(1, "prompts/list") + request(2, "resources/list")
              + request(3, "resources/templates/list"))
    proc = upstream.run(spec, client, "--debug")
    assert proc.returncode == 0, proc.stderr
    p, r, t = (json.loads(x) for x in lines(proc.stdout))
    prompt = p["result"]["prompts"][0]
    assert prompt["description"] != LONG and "at most 100 issues" in prompt["description"]
    assert prompt["arguments"][0]["description"] != LONG
    assert prompt["arguments"][1] == {"name": "style", "description": "Short one."}
    assert r["result"]["nextCursor"] == "n" and r["result"]["resources"][0]["uri"] == "file:///a"
    assert t["result"]["resourceTemplates"][0]["description"] != LONG
    for doc, original in ((p, prompts), (r, resources), (t, templates)):
        assert upstream.recover(doc["result"]["_meta"][listing.META_KEY]) == original
    debug = proc.stderr.decode().splitlines()
    assert [line.split()[2] for line in debug] == ["prompts/list", "resources/list",
                                                   "resources/templates/list"]
    assert all("tokens" in line for line in debug)


def test_debug_from_the_environment(upstream: Upstream) -> None:
    result = json.dumps({"tools": [tool("x")]}).encode()
    spec = {"on": {"tools/list": [w(b'{"jsonrpc":"2.0","id":@ID@,"result":' + result + b"}\n")]}}
    proc = upstream.run(spec, request(1, "tools/list"), env={"CAVEMAN_SHRINK_DEBUG": "1"})
    [line] = proc.stderr.decode().splitlines()
    assert "tools/list" in line and "1 items" in line and "tokens" in line
    check_rewritten(upstream, proc.stdout, result)


# -- the process -----------------------------------------------------------------------


def test_store_unavailable_forwards_the_original(upstream: Upstream, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    line = b'{"jsonrpc":"2.0","id":@ID@,"result":' + json.dumps({"tools": [tool("x")]}).encode() + b"}\n"
    upstream.store = f"lmdb://{tmp_path / 'file' / 'ccr'}"
    proc = upstream.run({"on": {"tools/list": [w(line)]}}, request(1, "tools/list"))
    assert proc.returncode == 0
    assert proc.stdout == line.replace(b"@ID@", b"1")
    assert b"store unavailable" in proc.stderr


@pytest.mark.parametrize("broken", ["store", "debug"])
def test_a_stderr_that_cannot_be_written(upstream: Upstream, tmp_path: Path, broken: str) -> None:
    """The proxy's warnings (a store unavailable, --debug lines) on a stderr nobody reads
    are dropped and it serves on (it exited 1 before starting, or took the debug line's
    EPIPE for the client's and stopped: every message lost, exit 0)."""
    result = json.dumps({"tools": [tool("x")]}).encode()
    listed = response(json.loads(result)) + b"\n"
    pong = b'{"jsonrpc":"2.0","id":@ID@,"result":{}}\n'
    spec = {"on": {"tools/list": [w(listed)], "ping": [w(pong)]}}
    if broken == "store":
        (tmp_path / "file").write_text("x")
        upstream.store = f"lmdb://{tmp_path / 'file' / 'ccr'}"
    argv = [*entry_point(), "proxy", "--store", upstream.store,
            *(["--debug"] if broken == "debug" else []), "--", *upstream.command(spec)]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(argv, input=request(1, "tools/list") + request(2, "ping"),
                              stdout=subprocess.PIPE, stderr=write_end, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert proc.returncode == 0
    first, second = lines(proc.stdout)
    assert second == pong.replace(b"@ID@", b"2")
    if broken == "store":
        assert first == listed.replace(b"@ID@", b"1")
    else:
        check_rewritten(upstream, first, result)


def test_stderr_passes_through_and_exit_code_propagates(upstream: Upstream) -> None:
    proc = upstream.run({"start": [{"err": "upstream says hi\n"}], "eof": [{"exit": 3}]}, b"")
    assert proc.returncode == 3
    assert b"upstream says hi" in proc.stderr and proc.stdout == b""


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_upstream_killed_by_signal(upstream: Upstream, signum: int) -> None:
    proc = upstream.run({"eof": [{"kill": int(signum)}]}, b"")
    assert proc.returncode == 128 + signum
    assert signal.Signals(signum).name.encode() in proc.stderr


def test_signal_to_the_proxy_reaches_the_upstream(upstream: Upstream) -> None:
    argv = [*entry_point(), "proxy", "--store", upstream.store, "--",
            *upstream.command({"start": [w(b"ready\n")]})]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("deferred", [False, True], ids=["relay", "deferred"])
def test_a_mistyped_option_is_named_not_started_as_the_upstream(deferred: bool) -> None:
    """click drops the `--`, so `--deffered` read as the upstream's name: "cannot start
    the upstream '--deffered'"; it is named as an option proxy does not have (exit 1)."""
    argv = [*entry_point(), "proxy", *(["--deferred"] if deferred else []), "--stroe", "x",
            "--", sys.executable, "-c", "pass"]
    proc = subprocess.run(argv, input=b"", capture_output=True, timeout=60, check=False)
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"no such option of proxy: '--stroe'" in proc.stderr and b"--help" in proc.stderr


DEAF_UPSTREAM = ("import signal, sys, time; signal.signal(signal.{}, signal.SIG_IGN); "
                 "print('ready', flush=True); time.sleep(60)")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_signal_to_the_proxy_stops_an_upstream_that_ignores_it(upstream: Upstream,
                                                               signum: int) -> None:
    """It is stopped 5 s later (SIGKILL after a SIGTERM; SIGTERM, which it heeds, after a
    SIGINT) and the proxy exits 128+N saying so: it ran on for ever, and a client's own
    SIGKILL of the proxy then left the upstream running."""
    argv = [*entry_point(), "proxy", "--store", upstream.store, "--", sys.executable, "-c",
            DEAF_UPSTREAM.format(signal.Signals(signum).name)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        began = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum
        assert 4 < time.monotonic() - began < 9
        assert f"had not exited 5 s after the {signal.Signals(signum).name}".encode() in err
        assert b"Traceback" not in err
    finally:
        proc.kill()
        proc.wait()


def test_signal_to_the_proxy_once_the_upstream_has_exited(upstream: Upstream) -> None:
    """The upstream is gone but a child of its own holds its stdout: a signal stops the
    proxy (it was swallowed, and the proxy ran on until that child ended)."""
    argv = [*entry_point(), "proxy", "--store", upstream.store, "--",
            "sh", "-c", "sleep 60 & echo $!; exit 0"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        time.sleep(1)  # the shell has exited (and its exit is seen)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
        os.kill(child, signal.SIGKILL)


def test_non_blocking_stdin_and_stdout(upstream: Upstream) -> None:
    """Pipes the client made non-blocking (O_NONBLOCK is shared with the proxy's end): an
    empty stdin or a full stdout waits (it was a client EOF, or a BlockingIOError
    traceback with exit 2 and the rest of the output lost)."""
    big = b'{"jsonrpc":"2.0","method":"n","params":"' + b"y" * 2_000_000 + b'"}\n'
    result = json.dumps({"tools": [tool("x")]}).encode()
    spec = {"start": [w(big)], "on": {"tools/list": [w(response(json.loads(result)) + b"\n")]}}
    argv = [*entry_point(), "proxy", "--store", upstream.store, "--", *upstream.command(spec)]
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    os.set_blocking(r_in, False)
    os.set_blocking(w_out, False)
    proc = subprocess.Popen(argv, stdin=r_in, stdout=w_out, stderr=subprocess.PIPE)
    os.close(r_in)
    os.close(w_out)
    try:
        time.sleep(1.5)  # the proxy has found stdin empty and stdout full
        os.write(w_in, request(1, "tools/list"))
        os.close(w_in)
        with os.fdopen(r_out, "rb") as out:
            r_out = -1
            sent = out.read()
        assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
        if r_out >= 0:
            os.close(r_out)
    assert sent.startswith(big)
    check_rewritten(upstream, sent[len(big):], result)


def test_non_blocking_pipes_numbered_past_1023() -> None:
    """A non-blocking pipe whose descriptor is 1024 or more (a proxy with some 340 upstreams
    has such): an empty one is waited on and a full one written once it drains (select
    refused the descriptor with a ValueError, which killed the thread reading that upstream)."""
    import resource
    import threading

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"a descriptor limit of {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    r, w = os.pipe()
    high_r, high_w = os.dup2(r, 1050), os.dup2(w, 1051)
    os.close(r)
    os.close(w)
    try:
        for fd in (high_r, high_w):
            os.set_blocking(fd, False)
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(read_chunk(high_r)))
        reader.start()
        time.sleep(0.2)  # the reader waits on the empty pipe
        os.write(high_w, b"x")
        reader.join(10)
        assert got == [b"x"]
        data = b"y" * 1_000_000  # more than the pipe holds: write_all waits for it to drain
        writer = threading.Thread(target=write_all, args=(high_w, data))
        writer.start()
        read = bytearray()
        while len(read) < len(data):
            try:
                read += os.read(high_r, 1 << 16)
            except BlockingIOError:
                time.sleep(0.01)
        writer.join(10)
        assert not writer.is_alive() and bytes(read) == data
    finally:
        os.close(high_r)
        os.close(high_w)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_no_upstream_command(upstream: Upstream) -> None:
    proc = subprocess.run([*entry_point(), "proxy"], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert b"proxy needs an upstream command" in proc.stderr


def test_upstream_that_cannot_start(tmp_path: Path) -> None:
    proc = subprocess.run([*entry_point(), "proxy", "--", str(tmp_path / "nope")],
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 1 and b"cannot start the upstream" in proc.stderr


def test_exit_status() -> None:
    assert exit_status(0) == 0 and exit_status(3) == 3 and exit_status(-9) == 137


# -- the relays in process: every way a stream can be cut ------------------------------


def _relay_output(tmp_path: Path, client: bytes, server: bytes, chunk: int) -> bytes:
    pending = Pending()
    sink = tmp_path / f"sink-{chunk}"
    fd = os.open(sink, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        with open_store("memory://") as store:
            c, s = ClientRelay(null, pending), ServerRelay(fd, pending, store)
            for i in range(0, len(client), chunk):
                c.feed(client[i:i + chunk])
            c.finish()
            for i in range(0, len(server), chunk):
                s.feed(server[i:i + chunk])
            s.finish()
    finally:
        os.close(fd)
        os.close(null)
    return sink.read_bytes()


def test_any_chunking_gives_the_same_bytes(tmp_path: Path) -> None:
    result = json.dumps({"tools": [tool("é")]}, ensure_ascii=False).encode()
    client = request(1, "tools/call") + request(2, "tools/list") + request("z", "tools/list")
    server = (b'{"jsonrpc":"2.0","method":"n","params":{"x":"\xc3\xa9"}}\nnot json\n'
              + response(json.loads(result), "1") + b"\n"
              + response(json.loads(result), "2") + b"\r\n"
              + response(json.loads(result), '"z"'))
    whole = _relay_output(tmp_path, client, server, len(client) + len(server))
    out = whole.splitlines(keepends=True)
    assert out[:3] == server.splitlines(keepends=True)[:3]  # untouched, id 1 never asked
    assert out[3].endswith(b"\r\n") and not out[4].endswith(b"\n")
    assert len(out[3]) < len(server.splitlines(keepends=True)[3])
    for size in (1, 2, 3, 5, 64, 1000):
        assert _relay_output(tmp_path, client, server, size) == whole, size


def test_pending_keeps_number_and_string_ids_apart() -> None:
    pending = Pending(limit=2)
    pending.add(1, "tools/list")
    pending.add("1", "prompts/list")
    assert pending.pop(1) == "tools/list" and pending.pop("1") == "prompts/list"
    pending.add(2.0, "prompts/list")
    assert not pending.waits_for(2) and pending.pop(2.0) == "prompts/list"
    pending.add(True, "tools/list")
    assert not pending
    for i in range(5):
        pending.add(i, "tools/list")
    assert not pending.waits_for(0) and pending.waits_for(4)


def test_an_integer_id_echoed_as_text_is_answered(upstream: Upstream) -> None:
    """An upstream answering request 7 under "7" (the official SDKs take it for 7) has its
    catalog compressed; a request "7" of the client's own still takes "7" first."""
    result = json.dumps({"tools": [tool("x")]}).encode()
    spec = {"on": {"tools/list": [w(response(json.loads(result), '"7"') + b"\n")]}}
    proc = upstream.run(spec, request(7, "tools/list"))
    assert json.loads(proc.stdout)["id"] == "7"
    check_rewritten(upstream, proc.stdout, result)
    pending = Pending()
    pending.add(0, "tools/list")
    pending.add(7, "tools/list")
    pending.add("7", "prompts/list")
    assert not pending.waits_for("07") and not pending.waits_for("7.0")
    assert pending.pop("7") == "prompts/list" and pending.pop("7") == "tools/list"
    assert pending.pop("0") == "tools/list" and not pending


def test_cancelled_request_is_forgotten(tmp_path: Path) -> None:
    pending = Pending()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        relay = ClientRelay(null, pending)
        relay.feed(request(7, "tools/list"))
        assert pending.waits_for(7)
        relay.feed(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}\n')
        assert not pending
    finally:
        os.close(null)


def test_slow_reader_takes_no_memory_for_untracked_lines(tmp_path: Path) -> None:
    """Streaming (nothing awaited) never holds a line, however long."""
    relay_start = time.perf_counter()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        relay = ServerRelay(null, Pending(), None)
        for _ in range(200):
            relay.feed(b"x" * 65536)
        assert relay._parts == [] and relay._mid_line
    finally:
        os.close(null)
    assert time.perf_counter() - relay_start < 5
