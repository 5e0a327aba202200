"""`lmdb:///path`: the default, embedded store (a directory holding data.mdb).

LMDB gives one writer at a time across processes, readers that never block and
never see a torn record, and copy-on-write pages, so a SIGKILL mid-commit leaves
the last committed state intact. The map grows on demand: a full map doubles and
the transaction is retried; another process's growth is adopted transparently.

A directory is ours if it holds MARKER (written when the store is made) or, for a store
made before that, if its first key is one of ours (a sha256 digest or a ~seen entry) or it
holds none; another program's LMDB environment, or a folder of other files, is refused
and left as it was (no data.mdb is ever made beside other files). A read-only open maps
data.mdb read-only; if the lock file cannot be opened for writing (a 0444 store) it reads
without LMDB's locks, as no writer can be at work there.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import lmdb

from caveman_batch.errors import StoreError
from caveman_batch.store import (
    Merge,
    Store,
    apply_commit,
    ensure_private_dir,
    file_mode,
    foreign_store,
    local_path,
    missing_store,
    path_url,
)

INITIAL_MAP_SIZE = 1 << 30  # sparse on Linux: the file grows only as pages are used
MAX_MAP_SIZE = 1 << 44
_KEYS_PER_READ_TXN = 1024
#: the file beside data.mdb that says this folder is a caveman-batch store
MARKER: Final = "caveman-ccr"
_MARKER_TEXT: Final = b"caveman-batch CCR store, format 1\n"
_LMDB_FILES: Final = frozenset({"data.mdb", "lock.mdb", MARKER})

# LMDB forbids opening one environment twice in a process (the second close
# would drop the first's locks): share it, counted.
_OPEN: dict[Path, tuple[lmdb.Environment, int, bool]] = {}  # env, users, read-only
_OPEN_LOCK = threading.Lock()
# id(environment) -> where this process maps its data.mdb (see LmdbStore._release)
_MAPS: dict[int, list[tuple[int, int]]] = {}
_MAPS_LOCK = threading.Lock()
# A forked child must never use its parent's environment: it opens its own.
os.register_at_fork(after_in_child=_OPEN.clear)
os.register_at_fork(after_in_child=_MAPS.clear)


@contextlib.contextmanager
def _translated(path: Path, action: str) -> Iterator[None]:
    """Driver errors become StoreError naming the store, once, here."""
    try:
        yield
    except lmdb.Error as exc:
        # LMDB reports a write the disk took only part of (full, or past a file size limit)
        # as EIO, never as ENOSPC: said, for that is the usual cause
        hint = (" (a full disk or a file size limit is reported so too)"
                if "Input/output error" in str(exc) else "")
        raise StoreError(f"lmdb://{path}: {action} failed: {exc}{hint}") from exc


class LmdbStore(Store):
    scheme = "lmdb"
    shared = True  # other processes open the same store by its URL

    def __init__(self, path: Path, env: lmdb.Environment, readonly: bool = False) -> None:
        self._path = path
        self._env: lmdb.Environment | None = env
        self._readonly = readonly

    @classmethod
    def open(cls, location: str, create: bool = True, readonly: bool = False) -> LmdbStore:
        path = local_path(location)
        url = path_url(cls.scheme, path)
        mode = file_mode(path / "data.mdb", url)
        if mode is not None and not stat.S_ISREG(mode):  # a FIFO would hang the open for ever
            raise foreign_store(url, "its data.mdb is not a regular file")
        exists = mode is not None
        _refuse_lost(path, url)
        if not exists:  # (another program's folder is named as one, by readers too)
            _refuse_other_files(path, url)
        if (readonly or not create) and not exists:
            raise missing_store(url)
        with _OPEN_LOCK:
            if path in _OPEN:
                env, count, env_readonly = _OPEN[path]
                if env_readonly and not readonly:
                    raise StoreError(f"{url}: already open read-only in this process")
                _OPEN[path] = (env, count + 1, env_readonly)
                return cls(path, env, readonly)
            env = _open_readonly(path) if readonly else _open_writable(path)
            try:
                _refuse_truncated(path, url, env, grow=not readonly)
                _recognise(path, url, env, stamp=not readonly)
            except BaseException:
                env.close()
                raise
            _OPEN[path] = (env, 1, readonly)
        return cls(path, env, readonly)

    @classmethod
    def canonical_url(cls, location: str) -> str:
        return path_url(cls.scheme, local_path(location))

    @property
    def url(self) -> str:
        return path_url(self.scheme, self._path)

    def _live(self) -> lmdb.Environment:
        if self._env is None:
            raise StoreError(f"{self.url} is closed")
        return self._env

    def commit(self, items: Sequence[tuple[bytes, bytes]], merge: Merge | None = None) -> None:
        if self._readonly:
            raise StoreError(f"{self.url} is open read-only")
        items = list(items)
        self._committing(lambda: self._write(items, merge))

    def commit_present(self, items: Sequence[tuple[bytes, bytes, bytes]],
                       merge: Merge | None = None) -> list[bytes]:
        # A guard is found by a cursor, its value never copied out (as missing()).
        items = list(items)
        absent: list[bytes] = []

        def write() -> None:
            absent.clear()  # (a transaction run again after the map grew)
            self._write([(key, value) for guard, key, value in items], merge,
                        [guard for guard, _, _ in items], absent)

        self._committing(write)
        return list(dict.fromkeys(absent))

    def _committing(self, write: Callable[[], None]) -> None:
        """write() in a transaction, again after the map grew; the map released after."""
        while True:
            try:
                with _translated(self._path, "commit"):
                    write()
                break
            except StoreError as exc:
                if not self._recover_map(exc.__cause__):
                    raise
        self._cover_committed_pages()
        self._release()

    def _cover_committed_pages(self) -> None:
        """data.mdb grown (never shrunk) to every page its last commit counts: see
        _cover_pages. Best effort: a file left short is probed by the next open."""
        env = self._live()
        with contextlib.suppress(OSError, lmdb.Error):
            _cover_pages(data_file(self._path), (env.info()["last_pgno"] + 1) * env.stat()["psize"])

    def _release(self) -> None:
        """Drop this process's page-table entries for the map (Linux), keep the pages.

        Pages LMDB touches while committing stay mapped into this process: clean
        page cache, but counted as its memory, so a long batch job would grow with
        everything it committed. A commit of 64 records into a 100 MB store maps 1-5 MiB
        (every leaf it visits, and the kernel maps up to 16 cached neighbours of each:
        fault-around), so the map is released after every commit and every bulk read,
        not after every MiB written (which let a 500 MB run's parent grow by 40 MiB).
        MADV_DONTNEED on a read-only shared file mapping only unmaps: the data stays in
        the page cache and the next access maps it again.
        """
        env = self._live()
        with _MAPS_LOCK:
            ranges = _MAPS.get(id(env))
            if ranges is None:
                ranges = _MAPS[id(env)] = _mapping_ranges(self._path / "data.mdb")
            _release_ranges(ranges)

    def _resize(self, size: int) -> None:
        """set_mapsize, and forget where the map was: LMDB maps the file again, maybe
        elsewhere, for every store object sharing this environment (the ranges are kept
        per environment, and released under the same lock: never a stale address)."""
        env = self._live()
        with _MAPS_LOCK:
            _MAPS.pop(id(env), None)
            env.set_mapsize(size)

    def _write(self, items: list[tuple[bytes, bytes]], merge: Merge | None,
               guards: list[bytes] | None = None, absent: list[bytes] | None = None) -> None:
        """items in one write transaction; with `guards` (one per item), only the items whose
        guard is present, the others' guards appended to `absent`."""
        with self._live().begin(write=True) as txn:
            if guards is not None and absent is not None:
                cursor = txn.cursor()
                kept = []
                held: dict[bytes, bool] = {}  # (a guard many items share is looked up once)
                for at, (guard, item) in enumerate(zip(guards, items), 1):
                    there = held.get(guard)
                    if there is None:
                        there = held[guard] = cursor.set_key(guard)
                    if there:
                        kept.append(item)
                    else:
                        absent.append(guard)
                    if at % _MISSING_PER_READ_TXN == 0:  # copied nothing out: as missing()
                        self._release()
                items = kept
            seen = 0

            def read(key: bytes) -> bytes | None:
                # released inside the transaction too: only the map's page-table entries
                # go (LMDB's own dirty pages are not in the map), every access maps again
                nonlocal seen
                seen += 1
                if seen % _RELEASE_EVERY == 0:
                    self._release()
                found: bytes | None = txn.get(key)
                return found

            apply_commit(items, merge, read, txn.put, txn.delete)

    def _recover_map(self, cause: BaseException | None) -> bool:
        """Grow a full map or adopt another process's growth; False if not that."""
        env = self._live()
        if isinstance(cause, lmdb.MapResizedError):
            self._resize(0)
            return True
        if isinstance(cause, lmdb.MapFullError):
            size = env.info()["map_size"]
            if size >= MAX_MAP_SIZE:
                return False
            self._resize(min(size * 2, MAX_MAP_SIZE))
            return True
        return False

    def _read(self, fn: Any) -> Any:
        while True:
            try:
                with _translated(self._path, "read"), self._live().begin(buffers=False) as txn:
                    return fn(txn)
            except StoreError as exc:
                if not isinstance(exc.__cause__, lmdb.MapResizedError):
                    raise
                self._resize(0)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._read(lambda txn: txn.get(key))
        return value

    def missing(self, keys: Sequence[bytes]) -> list[bytes]:
        # No value copied out: a cursor only finds the key. A rerun asks about every
        # original: the leaves are released every 256 keys, not kept mapped (each lookup
        # faults in ~100 KB: its leaf and the kernel's fault-around neighbours; a 500 MB
        # registry's rerun peaked at 274 MB of them when released once at the end, 85 MB
        # at 256 keys, 57 MB at 64 but 3x slower per key).
        found: list[bytes] = []
        for at in range(0, len(keys), _MISSING_PER_READ_TXN):
            chunk = keys[at:at + _MISSING_PER_READ_TXN]

            def absent(txn: Any, chunk: Sequence[bytes] = chunk) -> list[bytes]:
                cursor = txn.cursor()
                return [key for key in chunk if not cursor.set_key(key)]

            found += self._read(absent)
            self._release()
        return found

    def keys(self, prefix: bytes = b"") -> Iterator[bytes]:
        # Short read transactions, resumed by key: a long scan never pins old pages.
        start, inclusive = prefix, True
        while True:
            # (each lambda runs at once, in its own iteration)
            chunk: list[bytes] = self._read(lambda txn: _scan(txn, start, inclusive, prefix))  # noqa: B023
            yield from chunk
            if len(chunk) < _KEYS_PER_READ_TXN:
                return
            start, inclusive = chunk[-1], False

    def integrity_problems(self) -> list[str]:
        """LMDB has no check of its own: walk every key once, in one read transaction, and
        compare with the count its tree records (a damaged branch page hides a leaf's
        records from every scan and lists another's twice; each record still hashes)."""
        def walk(txn: Any) -> list[str]:
            entries = txn.stat()["entries"]
            walked, previous, disorder = 0, None, 0
            for key in txn.cursor().iternext(keys=True, values=False):
                key = bytes(key)
                if previous is not None and key <= previous:
                    disorder += 1
                previous = key
                walked += 1
            found = []
            if walked != entries:
                found.append(f"a scan finds {walked:,} keys, the tree records {entries:,}")
            if disorder:
                found.append(f"{disorder:,} keys out of order in a scan (a damaged page)")
            return found

        problems: list[str] = self._read(walk)
        self._release()
        return problems

    def close(self) -> None:
        env, self._env = self._env, None
        if env is None:
            return
        with _OPEN_LOCK:
            shared, count, shared_readonly = _OPEN.get(self._path, (None, 0, False))
            if shared is env and count > 1:
                _OPEN[self._path] = (env, count - 1, shared_readonly)
                return
            _OPEN.pop(self._path, None)
        with _MAPS_LOCK:
            _MAPS.pop(id(env), None)
            env.close()


_MADV_DONTNEED = 4
_RELEASE_EVERY = 16  # records a commit reads or writes between two releases of the map


def _mapping_ranges(data_file: Path) -> list[tuple[int, int]]:
    """Where this process maps `data_file` (from /proc/self/maps: the path field equal to
    the file's real path, not merely ending with it), [] if unknown."""
    target = os.path.realpath(data_file)
    try:
        with open("/proc/self/maps") as maps:
            spans = [fields[0] for fields in (line.rstrip("\n").split(maxsplit=5) for line in maps)
                     if len(fields) == 6 and fields[5] == target]
        return [(int(a, 16), int(b, 16)) for a, b in (span.split("-") for span in spans)]
    except (OSError, ValueError):
        return []  # not Linux: memory is only less tidy


_MISSING_PER_READ_TXN: Final = 256


def _release_ranges(ranges: list[tuple[int, int]]) -> None:
    if not ranges:
        return
    try:
        libc = _libc()
        for start, end in ranges:
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED)
    except (OSError, AttributeError):
        pass


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _open_env(path: Path, map_size: int) -> lmdb.Environment:
    try:
        env = lmdb.open(
            str(path), map_size=map_size, subdir=True, mode=0o600, max_dbs=0, max_readers=256,
            readahead=False, lock=True, sync=True, metasync=True,
        )
    except lmdb.InvalidError as exc:
        _refuse_unborn(path, exc)
        raise
    env.reader_check()  # clear slots left by killed processes
    return env


def _open_writable(path: Path) -> lmdb.Environment:
    with _translated(path, "open"):
        try:
            ensure_private_dir(path)
        except OSError as exc:
            raise StoreError(f"lmdb://{path}: cannot create directory: {exc}") from exc
        _reserve_lock_file(path)
        return _open_env(path, INITIAL_MAP_SIZE)


# LMDB's lock file for 256 readers (64-bit Linux: its 128-byte header, 64 bytes a slot; a
# build whose header is larger reads as many slots from it, give or take one)
_LOCK_BYTES: Final = 128 + 64 * 256


def _reserve_lock_file(path: Path) -> None:
    """lock.mdb's disk blocks allocated before LMDB maps it: LMDB makes it by ftruncate (a
    file of holes) and writes it through its map, and on a full disk the first touch of a
    page without a block is a SIGBUS (exit 135, no message at all). posix_fallocate says
    ENOSPC instead, and never shrinks nor changes an existing file's bytes."""
    lock = path / "lock.mdb"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return  # (a folder or lock file not ours to write: LMDB's open says why)
    try:
        size = os.fstat(fd).st_size
        os.posix_fallocate(fd, 0, max(size, _LOCK_BYTES))
    except OSError as exc:
        # one LMDB made before (an older version's, its holes never written) has the pages
        # its readers touch: on a full disk it is opened as before (recover, stats), the
        # reservation skipped; a new one would be touched where it has no block
        if size >= _LOCK_BYTES and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return
        raise StoreError(f"lmdb://{path}: cannot write lock.mdb: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


# LMDB 0.9's first meta page (64-bit): its magic, the page size (the free tree's md_pad)
# and the transaction id that wrote it, after the 16-byte page header
_MAGIC: Final = (0xBEEFC0DE).to_bytes(4, "little")
_MAGIC_AT: Final = 16
_PSIZE_AT: Final = 40
_TXNID_AT: Final = 144
_META_END: Final = 152


def _refuse_unborn(path: Path, exc: lmdb.Error) -> None:
    """StoreError, said plainly, if data.mdb is one whose making was cut short (a full
    disk while LMDB wrote its first two pages, one whole page written): it never held a
    commit (its first page is a new store's, transaction 0), and LMDB refuses it for ever
    as "not an LMDB file". It is left as it is: removing it is the user's to do."""
    data = data_file(path)
    try:
        with open(data, "rb") as fh:
            head = fh.read(_META_END)
        size = os.stat(data).st_size
    except OSError:
        return
    unborn = (len(head) == _META_END and head[_MAGIC_AT:_MAGIC_AT + 4] == _MAGIC
              and size < 2 * int.from_bytes(head[_PSIZE_AT:_PSIZE_AT + 4], "little")
              and not any(head[_TXNID_AT:_META_END]))
    if unborn:
        raise StoreError(f"lmdb://{path}: data.mdb was never completed ({size:,} bytes: its "
                         f"making was cut short, a full disk?) and holds no record: remove "
                         f"the folder to start the store anew") from exc


def _open_readonly(path: Path) -> lmdb.Environment:
    """data.mdb mapped read-only; without LMDB's locks only if the lock file is not
    writable (a 0444 store: then no writer can be at work either)."""
    options: dict[str, Any] = dict(map_size=INITIAL_MAP_SIZE, subdir=True, readonly=True, mode=0o600,
                                   max_dbs=0, max_readers=256, readahead=False)
    with _translated(path, "open"):
        _reserve_lock_file(path)
        try:
            try:
                return lmdb.open(str(path), lock=True, **options)
            except lmdb.ReadonlyError:
                return lmdb.open(str(path), lock=False, **options)
        except lmdb.InvalidError as exc:
            _refuse_unborn(path, exc)
            raise


def _refuse_lost(path: Path, url: str) -> None:
    """StoreError if the folder held a store of ours (its marker is there) whose data.mdb is
    gone or empty (deleted, or cut to nothing by a bad copy or restore). LMDB would start a
    new, empty store over it without a word, and every handle published before would be
    gone for good, unnoticed; a reader was told "nothing was ever committed there". (The
    marker is written only once data.mdb holds its meta pages: see _recognise, after
    LMDB's open; so a store another process is making now is never taken for one lost.)"""
    if not (path / MARKER).is_file():
        return
    try:  # (looked at after the marker: another process may make both meanwhile)
        empty, exists = os.stat(data_file(path)).st_size == 0, True
    except FileNotFoundError:
        empty, exists = True, False
    except OSError as exc:
        raise StoreError(f"{url}: cannot look at data.mdb: {exc.strerror or exc}") from exc
    if empty:
        raise StoreError(f"{url}: its data.mdb is {'empty' if exists else 'missing'}, but the "
                         f"folder held a store ({MARKER} is there): its records are gone; "
                         f"restore data.mdb from a backup, or remove the folder to start a "
                         f"new store")


def _refuse_other_files(path: Path, url: str) -> None:
    """A store is made only in a new or empty folder (or one holding only LMDB's files)."""
    if path.exists() and not path.is_dir():
        raise foreign_store(url, "a file, not a folder")
    try:
        others = sorted(name for name in os.listdir(path) if name not in _LMDB_FILES)
    except OSError:
        return  # no such folder (yet): making it will say what stands in the way
    if others:
        shown = ", ".join(others[:3]) + (", …" if len(others) > 3 else "")
        raise foreign_store(url, f"a folder holding other files ({shown}) and no data.mdb")


def _cover_pages(data: Path, need: int) -> None:
    """data.mdb made at least `need` bytes long. A transaction that deletes much (a prune)
    takes pages past the end of the file and gives them back before its commit: LMDB counts
    them in its last page number and never writes them (a healthy store was seen 11 pages
    short of 58 after a prune), so the file ends short of what its meta page says, which is
    also how a truncated copy looks. Those pages are free (never read before they are
    written again): zeros there are harmless. posix_fallocate only ever grows the file, so
    another process's commit meanwhile is never cut short."""
    fd = os.open(data, os.O_RDWR | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_size < need:
            os.posix_fallocate(fd, 0, need)
    finally:
        os.close(fd)


# run in a child process: every record's pages read through the map (the cursor reads the
# tree's pages, the last byte of each value its last overflow page: a file cut short loses
# its last pages, so any page past the end is the last of one of these)
_PROBE: Final = """
import sys, lmdb
options = dict(subdir=True, readonly=True, max_dbs=0, readahead=False, max_readers=256)
try:
    env = lmdb.open(sys.argv[1], lock=True, **options)
except lmdb.ReadonlyError:
    env = lmdb.open(sys.argv[1], lock=False, **options)
with env.begin(buffers=True) as txn:
    for _, value in txn.cursor():
        if len(value):
            value[len(value) - 1]
"""


def _refuse_truncated(path: Path, url: str, env: lmdb.Environment, *, grow: bool) -> None:
    """StoreError if data.mdb is shorter than the pages its last committed transaction
    uses (cut short by a copy, a full disk, a bad restore): LMDB reads the file through its
    map, and a page past the end of the file is a SIGBUS that kills the process (exit 135),
    no error at all. A healthy file may end short too, by free pages never written (see
    _cover_pages; a commit of ours covers them since, but not an older version's). So a
    file short of its pages is read whole by a child process first: one killed by SIGBUS
    means truncated; one that read every record means whole, and (`grow`: opened for
    writing) the file is grown to its pages, so that the next open reads nothing."""
    psize = env.stat()["psize"]
    need = (env.info()["last_pgno"] + 1) * psize
    data = data_file(path)
    try:
        size = os.stat(data).st_size
    except OSError as exc:
        raise StoreError(f"{url}: cannot read data.mdb: {exc.strerror or exc}") from exc
    if size >= need:
        return
    truncated = StoreError(f"{url}: data.mdb is truncated ({size:,} bytes, its committed "
                           f"pages need {need:,}): restore it from a backup, or move it aside")
    if size % psize or _free_tree_past(data, psize, size):
        # (LMDB writes whole pages: a file ending mid-page was cut, and the rest of that
        # page reads as zeros through the map, no SIGBUS; the tree of free pages is read
        # by every write, never by the probe's cursor)
        raise truncated
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(path)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if probe.returncode == -signal.SIGBUS:
        raise truncated
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        raise StoreError(f"{url}: data.mdb is {need - size:,} bytes short of its committed "
                         f"pages, and reading it through failed: "
                         f"{said[-1] if said else f'exit status {probe.returncode}'}")
    if grow:
        with contextlib.suppress(OSError):
            _cover_pages(data, need)


# LMDB 0.9's file layout (64-bit builds), as far as _free_tree_past reads it: a page
# header (page number, pad, flags, lower, upper: 16 bytes; an overflow page's count of
# pages where lower and upper are), then, in meta pages 0 and 1, the meta's fields: the
# tree of free pages' root at 80, the transaction id at 144; in a branch or leaf page,
# 2-byte node offsets from 16 up to `lower`, each node (lo, hi, flags, key size: 2 bytes
# each) then its key, a branch node's child page being lo | hi << 16 | flags << 32, and a
# leaf node flagged F_BIGDATA holding the first page of its value's overflow run.
_P_BRANCH: Final = 0x01
_F_BIGDATA: Final = 0x01
_P_INVALID: Final = (1 << 64) - 1  # (a tree with no root: no free pages)
_PAGE_HEADER: Final = 16


def _free_tree_past(data: Path, psize: int, size: int) -> bool:
    """Does the tree of free pages (LMDB's FREE_DBI) of the newest meta page name a page
    at or past `size`? Read with plain reads (never the map), page by page from its root:
    every write reads that tree, no read does (the probe's cursor walks only the records)."""
    limit = size // psize

    def u(b: bytes, at: int, width: int) -> int:
        return int.from_bytes(b[at:at + width], "little")

    with open(data, "rb") as f:
        def page(pgno: int) -> bytes:
            f.seek(pgno * psize)
            return f.read(psize)

        metas = []
        for number in (0, 1):
            meta = page(number)
            if len(meta) < 152:
                return True
            metas.append((u(meta, 144, 8), u(meta, 80, 8)))  # (txnid, free tree's root)
        root = max(metas)[1]
        todo = [] if root == _P_INVALID else [root]
        visited = 0
        while todo:
            pgno = todo.pop()
            visited += 1
            if pgno >= limit or visited > limit:  # (past the end, or a loop: not LMDB's)
                return True
            b = page(pgno)
            flags, lower = u(b, 10, 2), u(b, 12, 2)
            for i in range(max(0, (lower - _PAGE_HEADER) // 2)):
                at = u(b, _PAGE_HEADER + 2 * i, 2)
                lo, hi, nflags, ksize = (u(b, at + k, 2) for k in (0, 2, 4, 6))
                if flags & _P_BRANCH:
                    todo.append(lo | hi << 16 | nflags << 32)
                elif nflags & _F_BIGDATA:
                    first = u(b, at + 8 + ksize, 8)
                    if first >= limit or first + max(u(page(first), 12, 4), 1) > limit:
                        return True
    return False


def _recognise(path: Path, url: str, env: lmdb.Environment, *, stamp: bool) -> None:
    """ForeignStoreError unless the store at `path` is ours; a store of ours without the
    marker (made before it, or copied without it) gets it when opened for writing."""
    marker = path / MARKER
    if marker.is_file():
        return
    with _translated(path, "read"), env.begin(buffers=False) as txn:
        first = next(txn.cursor().iternext(keys=True, values=False), None)
    if first is not None and not _is_our_key(bytes(first)):
        raise foreign_store(url, f"an LMDB environment whose first key {bytes(first)[:40]!r} "
                                 f"is not ours")
    if stamp:
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(_MARKER_TEXT)
        except OSError as exc:
            raise StoreError(f"{url}: cannot write {MARKER}: {exc}") from exc


def _is_our_key(key: bytes) -> bool:
    """A record's key (64 lower-case hex digits) or a ~seen entry's: ccr's key space."""
    return key.startswith(b"~seen/") or (
        len(key) == 64 and all(c in b"0123456789abcdef" for c in key))


def _scan(txn: lmdb.Transaction[bytes], start: bytes, inclusive: bool, prefix: bytes
          ) -> list[bytes]:
    found: list[bytes] = []
    cursor = txn.cursor()
    if not cursor.set_range(start):
        return found
    for key in cursor.iternext(keys=True, values=False):
        if not key.startswith(prefix):
            break
        if not inclusive and key == start:
            continue
        found.append(bytes(key))
        if len(found) >= _KEYS_PER_READ_TXN:
            break
    return found


def data_file(path: Path) -> Path:
    """The file holding the records (tests flip bytes in it)."""
    return path / "data.mdb"


__all__ = ["LmdbStore", "data_file"]
