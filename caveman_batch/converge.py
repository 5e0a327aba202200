"""OUT follows the registry: what a run changed since the last one, and stale outputs gone.

At the end of every run that finds a previous manifest (incremental or not), its rows are
compared with the new manifest's, document by document:

- A document is known by its source file, and within a stream (a JSONL line, a registry
  item) first by its content (sha256: lines that only moved when another was removed or
  added stay the same documents), then, for those left, by where they lie among those
  that kept their order (a line edited in place is changed, whatever moved around it); a
  one-document file is known by its path alone.
- Paired, it is *unchanged* if its status, handle, output path and output bytes are as
  before, else *changed*; one the previous manifest lacks is *added*, one this run lacks
  *removed*.

Outputs that the previous manifest (or a killed run's journal, below) names and this run
does not write again are stale: they are deleted before the new manifest is published,
never after, so a crash in between leaves the old manifest naming outputs that are gone,
which the next run simply cannot reuse and deletes again (a no-op). Only a regular file
under OUT is ever deleted, reached without following a symbolic link, and then each folder
it leaves empty up to OUT; anything no manifest named is never touched.

Every output is noted in a journal beside the manifest before it is renamed into OUT, and
the journal goes once the manifest is published: a run killed in between leaves outputs no
manifest names, and the next run counts them as its predecessor's (stale if not written
again). An output no row names (a registry array broken at its first item, whose one row
is an error with no output) stays named there once the manifest is out, for the next run
to judge alike (a stream with no document is named by the fingerprint's record of it).

Rows that a rerun carries over whole (a source reused whole) are unchanged by definition:
they are skipped on both sides, never parsed; the rest are held one small record each.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import hashlib
import os
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson

from . import fsio
from .errors import OutputError


def journal_path(manifest: Path) -> Path:
    """Beside the manifest, hidden: outputs renamed into OUT since it was last published."""
    return manifest.with_name(f".{manifest.stem}.pending.jsonl")


@dataclass(frozen=True, slots=True)
class Doc:
    """One document as a manifest row tells it, held small (a rerun that reuses documents
    one by one holds one per row on each side): digests as bytes, names shared, what it
    came to folded into one digest (compared, never shown)."""

    path: str  # its source file (one string for all of a stream's documents)
    kind: str | None  # "line" or "item" in a stream; None for a one-document file
    position: int | None
    sha256: bytes | None  # of the original (None: oversize, unreadable)
    handle: bytes | str | None  # the sha256 itself when ccr_<sha256> (always, as written here)
    output: str | None  # its output's path under OUT
    outcome: bytes  # status, sha256 of the output bytes, bytes before and after

    @classmethod
    def of(cls, row: Any, names: dict[str, str]) -> Doc | None:
        if not isinstance(row, dict) or not isinstance(row.get("source"), dict):
            return None
        source = row["source"]
        path = source.get("path")
        if type(path) is not str:
            return None
        kind = "line" if "line" in source else "item" if "item" in source else None
        position = source.get(kind) if kind else None
        where = row.get("output")
        output = where.get("path") if isinstance(where, dict) else None
        sha256 = _digest(row.get("sha256"))
        handle = row.get("handle")
        if sha256 is not None and handle == "ccr_" + row["sha256"]:
            handle = sha256
        elif type(handle) is not str:
            handle = None
        outcome = hashlib.blake2b(orjson.dumps([row.get("status"), row.get("out_sha256"),
                                                row.get("bytes_before"), row.get("bytes_after")]),
                                  digest_size=16).digest()
        return cls(names.setdefault(path, path), kind,
                   position if type(position) is int else None, sha256, handle,
                   names.setdefault(output, output) if type(output) is str else None, outcome)

    @property
    def source(self) -> dict[str, Any]:
        return {"path": self.path} if self.kind is None else {"path": self.path, self.kind: self.position}

    @property
    def handle_text(self) -> str | None:
        return "ccr_" + self.handle.hex() if isinstance(self.handle, bytes) else self.handle


def _digest(value: Any) -> bytes | None:
    """A row's sha256 as its 32 bytes, or None (absent, or not a sha256)."""
    if type(value) is not str or len(value) != 64:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


@dataclass
class Changes:
    """What a run changed, by source document, and what became of stale outputs."""

    added: int = 0
    changed: int = 0
    unchanged: int = 0
    removed: int = 0
    outputs_deleted: int = 0
    outputs_kept: int = 0  # stale, kept (--keep-removed)
    outputs_unread: int = 0  # of sources (files, folders) that could not be read: kept
    lines: list[dict[str, Any]] | None = None  # for --changes: one per added/changed/removed

    def pair(self, old: Doc, new: Doc) -> None:
        if (old.outcome, old.handle, old.output) == (new.outcome, new.handle, new.output):
            self.unchanged += 1
            return
        self.changed += 1
        self._line("changed", new, old.handle_text, new.handle_text)

    def add(self, new: Doc) -> None:
        self.added += 1
        self._line("added", new, None, new.handle_text)

    def remove(self, old: Doc) -> None:
        self.removed += 1
        self._line("removed", old, old.handle_text, None)

    def _line(self, change: str, doc: Doc, old_handle: str | None, new_handle: str | None) -> None:
        if self.lines is not None:
            self.lines.append({"change": change, "source": doc.source, "output": doc.output,
                               "old_handle": old_handle, "new_handle": new_handle})

    def sorted_lines(self) -> list[dict[str, Any]]:
        """By source path, position, then removed before changed before added."""
        rank = {"removed": 0, "changed": 1, "added": 2}
        return sorted(self.lines or (), key=lambda line: (
            line["source"]["path"], _position(line["source"]), rank[line["change"]]))

    def as_dict(self) -> dict[str, int]:
        return {"added": self.added, "changed": self.changed, "unchanged": self.unchanged,
                "removed": self.removed, "outputs_deleted": self.outputs_deleted,
                "outputs_kept": self.outputs_kept, "outputs_unread": self.outputs_unread}


def _position(source: dict[str, Any]) -> int:
    at = source.get("line", source.get("item"))
    return at if type(at) is int else -1


def classify(old: list[Doc], new: list[Doc], changes: Changes) -> None:
    """One source file's documents: paired by content first; those left, by where they lie
    among the ones that paired and stayed in order (as a diff aligns lines: the longest
    run of them in the same order on both sides, see _aligned): between the same two
    such documents, in order. A one-document file's old and new document pair up so."""
    by_content: dict[bytes, deque[int]] = {}
    for i, doc in enumerate(old):
        if doc.sha256 is not None:
            by_content.setdefault(doc.sha256, deque()).append(i)
    # each new document's old index if paired by content (_MOVED once it is not aligned), or _LEFT
    match = [_LEFT] * len(new)
    paired: list[int] = []  # the old indexes paired, in the new order
    taken = [False] * len(old)
    for j, doc in enumerate(new):
        same = by_content.get(doc.sha256) if doc.sha256 is not None else None
        if same:
            match[j] = i = same.popleft()
            taken[i] = True
            paired.append(i)
            changes.pair(old[i], doc)
    anchors = [False] * len(old)  # the old documents paired and aligned
    moved = set(_unaligned(paired))
    for j, i in enumerate(match):
        if i in moved:
            match[j] = _MOVED
        elif i >= 0:
            anchors[i] = True
    new_left: dict[int, list[Doc]] = {}  # by the old index of the last aligned document before
    anchor = -1
    for j, doc in enumerate(new):
        if match[j] >= 0:
            anchor = match[j]
        elif match[j] == _LEFT:
            new_left.setdefault(anchor, []).append(doc)
    old_left: dict[int, list[Doc]] = {}
    anchor = -1
    for i, doc in enumerate(old):
        if anchors[i]:
            anchor = i
        elif not taken[i]:
            old_left.setdefault(anchor, []).append(doc)
    for at in sorted(new_left.keys() | old_left.keys()):
        olds, news = old_left.get(at, []), new_left.get(at, [])
        for before, after in zip(olds, news):
            changes.pair(before, after)
        for doc in news[len(olds):]:
            changes.add(doc)
        for doc in olds[len(news):]:
            changes.remove(doc)


_LEFT: Final = -1  # (classify) a new document not paired by content
_MOVED: Final = -2  # paired by content, but out of order with the aligned ones


def _unaligned(olds: list[int]) -> list[int]:
    """Of these old indexes (of documents paired by content, in their new order), those a
    diff would not align: all but a longest increasing run (none when they are in order,
    as when lines were only inserted or removed). The documents that moved across others
    are then no landmarks: a line edited where it lies, with the lines before it reordered,
    lies between the same landmarks on both sides (and is changed, not removed and added)."""
    if all(a < b for a, b in zip(olds, olds[1:])):
        return []
    tails: list[int] = []  # tails[k]: the least last value of an increasing run of k + 1
    ends: list[int] = []  # where in olds that run ends
    before = [-1] * len(olds)  # the run's element before each
    for at, value in enumerate(olds):
        k = bisect.bisect_left(tails, value)
        before[at] = ends[k - 1] if k else -1
        if k == len(tails):
            tails.append(value)
            ends.append(at)
        else:
            tails[k], ends[k] = value, at
    aligned = [False] * len(olds)
    at = ends[-1]
    while at >= 0:
        aligned[at] = True
        at = before[at]
    return [value for value, kept in zip(olds, aligned) if not kept]


@dataclass
class _Side:
    """One manifest's rows outside the carried spans: documents by source path, outputs."""

    docs: dict[str, list[Doc]] = field(default_factory=dict)
    outputs: set[str] = field(default_factory=set)
    names: dict[str, str] = field(default_factory=dict)  # one string per path named

    kept: list[bytes] = field(default_factory=list)  # the rows `keep` asked for, as read

    def read(self, fh: BinaryIO, skip: list[tuple[int, int]],
             keep: Callable[[str], bool] | None = None) -> None:
        self.read_lines(_rows_outside(fh, skip), keep)

    def read_lines(self, lines: Iterable[bytes], keep: Callable[[str], bool] | None = None) -> None:
        for line in lines:
            try:
                doc = Doc.of(orjson.loads(line), self.names)
            except orjson.JSONDecodeError:
                continue  # a row we cannot read names nothing we may touch
            if doc is None:
                continue
            self.docs.setdefault(doc.path, []).append(doc)
            if doc.output is not None:
                self.outputs.add(doc.output)
            if keep is not None and doc.output is not None and keep(doc.path):
                self.kept.append(line if line.endswith(b"\n") else line + b"\n")


def _rows_outside(fh: BinaryIO, skip: list[tuple[int, int]]) -> Iterator[bytes]:
    """The lines of fh outside the byte ranges `skip` (sorted, each a whole number of rows)."""
    at = 0
    for start, end in [*skip, (-1, -1)]:
        fh.seek(at)
        while start < 0 or at < start:
            line = fh.readline()
            if not line:
                return
            at += len(line)
            yield line
        at = max(at, end)


class Converger:
    """Kept by the publisher through a run: the previous manifest (opened when the run
    starts), the rows carried over from it, the journal of outputs renamed into OUT."""

    def __init__(self, out: Path, scratch: Path, manifest: Path, fingerprint: Path,
                 protected: list[Path], keep_removed: bool, want_lines: bool,
                 streams_to_come: bool = False) -> None:
        self.out, self.keep_removed, self.want_lines = out, keep_removed, want_lines
        self.scratch = _rel_under(out, scratch)
        self.protected = {_rel_under(out, p) for p in [manifest, fingerprint, *protected]}
        self.previous = _open_regular(manifest)
        self.journal = journal_path(manifest)
        self.manifest = manifest
        self.protected.add(_rel_under(out, self.journal))
        # outputs no row names: a killed run's (journal), streams with no document (the
        # fingerprint's: parsed now, before anything of this run can replace it, unless
        # `streams_to_come`: the run, which parses it anyway, hands its parse over)
        self.journaled, self.journal_rows = _read_journal(self.journal)
        self.fingerprint = fingerprint
        self.empty_streams: set[str] | None = set() if self.previous is None else None
        if self.empty_streams is None and not streams_to_come:
            self.empty_streams = _empty_streams(fingerprint)
        self.journal_fd: int | None = None
        self.before: set[str] | None = None  # the last run's outputs, read only when needed
        self.cleared = 0  # stale outputs deleted to make way for this run's
        # Sources this run could not read: their output paths (a folder's: "" or ending in
        # "/"), and their paths as the manifest names sources (a file's; a folder's, and
        # with "/" after it for every source under it; "" for SRC "."). Their last outputs
        # are unknown, not stale: kept (`held`), and with their last rows (`carried_over`)
        # named in the journal left behind, for the next run to judge.
        self.unread: list[str] = []
        self.unread_sources: list[str] = []
        self.held: list[str] = []
        # this run's outputs no row names, nor the fingerprint (a registry array broken at
        # its first item: its one row an error with no output, its rest copied through):
        # kept named in the journal, or the next run could not know them
        self.unnamed_outputs: list[str] = []
        self.carried_over: list[bytes] = []
        self.carried: list[tuple[int, int, int, int]] = []  # old start, end; new start, end
        self.carried_rows = 0
        self.staged: list[tuple[Path, Path]] = []  # (temp file, target): see stage()
        self.write_into: tuple[Path, bytes] | None = None

    def knows_streams(self, streams: Any) -> None:
        """The last run's fingerprint's "streams", as the run parsed it (a rerun reads the
        fingerprint anyway: one parse of 16k records less); None: it had none readable."""
        if self.empty_streams is None:
            self.empty_streams = _empty_of(streams)

    @property
    def unnamed(self) -> set[str]:
        if self.empty_streams is None:  # (streams_to_come, and none came: read it now)
            self.empty_streams = _empty_streams(self.fingerprint)
        return self.journaled | self.empty_streams

    def carry(self, old_start: int, old_end: int, new_start: int, new_end: int, rows: int) -> None:
        """Rows copied as they were from the previous manifest: unchanged documents."""
        self.carried.append((old_start, old_end, new_start, new_end))
        self.carried_rows += rows

    def note_output(self, rel: str) -> None:
        """Before an output is renamed into OUT: in the journal (survives a SIGKILL: written
        through, not buffered)."""
        self.note_outputs([rel])

    def note_outputs(self, rels: list[str]) -> None:
        """note_output for several outputs in one write (a batch's files, before the first
        of them is renamed): the journal names each before it can be in OUT, as one by one."""
        if not rels:
            return
        self._append_journal(b"".join(orjson.dumps(rel) + b"\n" for rel in rels))

    def _append_journal(self, data: bytes) -> None:
        """The journal beside the manifest, on its file system: a failure there (a full
        disk) names the manifest, not OUT (which may lie on another disk)."""
        try:
            if self.journal_fd is None:
                self.journal_fd = os.open(self.journal, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
                if _torn(self.journal_fd):  # a run killed mid-write: its last line stays apart
                    data = b"\n" + data
            while data:  # a regular file takes it whole; a short write (disk full) goes on or raises
                data = data[os.write(self.journal_fd, data):]
        except OSError as exc:
            raise OutputError(f"{self.manifest}: cannot write (its journal of outputs): "
                              f"{exc.strerror or exc}") from exc

    def note_unnamed(self, rel: str) -> None:
        """An output no row of this run names (see unnamed_outputs), once in OUT."""
        self.unnamed_outputs.append(rel)

    def _outputs_before(self) -> set[str]:
        """Every output the last run left (its manifest's and the unnamed), read once."""
        if self.before is None:
            side = _Side()
            if self.previous is not None:
                side.read(self.previous, [])
            side.read_lines(self.journal_rows)
            self.before = side.outputs | self.unnamed
        return self.before

    def make_way_for_folder(self, folder: str) -> None:
        """This run writes under OUT/folder, where a file stands in the way of one of its
        folders: a source file replaced by a folder of the same name. A file the last run
        wrote there is stale (no output of this run can be it): deleted. Anything else is
        an OutputError naming it, untouched."""
        parts = _parts(folder)
        if parts is None:
            return
        for i in range(1, len(parts) + 1):
            rel = "/".join(parts[:i])
            try:
                st = os.lstat(os.path.join(self.out, rel))
            except FileNotFoundError:
                return
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode) or rel not in self._outputs_before():
                raise OutputError(f"{self.out / rel}: in the way of the output folder "
                                  f"{self.out / folder}, and not an output of ours: not touched")
            if _regular(self.out, parts[:i], delete=True):
                self.cleared += 1
            return

    def make_way_for_file(self, rel: str) -> None:
        """This run writes OUT/rel, where a folder stands: a source folder replaced by a
        file of the same name. If everything under it is outputs the last run wrote (and
        folders), they are stale and deleted, the folders with them; anything else is an
        OutputError naming it, and nothing is touched."""
        top = os.path.join(self.out, rel)
        before = self._outputs_before()
        files, folders = [], []
        for folder, dirs, names in os.walk(top, onerror=_raise):
            folders.append(folder)
            for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                path = os.path.join(folder, name)
                under = os.path.relpath(path, self.out).replace(os.sep, "/")
                if under not in before or not stat.S_ISREG(os.lstat(path).st_mode):
                    raise OutputError(f"{path}: in the folder {top}, where this run writes an "
                                      "output, and not an output of ours: not touched")
                files.append(under)
        for under in files:
            parts = _parts(under)
            if parts is not None and _regular(self.out, parts, delete=True):
                self.cleared += 1
        for folder in reversed(folders):
            with contextlib.suppress(OSError):
                os.rmdir(folder)

    def keep(self, rel: str, source: str, folder: bool) -> None:
        """A source that could not be read this time: its outputs (under it, a folder's)
        stay, and its documents of the last run are neither removed nor changed (a
        --changes file saying "removed" would have a consumer drop what is still there)."""
        self.unread.append(rel)
        if folder:
            self.unread_sources += [""] if source == "." else [source.rstrip("/"),
                                                               source.rstrip("/") + "/"]
        else:
            self.unread_sources.append(source)

    def _unread_of(self, rel: str) -> bool:
        return _named_by(rel, self.unread)

    def _unread_source(self, path: str) -> bool:
        return _named_by(path, self.unread_sources)

    def settle(self, new_manifest: Path, written: set[str], documents: int) -> Changes:
        """Before the new manifest is published: what changed, and stale outputs deleted
        (or counted, --keep-removed). `written`: outputs this run wrote or carried over
        (a stream with no document has no row to say so)."""
        changes = Changes(lines=[] if self.want_lines else None)
        if self.previous is None and not self.unnamed and not self.journal_rows \
                and not self.want_lines:
            changes.added = documents  # a first run: nothing to compare, nothing stale
            return changes
        changes.unchanged = self.carried_rows
        old, new = _Side(), _Side()
        keep = self._unread_source if self.unread else None
        if self.previous is not None:
            old.read(self.previous, sorted((a, b) for a, b, _, _ in self.carried), keep)
        old.read_lines(self.journal_rows, keep)  # rows an earlier run could not read again
        with open(new_manifest, "rb") as fh:
            new.read(fh, [(c, d) for _, _, c, d in self.carried])
        for path in sorted(old.docs.keys() | new.docs.keys()):
            olds = old.docs.get(path, [])
            if self.unread and self._unread_source(path):
                # not read: its documents are unknown, neither removed nor changed (they go
                # on, below); only its error row is compared, with the last run's (if any)
                olds = [doc for doc in olds if doc.output is None]
            classify(olds, new.docs.get(path, []), changes)
        # the last run's rows of sources not read this time go on, in the journal: the next
        # run compares with them (and deletes their outputs if their sources are gone)
        self.carried_over = old.kept
        stale = (old.outputs | self.unnamed) - new.outputs - written - self.protected
        if self.unread:
            held = {rel for rel in stale if self._unread_of(rel)}
            stale -= held
            for rel in sorted(held):
                parts = _parts(rel)
                if parts is not None and parts[0] != self.scratch and _regular(
                        self.out, parts, delete=False):
                    self.held.append(rel)
            changes.outputs_unread = len(self.held)
        self._clear(sorted(stale), changes)
        changes.outputs_deleted += self.cleared
        if self._keeps_journal():
            # in the journal before the manifest that no longer names them is published: a
            # run killed in between leaves them named (published() then keeps only these)
            self._append_journal(self._kept_lines())
        return changes

    def _keeps_journal(self) -> bool:
        return bool(self.held or self.carried_over or self.unnamed_outputs)

    def _kept_lines(self) -> bytes:
        rels = [*self.held, *sorted(set(self.unnamed_outputs))]
        return b"".join([*(orjson.dumps(rel) + b"\n" for rel in rels), *self.carried_over])

    def _clear(self, stale: list[str], changes: Changes) -> None:
        emptied: set[tuple[str, ...]] = set()
        for rel in stale:
            parts = _parts(rel)
            if parts is None or parts[0] == self.scratch:
                continue
            if self.keep_removed:
                changes.outputs_kept += _regular(self.out, parts, delete=False)
            elif _regular(self.out, parts, delete=True):
                changes.outputs_deleted += 1
                emptied.update(parts[:i] for i in range(1, len(parts)))
        for folder in sorted(emptied, key=len, reverse=True):  # the deepest first
            _rmdir_empty(self.out, folder)

    def stage(self, changes: Changes, changes_file: Path | None) -> None:
        """Before the new manifest is published: the journal's next content and the
        --changes file written whole beside them, to be renamed into place once it is
        (published). A disk that fills, or a file size limit, fails the run here, with the
        last run's manifest in place, so a rerun reports these changes again; after the
        manifest, the report was lost for good (the rerun compared with this run's
        manifest). A --changes file that is not a regular file (a FIFO, a device,
        /dev/stdout) is written into after the manifest: nothing can be staged there."""
        if self._keeps_journal():
            self.staged.append((fsio.staged_write(self.journal, self._kept_lines()), self.journal))
        if changes_file is None:
            return
        data = b"".join(orjson.dumps(line) + b"\n" for line in changes.sorted_lines())
        if not fsio.regular_or_absent(changes_file):
            self.write_into = (changes_file, data)
            return
        target = changes_file  # (a symlink stays one, its file replaced)
        if os.path.islink(changes_file):
            target = Path(os.path.realpath(changes_file))
        self.staged.append((fsio.staged_write(target, data), target))

    def published(self) -> None:
        """After the new manifest is published: the journal goes (or is left naming only
        what the next run must judge), the changes file comes."""
        self.close()
        if not self._keeps_journal():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.journal)
        while self.staged:
            tmp, target = self.staged.pop(0)
            fsio.publish_staged(tmp, target)
        if self.write_into is not None:
            fsio.write_target(*self.write_into)
            self.write_into = None

    def abandon(self) -> None:
        """A run that fails before published(): what it staged goes."""
        for tmp, _ in self.staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self.staged = []
        self.close()

    def close(self) -> None:
        if self.journal_fd is not None:
            os.close(self.journal_fd)
            self.journal_fd = None
        if self.previous is not None:
            self.previous.close()
            self.previous = None


def _named_by(path: str, names: list[str]) -> bool:
    """Whether `path` is one of `names` or lies under one of them that is a folder ("" or
    ending in "/")."""
    return any(path == n or (not n or n.endswith("/")) and path.startswith(n) for n in names)


def _raise(exc: OSError) -> None:
    raise exc


def _open_regular(path: Path) -> BinaryIO | None:
    try:
        fh = open(path, "rb")
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
        fh.close()
        return None
    return fh


def _torn(fd: int) -> bool:
    """Does the file end inside a line (a write cut short by a SIGKILL)?"""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _read_journal(path: Path) -> tuple[set[str], list[bytes]]:
    """The outputs a journal names (a JSON string a line), and the manifest rows it keeps
    (a JSON object a line: the last rows of sources a run could not read)."""
    try:
        data = path.read_bytes()
    except OSError:
        return set(), []
    found, rows = set(), []
    for line in data.splitlines():
        if line.startswith(b"{"):
            rows.append(line)
            continue
        with contextlib.suppress(orjson.JSONDecodeError):
            rel = orjson.loads(line)
            if type(rel) is str:
                found.add(rel)
    return found, rows


def _empty_streams(fingerprint: Path) -> set[str]:
    """Outputs of file sources with no document that the last run's fingerprint records."""
    try:
        parsed = orjson.loads(fingerprint.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return set()
    return _empty_of(parsed.get("streams") if isinstance(parsed, dict) else None)


def _empty_of(streams: Any) -> set[str]:
    """The outputs of a fingerprint's "streams" whose sources held no document."""
    if not isinstance(streams, dict):
        return set()
    return {rel for rel, r in streams.items() if isinstance(r, dict) and r.get("rows") == 0}


def _rel_under(out: Path, path: Path) -> str | None:
    """`path` as an output path under OUT, or None if it is not under OUT."""
    try:
        return path.absolute().relative_to(out.absolute()).as_posix()
    except ValueError:
        return None


def _parts(rel: str) -> tuple[str, ...] | None:
    """A manifest's output path as its components, or None if it could lead out of OUT
    (absolute, `..`, empty or `.` components, a NUL)."""
    parts = tuple(rel.split("/"))
    if not rel or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def _open_folder(out: Path, folders: tuple[str, ...]) -> int:
    """An fd of OUT/folders, each component opened without following a symbolic link."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in folders:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


# Why a stale output may not be there to delete: gone already (a rerun after a crash), or
# behind a path component that is a file or a symbolic link (never followed).
_NOT_THERE: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


def _regular(out: Path, parts: tuple[str, ...], delete: bool) -> bool:
    """Whether OUT/parts is a regular file reached through real folders (and if `delete`,
    it is deleted); False if it is not there or is anything else (left alone). Any other
    failure (permissions, a read-only file system) is an OutputError naming it."""
    try:
        fd = _open_folder(out, parts[:-1])
        try:
            if not stat.S_ISREG(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
                return False
            if delete:
                os.unlink(parts[-1], dir_fd=fd)
            return True
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in _NOT_THERE:
            return False
        where = out.joinpath(*parts)
        raise OutputError(f"{where}: cannot delete stale output: {exc.strerror or exc}") from exc


def _rmdir_empty(out: Path, folder: tuple[str, ...]) -> None:
    """Remove OUT/folder if it is now empty (rmdir refuses otherwise)."""
    try:
        fd = _open_folder(out, folder[:-1])
    except OSError:
        return
    try:
        os.rmdir(folder[-1], dir_fd=fd)
    except OSError:
        pass  # not empty, or not ours to remove
    finally:
        os.close(fd)
