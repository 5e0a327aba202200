"""CCR ("context compression recovery"): verified originals in a content-addressed store.

A record's key is the sha256 of the original bytes (64 lower-case hex digits, ASCII).
Its value is a small versioned header followed by the zstd-compressed original:

    magic "CCR" | version u8 | codec u8 | content-type length u8 | flags u16
    | original length u64 | first stored (unix ms) u64 | last seen (unix ms) u64
    | content type (ASCII) | payload

Every read decompresses and re-hashes; a record that does not hash back to its key
is refused as tampered, never returned, and the next commit of the same original
heals it.

A span record (codec 2) holds no bytes of its own: its payload names another record
(the digest of a catalog's original, committed before it or with it) and the offset
of its original in that one's bytes; reading it reads those bytes, slices and re-hashes
(a tool of a catalog, stored by `compress --index`: a few dozen bytes instead of a zstd
frame each). A span only ever names a record that holds its bytes, a later commit of the
same original re-points it to the newest record holding it (or makes it whole), `prune`
never drops a record a span it keeps lies in, and `migrate` copies spans after the
records they lie in. Preparing a record is pure (a worker can do it); committing is the
parent's job.

A record's last-seen time is the later of its header's and of a small entry beside it,
`~seen/<digest>` (8 bytes, unix ms), which `touch` writes: an incremental run that
refreshes thousands of originals writes a few bytes each, not every record again.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import zstandard

from .errors import (
    AmbiguousHandleError,
    IntegrityError,
    InvalidHandleError,
    UnknownHandleError,
)
from .store import DELETE, Store

MAGIC: Final = b"CCR"
FORMAT_VERSION: Final = 1
CODEC_ZSTD: Final = 1
CODEC_SPAN: Final = 2  # the payload names the record the original lies in, and where
ZSTD_LEVEL: Final = 3
HANDLE_PREFIX: Final = "ccr_"
MIN_PREFIX_HEX: Final = 8
_DIGEST_HEX: Final = 64  # a whole sha256, in hex
_HEADER = struct.Struct(">3sBBBHQQQ")
_LAST_SEEN: Final = struct.Struct(">Q")
_SPAN: Final = struct.Struct(">64sQ")  # a span's payload: the whole's digest (hex), the offset
_LAST_SEEN_AT: Final = _HEADER.size - _LAST_SEEN.size  # the header's last field
_HEX_RE = re.compile(r"[0-9a-f]{8,64}")
T = TypeVar("T")
SEEN_PREFIX: Final = b"~seen/"  # "~" sorts after every hex digit: all records, then these


def _seen_key(digest: str) -> bytes:
    return SEEN_PREFIX + digest.encode("ascii")


def _seen_ms(value: bytes | None) -> int:
    """A ~seen entry's time (0: none, or not 8 bytes)."""
    return _LAST_SEEN.unpack(value)[0] if value is not None and len(value) == _LAST_SEEN.size else 0


@dataclass(frozen=True, slots=True)
class Prepared:
    """An original ready to commit: its digest and its encoded record value."""

    digest: str
    value: bytes
    original_length: int

    @property
    def handle(self) -> str:
        return HANDLE_PREFIX + self.digest

    @property
    def key(self) -> bytes:
        return self.digest.encode("ascii")


@dataclass(frozen=True, slots=True)
class Header:
    version: int
    codec: int
    original_length: int
    first_stored_ms: int
    last_seen_ms: int
    content_type: str
    payload_offset: int


@dataclass(frozen=True, slots=True)
class RecordInfo:
    """What a verified record says about itself."""

    handle: str
    original_length: int
    stored_length: int
    content_type: str
    first_stored: float
    last_seen: float


# -- handles ---------------------------------------------------------------


def make_handle(digest: str) -> str:
    return HANDLE_PREFIX + digest


def parse_handle(text: str) -> str:
    """`ccr_<hex>`, `ccr://<hex>` or bare hex -> the lower-case hex (8..64 digits).

    Validation happens here, before any store is touched: a path such as `../etc`
    never reaches a backend.
    """
    raw = text.strip()
    for prefix in (HANDLE_PREFIX, "ccr://"):
        if raw.lower().startswith(prefix):
            raw = raw[len(prefix):]
            break
    hexpart = raw.lower()
    if not _HEX_RE.fullmatch(hexpart):
        raise InvalidHandleError(
            f"invalid handle {text!r}: expected {MIN_PREFIX_HEX} to 64 hex digits, bare or "
            f"after ccr_ or ccr://",
            text,
        )
    return hexpart


def digest_of(original: bytes) -> str:
    return hashlib.sha256(original).hexdigest()


# -- records ---------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Codecs(threading.local):
    """zstd contexts reused per thread: allocating one costs as much as compressing
    a small catalog, and a context may not be shared between threads."""

    def __init__(self) -> None:
        self.compressors: dict[int, zstandard.ZstdCompressor] = {}
        self.decompressor = zstandard.ZstdDecompressor()

    def compressor(self, level: int) -> zstandard.ZstdCompressor:
        found = self.compressors.get(level)
        if found is None:
            found = self.compressors[level] = zstandard.ZstdCompressor(level=level)
        return found


_codecs = _Codecs()


def prepare(
    original: bytes,
    content_type: str = "application/json",
    *,
    now_ms: int | None = None,
    level: int = ZSTD_LEVEL,
) -> Prepared:
    """Hash and compress `original` into a record value (pure; safe in a worker)."""
    stamp = _now_ms() if now_ms is None else now_ms
    payload = _codecs.compressor(level).compress(original)
    return Prepared(
        digest_of(original),
        encode_record(len(original), content_type, stamp, stamp, payload),
        len(original),
    )


def stamped(record: Prepared, now_ms: int) -> Prepared:
    """`record` first stored and last seen at `now_ms` (one made by another host's clock)."""
    value = record.value
    return Prepared(record.digest, value[:_LAST_SEEN_AT - 8] + struct.pack(">QQ", now_ms, now_ms)
                    + value[_HEADER.size:], record.original_length)


def now_ms() -> int:
    """This host's clock, as records are stamped by it (milliseconds since the epoch)."""
    return _now_ms()


def restamped(record: Prepared, not_before_ms: int, now_ms: int | None = None) -> Prepared:
    """`record`, or, if it was prepared before `not_before_ms` (a cache kept it from an
    earlier run of the same process), the same record stamped now: committing it must
    refresh the stored record's last-seen, not leave it at the old time."""
    if _LAST_SEEN.unpack_from(record.value, _LAST_SEEN_AT)[0] >= not_before_ms:
        return record
    return stamped(record, _now_ms() if now_ms is None else now_ms)


_PARALLEL_MIN_BYTES: Final = 1 << 20
_pool: ThreadPoolExecutor | None = None


def prepare_many(originals: Sequence[bytes], content_type: str = "application/json",
                 *, now_ms: int | None = None) -> list[Prepared]:
    """`prepare` for a batch, on threads: zstd and sha256 release the GIL."""
    stamp = _now_ms() if now_ms is None else now_ms
    if len(originals) < 2 or sum(map(len, originals)) < _PARALLEL_MIN_BYTES:
        return [prepare(o, content_type, now_ms=stamp) for o in originals]
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max(2, os.cpu_count() or 1), thread_name_prefix="ccr-prepare")
    return list(_pool.map(lambda o: prepare(o, content_type, now_ms=stamp), originals))


def prepare_span(digest: str, length: int, whole: str, offset: int,
                 content_type: str = "application/json", *, now_ms: int | None = None) -> Prepared:
    """The record of the original `digest` (of `length` bytes) that lies at `offset` in
    the original `whole` (pure; the caller commits it with `whole` or after it)."""
    return Prepared(digest, span_values(whole, [(length, offset)], content_type,
                                        now_ms=now_ms)[0], length)


def span_values(whole: str, spans: Iterable[tuple[int, int]],
                content_type: str = "application/json", *, now_ms: int | None = None
                ) -> list[bytes]:
    """The record values of originals that lie in the original `whole`, each given as
    (its length, its offset there), all stamped alike: prepare_span's values."""
    value = span_value_of(whole, content_type, now_ms=now_ms)
    return [value(length, offset) for length, offset in spans]


def span_value_of(whole: str, content_type: str = "application/json", *,
                  now_ms: int | None = None) -> Callable[[int, int], bytes]:
    """value(length, offset): the record value of an original of that length at that
    offset in the original `whole`, stamped now (or `now_ms`); one struct call each (an
    index's tools are tens of thousands a run)."""
    stamp = _now_ms() if now_ms is None else now_ms
    head = encode_record(0, content_type, stamp, stamp, b"", CODEC_SPAN)
    lead, middle = head[:_LENGTH_AT], head[_LENGTH_AT + 8:] + whole.encode("ascii")
    pack = _span_packer(len(middle)).pack
    return lambda length, offset: pack(lead, length, middle, offset)


_CODEC_AT: Final = 4  # a record's codec byte (after the magic and the format version)
# A span record: the header up to the original's length, the length, the header's rest
# with the content type and the whole's digest, the offset (see _HEADER and _SPAN).
_LENGTH_AT: Final = struct.calcsize(">3sBBBH")


@functools.cache
def _span_packer(middle: int) -> struct.Struct:
    return struct.Struct(f">{_LENGTH_AT}sQ{middle}sQ")


def encode_record(
    length: int, content_type: str, first_ms: int, last_ms: int, payload: bytes,
    codec: int = CODEC_ZSTD,
) -> bytes:
    ctype = content_type.encode("ascii")[:255]
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, codec, len(ctype), 0, length, first_ms, last_ms)
    return head + ctype + payload


def decode_header(value: bytes) -> Header:
    """Parse a record header; raises ValueError with a reason if it is not one."""
    if len(value) < _HEADER.size:
        raise ValueError("truncated header")
    magic, version, codec, clen, _flags, length, first, last = _HEADER.unpack_from(value)
    if magic != MAGIC:
        raise ValueError("bad magic")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {version}")
    if codec not in (CODEC_ZSTD, CODEC_SPAN):
        raise ValueError(f"unknown codec {codec}")
    offset = _HEADER.size + clen
    if len(value) < offset:
        raise ValueError("truncated header")
    ctype = value[_HEADER.size:offset].decode("ascii", "replace")
    return Header(version, codec, length, first, last, ctype, offset)


# Every 128 KiB a zstd frame inflates to costs it at least a 3-byte block header: a
# header claiming more than this for its payload is a lie, refused before anything is
# allocated (a frame's buffer is allocated whole, at the size it declares).
_BLOCK_OUT_MAX: Final = 1 << 17
_BLOCK_IN_MIN: Final = 3
_WHOLE_MAX: Final = 1 << 20  # records verified without their bytes inflate in chunks above this


def _bounded_payload(header: Header, value: bytes) -> bytes:
    """The payload, once its frame is known to inflate to no more than the header's
    length (ValueError with the reason otherwise)."""
    payload = value[header.payload_offset:]
    length = header.original_length
    if length > (len(payload) // _BLOCK_IN_MIN + 1) * _BLOCK_OUT_MAX:
        raise ValueError(f"header claims {length:,} bytes from a {len(payload):,}-byte payload")
    declared = zstandard.frame_content_size(payload)  # ZstdError if not a frame
    if declared >= 0 and declared != length:
        raise ValueError(f"frame declares {declared:,} bytes, header {length:,}")
    return payload


def _inflate(header: Header, value: bytes) -> bytes:
    """The whole original, never more than the header's length + 1 bytes of it: a frame
    that declares no size and runs on is cut there and fails the length check."""
    payload = _bounded_payload(header, value)
    if zstandard.frame_content_size(payload) < 0:
        # a frame that declares no size: decompress() would allocate the header's length
        # up front (a crafted header: 100 GiB, MemoryError); read what it really holds
        original = b"".join(_chunks(header, payload))
        if len(original) > header.original_length:
            raise ValueError(f"the frame inflates past the header's {header.original_length:,} bytes")
        return original
    return _codecs.decompressor.decompress(payload, max_output_size=header.original_length + 1)


def _chunks(header: Header, payload: bytes) -> Iterator[bytes]:
    """What the frame inflates to, at most _WHOLE_MAX at a time: up to the header's length,
    then one byte more, which must not be there. Bytes after the frame's end are ignored,
    as decompress() ignores them (recover and verify read a record alike)."""
    reader = _codecs.decompressor.stream_reader(payload)
    got = 0
    while got <= header.original_length:
        try:
            chunk = reader.read(min(_WHOLE_MAX, header.original_length - got) or 1)
        except zstandard.ZstdError:
            if got != header.original_length:
                raise
            return  # (bytes after the frame)
        if not chunk:
            return
        got += len(chunk)
        yield chunk


def _inflated_digest(header: Header, value: bytes) -> tuple[int, str]:
    """(length, sha256) of what the payload inflates to, in chunks: verifying a record
    holds at most a chunk of it, whatever its header claims."""
    if header.original_length <= _WHOLE_MAX:
        original = _inflate(header, value)
        return len(original), digest_of(original)
    hasher, length = hashlib.sha256(), 0
    for chunk in _chunks(header, _bounded_payload(header, value)):
        hasher.update(chunk)
        length += len(chunk)
    return length, hasher.hexdigest()


def span_of(header: Header, value: bytes) -> tuple[str, int] | None:
    """(digest of the record a span record's original lies in, its offset there), or
    None for a record that holds its own bytes; ValueError for a malformed span."""
    if header.codec != CODEC_SPAN:
        return None
    payload = value[header.payload_offset:]
    if len(payload) != _SPAN.size:
        raise ValueError(f"a span payload of {len(payload)} bytes")
    whole, offset = _SPAN.unpack(payload)
    if not _is_digest_key(whole):
        raise ValueError("a span naming no record")
    return whole.decode("ascii"), offset


SPAN_GONE: Final = "span target missing"  # the reason a span whose record is gone fails


class _SpanTargetMissing(ValueError):
    """The record a span lies in is not in the store."""


class _Wholes:
    """Records spans lie in, inflated, for one scan over many spans (a scan reads them in
    key order, so the spans of one catalog come all over it): up to _WHOLES_MAX bytes in
    all, the least recently used going first. One larger than that is read up to each span
    (a stream, never held). A slice is still re-hashed.

    (Only records of at most 1 MiB were kept: each span of a 2 MiB catalog of 2,000 tools
    inflated it again up to itself, and `verify` of three such took 3.2-3.8 s, not 0.4.)"""

    def __init__(self) -> None:
        self.inflated: dict[str, bytes] = {}  # in order of use, the latest last
        self.size = 0

    def get(self, whole: str, header: Header, container: bytes) -> bytes | None:
        found = self.inflated.pop(whole, None)
        if found is None:
            if header.original_length > _WHOLES_MAX:
                return None
            try:
                found = _inflate(header, container)
            except (ValueError, zstandard.ZstdError):
                return None  # read up to the span only, as without this
            self.size += len(found)
            while self.size > _WHOLES_MAX and self.inflated:
                self.size -= len(self.inflated.pop(next(iter(self.inflated))))
        self.inflated[whole] = found
        return found


_WHOLES_MAX: Final = 64 << 20


def _span_bytes(store: Store | None, header: Header, value: bytes,
                wholes: _Wholes | None = None) -> bytes:
    """A span record's original: its length of bytes at its offset in the record it
    names (inflated up to there, never past it, or taken from `wholes`; not re-hashed
    here)."""
    whole, offset = span_of(header, value)  # type: ignore[misc]
    if store is None:
        raise ValueError("a span record read without its store")
    container = store.get(whole.encode("ascii"))
    if container is None:
        raise _SpanTargetMissing(f"the record it lies in, {make_handle(whole)}, is gone")
    outer = decode_header(container)
    if outer.codec != CODEC_ZSTD:
        raise ValueError("a span lying in a record that holds no bytes of its own")
    length = header.original_length
    if offset + length > outer.original_length:
        raise ValueError(f"a span past the end of {make_handle(whole)}")
    inflated = None if wholes is None else wholes.get(whole, outer, container)
    if inflated is not None:
        return inflated[offset:offset + length]
    reader = _codecs.decompressor.stream_reader(_bounded_payload(outer, container))
    while offset:  # forward, a chunk at a time (a stream reader's seek reads as much)
        skipped = len(reader.read(min(offset, _WHOLE_MAX)))
        if not skipped:
            raise ValueError(f"{make_handle(whole)} ends before the span")
        offset -= skipped
    parts, want = [], length
    while want:
        chunk = reader.read(min(want, _WHOLE_MAX))  # (read(n) allocates n bytes at once)
        if not chunk:
            break
        parts.append(chunk)
        want -= len(chunk)
    return b"".join(parts)


def _original(store: Store | None, header: Header, value: bytes) -> bytes:
    if header.codec == CODEC_SPAN:
        return _span_bytes(store, header, value)
    return _inflate(header, value)


def _corrupt(handle: str, exc: Exception) -> IntegrityError:
    if isinstance(exc, _SpanTargetMissing):
        return IntegrityError(f"record {handle} lies in a record that is gone ({exc}); refused",
                              handle, SPAN_GONE)
    return IntegrityError(f"record {handle} is corrupt ({exc}); refused", handle, "corrupt")


def _mismatch(handle: str) -> IntegrityError:
    return IntegrityError(
        f"record {handle} does not hash to its key (tampered or truncated); refused",
        handle,
        "digest mismatch",
    )


def open_record(digest: str, value: bytes, store: Store | None = None) -> tuple[Header, bytes]:
    """Decode and verify a record (a span's bytes read from `store`); IntegrityError
    (with a reason) if it fails."""
    handle = make_handle(digest)
    try:
        header = decode_header(value)
        original = _original(store, header, value)
    except (ValueError, zstandard.ZstdError) as exc:
        raise _corrupt(handle, exc) from exc
    if len(original) != header.original_length or digest_of(original) != digest:
        raise _mismatch(handle)
    return header, original


def _settled(store: Store, key: bytes, value: bytes,
             check: Callable[[bytes], T]) -> tuple[bytes, T] | None:
    """(value, check(value)) for the record read under `key` as `value`; None if it is gone.

    A span and the record it lies in are two reads: a prune between them drops both, and a
    writer may re-point the span to a newer record and a prune then drop the old one. So a
    span whose record is gone is read again: gone too (None: as if never listed), or changed
    (checked again). Only a span still there as read, naming a record that is gone, fails
    (before, `verify` beside a prune failed on records it removed meanwhile, exit 1)."""
    for _ in range(_REREADS):
        try:
            return value, check(value)
        except IntegrityError as exc:
            if exc.reason != SPAN_GONE:
                raise
            again = store.get(key)
            if again == value:
                raise
            if again is None:
                return None
            value = again
    return value, check(value)


_REREADS: Final = 3


def verify_record(digest: str, value: bytes, store: Store | None = None,
                  wholes: _Wholes | None = None) -> Header:
    """`open_record` without keeping the original: memory stays bounded by a chunk (a
    span's: by its own length, and `wholes`' bound)."""
    handle = make_handle(digest)
    try:
        header = decode_header(value)
        if header.codec == CODEC_SPAN:
            original = _span_bytes(store, header, value, wholes)
            length, found = len(original), digest_of(original)
        else:
            length, found = _inflated_digest(header, value)
    except (ValueError, zstandard.ZstdError) as exc:
        raise _corrupt(handle, exc) from exc
    if length != header.original_length or found != digest:
        raise _mismatch(handle)
    return header


def _refreshed(old: bytes, new: bytes, oh: Header | None = None, nh: Header | None = None) -> bytes:
    """`old` with the earliest first-stored and latest last-seen of old and new (`oh`, `nh`:
    their headers, when already decoded)."""
    oh = decode_header(old) if oh is None else oh
    nh = decode_header(new) if nh is None else nh
    first, last = min(oh.first_stored_ms, nh.first_stored_ms), max(oh.last_seen_ms, nh.last_seen_ms)
    if (first, last) == (oh.first_stored_ms, oh.last_seen_ms):
        return old
    payload = old[oh.payload_offset:]
    return encode_record(oh.original_length, oh.content_type, first, last, payload, oh.codec)


def merge_record(key: bytes, old: bytes | None, new: bytes) -> bytes | None:
    """Keep a good stored record (refreshing its times), heal a bad one."""
    if old is None:
        return new
    if old == new:
        return None
    try:
        oh, nh = decode_header(old), decode_header(new)
        # The new payload is known good; an identical old one is too, but only if the
        # length the old header claims is also the same (a flipped length bit fails every
        # read and would otherwise never heal). One original has one length: another one
        # heals without inflating anything.
        if oh.original_length != nh.original_length:
            return new
        if oh.codec != nh.codec and old[oh.payload_offset:] == new[nh.payload_offset:]:
            # the same payload read by another codec: a flipped codec byte (one of the two
            # is wrong, and the new one is known good), which no read would ever get past
            return _refreshed(new, old, nh, oh)
        if oh.codec == CODEC_SPAN and old[oh.payload_offset:] != new[nh.payload_offset:]:
            # re-pointed to the newest record holding it (committed with it), or whole
            # now: the new payload, with both's times
            return _refreshed(new, old, nh, oh)
        if old[oh.payload_offset:] != new[nh.payload_offset:]:
            # tampered, another level or zstd version: verify the hard way, inflating no
            # more than the new (known good) original's length, and keeping none of it
            verify_record(key.decode("ascii"), old)
    except (ValueError, IntegrityError):
        return new  # heal
    refreshed = _refreshed(old, new, oh, nh)
    return None if refreshed is old else refreshed


# -- operations on a store -------------------------------------------------


def commit(store: Store, records: Sequence[Prepared]) -> list[str]:
    """Commit prepared originals in one transaction; returns their handles.

    When this returns, every original is durably stored (the backend's commit is
    synchronous) and its handle may be published.
    """
    store.commit(_by_key([(r.key, r.value) for r in records]), merge=merge_record)
    return [r.handle for r in records]


def commit_held(store: Store, records: Sequence[Prepared], now_ms: int | None = None) -> list[str]:
    """ccr.commit, for records some of which are spans committed apart from the record
    they lie in (the index writer's tool records): each span is written only if that
    record is in the store, whose last-seen is refreshed, both in the same transaction
    (as touch_held). Returns the digests of the records found gone (their spans not
    written). A `prune` then either removed that record first, and it is reported, or
    comes after and keeps it (it re-checks the last-seen inside its own transaction): no
    span is ever left naming a record that is gone."""
    plain: list[Prepared] = []
    held: list[tuple[bytes, bytes, bytes]] = []
    wholes: set[bytes] = set()
    for record in records:
        value = record.value
        if value[_CODEC_AT] != CODEC_SPAN:
            plain.append(record)
            continue
        # (prepared here: a span's payload, the whole's digest and its offset, ends it)
        guard = value[len(value) - _SPAN.size:len(value) - _SPAN.size + 64]
        wholes.add(guard)
        held.append((guard, record.key, value))
    if plain:
        commit(store, plain)
    if not held:
        return []
    stamp = _now_ms() if now_ms is None else now_ms
    seen = _LAST_SEEN.pack(stamp)
    held += [(guard, SEEN_PREFIX + guard, seen) for guard in wholes]
    held.sort(key=lambda item: item[1])  # in key order (see _by_key)

    later = _seen_forward(stamp)

    def merged(key: bytes, old: bytes | None, new: bytes) -> bytes | None:
        return (later if key.startswith(SEEN_PREFIX) else merge_record)(key, old, new)

    absent = store.commit_present(held, merge=merged)
    return [guard.decode("ascii") for guard in absent]


def _by_key(items: list[Any]) -> list[Any]:
    """Items in key order (stable: a key given twice merges in the order given). A B-tree
    writes sorted keys leaf after leaf instead of all over the file (a rerun's touch of 16k
    records in LMDB, 4,096 a transaction: 0.21 s sorted within each, 0.28 s in manifest
    order), and every backend then takes its row locks in one order."""
    return sorted(items, key=lambda item: item[0])


def store_originals(store: Store, originals: Sequence[bytes],
                    content_type: str = "application/json") -> list[str]:
    """Hash, compress (in parallel) and commit many originals in one transaction."""
    return commit(store, prepare_many(originals, content_type))


def store_original(store: Store, original: bytes, content_type: str = "application/json") -> str:
    return commit(store, [prepare(original, content_type)])[0]


def missing(store: Store, digests: Sequence[str]) -> list[str]:
    """The digests, of these, whose original the store does not hold."""
    absent = set(store.missing(sorted(d.encode("ascii") for d in digests)))
    return [d for d in digests if d.encode("ascii") in absent]


def _seen_forward(stamp: int) -> Callable[[bytes, bytes | None, bytes], bytes | None]:
    """The merge of a ~seen entry refreshed to `stamp`: it only ever moves forward."""
    def later(_key: bytes, old: bytes | None, new: bytes) -> bytes | None:
        return None if _seen_ms(old) >= stamp else new

    return later


def touch(store: Store, digests: Iterable[str], now_ms: int | None = None, *,
          present: bool = False) -> None:
    """Refresh last-seen of the records the store holds (incremental runs that skip work):
    their ~seen entries move forward (never back); the records are not rewritten, and no
    entry is made for an absent one (`present`: the caller has just made sure there is none;
    an entry left by a record pruned meanwhile is dropped by the next prune)."""
    stamp = _now_ms() if now_ms is None else now_ms
    new = _LAST_SEEN.pack(stamp)
    wanted = list(dict.fromkeys(digests))
    absent = set() if present else set(missing(store, wanted))

    later = _seen_forward(stamp)

    store.commit(_by_key([(_seen_key(d), new) for d in wanted if d not in absent]), merge=later)


def touch_held(store: Store, digests: Iterable[str], now_ms: int | None = None) -> list[str]:
    """Refresh last-seen of those of these records the store holds, as touch() does, and
    return the digests it does not hold, both in ONE write transaction: a `prune` (which
    re-checks last-seen inside its own delete transaction) either commits first, and the
    record is reported absent, or after, and keeps it. A record asked about and refreshed
    apart could be pruned in between, and a manifest would name it."""
    stamp = _now_ms() if now_ms is None else now_ms
    new = _LAST_SEEN.pack(stamp)
    wanted = list(dict.fromkeys(digests))
    if not wanted:
        return []

    later = _seen_forward(stamp)

    # in key order (see _by_key): the digests sorted as text, which is their keys' order (ASCII
    # hex; a rerun's 16k tuples sorted as tuples cost ~20 ms more)
    guards = [d.encode("ascii") for d in sorted(wanted)]
    absent = set(store.commit_present([(g, SEEN_PREFIX + g, new) for g in guards], merge=later))
    return [d for d in wanted if d.encode("ascii") in absent] if absent else []


def unverified(store: Store, digests: Iterable[str]) -> set[str]:
    """Of these originals, those that do not read back verified (gone, tampered, truncated:
    the store's own verified read, decompressed and hashed; a span's bytes too)."""
    bad = set()
    for digest in digests:
        value = store.get(digest.encode("ascii"))
        try:
            if value is None:
                raise KeyError(digest)
            open_record(digest, value, store)
        except (KeyError, IntegrityError):
            bad.add(digest)
    return bad


def resolve(store: Store, handle: str) -> str:
    """The full digest a handle (or unique prefix of at least 8 hex digits) names."""
    prefix = parse_handle(handle)
    matches: list[str] = []
    for key in store.keys(prefix.encode("ascii")):
        if not _is_digest_key(key):
            continue  # another program's key that happens to start with these digits
        matches.append(key.decode("ascii"))
        if len(matches) > 5:
            break
    if not matches:
        raise UnknownHandleError(f"unknown handle {handle!r}: no record in {store.url}", handle)
    if len(matches) > 1:
        shown = ", ".join(make_handle(m)[:20] + "…" for m in matches[:5])
        raise AmbiguousHandleError(
            f"ambiguous handle {handle!r}: matches {shown}; give more hex digits", handle, matches
        )
    return matches[0]


def _digest_to_read(store: Store, handle: str) -> str:
    """The digest `handle` names: a whole one as given (the read that follows says whether
    the store holds it: one lookup, where a network store would pay a scan and a read),
    a prefix resolved."""
    hexpart = parse_handle(handle)
    return hexpart if len(hexpart) == _DIGEST_HEX else resolve(store, handle)


def recover(store: Store, handle: str) -> bytes:
    """The original bytes behind `handle`, verified; never a guess."""
    return _opened(store, handle)[3]


def info(store: Store, handle: str) -> RecordInfo:
    digest, value, header, _ = _opened(store, handle)
    return _record_info(digest, header, len(value), _seen_ms(store.get(_seen_key(digest))))


def _opened(store: Store, handle: str) -> tuple[str, bytes, Header, bytes]:
    """(digest, record value, header, original) of the record behind `handle`, verified;
    UnknownHandleError if there is none (never stored, or pruned between listing and reading)."""
    digest = _digest_to_read(store, handle)
    key = digest.encode("ascii")
    value = store.get(key)
    read = None if value is None else _settled(store, key, value,
                                               functools.partial(open_record, digest, store=store))
    if read is None:
        raise UnknownHandleError(f"unknown handle {handle!r}: no record in {store.url}", handle)
    value, (header, original) = read
    return digest, value, header, original


def _record_info(digest: str, header: Header, stored: int, seen_ms: int) -> RecordInfo:
    return RecordInfo(
        make_handle(digest), header.original_length, stored, header.content_type,
        header.first_stored_ms / 1000, max(header.last_seen_ms, seen_ms) / 1000,
    )


def _seen_entries(store: Store) -> dict[str, int]:
    """digest -> time of every ~seen entry (one scan: they sort after all records)."""
    return {key[len(SEEN_PREFIX):].decode("ascii", "surrogateescape"): _seen_ms(value)
            for key, value in store.items(SEEN_PREFIX)}


@dataclass
class Audit:
    """Totals derived only from verified records; every other record under its reason."""

    store: str
    records: int = 0
    verified: int = 0
    original_bytes: int = 0
    stored_bytes: int = 0
    foreign_keys: int = 0  # keys that are not ours: ignored, only counted
    excluded: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)

    def fail(self, handle: str, reason: str) -> None:
        """A record that did not verify (or could not be read), under its reason."""
        self.excluded[reason] = self.excluded.get(reason, 0) + 1
        self.failures.append({"handle": handle, "reason": reason})

    def as_dict(self) -> dict[str, object]:
        ratio = self.stored_bytes / self.original_bytes if self.original_bytes else 0.0
        return {
            "store": self.store, "records": self.records, "verified": self.verified,
            "original_bytes": self.original_bytes, "stored_bytes": self.stored_bytes,
            "stored_ratio": round(ratio, 4), "foreign_keys": self.foreign_keys,
            "excluded": dict(sorted(self.excluded.items())),
            "failures": self.failures,
        }


def _is_digest_key(key: bytes) -> bool:
    """Ours: 64 lower-case hex digits (any other key is another program's, never decoded)."""
    return len(key) == 64 and _HEX_RE.fullmatch(key.decode("ascii", "replace")) is not None


def iter_verified(store: Store, audit: Audit | None = None) -> Iterator[tuple[str, Header, bytes]]:
    """(digest, header, stored value) for each record that verifies; failures go to `audit`.
    ~seen entries are not records, nor are keys that are not sha256 digests (another
    program's, in a store shared with it): neither counted as records nor yielded."""
    wholes = _Wholes()
    for key, value in store.items():
        if key.startswith(SEEN_PREFIX):
            continue
        if not _is_digest_key(key):
            if audit is not None:
                _not_ours(audit, key, value)
            continue
        if audit is not None:
            audit.records += 1
        digest = key.decode("ascii")
        try:
            read = _settled(store, key, value,
                            functools.partial(verify_record, digest, store=store, wholes=wholes))
        except IntegrityError as exc:
            if audit is not None:
                audit.fail(exc.handle, exc.reason)
            continue
        if read is None:  # pruned since it was listed, with the record it lay in
            if audit is not None:
                audit.records -= 1
            continue
        value, header = read
        if audit is not None:
            audit.verified += 1
            audit.original_bytes += header.original_length
            audit.stored_bytes += len(value)
        yield digest, header, value


def _not_ours(audit: Audit, key: bytes, value: bytes) -> None:
    """A key that is not a digest: another program's (counted, ignored), unless its value is
    a record of ours (its header decodes): a record whose key was damaged (a hand edit, a
    flipped byte, a case change) is hidden from every lookup, and a failure, named."""
    try:
        decode_header(value)
    except ValueError:
        audit.foreign_keys += 1
        return
    audit.records += 1
    audit.fail(f"key {key[:80].decode('ascii', 'backslashreplace')!r}",
               "a record under a key that is not a sha256 digest (damaged?)")


def audit(store: Store) -> Audit:
    """Re-check every record (what `stats` and `verify` report)."""
    report = Audit(store.url)
    for _ in iter_verified(store, report):
        pass
    return report


def prune(
    store: Store, not_seen_for_s: float, *, dry_run: bool = False, now_ms: int | None = None
) -> list[RecordInfo]:
    """Drop records whose last-seen is older than `not_seen_for_s` seconds (and the
    ~seen entries of records no longer there); returns the records dropped (with
    `dry_run`, those that would be).

    A span record and the record it lies in live and go together: a record is kept
    while it or any span lying in it was seen within the window (no span is left naming
    bytes that are gone), and a span while it or its record was (a span's bytes are its
    record's: a tool's original is seen whenever its catalog's is, and a run that commits
    a catalog again, or touches it, need not touch each of its tools' records).

    The age is re-checked inside the delete transaction, so a batch that touches a
    record while prune runs keeps it: each record's ~seen entry is looked at just before
    the record itself, in the same transaction; the records stale spans lie in are looked
    at first, then every stale span (one seen meanwhile keeps its record, and so every
    span lying in it), then they are dropped, spans before records.
    """
    cutoff = (_now_ms() if now_ms is None else now_ms) - int(not_seen_for_s * 1000)
    seen = _seen_entries(store)
    wholes: list[RecordInfo] = []  # stale records that are not spans
    spans: list[tuple[RecordInfo, str]] = []  # stale spans, with the record each lies in
    live: set[str] = set()  # records seen within the window, or a span lying in which was
    scanned = Audit(store.url)  # (its failures: records there that do not verify)
    for d, h, v in iter_verified(store, scanned):
        seen_ms = seen.pop(d, 0)
        old = max(h.last_seen_ms, seen_ms) < cutoff
        whole = span_of(h, v)  # (verified: well formed)
        if not old:
            live.add(d if whole is None else whole[0])
        elif whole is not None:
            spans.append((_record_info(d, h, len(v), seen_ms), whole[0]))
        else:
            wholes.append(_record_info(d, h, len(v), seen_ms))
    spans = [(r, within) for r, within in spans if within not in live]
    stale = [r for r, _ in spans] + [r for r in wholes if r.handle[len(HANDLE_PREFIX):] not in live]
    # left: entries whose record is gone (or that name none), whatever their time, unless
    # the record is there again in the delete transaction (another prune removed it during
    # this scan, and a run committed it again)
    # (a record that fails verification is still there: its entry stays with it)
    failing = {f["handle"][len(HANDLE_PREFIX):] for f in scanned.failures}
    orphans = {SEEN_PREFIX + d.encode("ascii", "surrogateescape") for d in seen if d not in failing}
    if dry_run or not (stale or orphans):
        return stale
    lies_in = {r.handle[len(HANDLE_PREFIX):].encode("ascii"): within.encode("ascii")
               for r, within in spans}
    fresh: set[bytes] = set()  # records whose ~seen entry moved past the cutoff meanwhile
    dropped: set[bytes] = set()
    kept: set[bytes] = set()  # records stale at the scan kept in the transaction
    looked = b"?"  # the value of an item only looked at (a record stale spans lie in)
    asked = b"!"  # the value of an orphan entry's record, only asked whether it is there
    back: set[bytes] = set()  # records of orphan entries committed again since the scan
    # dropped by an attempt of the transaction the backend ran again (PostgreSQL, after a
    # dropped connection; LMDB, after the map grew): each attempt decides from clean state
    # (one that dropped a record a run touched before the retry left it reported dropped,
    # though the retry kept it), and such a record is counted dropped only if the attempt
    # that took effect finds it gone (the first may have committed, its answer lost)
    tried: set[bytes] = set()

    def keep(key: bytes) -> None:
        kept.add(key)
        if key in lies_in:  # a span seen keeps its record, and so every span lying in it
            kept.add(lies_in[key])

    def drop_if_stale(key: bytes, old: bytes | None, new: bytes) -> object:
        if new == asked:
            if old is not None:
                back.add(key)
            return None
        if old is None:
            if key in tried:
                dropped.add(key)
            return None
        if key in orphans:  # (its record removed by another prune, committed again: no orphan)
            return None if key[len(SEEN_PREFIX):] in back else DELETE
        if key.startswith(SEEN_PREFIX):
            if _seen_ms(old) >= cutoff:
                fresh.add(key[len(SEEN_PREFIX):])
                return None
            return None if new == looked else DELETE
        if key in fresh or key in kept or (key in lies_in and lies_in[key] in kept):
            keep(key)
            return None
        try:
            if decode_header(old).last_seen_ms >= cutoff:
                keep(key)
                return None
        except ValueError:
            keep(key)
            return None
        if new == looked:  # (stale: a span lying in it may still go, and it then too)
            return None
        dropped.add(key)
        return DELETE

    items: list[tuple[bytes, bytes]] = []
    for record in sorted(set(lies_in.values())):  # seen meanwhile: its spans stay (kept)
        items += [(SEEN_PREFIX + record, looked), (record, looked)]
    for span in sorted(lies_in):  # looked at before any goes: one seen keeps them all
        items += [(SEEN_PREFIX + span, looked), (span, looked)]
    for r in stale:
        digest = r.handle[len(HANDLE_PREFIX):]
        items += [(_seen_key(digest), b""), (digest.encode("ascii"), b"")]
    for key in sorted(orphans):  # (one naming no record of ours is not asked: LMDB refuses b"")
        record = key[len(SEEN_PREFIX):]
        items += [(record, asked)] * _is_digest_key(record) + [(key, b"")]
    at = 0  # the item the store's merge calls are at: each attempt goes through them in order

    def attempt(key: bytes, old: bytes | None, new: bytes) -> object:
        nonlocal at
        if at and (at == len(items) or items[at] != (key, new)) and items[0] == (key, new):
            tried.update(dropped)  # the transaction run again, from its first item
            for decided in (fresh, dropped, kept, back):
                decided.clear()
            at = 0
        at += 1
        return drop_if_stale(key, old, new)

    store.commit(items, merge=attempt)  # type: ignore[arg-type]
    return [r for r in stale if r.handle[len(HANDLE_PREFIX):].encode("ascii") in dropped]


def _unverified(report: Audit, original_length: int, stored_length: int) -> None:
    """A record the scan counted verified taken out of `report`'s totals (not copied)."""
    report.verified -= 1
    report.original_bytes -= original_length
    report.stored_bytes -= stored_length


def migrate(source: Store, target: Store, batch_size: int = 512) -> Audit:
    """Copy every verified record of `source` into `target` (times preserved: a later
    ~seen time is written into the copy's header). Span records go last, each only if
    the record it lies in was copied (a span is never written before its bytes)."""
    report = Audit(source.url)
    seen = _seen_entries(source)
    copied: set[str] = set()
    spans: list[tuple[bytes, bytes, str, int]] = []  # (key, value, record it lies in, length)
    batch: list[tuple[bytes, bytes]] = []
    for digest, header, value in iter_verified(source, report):
        later = seen.get(digest, 0)
        if later > header.last_seen_ms:
            value = b"".join((value[:_LAST_SEEN_AT], _LAST_SEEN.pack(later),
                              value[_LAST_SEEN_AT + _LAST_SEEN.size:]))
        whole = span_of(header, value)
        if whole is not None:
            spans.append((digest.encode("ascii"), value, whole[0], header.original_length))
            continue
        copied.add(digest)
        batch.append((digest.encode("ascii"), value))
        if len(batch) >= batch_size:
            target.commit(batch, merge=merge_record)
            batch = []
    for key, value, lies_in, length in spans:
        if lies_in in copied:
            batch.append((key, value))
            continue
        # it verified, but the record it lies in did not, whole (a bad block past the
        # span): its bytes are good, so it goes over whole, with its times
        try:
            read = _settled(source, key, value,
                            functools.partial(open_record, key.decode("ascii"), store=source))
        except IntegrityError as exc:  # changed since the scan
            _unverified(report, length, len(value))
            report.fail(exc.handle, exc.reason)
            continue
        if read is None:  # pruned since the scan, with the record it lay in
            report.records -= 1
            _unverified(report, length, len(value))
            continue
        header, original = read[1]
        payload = _codecs.compressor(ZSTD_LEVEL).compress(original)
        last = max(header.last_seen_ms, seen.get(key.decode("ascii"), 0))  # (read again: no ~seen)
        batch.append((key, encode_record(len(original), header.content_type,
                                         header.first_stored_ms, last, payload)))
    for at in range(0, len(batch), batch_size):
        target.commit(batch[at:at + batch_size], merge=merge_record)
    return report
