"""Where `compress` finds its documents, read incrementally under a size cap.

`discover(sources, …)` lists them in a stable order; `iter_entry(entry, …)` yields one
source's `Document`s (one catalog each) and then a `SinkEnd` marker (an output that
has seen its last document). Sources are
directories (walked in sorted order for *.json and *.jsonl, hidden folders and the
output folder skipped), single files, JSONL files, "-" (JSONL on stdin), and JSON
registry files whose top level is an array of catalogs or a {"servers": [...]}-style
wrapper, split item by item with their exact bytes and never held whole.

A document over the cap is never buffered whole: a file is referenced in place, a
JSONL line or array item is spilled to a temp file in chunks, and either way it is
copied through unchanged.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import io
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

from . import fsio
from .catalog import _tool_of
from .errors import OutputError, UsageError

CHUNK: Final = 1 << 20
STDIN: Final = "<stdin>"  # the path the documents read from stdin name
_WRAPPER = re.compile(rb'\A\s*\{\s*"(servers|items|catalogs|registry)"\s*:\s*\[')
_WRAPPER_KEYS: Final = frozenset({"servers", "items", "catalogs", "registry"})
# Finds where each value ends; an integer is kept as its text (int() refuses one of over
# 4,300 digits, a ValueError taken for JSON cut short: the item "not JSON", and the rest of
# the registry copied through uncompressed)
_DECODER = json.JSONDecoder(parse_int=str)


@dataclass(eq=False)
class Sink:
    """One output: a file per document ("file") or one file of many ("jsonl", "array")."""

    rel: str
    kind: str  # "file" | "jsonl" | "array"
    prefix: bytes = b""
    suffix: bytes = b""
    # the rest of a registry past CHUNK, after `suffix`: a temp file of ours (copied, then
    # deleted), so that a long tail is never held whole
    suffix_spill: Path | None = None
    count: int = 0
    # A file source (stdin never is) is fingerprinted: its path, and for a stream once
    # read to its end its size and sha256 (what an incremental rerun compares to skip the
    # whole source). A document file's are its document's, known to the publisher.
    fingerprint: bool = False
    source: str | None = None
    source_size: int = 0
    source_sha256: str | None = None
    # the source's fsio.identity() when it was opened, if settled (see fsio.settled_identity)
    source_stat: list[int] | None = None


@dataclass(slots=True)
class Document:
    source: dict[str, object]
    sink: Sink
    raw: bytes | None = None
    spill: Path | None = None  # oversize: the bytes live here (copied through as is)
    spill_owned: bool = False  # a temp file of ours, deleted once copied
    size: int = 0
    error: str | None = None  # unreadable: no bytes at all
    # could not be read this time (not refused for what it is): the last run's outputs of
    # its sink stay, a folder's (a sink rel ending in "/", or "") every output under it
    keep_outputs: bool = False


@dataclass(slots=True)
class SinkEnd:
    sink: Sink


Item = Document | SinkEnd


@dataclass
class Discovery:
    """What the sources hold, before anything is read."""

    # (path as the manifest names it, output rel path, kind); no path: stdin
    entries: list[tuple[str | None, str, str]] = field(default_factory=list)


def discover(sources: list[str], out_dir: Path, *, follow_symlinks: bool = False,
             reserved: dict[str, str] | None = None) -> Discovery:
    """Resolve SRC arguments into (path, output rel path, kind) in a stable order. A symlink
    met while walking a folder is followed only with `follow_symlinks` (as archivers do: an
    untrusted tree could otherwise copy any readable file into OUT and the store); without,
    it is an entry of kind "symlink", an error row. One named on the command line is followed.
    A folder that cannot be read is an entry of kind "folder" (its output path a prefix, ""
    or ending in "/"), an error row that keeps the outputs under it. UsageError if two
    sources would be written to one output path, or one to a path under another's (a file
    where the other needs a folder), or to a path of `reserved` (output path -> what the
    run keeps there: its manifest, ...) or under it."""
    found = Discovery()
    single = len(sources) == 1
    owners: dict[str, str | None] = {}  # output path -> the source written there

    def add(path: str | None, rel: str, kind: str) -> None:
        if rel in owners:
            owner = owners[rel]
            if owner is not None and path is not None and Path(owner).resolve() == Path(path).resolve():
                return  # the same source named twice: read once
            raise UsageError(f"{owner or '-'} and {path or '-'} would both be written to "
                             f"{rel} in the output folder: give them separate runs")
        owners[rel] = path
        found.entries.append((path, rel, kind))

    for src in sources:
        if src == "-":
            if sys.stdin is None:  # (started with its stdin closed)
                raise UsageError("-: there is no standard input to read (it is closed)")
            add(None, "stdin.jsonl", "jsonl")
            continue
        path = Path(src)
        refuse_not_there([src])
        if _is_dir(path):
            base = "" if single else path.resolve().name + "/"
            for file, rel, kind in _walk(path, base, out_dir.resolve(), follow_symlinks):
                add(file, rel, kind)
        else:
            add(str(path), path.name, _kind(path.name))
    if not single or reserved:
        _refuse_nested(owners, reserved or {}, single)
    return found


def _refuse_nested(owners: dict[str, str | None], reserved: dict[str, str], single: bool) -> None:
    """No output path lies under another (one would have to be a file and a folder), nor is
    or lies under or around a path the run keeps for itself. With a `single` SRC no output
    can lie under another (one walk gives each path one kind), and none under a path with
    a hidden component (the walk skips those): only the others are looked for, one pass
    each (a tree of 16k files: about 3 ms, against 6-12 ms mapping every folder)."""
    folders: dict[str, str] | None = None  # each folder an output lies in -> the output's path
    if not single:
        folders = {}
        for rel in owners:
            at = rel.rfind("/", 0, len(rel) - 1)
            while at > 0:
                folder = rel[:at]
                if folder in folders:
                    break  # and every folder above it
                folders[folder] = rel
                at = rel.rfind("/", 0, at)
        for folder, rel in folders.items():
            if folder in owners:
                raise UsageError(f"{owners[folder] or '-'} would be written to {folder} in the "
                                 f"output folder, where {owners[rel] or '-'} needs a folder: give "
                                 "them separate runs")
    for path, what in reserved.items():
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            if (above := "/".join(parts[:i])) in owners:
                raise UsageError(f"{owners[above] or '-'} would be written to {above} in the output "
                                 f"folder, where this run keeps {what} ({path}): rename it, or "
                                 "give another output folder or --manifest")
        if folders is not None:
            under = folders.get(path)
        elif any(part.startswith(".") for part in parts):
            continue
        else:
            under = next((rel for rel in owners if rel.startswith(path + "/")), None)
        if under is not None:
            raise UsageError(f"{owners[under] or '-'} would be written to {under} in the output "
                             f"folder, under {path}, where this run keeps {what}: rename it, "
                             "or give another output folder or --manifest")


def refuse_not_there(sources: Sequence[str]) -> None:
    """UsageError naming the first SRC that is not there (or cannot be looked at).

    Not an error row: OUT follows its sources, and a source that vanished (a registry not
    mounted, a typo in a nightly job), or that cannot be looked at (a folder above it not
    ours to enter: is it a file or a folder?), would have every output of the last run
    deleted as stale. Nothing is read or written (`compress` asks before it makes OUT,
    and again as it walks them); nor for `-` with standard input closed (it made OUT and
    its lock file first)."""
    for src in sources:
        if src == "-" and sys.stdin is None:  # (started with its stdin closed)
            raise UsageError("-: there is no standard input to read (it is closed)")
        missing = None if src == "-" else _not_there(Path(src))
        if missing is not None:
            raise UsageError(f"{src}: {missing}: nothing was read or written")


# what opening a file or folder fails with for want of this process's (or the system's)
# resources, not the file's: the run fails (exit 2). As an error row, a cron job under a low
# `ulimit -n` marked every source unreadable and exited 0.
_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def _not_the_sources(exc: OSError) -> None:
    """Raises `exc` if it says nothing about the source (see _OUT_OF_RESOURCES)."""
    if exc.errno in _OUT_OF_RESOURCES:
        raise exc


def _not_there(path: Path) -> str | None:
    """Why a SRC named on the command line cannot be looked at (a symlink followed), or None
    if it can (reading it may still fail: its error row says why)."""
    try:
        os.stat(path)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOTDIR:
            return "no such file or folder"
        return f"cannot be looked at: {exc.strerror or exc}"
    return None


def _is_dir(path: Path) -> bool:
    """Whether path is a folder (a symlink followed); one that cannot be looked at (a folder
    above it not ours to enter) is not, and reading it says why in its error row."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def _kind(name: str) -> str:
    # as Path.suffix: ".jsonl" alone is a name without a suffix
    return "jsonl" if name.lower().endswith(".jsonl") and len(name) > len(".jsonl") else "json"


def _walk(root: Path, base: str, skip: Path, follow: bool = False) -> Iterator[tuple[str, str, str]]:
    """Catalog files under root (path, output path, kind): a folder's files by name, then
    its folders by name, as os.walk, hidden ones and OUT skipped. A symlink (to a catalog
    file or to a folder) is an entry of kind "symlink" unless `follow`, and then each folder
    is walked once (a link back up is not a loop). Paths spelled as pathlib would (root /
    rel), but built as plain strings, one scandir per folder and no resolve() of a real
    folder: a registry has thousands."""
    top = str(root)
    prefix = "" if top == "." else top if top.endswith("/") else top + "/"
    todo = [(base, "")]
    walked: set[tuple[int, int]] = set()  # (device, inode) of each folder walked, when following
    while todo:
        rel, below = todo.pop()  # output path so far; path under root so far
        folder = prefix + below if below else top
        try:
            if follow and not _first_visit(folder, walked):
                continue
            with os.scandir(folder) as it:
                found = list(it)
        except OSError as exc:
            _not_the_sources(exc)
            # unreadable: an error row of its own (os.walk would skip it in silence), and
            # its outputs of the last run stay (they are not stale: their sources are unknown)
            yield folder.rstrip("/") or folder, rel, "folder"
            continue
        files, dirs = [], []
        for entry in found:
            name = entry.name
            if name.startswith("."):
                continue
            is_dir = is_link = False
            try:
                # is_symlink first: it never follows, where is_dir of a link looping back on
                # itself raises (ELOOP: the link was then opened, followed, as a file)
                is_link = entry.is_symlink()
                is_dir = entry.is_dir()
            except OSError:
                pass
            if is_link and not follow:
                if is_dir or name.lower().endswith((".json", ".jsonl")):
                    files.append((name, "symlink"))
            elif not is_dir:
                if name.lower().endswith((".json", ".jsonl")):
                    files.append((name, _kind(name)))
            else:
                dirs.append((name, is_link))
        for name, kind in sorted(files):
            yield prefix + below + name, rel + name, kind
        for name, is_link in sorted(dirs, reverse=True):  # popped in name order
            # a real folder resolves to its own name: only one named like OUT can be OUT
            if (name != skip.name and not is_link) or Path(prefix + below + name).resolve() != skip:
                todo.append((rel + name + "/", below + name + "/"))


def _first_visit(folder: str, walked: set[tuple[int, int]]) -> bool:
    st = os.stat(folder)
    key = (st.st_dev, st.st_ino)
    if key in walked:
        return False
    walked.add(key)
    return True


def iter_entry(entry: tuple[str | None, str, str], max_bytes: int, spill_dir: Path) -> Iterator[Item]:
    """The documents of one discovered source, then the end of its sink."""
    path, rel, kind = entry
    if path is not None and not _utf8(path):
        # Its name cannot be written in the manifest (JSON is Unicode); named with the
        # undecodable bytes escaped, it is an error row with no output, and the batch goes on.
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        sink = Sink(os.fsencode(rel).decode("utf-8", "backslashreplace"), "file")
        yield Document({"path": shown}, sink, error="file name is not UTF-8: skipped")
        yield SinkEnd(sink)
        return
    if path is None:
        yield from _jsonl(sys.stdin.buffer, STDIN, Sink(rel, "jsonl"), max_bytes, spill_dir)
    elif kind == "symlink":
        yield from _unread(path, rel, "symlink, not followed (--follow-symlinks)")
    elif kind == "folder":
        yield from _unread(path, rel, f"cannot read folder: {_folder_error(path)}: "
                                      "the outputs under it are kept", keep=True)
    elif kind == "jsonl":
        yield from _open_then(path, rel, lambda fh, st: _jsonl(
            fh, path, Sink(rel, "jsonl", fingerprint=True, source_stat=fsio.settled_identity(st)),
            max_bytes, spill_dir))
    else:
        yield from _open_then(path, rel, lambda fh, st: _json_file(fh, st, path, rel, max_bytes, spill_dir),
                              small=lambda head, st: _small_json_file(head, st, path, rel, max_bytes))


def _folder_error(path: str) -> str:
    """Why a folder the walk could not read cannot be read (asked again: the walk holds
    thousands of entries, not their errors)."""
    try:
        os.scandir(path).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return "it changed while it was read"


def _utf8(name: str) -> bool:
    """Whether a file name (decoded by Python with surrogateescape) is valid UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _open_then(path: str, rel: str, body: object, small: object = None) -> Iterator[Item]:
    """body(fh, its fstat) for a readable regular file; else an unreadable document. Opened
    without blocking and checked after the open (a symlink resolved): a FIFO would hang the
    batch, a device (/dev/zero) would fill the disk with spill files. With `small`, a file
    under CHUNK is first read whole with plain reads (a tree holds thousands: a buffered
    file object costs as much as the read): small(its bytes, its fstat) gives its items, or
    None to have body read it after all (from its start)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        _not_the_sources(exc)
        yield from _unread(path, rel, f"cannot read: {exc.strerror or exc}",
                           keep=not isinstance(exc, FileNotFoundError))
        return
    try:
        st = os.fstat(fd)  # before any byte is read: what a rerun compares
    except OSError as exc:
        os.close(fd)
        yield from _unread(path, rel, f"cannot read: {exc.strerror or exc}",
                           keep=not isinstance(exc, FileNotFoundError))
        return
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        yield from _unread(path, rel, f"not a regular file ({_file_type(st.st_mode)}): not read")
        return
    if small is not None and st.st_size < CHUNK:
        try:
            head = _read_upto(fd, st.st_size + 1)
            items: list[Item] | None
            if len(head) != st.st_size:
                items = _changed(path, rel, st.st_size)
            else:
                items = small(head, st)  # type: ignore[operator]
            if items is None:
                os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        if items is not None:
            os.close(fd)
            yield from items
            return
    with os.fdopen(fd, "rb") as fh:
        yield from body(fh, st)  # type: ignore[operator]


def _read_upto(fd: int, size: int) -> bytes:
    """Up to `size` bytes from fd, fewer only at its end (as a buffered read(size)): `size`
    is its fstat size + 1, and one read of a regular file that gives its whole size has
    met its end (a file system that reads short is read on)."""
    data = os.read(fd, size)
    if len(data) >= size - 1 or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size and (more := os.read(fd, size - got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _changed(path: str, rel: str, size: int) -> list[Item]:
    """A file whose size changed between its fstat and its read (written meanwhile): what
    was read is neither its old bytes nor its new ones (its first size + 1 bytes of a file
    that grew), so nothing of it is published; read again by the next run."""
    return list(_unread(path, rel, f"changed while it was read ({size:,} bytes when opened): "
                                   "not read, the output of the last run is kept", keep=True))


def _unread(path: str, rel: str, why: str, keep: bool = False) -> Iterator[Item]:
    sink = Sink(rel, "file")
    yield Document({"path": path}, sink, error=why, keep_outputs=keep)
    yield SinkEnd(sink)


_FILE_TYPES: Final = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                      (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                      (stat.S_ISDIR, "a directory"))


def _file_type(mode: int) -> str:
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a file")


# -- JSONL ------------------------------------------------------------------------


def _jsonl(fh: BinaryIO, label: str, sink: Sink, max_bytes: int, spill_dir: Path) -> Iterator[Item]:
    lineno = 0
    seen = _Fingerprint(sink.fingerprint)
    while True:
        line = fh.readline(max_bytes + 1)
        if not line:
            break
        seen.update(line)
        lineno += 1
        if len(line) > max_bytes and not line.endswith(b"\n"):
            with _spilling(spill_dir, f"{label} line {lineno}"):
                spill, size = _spill_line(fh, line, spill_dir, seen)
            yield Document({"path": label, "line": lineno}, sink, spill=spill, spill_owned=True,
                           size=size)
            continue
        body = line[:-1] if line.endswith(b"\n") else line
        if not body.strip(_JSONL_BLANK):
            continue  # a blank line holds no document
        yield Document({"path": label, "line": lineno}, sink, raw=body, size=len(body))
    yield _end_fingerprinted(sink, label, seen)


# JSON's white space: a line of form feeds or vertical tabs (bytes.strip's white space too)
# is no blank line but a line that is not JSON, an error row (it went without a word, and
# without its line in the output)
_JSONL_BLANK: Final = b" \t\r\n"


class _Fingerprint:
    """sha256 and length of every byte read from a stream (nothing when not active)."""

    __slots__ = ("digest", "size")

    def __init__(self, active: bool) -> None:
        self.digest, self.size = (hashlib.sha256() if active else None), 0

    def update(self, chunk: bytes) -> None:
        if self.digest is not None:
            self.digest.update(chunk)
            self.size += len(chunk)


_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextlib.contextmanager
def _spilling(spill_dir: Path, label: object) -> Iterator[None]:
    """A temp copy of a document too big to hold, in OUT's temp folder: a full disk there is
    OUT's (named, with the source being copied), never "standard output" (a write of a file
    object names no file)."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, OutputError) or exc.errno not in _FULL_ERRNOS:
            raise
        raise OutputError(f"{spill_dir.parent}: cannot write output (a temp copy of {label}): "
                          f"{exc.strerror or exc}") from exc


def _spill_line(fh: BinaryIO, head: bytes, spill_dir: Path, seen: _Fingerprint) -> tuple[Path, int]:
    fd, name = tempfile.mkstemp(prefix="spill-", dir=spill_dir)
    size = 0
    with os.fdopen(fd, "wb") as out:
        chunk = head
        while chunk:
            if chunk.endswith(b"\n"):
                out.write(chunk[:-1])
                size += len(chunk) - 1
                break
            out.write(chunk)
            size += len(chunk)
            chunk = fh.readline(CHUNK)
            seen.update(chunk)
    return Path(name), size


# -- JSON files and registries ---------------------------------------------------------


def _json_file(fh: BinaryIO, st: os.stat_result, path: str, rel: str, max_bytes: int,
               spill_dir: Path) -> Iterator[Item]:
    size = st.st_size
    if size <= max_bytes:
        head = fh.read(size + 1)
        registry = _registry_prefix(head)
    else:
        # never held whole: read (doubling) only until an array's first item ends, up to the
        # cap (a registry's first catalog may be over CHUNK: the file was one passthrough)
        head = fh.read(CHUNK)
        while ((registry := _registry_prefix(head, cut=True)) == _CUT and len(head) < max_bytes
               and (more := fh.read(min(len(head), max_bytes - len(head))))):
            head += more
        registry = None if registry == _CUT else registry
    if registry is not None:
        fh.seek(0)
        yield from _registry(_HashingReader(fh), path, rel, registry, max_bytes, spill_dir,
                             fsio.settled_identity(st))
        return
    if size <= max_bytes and len(head) != size:
        yield from _changed(path, rel, size)
        return
    sink = Sink(rel, "file", fingerprint=True, source=path, source_stat=fsio.settled_identity(st))
    if size > max_bytes or len(head) > max_bytes:
        yield Document({"path": path}, sink, spill=Path(path), size=size)
    else:
        yield Document({"path": path}, sink, raw=head, size=len(head))
    yield SinkEnd(sink)


def _small_json_file(head: bytes, st: os.stat_result, path: str, rel: str,
                     max_bytes: int) -> list[Item] | None:
    """_json_file's items for a file read whole (`head`: at most its fstat size + 1 bytes),
    or None for a registry or one over max_bytes (read by _json_file, as it reads them)."""
    if len(head) > max_bytes or _registry_prefix(head) is not None:
        return None
    sink = Sink(rel, "file", fingerprint=True, source=path, source_stat=fsio.settled_identity(st))
    return [Document({"path": path}, sink, raw=head, size=len(head)), SinkEnd(sink)]


_CUT: Final = -1  # (_registry_prefix) an array's first item goes on past the bytes given


def _registry_prefix(head: bytes, cut: bool = False) -> int | None:
    """Byte offset just past the "[" of a registry's catalog array, or None. A UTF-8 byte
    order mark before it (as some Windows editors write) is skipped, and kept in the output
    with the rest of the prefix. With `cut`, `head` is the start of a longer file: _CUT
    when an array's first item does not end in it (read more and ask again)."""
    bom = len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0
    m = _WRAPPER.match(head[bom:]) if bom else _WRAPPER.match(head)
    if m is not None:
        return bom + m.end()
    stripped = head[bom:].lstrip()
    if not stripped.startswith(b"["):
        return None
    start = len(head) - len(stripped) + 1
    try:
        text = head[start:].decode("utf-8", "ignore")
        first, _ = _DECODER.raw_decode(text, len(text) - len(text.lstrip()))
    except (ValueError, RecursionError) as exc:
        # first item incomplete, invalid or nested too deep for json: a plain document (the
        # compressor says why it passes through)
        return _CUT if cut and _cut_short(exc, len(text)) else None
    is_catalog = isinstance(first, list) or (
        isinstance(first, dict) and _tool_of(first) is None
        and any(isinstance(first.get(k), list) for k in ("tools", "functions"))
    )
    return start if is_catalog else None


def _cut_short(exc: Exception, end: int) -> bool:
    """Whether json's error on a text cut at `end` may be the cut's (read on), not bytes
    that are no JSON however the file goes on (else a file over the cap starting with "["
    and junk was read whole up to the cap, decoded again at each doubling): a string still
    open, or an error within the few chars a cut value leaves (`-Infinit`, `\\ud83d`)."""
    if not isinstance(exc, json.JSONDecodeError):
        return not isinstance(exc, RecursionError)
    return exc.msg.startswith("Unterminated string") or end - exc.pos <= _CUT_SLACK


_CUT_SLACK: Final = 16


class _HashingReader:
    """A registry file read through `read` only, fingerprinted as it goes."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.seen = fh, _Fingerprint(True)

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self.seen.update(data)
        return data


def _registry(fh: _HashingReader, path: str, rel: str, start: int, max_bytes: int,
              spill_dir: Path, stat: list[int] | None) -> Iterator[Item]:
    sink = Sink(rel, "array", prefix=fh.read(start), fingerprint=True, source_stat=stat)
    reader = _TextReader(fh, start)
    index = 0

    def broken(why: str) -> Iterator[Item]:
        """The rest of the file, from item `index` on, goes through as written."""
        if reader.bad_byte is not None:
            why = f"not UTF-8 at byte {reader.bad_byte}"
        yield Document({"path": path, "item": index}, sink,
                       error=f"{why}: the rest of the file, from this item on, is copied through as written")
        with _spilling(spill_dir, path):
            sink.suffix, sink.suffix_spill = reader.rest(spill_dir)
        yield _end_fingerprinted(sink, path, fh.seen)

    while True:
        # Where the rest starts if the array breaks before its next item (white space and
        # separator included): nothing is compacted away until an item is taken.
        mark = reader.pos
        if not reader.skip_ws():
            reader.pos = mark
            yield from broken("the array ends without its closing bracket")
            return
        if reader.peek() == "]":
            reader.pos += 1
            break
        if index:
            if reader.peek() != ",":
                reader.pos = mark
                yield from broken("not JSON (a ',' or a ']' expected)")
                return
            reader.pos += 1
            reader.skip_ws()
        doc = _next_item(reader, {"path": path, "item": index}, sink, max_bytes, spill_dir)
        if doc is None:  # not JSON from here on: the rest goes through as written
            reader.pos = mark
            yield from broken("not JSON")
            return
        yield doc
        index += 1
    with _spilling(spill_dir, path):
        rest, sink.suffix_spill = reader.rest(spill_dir)
    sink.suffix = b"]" + rest
    why = _after_array(sink.prefix, sink.suffix, sink.suffix_spill)
    if why is not None:
        # the items are the registry's; what follows them is not JSON, or names a second
        # list of catalogs: said (a run with --strict fails), and copied through as written
        yield Document({"path": path, "item": index}, sink, error=f"{why}: copied through as written")
    yield _end_fingerprinted(sink, path, fh.seen)


def _after_array(prefix: bytes, suffix: bytes, spill: Path | None = None) -> str | None:
    """What is wrong with a registry's bytes around its array (`prefix` up to its "[",
    `suffix` from its "]", then `spill`'s), or None: the file with its array emptied must
    parse (a long tail parsed as it streams, never held), and a wrapper must name its list
    once (a second "servers" after it is the list a reader that keeps the last value takes:
    its catalogs would be neither compressed nor named by any row) and hold no other list
    that could be one of catalogs (another of the wrapper's keys, "items" beside "servers",
    naming an array of objects or arrays: copied through, its catalogs never read)."""
    head = (prefix + suffix).removeprefix(codecs.BOM_UTF8)
    wrapper = _WRAPPER.match(head)
    key = wrapper.group(1).decode() if wrapper else None
    found: tuple[int, str | None] | None
    if spill is None:
        try:
            doc = _PAIRS.decode(head.decode("utf-8"))
            found = (sum(name == key for name, _ in doc), next(
                (name for name, value in doc if name != key and name in _WRAPPER_KEYS
                 and _holds_lists(value)), None)) if key else (1, None)
        except RecursionError:  # nested too deep for json, not broken: ijson keeps no stack
            found = _streamed(_Joined(head, io.BytesIO()), key)
        except ValueError:
            found = None
    else:
        with open(spill, "rb") as fh:
            found = _streamed(_Joined(head, fh), key)
    if found is None:
        return "not JSON after the registry's array (trailing data, or a wrapper left unclosed)"
    named, other = found
    if named > 1:
        return f"the wrapper names {key!r} again after its array (a second list of catalogs, not read)"
    if other is not None:
        return (f"the wrapper holds a second list, {other!r}, beside its {key!r} array "
                f"(catalogs it may hold not read)")
    return None


def _holds_lists(value: object) -> bool:
    """Whether `value`, as _PAIRS gives it, is an array whose first item is an object or an
    array (a list of catalogs, maybe; an object is a list of (name, value) tuples there)."""
    return (isinstance(value, list) and bool(value) and not isinstance(value[0], tuple)
            and isinstance(value[0], list))


def _streamed(joined: _Joined, key: str | None) -> tuple[int, str | None] | None:
    """How many times the top-level object read from `joined` names `key` (1 when it is
    None), and the first other wrapper key in it naming an array whose first item is an
    object or an array (as _holds_lists); None if it is not JSON."""
    import ijson  # type: ignore[import-untyped]  # (only for a tail past CHUNK, or deep)

    named = depth = 0
    other: str | None = None
    candidate: str | None = None  # a wrapper key just read at the top level
    step = 0  # events seen since `candidate` (1: its value opened as an array)
    try:
        # basic_parse: parse's prefixes ("n.item.item…") cost the square of the depth
        # (10^5 brackets: a hang)
        for event, value in ijson.basic_parse(joined):
            if candidate is not None:
                if step == 0 and event == "start_array":
                    step = 1
                else:
                    if step == 1 and event in _OPENS and other is None:
                        other = candidate
                    candidate, step = None, 0
            if event in _OPENS:
                depth += 1
            elif event in _CLOSES:
                depth -= 1
            elif depth == 1 and event == "map_key":
                if value == key:
                    named += 1
                elif key is not None and value in _WRAPPER_KEYS:
                    candidate = value
    except (ijson.JSONError, ValueError, ArithmeticError, RecursionError):
        return None
    return (named, other) if key else (1, None)


_OPENS: Final = frozenset({"start_map", "start_array"})
_CLOSES: Final = frozenset({"end_map", "end_array"})


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # (as ijson, for a tail past CHUNK)


# the tail's check: each object as its (name, value) pairs, a name given twice kept twice
_PAIRS: Final = json.JSONDecoder(parse_int=str, parse_constant=_refuse_constant, object_pairs_hook=list)


class _Joined:
    """`head`, then the rest of `fh`, read through `read` alone, each run of ASCII digits cut
    to its first _DIGITS. Whether the text is JSON does not depend on a run's length (its
    first digit kept, a leading zero is still one; a \\u escape keeps its four), while
    ijson's number for a long one does: its C backend crashed the process (SIGSEGV) on an
    integer of over 4,300 digits (int() refuses it), Decimal refuses an exponent of over 18
    digits (and a conversion costs the square of the digits: why int() has its limit)."""

    def __init__(self, head: bytes, fh: BinaryIO) -> None:
        self.head, self.fh = head, fh
        self.run = 0  # digits the last chunk ended with (a run that goes on in this one)

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # (ijson asks for nothing first, to see bytes or text come)
            return b""
        while True:
            if self.head:
                data, self.head = self.head, b""
            else:
                data = self.fh.read(size)
            if not data or (cut := self._cut(data)):  # (b"" only at the end: all cut, read on)
                return data if not data else cut

    def _cut(self, data: bytes) -> bytes:
        carried, self.run = self.run, 0

        def cut(m: re.Match[bytes]) -> bytes:
            before = carried if m.start() == 0 else 0
            if m.end() == len(data):
                self.run = before + m.end() - m.start()
            return m.group()[:max(0, _DIGITS - before)]

        return _DIGIT_RUN.sub(cut, data)


_DIGITS: Final = 9
_DIGIT_RUN: Final = re.compile(rb"[0-9]{%d,}|\A[0-9]+|[0-9]+\Z" % (_DIGITS + 1))


def _end_fingerprinted(sink: Sink, path: str, seen: _Fingerprint) -> SinkEnd:
    """The end of a stream's sink, with what was read of it when it was fingerprinted."""
    if seen.digest is not None:
        sink.source, sink.source_size, sink.source_sha256 = path, seen.size, seen.digest.hexdigest()
    return SinkEnd(sink)


def _next_item(reader: _TextReader, source: dict[str, object], sink: Sink, max_bytes: int,
               spill_dir: Path) -> Document | None:
    while True:
        try:
            end = _DECODER.raw_decode(reader.text, reader.pos)[1]
        except RecursionError:
            # nested too deep for json's recursive parser: its end is found by a scanner
            # that keeps no stack, and the compressor passes it through with its reason
            return _scanned_item(reader, source, sink, max_bytes, spill_dir)
        except ValueError:
            if reader.consumed_bytes() > max_bytes:
                return _scanned_item(reader, source, sink, max_bytes, spill_dir)
            if not reader.fill():
                return None
            continue
        if end == len(reader.text) and reader.fill():
            continue  # a number may go on in the next chunk
        raw = reader.text[reader.pos:end].encode("utf-8")
        reader.pos = end
        reader.compact()
        if len(raw) > max_bytes:
            with _spilling(spill_dir, source.get("path")):
                fd, name = tempfile.mkstemp(prefix="spill-", dir=spill_dir)
                with os.fdopen(fd, "wb") as out:
                    out.write(raw)
            return Document(source, sink, spill=Path(name), spill_owned=True, size=len(raw))
        return Document(source, sink, raw=raw, size=len(raw))


def _scanned_item(reader: _TextReader, source: dict[str, object], sink: Sink, max_bytes: int,
                  spill_dir: Path) -> Document:
    """The next item, its end found by _ValueScanner (json could not parse it): spilled, and
    held if small after all (a broken item with more behind it, or one nested too deep)."""
    with _spilling(spill_dir, source.get("path")):
        spill, size = reader.spill_value(spill_dir)
    if size <= max_bytes:
        raw = spill.read_bytes()
        spill.unlink()
        return Document(source, sink, raw=raw, size=len(raw))  # compress says why
    return Document(source, sink, spill=spill, spill_owned=True, size=size)


class _TextReader:
    """UTF-8 text over a binary file, decoded chunk by chunk, consumed from the front."""

    def __init__(self, fh: _HashingReader | BinaryIO, offset: int = 0) -> None:
        self.fh = fh
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.text = ""
        self.pos = 0
        self.chunk = CHUNK
        self.offset = offset  # of the next byte to read, in the file
        self.undecodable = b""  # read but not valid UTF-8: nothing more is decoded after it
        self.bad_byte: int | None = None  # where in the file UTF-8 failed

    def fill(self) -> bool:
        """Read and decode the next chunk; False at the end, or at bytes that are not UTF-8
        (kept, with any partial character before them, for rest()) once the text before
        them has been handed out (True when some came with them)."""
        if self.undecodable:
            return False
        data = self.fh.read(self.chunk)
        self.chunk = min(self.chunk * 2, 64 * CHUNK)  # an item that keeps growing: fewer retries
        had = len(self.text)
        try:
            self.text += self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            # what decodes before the bad byte is text (the items it holds are read as
            # any: a bad byte late in a small registry cost every item before it)
            whole = self.decoder.getstate()[0] + data  # (exc.start is an index into this)
            self.text += whole[:exc.start].decode("utf-8")
            self.undecodable = whole[exc.start:]  # never empty: a byte failed
            self.bad_byte = self.offset - (len(whole) - len(data)) + exc.start
            self.decoder.reset()
        self.offset += len(data)
        return bool(data) and (not self.undecodable or len(self.text) > had)

    def skip_ws(self) -> bool:
        """Past JSON white space (space, tab, line breaks; not U+00A0 and the like)."""
        while True:
            self.pos = _JSON_WS.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text):
                return True
            if not self.fill():
                return False

    def peek(self) -> str:
        return self.text[self.pos]

    def compact(self) -> None:
        if self.pos > CHUNK:
            self.text = self.text[self.pos:]
            self.pos = 0
        self.chunk = CHUNK

    def consumed_bytes(self) -> int:
        return len(self.text) - self.pos  # characters: a lower bound on bytes

    def rest(self, spill_dir: Path) -> tuple[bytes, Path | None]:
        """Every byte not consumed yet, exactly as in the file: the decoded text left, a
        partial character the decoder holds, bytes that did not decode, the unread rest.
        Past CHUNK of the unread rest, all of it goes to a temp file in `spill_dir` instead
        (bytes b"" then): memory stays bounded whatever follows."""
        tail = self.text[self.pos:].encode("utf-8") + self.decoder.getstate()[0] + self.undecodable
        more = self.fh.read(CHUNK)
        if len(more) < CHUNK:
            return tail + more + self.fh.read(), None  # (at its end: the last read is b"")
        fd, name = tempfile.mkstemp(prefix="spill-", dir=spill_dir)
        with os.fdopen(fd, "wb") as out:
            out.write(tail)
            while more:
                out.write(more)
                more = self.fh.read(CHUNK)
        return b"", Path(name)

    def spill_value(self, spill_dir: Path) -> tuple[Path, int]:
        """Copy one JSON value (too big to hold) to a temp file, chunk by chunk."""
        fd, name = tempfile.mkstemp(prefix="spill-", dir=spill_dir)
        scanner = _ValueScanner()
        size = 0
        with os.fdopen(fd, "wb") as out:
            while True:
                piece = self.text[self.pos:]
                end = scanner.feed(piece)
                taken = piece if end is None else piece[:end]
                data = taken.encode("utf-8")
                out.write(data)
                size += len(data)
                if end is not None:
                    self.pos += end
                    self.compact()
                    return Path(name), size
                self.text, self.pos = "", 0
                if not self.fill():
                    return Path(name), size


_JSON_WS: Final = re.compile(r"[ \t\n\r]*")


class _ValueScanner:
    """Finds where one JSON value ends across chunks (strings and escapes respected): a
    container at its closing bracket, a string at its closing quote, any other value before
    the ',' or bracket that follows it."""

    _STRUCT = re.compile(r'["\\\[\]{},]')

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False

    def feed(self, text: str) -> int | None:
        i = 0
        while i < len(text):
            if self.escape:
                self.escape, i = False, i + 1
                continue
            m = self._STRUCT.search(text, i)
            if m is None:
                return None
            c, i = m.group(), m.end()
            if self.in_string:
                if c == "\\":
                    self.escape = True
                elif c == '"':
                    self.in_string = False
                    if self.depth == 0:
                        return i
            elif c == '"':
                self.in_string = True
            elif c in "[{":
                self.depth += 1
            elif c in "]}":
                if self.depth == 0:
                    return i - 1  # a bare number or literal, ended by the array's end
                self.depth -= 1
                if self.depth == 0:
                    return i
            elif c == "," and self.depth == 0:
                return i - 1  # a bare number or literal, ended by the separator
        return None
