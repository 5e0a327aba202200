"""Sources: the documents of every source, an unchanged file source as one ReusedStream
(and unchanged ones one after another, told so by the stat cache, as one ReusedRun),
grouped into batches."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from ..inputs import Document, Item, iter_entry
from . import incremental
from .incremental import (
    ReusedRun,
    ReusedStream,
    _candidate,
    _intact,
    _intact_files,
    _Previous,
    _unchanged_run,
)
from .model import Config

BATCH_DOCS: Final = 64
BATCH_BYTES: Final = 4 << 20
# A tree's catalog files are small (a few KB each): a batch of nothing but catalog files
# goes on past BATCH_DOCS until it holds FILES_BATCH_BYTES (or FILES_BATCH_DOCS), so that
# the fsync'd commit each batch ends with, and its trip to a worker, are not paid every 64
# small files (a tree of 16,560 files: 110 commits, not 260). A batch holding a stream's
# documents closes at BATCH_DOCS: a pipe's are committed and published as they come.
FILES_BATCH_BYTES: Final = 1 << 20
FILES_BATCH_DOCS: Final = 1024


def _batches(items: Iterator[Item]) -> Iterator[list[Item]]:
    batch: list[Item] = []
    docs = size = 0
    files_only = True  # every document so far is a catalog file's
    for item in items:
        batch.append(item)
        if isinstance(item, Document):
            docs += 1
            size += item.size
            files_only = files_only and item.sink.kind == "file"
        elif isinstance(item, (ReusedStream, ReusedRun)):
            docs += item.documents  # nothing to compute, but progress goes on
        if size >= BATCH_BYTES or docs >= FILES_BATCH_DOCS or (
                docs >= BATCH_DOCS and (not files_only or size >= FILES_BATCH_BYTES)):
            yield batch
            batch, docs, size, files_only = [], 0, 0, True
    if batch:
        yield batch


# The fingerprint check of a large source (hashing it and its output) runs on two
# threads, up to _CHECK_AHEAD sources ahead of the one being yielded; a small source is
# checked inline when its turn comes (measured: handing small files to threads, even in
# groups, made a 3,449-file rerun slower, the threads and the reader contending for the GIL).
_CHECK_AHEAD: Final = 4
_CHECK_LARGE: Final = 1 << 20


def _items(found: Any, config: Config, previous: _Previous, tmp: Path) -> Iterator[Any]:
    """The documents of every source; an unchanged file source as one ReusedStream, and
    those one after another that the stat cache tells unchanged as one ReusedRun.

    Whether a fingerprinted source is unchanged: the stat cache says so (_unchanged_run), or
    else hashing it and its output does (_intact; not their times, so a file edited with
    its mtime set back is still seen).
    """
    if not previous.streams:
        for entry in found.entries:
            yield from iter_entry(entry, config.max_bytes, tmp)
        return
    Pending = tuple[Any, ReusedStream | ReusedRun | None, list[tuple[str, int | None]],
                    list[Future[tuple[str, os.stat_result] | None]] | None]
    pending: deque[Pending] = deque()
    entries: list[tuple[str | None, str, str]] = found.entries
    at = 0
    with ThreadPoolExecutor(2, thread_name_prefix="caveman-check") as pool:
        def ahead() -> None:
            nonlocal at
            while len(pending) < _CHECK_AHEAD and at < len(entries):
                run = _unchanged_run(entries, at, config, previous)
                if run is not None:
                    pending.append((None, run, [], None))  # known: nothing to hash
                    at += len(run.rels)
                    continue
                entry = entries[at]
                at += 1
                reused = _candidate(entry, config, previous)
                files = [] if reused is None else _intact_files(reused, config)
                jobs = ([pool.submit(incremental._file_sha256, *f) for f in files]
                        if files and (files[0][1] or 0) >= _CHECK_LARGE else None)
                pending.append((entry, reused, files, jobs))

        ahead()
        while pending:
            entry, reused, files, jobs = pending.popleft()
            ahead()
            if isinstance(reused, ReusedRun):
                yield reused
            elif reused is not None and _intact(reused, files, jobs):
                yield reused
            else:
                yield from iter_entry(entry, config.max_bytes, tmp)
