"""`compress`: the bulk pipeline, streaming, parallel, incremental, crash-safe.

    sources --> batches of documents --> executor of pure workers --> parent (only writer):
        commit originals (one transaction per batch) --> publish outputs --> manifest rows

Results are consumed in input order from a bounded window of batches in flight,
so memory does not grow with the input and OUT is byte-identical for any worker
count. Every output is published by rename (a file per document, or a JSONL /
array file renamed when its last document is in), always after the originals it
names are durably committed. The manifest is renamed into place last.

The stages, one module each: sources (documents, batches), dispatch (to the executor:
inline, a process pool or Dask, see executors; worker is what they run),
commit (originals into the store), publish (OUT); incremental holds what a rerun reuses
(manifest, fingerprints, stat cache); model what they hand each other. This module runs
them in order, with OUT locked for the run.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import ccr
from ..converge import journal_path
from ..errors import CavemanError, OutputError, SearchIndexError, StoreError, UsageError
from ..fsio import regular_or_absent
from ..inputs import STDIN, discover, refuse_not_there
from ..store import Store, open_store
from .commit import _commit, _index, _Touches
from .dispatch import _dispatch
from .executors import Inline, open_executor, scheduler_address
from .incremental import ReusedStream, _load_previous, _Previous, stat_ahead
from .model import LOCK_FILE, TMP_DIR, Config, Result, Summary
from .publish import _Publisher
from .sources import _batches, _items
from .worker import work

if TYPE_CHECKING:
    from ..indexing import IndexBuilder

__all__ = ["LOCK_FILE", "TMP_DIR", "Config", "Progress", "Result", "ReusedStream", "Summary",
           "run", "work"]


Progress = Callable[[Summary], None]


def run(config: Config, progress: Progress | None = None) -> Summary:
    """Run one batch job; raises StoreError/OutputError (nothing half-done published), or
    UsageError before anything is written if OUT would overwrite a source or another run
    holds OUT."""
    refuse_not_there(config.sources)  # (before OUT is made: OUT untouched)
    _refuse_out_over_sources(config)
    scheduler_address(config.executor)  # a bad --executor, or Dask missing: before any write
    with _caller_objects_frozen() as kept, _out_locked(config.out), contextlib.ExitStack() as locks:
        return _run(config, progress, locks, kept)


def _refuse_out_over_sources(config: Config) -> None:
    """OUT is neither a source nor around one (symlinks resolved): its outputs would be
    written over the sources. (OUT inside a source folder is fine: the walk skips it.)
    Nor is the manifest or the --changes file a source, in a source folder (the next run
    would read it back as a source), a folder, or one the other: all before any write."""
    out = config.out.resolve()
    files = [("--manifest", config.manifest), ("--changes", config.changes)]
    for src in config.sources:
        if src == "-":
            continue
        path = Path(src).resolve()
        if path == out or path.is_relative_to(out):
            where = "is" if path == out else "holds"
            raise UsageError(f"-o {config.out} {where} the source {src}: its outputs would overwrite "
                             "the sources; give an output folder outside them")
        for option, given in files:
            if given is None:
                continue
            target = given.resolve()
            if target == path:
                raise UsageError(f"{option} {given} is the source {src}: it would be written over")
            if target.is_relative_to(path) and not target.is_relative_to(out):
                raise UsageError(f"{option} {given} is in the source folder {src}: the next run "
                                 "would read it as a source; put it elsewhere (in OUT, say)")
    for option, given in files:
        if given is not None and given.is_dir():
            raise UsageError(f"{option} {given} is a folder: give a file path")
    if config.manifest is not None and (config.manifest.is_symlink() or not regular_or_absent(
            config.manifest)):
        # it is replaced by rename, its hidden files made beside it: over /dev/stdout or
        # /dev/null (a link, a device) as root, for the whole machine
        raise UsageError(f"--manifest {config.manifest} is not a regular file (a symbolic "
                         "link, a FIFO, a device): give the path of a file of its own")
    if config.changes is not None:
        own = {path.resolve(): what for path, what in _kept_files(config, with_changes=False).items()}
        what = own.get(config.changes.resolve())
        if what is not None:
            raise UsageError(f"--changes {config.changes} is {what} of this run: give another file")


@contextlib.contextmanager
def _out_locked(out: Path) -> Iterator[None]:
    """OUT for this run alone: an exclusive flock on OUT/.caveman-batch.lock, which holds
    this process's pid (two runs into one OUT, as cron jobs that overlap, would clear each
    other's temp folder and publish each other's outputs). The kernel drops the lock when
    its holder dies: the file a killed run leaves blocks nothing."""
    lock = out / LOCK_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create output folder: {exc.strerror or exc}") from exc
    with _flocked(lock, lambda exc: OutputError(f"{out}: cannot write to the output folder: {exc}"),
                  f"is writing to {out}; wait for it to end, or give another output folder"):
        yield


@contextlib.contextmanager
def _index_locked(index: Path | None) -> Iterator[None]:
    """The search index for this run alone, as OUT is (PATH.lock beside it): two runs into
    one index from two OUTs each removed the catalogs of the other's inputs, and left an
    index of the one that finished last, or of both mixed, both exiting 0."""
    if index is None or os.fspath(index) == ":memory:":  # (no other process can reach that one)
        yield
        return
    lock = index.with_name(index.name + ".lock")
    try:  # its folder made, as OUT's and the store's are ("No such file or directory", exit 2)
        index.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SearchIndexError(f"cannot open search index {index}: cannot create its folder: "
                               f"{exc.strerror or exc}") from exc
    with _flocked(lock, lambda exc: SearchIndexError(f"cannot open search index {index}: {exc}"),
                  f"is building the search index {index}; wait for it to end, or give another index"):
        yield


@contextlib.contextmanager
def _flocked(lock: Path, cannot: Callable[[str], CavemanError], busy: str) -> Iterator[None]:
    """An exclusive flock on `lock`, which holds this process's pid; UsageError naming the
    pid holding it (`busy`: what that run does), `cannot(reason)` if it cannot be written."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise cannot(exc.strerror or str(exc)) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "not written yet"
            raise UsageError(f"{lock}: another compress run (pid {holder}) {busy}") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:  # (a full disk: no file name in the error, not "standard output")
            raise OutputError(f"{lock}: cannot write: {exc.strerror or exc}") from exc
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _caller_objects_frozen() -> Iterator[Callable[[], contextlib.AbstractContextManager[None]]]:
    """The objects that exist before the run are left out of the cyclic garbage collector's
    passes while it runs (gc.freeze): a full pass over a large caller's heap (a test runner's,
    an application's) cost 50 ms every other rerun of a 3,449-file tree, more than the rerun's
    own largest step. Cycles the run makes are collected as ever; nothing is frozen if the
    caller froze objects itself (its freeze is its own to undo). Yields `kept`, for what the
    run loads to hold to its end (see _kept)."""
    if gc.get_freeze_count():
        yield contextlib.nullcontext
        return
    gc.freeze()
    try:
        yield _kept
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _kept() -> Iterator[None]:
    """What the block makes is held to the end of the run: no collection while it runs,
    and what it made frozen after. What a rerun loads of the last run (16k fingerprint
    records and stat entries, ~300k objects for a tree of 16k files, none garbage) was
    otherwise scanned again by each full pass, during the load and after it: ~0.1 s of a
    0.6 s rerun."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _run(config: Config, progress: Progress | None, locks: contextlib.ExitStack,
         kept: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext) -> Summary:
    started = time.perf_counter()
    found = discover(config.sources, config.out, follow_symlinks=config.follow_symlinks,
                     reserved=_reserved(config))
    if not found.entries:
        raise UsageError("no *.json or *.jsonl documents found in " + ", ".join(config.sources))
    locks.enter_context(_index_locked(config.index))  # (once nothing is refused: its file is a write)
    identities = stat_ahead(config, found.entries)  # beside what follows, on a thread
    out = _prepare_out(config.out)
    tmp = out / TMP_DIR
    previous = _Previous()
    summary = Summary()
    executor = open_executor(config.executor, config.workers)
    index = _open_index(config)
    if index is not None and isinstance(executor, Inline):
        # one process compresses: the index's writer process builds what tools it can
        executor.index_builds_tools = index.builds_tools
    try:
        with open_store(config.store_url) as store, _Publisher(out, tmp, config) as pub:
            if config.incremental:
                with kept():
                    previous = _load_previous(config, store, found.entries)
                previous.identities = identities
                pub.converge.knows_streams(previous.fingerprint_streams)
            previous.index = index
            if index is not None:  # (without --incremental, none is reused, but a catalog
                # computed again and found as indexed keeps its id all the same)
                index.expect(STDIN if path is None else path for path, _, _ in found.entries)
            batches = _batches(_items(found, config, previous, tmp))
            touched = _Touches(store, verify=config.checksum)  # originals of documents reused one by one
            for batch, results in _dispatch(batches, config, previous, executor):
                _commit(store, results)
                touched.add(batch, results)
                pub.publish(batch, results, summary, previous)
                if index is not None:
                    _index(index, batch, results, store)
                if progress is not None:
                    summary.seconds = time.perf_counter() - started
                    progress(summary)
            touched.flush()  # before the manifest: its rows are what name the handles
            if index is not None:  # (before the check below: a prune meanwhile is seen there)
                index.finish({r["source"]: r["source_sha256"] for r in pub.records.values()},
                             store, verify=config.checksum)
            _held(store, pub.handles)
            pub.finish(summary)
    finally:
        executor.shutdown()
        if index is not None:
            index.close()
        previous.close()
        shutil.rmtree(tmp, ignore_errors=True)
    summary.seconds = time.perf_counter() - started
    return summary


def _held(store: Store, handles: Iterable[bytes]) -> None:
    """Every original the manifest is about to name, refreshed in the store, in one
    transaction with the check that each is there (ccr.touch_held): a `prune` with a
    window shorter than the run, running meanwhile, may have dropped one committed at its
    start. Then the manifest is not published (as if the run had been killed before it:
    the one before stays, whose handles name what was there), and the run fails."""
    absent = ccr.touch_held(store, [h.decode("ascii") for h in handles])
    if absent:
        raise StoreError(
            f"{store.url}: {len(absent):,} original(s) this run committed or reused left the "
            f"store while it ran (ccr_{absent[0][:12]}…: a prune --not-seen-for shorter than "
            f"the run?): the manifest was not published; run again")


def _kept_files(config: Config, with_changes: bool = True) -> dict[Path, str]:
    """The files (and the temp folder) this run keeps for itself -> what each is."""
    kept = {config.manifest_path: "the manifest", config.streams_path: "the fingerprint",
            config.stats_path: "the stat cache", journal_path(config.manifest_path): "the journal",
            config.out / LOCK_FILE: "the lock", config.out / TMP_DIR: "the temp folder"}
    if config.changes is not None and with_changes:
        kept[config.changes] = "the --changes file"
    if config.index is not None:
        for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
            kept[config.index.with_name(config.index.name + suffix)] = "the search index"
    return kept


def _reserved(config: Config) -> dict[str, str]:
    """The paths under OUT this run keeps for itself (what no output may be written over):
    output path -> what it is."""
    out = config.out.absolute()
    found = {}
    for path, what in _kept_files(config).items():
        with contextlib.suppress(ValueError):
            found[path.absolute().relative_to(out).as_posix()] = what
    return found


def _prepare_out(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / TMP_DIR
        shutil.rmtree(tmp, ignore_errors=True)  # debris of a killed run
        tmp.mkdir()
    except OSError as exc:  # (OUT there, its lock file too, but OUT not ours to write)
        what = "write to the output folder" if out.is_dir() else "create output folder"
        raise OutputError(f"{out}: cannot {what}: {exc.strerror or exc}") from exc
    return out


def _open_index(config: Config) -> IndexBuilder | None:
    """The tool-search index builder (compress --index), imported only then: the index and
    the embedder cost every other run's start-up."""
    if config.index is None:
        return None
    from .. import indexing
    from ..embedding import choose_embedder

    return indexing.IndexBuilder.open(config.index, choose_embedder(config.embed) is not None,
                                      store_url=config.store_url, compressor=config.run_key)
