"""The servers behind a deferred proxy: the `--servers` file, their processes, their lines.

Each upstream is a child process (an argv list, never a shell) whose stdout is read by
its own thread, line by line, into the proxy's one event queue; with several upstreams
each one's stderr is read by another thread and written to the proxy's stderr with the
server's name in front, so whose message it is stays clear. A thread only reads and
posts: all protocol state lives in the proxy's one dispatching thread.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, TextIO

from .errors import ServersFileError, UsageError

CHUNK: Final = 1 << 16
# "__" joins a server's name to its tools' names, so a name may not hold it
SEPARATOR: Final = "__"
_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One upstream: its name, its argv and the variables set over the proxy's own."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


# -- the servers file -----------------------------------------------------------------


def read_servers(path: str | os.PathLike[str]) -> list[ServerSpec]:
    """The servers of a `{"mcpServers": {NAME: {"command", "args", "env"}}}` file, in order."""
    source = os.fspath(path)
    try:
        doc = json.loads(Path(source).read_bytes())
    except OSError as exc:
        raise ServersFileError(f"cannot read servers file {source}: {exc.strerror or exc}",
                               source) from None
    except ValueError as exc:
        raise ServersFileError(f"servers file {source} is not JSON: {exc}", source) from None
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(servers, dict):
        raise ServersFileError(f'{source}: expected {{"mcpServers": {{NAME: {{"command": ...}}}}}}',
                               source, "mcpServers")
    if not servers:
        raise ServersFileError(f"{source}: mcpServers names no server", source, "mcpServers")
    return [_spec(source, name, entry) for name, entry in servers.items()]


def _spec(source: str, name: str, entry: Any) -> ServerSpec:
    key = f"mcpServers.{name}"

    def bad(what: str, at: str = key) -> ServersFileError:
        return ServersFileError(f"{source}: {at} {what}", source, at)

    if not _NAME_RE.fullmatch(name) or SEPARATOR in name:
        raise bad(f"is not a usable server name (letters, digits, '.', '-', '_', no {SEPARATOR!r})")
    if not isinstance(entry, dict):
        raise bad("must be an object")
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        what = "is a remote server (url): only stdio servers (command) can be proxied" \
            if "url" in entry else "needs a command (a non-empty string)"
        raise bad(what)
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad("must be a list of strings", f"{key}.args")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise bad("must be an object of strings", f"{key}.env")
    return ServerSpec(name, (command, *args), dict(env))


# -- reading lines into the event queue ------------------------------------------------

# An event: (source, line) for each line read (a last line without a newline included),
# then (source, None) at end of file. The client's source is None.
Event = tuple[str | None, bytes | None]
Events = queue.SimpleQueue[Event]


def pump_lines(fd: int, source: str | None, events: Events) -> None:
    """Post every line read from `fd`, then end of file (also on a read error)."""
    partial = b""
    try:
        while chunk := os.read(fd, CHUNK):
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                events.put((source, line))
    except OSError:
        pass
    if partial:
        events.put((source, partial))
    events.put((source, None))


def start_thread(target: Any, *args: Any, name: str) -> threading.Thread:
    # daemon: a peer that keeps its pipe open must not keep the proxy alive
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def _prefix_lines(stream: IO[bytes], name: str, err: TextIO) -> None:
    """An upstream's stderr, each line behind `[name] `, so several stay apart."""
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        err.write(f"[{name}] {text}\n")
        err.flush()


# -- one upstream process ----------------------------------------------------------------


class Upstream:
    """A running upstream: write lines to it; its lines arrive as events."""

    def __init__(self, spec: ServerSpec, events: Events, err: TextIO, *,
                 prefix_stderr: bool) -> None:
        self.spec = spec
        self.name = spec.name
        # its variables over the proxy's own: what a client that spawned it would do
        env = {**os.environ, **spec.env} if spec.env else None
        try:
            self.proc = subprocess.Popen(list(spec.argv), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, bufsize=0, env=env,
                                         stderr=subprocess.PIPE if prefix_stderr else None)
        except OSError as exc:
            raise UsageError(f"cannot start the upstream {spec.name!r} ({spec.argv[0]!r}): "
                             f"{exc.strerror or exc}") from None
        assert self.proc.stdout is not None
        start_thread(pump_lines, self.proc.stdout.fileno(), self.name, events,
                     name=f"upstream-{self.name}")
        if self.proc.stderr is not None:
            start_thread(_prefix_lines, self.proc.stderr, self.name, err,
                         name=f"stderr-{self.name}")

    def send(self, data: bytes) -> bool:
        """Write one line; False if the upstream no longer reads (it is exiting)."""
        assert self.proc.stdin is not None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.proc.stdin.fileno(), view):]
        except (OSError, ValueError):  # a broken pipe, or stdin already closed
            return False
        return True

    def close_stdin(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass

    def stop(self, grace: float = 5.0) -> int:
        """Its exit status, once it has exited: closed stdin, then SIGTERM, then SIGKILL."""
        self.close_stdin()
        for ask in (None, self.proc.terminate, self.proc.kill):
            if ask is not None:
                ask()
            try:
                return self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.wait()

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
