"""`sqlite:///path/ccr.db`: one SQLite file in WAL mode, fsync on every commit.

Writers take the write lock up front (BEGIN IMMEDIATE) so a read-modify-write
merge never races another process; readers see the last committed state.

A file is ours if its header's application_id is APPLICATION_ID (written when the store
is made, before anything else), or, for a store made before that, if its only table is
`ccr` with our schema. Anything else (another program's database, a file that is not
SQLite) is refused before a statement runs that could change it. A read-only open uses
SQLite's `mode=ro`; if the WAL's shared-memory file cannot be made (a 0444 store in a
read-only folder) it reads the file as immutable, as no writer can be at work there.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

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
    sqlite_folder_hint,
    sqlite_io_hint,
)

BUSY_TIMEOUT_S = 60.0
# A rowid table: values are kilobytes, and WITHOUT ROWID suits rows far smaller than a page.
_TABLE = "CREATE TABLE ccr (key BLOB PRIMARY KEY, value BLOB NOT NULL)"  # as sqlite_master keeps it
_SCHEMA = _TABLE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS")
#: the file header's application_id (offset 68) of a caveman-batch store: "CCR1"
APPLICATION_ID: Final = int.from_bytes(b"CCR1", "big")
_MAGIC: Final = b"SQLite format 3\0"
_HEADER_BYTES: Final = 100


@contextlib.contextmanager
def _translated(path: Path, action: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        hint = sqlite_io_hint(exc) or sqlite_folder_hint(path)
        raise StoreError(f"sqlite://{path}: {action} failed: {exc}{hint}") from exc


def _upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class SqliteStore(Store):
    scheme = "sqlite"
    shared = True  # other processes open the same store by its URL

    def __init__(self, path: Path, conn: sqlite3.Connection, readonly: bool = False) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()
        self._readonly = readonly

    @classmethod
    def open(cls, location: str, create: bool = True, readonly: bool = False) -> SqliteStore:
        path = local_path(location)
        url = path_url(cls.scheme, path)
        mode = file_mode(path, url)
        if mode is not None and not stat.S_ISREG(mode):  # a folder, a FIFO (whose read would block)
            raise foreign_store(url, "not a regular file")
        if (readonly or not create) and mode is None:
            raise missing_store(url)
        new = _recognise(path, url, may_adopt=create and not readonly)
        if readonly:
            return cls(path, _connect_readonly(path), readonly=True)
        try:
            ensure_private_dir(path.parent)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # WAL/shm inherit these bits
            os.close(fd)
        except OSError as exc:
            raise StoreError(f"sqlite://{path}: cannot create: {exc}") from exc
        with _translated(path, "open"):
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
            if new or conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                # marked first, while the file is still in rollback mode: the marker and the
                # table are in the file itself, never only in a WAL a reader might not see
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(_SCHEMA)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        return cls(path, conn)

    @classmethod
    def canonical_url(cls, location: str) -> str:
        return path_url(cls.scheme, local_path(location))

    @property
    def url(self) -> str:
        return path_url(self.scheme, self._path)

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.url} is closed")
        return self._conn

    def commit(self, items: Sequence[tuple[bytes, bytes]], merge: Merge | None = None) -> None:
        self._transaction(lambda conn: self._write(conn, items, merge))

    def commit_present(self, items: Sequence[tuple[bytes, bytes, bytes]],
                       merge: Merge | None = None) -> list[bytes]:
        absent: list[bytes] = []

        def write(conn: sqlite3.Connection) -> None:
            kept = []
            for guard, key, value in items:  # a guard's value is never read out
                if conn.execute("SELECT 1 FROM ccr WHERE key = ?", (guard,)).fetchone():
                    kept.append((key, value))
                else:
                    absent.append(guard)
            self._write(conn, kept, merge)

        self._transaction(write)
        return list(dict.fromkeys(absent))

    def _transaction(self, write: Callable[[sqlite3.Connection], None]) -> None:
        """write(conn) inside one write transaction (BEGIN IMMEDIATE: the writer lock first)."""
        conn = self._live()
        if self._readonly:
            raise StoreError(f"{self.url} is open read-only")
        with self._lock, _translated(self._path, "commit"):
            conn.execute("BEGIN IMMEDIATE")
            try:
                write(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @staticmethod
    def _write(conn: sqlite3.Connection, items: Sequence[tuple[bytes, bytes]],
               merge: Merge | None) -> None:
        def read(key: bytes) -> bytes | None:
            row = conn.execute("SELECT CAST(value AS BLOB) FROM ccr WHERE key = ?", (key,)).fetchone()
            return None if row is None else bytes(row[0])

        apply_commit(
            items, merge, read,
            lambda k, v: conn.execute("INSERT OR REPLACE INTO ccr (key, value) VALUES (?, ?)", (k, v)),
            lambda k: conn.execute("DELETE FROM ccr WHERE key = ?", (k,)),
        )

    def get(self, key: bytes) -> bytes | None:
        with self._lock, _translated(self._path, "read"):
            row = self._live().execute("SELECT CAST(value AS BLOB) FROM ccr WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def keys(self, prefix: bytes = b"") -> Iterator[bytes]:
        upper = _upper_bound(prefix)
        sql, args = "SELECT CAST(key AS BLOB) FROM ccr WHERE key >= ?", [prefix]
        if upper is not None:
            sql, args = sql + " AND key < ?", [prefix, upper]
        with self._lock, _translated(self._path, "read"):
            rows = self._live().execute(sql + " ORDER BY key", args).fetchall()
        for (key,) in rows:
            yield bytes(key)

    def integrity_problems(self) -> list[str]:
        """SQLite's integrity_check (a B-tree or index that no longer lists every row hides
        records from every lookup: they are not there, for recover, verify and migrate)."""
        with self._lock, _translated(self._path, "read"):
            rows = self._live().execute("PRAGMA integrity_check(20)").fetchall()
            # a key of another type (an UPDATE by hand: key = 'ab12…' is TEXT) is never
            # found by a lookup with the BLOB key, nor listed by a scan of BLOB keys
            typed = self._live().execute(
                "SELECT count(*) FROM ccr WHERE typeof(key) <> 'blob'").fetchone()[0]
        found = [str(row[0]) for row in rows]
        found = [] if found == ["ok"] else found
        if typed:
            found.append(f"{typed:,} row(s) whose key is not a BLOB: hidden from every lookup "
                         "(UPDATE ccr SET key = CAST(key AS BLOB) WHERE typeof(key) <> 'blob' "
                         "gives them back, once any row already holding that key as a BLOB "
                         "is deleted)")
        return found

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with _translated(self._path, "close"):
                conn.close()


def _recognise(path: Path, url: str, *, may_adopt: bool) -> bool:
    """Whether the file at `path` is to be made a new store (True) or is one of ours
    (False); ForeignStoreError if it is neither. Reads, never writes: the header
    itself, then (for a store older than its marker) the schema through an immutable
    connection, which takes no lock and makes no file."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEADER_BYTES)
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise StoreError(f"{url}: cannot read: {exc}") from exc
    if not head:
        if may_adopt:
            return True  # an empty file is an empty database: made ours by a command that makes stores
        raise foreign_store(url, "an empty file")
    if len(head) < _HEADER_BYTES or not head.startswith(_MAGIC):
        raise foreign_store(url, "not an SQLite database")
    app_id = int.from_bytes(head[68:72], "big")
    if app_id == APPLICATION_ID:
        return False
    if app_id:
        raise foreign_store(url, f"an SQLite database of another application, id {app_id:#x}")
    tables = _tables(path, url)
    if tables != {"ccr": _TABLE}:
        shown = ", ".join(sorted(tables)) or "none"
        raise foreign_store(url, f"an SQLite database whose tables ({shown}) are not ours")
    return False


def _tables(path: Path, url: str) -> dict[str, str]:
    """name -> CREATE statement of every table. A WAL not yet checkpointed may hold a
    store's table (made by a release before the marker): read through it when present."""
    immutable = "" if Path(f"{path}-wal").exists() else "&immutable=1"
    try:
        conn = _connect_uri(path, f"mode=ro{immutable}")
        try:
            rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise foreign_store(url, f"unreadable as SQLite: {exc}") from exc
    return {str(name): str(sql) for name, sql in rows}


def _file_uri(path: Path) -> str:
    """`path` (absolute) as a URI with an empty authority: `//x` stays a path, not a host."""
    return "file://" + urllib.parse.quote(str(path))


_NO_SHARED_MEMORY: Final = (8, 14)  # SQLITE_READONLY, SQLITE_CANTOPEN (primary codes)


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """`mode=ro`; `immutable` if SQLite cannot read the WAL so (it must make the WAL's
    shared-memory file, in a folder that may be read-only: no writer is at work there)."""
    with _translated(path, "open"):
        try:
            return _checked(_connect_uri(path, "mode=ro"))
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _NO_SHARED_MEMORY:
                raise
        # immutable reads the database file alone: commits still in a write-ahead log would
        # be missing without a word (a writer killed before its checkpoint, a copy without
        # its -shm); refused, naming the log, unless there is none
        wal = path.with_name(path.name + "-wal")
        try:
            pending = wal.stat().st_size > 0
        except FileNotFoundError:
            pending = False
        if pending:
            raise StoreError(f"sqlite://{path}: its write-ahead log {wal.name} holds commits "
                             f"that cannot be read here without making {path.name}-shm (the "
                             "folder is read-only): open it once where it can be written, or "
                             "give this user write access to the folder")
        return _checked(_connect_uri(path, "mode=ro&immutable=1"))


def _connect_uri(path: Path, query: str) -> sqlite3.Connection:
    return sqlite3.connect(f"{_file_uri(path)}?{query}", uri=True, timeout=BUSY_TIMEOUT_S,
                           isolation_level=None, check_same_thread=False)


def _checked(conn: sqlite3.Connection) -> sqlite3.Connection:
    """`conn`, once it has read the table (the first read is where SQLite opens the WAL)."""
    try:
        conn.execute("SELECT 1 FROM ccr LIMIT 1").fetchall()
    except BaseException:
        conn.close()
        raise
    return conn


def data_file(path: Path) -> Path:
    return path


__all__ = ["SqliteStore", "data_file"]
