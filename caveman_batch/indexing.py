"""`compress --index PATH`: the pipeline's side of the tool-search index.

Workers compute, per document, what the index needs (`BatchWork`: the catalog's label,
and per tool its exact original bytes as a CCR span record, which names the catalog's
own record and where the tool lies in it (no zstd frame per tool), its compressed
definition and its search text: see toolspans). The per-tool records are committed after
the catalogs' own, a few batches' worth in one transaction (`added`), then those batches'
catalogs are written to the index in one transaction, in the order they got their server
ids (see below), both by a process
of its own (indexwriter: the index is written while the next batches are compressed; the
records are committed here when that process cannot open the store);
at the end (`finish`) it removes the catalogs this run's inputs no longer hold and
records which source files are wholly indexed, and what compressed the definitions (the
run's key). The index never names a tool
whose record is not committed. A crash leaves the index as its last transaction did;
the next run repairs it: a catalog is rewritten unless the index holds it, from the same
source, with the same sha256, compressed as this run compresses.

Reuse: an incremental run reuses a document (or a whole file source) only if the index
is current for it too (`current`, `file_current`); otherwise the document is computed
again, so the index never misses a catalog that the outputs hold. The tool records of the
catalogs kept are refreshed as their catalogs' originals are (`keep_records`): `prune`
never drops a handle a search hands out while the catalog is still in SRC.

Server ids: a catalog file's path relative to its source, without its .json or .jsonl
extension in any case (with
several sources, under the source's name, as in OUT); a catalog inside a JSONL or
registry file: that file's id, then "/" and the catalog's own name (its wrapper's
"server" or "name"), else its line or item number. A catalog reused as indexed, or
computed again and found indexed as it is (the same source, the same sha256: a run
without --incremental), keeps the id the index has for it. Every other catalog takes, in input order, the first that is
free of: its id, id@line (or id@item), then id@line@2, id@line@3, ... (a catalog file:
id, id@2, id@3, ...). Free: no catalog of this run has taken it, and the index does
not hold it for another catalog of this run's source files that the input has not come
to yet (that one may be reused, and then keeps it): the catalog that wants such an id
waits, its tools held, until the input comes to that one (or to its end), then takes
the id if that one was not reused, else goes on to its next (the catalogs after it do
not wait for it: they choose as they come). So the ids depend on the input, in
order, and on the previous index, never on the worker count or how far dispatch ran
ahead (which asks `current` ahead of the batches committed: it marks nothing), and no
two catalogs of a run share one.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import ccr, toolspans
from .catalog import Located
from .embedding import load_embedder
from .errors import IntegrityError, UnknownHandleError
from .indexwriter import IndexWriter, LocalWriter, commit_tool_records, new_records
from .store import Store, shared_store
from .toolsearch import ToolIndex
from .toolspans import (
    LocatedTools,
    WorkerTool,
    built_tools,
    index_tools,
    located_later,
    worker_tools,
)

# What a worker sends back per document: None (no tools), or (label, tools) with each tool
# (name, digest, record value, original length, definition, search fields), or the tools
# left for the index's writer to build (toolspans.LocatedTools).
WorkerTools = tuple[str | None, list[WorkerTool] | LocatedTools] | None


# Transactions handed to the index's writer and not yet written, at most (beyond this,
# _write waits: a writer slower than the workers must not hold the whole run in memory;
# catalogs waiting for an id are held apart, see "Server ids").
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
    its sha256 and where it lies, a few dozen bytes committed after the catalog's.

    `later`: the documents whose tools can be built from their bytes alone (see
    toolspans.located_later) are handed on as LocatedTools, built by the index's writer
    process (a run of one worker: the compressing process is the run's busiest)."""

    def __init__(self, later: bool = False) -> None:
        self._docs: list[WorkerTools] = []
        self._later = later

    def add(self, raw: bytes | None, out: bytes, digest: str,
            located: Located | None = None) -> None:
        """One document (raw None: a broken one, not indexed), in batch order, with the
        digest of its own record (the one its tools' records lie in) and where compress
        found its tools (catalog.compress_located)."""
        if raw is not None and self._later:
            left = located_later(raw, out, digest, located)
            if left is not None:
                self._docs.append(left)
                return
        found = None if raw is None else index_tools(raw, out, located)
        self._docs.append(None if found is None else (found[0], worker_tools(found[1], digest)))

    def finish(self) -> list[WorkerTools]:
        """What the index needs of each document added, in order."""
        return self._docs


def _digests(handles: dict[str, list[str]]) -> list[str]:
    """The digests of these servers' tool handles, each once, sorted."""
    return sorted({h[len(ccr.HANDLE_PREFIX):] for hs in handles.values() for h in hs})


def _order(wanting: _Wanting) -> int:
    return wanting.order


def _stem(rel: str) -> str:
    base, ext = os.path.splitext(rel)
    return base if ext.lower() in (".json", ".jsonl") else rel


def source_key(source: dict[str, object]) -> str:
    """A document's source as one string (as the manifest names it)."""
    return orjson.dumps(source, option=orjson.OPT_SORT_KEYS).decode("utf-8")


@dataclass(slots=True)
class _Wanting:
    """A computed catalog waiting for an id: the candidate it wants (the index holds it for
    a catalog the input has not come to yet), the ones after it, and what to write."""

    order: int  # its place in the input, among those computed
    server: str
    candidates: Iterator[str]
    tools: list[WorkerTool] | LocatedTools
    digest: str
    key: str
    path: str | None


def _candidates(server: str, where: object) -> Iterator[str]:
    """The ids a computed catalog may take, in order (see "Server ids")."""
    yield server
    if where is not None:
        server = f"{server}@{where}"
        yield server
    for n in itertools.count(2):
        yield f"{server}@{n}"


@dataclass
class IndexBuilder:
    """The parent's writer of the index during one run."""

    index: ToolIndex
    known: dict[str, tuple[str, str | None, str | None]]  # source -> (server, sha256, path)
    files: dict[str, str]  # path -> sha256 of wholly indexed source files
    seen: set[str] = field(default_factory=set)  # servers this run keeps
    used: set[str] = field(default_factory=set)  # server ids given out this run
    # digests of the tool records committed, or handed to the writer to commit (not those
    # of LocatedTools: the writer's to know, see keep_records)
    committed: set[str] = field(default_factory=set)
    kept: set[str] = field(default_factory=set)  # servers kept as indexed (reused documents)
    rewritten: set[str] = field(default_factory=set)  # servers (re)written this run
    _by_file: dict[str, list[tuple[str, str]]] | None = None  # source file -> its catalogs'
    # (server, source), as opened
    # ids the index holds for catalogs of this run's source files the input has not come to
    # (server -> source), and the computed catalogs waiting for one of them (by that source)
    _claims: dict[str, str] = field(default_factory=dict)
    _waiting: dict[str, list[_Wanting]] = field(default_factory=dict)
    _computed: int = 0  # computed catalogs given to add (their order)
    # the index's one writer: a process of its own (indexwriter), so that its work overlaps
    # the next batches'; it is handed the transactions at once (pipelined: IndexWriter),
    # in submission order, each after the records of the tools it names are committed
    # (or with the store to commit them to first)
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
    # what compresses this run's catalogs (its version and options), and whether the index's
    # definitions were made otherwise: then a catalog found indexed as it is is written
    # again all the same (its definitions are this run's), keeping its id
    compressor: str | None = None
    recompress: bool = False

    @classmethod
    def open(cls, path: Path, embed: bool = False, store_url: str | None = None,
             compressor: str | None = None) -> IndexBuilder:
        """The builder of the index at `path` (created if need be); with `embed`, its
        writer embeds the tools with the default embedder (embedding.load_embedder). With
        the `store_url` of a store other processes can open, the writer commits the tool
        records there itself. `compressor`: what compresses this run's catalogs (the
        run's key), recorded at its end; an index whose last build said otherwise has
        every catalog this run computes written again."""
        if os.fspath(path) == ":memory:":  # no other process can reach it: written here
            index = ToolIndex.open(path, embedder=load_embedder(required=True) if embed else None)
            return cls(index, index.sources(), index.files(), _sink=LocalWriter(index),
                       compressor=compressor, recompress=cls._recompress(index, compressor))
        index = ToolIndex.open(path)  # the parent's: it reads; the writer process writes
        if store_url is not None and not shared_store(store_url):
            store_url = None
        return cls(index, index.sources(), index.files(), store_url=store_url,
                   _sink=IndexWriter(index.location, embed), compressor=compressor,
                   recompress=cls._recompress(index, compressor))

    @staticmethod
    def _recompress(index: ToolIndex, compressor: str | None) -> bool:
        return compressor is not None and index.compressor() != compressor

    @property
    def builds_tools(self) -> bool:
        """Whether the writer builds the tools handed over as LocatedTools (BatchWork's
        `later`) and commits their records itself: a writer process with the run's store."""
        return self.store_url is not None and isinstance(self._sink, IndexWriter)

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

    def expect(self, paths: Iterable[str]) -> None:
        """The source files this run reads (as documents' sources name them): the ids the
        index holds for their catalogs are theirs until the input comes to them (see
        "Server ids"). Before the first batch is added."""
        wanted = set(paths)
        self._claims = {server: source for source, (server, _, path) in self.known.items()
                        if path in wanted}

    def current(self, source: dict[str, object], digest: str) -> bool:
        """Whether the index holds this document's catalog as read from this source (then
        it may be reused: `keep` it when its batch is added). Marks nothing: it is asked
        as documents are dispatched, ahead of the batches added."""
        known = self.known.get(source_key(source))
        return known is not None and known[1] == digest

    def file_current(self, path: str, sha256: str) -> bool:
        """Whether every catalog of this source file, as it is, is indexed."""
        return self.files.get(path) == sha256

    # the input, in order ----------------------------------------------------------

    def keep(self, source: dict[str, object]) -> None:
        """A document reused as indexed (`current` said so): its catalog keeps its id."""
        key = source_key(source)
        known = self.known.get(key)
        if known is not None:
            self._keep(known[0])
            self.kept.add(known[0])
        self._reach(key)

    def keep_file(self, path: str) -> None:
        """A file source reused whole: its catalogs stay, with their ids."""
        if self._by_file is None:  # one map, not a scan of every catalog per file kept
            self._by_file = {}
            for key, (server, _, origin) in self.known.items():
                if origin is not None:
                    self._by_file.setdefault(origin, []).append((server, key))
        for server, key in self._by_file.get(path, ()):
            self._keep(server)
            self.kept.add(server)
            self._reach(key)

    def reach(self, source: dict[str, object]) -> None:
        """A document neither reused nor indexed (broken, no tools): the id its source's
        catalog had is free."""
        self._reach(source_key(source))

    def _keep(self, server: str) -> None:
        self.seen.add(server)
        self.used.add(server)

    def _reach(self, key: str) -> None:
        """The input is at this source: the id the index holds for it is no longer kept
        for it (taken, if it was kept), and the catalogs waiting for that id choose again,
        in input order."""
        known = self.known.get(key)
        if known is not None and self._claims.get(known[0]) == key:
            del self._claims[known[0]]
        for wanting in self._waiting.pop(key, ()):
            self._claim(wanting)

    def _claim(self, wanting: _Wanting) -> None:
        """The catalog takes its first free candidate, or waits for the source the index
        holds it for."""
        while wanting.server in self.used:
            wanting.server = next(wanting.candidates)
        holder = self._claims.get(wanting.server)
        if holder is None:
            self._place(wanting)
        else:  # (in input order among those waiting for that source)
            bisect.insort(self._waiting.setdefault(holder, []), wanting, key=_order)

    # writing -----------------------------------------------------------------------

    def add(self, doc: Any, digest: str | None, tools: WorkerTools) -> None:
        """A computed document (its sha256, its worker tools), in input order, once its
        catalog's original is committed: its catalog takes an id (now, or once the input
        comes to the source the index holds that id for: see "Server ids")."""
        key = source_key(doc.source)
        known = self.known.get(key)
        if (tools is not None and digest is not None and known is not None
                and known[1] == digest and known[0] not in self.used):
            # indexed as it is (computed again: a run without --incremental, or the index
            # was not current for its document): it keeps its id, as a reused one does,
            # before the catalogs waiting for that id choose; its tools' records only
            self._keep(known[0])
            self._as_indexed(known[0], tools[1], digest, key, known[2])
            self._held_tools += len(tools[1])
            self._reach(key)
            return
        self._reach(key)  # (the catalogs before it that wait for its id choose first)
        if tools is None:
            return
        if digest is None:
            self._extra.append(tools[1])
            self._held_tools += len(tools[1])
            return
        path = doc.source.get("path")
        server, where = self._server_id(doc, tools[0])
        self._computed += 1
        self._claim(_Wanting(self._computed, server, _candidates(server, where), tools[1],
                             digest, key, path if isinstance(path, str) else None))

    def _place(self, wanting: _Wanting) -> None:
        """The catalog has its id: written (or, indexed as it is, its records only)."""
        server, key, digest = wanting.server, wanting.key, wanting.digest
        self._keep(server)
        self._held_tools += len(wanting.tools)
        known = self.known.get(key)
        if known is not None and known[0] == server and known[1] == digest:
            self._as_indexed(server, wanting.tools, digest, key, wanting.path)
            return
        self._held.append((server, wanting.tools, digest, key, wanting.path))
        self.rewritten.add(server)
        self.known[key] = (server, digest, wanting.path)

    def _as_indexed(self, server: str, tools: list[WorkerTool] | LocatedTools, digest: str,
                    key: str, path: str | None) -> None:
        """A catalog the index holds as it is: its tools' records only, unless the index's
        definitions were compressed otherwise (another version, other options): then it is
        written again, under its id."""
        if not self.recompress:
            self._extra.append(tools)
            return
        self._held.append((server, tools, digest, key, path))
        self.rewritten.add(server)

    def added(self, store: Store) -> None:
        """A batch is in: the tools' records held are committed, and their catalogs written
        in one index transaction after them, once there are a few batches' worth
        (_TOOLS_PER_COMMIT tools): tool digests are spread all over the store's B-tree, and
        a commit per batch rewrote most of its leaves each time (32k records in 81
        transactions: 0.5 s; in one: 0.13 s); and the index's commits cost less, fewer."""
        if self._held_tools >= _TOOLS_PER_COMMIT:
            self._flush(store)

    def _flush(self, store: Store) -> None:
        """The tool records held, committed in one transaction (each once a run: see
        indexwriter.new_records); then the catalogs that name them written, as one
        transaction of the index. A writer process that can reach the store (`store_url`)
        commits the records itself, first: off this process's hands, and still before the
        index names them."""
        lists = [tools for _, tools, *_ in self._held] + self._extra
        if self.store_url is None:  # (no LocatedTools then: see builds_tools; built if any)
            records = new_records([built_tools(tools) for tools in lists], self.committed)
            if records:
                commit_tool_records(store, records)
                self.committed.update(record.digest for record in records)
            if self._held:
                self._write(self._held)
        elif lists:  # (committed: on its way, and the run fails if it does not get there;
            # the digests of LocatedTools are the writer's to know: see keep_records)
            self.committed.update(tool[1] for tools in lists if not isinstance(tools, LocatedTools)
                                  for tool in tools)
            self._write(self._held, self._extra)
        self._held, self._extra, self._held_tools = [], [], 0

    def _write(self, replace: list[Any], extra: list[Any] | None = None) -> None:
        """One transaction for the writer; raises here the error of any done. The
        first that writes catalogs defers FTS5's merges (finish restores them, or optimizes)."""
        if replace and not self._deferred:
            self._submit("defer_merges")
            self._deferred = True
        if self.store_url is not None:
            self._submit("apply", replace, extra=extra or [], store_url=self.store_url)
        else:
            self._submit("apply", replace)
        self._writes += 1
        while self._pending and (self._pending[0].done() or len(self._pending) > _IN_FLIGHT):
            self._pending.popleft().result()

    def _submit(self, method: str, *args: Any, **kwargs: Any) -> None:
        """A call of the writer's, after those submitted before it: sent to the writer
        process at once (IndexWriter.submit, pipelined), or made by a thread of ours on a
        LocalWriter."""
        if isinstance(self._sink, IndexWriter):
            self._pending.append(self._sink.submit(method, *args, **kwargs))
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="index-writer")
        self._pending.append(self._writer.submit(getattr(self._sink, method), *args, **kwargs))

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
        # (not those this run committed: they are this run's, and may still be on their way;
        # those of tools its writer built (LocatedTools) are looked up: see _landed)
        digests = sorted({h[len(ccr.HANDLE_PREFIX):] for hs in handles.values() for h in hs}
                         - self.committed)
        for at in range(0, len(digests), _TOUCH_BATCH):
            chunk = digests[at:at + _TOUCH_BATCH]
            missing = set(ccr.touch_held(store, chunk))
            if verify:
                missing |= ccr.unverified(store, [d for d in chunk if d not in missing])
            absent |= missing
        if absent and self.builds_tools:  # (LocatedTools may have been handed over)
            absent = self._landed(store, absent, verify)
        return self._given_back(store, handles, absent)

    def _given_back(self, store: Store, handles: dict[str, list[str]], absent: set[str]
                    ) -> set[str]:
        """The tool records `absent` (of these servers' `handles`) committed again from
        their catalogs' originals; returns the servers whose tools could not be."""
        if not absent:
            return set()
        catalogs = {server: sha for server, sha, _ in self.known.values()}
        lost = set()
        for server in sorted(handles):
            wanted = {h[len(ccr.HANDLE_PREFIX):] for h in handles[server]} & absent
            if wanted and not self._commit_again(store, catalogs.get(server), wanted):
                lost.add(server)
        return lost

    def hold_written(self, store: Store) -> set[str]:
        """The tool records of the catalogs this run wrote to the index, each checked to
        be in the store once the writer is done, any gone committed again from its
        catalog's original. A `prune` with a window shorter than the run may have dropped
        a catalog's original and its tools' records committed at the start; the same
        catalog later in the input commits its original again, but each tool record is
        committed once a run. Presence is enough (no refresh): the manifest's check, just
        after, refreshes the catalogs' originals (or fails the run, one gone), and a tool
        record is pruned only with the record it lies in (ccr.prune). Those the snapshot
        of the index written so far names are checked while the writer writes the rest.
        Returns the servers whose tools could not be given back (they leave the index)."""
        if not self.rewritten:
            return set()
        handles = self.index.handles(self.rewritten)
        absent = set(ccr.missing(store, _digests(handles)))
        self._drain()
        rest = self.index.handles(self.rewritten - handles.keys())
        absent |= set(ccr.missing(store, _digests(rest)))
        return self._given_back(store, {**handles, **rest}, absent)

    def _landed(self, store: Store, absent: set[str], verify: bool) -> set[str]:
        """Those of `absent` still absent once the writer is done: some may be records of
        LocatedTools it was still committing (rare: the run then waits for the writer
        here, not beside what follows)."""
        self._drain()
        again = sorted(absent)
        still = set(ccr.touch_held(store, again))
        if verify:
            still |= ccr.unverified(store, [d for d in again if d not in still])
        return still

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
        if records and ccr.commit_held(store, list(records.values())):
            return False  # (its catalog's record went meanwhile)
        return records.keys() == wanted

    @staticmethod
    def _server_id(doc: Any, label: str | None) -> tuple[str, object]:
        """A computed catalog's own id, and its line or item number (None: a catalog file)."""
        sink = doc.sink
        if sink.kind == "file":
            return _stem(sink.rel), None
        where = doc.source.get("line", doc.source.get("item"))
        return f"{_stem(sink.rel)}/{label or where}", where

    def finish(self, files: dict[str, str], store: Store, verify: bool = False) -> None:
        """The run is over: the tool records of the catalogs kept are refreshed (see
        keep_records), catalogs not seen go, and `files` (path -> sha256 of the file
        sources this run read or reused whole) are the wholly indexed ones.

        The refresh and the reads run while the writer writes the last catalogs (they
        concern only catalogs kept, and every catalog written is one seen); what they
        decide is written after those, and the run waits for it all."""
        self._claims.clear()  # the input is over: the catalogs still waiting choose, in order
        waiting = sorted((w for ws in self._waiting.values() for w in ws), key=_order)
        self._waiting.clear()
        for wanting in waiting:
            self._claim(wanting)
        self._flush(store)
        if isinstance(self._sink, LocalWriter):  # one connection: no reads beside its writes
            self._drain()
        lost = self.keep_records(store, verify) | self.hold_written(store)
        if lost:
            paths = {origin for server, _, origin in self.known.values() if server in lost}
            files = {path: sha for path, sha in files.items() if path not in paths}
        gone = sorted((set(self.index.servers()) - self.seen) | lost)
        self._submit("apply", [], gone, files, self.compressor)
        if self._writes > _OPTIMIZE_AFTER:
            self._submit("optimize")
        elif self._deferred or gone:  # (gone: a build killed earlier may have left them deferred)
            self._submit("merge_as_usual")
        self._drain()
