"""The search index's one writer during `compress --index`, in a process of its own.

The parent compresses; this process writes what the parent hands it to the index
(`ToolIndex.apply_rows`, `defer_merges`, `merge_as_usual`, `optimize`), one request at a time,
in the order sent, each answered before the next is read. Given the run's store, an
`apply` first commits the records of the tools it names (their span records) there, in
one transaction of its own. A thread of the parent wrote the index before: SQLite
releases the GIL, but each of its steps (a row of an `executemany`) takes it back, and
the compressing thread held it for up to a switch interval each time, so the two mostly
took turns (the writer's 2.3 s of CPU on the 50 MB bench registry stretched over 4.4 s,
and the run waited 0.6 s on it). A process shares no GIL with the parent.

Catalogs travel as plain tuples, (server, tools, catalog sha256, source, path), each
tool as the pipeline's worker made it (name, digest, record value, length, definition,
search fields): the writer makes the index's rows of them (ToolRow) and picks the records
to commit (a dataclass or a tuple per tool made here cost the parent as much as pickling
them). A run of one worker leaves most documents' tools for the writer to build
(toolspans.LocatedTools: the document's bytes, its output's and where each tool lies in
both): that run's one busy process is the compressing one, and this one had time to spare
(the 50 MB bench registry's run: the compressing process's CPU for the index went from
about 1.1 s to 0.2-0.35 s, the writer's up by 0.3 s).

The protocol, over the child's stdin and stdout: each message an 8-byte big-endian
length, then a pickle (both ends are this module, started by the parent with the
parent's interpreter; nothing else writes to those pipes). The first request opens the
index: (path, embed), answered before the first request's answer. Each request is
(method, args, kwargs); each answer ("ok", result) or ("error", exception). The parent closing the child's stdin ends it (a parent that dies
does so too); a request half-sent is never applied (it does not unpickle), and each
`apply` is one transaction: a writer killed mid-way leaves the index as its last
commit did, as a thread killed with its process did.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from typing import IO, Any, Final

from . import ccr
from .errors import SearchIndexError, StoreError
from .store import Store, open_store
from .toolsearch import ToolIndex, ToolRow
from .toolspans import LocatedTools, WorkerTool, built_tools

_LENGTH: Final = struct.Struct(">Q")
# Ctrl-C reaches the whole process group: ignored before the imports (~0.5 s of them, in
# which it printed a KeyboardInterrupt traceback), and in _main
_BOOT: Final = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
                "from caveman_batch.indexwriter import _main; _main()")
# the methods of ToolIndex a parent may call here
_METHODS: Final = frozenset({"apply", "defer_merges", "merge_as_usual", "optimize"})


# one catalog as `apply` is handed it here: (server, its tools as a pipeline worker made
# them (toolspans.WorkerTool: name, digest, record value, length, definition, fields) or
# left them to build here (toolspans.LocatedTools), catalog sha256, source, path)
Tool = WorkerTool
Catalog = tuple[str, "Sequence[Tool] | LocatedTools", "str | None", "str | None", "str | None"]
Built = tuple[str, Sequence[Tool], "str | None", "str | None", "str | None"]  # (tools built)


def as_rows(replace: Iterable[Built]) -> list[tuple[str, list[ToolRow], str | None, str | None,
                                                        str | None]]:
    """`ToolIndex.apply_rows`' form of catalogs handed over as tuples (their tools built)."""
    prefix = ccr.HANDLE_PREFIX
    return [(server, [(t[0], prefix + t[1], t[4], t[5]) for t in tools], sha256, source, path)
            for server, tools, sha256, source, path in replace]


def _built(replace: Iterable[Catalog]) -> list[Built]:
    """Catalogs handed over, the tools the compressing process left to build built
    (toolspans.LocatedTools: this process builds them, the same tools its worker would)."""
    return [(server, _built_tools(server, tools), sha256, source, path)
            for server, tools, sha256, source, path in replace]


def _built_tools(server: str, tools: Sequence[Tool] | LocatedTools) -> Sequence[Tool]:
    """built_tools, its failure (a bug: see toolspans.located_later) naming the catalog."""
    try:
        return built_tools(tools)
    except Exception as exc:
        raise SearchIndexError(f"cannot build the tools of catalog {server} for the search "
                               f"index: {type(exc).__name__}: {exc}") from exc


def new_records(tool_lists: Iterable[Sequence[Tool]], committed: set[str]) -> list[ccr.Prepared]:
    """The records of these tools, each once, none in `committed` (this run's: a registry
    repeats its tools, and a record committed is durable, its last-seen this run's). The
    caller adds them to `committed` once its commit has returned."""
    records: dict[str, ccr.Prepared] = {}
    for tools in tool_lists:
        for _, digest, value, length, _, _ in tools:
            if digest not in committed and digest not in records:
                records[digest] = ccr.Prepared(digest, value, length)
    return list(records.values())


class LocalWriter:
    """The same calls as IndexWriter's, made on an index of this process (":memory:")."""

    def __init__(self, index: ToolIndex) -> None:
        self._index = index

    def apply(self, replace: Iterable[Catalog], remove: Iterable[str] = (),
              files: dict[str, str] | None = None, compressor: str | None = None) -> None:
        self._index.apply_rows(as_rows(_built(replace)), remove, files,  # (records: the caller's)
                               compressor)

    def defer_merges(self) -> None:
        self._index.defer_merges()

    def merge_as_usual(self) -> None:
        self._index.merge_as_usual()

    def optimize(self) -> None:
        self._index.optimize()

    def close(self) -> None:
        """Nothing: the index is its owner's to close."""


def _send(pipe: IO[bytes], message: Any) -> None:
    pipe.write(_framed(message))
    pipe.flush()


def _receive(pipe: IO[bytes]) -> Any:
    """The next message, or EOFError if the other end closed the pipe (mid-message too)."""
    head = pipe.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (size,) = _LENGTH.unpack(head)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class IndexWriter:
    """The parent's end: a child process writing the index at `path`.

    Requests are pipelined: `submit` pickles a request in the caller's thread and hands it
    to a sender thread, which writes it to the child's stdin while the child is still
    busy with earlier ones; a reader thread resolves each request's future, in order, as
    its answer arrives. The child never waits for the parent between requests (when the
    parent's one thread sent each request only once the answer before it was read, the
    child sat idle 10-30 ms a request, waiting for that thread to get the GIL back from
    the compressing one and pickle the next: 0.23-0.33 s of the 50 MB bench registry's
    run, on the run's critical path). The blocking calls (`apply`, ...) wait for their
    own answer."""

    def __init__(self, path: str, embed: bool) -> None:
        self.path = path
        # the child's import path is this process's (as multiprocessing's spawn does): it
        # imports this very package, wherever it was found; and its UTF-8 mode (the CLI's,
        # under a locale that is not UTF-8: the paths it is sent are encoded as ours are)
        utf8 = ["-X", "utf8"] if sys.flags.utf8_mode else []
        self._child = subprocess.Popen(
            [sys.executable, *utf8, "-c", _BOOT, json.dumps(sys.path)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, close_fds=True)
        assert self._child.stdin is not None and self._child.stdout is not None
        _widen(self._child.stdin)
        self._lock = threading.Lock()
        # futures of the requests sent and not answered yet, oldest first; the error every
        # later one gets once the writer cannot answer (it died, or it is closed)
        self._waiting: deque[Future[Any]] = deque()
        self._failure: Exception | None = None
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._outbox.put(_framed((path, embed)))
        self._sender = threading.Thread(target=self._send_all, name="index-writer-send",
                                        daemon=True)
        self._reader = threading.Thread(target=self._read_all, name="index-writer-read",
                                        daemon=True)
        try:
            self._sender.start()
            self._reader.start()
        except BaseException:  # (no thread, or interrupted): the child is not left behind
            self._child.kill()
            self._child.wait()
            raise

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Future[Any]:
        """`method` (apply, defer_merges, merge_as_usual, optimize) called in the writer
        after every request submitted before it; the future holds its result or error."""
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()  # (not to be cancelled: its answer will come)
        if method == "apply":
            request = self._apply_request(*args, **kwargs)
        else:
            request = (method, args, {})
        try:
            data = _framed(request)
        except Exception as exc:  # not sent: nor is any later request (as the writer
            # refuses those after a failure: a `files` written after catalogs that were not)
            with self._lock:
                if self._failure is None:
                    self._failure = SearchIndexError(
                        f"search index {self.path} not written after an earlier failure: "
                        f"{type(exc).__name__}: {exc}")
            future.set_exception(exc)
            return future
        with self._lock:
            if self._failure is not None:
                future.set_exception(self._failure)
                return future
            self._outbox.put(data)  # (under the lock: sent in the order of _waiting)
            self._waiting.append(future)
        return future

    @staticmethod
    def _apply_request(replace: Iterable[Catalog], remove: Iterable[str] = (),
                       files: dict[str, str] | None = None, compressor: str | None = None, *,
                       extra: Sequence[Sequence[Tool] | LocatedTools] = (),
                       store_url: str | None = None) -> tuple[str, Any, dict[str, Any]]:
        return ("apply", (list(replace), list(remove), files, compressor),
                {"extra": list(extra), "store_url": store_url} if store_url else {})

    def apply(self, replace: Iterable[Catalog], remove: Iterable[str] = (),
              files: dict[str, str] | None = None, compressor: str | None = None, *,
              extra: Sequence[Sequence[Tool] | LocatedTools] = (),
              store_url: str | None = None) -> None:
        """The catalogs written in one transaction of the index; first, with `store_url`,
        the records of their tools and of the `extra` ones committed to that store (in one
        transaction, each record once a run: new_records)."""
        self.submit("apply", replace, remove, files, compressor, extra=extra,
                    store_url=store_url).result()

    def defer_merges(self) -> None:
        self.submit("defer_merges").result()

    def merge_as_usual(self) -> None:
        self.submit("merge_as_usual").result()

    def optimize(self) -> None:
        self.submit("optimize").result()

    def _send_all(self) -> None:
        """The sender thread: requests written in order; None (close) closes the pipe."""
        pipe = self._child.stdin
        assert pipe is not None
        broken = False
        while (data := self._outbox.get()) is not None:
            if broken:
                continue  # (the reader fails their futures: the child is gone)
            try:
                pipe.write(data)
                pipe.flush()
            except OSError:
                broken = True
        with contextlib.suppress(OSError):
            pipe.close()

    def _read_all(self) -> None:
        """The reader thread: the open's answer, then each request's, in order; when the
        child ends, every request not answered fails (so does any submitted later)."""
        pipe = self._child.stdout
        assert pipe is not None
        try:
            kind, value = _receive(pipe)
            if kind == "error":  # the index cannot be opened: every request raises that
                self._fail(value)
                return
            while True:
                kind, value = _receive(pipe)
                with self._lock:
                    future = self._waiting.popleft()
                if kind == "error":
                    future.set_exception(value)
                else:
                    future.set_result(value)
        except (OSError, EOFError):
            pass  # the child ended
        except BaseException:  # (an answer that does not unpickle, ...): never a hang
            self._child.kill()
        code = self._child.wait()
        self._fail(SearchIndexError(f"the writer of search index {self.path} died "
                                    f"(exit status {code})"))

    def _fail(self, error: Exception) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = error
            waiting, self._waiting = list(self._waiting), deque()
        for future in waiting:
            future.set_exception(error)

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the child (after its last answer: the requests sent are all answered) and
        reap it; a request submitted after this fails."""
        with self._lock:
            if self._failure is None:
                self._failure = SearchIndexError(f"the writer of search index {self.path} "
                                                 f"has stopped")
            self._outbox.put(None)
        self._sender.join()
        self._reader.join()
        self._child.wait()
        if self._child.stdout is not None:
            self._child.stdout.close()


def _framed(message: Any) -> bytes:
    """A message as it crosses a pipe: its length, then its pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def _widen(pipe: IO[bytes]) -> None:
    """The pipe's buffer at 1 MiB (Linux's default limit for anyone), not 64 KiB: a
    request of a few MB crosses in fewer turns of the two processes. Best effort."""
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setpipe is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), setpipe, 1 << 20)


def _serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The child's loop: open the index, then answer requests until stdin closes."""
    from .embedding import choose_embedder

    try:
        path, embed = _receive(requests)
    except EOFError:
        return
    try:
        index = ToolIndex.open(path, embedder=choose_embedder(True) if embed else None)
    except Exception as exc:  # handed to the parent, which raises it
        _answer(answers, "error", exc)
        return
    _answer(answers, "ok", None)
    stores: dict[str, Store] = {}
    committed: set[str] = set()  # the tool records this run committed
    # a request that failed: every later one is refused (the parent fails the run, and a
    # write queued after it must not land: a catalog naming a record that was not
    # committed, or the files table saying a file is wholly indexed)
    failed: Exception | None = None
    with index, contextlib.ExitStack() as opened:
        opened.callback(lambda: [store.close() for store in stores.values()])
        while True:
            try:
                method, args, kwargs = _receive(requests)
            except EOFError:
                return
            if failed is not None:  # the run has failed: what it queued after is not written
                _answer(answers, "error", SearchIndexError(
                    f"search index {path} not written after an earlier failure: {failed}"))
                continue
            if method not in _METHODS:
                failed = SearchIndexError(f"unknown index request {method!r}")
                _answer(answers, "error", failed)
                continue
            try:
                if method == "apply":
                    url, extra = kwargs.pop("store_url", None), kwargs.pop("extra", ())
                    args = (_built(args[0]), *args[1:])
                    if url is not None:
                        extra = [_built_tools("(indexed as it is)", tools) for tools in extra]
                        records = new_records([*(tools for _, tools, *_ in args[0]), *extra],
                                              committed)
                        _commit_records(stores, url, records)
                        committed.update(record.digest for record in records)
                    args = (as_rows(args[0]), *args[1:])
                    method = "apply_rows"
                result = getattr(index, method)(*args, **kwargs)
            except Exception as exc:
                failed = exc
                _answer(answers, "error", exc)
            else:
                _answer(answers, "ok", result)


def _commit_records(stores: dict[str, Store], url: str, records: list[ccr.Prepared]) -> None:
    """Originals committed (durably: ccr.commit) to the store at `url`, opened once."""
    if not records:
        return
    store = stores.get(url)
    if store is None:
        store = stores[url] = open_store(url)
    commit_tool_records(store, records)


def commit_tool_records(store: Store, records: Sequence[ccr.Prepared]) -> None:
    """Tool records committed (ccr.commit_held: each span only beside the catalog record it
    lies in, refreshed with it; the catalogs were committed in transactions of their own,
    before). A prune that dropped a catalog's record meanwhile fails the run (StoreError),
    and never leaves a span naming bytes that are gone."""
    gone = ccr.commit_held(store, records)
    if gone:
        raise StoreError(
            f"{store.url}: {len(gone):,} catalog original(s) left the store before their "
            f"tools' records were committed (ccr_{gone[0][:12]}…: a prune --not-seen-for "
            f"shorter than the run?); run again")


def _answer(answers: IO[bytes], kind: str, value: Any) -> None:
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:  # an exception that does not survive the trip: its text does
        value = SearchIndexError(str(value))
    _send(answers, (kind, value))


def _main() -> None:
    # Ctrl-C reaches the whole process group: the parent stops, and closing our stdin
    # ends us after the requests it had sent (a few at most: each transaction commits
    # or rolls back whole)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    try:
        _serve(sys.stdin.buffer, answers)
    except BrokenPipeError:  # the parent is gone (killed): no one to answer, nor to tell
        os._exit(1)  # (each transaction has committed or rolled back whole)
