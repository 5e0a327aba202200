"""`compress`: the bulk pipeline, streaming, parallel, incremental, crash-safe.

    sources --> batches of documents --> pool of pure workers --> parent (only writer):
        commit originals (one transaction per batch) --> publish outputs --> manifest rows

Results are consumed in input order from a bounded window of batches in flight,
so memory does not grow with the input and OUT is byte-identical for any worker
count. Every output is published by rename (a file per document, or a JSONL /
array file renamed when its last document is in), always after the originals it
names are durably committed. The manifest is renamed into place last.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import hashlib
import operator
import os
import re
import shutil
import signal
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson

from . import __version__, ccr, converge, fsio, indexing, tokens
from .catalog import DEFAULT_OPTIONS, Options, compress
from .embedding import choose_embedder
from .errors import IntegrityError, OutputError, UsageError
from .inputs import Document, Item, Sink, SinkEnd, discover, iter_entry
from .store import Store, open_store

TMP_DIR: Final = ".caveman-tmp"
LOCK_FILE: Final = ".caveman-batch.lock"  # in OUT, held (flock) for the whole run
ONE_READ: Final = 1 << 20  # files smaller than this are hashed from one read
BATCH_DOCS: Final = 64
BATCH_BYTES: Final = 4 << 20


@dataclass(frozen=True)
class Config:
    sources: list[str]
    out: Path
    store_url: str
    manifest: Path | None = None
    workers: int = 1
    max_bytes: int = 32 << 20
    incremental: bool = False
    checksum: bool = False  # a rerun hashes every source and output (no stat cache)
    index: Path | None = None  # the tool-search index to build or refresh (see indexing)
    embed: bool | None = None  # its dense vectors: True required, False none, None if installed
    options: Options = DEFAULT_OPTIONS
    keep_removed: bool = False  # stale outputs (of documents no longer in SRC) stay in OUT
    changes: Path | None = None  # where to write what changed, one JSON line per document
    follow_symlinks: bool = False  # symlinks met while walking a folder (see inputs.discover)

    @property
    def manifest_path(self) -> Path:
        return self.manifest if self.manifest is not None else self.out / "manifest.jsonl"

    @property
    def streams_path(self) -> Path:
        """Beside the manifest, hidden: a fingerprint of each file source and its output."""
        return self.manifest_path.with_name(f".{self.manifest_path.stem}.streams.json")

    @property
    def stats_path(self) -> Path:
        """Beside it, what this machine saw of those files (see fsio.identity): the only
        file of OUT that differs between two runs of the same input."""
        return self.manifest_path.with_name(f".{self.manifest_path.stem}.stat.json")

    @functools.cached_property
    def run_key(self) -> str:
        return f"{__version__}/{self.options.key()}"


_MAX_ERRORS: Final = 100  # error rows a summary (and a source's fingerprint record) keeps


@dataclass
class Summary:
    documents: int = 0
    ok: int = 0
    passthrough: int = 0
    error: int = 0
    reused: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    seconds: float = 0.0
    errors: list[dict[str, Any]] = field(default_factory=list)
    # by source document, against the previous manifest (see converge)
    changes: converge.Changes = field(default_factory=converge.Changes)

    def add(self, row: dict[str, Any], reused: bool) -> None:
        self.documents += 1
        setattr(self, row["status"], getattr(self, row["status"]) + 1)
        self.reused += reused
        self.bytes_before += row["bytes_before"] or 0
        self.bytes_after += row["bytes_after"] or 0
        self.tokens_before += row["tokens_before"] or 0
        self.tokens_after += row["tokens_after"] or 0
        if row["status"] == "error" and len(self.errors) < _MAX_ERRORS:
            self.errors.append({"source": row["source"], "reason": row["reason"]})

    def add_reused(self, totals: dict[str, int], errors: list[dict[str, Any]]) -> None:
        """A source reused whole: the totals of its rows (see _Tally), none read again."""
        documents, ok, passthrough, error, bb, ba, tb, ta = _Tally.counts(totals)
        self.documents += documents
        self.reused += documents
        self.ok += ok
        self.passthrough += passthrough
        self.error += error
        self.bytes_before += bb
        self.bytes_after += ba
        self.tokens_before += tb
        self.tokens_after += ta
        if errors:
            self.errors += errors[:max(0, _MAX_ERRORS - len(self.errors))]

    @property
    def ratio(self) -> float:
        if not self.tokens_before:
            return 0.0
        return max(0.0, 1 - self.tokens_after / self.tokens_before)

    def as_dict(self) -> dict[str, Any]:
        mb = self.bytes_before / 1e6
        return {
            "documents": self.documents, "ok": self.ok, "passthrough": self.passthrough,
            "error": self.error, "reused": self.reused, "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after, "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after, "ratio": round(self.ratio, 4),
            "encoding": "o200k_base", "basis": "inferred", "seconds": round(self.seconds, 3),
            "mb_per_s": round(mb / self.seconds, 2) if self.seconds else None,
            **self.changes.as_dict(), "errors": self.errors,
        }


class _Tally:
    """What a file source's manifest rows add up to, kept in its fingerprint record: a
    rerun that reuses the source whole adds these instead of parsing its rows. Constant
    size whatever the number of rows (a JSONL source may have millions)."""

    COUNTS: Final = ("documents", "ok", "passthrough", "error", "bytes_before", "bytes_after",
                     "tokens_before", "tokens_after")
    KEYS: Final = frozenset(COUNTS)
    counts: Final = operator.itemgetter(*COUNTS)

    __slots__ = ("errors", "totals")

    def __init__(self) -> None:
        self.totals = dict.fromkeys(self.COUNTS, 0)
        self.errors: list[dict[str, Any]] = []  # the first _MAX_ERRORS rows in error

    def add(self, row: dict[str, Any]) -> None:
        totals = self.totals
        totals["documents"] += 1
        totals[row["status"]] += 1
        for name in ("bytes_before", "bytes_after", "tokens_before", "tokens_after"):
            totals[name] += row[name] or 0
        if row["status"] == "error" and len(self.errors) < _MAX_ERRORS:
            self.errors.append({"source": row["source"], "reason": row["reason"]})


# -- the worker: pure, bytes in, bytes and numbers out ---------------------------------


def _worker_init(parent: int) -> None:
    """Die with the parent: a SIGKILLed run must not leave workers behind."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took hold
        os._exit(1)

    def watch() -> None:  # elsewhere (and as a backstop), poll for the parent
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


# What a worker sends back per document besides the output bytes and the stored record:
# a flat tuple (with a dict and a dataclass per document, pickling and unpickling a
# bench_data result took 21 us; now 10, mostly the bytes themselves): the fields of
# CompressResult the parent's manifest row uses, then out_sha256.
_RESULT_FIELDS: Final = ("status", "broken", "reason", "shape", "tools", "bytes_before",
                         "bytes_after", "tokens_before", "tokens_after")


def work(options: Options, raws: list[bytes], index: bool = False) -> list[tuple[Any, ...]]:
    """Compress, hash and zstd each document: (output, result fields + the output's sha256,
    then the original's digest, record value and length; with `index`, what the index
    needs of its tools, see indexing.BatchWork)."""
    out = []
    tools = indexing.BatchWork() if index else None
    for raw in raws:
        data, result = compress(raw, options)
        fields = (*(getattr(result, name) for name in _RESULT_FIELDS),
                  hashlib.sha256(data).hexdigest())  # here, not in the busy parent
        record = ccr.prepare(raw, result.content_type)
        out.append((data, fields, record.digest, record.value, record.original_length))
        if tools is not None:
            tools.add(raw if not result.broken else None, data)
    if tools is not None:
        out = [(*done, found) for done, found in zip(out, tools.finish())]
    return out


# -- the parent ----------------------------------------------------------------------------


Progress = Callable[[Summary], None]


def run(config: Config, progress: Progress | None = None) -> Summary:
    """Run one batch job; raises StoreError/OutputError (nothing half-done published), or
    UsageError before anything is written if OUT would overwrite a source or another run
    holds OUT."""
    _refuse_out_over_sources(config)
    with _caller_objects_frozen(), _out_locked(config.out):
        return _run(config, progress)


def _refuse_out_over_sources(config: Config) -> None:
    """OUT is neither a source nor around one (symlinks resolved): its outputs would be
    written over the sources. (OUT inside a source folder is fine: the walk skips it.)"""
    out = config.out.resolve()
    for src in config.sources:
        if src == "-":
            continue
        path = Path(src).resolve()
        if path == out or path.is_relative_to(out):
            where = "is" if path == out else "holds"
            raise UsageError(f"-o {config.out} {where} the source {src}: its outputs would overwrite "
                             "the sources; give an output folder outside them")


@contextlib.contextmanager
def _out_locked(out: Path) -> Iterator[None]:
    """OUT for this run alone: an exclusive flock on OUT/.caveman-batch.lock, which holds
    this process's pid (two runs into one OUT, as cron jobs that overlap, would clear each
    other's temp folder and publish each other's outputs). The kernel drops the lock when
    its holder dies: the file a killed run leaves blocks nothing."""
    lock = out / LOCK_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create output folder: {exc.strerror or exc}") from exc
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write to the output folder: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "not written yet"
            raise UsageError(f"{lock}: another compress run (pid {holder}) is writing to {out}; "
                             "wait for it to end, or give another output folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _caller_objects_frozen() -> Iterator[None]:
    """The objects that exist before the run are left out of the cyclic garbage collector's
    passes while it runs (gc.freeze): a full pass over a large caller's heap (a test runner's,
    an application's) cost 50 ms every other rerun of a 3,449-file tree, more than the rerun's
    own largest step. Cycles the run makes are collected as ever; nothing is frozen if the
    caller froze objects itself (its freeze is its own to undo)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _run(config: Config, progress: Progress | None) -> Summary:
    started = time.perf_counter()
    found = discover(config.sources, config.out, follow_symlinks=config.follow_symlinks)
    if not found.entries:
        raise UsageError("no *.json or *.jsonl documents found in " + ", ".join(config.sources))
    out = _prepare_out(config.out)
    tmp = out / TMP_DIR
    previous = _Previous()
    summary = Summary()
    pool = _Pool(config.workers) if config.workers > 1 else None
    index = (indexing.IndexBuilder.open(config.index, choose_embedder(config.embed))
             if config.index is not None else None)
    try:
        with open_store(config.store_url) as store, _Publisher(out, tmp, config) as pub:
            if config.incremental:
                previous = _load_previous(config, store, found.entries)
            previous.index = index
            batches = _batches(_items(found, config, previous, tmp))
            touched = _Touches(store, verify=config.checksum)  # originals of documents reused one by one
            for batch, results in _dispatch(batches, config, previous, pool):
                _commit(store, results, index)
                touched.add(batch, results)
                pub.publish(batch, results, summary, previous)
                if index is not None:
                    _index(index, batch, results)
                if progress is not None:
                    summary.seconds = time.perf_counter() - started
                    progress(summary)
            touched.flush()  # before the manifest: its rows are what name the handles
            pub.finish(summary)
            if index is not None:
                index.finish({r["source"]: r["source_sha256"] for r in pub.records.values()})
    finally:
        if pool is not None:
            pool.shutdown()
        if index is not None:
            index.close()
        previous.close()
        shutil.rmtree(tmp, ignore_errors=True)
    summary.seconds = time.perf_counter() - started
    return summary


def _prepare_out(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / TMP_DIR
        shutil.rmtree(tmp, ignore_errors=True)  # debris of a killed run
        tmp.mkdir()
    except OSError as exc:
        raise OutputError(f"{out}: cannot create output folder: {exc.strerror or exc}") from exc
    return out


def _batches(items: Iterator[Item]) -> Iterator[list[Item]]:
    batch: list[Item] = []
    docs = size = 0
    for item in items:
        batch.append(item)
        if isinstance(item, Document):
            docs += 1
            size += item.size
        elif isinstance(item, ReusedStream):
            docs += item.documents  # nothing to compute, but progress goes on
        if docs >= BATCH_DOCS or size >= BATCH_BYTES:
            yield batch
            batch, docs, size = [], 0, 0
    if batch:
        yield batch


@dataclass(slots=True)
class Result:
    """What the parent knows of one document once its worker (or the cache) is done."""

    data: bytes | None  # output bytes; None: copy the spill / nothing to write
    row: dict[str, Any]
    record: ccr.Prepared | None = None
    touch: str | None = None  # reused: the digest whose last-seen to refresh
    # reused from this document's own output file: its identity when it was read and hashed
    in_place: list[int] | None = None
    tools: indexing.WorkerTools = None  # with --index: what the index needs of its tools


class _Pool:
    """The worker processes, started when a batch first has something to compress (a
    rerun that reuses everything starts none)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool: Any = None  # a ProcessPoolExecutor once started

    def submit(self, options: Options, raws: list[bytes], index: bool) -> Future[Any]:
        if self.pool is None:
            from concurrent.futures import (
                ProcessPoolExecutor,  # (multiprocessing: ~30 ms to import)
            )

            if options.count_tokens:
                tokens.warm()  # loaded once here; forked workers inherit it (shared pages)
            self.pool = ProcessPoolExecutor(self.workers, initializer=_worker_init,
                                            initargs=(os.getpid(),))
        return self.pool.submit(work, options, raws, index)

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _dispatch(batches: Iterable[list[Any]], config: Config, previous: _Previous,
              pool: _Pool | None) -> Iterator[tuple[list[Item], list[Result | None]]]:
    """(batch, results) in input order, at most 2 × workers batches in flight."""
    window: deque[tuple[list[Item], list[Result | None], Future[Any] | list[Any], list[int]]] = deque()
    limit = max(2, 2 * config.workers)
    for batch in batches:
        results, todo = _plan(batch, config, previous)
        raws = [batch[i].raw for i in todo]  # type: ignore[union-attr]
        index = config.index is not None
        if pool is None or not raws:
            window.append((batch, results, work(config.options, raws, index), todo))  # type: ignore[arg-type]
        else:
            window.append((batch, results, pool.submit(config.options, raws, index), todo))  # type: ignore[arg-type]
        # in order: the oldest as soon as it needs no worker, else once the window is full
        while window and (len(window) >= limit or not isinstance(window[0][2], Future)):
            yield _settle(window.popleft(), config)
    while window:
        yield _settle(window.popleft(), config)


def _settle(entry: Any, config: Config) -> tuple[list[Item], list[Result | None]]:
    batch, results, pending, todo = entry
    done = pending.result() if isinstance(pending, Future) else pending
    for i, (data, fields, digest, value, length, *tools) in zip(todo, done):
        result = dict(zip(_RESULT_FIELDS, fields))
        result["out_sha256"] = fields[-1]
        record = ccr.Prepared(digest, value, length)
        results[i] = Result(data, _row(batch[i], result, digest, data, config), record,
                            tools=tools[0] if tools else None)
    return batch, results


def _plan(batch: list[Any], config: Config,
          previous: _Previous) -> tuple[list[Result | None], list[int]]:
    """Results known without a worker (reused, oversize, unreadable); indexes to compute."""
    results: list[Result | None] = [None] * len(batch)
    todo: list[int] = []
    for i, item in enumerate(batch):
        if not isinstance(item, Document):
            continue
        if item.error is not None or item.raw is None:
            results[i] = _unread(item, config)
            continue
        reused = _reuse(item, previous, config) if previous.manifest_fd is not None else None
        if reused is not None and previous.index is not None and reused.touch is not None \
                and not previous.index.current(item.source, reused.touch):
            reused = None  # the index lacks it: computed again
        if reused is not None:
            results[i] = reused
        else:
            todo.append(i)
    return results, todo


def _row(doc: Document, result: dict[str, Any], digest: str | None, data: bytes | None,
         config: Config) -> dict[str, Any]:
    status = result["status"]
    if result.get("broken"):
        status = "error"
    return {
        "source": doc.source, "output": None, "status": status, "reason": result["reason"],
        "handle": ccr.make_handle(digest) if digest else None, "sha256": digest,
        "out_sha256": result.get("out_sha256"),
        "shape": result.get("shape"), "tools": result.get("tools", 0),
        "bytes_before": result["bytes_before"], "bytes_after": result["bytes_after"],
        "tokens_before": result.get("tokens_before"), "tokens_after": result.get("tokens_after"),
        "run_key": config.run_key,
    }


def _unread(doc: Document, config: Config) -> Result:
    if doc.error is not None:
        result = {"status": "passthrough", "broken": True, "reason": doc.error,
                  "bytes_before": 0, "bytes_after": 0}
        return Result(None, _row(doc, result, None, None, config))
    reason = f"larger than --max-bytes ({config.max_bytes:,} bytes): copied through unchanged"
    result = {"status": "passthrough", "reason": reason, "bytes_before": doc.size,
              "bytes_after": doc.size}
    return Result(None, _row(doc, result, None, None, config))


# -- incremental refresh --------------------------------------------------------------------


@dataclass
class ReusedStream:
    """A file source (a catalog, a JSONL or a registry array) unchanged since the last run,
    whose output is still in place and intact: its manifest rows are carried over as they
    were (copied from the previous manifest, never held whole), no document is parsed or
    compressed again (nor its rows: their totals are in its fingerprint record)."""

    rel: str
    record: dict[str, Any]
    span: _Span  # its rows in the previous manifest
    stats: list[list[int] | None] | None = None  # [source, output] identity, for the stat cache

    @property
    def documents(self) -> int:
        return self.span.rows


@dataclass(slots=True)
class _Span:
    """Where a fingerprinted source's rows lie in the previous manifest (bytes start..end,
    newlines included), and whether each names that source, this run key, and an original
    the store holds (or none)."""

    start: int = -1
    end: int = 0
    rows: int = 0
    good: bool = True


@dataclass
class _Previous:
    """What the last run left: its manifest (open), each fingerprinted source's span of rows,
    the stat cache, and (indexed when a document first needs one) where each reusable row
    is, by sha256."""

    manifest: Path | None = None
    run_key: str = ""
    row_tail: bytes = b""  # how each of this run key's manifest rows ends
    manifest_fd: int | None = None  # the previous manifest, open: rows are copied from it
    streams: dict[str, tuple[dict[str, Any], _Span]] = field(default_factory=dict)  # by rel
    stats: dict[str, Any] = field(default_factory=dict)  # rel -> [source, output] identity
    fds: dict[str, int] = field(default_factory=dict)  # open outputs read by _read_output
    _index: dict[bytes, int] | None = None  # sha256 -> where its row is (offset << 24 | length)
    index: indexing.IndexBuilder | None = None  # the tool-search index (compress --index)

    def row(self, digest: str) -> dict[str, Any] | None:
        """The previous manifest's row of the document with this sha256 (this run key, an
        output, its own handle), or None. The manifest is indexed on first use (a rerun
        that reuses every source whole never does): a row's position by its sha256 (about
        120 bytes a row, a tenth of the row parsed), the row read and parsed when asked for."""
        if self._index is None:
            self._index = self._index_rows()
        at = self._index.get(bytes.fromhex(digest))
        if at is None or self.manifest_fd is None:
            return None
        try:
            row = orjson.loads(os.pread(self.manifest_fd, at & 0xFFFFFF, at >> 24))
        except (OSError, orjson.JSONDecodeError):
            return None  # a manifest we cannot read is only a lost shortcut
        if (isinstance(row, dict) and row.get("sha256") == digest
                and row.get("handle") == ccr.make_handle(digest)
                and row.get("output") and row.get("run_key") == self.run_key):
            return row
        return None

    def _index_rows(self) -> dict[bytes, int]:
        index: dict[bytes, int] = {}
        if self.manifest_fd is None:
            return index
        offset = 0
        with open(self.manifest_fd, "rb", closefd=False) as fh:
            fh.seek(0)
            for line in fh:
                name = _names(line)  # a reusable row's handle names its own sha256 (see row)
                if type(name) is str and line.endswith(self.row_tail + b"\n") and len(line) < 1 << 24:
                    index[bytes.fromhex(name)] = offset << 24 | len(line)
                offset += len(line)
        return index

    def rows_of(self, span: _Span) -> Iterator[bytes]:
        """A span's rows as they are in the previous manifest, in chunks that end with a row
        (the manifest is this program's; edited in place during a run it is not checked again)."""
        if not span.rows:
            return
        assert self.manifest_fd is not None
        at, rest = span.start, b""
        while at < span.end:
            chunk = os.pread(self.manifest_fd, min(_ROWS_CHUNK, span.end - at), at)
            if not chunk:
                raise OSError(f"{self.manifest}: shorter than when it was read")
            at += len(chunk)
            data = rest + chunk
            cut = data.rfind(b"\n") + 1 if at < span.end else len(data)
            block, rest = data[:cut], data[cut:]
            if block:
                yield block

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        if self.manifest_fd is not None:
            os.close(self.manifest_fd)
            self.manifest_fd = None


_ROWS_CHUNK: Final = 1 << 20
_PRESENCE_BATCH: Final = 4096


def _load_previous(config: Config, store: Store,
                   entries: list[tuple[str | None, str, str]]) -> _Previous:
    """What a rerun may reuse: where the previous manifest holds the rows of each source its
    fingerprint names (to be copied over whole), if the manifest is the one the fingerprint
    was written with. The manifest is streamed, never held: each such row is checked as
    bytes (written by this program, key order fixed): it names its source, this run key, and
    an original, whose presence in the store is asked a few thousand at a time; or none.
    Other rows are indexed by sha256 when a document first needs one, and read then
    (_Previous.row). Only sources among this run's `entries` are looked at: the originals of
    one no longer there are not seen again (so that `prune` reclaims them in time)."""
    found = _Previous(config.manifest_path, config.run_key,
                      b',"run_key":' + orjson.dumps(config.run_key) + b"}")
    manifest_sha256, manifest_size, records, fingerprint_sha256 = _read_fingerprint(config)
    here = {(source, rel) for source, rel, _ in entries}
    records = {rel: r for rel, r in records.items() if (r.get("source"), rel) in here}
    ranges = sorted((r["first_row"], r["first_row"] + r["rows"], rel) for rel, r in records.items())
    spans = {rel: _Span() for rel in records}
    heads = {rel: b'{"source":{"path":' + orjson.dumps(r["source"]) if type(r.get("source")) is str else b""
             for rel, r in records.items()}
    try:
        fd = os.open(config.manifest_path, os.O_RDONLY)
    except OSError:
        return found  # no manifest (or none readable): nothing to reuse
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return found
        found.manifest_fd = fd
        if records and st.st_size == manifest_size:
            presence = _Presence(store, verify=config.checksum)
            _stream_spans(fd, ranges, spans, heads, found.row_tail, presence, manifest_sha256)
            presence.flush()
            found.streams = {rel: (record, spans[rel]) for rel, record in records.items()}
            if not config.checksum:
                found.stats = _read_stats(config, fingerprint_sha256)
    except BaseException:
        found.close()
        raise
    return found


class _Presence:
    """Originals named by rows to carry over, asked of the store a few thousand at a time:
    a span naming one the store lacks is not good (pruned, or another store: its documents
    go through again); those it holds get their last-seen refreshed in the transaction that
    checks them (ccr.touch_held), so that a `prune` running meanwhile keeps them. With
    `verify` (--checksum) a span naming one that does not read back verified is not good
    either (its documents' originals are committed again, which heals the record)."""

    def __init__(self, store: Store, verify: bool = False) -> None:
        self.store, self.verify = store, verify
        self.asked: list[tuple[str, _Span]] = []

    def add(self, digest: str, span: _Span) -> None:
        self.asked.append((digest, span))
        if len(self.asked) >= _PRESENCE_BATCH:
            self.flush()

    def flush(self) -> None:
        named = [d for d, _ in self.asked]
        absent = set(ccr.touch_held(self.store, named))
        if self.verify:
            absent |= _unverified(self.store, [d for d in named if d not in absent])
        for d, span in self.asked:
            if d in absent:
                span.good = False
        self.asked = []


def _stream_spans(fd: int, ranges: list[tuple[int, int, str]], spans: dict[str, _Span],
                  heads: dict[str, bytes], tail: bytes, presence: _Presence,
                  manifest_sha256: str | None) -> None:
    """One pass over the previous manifest: each fingerprinted source's span of rows, and
    whether they are good; every span bad if the manifest is not the one expected."""
    digest = hashlib.sha256()
    at = offset = 0  # at: index into ranges, the next stream whose rows may come
    with open(fd, "rb", closefd=False) as fh:
        for index, line in enumerate(fh):
            digest.update(line)
            while at < len(ranges) and index >= ranges[at][1]:
                at += 1
            if at < len(ranges) and ranges[at][0] <= index:
                rel = ranges[at][2]
                span = spans[rel]
                if span.start < 0:
                    span.start = offset
                span.end, span.rows = offset + len(line), span.rows + 1
                if span.good:
                    name = _names(line)
                    if (name is False or not line.endswith(b"\n") or not heads[rel]
                            or not line.startswith(heads[rel]) or not line.endswith(tail, 0, -1)):
                        span.good = False
                    elif name is not None:
                        presence.add(name, span)
            offset += len(line)
    if digest.hexdigest() != manifest_sha256:
        for span in spans.values():
            span.good = False


# A manifest row's handle, as _row writes it: "ccr_" and the sha256 of its original, or null.
# (`"handle":` cannot occur inside a JSON string, where quotes are escaped.)
_HANDLE: Final = re.compile(rb'"handle":(?:null|"ccr_([0-9a-f]{64})"),')


def _names(line: bytes) -> str | None | bool:
    """The original a manifest row names (None: none), or False if it does not say."""
    m = _HANDLE.search(line)
    if m is None:
        return False
    return None if m.group(1) is None else m.group(1).decode("ascii")


def _read_fingerprint(config: Config) -> tuple[str | None, int | None, dict[str, dict[str, Any]], str]:
    """(sha256 and size of the manifest it belongs to, stream records, its own sha256) of
    this run key, or (None, None, {}, "")."""
    try:
        data = config.streams_path.read_bytes()
        streams = orjson.loads(data)
    except (OSError, orjson.JSONDecodeError):
        return None, None, {}, ""
    if not (isinstance(streams, dict) and streams.get("run_key") == config.run_key
            and streams.get("max_bytes") == config.max_bytes
            and isinstance(streams.get("streams"), dict)):
        return None, None, {}, ""
    records = {rel: r for rel, r in streams["streams"].items()
               if isinstance(r, dict) and type(r.get("first_row")) is int and type(r.get("rows")) is int
               and r["first_row"] >= 0 and r["rows"] >= 0}
    return (streams.get("manifest_sha256"), streams.get("manifest_bytes"), records,
            hashlib.sha256(data).hexdigest())


def _read_stats(config: Config, fingerprint_sha256: str) -> dict[str, Any]:
    """The stat cache written with this fingerprint, or {} (none, stale or unreadable)."""
    try:
        cache = orjson.loads(config.stats_path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    boot = fsio.boot_id()
    if not (isinstance(cache, dict) and cache.get("fingerprint_sha256") == fingerprint_sha256
            and boot is not None and cache.get("boot_id") == boot
            and isinstance(cache.get("stats"), dict)):
        return {}
    return cache["stats"]


# The fingerprint check of a large source (hashing it and its output) runs on two
# threads, up to _CHECK_AHEAD sources ahead of the one being yielded; a small source is
# checked inline when its turn comes (measured: handing small files to threads, even in
# groups, made a 3,449-file rerun slower, the threads and the reader contending for the GIL).
_CHECK_AHEAD: Final = 4
_CHECK_LARGE: Final = 1 << 20


def _items(found: Any, config: Config, previous: _Previous, tmp: Path) -> Iterator[Any]:
    """The documents of every source; an unchanged file source as one ReusedStream.

    Whether a fingerprinted source is unchanged: the stat cache says so (_unchanged), or
    else hashing it and its output does (_intact; not their times, so a file edited with
    its mtime set back is still seen).
    """
    if not previous.streams:
        for entry in found.entries:
            yield from iter_entry(entry, config.max_bytes, tmp)
        return
    Pending = tuple[Any, ReusedStream | None, list[tuple[str, int | None]],
                    list[Future[tuple[str, os.stat_result] | None]] | None]
    pending: deque[Pending] = deque()
    entries = iter(found.entries)
    with ThreadPoolExecutor(2, thread_name_prefix="caveman-check") as pool:
        def ahead() -> None:
            while len(pending) < _CHECK_AHEAD:
                entry = next(entries, None)
                if entry is None:
                    return
                reused = _candidate(entry, config, previous)
                if reused is not None and _unchanged(reused, previous, config):
                    pending.append((entry, reused, [], None))  # known: nothing to hash
                    continue
                files = [] if reused is None else _intact_files(reused, config)
                jobs = ([pool.submit(_file_sha256, *f) for f in files]
                        if files and (files[0][1] or 0) >= _CHECK_LARGE else None)
                pending.append((entry, reused, files, jobs))

        ahead()
        while pending:
            entry, reused, files, jobs = pending.popleft()
            ahead()
            if reused is not None and (not files or _intact(reused, files, jobs)):
                yield reused
                continue
            yield from iter_entry(entry, config.max_bytes, tmp)


def _candidate(entry: tuple[str | None, str, str], config: Config,
               previous: _Previous) -> ReusedStream | None:
    """A source the fingerprint names, whose rows are this run's and whose originals the
    store holds (both checked as _load_previous read them): reusable whole if its bytes
    and its output's are still the same."""
    source, rel, _ = entry
    if source is None or rel not in previous.streams:
        return None
    record, span = previous.streams.pop(rel)  # once
    totals, errors = record.get("totals"), record.get("errors")
    if not (span.good and record.get("source") == source and span.rows == record["rows"]
            and type(totals) is dict and totals.keys() == _Tally.KEYS
            and set(map(type, totals.values())) == {int}
            and totals["documents"] == span.rows and type(errors) is list
            and (not errors or _valid_errors(errors, source))
            and type(record.get("source_size")) is int
            # (only ever compared with digests computed here)
            and type(record.get("source_sha256")) is str and type(record.get("output_sha256")) is str):
        return None
    # carried into this run's fingerprint as rebuilt here: nothing else of the old record
    if previous.index is not None and not previous.index.file_current(source,
                                                                       record["source_sha256"]):
        return None  # the index lacks some of its catalogs: read again
    record = {"source": source, "source_size": record["source_size"],
              "source_sha256": record["source_sha256"], "output_sha256": record["output_sha256"],
              "first_row": record["first_row"], "rows": record["rows"],
              "totals": totals, "errors": errors}
    return ReusedStream(rel, record, span)


def _valid_errors(errors: Any, source: str) -> bool:
    """A fingerprint record's error rows as _Tally keeps them: at most _MAX_ERRORS, each
    naming this source (and a line or item) and a reason."""
    return len(errors) <= _MAX_ERRORS and all(
        type(e) is dict and e.keys() == {"source", "reason"} and type(e["reason"]) is str
        and type(e["source"]) is dict and e["source"].get("path") == source
        and all(type(e["source"][k]) is int for k in e["source"].keys() - {"path"})
        and e["source"].keys() <= {"path", "line", "item"}
        for e in errors)


def _unchanged(reused: ReusedStream, previous: _Previous, config: Config) -> bool:
    """Whether the stat cache tells the source and its output are the very files, unchanged,
    that an earlier run hashed (see fsio.identity); if so they are not read again."""
    known = previous.stats.get(reused.rel)
    if known is None:
        return False
    try:
        if (fsio.identity(os.stat(reused.record["source"])) != known[0]
                or fsio.identity(os.stat(f"{config.out}/{reused.rel}")) != known[1]):
            return False
    except (OSError, TypeError, ValueError, IndexError, KeyError):
        return False
    reused.stats = known
    return True


def _intact(reused: ReusedStream, files: list[tuple[str, int | None]],
            jobs: list[Future[Any]] | None) -> bool:
    """Whether the source and its output hash as the fingerprint says; if so, what the
    stat cache is to keep of them."""
    got = [job.result() for job in jobs] if jobs is not None else [_file_sha256(*f) for f in files]
    if None in got or [g[0] for g in got] != _intact_hashes(reused):
        return False
    (_, source), (_, output) = got
    reused.stats = [fsio.settled_identity(source), fsio.identity(output)]
    return True


def _intact_files(reused: ReusedStream, config: Config) -> list[tuple[str, int | None]]:
    """What to hash to know a reused source is intact: the source's bytes (not its times: a
    file edited with its mtime set back is still seen) and its output's, as (path, size)."""
    record = reused.record
    return [(record["source"], record["source_size"]), (f"{config.out}/{reused.rel}", None)]


def _intact_hashes(reused: ReusedStream) -> list[str]:
    """The sha256s the fingerprint holds for _intact_files (type-checked by _candidate)."""
    return [reused.record["source_sha256"], reused.record["output_sha256"]]


def _file_sha256(path: str, size: int | None = None) -> tuple[str, os.stat_result] | None:
    """sha256 of a regular file and its fstat (taken before reading), or None (unreadable,
    not a regular file, not `size` bytes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block (nor be read)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (size is not None and st.st_size != size):
            return None
        if st.st_size < ONE_READ:  # most catalogs: one read (a file grown since: another digest)
            return hashlib.sha256(os.read(fd, st.st_size + 1)).hexdigest(), st
        with open(fd, "rb", closefd=False) as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest(), st
    except OSError:
        return None
    finally:
        os.close(fd)


def _reuse(doc: Document, previous: _Previous, config: Config) -> Result | None:
    assert doc.raw is not None
    digest = hashlib.sha256(doc.raw).hexdigest()
    row = previous.row(digest)
    if row is None:
        return None
    got = _read_output(config.out, row["output"], row["out_sha256"], previous.fds)
    if got is None:
        return None
    data, identity = got
    fresh = dict(row, source=doc.source, output=None)
    # the bytes may be another source's output (the same document elsewhere): only this
    # document's own file may be left in place
    in_place = identity if row["output"] == {"path": doc.sink.rel} else None
    return Result(data, fresh, touch=digest, in_place=in_place)


def _read_output(out: Path, where: Any, digest: Any,
                 fds: dict[str, int]) -> tuple[bytes, list[int] | None] | None:
    """The previous run's output bytes if still in place and intact, and for an output
    file of its own its identity (fstat of what was read)."""
    try:
        if "offset" in where:  # a JSONL/array output: one open file for all its documents
            fd = fds.get(where["path"])
            if fd is None:
                fd = fds[where["path"]] = os.open(out / where["path"], os.O_RDONLY)
            data, identity = os.pread(fd, where["length"], where["offset"]), None
        else:
            fd = os.open(out / where["path"], os.O_RDONLY)
            try:
                st = os.fstat(fd)
                data, identity = os.read(fd, st.st_size + 1), fsio.identity(st)
            finally:
                os.close(fd)
    except (OSError, KeyError, TypeError, ValueError):
        return None  # gone, or a row that does not say where (a lost shortcut)
    return (data, identity) if hashlib.sha256(data).hexdigest() == digest else None


# -- committing and publishing ---------------------------------------------------------------


TOUCH_BATCH: Final = 4096
TOUCH_BYTES: Final = 8 << 20


def _commit(store: Store, results: list[Result | None],
            index: indexing.IndexBuilder | None = None) -> None:
    """Originals first, durably, in one transaction (those of reused documents: _Touches)."""
    records = [r.record for r in results if r is not None and r.record is not None]
    # each tool's own original (compress --index), in the same transaction
    tools = [] if index is None else index.records(r.tools for r in results if r is not None)
    if records or tools:
        ccr.commit(store, records + tools)
    if index is not None:
        index.committed.update(t.digest for t in tools)


def _index(index: indexing.IndexBuilder, batch: list[Any], results: list[Result | None]) -> None:
    """The batch's catalogs into the search index, once their originals are committed."""
    found = []
    for item, result in zip(batch, results):
        if isinstance(item, ReusedStream):
            index.keep_file(item.record["source"])
        elif result is not None and result.tools is not None:
            found.append((item, result.row["sha256"], result.tools))
    index.add(found)


class _Touches:
    """Originals of documents reused one by one, whose last-seen to refresh, a few thousand
    (or a few MiB of them) at a time: each flush asks the store whether it holds them and
    refreshes those it does in ONE write transaction (ccr.touch_held: a prune running
    meanwhile either keeps them or has removed them first), then commits again, from the
    document's bytes held until then, any it does not (pruned, another store), or (`verify`,
    for --checksum, which trusts no metadata) any that does not read back verified. All
    before the manifest is published: only its rows name handles (the outputs never do).
    One transaction per flush, not per batch: the refresh only protects from `prune`.
    (Originals of sources reused whole are refreshed as _load_previous finds them.)"""

    def __init__(self, store: Store, verify: bool = False) -> None:
        self.store, self.verify = store, verify
        self.pending: dict[str, bytes] = {}  # digest -> the original's bytes
        self.size = 0

    def add(self, batch: list[Any], results: list[Result | None]) -> None:
        for item, result in zip(batch, results):
            if result is not None and result.touch and result.touch not in self.pending:
                self.pending[result.touch] = item.raw
                self.size += len(item.raw)
        if len(self.pending) >= TOUCH_BATCH or self.size >= TOUCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        digests = list(self.pending)
        absent = set(ccr.touch_held(self.store, digests))
        if self.verify:
            absent |= _unverified(self.store, [d for d in digests if d not in absent])
        records = [ccr.prepare(self.pending[d]) for d in digests if d in absent]
        if records:
            ccr.commit(self.store, records)  # merge_record: a tampered record is healed
        self.pending, self.size = {}, 0


def _unverified(store: Store, digests: Iterable[str]) -> set[str]:
    """Of these originals, those that do not read back verified (gone, tampered, truncated:
    the store's own verified read, decompressed and hashed)."""
    bad = set()
    for digest in digests:
        value = store.get(digest.encode("ascii"))
        try:
            if value is None:
                raise KeyError(digest)
            ccr.open_record(digest, value)
        except (KeyError, IntegrityError):
            bad.add(digest)
    return bad


class _Publisher:
    """The only writer of OUT: files by rename, streams renamed when complete."""

    def __init__(self, out: Path, tmp: Path, config: Config) -> None:
        self.out, self.tmp, self.config = out, tmp, config
        self.streams: dict[int, tuple[BinaryIO, Path]] = {}  # id(sink) -> (open temp file, its path)
        self.manifest_tmp = _manifest_temp(config.manifest_path, out, tmp)
        self.manifest: BinaryIO = open(self.manifest_tmp, "wb")
        self.manifest_sha256 = hashlib.sha256()
        self.manifest_bytes = 0
        self.rows = 0
        self.written: set[str] = set()
        self.folders: set[Path] = set()  # made (or found) under OUT
        # JSONL outputs: sha256 of what was written, first manifest row; then their records
        self.hashes: dict[int, tuple[Any, int]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.tallies: dict[int, _Tally] = {}  # id(sink) -> its rows so far (fingerprinted sinks)
        self.stats: dict[str, list[list[int] | None]] = {}  # rel -> [source, output] identity
        self.converge = converge.Converger(
            out, tmp, config.manifest_path, config.streams_path,
            [config.stats_path, *([config.changes] if config.changes else [])],
            config.keep_removed, want_lines=config.changes is not None)

    def __enter__(self) -> _Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        for fh, _ in self.streams.values():
            fh.close()
        self.manifest.close()
        self.converge.close()
        self.manifest_tmp.unlink(missing_ok=True)  # published by finish(), or abandoned

    def publish(self, batch: list[Any], results: list[Result | None], summary: Summary,
                previous: _Previous) -> None:
        # Rows of reused sources that lie one after another in the previous manifest are
        # copied in one go (a tree's unchanged files usually do).
        copying = _Span(rows=0)

        def copy() -> None:
            start = self.manifest_bytes
            for block in previous.rows_of(copying):
                self._block(block)
            if copying.rows:
                self.converge.carry(copying.start, copying.end, start, self.manifest_bytes,
                                    copying.rows)
            copying.rows = 0

        for item, result in zip(batch, results):
            with _as_output_error(self.out):
                if isinstance(item, ReusedStream):
                    self.records[item.rel] = dict(item.record, first_row=self.rows)
                    if item.stats is not None:
                        self.stats[item.rel] = item.stats
                    span = item.span
                    if span.rows and copying.rows and span.start == copying.end:
                        copying.end, copying.rows = span.end, copying.rows + span.rows
                    elif span.rows:
                        copy()
                        copying.start, copying.end, copying.rows = span.start, span.end, span.rows
                    self.rows += span.rows
                    summary.add_reused(item.record["totals"], item.record["errors"])
                    continue
                copy()
                if isinstance(item, SinkEnd):
                    self._close(item.sink)
                    continue
                assert result is not None
                if item.sink.fingerprint:
                    self.tallies.setdefault(id(item.sink), _Tally()).add(result.row)
                result.row["output"] = self._write(item, result)
                self._row(orjson.dumps(result.row))
            summary.add(result.row, result.touch is not None)
        with _as_output_error(self.out):
            copy()

    def _row(self, line: bytes) -> None:
        line += b"\n"
        self.manifest.write(line)
        self.manifest_sha256.update(line)
        self.manifest_bytes += len(line)
        self.rows += 1

    def _block(self, block: bytes) -> None:
        self.manifest.write(block)
        self.manifest_sha256.update(block)
        self.manifest_bytes += len(block)

    def _write(self, doc: Document, result: Result) -> dict[str, Any] | None:
        sink = doc.sink
        if result.data is None and doc.spill is None:
            return None  # unreadable: nothing to copy
        if sink.kind == "file":
            return self._write_file(doc, result)
        fh, _ = self._stream(sink)
        hashed = self.hashes.get(id(sink))
        if sink.count and sink.kind == "array":
            fh.write(b",")
            if hashed:
                hashed[0].update(b",")
        start = fh.tell()
        copied = self._emit(fh, doc, result, hashed[0] if hashed else None)
        if copied is not None:
            result.row["out_sha256"] = copied
        length = fh.tell() - start
        if sink.kind == "jsonl":
            fh.write(b"\n")
            if hashed:
                hashed[0].update(b"\n")
        sink.count += 1
        return {"path": sink.rel, "offset": start, "length": length}

    def _write_file(self, doc: Document, result: Result) -> dict[str, Any]:
        target = self.out / doc.sink.rel
        if result.in_place is not None and _identity_or_none(target) == result.in_place:
            # its own output, hashed intact when read and unchanged since: nothing to write
            self._file_record(doc, result.row["sha256"], result.row["out_sha256"])
            self._stat(doc.sink, target, result.in_place)
            return {"path": doc.sink.rel}
        temp = self.tmp / f"file-{len(self.written)}"
        with open(temp, "wb") as fh:
            copied = self._emit(fh, doc, result)
            size = fh.tell()
        self._folder(target.parent)
        self.converge.note_output(doc.sink.rel)
        os.replace(temp, target)
        self.written.add(doc.sink.rel)
        self._stat(doc.sink, target)
        if copied is None:
            self._file_record(doc, result.row["sha256"], result.row["out_sha256"])
        else:  # copied through as is: the source's bytes are the output's
            result.row["out_sha256"] = copied
            self._file_record(doc, copied, copied, size)
        return {"path": doc.sink.rel}

    def _file_record(self, doc: Document, source_sha256: str | None, output_sha256: str | None,
                     size: int | None = None) -> None:
        """A catalog file is its one document: the file's sha256 is the document's."""
        if doc.sink.fingerprint and source_sha256 and output_sha256:
            self._record(doc.sink, len(doc.raw or b"") if size is None else size, source_sha256,
                         output_sha256, self.rows, 1)
        self.tallies.pop(id(doc.sink), None)

    def _record(self, sink: Sink, size: int, source_sha256: str, output_sha256: str,
                first_row: int, rows: int) -> None:
        """A file source's fingerprint, for the next run (see _candidate, _intact_files)."""
        tally = self.tallies.pop(id(sink), None) or _Tally()
        if tally.totals["documents"] != rows:
            return  # cannot be: its rows are its documents'
        self.records[sink.rel] = {"source": sink.source, "source_size": size,
                                  "source_sha256": source_sha256, "output_sha256": output_sha256,
                                  "first_row": first_row, "rows": rows,
                                  "totals": tally.totals, "errors": tally.errors}

    def _folder(self, folder: Path) -> None:
        """mkdir -p, once per folder (a tree of thousands of files has a few hundred)."""
        if folder not in self.folders:
            folder.mkdir(parents=True, exist_ok=True)
            self.folders.add(folder)

    def _stat(self, sink: Sink, target: Path, identity: list[int] | None = None) -> None:
        """The stat cache's entry for a source whose identity settled when it was opened, and
        its output (`identity`, when already known)."""
        if sink.fingerprint and sink.source_stat is not None:
            self.stats[sink.rel] = [sink.source_stat, identity or fsio.identity(os.stat(target))]

    @staticmethod
    def _emit(fh: BinaryIO, doc: Document, result: Result, digest: Any = None) -> str | None:
        """Write a document's output (also into `digest`); if it is copied through from its
        spill, the sha256 of what was copied (its row's out_sha256: what tells a later run
        whether it changed)."""
        if result.data is not None:
            fh.write(result.data)
            if digest is not None:
                digest.update(result.data)
            return None
        assert doc.spill is not None
        copied = hashlib.sha256()
        with open(doc.spill, "rb") as src:
            while chunk := src.read(1 << 20):
                fh.write(chunk)
                copied.update(chunk)
                if digest is not None:
                    digest.update(chunk)
        if doc.spill_owned:
            doc.spill.unlink(missing_ok=True)
        return copied.hexdigest()

    def _stream(self, sink: Sink) -> tuple[BinaryIO, Path]:
        key = id(sink)
        if key not in self.streams:
            temp = self.tmp / f"stream-{len(self.written)}-{len(self.streams)}"
            fh = open(temp, "wb")
            fh.write(sink.prefix)
            self.streams[key] = (fh, temp)
            if sink.fingerprint:
                self.hashes[key] = (hashlib.sha256(sink.prefix), self.rows)
        return self.streams[key]

    def _close(self, sink: Sink) -> None:
        if sink.kind == "file":
            return
        fh, temp = self._stream(sink)
        fh.write(sink.suffix)
        fh.close()
        del self.streams[id(sink)]
        target = self.out / sink.rel
        self._folder(target.parent)
        self.converge.note_output(sink.rel)
        os.replace(temp, target)
        self.written.add(sink.rel)
        self._stat(sink, target)
        hashed = self.hashes.pop(id(sink), None)
        if hashed is not None:
            hashed[0].update(sink.suffix)
        if hashed is not None and sink.source_sha256 is not None:
            self._record(sink, sink.source_size, sink.source_sha256, hashed[0].hexdigest(),
                         hashed[1], self.rows - hashed[1])

    def finish(self, summary: Summary) -> None:
        with _as_output_error(self.out):
            self.manifest.flush()
            os.fsync(self.manifest.fileno())
            self.manifest.close()
            # stale outputs go before the manifest that no longer names them is published
            changes = self.converge.settle(self.manifest_tmp, self.written | self.records.keys(),
                                           summary.documents)
            os.replace(self.manifest_tmp, self.config.manifest_path)
            fsio.fsync_dir(self.config.manifest_path.parent)  # the rename too
            self.converge.published(changes, self.config.changes)
        summary.changes = changes
        # After the manifest, and tied to it by its sha256 (a stale one is ignored), the
        # fingerprint, then the stat cache tied to the fingerprint. Only shortcuts for the
        # next run: failing to write them does not fail this one, and they are not fsync'd
        # (what they say is checked again before use; one lost costs the shortcut).
        paths = (self.config.streams_path, self.config.stats_path)
        try:
            if not self.records:
                for path in paths:
                    path.unlink(missing_ok=True)
                return
            fingerprint = orjson.dumps({
                "run_key": self.config.run_key, "max_bytes": self.config.max_bytes,
                "manifest_sha256": self.manifest_sha256.hexdigest(),
                "manifest_bytes": self.manifest_bytes, "streams": self.records,
            })
            fsio.atomic_write(paths[0], fingerprint, durable=False)
            # Outputs are not fsync'd: their identities hold only within this boot (after a
            # power loss an output may be whole in name and size, not in bytes). An output
            # changed later in the tick of its ctime would keep its identity: kept only those
            # whose ctime is older than the file system's clock now.
            boot = fsio.boot_id()
            if boot is None:
                paths[1].unlink(missing_ok=True)
                return
            now = fsio.fs_now_ns(self.tmp)
            stats = {rel: s for rel, s in self.stats.items()
                     if rel in self.records and s[0] is not None and s[1][4] < now}
            fsio.atomic_write(paths[1], orjson.dumps({
                "fingerprint_sha256": hashlib.sha256(fingerprint).hexdigest(), "boot_id": boot,
                "stats": stats,
            }), durable=False)
        except OSError:
            for path in paths:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)


def _identity_or_none(path: Path) -> list[int] | None:
    try:
        return fsio.identity(os.stat(path))
    except OSError:
        return None


def _manifest_temp(target: Path, out: Path, tmp: Path) -> Path:
    """Where the manifest is written before its rename: on the target's file system."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.resolve().parent.is_relative_to(out.resolve()):
        return tmp / "manifest.jsonl"  # cleared with the rest of a killed run's debris
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    return target.parent / f".{target.name}.{os.getpid()}.tmp"


@contextlib.contextmanager
def _as_output_error(out: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if isinstance(exc, OutputError):
            raise
        raise OutputError(f"{_user_path(exc, out)}: cannot write output: {exc.strerror or exc}") from exc


def _user_path(exc: OSError, out: Path) -> object:
    """What an error names: the output it was about (a rename's target), never a temp file of
    ours (the user never asked for it), else OUT."""
    for name in (exc.filename2, exc.filename):
        if name is not None and TMP_DIR not in Path(os.fsdecode(name)).parts:
            return name
    return out
