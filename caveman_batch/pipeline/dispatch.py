"""Dispatch: each batch's documents to the executor (see executors), results read back in
input order from a bounded window; what needs no worker (reused, oversize, unreadable)
known here."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from .. import ccr
from ..inputs import Document, Item
from .executors import Executor
from .incremental import _Previous, _reuse
from .model import TMP_DIR, Config, Result
from .worker import _RESULT_FIELDS, work


def _dispatch(batches: Iterable[list[Any]], config: Config, previous: _Previous,
              executor: Executor) -> Iterator[tuple[list[Item], list[Result | None]]]:
    """(batch, results) in input order, at most executor.limit batches in flight (a batch
    is submitted as the oldest comes back, never ahead)."""
    window: deque[tuple[list[Item], list[Result | None], Future[Any] | list[Any], list[int]]] = deque()
    index = config.index is not None
    spool = f"{config.out}/{TMP_DIR}/spool-"  # temp files the workers may write outputs to
    for number, batch in enumerate(batches):
        results, todo = _plan(batch, config, previous)
        raws = [batch[i].raw for i in todo]
        if not raws:
            window.append((batch, results, work(config.options, raws, index), todo))
        else:
            # a catalog file's output may be written by its worker (a stream's is the parent's)
            temps = [f"{spool}{number}/{i}" if batch[i].sink.kind == "file" else None
                     for i in todo]
            window.append((batch, results, executor.submit(config.options, raws, index, temps), todo))
        # in order: the oldest as soon as it needs no worker, else once the window is full
        while window and (len(window) >= executor.limit or not isinstance(window[0][2], Future)):
            yield _settle(window.popleft(), config, executor)
    while window:
        yield _settle(window.popleft(), config, executor)


def _settle(entry: Any, config: Config,
            executor: Executor) -> tuple[list[Item], list[Result | None]]:
    batch, results, pending, todo = entry
    done = executor.result(pending) if isinstance(pending, Future) else pending
    now = ccr.now_ms() if executor.other_clocks else None
    for i, (data, fields, digest, value, length, *tools) in zip(todo, done):
        result = dict(zip(_RESULT_FIELDS, fields))
        result["out_sha256"] = fields[-1]
        record = ccr.Prepared(digest, value, length)
        if now is not None:  # stamped by this host's clock, not a worker's
            record = ccr.stamped(record, now)
        spooled = data if type(data) is str else None  # written by its worker (spooled_work)
        if spooled is not None:
            data = None
        results[i] = Result(data, _row(batch[i], result, digest, data, config), record,
                            tools=tools[0] if tools else None, spooled=spooled)
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
