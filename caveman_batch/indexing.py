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
again, so the index never misses a catalog that the outputs hold. The tool records of the
catalogs kept are refreshed as their catalogs' originals are (`keep_records`): `prune`
never drops a handle a search hands out while the catalog is still in SRC.

Server ids: a catalog file's path relative to its source, without its extension (with
several sources, under the source's name, as in OUT); a catalog inside a JSONL or
registry file: that file's id, then "/" and the catalog's own name (its wrapper's
"server" or "name"), else its line or item number. A second catalog of the same id in
one run gets "@line" (or "@item") added.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import ccr, toolspans
from .catalog import Located
from .embedding import Embedder
from .errors import IntegrityError, UnknownHandleError
from .store import Store
from .toolsearch import ToolDoc, ToolIndex
from .toolspans import index_tools

# What a worker sends back per document: None (no tools), or (label, tools) with each tool
# (name, digest, record value, original length, definition, search fields).
WorkerTools = tuple[str | None, list[tuple[str, str, bytes, int, str, dict[str, str]]]] | None


# Batches handed to the index's writer thread and not yet written, at most (beyond this,
# add waits: a writer slower than the workers must not hold the whole run in memory).
_IN_FLIGHT = 2
# Tool records of kept catalogs refreshed (or found absent) per store transaction: as many
# as the pipeline's presence checks (one fsync'd transaction for a 50 MB registry's 32k).
_TOUCH_BATCH = 32768


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
        found = None if raw is None else index_tools(raw, out, located)
        if found is None:
            self._docs.append(None)
            return
        label, found_tools = found
        value = ccr.span_value_of(digest)
        self._docs.append((label, [(name, sha256, value(length, start), length, definition, fields)
                                   for name, sha256, start, length, definition, fields
                                   in found_tools]))

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
    committed: set[str] = field(default_factory=set)  # digests of the tool records committed
    kept: set[str] = field(default_factory=set)  # servers kept as indexed (reused documents)
    rewritten: set[str] = field(default_factory=set)  # servers (re)written this run
    _by_file: dict[str, list[str]] | None = None  # source file -> its catalogs' servers, as opened
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
        self.kept.add(known[0])
        return True

    def file_current(self, path: str, sha256: str) -> bool:
        """Whether every catalog of this source file, as it is, is indexed."""
        return self.files.get(path) == sha256

    def keep_file(self, path: str) -> None:
        """A file source reused whole: its catalogs stay."""
        if self._by_file is None:  # one map, not a scan of every catalog per file kept
            self._by_file = {}
            for server, _, origin in self.known.values():
                if origin is not None:
                    self._by_file.setdefault(origin, []).append(server)
        for server in self._by_file.get(path, ()):
            self._keep(server)
            self.kept.add(server)

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
            self.rewritten.add(server)
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

    def keep_records(self, store: Store, verify: bool = False) -> set[str]:
        """The per-tool records of the catalogs kept as indexed, as their catalogs' own
        originals are on reuse: their last-seen refreshed (so `prune` keeps the handles
        a search hands out), and any the store lacks (pruned by an older version, another
        store) or, with `verify`, any that does not read back verified, committed again
        from its catalog's original (in the store: reuse made sure of it). Returns the
        servers whose tools could not be given back that way: they leave the index (the
        next run indexes them again)."""
        kept = self.kept - self.rewritten
        if not kept:
            return set()
        handles = self.index.handles(kept)
        absent: set[str] = set()
        digests = sorted({h[len(ccr.HANDLE_PREFIX):] for hs in handles.values() for h in hs})
        for at in range(0, len(digests), _TOUCH_BATCH):
            chunk = digests[at:at + _TOUCH_BATCH]
            missing = set(ccr.touch_held(store, chunk))
            if verify:
                missing |= ccr.unverified(store, [d for d in chunk if d not in missing])
            absent |= missing
        if not absent:
            return set()
        catalogs = {server: sha for server, sha, _ in self.known.values()}
        lost = set()
        for server in sorted(handles):
            wanted = {h[len(ccr.HANDLE_PREFIX):] for h in handles[server]} & absent
            if wanted and not self._commit_again(store, catalogs.get(server), wanted):
                lost.add(server)
        return lost

    @staticmethod
    def _commit_again(store: Store, catalog: str | None, wanted: set[str]) -> bool:
        """The tool records `wanted` committed again from their catalog's original."""
        try:
            raw = None if catalog is None else ccr.recover(store, ccr.make_handle(catalog))
        except (UnknownHandleError, IntegrityError):
            raw = None
        spans = None if raw is None else toolspans.tool_spans(raw)
        if raw is None or spans is None:
            return False
        records = {}
        for a, b in spans:
            digest = ccr.digest_of(raw[a:b])
            if digest in wanted and digest not in records:
                records[digest] = ccr.prepare(raw[a:b])
        if records:
            ccr.commit(store, list(records.values()))
        return records.keys() == wanted

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

    def finish(self, files: dict[str, str], store: Store, verify: bool = False) -> None:
        """The run is over: the tool records of the catalogs kept are refreshed (see
        keep_records), catalogs not seen go, and `files` (path -> sha256 of the file
        sources this run read or reused whole) are the wholly indexed ones."""
        self._drain()
        lost = self.keep_records(store, verify)
        if lost:
            paths = {origin for server, _, origin in self.known.values() if server in lost}
            files = {path: sha for path, sha in files.items() if path not in paths}
        gone = sorted((set(self.index.servers()) - self.seen) | lost)
        self.index.apply([], gone, files=files)
        if gone or self.written:
            self.index.optimize()
