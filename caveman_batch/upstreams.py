"""The servers behind a deferred proxy: the `--servers` file, their processes, their lines.

Each upstream is a child process (an argv list, never a shell) whose stdout is read by
its own thread, line by line, into the proxy's one event queue; with several upstreams
each one's stderr is read by another thread and written to the proxy's stderr with the
server's name in front, so whose message it is stays clear. Its stdin is written by a
thread of its own too, from a bounded queue: an upstream that stops reading blocks that
thread, never the dispatcher. The threads only move bytes: all protocol state lives in
the proxy's one dispatching thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import select
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, TextIO

from .errors import ServersFileError, UsageError

CHUNK: Final = 1 << 16
# An upstream that stops reading holds at most this much of what was sent to it (and one
# message more); a send beyond it fails at once instead of waiting on the upstream.
MAX_UNWRITTEN: Final = 1 << 25
# "__" joins a server's name to its tools' names, so a name may not hold it, nor end in
# "_": "a_" with tool "x" and "a" with tool "_x" would both be "a___x", which is routed
# at its first "__". Without either, that first "__" is always the one that joined them.
SEPARATOR: Final = "__"
_NAME_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9.-])?")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One upstream: its name, its argv, the variables set over the proxy's own and the
    folder it starts in (None: the proxy's)."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    # why it cannot start (a ${VAR} it names is not set; a remote server): left out, named
    cannot_start: str | None = None


# -- the servers file -----------------------------------------------------------------


def read_servers(path: str | os.PathLike[str],
                 environ: Mapping[str, str] | None = None) -> list[ServerSpec]:
    """The servers of a `{"mcpServers": {NAME: {"command", "args", "env", "cwd"}}}` file, in
    order, but those marked `"disabled": true` (as clients that have the key skip them).
    `${VAR}`, `${VAR:-default}` and `${env:VAR}` in a command, an argument, a variable's
    value or a cwd are `environ`'s (the proxy's environment by default): see `expand`."""
    source = os.fspath(path)
    environ = os.environ if environ is None else environ
    try:
        doc = json.loads(Path(source).read_bytes(), object_pairs_hook=_Object)
    except OSError as exc:
        raise ServersFileError(f"cannot read servers file {source}: {exc.strerror or exc}",
                               source) from None
    except ValueError as exc:
        raise ServersFileError(f"servers file {source} is not JSON: {exc}", source) from None
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if isinstance(doc, _Object) and "mcpServers" in doc.twice:
        raise ServersFileError(f"{source}: mcpServers is given more than once", source,
                               "mcpServers")
    if not isinstance(servers, dict):
        raise ServersFileError(f'{source}: expected {{"mcpServers": {{NAME: {{"command": ...}}}}}}',
                               source, "mcpServers")
    if not servers:
        raise ServersFileError(f"{source}: mcpServers names no server", source, "mcpServers")
    if twice := _given_twice(servers):
        raise ServersFileError(f"{source}: mcpServers names the server {twice!r} more than once",
                               source, f"mcpServers.{twice}")
    specs = [_spec(source, name, entry, environ) for name, entry in servers.items()]
    enabled = [spec for spec in specs if spec is not None]
    if not enabled:
        raise ServersFileError(f"{source}: mcpServers names no server that is not disabled",
                               source, "mcpServers")
    return enabled


class _Object(dict[str, Any]):
    """A JSON object that knows the names it was given more than once: json.loads would
    keep the last silently, and a servers file's second "a" would replace its first."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.twice = [name for name, n in Counter(k for k, _ in pairs).items() if n > 1] \
            if len(self) < len(pairs) else []


def _given_twice(obj: Any) -> str | None:
    return obj.twice[0] if isinstance(obj, _Object) and obj.twice else None


def _unusable(text: str) -> bool:
    """Whether `text` cannot go into an argv or the environment: execve's strings end at
    NUL, and one that does not encode to the file system's bytes makes Popen raise."""
    try:
        return b"\0" in os.fsencode(text)
    except UnicodeError:  # a lone surrogate from a JSON escape
        return True


# ${VAR} and ${VAR:-default} as Claude Code reads them in .mcp.json, ${env:VAR} as Cursor
# and VS Code do; anything else with a $ (a $VAR, ${1}, ${input:x}) is left as written
_VARIABLE: Final = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(text: str, environ: Mapping[str, str], missing: list[str]) -> str:
    """`text` with each `${VAR}` (or `${env:VAR}`) replaced by VAR's value in `environ`,
    each `${VAR:-default}` by VAR's value if it is set and not empty, else by `default`
    (the shell's `:-`). The values are taken as they are, never expanded in turn. A
    variable that is not set and has no default is added to `missing` (and left as
    written): a server started with it would get the text `${VAR}` for a token."""

    def value(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        got = environ.get(var)
        if default is not None and not got:
            return default
        if got is None:
            missing.append(var)
            return match.group(0)
        return got

    return _VARIABLE.sub(value, text) if "${" in text else text


# a remote server's address: Claude Code's, Cursor's and VS Code's url, Windsurf's serverUrl,
# Gemini CLI's httpUrl (its url is an SSE server's)
_REMOTE_KEYS: Final = ("url", "serverUrl", "httpUrl")


def _spec(source: str, name: str, entry: Any, environ: Mapping[str, str]) -> ServerSpec | None:
    """The server of one entry; None if it is disabled. Keys other clients add and that do
    not change how the server runs (`type`, `timeout`, `autoApprove`, ...) are ignored."""
    key = f"mcpServers.{name}"

    def bad(what: str, at: str = key) -> ServersFileError:
        return ServersFileError(f"{source}: {at} {what}", source, at)

    if not _NAME_RE.fullmatch(name) or SEPARATOR in name:
        raise bad("is not a usable server name (letters, digits, '.', '-', '_', "
                  f"no {SEPARATOR!r}, not ending in '_')")
    if not isinstance(entry, dict):
        raise bad("must be an object")
    if twice := _given_twice(entry):
        raise bad(f"gives {twice!r} more than once")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise bad("must be true or false", f"{key}.disabled")
    if disabled:  # (Cline's, Roo Code's and Windsurf's key: not started, however it reads)
        return None
    command = entry.get("command")
    remote = next((k for k in _REMOTE_KEYS if isinstance(entry.get(k), str)), None)
    if "command" not in entry and remote is not None:
        # (a client's file holds these beside its stdio servers: the others still serve)
        return ServerSpec(name, (), cannot_start=(
            f"{source}: {key} is a remote server ({remote}): only stdio servers (command) can "
            'be proxied; a stdio bridge can run it ("command": "npx", "args": '
            '["mcp-remote", URL])'))
    if not isinstance(command, str) or not command:
        raise bad("needs a command (a non-empty string)")
    if _unusable(command):
        raise bad("holds a NUL or an unencodable character", f"{key}.command")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad("must be a list of strings", f"{key}.args")
    if any(map(_unusable, args)):
        raise bad("holds a NUL or an unencodable character", f"{key}.args")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise bad("must be an object of strings", f"{key}.env")
    if twice := _given_twice(env):
        raise bad(f"sets {twice!r} more than once", f"{key}.env")
    for var, value in env.items():
        if not var or "=" in var or _unusable(var) or _unusable(value):
            raise bad(f"cannot set {var!r} (a name: not empty, no '='; neither a NUL "
                      "nor an unencodable character)", f"{key}.env")
    cwd = entry.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str) or not cwd:
            raise bad("must be a non-empty string", f"{key}.cwd")
        if _unusable(cwd):
            raise bad("holds a NUL or an unencodable character", f"{key}.cwd")
    missing: dict[str, list[str]] = {}  # where -> the variables it names that are not set

    def expanded(text: str, at: str) -> str:
        unset: list[str] = []
        text = expand(text, environ, unset)
        if unset:
            missing.setdefault(at, []).extend(unset)
        if _unusable(text):  # (a NUL cannot come from the environment; a surrogate can)
            raise bad("holds an unencodable character once its variables are set", at)
        return text

    command = expanded(command, f"{key}.command")
    args = [expanded(a, f"{key}.args[{i}]") for i, a in enumerate(args)]
    env = {var: expanded(value, f"{key}.env.{var}") for var, value in env.items()}
    if cwd is not None:
        cwd = expanded(cwd, f"{key}.cwd")
        # a relative folder is the servers file's: the proxy's own is wherever its client
        # started it
        cwd = os.path.join(os.path.dirname(os.path.abspath(source)), os.path.expanduser(cwd))
    unset = "; ".join(f"{at} names {', '.join('${' + v + '}' for v in dict.fromkeys(vs))}"
                      for at, vs in missing.items())
    return ServerSpec(name, (command, *args), env, cwd,
                      f"{source}: {unset}, not set (nor given a default, ${{VAR:-default}})"
                      if unset else None)


# -- reading lines into the event queue ------------------------------------------------

# An event: (source, line) for each line read (a last line without a newline included),
# then (source, None) at end of file. The client's source is None.
Event = tuple[str | None, bytes | None]
Events = queue.Queue[Event]
# lines read and not yet handled, at most (a queue of these many): once the dispatcher is
# behind (a client that does not read what it is sent), the readers wait, and so does an
# upstream that floods, instead of the proxy's memory growing without end
MAX_EVENTS: Final = 256
# an upstream that has exited, but whose stdout a child of its keeps open (a wrapper's
# `sh -c`, npx): once nothing has come for this long it counts as gone
EXIT_GRACE: Final = 1.0
# how long a process is given to exit before the next signal that stops it (stop_signals)
STOP_GRACE: Final = 5.0


def wait_for(fd: int, event: int, timeout: float | None = None) -> bool:
    """Whether `fd` became ready for `event` (select.POLLIN, POLLOUT) or hung up within
    `timeout` seconds (None: waits until it does). By poll, not select: select refuses a
    descriptor of 1024 or more (a proxy with some 340 upstreams has such pipes), and the
    thread reading that upstream died of its ValueError, its calls never answered."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(None if timeout is None else int(timeout * 1000)))


def read_lines(fd: int, exited: Callable[[], bool] | None = None) -> Iterator[list[bytes]]:
    """The lines each read of `fd` completes (without their newlines), then a last line
    without a newline if there is one; until end of file or a read error, or (with
    `exited`) once the writer has exited and nothing has come for EXIT_GRACE: a child of
    its may hold the pipe open for ever. What it wrote before exiting is read first.

    Only each new chunk is searched and split: a line begun in earlier chunks waits in
    pieces, joined once, when its newline comes. Adding each chunk to the line so far and
    splitting the whole again took 7.3 s for a 32 MB line; this takes 0.06 s."""
    head: list[bytes] = []  # the pieces of a line not ended yet
    try:
        while True:
            if exited is not None:
                while not wait_for(fd, select.POLLIN, EXIT_GRACE):
                    if exited():
                        raise EOFError
            if not (chunk := os.read(fd, CHUNK)):
                break
            lines = chunk.split(b"\n")
            if len(lines) == 1:
                head.append(chunk)
                continue
            lines[0] = b"".join([*head, lines[0]])
            head = [lines.pop()]
            yield lines
    except (OSError, EOFError):
        pass
    if last := b"".join(head):
        yield [last]


def pump_lines(fd: int, source: str | None, events: Events,
               exited: Callable[[], bool] | None = None) -> None:
    """Post every line read from `fd`, then end of file (also on a read error; with
    `exited`, also once the writer has exited: read_lines)."""
    for lines in read_lines(fd, exited):
        for line in lines:
            events.put((source, line))
    events.put((source, None))


def start_thread(target: Any, *args: Any, name: str) -> threading.Thread:
    # daemon: a peer that keeps its pipe open must not keep the proxy alive
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def _prefix_lines(fd: int, name: str, err: TextIO) -> None:
    """An upstream's stderr, each line behind `[name] `, so several stay apart.

    Read a chunk at a time: readline on the unbuffered pipe made one read(2) a byte, and
    2 MB of stderr cost the proxy 1.2-1.4 s of CPU (0.01 s so). A chunk's lines go out
    in one write and one flush."""
    prefix = f"[{name}] "
    writable = True
    for lines in read_lines(fd):  # (read to the end even once err fails: never blocks it)
        if writable:
            texts = (raw.decode("utf-8", "replace").rstrip("\r") for raw in lines)
            try:
                err.write("".join(f"{prefix}{text}\n" for text in texts))
                err.flush()
            except (OSError, ValueError):  # the proxy's stderr is gone: the rest is dropped
                writable = False


class _Writer:
    """An upstream's stdin, written by a thread of its own from a queue, in order.

    An upstream that stops reading blocks only this thread; what waits for it is bounded
    (`limit` bytes, and one message more) so that a send to it fails at once instead. The
    thread closes the pipe and ends when asked to, once what came before is written, or
    when a write fails because the upstream is gone."""

    def __init__(self, pipe: IO[bytes], name: str, limit: int) -> None:
        self._pipe = pipe
        self._limit = limit
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # None: close
        self._lock = threading.Lock()
        self._unwritten = 0  # bytes queued or being written
        self._open = True
        start_thread(self._run, name=f"stdin-{name}")

    def put(self, data: bytes) -> bool:
        with self._lock:
            if not self._open or self._unwritten > self._limit:
                return False
            self._unwritten += len(data)
            self._queue.put(data)
        return True

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                self._queue.put(None)

    def _run(self) -> None:
        fd = self._pipe.fileno()
        try:
            while (data := self._queue.get()) is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                with self._lock:
                    self._unwritten -= len(data)
        except OSError:  # a broken pipe: it has exited
            pass
        finally:
            with self._lock:
                self._open = False
            try:
                self._pipe.close()
            except OSError:
                pass


# -- one upstream process ----------------------------------------------------------------


class Upstream:
    """A running upstream: write lines to it; its lines arrive as events."""

    def __init__(self, spec: ServerSpec, events: Events, err: TextIO, *,
                 prefix_stderr: bool, max_unwritten: int = MAX_UNWRITTEN) -> None:
        self.spec = spec
        self.name = spec.name
        # its variables over the proxy's own: what a client that spawned it would do
        env = {**os.environ, **spec.env} if spec.env else None
        if spec.cannot_start is not None:
            raise UsageError(f"cannot start the upstream {spec.name!r}: {spec.cannot_start}")
        # (Popen's error for a folder that is not there would name neither it nor the cwd)
        if spec.cwd is not None and not os.path.isdir(spec.cwd):
            raise UsageError(f"cannot start the upstream {spec.name!r}: its cwd "
                             f"{spec.cwd!r} is not a folder")
        try:
            self.proc = subprocess.Popen(list(spec.argv), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, bufsize=0, env=env,
                                         cwd=spec.cwd,
                                         stderr=subprocess.PIPE if prefix_stderr else None)
        except (OSError, ValueError) as exc:  # ValueError: a NUL, a '=' in a variable's name
            raise UsageError(f"cannot start the upstream {spec.name!r} ({spec.argv[0]!r}): "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin = _Writer(self.proc.stdin, self.name, max_unwritten)
        start_thread(pump_lines, self.proc.stdout.fileno(), self.name, events,
                     lambda: self.proc.poll() is not None, name=f"upstream-{self.name}")
        if self.proc.stderr is not None:
            start_thread(_prefix_lines, self.proc.stderr.fileno(), self.name, err,
                         name=f"stderr-{self.name}")

    def send(self, data: bytes) -> bool:
        """Queue one line to be written, never waiting; False if it will not be: the
        upstream no longer reads (it is exiting, or `max_unwritten` bytes wait for it)."""
        return self._stdin.put(data)

    def close_stdin(self) -> None:
        """Its end of file, once what was sent before is written."""
        self._stdin.close()

    def stop(self, grace: float = STOP_GRACE) -> int:
        """Its exit status, once it has exited: closed stdin, then SIGTERM, then SIGKILL."""
        return stop_all([self], grace)[0]

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.send_signal(signum)


def stop_signals(signalled: int | None = None) -> tuple[int, ...]:
    """What stops a process still running a grace after each in turn: SIGTERM, then
    SIGKILL; SIGKILL alone for one `signalled` SIGTERM already (a signal forwarded to it),
    which it ignored."""
    return ((signal.SIGKILL,) if signalled == signal.SIGTERM
            else (signal.SIGTERM, signal.SIGKILL))


def stop_all(upstreams: Sequence[Upstream], grace: float = STOP_GRACE,
             signalled: int | None = None) -> list[int]:
    """Each one's exit status once all have exited: every stdin closed, then SIGTERM to
    those still running after `grace`, then SIGKILL; the waits run side by side (one
    after another, three upstreams that ignore their end of file took 15 s).

    `signalled`: the signal each was sent a grace ago (a proxy's, forwarded), so none is
    waited for again on its end of file: SIGKILL at once after a SIGTERM, else SIGTERM
    first (an upstream that ignores the SIGTERM it was sent took 15 s to stop)."""
    for up in upstreams:
        up.close_stdin()
    for signum in ((None,) if signalled is None else ()) + stop_signals(signalled):
        running = [up for up in upstreams if up.proc.poll() is None]
        if not running:
            break
        if signum is not None:
            for up in running:
                up.signal(signum)
        deadline = time.monotonic() + grace
        for up in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                up.proc.wait(max(0.0, deadline - time.monotonic()))
    return [up.proc.wait() for up in upstreams]
