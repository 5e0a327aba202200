"""`compress --index PATH`: the pipeline's side of the tool-search index.

Workers compute, per document, what the index needs (`BatchWork`: the catalog's label,
and per tool its exact original bytes as a CCR span record, which names the catalog's
own record and where the tool lies in it (no zstd frame per tool), its compressed
definition and its search text: see toolspans). The parent, the only writer, commits
the per-tool records in the same transaction as the catalog's own (`records`), then writes the batch's catalogs to the index in one
transaction (`add`), in input order, on a thread of its own (SQLite releases the GIL:
the index is written while the next batch is compressed); at the end (`finish`) it
removes the catalogs this run's inputs no longer hold and records which source files
are wholly indexed. A crash leaves the index as its last transaction did; the next run
repairs it: a catalog is rewritten unless the index holds it, from the same source,
with the same sha256.

Reuse: an incremental run reuses a document (or a whole file source) only if the index
is current for it too (`current`, `file_current`); otherwise the document is computed
again, so the index never misses a catalog that the outputs hold.

Server ids: a catalog file's path relative to its source, without its extension (with
several sources, under the source's name, as in OUT); a catalog inside a JSONL or
registry file: that file's id, then "/" and the catalog's own name (its wrapper's
"server" or "name"), else its line or item number. A second catalog of the same id in
one run gets "@line" (or "@item") added.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import ccr
from .catalog import Located
from .embedding import Embedder
from .toolsearch import ToolDoc, ToolIndex
from . import toolspans
from .toolspans import index_entries

# What a worker sends back per document: None (no tools), or (label, tools) with each tool
# (name, digest, record value, original length, definition, search fields).
WorkerTools = tuple[str | None, list[tuple[str, str, bytes, int, str, dict[str, str]]]] | None


# Batches handed to the index's writer thread and not yet written, at most (beyond this,
# add waits: a writer slower than the workers must not hold the whole run in memory).
_IN_FLIGHT = 2


def clear_cache() -> None:
    """Empty the per-process caches (as a new process has them)."""
    toolspans.clear_cache()


class BatchWork:
    """Pure: the index's part of one batch's work, document by document (`add`), then
    all of it (`finish`). A tool's record is a span of its catalog's (ccr.prepare_span):
    its sha256 and where it lies, a few dozen bytes committed with the catalog's."""

    def __init__(self) -> None:
        self._docs: list[WorkerTools] = []

    def add(self, raw: bytes | None, out: bytes, digest: str,
            located: Located | None = None) -> None:
        """One document (raw None: a broken one, not indexed), in batch order, with the
        digest of its own record (the one its tools' records lie in) and where compress
        found its tools (catalog.compress_located)."""
        found = None if raw is None else index_entries(raw, out, located)
        if found is None:
            self._docs.append(None)
            return
        label, entries = found
        tools = []
        for entry in entries:
            original = entry.original
            record = ccr.prepare_span(hashlib.sha256(original).hexdigest(), len(original),
                                      digest, entry.start)
            tools.append((entry.name, record.digest, record.value, record.original_length,
                          entry.definition, entry.fields))
        self._docs.append((label, tools))

    def finish(self) -> list[WorkerTools]:
        """What the index needs of each document added, in order."""
        return self._docs


def _stem(rel: str) -> str:
    base, ext = os.path.splitext(rel)
    return base if ext.lower() in (".json", ".jsonl") else rel


def source_key(source: dict[str, object]) -> str:
    """A document's source as one string (as the manifest names it)."""
    return orjson.dumps(source, option=orjson.OPT_SORT_KEYS).decode("utf-8")


@dataclass
class IndexBuilder:
    """The parent's writer of the index during one run."""

    index: ToolIndex
    known: dict[str, tuple[str, str | None, str | None]]  # source -> (server, sha256, path)
    files: dict[str, str]  # path -> sha256 of wholly indexed source files
    seen: set[str] = field(default_factory=set)  # servers this run keeps
    used: set[str] = field(default_factory=set)  # server ids given out this run
    written: bool = False  # some catalog was (re)written this run
    reused: set[str] = field(default_factory=set)  # servers kept as indexed, not computed
    committed: set[str] = field(default_factory=set)  # digests of the tool records committed
    # the index's one writer: a thread, so that SQLite's work (it releases the GIL) overlaps
    # the next batches'; its transactions, in submission order, each after its originals
    _writer: ThreadPoolExecutor | None = None
    _pending: deque[Future[None]] = field(default_factory=deque)

    @classmethod
    def open(cls, path: Path, embedder: Embedder | None = None) -> IndexBuilder:
        index = ToolIndex.open(path, embedder=embedder)
        return cls(index, index.sources(), index.files())

    def close(self) -> None:
        """Wait for the writer (its errors are finish's to raise), then close the index."""
        try:
            wait(self._pending)
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
            self.index.close()

    # reuse -------------------------------------------------------------------------

    def current(self, source: dict[str, object], digest: str) -> bool:
        """Whether the index holds this document's catalog as read from this source; if
        so it is kept."""
        known = self.known.get(source_key(source))
        if known is None or known[1] != digest:
            return False
        self._keep(known[0])
        self.reused.add(known[0])
        return True

    def file_current(self, path: str, sha256: str) -> bool:
        """Whether every catalog of this source file, as it is, is indexed."""
        return self.files.get(path) == sha256

    def keep_file(self, path: str) -> None:
        """A file source reused whole: its catalogs stay."""
        for server, _, origin in self.known.values():
            if origin == path:
                self._keep(server)
                self.reused.add(server)

    def _keep(self, server: str) -> None:
        self.seen.add(server)
        self.used.add(server)

    # writing -----------------------------------------------------------------------

    def records(self, found: Iterable[WorkerTools]) -> list[ccr.Prepared]:
        """The per-tool originals of a batch's documents, to commit with their own: each
        once, and none this run has committed already (a registry repeats its tools; a
        record committed is durable, and its last-seen is this run's already)."""
        records: dict[str, ccr.Prepared] = {}
        for tools in found:
            for _, digest, value, length, _, _ in tools[1] if tools is not None else ():
                if digest not in self.committed and digest not in records:
                    records[digest] = ccr.Prepared(digest, value, length)
        return list(records.values())

    def add(self, found: Sequence[tuple[Any, str | None, WorkerTools]]) -> None:
        """One batch's computed documents, (document, its sha256, worker tools), in input
        order: written in one transaction (after their originals are committed)."""
        replace = []
        for doc, digest, tools in found:
            if tools is None or digest is None:
                continue
            key = source_key(doc.source)
            server = self._server_id(doc, tools[0])
            known = self.known.get(key)
            self._keep(server)
            if known is not None and known[0] == server and known[1] == digest:
                continue  # already indexed as it is
            docs = [ToolDoc(server, name, ccr.make_handle(digest_), definition, fields)
                    for name, digest_, _, _, definition, fields in tools[1]]
            path = doc.source.get("path")
            replace.append((server, docs, digest, key, path if isinstance(path, str) else None))
            self.known[key] = (server, digest, path if isinstance(path, str) else None)
        if replace:
            self._write(replace)
            self.written = True

    def _write(self, replace: list[Any]) -> None:
        """One transaction for the writer thread; raises here the error of any done."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="index-writer")
            self._pending.append(self._writer.submit(self.index.defer_merges))  # finish optimizes
        self._pending.append(self._writer.submit(self.index.apply, replace))
        while self._pending and (self._pending[0].done() or len(self._pending) > _IN_FLIGHT):
            self._pending.popleft().result()

    def _drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def _server_id(self, doc: Any, label: str | None) -> str:
        sink = doc.sink
        if sink.kind == "file":
            server = _stem(sink.rel)
        else:
            where = doc.source.get("line", doc.source.get("item"))
            server = f"{_stem(sink.rel)}/{label or where}"
        if server in self.used:
            where = "@{}".format(doc.source.get("line", doc.source.get("item", len(self.used))))
            server += where
        return server

    def finish(self, files: dict[str, str]) -> None:
        """The run is over: catalogs not seen go, and `files` (path -> sha256 of the file
        sources this run read or reused whole) are the wholly indexed ones."""
        self._drain()
        gone = sorted(set(self.index.servers()) - self.seen)
        self.index.apply([], gone, files=files)
        if gone or self.written:
            self.index.optimize()

    def reused_tools(self) -> list[str]:
        """The digests of the tool records of the catalogs this run kept without computing
        them (after finish): their last-seen is to be refreshed, as their catalogs' are,
        or a prune of what the run did not see would drop records the index names."""
        return [handle[len(ccr.HANDLE_PREFIX):] for handle in self.index.handles(self.reused)]
