"""Publish: the only writer of OUT. Outputs by rename, the manifest last, then the
fingerprint and the stat cache for the next run."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from .. import converge, fsio
from ..errors import OutputError
from ..inputs import Document, Sink, SinkEnd
from .incremental import ReusedRun, ReusedStream, _Previous, _Span
from .model import LOCK_FILE, TMP_DIR, Config, Result, Summary, _Tally

_MANIFEST_BUFFER = 1 << 20
# a handle a manifest row names: its digest (rows are compact JSON, written by orjson)
_HANDLE = re.compile(rb'"handle":"ccr_([0-9a-f]{64})"')


class _Publisher:
    """The only writer of OUT: files by rename, streams renamed when complete."""

    def __init__(self, out: Path, tmp: Path, config: Config) -> None:
        self.out, self.tmp, self.config = out, tmp, config
        self.out_str = str(out)
        self.streams: dict[int, tuple[BinaryIO, Path]] = {}  # id(sink) -> (open temp file, its path)
        _clear_temps([config.streams_path, config.stats_path, converge.journal_path(config.manifest_path),
                      *([config.changes] if config.changes else [])])
        self.manifest_tmp = _manifest_temp(config.manifest_path, out, tmp)
        # written in 1 MiB writes, not 8 KiB ones (2,369 writes for a 16k-file tree's 8.7 MB)
        try:
            self.manifest: BinaryIO = open(self.manifest_tmp, "wb", buffering=_MANIFEST_BUFFER)
        except OSError as exc:
            raise OutputError(f"{config.manifest_path}: cannot write: {exc.strerror or exc}") from exc
        self.manifest_sha256 = hashlib.sha256()
        self.manifest_bytes = 0
        self.rows = 0
        self.written: set[str] = set()
        self.folders: set[str] = set()  # made (or found) under OUT
        self.temps = 0  # temp files made so far (each its own name)
        # this batch's files written in temp files, to rename once all are (_rename_files):
        # (temp, target, sink)
        self.renames: list[tuple[str, str, Sink]] = []
        # JSONL outputs: sha256 of what was written, first manifest row; then their records
        self.hashes: dict[int, tuple[Any, int]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.handles: set[bytes] = set()  # the digests (hex) of the handles its rows name
        self.tallies: dict[int, _Tally] = {}  # id(sink) -> its rows so far (fingerprinted sinks)
        self.stats: dict[str, Sequence[list[int] | None]] = {}  # rel -> [source, output] identity
        self.converge = converge.Converger(
            out, tmp, config.manifest_path, config.streams_path,
            [config.stats_path, out / LOCK_FILE, *([config.changes] if config.changes else [])],
            config.keep_removed, want_lines=config.changes is not None,
            streams_to_come=config.incremental)  # _load_previous parses the fingerprint

    def __enter__(self) -> _Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        # Files still open here belong to a run that failed (finish() closed the manifest,
        # each stream's end its file): a close that cannot flush its buffer (the disk full,
        # as the failure itself may be) must not hide why the run failed.
        for fh in [*(fh for fh, _ in self.streams.values()), self.manifest]:
            with contextlib.suppress(OSError):
                fh.close()
        self.converge.abandon()  # (after published(): nothing left to abandon)
        self.manifest_tmp.unlink(missing_ok=True)  # published by finish(), or abandoned

    def publish(self, batch: list[Any], results: list[Result | None], summary: Summary,
                previous: _Previous) -> None:
        # Rows of reused sources that lie one after another in the previous manifest are
        # copied in one go (a tree's unchanged files usually do).
        copying = _Span(rows=0)

        def copy() -> None:
            start = self.manifest_bytes
            for block in previous.rows_of(copying):
                self._block(block)
            if copying.rows:
                self.converge.carry(copying.start, copying.end, start, self.manifest_bytes,
                                    copying.rows)
            copying.rows = 0

        def carry(rel: str, record: dict[str, Any], span: _Span) -> None:
            self.records[rel] = record
            record["first_row"] = self.rows  # (its own: popped from the previous fingerprint)
            if span.rows and copying.rows and span.start == copying.end:
                copying.end, copying.rows = span.end, copying.rows + span.rows
            elif span.rows:
                copy()
                copying.start, copying.end, copying.rows = span.start, span.end, span.rows
            self.rows += span.rows

        for item, result in zip(batch, results):
            sink = getattr(item, "sink", None)  # (a write with no file name names its output)
            with _as_output_error(self.out, None if sink is None else sink.rel):
                if isinstance(item, ReusedRun):
                    if item.adjacent:
                        self._carry_adjacent(item, copying, copy)
                    else:
                        for rel, record, span in zip(item.rels, item.records, item.spans):
                            carry(rel, record, span)
                    self.stats.update(zip(item.rels, item.stats))
                    summary.add_reused_all(item.records)
                    continue
                if isinstance(item, ReusedStream):
                    carry(item.rel, item.record, item.span)
                    if item.stats is not None:
                        self.stats[item.rel] = item.stats
                    summary.add_reused(item.record["totals"], item.record["errors"])
                    continue
                copy()
                if isinstance(item, SinkEnd):
                    self._close(item.sink)
                    continue
                assert result is not None
                if item.sink.fingerprint:
                    self.tallies.setdefault(id(item.sink), _Tally()).add(result.row)
                result.row["output"] = self._write(item, result)
                self._row(orjson.dumps(result.row))
            summary.add(result.row, result.touch is not None)
        with _as_output_error(self.out):
            copy()
            self._rename_files()

    def _carry_adjacent(self, run: ReusedRun, copying: _Span, copy: Any) -> None:
        """publish's carry() of each source of a run whose rows lie one after another (see
        ReusedRun.adjacent): their rows as one span, their first_row moved all alike (not
        at all when nothing before them moved, as in a settled tree)."""
        spans = [span for span in run.spans if span.rows]
        if spans:
            start, end = spans[0].start, spans[-1].end
            if copying.rows and start == copying.end:
                copying.end, copying.rows = end, copying.rows + run.documents
            else:
                copy()
                copying.start, copying.end, copying.rows = start, end, run.documents
        moved = self.rows - run.records[0]["first_row"]
        if moved:
            for record in run.records:
                record["first_row"] += moved
        self.records.update(zip(run.rels, run.records))
        self.rows += run.documents

    def _rename_files(self) -> None:
        """The batch's files into OUT by rename, once their originals are committed (the
        caller's order) and all of them are in the journal, in one write: each is named
        there before it can be in OUT, as when noted one by one."""
        if not self.renames:
            return
        self.converge.note_outputs([sink.rel for _, _, sink in self.renames])
        for temp, target, sink in self.renames:
            self._place(temp, target, sink.rel)
            self.written.add(sink.rel)
            self._stat(sink, target)
        self.renames = []

    def _manifest_write(self, data: bytes) -> None:
        try:
            self.manifest.write(data)
        except OSError as exc:
            raise OutputError(f"{self.config.manifest_path}: cannot write: {exc.strerror or exc}") from exc

    def _row(self, line: bytes) -> None:
        line += b"\n"
        self._manifest_write(line)
        self.manifest_sha256.update(line)
        self.manifest_bytes += len(line)
        self.rows += 1
        self.handles.update(_HANDLE.findall(line))

    def _block(self, block: bytes) -> None:
        self._manifest_write(block)
        self.manifest_sha256.update(block)
        self.manifest_bytes += len(block)
        self.handles.update(_HANDLE.findall(block))

    def _write(self, doc: Document, result: Result) -> dict[str, Any] | None:
        sink = doc.sink
        if result.data is None and doc.spill is None and result.spooled is None:
            if doc.keep_outputs:
                self.converge.keep(sink.rel, str(doc.source["path"]),
                                   folder=sink.rel.endswith("/") or not sink.rel)
            return None  # unreadable: nothing to copy
        if sink.kind == "file":
            return self._write_file(doc, result)
        fh, _ = self._stream(sink)
        hashed = self.hashes.get(id(sink))
        if sink.count and sink.kind == "array":
            fh.write(b",")
            if hashed:
                hashed[0].update(b",")
        start = fh.tell()
        copied = self._emit(fh, doc, result, hashed[0] if hashed else None)
        if copied is not None:
            result.row["out_sha256"] = copied
        length = fh.tell() - start
        if sink.kind == "jsonl":
            fh.write(b"\n")
            if hashed:
                hashed[0].update(b"\n")
        sink.count += 1
        return {"path": sink.rel, "offset": start, "length": length}

    def _write_file(self, doc: Document, result: Result) -> dict[str, Any]:
        # paths as plain strings: a tree has thousands of files, pathlib costs as much as
        # the system calls
        target = f"{self.out}/{doc.sink.rel}"
        if result.in_place is not None and _identity_or_none(target) == result.in_place:
            # its own output, hashed intact when read and unchanged since: nothing to write
            self._file_record(doc, result.row["sha256"], result.row["out_sha256"])
            self._stat(doc.sink, target, result.in_place)
            return {"path": doc.sink.rel}
        if result.spooled is not None:
            temp, copied = result.spooled, None  # its worker wrote it there
        elif result.data is not None:
            temp, copied = f"{self.tmp}/file-{self.temps}", None
            self.temps += 1
            fsio.write_new(temp, result.data)
        else:
            temp = f"{self.tmp}/file-{self.temps}"
            self.temps += 1
            with open(temp, "wb") as fh:
                copied = self._emit(fh, doc, result)
                size = fh.tell()
        self.renames.append((temp, target, doc.sink))
        if copied is None:
            self._file_record(doc, result.row["sha256"], result.row["out_sha256"])
        else:  # copied through as is: the source's bytes are the output's
            result.row["out_sha256"] = copied
            self._file_record(doc, copied, copied, size)
        return {"path": doc.sink.rel}

    def _file_record(self, doc: Document, source_sha256: str | None, output_sha256: str | None,
                     size: int | None = None) -> None:
        """A catalog file is its one document: the file's sha256 is the document's."""
        if doc.sink.fingerprint and source_sha256 and output_sha256:
            self._record(doc.sink, len(doc.raw or b"") if size is None else size, source_sha256,
                         output_sha256, self.rows, 1)
        self.tallies.pop(id(doc.sink), None)

    def _record(self, sink: Sink, size: int, source_sha256: str, output_sha256: str,
                first_row: int, rows: int) -> None:
        """A file source's fingerprint, for the next run (see _candidate, _intact_files)."""
        tally = self.tallies.pop(id(sink), None) or _Tally()
        if tally.totals["documents"] != rows:
            return  # cannot be: its rows are its documents'
        self.records[sink.rel] = {"source": sink.source, "source_size": size,
                                  "source_sha256": source_sha256, "output_sha256": output_sha256,
                                  "first_row": first_row, "rows": rows,
                                  "totals": tally.totals, "errors": tally.errors}

    def _place(self, temp: Path | str, target: Path | str, rel: str) -> None:
        """The output `rel` renamed into OUT, its folder made. Where the last run left an
        output of the other kind (a source file now a folder of the same name, or the other
        way round), that stale output makes way first (converge.make_way_for_*)."""
        folder = os.path.dirname(target)
        try:
            self._folder(folder)
        except (FileExistsError, NotADirectoryError):
            self.converge.make_way_for_folder(os.path.dirname(rel))
            self._folder(folder)
        try:
            os.replace(temp, target)
        except (IsADirectoryError, FileExistsError) as exc:
            if not os.path.isdir(target) or os.path.islink(target):
                raise
            self.converge.make_way_for_file(rel)
            try:
                os.replace(temp, target)
            except OSError:
                raise exc from None

    def _folder(self, folder: str) -> None:
        """mkdir -p, once per folder (a tree of thousands of files has thousands). A folder
        whose parent this run made or found is made by one mkdir: makedirs would stat the
        parent first (5,249 stats of a 16,589-file tree's first run)."""
        if folder in self.folders:
            return
        parent = os.path.dirname(folder)
        if parent in self.folders or parent == self.out_str:
            try:
                os.mkdir(folder)
            except FileExistsError:
                if not os.path.isdir(folder):
                    raise
        else:
            os.makedirs(folder, exist_ok=True)
            self._found_above(parent)
        self.folders.add(folder)

    def _found_above(self, folder: str) -> None:
        """folder and those above it, up to OUT, are there now (made by makedirs)."""
        while folder not in self.folders and folder.startswith(self.out_str + "/"):
            self.folders.add(folder)
            folder = os.path.dirname(folder)

    def _stat(self, sink: Sink, target: Path | str, identity: list[int] | None = None) -> None:
        """The stat cache's entry for a source whose identity settled when it was opened, and
        its output (`identity`, when already known)."""
        if sink.fingerprint and sink.source_stat is not None:
            self.stats[sink.rel] = [sink.source_stat, identity or fsio.identity(os.stat(target))]

    @staticmethod
    def _emit(fh: BinaryIO, doc: Document, result: Result, digest: Any = None) -> str | None:
        """Write a document's output (also into `digest`); if it is copied through from its
        spill, the sha256 of what was copied (its row's out_sha256: what tells a later run
        whether it changed)."""
        if result.data is not None:
            fh.write(result.data)
            if digest is not None:
                digest.update(result.data)
            return None
        assert doc.spill is not None
        copied = hashlib.sha256()
        with open(doc.spill, "rb") as src:
            while chunk := src.read(1 << 20):
                fh.write(chunk)
                copied.update(chunk)
                if digest is not None:
                    digest.update(chunk)
        if doc.spill_owned:
            doc.spill.unlink(missing_ok=True)
        return copied.hexdigest()

    def _stream(self, sink: Sink) -> tuple[BinaryIO, Path]:
        key = id(sink)
        if key not in self.streams:
            temp = self.tmp / f"stream-{self.temps}"
            self.temps += 1
            fh = open(temp, "wb")
            fh.write(sink.prefix)
            self.streams[key] = (fh, temp)
            if sink.fingerprint:
                self.hashes[key] = (hashlib.sha256(sink.prefix), self.rows)
        return self.streams[key]

    def _close(self, sink: Sink) -> None:
        if sink.kind == "file":
            return
        fh, temp = self._stream(sink)
        fh.write(sink.suffix)
        hashed = self.hashes.pop(id(sink), None)
        if hashed is not None:
            hashed[0].update(sink.suffix)
        if sink.suffix_spill is not None:  # a long tail, copied as it is read
            with open(sink.suffix_spill, "rb") as tail:
                while chunk := tail.read(1 << 20):
                    fh.write(chunk)
                    if hashed is not None:
                        hashed[0].update(chunk)
            sink.suffix_spill.unlink(missing_ok=True)
            sink.suffix_spill = None
        fh.close()
        del self.streams[id(sink)]
        target = self.out / sink.rel
        self.converge.note_output(sink.rel)
        self._place(temp, target, sink.rel)
        self.written.add(sink.rel)
        self._stat(sink, target)
        if hashed is not None and sink.source_sha256 is not None:
            self._record(sink, sink.source_size, sink.source_sha256, hashed[0].hexdigest(),
                         hashed[1], self.rows - hashed[1])
        if not sink.count and sink.rel not in self.records:
            # no row names it, nor its fingerprint (as one with no document): the journal
            # must (converge.unnamed_outputs), or the next run could not know it as ours
            self.converge.note_unnamed(sink.rel)

    def finish(self, summary: Summary) -> None:
        try:
            self.manifest.flush()
            os.fsync(self.manifest.fileno())
            self.manifest.close()
        except OSError as exc:
            raise OutputError(f"{self.config.manifest_path}: cannot write: {exc.strerror or exc}") from exc
        with _as_output_error(self.out):
            # stale outputs go before the manifest that no longer names them is published
            changes = self.converge.settle(self.manifest_tmp, self.written | self.records.keys(),
                                           summary.documents)
            self.converge.stage(changes, self.config.changes)  # (a full disk fails here)
            os.replace(self.manifest_tmp, self.config.manifest_path)
            fsio.fsync_dir(self.config.manifest_path.parent)  # the rename too
            self.converge.published()
        summary.changes = changes
        # After the manifest, and tied to it by its sha256 (a stale one is ignored), the
        # fingerprint, then the stat cache tied to the fingerprint. Only shortcuts for the
        # next run: failing to write them does not fail this one, and they are not fsync'd
        # (what they say is checked again before use; one lost costs the shortcut).
        paths = (self.config.streams_path, self.config.stats_path)
        try:
            if not self.records:
                for path in paths:
                    path.unlink(missing_ok=True)
                return
            fingerprint = orjson.dumps({
                "run_key": self.config.run_key, "max_bytes": self.config.max_bytes,
                "manifest_sha256": self.manifest_sha256.hexdigest(),
                "manifest_bytes": self.manifest_bytes, "streams": self.records,
            })
            fsio.atomic_write(paths[0], fingerprint, durable=False)
            # Outputs are not fsync'd: their identities hold only within this boot (after a
            # power loss an output may be whole in name and size, not in bytes). An output
            # changed later in the tick of its ctime would keep its identity: kept only those
            # whose ctime is older than the file system's clock now.
            boot = fsio.boot_id()
            if boot is None:
                paths[1].unlink(missing_ok=True)
                return
            now = fsio.fs_now_ns(self.tmp)
            # (an output's identity is always known, a source's only once settled: both checked)
            stats = {rel: s for rel, s in self.stats.items() if rel in self.records
                     and s[0] is not None and s[1] is not None and s[1][4] < now}
            fsio.atomic_write(paths[1], orjson.dumps({
                "fingerprint_sha256": hashlib.sha256(fingerprint).hexdigest(), "boot_id": boot,
                "stats": stats,
            }), durable=False)
        except OSError:
            for path in paths:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)


def _identity_or_none(path: Path | str) -> list[int] | None:
    try:
        return fsio.identity(os.stat(path))
    except OSError:
        return None


def _clear_temps(paths: Sequence[Path]) -> None:
    """What a killed run left of its atomic writes of these files (fsio.atomic_writer's temp
    file beside each, `.NAME.*.tmp`), deleted: the lock on OUT makes them no other run's
    (each kill in the middle of one left one more, hidden in OUT)."""
    for path in paths:
        for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()


def _manifest_temp(target: Path, out: Path, tmp: Path) -> Path:
    """Where the manifest is written before its rename: on the target's file system."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.resolve().parent.is_relative_to(out.resolve()):
        return tmp / "manifest.jsonl"  # cleared with the rest of a killed run's debris
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    return target.parent / f".{target.name}.{os.getpid()}.tmp"


@contextlib.contextmanager
def _as_output_error(out: Path, rel: str | None = None) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if isinstance(exc, OutputError):
            raise
        raise OutputError(f"{_user_path(exc, out, rel)}: cannot write output: "
                          f"{exc.strerror or exc}") from exc


def _user_path(exc: OSError, out: Path, rel: str | None = None) -> object:
    """What an error names: the output it was about (a rename's target, else `rel`, the
    output being written: a write that fails, the disk full, names no file), never a temp
    file of ours (the user never asked for it), else OUT."""
    for name in (exc.filename2, exc.filename):
        if name is not None and TMP_DIR not in Path(os.fsdecode(name)).parts:
            return name
    return out / rel if rel else out
