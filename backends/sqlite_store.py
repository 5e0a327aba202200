"""`sqlite:///path/ccr.db`: one SQLite file in WAL mode, fsync on every commit.

Writers take the write lock up front (BEGIN IMMEDIATE) so a read-modify-write
merge never races another process; readers see the last committed state.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from caveman_batch.errors import StoreError
from caveman_batch.store import (
    Merge,
    Store,
    apply_commit,
    ensure_private_dir,
    local_path,
    missing_store,
    path_url,
)

BUSY_TIMEOUT_S = 60.0
# A rowid table: values are kilobytes, and WITHOUT ROWID suits rows far smaller than a page.
_SCHEMA = "CREATE TABLE IF NOT EXISTS ccr (key BLOB PRIMARY KEY, value BLOB NOT NULL)"


@contextlib.contextmanager
def _translated(path: Path, action: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite://{path}: {action} failed: {exc}") from exc


def _upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class SqliteStore(Store):
    scheme = "sqlite"

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()

    @classmethod
    def open(cls, location: str, create: bool = True) -> SqliteStore:
        path = local_path(location)
        if not create and not path.is_file():
            raise missing_store(path_url(cls.scheme, path))
        try:
            ensure_private_dir(path.parent)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # WAL/shm inherit these bits
            os.close(fd)
        except OSError as exc:
            raise StoreError(f"sqlite://{path}: cannot create: {exc}") from exc
        with _translated(path, "open"):
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(_SCHEMA)
        return cls(path, conn)

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
            row = conn.execute("SELECT value FROM ccr WHERE key = ?", (key,)).fetchone()
            return None if row is None else bytes(row[0])

        apply_commit(
            items, merge, read,
            lambda k, v: conn.execute("INSERT OR REPLACE INTO ccr (key, value) VALUES (?, ?)", (k, v)),
            lambda k: conn.execute("DELETE FROM ccr WHERE key = ?", (k,)),
        )

    def get(self, key: bytes) -> bytes | None:
        with self._lock, _translated(self._path, "read"):
            row = self._live().execute("SELECT value FROM ccr WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def keys(self, prefix: bytes = b"") -> Iterator[bytes]:
        upper = _upper_bound(prefix)
        sql, args = "SELECT key FROM ccr WHERE key >= ?", [prefix]
        if upper is not None:
            sql, args = sql + " AND key < ?", [prefix, upper]
        with self._lock, _translated(self._path, "read"):
            rows = self._live().execute(sql + " ORDER BY key", args).fetchall()
        for (key,) in rows:
            yield bytes(key)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with _translated(self._path, "close"):
                conn.close()


def data_file(path: Path) -> Path:
    return path


__all__ = ["SqliteStore", "data_file"]
