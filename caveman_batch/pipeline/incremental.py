"""The incremental bookkeeping: what the last run left (its manifest, the fingerprint of
each file source and its output, the stat cache) and what of it this run may reuse: a
source whole (ReusedStream) or a document by its sha256 (_reuse)."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from .. import _accel, ccr, fsio
from ..inputs import Document
from ..store import Store
from .model import _MAX_ERRORS, Config, Result, _Tally

if TYPE_CHECKING:  # imported by a run with --index only (start-up of every other command)
    from .. import indexing

ONE_READ: Final = 1 << 20  # files smaller than this are hashed from one read


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
    fingerprint_streams: Any = None  # the fingerprint's "streams" as parsed (for the converger)
    # each entry's source and output identities (2 per entry, in order), stat'ed ahead
    identities: Future[list[list[int] | None]] | None = None

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
# Each ask is one write transaction (fsync'd): a tree of 16k files in one, not five (its
# touch: ~0.10 s, not ~0.14); what is held meanwhile is a digest and a span per original
# (~6 MB at most).
_PRESENCE_BATCH: Final = 32768


def _load_previous(config: Config, store: Store,
                   entries: list[tuple[str | None, str, str]]) -> _Previous:
    """What a rerun may reuse: where the previous manifest holds the rows of each source its
    fingerprint names (to be copied over whole), if the manifest is the one the fingerprint
    was written with. The manifest is streamed, never held: each such row is checked as
    bytes (written by this program, key order fixed): it names its source, this run key, and
    an original, whose presence in the store is asked 32,768 at a time; or none.
    Other rows are indexed by sha256 when a document first needs one, and read then
    (_Previous.row). Only sources among this run's `entries` are looked at: the originals of
    one no longer there are not seen again (so that `prune` reclaims them in time)."""
    found = _Previous(config.manifest_path, config.run_key,
                      b',"run_key":' + orjson.dumps(config.run_key) + b"}")
    manifest_sha256, manifest_size, records, fingerprint_sha256, found.fingerprint_streams = \
        _read_fingerprint(config)
    streams, ranges = _here(records, entries)
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
        if streams and st.st_size == manifest_size:
            presence = _Presence(store, verify=config.checksum)
            _stream_spans(fd, ranges, found.row_tail, presence, manifest_sha256)
            presence.flush()
            found.streams = streams
            if not config.checksum:
                found.stats = _read_stats(config, fingerprint_sha256)
    except BaseException:
        found.close()
        raise
    return found


class _Presence:
    """Originals named by rows to carry over, asked of the store 32,768 at a time:
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
            absent |= ccr.unverified(self.store, [d for d in named if d not in absent])
        for d, span in self.asked:
            if d in absent:
                span.good = False
        self.asked = []


_Range = tuple[int, int, _Span, bytes]  # a source's first row, the row after its last; its span, head


def _here(records: dict[str, dict[str, Any]], entries: list[tuple[str | None, str, str]]
          ) -> tuple[dict[str, tuple[dict[str, Any], _Span]], list[_Range]]:
    """The fingerprint records of this run's sources (by output path: each names one
    source), each with an empty span, and their ranges of rows in the manifest, in order;
    with how each of their rows starts (naming that source; b"": none can)."""
    sources = {rel: source for source, rel, _ in entries}
    streams: dict[str, tuple[dict[str, Any], _Span]] = {}
    ranges: list[_Range] = []
    for rel, record in records.items():
        source = record.get("source")
        if rel not in sources or sources[rel] != source:
            continue
        span = _Span()
        streams[rel] = (record, span)
        head = b'{"source":{"path":' + orjson.dumps(source) if type(source) is str else b""
        first = record["first_row"]
        ranges.append((first, first + record["rows"], span, head))
    ranges.sort(key=_range_rows)  # (stable: a fingerprint's own order breaks ties)
    return streams, ranges


def _range_rows(item: _Range) -> tuple[int, int]:
    return item[0], item[1]


def _stream_spans(fd: int, ranges: list[_Range], tail: bytes, presence: _Presence,
                  manifest_sha256: str | None) -> None:
    """One pass over the previous manifest: each fingerprinted source's span of rows, and
    whether they are good; every span bad if the manifest is not the one expected. (A
    16k-row manifest's pass is ~16k turns of this loop: names bound locally, the handle
    found inline as _names does.)"""
    digest = hashlib.sha256()
    update, search, add = digest.update, _HANDLE.search, presence.add
    at = offset = 0  # at: index into ranges, the next stream whose rows may come
    last = len(ranges)
    first_row, end_row = ranges[0][:2] if ranges else (0, 0)
    with open(fd, "rb", closefd=False) as fh:
        for index, line in enumerate(fh):
            update(line)
            size = len(line)
            if index >= end_row:
                while at < last and index >= ranges[at][1]:
                    at += 1
                first_row, end_row = ranges[at][:2] if at < last else (-1, -1)
            if 0 <= first_row <= index:
                span, head = ranges[at][2:]
                if span.start < 0:
                    span.start = offset
                span.end, span.rows = offset + size, span.rows + 1
                if span.good:
                    m = search(line)
                    if (m is None or not line.endswith(b"\n") or not head
                            or not line.startswith(head) or not line.endswith(tail, 0, -1)):
                        span.good = False
                    elif m.group(1) is not None:
                        add(m.group(1).decode("ascii"), span)
            offset += size
    if digest.hexdigest() != manifest_sha256:
        for _, _, span, _ in ranges:
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


def _read_fingerprint(config: Config) -> tuple[str | None, int | None, dict[str, dict[str, Any]], str, Any]:
    """(sha256 and size of the manifest it belongs to, stream records, its own sha256) of
    this run key, or (None, None, {}, ""); then its "streams" as parsed, whatever the run key
    (for the converger: None if there is no fingerprint to read)."""
    try:
        data = config.streams_path.read_bytes()
        streams = orjson.loads(data)
    except (OSError, orjson.JSONDecodeError):
        return None, None, {}, "", None
    raw = streams.get("streams") if isinstance(streams, dict) else None
    if not (isinstance(streams, dict) and streams.get("run_key") == config.run_key
            and streams.get("max_bytes") == config.max_bytes
            and isinstance(streams.get("streams"), dict)):
        return None, None, {}, "", raw
    records = {rel: r for rel, r in streams["streams"].items()
               if isinstance(r, dict) and type(r.get("first_row")) is int and type(r.get("rows")) is int
               and r["first_row"] >= 0 and r["rows"] >= 0}
    return (streams.get("manifest_sha256"), streams.get("manifest_bytes"), records,
            hashlib.sha256(data).hexdigest(), raw)


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


# A fingerprint record as publish._record writes it: such a record is carried into this
# run's fingerprint as it is (its first_row set anew); any other is rebuilt from these keys.
_RECORD_KEYS: Final = frozenset({"source", "source_size", "source_sha256", "output_sha256",
                                 "first_row", "rows", "totals", "errors"})


# The entries whose source is read (inputs.discover's kinds): only those can be reused.
_READ_KINDS: Final = frozenset({"json", "jsonl"})


def _candidate(entry: tuple[str | None, str, str], config: Config,
               previous: _Previous) -> ReusedStream | None:
    """A source the fingerprint names, whose rows are this run's and whose originals the
    store holds (both checked as _load_previous read them): reusable whole if its bytes
    and its output's are still the same."""
    source, rel, kind = entry
    if source is None or kind not in _READ_KINDS or rel not in previous.streams:
        return None  # (a symlink not followed, a folder not read: an error row, as a full run's)
    record, span = previous.streams.pop(rel)  # once
    if not _valid_record(record, span, source):
        return None
    if previous.index is not None and not previous.index.file_current(source,
                                                                       record["source_sha256"]):
        return None  # the index lacks some of its catalogs: read again
    if record.keys() != _RECORD_KEYS:
        # carried into this run's fingerprint as rebuilt here: nothing else of the old record
        record = {key: record[key] for key in _RECORD_KEYS_ORDER}
    return ReusedStream(rel, record, span)


_RECORD_KEYS_ORDER: Final = ("source", "source_size", "source_sha256", "output_sha256",
                             "first_row", "rows", "totals", "errors")


def _valid_record(record: dict[str, Any], span: _Span, source: str) -> bool:
    """Whether a fingerprint record is one this run may carry over for `source`: its rows
    good and as many as it says, its totals and error rows as _Tally keeps them, its
    sizes and digests of the right types (only ever compared with digests computed here)."""
    totals, errors = record.get("totals"), record.get("errors")
    return (span.good and record.get("source") == source and span.rows == record["rows"]
            and type(totals) is dict and totals.keys() == _Tally.KEYS
            and set(map(type, totals.values())) == _INT
            and totals["documents"] == span.rows and type(errors) is list
            and (not errors or _valid_errors(errors, source))
            and type(record.get("source_size")) is int
            and type(record.get("source_sha256")) is str and type(record.get("output_sha256")) is str)


_INT: Final = {int}


def _valid_errors(errors: Any, source: str) -> bool:
    """A fingerprint record's error rows as _Tally keeps them: at most _MAX_ERRORS, each
    naming this source (and a line or item) and a reason."""
    return len(errors) <= _MAX_ERRORS and all(
        type(e) is dict and e.keys() == {"source", "reason"} and type(e["reason"]) is str
        and type(e["source"]) is dict and e["source"].get("path") == source
        and all(type(e["source"][k]) is int for k in e["source"].keys() - {"path"})
        and e["source"].keys() <= {"path", "line", "item"}
        for e in errors)


@dataclass(slots=True)
class ReusedRun:
    """File sources one after another that the stat cache tells unchanged, each reused whole
    as a ReusedStream is, held as parallel lists: a tree's thousands of settled files make
    no object each (their records and identities are the ones the last run's files hold)."""

    rels: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    spans: list[_Span] = field(default_factory=list)
    stats: list[list[list[int]]] = field(default_factory=list)  # [source, output] identity each
    documents: int = 0
    # each source's rows start where the one before's end, in the manifest's bytes and in
    # its records' first_row: carried in one go (a settled tree's are)
    adjacent: bool = True


_RUN_SOURCES: Final = 4096  # sources in one ReusedRun at most (progress goes on between)


def stat_ahead(config: Config, entries: list[tuple[str | None, str, str]]
               ) -> Future[list[list[int] | None]] | None:
    """The identities of every entry's source and output (fsio.identities), stat'ed on a
    thread while the run loads what the last one left (a tree of 16k files: ~0.1 s of
    system calls beside ~0.25 s of Python): for a rerun that may trust a stat cache, and
    only with the C accelerator (in Python each stat would wait for the GIL). Taken a
    moment earlier than one at a time, they are as good: a file changed after its stat is
    missed either way, and seen by its ctime on the next run (nothing this run writes
    before they are compared is another entry's file)."""
    if not (config.incremental and not config.checksum and _accel.fastwalk is not None
            and config.stats_path.is_file()):
        return None
    out = f"{config.out}/"
    paths = [path for source, rel, _ in entries for path in (source or "", out + rel)]
    pool = ThreadPoolExecutor(1, thread_name_prefix="caveman-stat")
    try:
        return pool.submit(fsio.identities, paths)
    finally:
        pool.shutdown(wait=False)  # its thread ends with this one job


def _unchanged_run(entries: list[tuple[str | None, str, str]], at: int, config: Config,
                   previous: _Previous) -> ReusedRun | None:
    """The entries from `at` on, as long as each is a candidate (see _candidate) that the
    stat cache tells unchanged: the source and its output are the very files, unchanged,
    that an earlier run hashed (see fsio.identity), so neither is read again. None if the
    first is not. One tight loop (a settled tree's rerun is mostly this): two stats an
    entry, or their identities stat'ed ahead (stat_ahead)."""
    streams, stats, index = previous.streams, previous.stats, previous.index
    if not stats:
        return None
    ahead = previous.identities.result() if previous.identities is not None else None
    out = f"{config.out}/"
    run = ReusedRun()
    first_row = end = -1  # where the run's next source's rows start (if adjacent)
    for i in range(at, min(at + _RUN_SOURCES, len(entries))):
        source, rel, kind = entries[i]
        known = stats.get(rel)
        got = streams.get(rel)
        if known is None or got is None or source is None or kind not in _READ_KINDS:
            break
        record, span = got
        if record.keys() != _RECORD_KEYS or not _valid_record(record, span, source):
            break
        if index is not None and not index.file_current(source, record["source_sha256"]):
            break
        try:
            if ahead is not None:
                if ahead[2 * i] != known[0] or ahead[2 * i + 1] != known[1]:
                    break
            elif fsio.identities([source, out + rel]) != known[:2]:
                break
        except (TypeError, IndexError, KeyError):
            break
        del streams[rel]  # once
        if run.rels and (record["first_row"] != first_row or (span.rows and span.start != end)):
            run.adjacent = False
        first_row = record["first_row"] + span.rows
        if span.rows:
            end = span.end
        run.rels.append(rel)
        run.records.append(record)
        run.spans.append(span)
        run.stats.append(known)
        run.documents += span.rows
    return run if run.rels else None


def _intact(reused: ReusedStream, files: list[tuple[str, int | None]],
            jobs: list[Future[Any]] | None) -> bool:
    """Whether the source and its output hash as the fingerprint says; if so, what the
    stat cache is to keep of them."""
    got = [job.result() for job in jobs] if jobs is not None else [_file_sha256(*f) for f in files]
    hashed = [g for g in got if g is not None]
    if len(hashed) < len(got) or [g[0] for g in hashed] != _intact_hashes(reused):
        return False
    (_, source), (_, output) = hashed
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


# JSONL and array outputs held open while their documents are reused one by one: a few,
# not one per output (a rerun of a tree of 150 JSONL files, its fingerprint lost, held 150
# and then failed, with a traceback, under `ulimit -n 64`); documents come in input order,
# so each output's are read one after another
_OPEN_OUTPUTS: Final = 8


def _read_output(out: Path, where: Any, digest: Any,
                 fds: dict[str, int]) -> tuple[bytes, list[int] | None] | None:
    """The previous run's output bytes if still in place and intact, and for an output
    file of its own its identity (fstat of what was read)."""
    try:
        if "offset" in where:  # a JSONL/array output: one open file for all its documents
            fd = fds.pop(where["path"], None)
            if fd is None:
                if len(fds) >= _OPEN_OUTPUTS:  # the least recently read one closed
                    os.close(fds.pop(next(iter(fds))))
                fd = os.open(out / where["path"], os.O_RDONLY)
            fds[where["path"]] = fd  # (last: the most recently read)
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


