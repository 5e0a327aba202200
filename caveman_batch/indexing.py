"""`compress --index PATH`: the pipeline's side of the tool-search index.

Workers compute, per document, what the index needs (`BatchWork`: the catalog's label,
and per tool its exact original bytes as a CCR span record, which names the catalog's
own record and where the tool lies in it (no zstd frame per tool), its compressed
definition and its search text: see toolspans). The per-tool records are committed after
the catalogs' own, a few batches' worth in one transaction (`add`), then those batches'
catalogs are written to the index in one transaction, in input order, both by a process
of its own (indexwriter: the index is written while the next batches are compressed; the
records are committed here when that process cannot open the store);
at the end (`finish`) it removes the catalogs this run's inputs no longer hold and
records which source files are wholly indexed. The index never names a tool
whose record is not committed. A crash leaves the index as its last transaction did;
the next run repairs it: a catalog is rewritten unless the index holds it, from the same
source, with the same sha256.

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
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import ccr, toolspans
from .catalog import Located
from .embedding import load_embedder
from .errors import IntegrityError, UnknownHandleError
from .indexwriter import IndexWriter, LocalWriter, new_records
from .store import Store, shared_store
from .toolsearch import ToolIndex
from .toolspans import index_tools

# What a worker sends back per document: None (no tools), or (label, tools) with each tool
# (name, digest, record value, original length, definition, search fields).
WorkerTools = tuple[str | None, list[tuple[str, str, bytes, int, str, dict[str, str]]]] | None


# Transactions handed to the index's writer and not yet written, at most (beyond this,
# add waits: a writer slower than the workers must not hold the whole run in memory).
_IN_FLIGHT = 2
# Tools whose records are committed in one transaction of the store, and whose catalogs
# in one of the index (see IndexBuilder.add), at least: a few batches' worth. What is
# left to write when the last batch is in waits for its writer: the bench registry's run
# waited 0.37 s at 8,192 tools, 0.21 s at 4,096, 0.14 s at 2,048 (under load).
_TOOLS_PER_COMMIT = 2048
# A build that wrote more transactions than this (each leaves a segment of the full-text
# index, unmerged: see ToolIndex.defer_merges) ends with an `optimize` (one segment);
# fewer are searched as fast (the 50 MB bench registry's 25, or 49 at 1,024 tools a
# transaction: the same p50 as one) and the optimize would rewrite the whole index (0.13 s).
_OPTIMIZE_AFTER = 64
# Tool records of kept catalogs refreshed (or found absent) per store transaction: as many
# as the pipeline's presence checks (one fsync'd transaction for a 50 MB registry's 32k).
_TOUCH_BATCH = 32768


def clear_cache() -> None:
    """Empty the per-process caches (as a new process has them)."""
    toolspans.clear_cache()


class BatchWork:
    """Pure: the index's part of one batch's work, document by document (`add`), then
    all of it (`finish`). A tool's record is a span of its catalog's (ccr.prepare_span):
    its sha256 and where it lies, a few dozen bytes committed after the catalog's."""

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
    committed: set[str] = field(default_factory=set)  # digests of the tool records committed
    kept: set[str] = field(default_factory=set)  # servers kept as indexed (reused documents)
    rewritten: set[str] = field(default_factory=set)  # servers (re)written this run
    _by_file: dict[str, list[str]] | None = None  # source file -> its catalogs' servers, as opened
    # the index's one writer: a process of its own (indexwriter), so that its work overlaps
    # the next batches'; a thread of ours hands it the transactions, in submission order,
    # each after the records of the tools it names are committed
    store_url: str | None = None  # the store the writer commits the tool records to, if any
    _sink: Any = None  # an IndexWriter; a LocalWriter for an index of ":memory:"
    _writer: ThreadPoolExecutor | None = None
    _pending: deque[Future[None]] = field(default_factory=deque)
    # catalogs to write (their tools' records not committed yet), and the tools of
    # catalogs recomputed but indexed as they are (their records only)
    _held: list[Any] = field(default_factory=list)
    _extra: list[Any] = field(default_factory=list)
    _held_tools: int = 0
    _writes: int = 0  # transactions this run handed the writer
    _deferred: bool = False  # FTS5's merges deferred by this run

    @classmethod
    def open(cls, path: Path, embed: bool = False, store_url: str | None = None) -> IndexBuilder:
        """The builder of the index at `path` (created if need be); with `embed`, its
        writer embeds the tools with the default embedder (embedding.load_embedder). With
        the `store_url` of a store other processes can open, the writer commits the tool
        records there itself."""
        if os.fspath(path) == ":memory:":  # no other process can reach it: written here
            index = ToolIndex.open(path, embedder=load_embedder(required=True) if embed else None)
            return cls(index, index.sources(), index.files(), _sink=LocalWriter(index))
        index = ToolIndex.open(path)  # the parent's: it reads; the writer process writes
        if store_url is not None and not shared_store(store_url):
            store_url = None
        return cls(index, index.sources(), index.files(), store_url=store_url,
                   _sink=IndexWriter(index.location, embed))

    def close(self) -> None:
        """Wait for the writer (its errors are finish's to raise), then close the index."""
        try:
            wait(self._pending)
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
            self._sink.close()
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

    def add(self, found: Sequence[tuple[Any, str | None, WorkerTools]], store: Store) -> None:
        """One batch's computed documents, (document, its sha256, worker tools), in input
        order, once their catalogs' originals are committed: their tools' records are
        committed, and the batch's catalogs written in one index transaction after them.

        Both wait for a few batches' worth (_TOOLS_PER_COMMIT tools): tool digests are
        spread all over the store's B-tree, and a commit per batch rewrote most of its
        leaves each time (32k records in 81 transactions: 0.5 s; in one: 0.13 s); and
        the index's commits cost less, fewer."""
        replace = []
        for doc, digest, tools in found:
            if tools is None:
                continue
            self._held_tools += len(tools[1])
            if digest is None:
                self._extra.append(tools[1])
                continue
            key = source_key(doc.source)
            server = self._server_id(doc, tools[0])
            known = self.known.get(key)
            self._keep(server)
            if known is not None and known[0] == server and known[1] == digest:
                self._extra.append(tools[1])  # already indexed as it is: its records only
                continue
            path = doc.source.get("path")
            replace.append((server, tools[1], digest, key, path if isinstance(path, str) else None))
            self.rewritten.add(server)
            self.known[key] = (server, digest, path if isinstance(path, str) else None)
        self._held.extend(replace)
        if self._held_tools >= _TOOLS_PER_COMMIT:
            self._flush(store)

    def _flush(self, store: Store) -> None:
        """The tool records held, committed in one transaction (each once a run: see
        indexwriter.new_records); then the catalogs that name them written, as one
        transaction of the index. A writer process that can reach the store (`store_url`)
        commits the records itself, first: off this process's hands, and still before the
        index names them."""
        lists = [tools for _, tools, *_ in self._held] + self._extra
        if self.store_url is None:
            records = new_records(lists, self.committed)
            if records:
                ccr.commit(store, records)
                self.committed.update(record.digest for record in records)
            if self._held:
                self._write(self._held)
        elif lists:  # (committed: on its way, and the run fails if it does not get there)
            self.committed.update(tool[1] for tools in lists for tool in tools)
            self._write(self._held, self._extra)
        self._held, self._extra, self._held_tools = [], [], 0

    def _write(self, replace: list[Any], extra: list[Any] | None = None) -> None:
        """One transaction for the writer thread; raises here the error of any done. The
        first that writes catalogs defers FTS5's merges (finish restores them, or optimizes)."""
        if replace and not self._deferred:
            self._submit(self._sink.defer_merges)
            self._deferred = True
        if self.store_url is not None:
            self._submit(self._sink.apply, replace, extra=extra or [], store_url=self.store_url)
        else:
            self._submit(self._sink.apply, replace)
        self._writes += 1
        while self._pending and (self._pending[0].done() or len(self._pending) > _IN_FLIGHT):
            self._pending.popleft().result()

    def _submit(self, call: Any, *args: Any, **kwargs: Any) -> None:
        """A call for the writer thread, after those submitted before it."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="index-writer")
        self._pending.append(self._writer.submit(call, *args, **kwargs))

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
        # (not those this run committed: they are this run's, and may still be on their way)
        digests = sorted({h[len(ccr.HANDLE_PREFIX):] for hs in handles.values() for h in hs}
                         - self.committed)
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
        sources this run read or reused whole) are the wholly indexed ones.

        The refresh and the reads run while the writer writes the last catalogs (they
        concern only catalogs kept, and every catalog written is one seen); what they
        decide is written after those, and the run waits for it all."""
        self._flush(store)
        if isinstance(self._sink, LocalWriter):  # one connection: no reads beside its writes
            self._drain()
        lost = self.keep_records(store, verify)
        if lost:
            paths = {origin for server, _, origin in self.known.values() if server in lost}
            files = {path: sha for path, sha in files.items() if path not in paths}
        gone = sorted((set(self.index.servers()) - self.seen) | lost)
        self._submit(self._sink.apply, [], gone, files=files)
        if self._writes > _OPTIMIZE_AFTER:
            self._submit(self._sink.optimize)
        elif self._deferred or gone:  # (gone: a build killed earlier may have left them deferred)
            self._submit(self._sink.merge_as_usual)
        self._drain()
