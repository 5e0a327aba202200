"""A live MCP stdio proxy: the upstream's list responses reach the client compressed.

Two relays run side by side, each a blocking read -> write loop on its own thread,
so flow control is the pipes' own: a client that stops reading stops our writes,
which stops our reads, which fills the upstream's pipe and blocks the upstream.
Nothing is queued; memory holds one read chunk plus, only while a list response is
awaited, the line being assembled.

Framing is newline-delimited JSON-RPC, split on bytes: a line is decoded only when
whole (a UTF-8 character split across reads survives), any length is fine, and a
last message without a newline is still delivered. The only lines ever changed are
successful responses to tools/list, prompts/list, resources/list and
resources/templates/list requests that the client itself sent; see `listing`.
Every original is committed to the store before the line naming its handle is
written. Anything unexpected (no store, a parse failure, a bug) sends the
original line instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from . import ccr, listing, rpc
from .catalog import Options
from .errors import StoreError, UpstreamExited, UsageError
from .store import Store, open_store
from .upstreams import STOP_GRACE, stop_signals, wait_for

CHUNK: Final = 1 << 16
# A list request is small; a longer client line is relayed but not inspected.
MAX_REQUEST_BYTES: Final = 1 << 20
# A longer response line streams through unchanged instead of being held whole.
MAX_RESPONSE_BYTES: Final = 256 << 20
MAX_PENDING: Final = 4096
_FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is out (a pipe may take less than asked), waiting while
    a non-blocking one (O_NONBLOCK set by whoever shares it with us) is full."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            wait_for(fd, select.POLLOUT)


def read_chunk(fd: int) -> bytes:
    """os.read of up to CHUNK bytes (b"" at EOF), waiting while a non-blocking fd is empty."""
    while True:
        try:
            return os.read(fd, CHUNK)
        except BlockingIOError:
            wait_for(fd, select.POLLIN)


# -- which responses to rewrite ------------------------------------------------------




@dataclass
class Pending:
    """Ids of list requests the client sent and the upstream has not answered yet."""

    limit: int = MAX_PENDING
    _methods: dict[rpc.IdKey, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __bool__(self) -> bool:
        return bool(self._methods)  # read without the lock: a stale answer only costs a parse

    def add(self, request_id: Any, method: str) -> None:
        key = rpc.id_key(request_id)
        if key is None:
            return
        with self._lock:
            self._methods.pop(key, None)
            self._methods[key] = method
            if len(self._methods) > self.limit:  # a client that never reads its answers
                del self._methods[next(iter(self._methods))]

    def waits_for(self, request_id: Any) -> bool:
        key = self._key(request_id)
        return key is not None and key in self._methods

    def pop(self, request_id: Any) -> str | None:
        with self._lock:
            key = self._key(request_id)
            return None if key is None else self._methods.pop(key, None)

    def _key(self, request_id: Any) -> rpc.IdKey | None:
        """The key a response's id answers: its own, or for an integer's decimal text
        ("7" for 7) that integer's when no request "7" waits, as the official SDKs
        correlate an id a peer echoes as a string."""
        key = rpc.id_key(request_id)
        if key is None or key in self._methods or not isinstance(request_id, str):
            return key
        number = rpc.integer_id(request_id)
        if number is not None and (int, number) in self._methods:
            return (int, number)
        return key


def _line_ending(line: bytes) -> int:
    """Length of the line ending: 2 for CRLF, 1 for LF, 0 for a last line without one."""
    if line.endswith(b"\r\n"):
        return 2
    return 1 if line.endswith(b"\n") else 0


# -- client -> upstream --------------------------------------------------------------


class ClientRelay:
    """Relays the client's bytes unchanged, noting which list requests it sends.

    A request is registered before the newline that completes it is written, so the
    upstream cannot answer a request the proxy does not know about yet.
    """

    def __init__(self, out_fd: int, pending: Pending) -> None:
        self.out_fd = out_fd
        self.pending = pending
        self._partial = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        first = chunk.find(b"\n")
        if first < 0:
            self._keep(chunk)
        else:
            self._keep(chunk[:first + 1])
            self._line_done()
            last = chunk.rfind(b"\n")
            if last > first and _maybe_interesting(chunk, first + 1, last):
                for line in chunk[first + 1:last].split(b"\n"):
                    self._inspect(line)
            self._keep(chunk[last + 1:])
        write_all(self.out_fd, chunk)

    def finish(self) -> None:
        """EOF from the client: a last request without a newline still counts."""
        self._line_done()

    def _keep(self, piece: bytes) -> None:
        if self._overflow or not piece:
            return
        if len(self._partial) + len(piece) > MAX_REQUEST_BYTES:
            self._overflow, self._partial = True, bytearray()
        else:
            self._partial += piece

    def _line_done(self) -> None:
        if self._partial and not self._overflow:
            self._inspect(bytes(self._partial))
        self._partial, self._overflow = bytearray(), False

    def _inspect(self, line: bytes) -> None:
        if b"list" not in line and b"cancelled" not in line:
            return
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method in listing.METHODS and "id" in message:
            self.pending.add(message["id"], method)
        elif method == "notifications/cancelled" and isinstance(message.get("params"), dict):
            self.pending.pop(message["params"].get("requestId"))  # may never be answered


def _maybe_interesting(chunk: bytes, start: int, end: int) -> bool:
    return chunk.find(b"list", start, end) >= 0 or chunk.find(b"cancelled", start, end) >= 0


# -- upstream -> client --------------------------------------------------------------


@dataclass
class Stats:
    rewritten: int = 0
    passed: int = 0  # tracked responses sent unchanged


class ServerRelay:
    """Relays the upstream's bytes, rewriting the list responses the client awaits.

    While no list request is pending, chunks go out as they come, unsplit (a line
    begun then cannot be a list response: its request was not sent yet). Otherwise
    lines are assembled and each is checked.
    """

    def __init__(self, out_fd: int, pending: Pending, store: Store | None, *,
                 debug: bool = False, err: TextIO | None = None) -> None:
        self.out_fd = out_fd
        self.pending = pending
        self.store = store
        self.debug = debug
        self.err = err or sys.stderr
        self.options = Options(count_tokens=debug)  # exact counts cost time: only when shown
        self.stats = Stats()
        self._parts: list[bytes] = []
        self._size = 0
        self._mid_line = False  # inside a line that streams through unchecked

    def feed(self, chunk: bytes) -> None:
        if not self._parts and not self.pending:
            self._stream(chunk)
            return
        if self._mid_line:  # first finish the line that began while nothing was awaited
            end = chunk.find(b"\n")
            if end < 0:
                write_all(self.out_fd, chunk)
                return
            write_all(self.out_fd, memoryview(chunk)[:end + 1])
            self._mid_line, chunk = False, chunk[end + 1:]
        self._lines(chunk)

    def finish(self) -> None:
        """EOF from the upstream: deliver a last line that has no newline."""
        if self._parts:
            line, self._parts, self._size = b"".join(self._parts), [], 0
            write_all(self.out_fd, self._handle(line))

    def _stream(self, data: bytes) -> None:
        if data:
            write_all(self.out_fd, data)
            self._mid_line = not data.endswith(b"\n")

    def _lines(self, chunk: bytes) -> None:
        start, out = 0, []
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end + 1]
            if self._parts:
                self._parts.append(piece)
                piece, self._parts, self._size = b"".join(self._parts), [], 0
            out.append(self._handle(piece))
            start = end + 1
            if not self.pending:  # nothing awaited any more: back to plain streaming
                write_all(self.out_fd, b"".join(out))
                self._stream(chunk[start:])
                return
        if out:
            write_all(self.out_fd, b"".join(out))
        self._hold(chunk[start:])

    def _hold(self, tail: bytes) -> None:
        if not tail:
            return
        self._parts.append(tail)
        self._size += len(tail)
        if self._size > MAX_RESPONSE_BYTES:  # too big to hold: it goes through as it is
            write_all(self.out_fd, b"".join(self._parts))
            self._parts, self._size, self._mid_line = [], 0, True

    def _handle(self, line: bytes) -> bytes:
        """The line to send for `line`: rewritten, or `line` itself."""
        if b'"result"' not in line and b'"error"' not in line:
            return line
        cut = len(line) - _line_ending(line)
        content = line[:cut]
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            return line
        response = listing.read_response(text, self.pending.waits_for)
        if response is None:
            return line
        method = self.pending.pop(response.id)
        if method is None or not response.ok:
            return line
        new = self._rewrite(content, method, response, text)
        return line if new is None else new + line[cut:]

    def _rewrite(self, content: bytes, method: str, response: listing.Response,
                 text: str) -> bytes | None:
        """The rewritten content, its original committed first; None: send the original."""
        self.stats.passed += 1
        if self.store is None:
            return None
        try:
            rewrite = listing.rewrite_line(content, method, response, text, self.options)
            ccr.commit(self.store, [rewrite.original])
        except listing.NotRewritten as exc:
            self._log(f"{method} id={response.id!r}: unchanged ({exc})")
            return None
        except StoreError as exc:
            self._warn(f"{method} id={response.id!r}: sent unchanged, store failed: {exc}")
            return None
        except Exception as exc:  # a bug must not cost the client its catalog
            self._warn(f"{method} id={response.id!r}: sent unchanged, internal error: {exc!r}")
            return None
        self.stats.passed -= 1
        self.stats.rewritten += 1
        self._log(_summary(method, response.id, rewrite))
        return rewrite.content

    def _log(self, message: str) -> None:
        if self.debug:
            self._warn(message)

    def _warn(self, message: str) -> None:
        warn(self.err, message)


def warn(err: TextIO, message: str) -> None:
    """One line on the proxy's stderr; a stderr that cannot be written drops it (the
    client must still be served)."""
    try:
        err.write(f"caveman-batch proxy: {message}\n")
        err.flush()
    except (OSError, ValueError):
        pass


def _summary(method: str, request_id: Any, rewrite: listing.Rewrite) -> str:
    before, after = rewrite.tokens_before, rewrite.tokens_after
    tokens = f"{before:,} -> {after:,} tokens" if before is not None and after is not None else ""
    return (f"{method} id={request_id!r}: {rewrite.items} items, {tokens}, "
            f"handle {rewrite.original.handle}")


# -- the process ------------------------------------------------------------------------


def exit_status(returncode: int) -> int:
    """The shell's convention: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def open_or_warn(store_url: str | None, err: TextIO,
                 without: str = "every response goes through unchanged") -> Store | None:
    """The store, or None (and one warning saying what happens `without` it) if it cannot
    be opened: nothing is rewritten."""
    if store_url is None:
        return None
    try:
        return open_store(store_url)
    except (StoreError, OSError) as exc:
        warn(err, f"store unavailable, {without}: {exc}")
        return None


def _spawn(command: Sequence[str]) -> subprocess.Popen[bytes]:
    try:  # an argv list, never a shell: arguments reach the upstream as given
        return subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=None, bufsize=0)
    except OSError as exc:
        raise UsageError(f"cannot start the upstream {command[0]!r}: {exc.strerror or exc}") from None


def _pump_client(stdin_fd: int, proc: subprocess.Popen[bytes], relay: ClientRelay) -> None:
    """Client -> upstream until the client's EOF; then the upstream sees EOF too."""
    assert proc.stdin is not None
    try:
        while chunk := read_chunk(stdin_fd):
            relay.feed(chunk)
        relay.finish()
    except OSError:  # the upstream closed its stdin (it is exiting): stop relaying
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _pump_server(proc: subprocess.Popen[bytes], relay: ServerRelay) -> None:
    """Upstream -> client until the upstream's EOF or the client goes away."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    try:
        while chunk := os.read(fd, CHUNK):
            relay.feed(chunk)
        relay.finish()
    except BrokenPipeError:  # the client stopped reading: let the upstream wind down
        proc.stdout.close()
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes], signalled: int | None = None,
          forcing: Callable[[], None] | None = None) -> None:
    """Once it has not exited STOP_GRACE later, each of `stop_signals(signalled)` in turn,
    a grace apart (`forcing` is called before each)."""
    for signum in (None, *stop_signals(signalled)):
        if signum is not None:
            if forcing is not None:
                forcing()
            with contextlib.suppress(OSError):
                proc.send_signal(signum)
        try:
            proc.wait(STOP_GRACE)
            return
        except subprocess.TimeoutExpired:
            pass


@dataclass
class _Stopping:
    """The first signal forwarded to the upstream, and whether the proxy had to stop it."""

    signum: int | None = None
    forced: bool = False

    def force(self) -> None:
        self.forced = True


def _forward_signals(proc: subprocess.Popen[bytes]) -> tuple[dict[int, Any], _Stopping]:
    """A signal to the proxy goes to the upstream; the proxy exits when it does, or once it
    has stopped one that has not exited STOP_GRACE later (an upstream that ignored the
    signal kept the proxy running for ever, and one killed with it left behind)."""
    stopping = _Stopping()
    if threading.current_thread() is not threading.main_thread():
        return {}, stopping

    def forward(signum: int, _frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)
            if stopping.signum is None:
                stopping.signum = signum
                threading.Thread(target=_stop, args=(proc, signum, stopping.force),
                                 name="proxy-stop", daemon=True).start()
        else:  # it has exited (a child of its own holds its stdout): the signal is ours
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return {s: signal.signal(s, forward) for s in _FORWARDED_SIGNALS}, stopping


def run(command: Sequence[str], store_url: str | None, *, debug: bool = False,
        stdin_fd: int = 0, stdout_fd: int = 1, err: TextIO | None = None) -> Stats:
    """Run `command` behind the proxy until it exits; UpstreamExited if it fails.

    `store_url` None (or a store that will not open) relays everything unchanged.
    """
    if not command:
        raise UsageError("proxy needs an upstream command: caveman-batch proxy -- COMMAND [ARGS...]")
    err = err or sys.stderr
    store = open_or_warn(store_url, err)
    try:
        proc = _spawn(command)
        previous, stopping = _forward_signals(proc)
        try:
            status = _relay(proc, stdin_fd, stdout_fd, store, debug, err)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    finally:
        if store is not None:
            store.close()
    if stopping.forced and stopping.signum is not None:  # (the exit is ours: 128+N)
        raise UpstreamExited(
            f"upstream {command[0]!r} had not exited {STOP_GRACE:g} s after the "
            f"{signal.Signals(stopping.signum).name} forwarded to it: the proxy stopped it",
            128 + stopping.signum)
    if status.code:
        raise UpstreamExited(_exit_message(command[0], proc.returncode), status.code)
    return status.stats


@dataclass(frozen=True)
class _Status:
    code: int
    stats: Stats


def _relay(proc: subprocess.Popen[bytes], stdin_fd: int, stdout_fd: int, store: Store | None,
           debug: bool, err: TextIO) -> _Status:
    pending = Pending()
    assert proc.stdin is not None
    client = ClientRelay(proc.stdin.fileno(), pending)
    server = ServerRelay(stdout_fd, pending, store, debug=debug, err=err)
    # daemon: a client that keeps its end open must not keep the proxy alive
    threading.Thread(target=_pump_client, args=(stdin_fd, proc, client),
                     name="proxy-client", daemon=True).start()
    try:
        _pump_server(proc, server)
    finally:
        if proc.poll() is None:
            _stop(proc)
    return _Status(exit_status(proc.wait()), server.stats)


def _exit_message(program: str, returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"upstream {program!r} was killed by {name} (exit {exit_status(returncode)})"
    return f"upstream {program!r} exited with status {returncode}"
