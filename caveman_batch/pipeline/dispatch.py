"""Dispatch: each batch's documents to a worker (pure: bytes in, bytes and numbers out),
inline or on the process pool, results read back in input order from a bounded window."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Final

from .. import ccr, indexing, tokens
from ..catalog import Options, compress
from ..inputs import Document, Item
from .incremental import _Previous, _reuse
from .model import Config, Result

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
    needs of its tools, see indexing.work)."""
    out = []
    for raw in raws:
        data, result = compress(raw, options)
        fields = (*(getattr(result, name) for name in _RESULT_FIELDS),
                  hashlib.sha256(data).hexdigest())  # here, not in the busy parent
        record = ccr.prepare(raw, result.content_type)
        done = (data, fields, record.digest, record.value, record.original_length)
        if index:
            done += (indexing.work(raw, data) if not result.broken else None,)
        out.append(done)
    return out


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
