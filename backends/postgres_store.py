"""`postgresql://user@host:port/dbname`: one table in a PostgreSQL database, shared by a fleet.

The location is a libpq connection URL as psql takes it (`?sslmode=require`, several
hosts, a Unix socket as `?host=/run/postgresql`, and libpq's PG* environment variables
for whatever the URL leaves out: libpq reads them, this module never does). The store
prints its URL back without the password, from the URL's user part or its query.

Records live in the table `caveman_ccr` (key bytea PRIMARY KEY, value bytea) of the first
schema on the role's search_path, marked by its comment: a table of that name without
our comment is another program's, refused. Prefix lookups are range scans of the
primary key's btree; a ~seen refresh writes an 8-byte row.

A commit is one transaction. Every writer first takes a shared advisory lock on the
table, then an exclusive advisory lock per key (in ascending order, so two writers
never deadlock), reads the old values `FOR UPDATE` and only then runs the merge: a
read-modify-write on another host waits for ours, and no record is lost or torn. A
commit of more keys than _MAX_KEY_LOCKS takes the table lock exclusively instead, so
one transaction never holds more than that many locks (the server's lock table is
shared and small).

A connection that the server dropped (a restart, an idle timeout, a failover) is
opened again and the operation retried at once, then, while the server cannot be
reached or drops it again, after waits of 0.25 to 4 s (7.75 s in all); a failure past
them is a StoreError (the run stops, exit 2; merges are idempotent, so the rerun
commits what this one did not).
A forked child never uses, nor closes, its parent's connection: it opens its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from caveman_batch.errors import StoreError, StoreURLError
from caveman_batch.store import (
    DELETE,
    SECRET_PARAMS,
    Merge,
    Store,
    apply_commit,
    foreign_store,
    missing_store,
    redacted,
)

TABLE: Final = "caveman_ccr"
#: the table's comment: what makes it ours (and the layout version)
MARKER: Final = "caveman-batch CCR store, format 1"
CONNECT_TIMEOUT_S: Final = 10  # unless the URL says otherwise: an unreachable host fails soon
_KEYS_PER_READ: Final = 1024
_KEYS_PER_WRITE: Final = 256  # old values read and new ones written this many keys at a time
_MAX_KEY_LOCKS: Final = 1024
_CREATE_LOCK: Final = int.from_bytes(b"CCRmake!", "big") >> 1  # serialises table creation

T = TypeVar("T")


# -- the URL: libpq's, printed without its password ------------------------------------


def _split_location(location: str) -> tuple[str, str, str]:
    """`[userinfo@]hosts[/dbname]` split as libpq does: (userinfo, rest, query).

    libpq takes an `@` before the first `/` as the end of the user part."""
    body, _, query = location.partition("?")
    slash, at = body.find("/"), body.find("@")
    if at != -1 and (slash == -1 or at < slash):
        return body[:at], body[at + 1:], query
    return "", body, query


def printable_url(location: str) -> str:
    """The URL naming this store, without a password (store.redacted: a user part's, up to
    the last `@` before the query, so that a `/` in a password that libpq would not read
    as one is not printed either; `password=` and `sslpassword=` parameters)."""
    return redacted(f"postgresql://{location}")


def _check_user_part(location: str, url: str) -> None:
    """Refuse a second `@` before the first `/`: libpq ends the user part at the first `@`
    and reads the rest as the host, so a password spelled `p@ss` would be sent as `p`, and
    libpq's error quote its tail as the host name (`failed to resolve host 'ss@db...'`).
    Refuse an `@` after the first `/` when none comes before it: a password spelled `p/ss`."""
    userinfo, rest, _ = _split_location(location)
    if "@" in rest.partition("/")[0]:
        raise StoreURLError(f"store URL {url!r} has an '@' in its user name or password: "
                            "write it as %40 (libpq ends the user part at the first '@', "
                            "and would take the rest for the host)")
    if not userinfo and "@" in rest.partition("/")[2]:
        # `app:pa/ss@db/ccr`: libpq ends the host part at the first `/`, so it would connect
        # to host `app` (port `pa`) and send `ss@db/ccr`, the password's tail, as the
        # database name, which a server there would quote back in its error
        raise StoreURLError(f"store URL {url!r} has an '@' after its first '/': a '/' in a "
                            "user name or password is written %2F, an '@' in a database name "
                            "%40 (libpq ends the host part at the first '/', and would take "
                            "the rest, password and all, for the database name)")


def _passwords(location: str) -> list[str]:
    """Every spelling of the URL's password(s), for scrubbing messages that quote it."""
    userinfo, _, query = _split_location(location)
    found = [userinfo.partition(":")[2],
             location.partition("?")[0].rpartition("@")[0].partition(":")[2]]  # (lenient)
    found += [v for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
              if k in SECRET_PARAMS]
    spellings = {s for p in found if p for s in (p, urllib.parse.unquote(p))}
    return sorted(spellings, key=len, reverse=True)


def _connect_kwargs(location: str) -> dict[str, Any]:
    """Defaults for what the URL does not set (libpq's PG* variables then still apply)."""
    query = urllib.parse.parse_qs(location.partition("?")[2])
    kwargs: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in query:
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
    if "application_name" not in query:
        kwargs["application_name"] = "caveman-batch"
    return kwargs


# -- errors, once, here ---------------------------------------------------------------

_HINTS: Final[dict[type[Exception], str]] = {
    pg_errors.InsufficientPrivilege: "the role lacks a privilege it needs (a read-only role? "
    f"writing needs SELECT, INSERT, UPDATE, DELETE on {TABLE}; making the store needs CREATE "
    "on the schema)",
    pg_errors.ReadOnlySqlTransaction: "the server or role is read-only (a standby, or "
    "default_transaction_read_only); only commands that read can use it",
    pg_errors.InvalidSchemaName: "no schema to make the table in: the role's search_path "
    "names none that exists",
    # (OperationalErrors, but no sign of a server gone)
    pg_errors.QueryCanceled: "a statement_timeout ended it (the server's, the role's or the "
    "URL's options=-c ...): give the store more time, or none",
    pg_errors.LockNotAvailable: "a lock_timeout ended it while another writer held a lock "
    "it needed: give it more time, or none",
}


# after a lost connection and a first retry at once, the waits before each next one (7.75 s
# in all: a restart's shutdown and start)
_RECONNECT_WAITS: Final = (0.25, 0.5, 1.0, 2.0, 4.0)


def _connection_lost(exc: BaseException | None, conn: psycopg.Connection[Any] | None) -> bool:
    """Whether `exc` is the server going away (worth one reconnect), not a refusal."""
    if conn is not None and conn.broken:
        return True
    return isinstance(exc, (pg_errors.AdminShutdown, pg_errors.CrashShutdown,
                            pg_errors.CannotConnectNow, pg_errors.ConnectionException))


class _Inherited:
    """Connections of stores open when this process forked: in the child, their socket
    is pointed at /dev/null before they are closed, so the parent's session is never
    ended (libpq says goodbye on close) nor read by two processes."""

    stores: weakref.WeakSet[PostgresStore] = weakref.WeakSet()

    @classmethod
    def after_fork_in_child(cls) -> None:
        for store in list(cls.stores):
            store._disown()


os.register_at_fork(after_in_child=_Inherited.after_fork_in_child)


class PostgresStore(Store):
    scheme = "postgresql"
    shared = True  # other processes open the same store by its URL

    def __init__(self, location: str, conn: psycopg.Connection[Any], readonly: bool) -> None:
        self._location = location
        self._url = printable_url(location)
        self._secrets = _passwords(location)
        self._readonly = readonly
        self._conn: psycopg.Connection[Any] | None = conn
        self._pid = os.getpid()
        self._closed = False
        self._lock = threading.RLock()
        self._table_lock = 0  # the table's oid, as the advisory lock keys' first half
        self._table_lock = self._run("open", self._table_oid)
        _Inherited.stores.add(self)

    @classmethod
    def open(cls, location: str, create: bool = True, readonly: bool = False) -> PostgresStore:
        url = printable_url(location)
        _check_user_part(location, url)
        conn = _connect(location, url, _passwords(location))
        try:
            with _translated(url, _passwords(location), "open"):
                _prepare(conn, url, create=create and not readonly, readonly=readonly)
        except BaseException:
            conn.close()
            raise
        return cls(location, conn, readonly)

    @classmethod
    def canonical_url(cls, location: str) -> str:
        url = printable_url(location)
        _check_user_part(location, url)
        return url

    @property
    def url(self) -> str:
        return self._url

    def __reduce__(self) -> tuple[Any, ...]:
        # The full location, password included: a pickle is how a worker reopens the store,
        # not something printed. (Where pickles travel over a network, give the password
        # through ~/.pgpass or PGPASSWORD on each host instead of in the URL.)
        from caveman_batch.store import open_store

        return (open_store, (f"postgresql://{self._location}",))

    # -- connection ------------------------------------------------------------------

    def _disown(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_RDWR)
            try:
                os.dup2(devnull, conn.fileno())
            finally:
                os.close(devnull)
            conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StoreError(f"{self.url} is closed")
        if self._pid != os.getpid():  # forked without the at-fork hook having run
            self._conn, self._pid = None, os.getpid()
        if self._conn is None or self._conn.closed:
            conn = _connect(self._location, self.url, self._secrets)
            if self._readonly:
                with _translated(self.url, self._secrets, "open"):
                    _set_readonly(conn)
            self._conn = conn
        return self._conn

    def _run(self, action: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """fn(connection), translated; again on a new connection if the server dropped
        this one (fn is one transaction, or reads only: safe to repeat): at once, then,
        while the server cannot be reached or drops it again, after each of
        _RECONNECT_WAITS (a restart's time: it refused connections while it shut down,
        and the one immediate retry failed every run a `pg_ctl restart` met)."""
        with self._lock:
            waits: Iterator[float] | None = None  # once this operation's connection was lost
            while True:
                try:
                    conn = self._connection()
                except StoreError as exc:
                    if waits is None or not isinstance(exc.__cause__, psycopg.OperationalError):
                        raise
                    self._pause(waits, exc)
                    continue
                try:
                    with _translated(self.url, self._secrets, action):
                        return fn(conn)
                except StoreError as exc:
                    if not _connection_lost(exc.__cause__, conn):
                        raise
                    self._drop(conn)
                    if waits is None:
                        waits = iter(_RECONNECT_WAITS)  # (the first retry: at once)
                    else:
                        self._pause(waits, exc)

    @staticmethod
    def _pause(waits: Iterator[float], failure: StoreError) -> None:
        wait = next(waits, None)
        if wait is None:
            raise failure
        time.sleep(wait)

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = None
        with contextlib.suppress(Exception):
            conn.close()

    def _table_oid(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT %s::regclass::oid::int8", (TABLE,)).fetchone()
        oid = int(row[0]) if row else 0
        return oid - (1 << 32) if oid >= 1 << 31 else oid  # as an int4

    # -- the Store interface -----------------------------------------------------------

    def commit(self, items: Sequence[tuple[bytes, bytes]], merge: Merge | None = None) -> None:
        if self._closed:
            raise StoreError(f"{self.url} is closed")
        if self._readonly:
            raise StoreError(f"{self.url} is open read-only")
        items = list(items)
        if items:
            self._run("commit", lambda conn: self._write(conn, items, merge))

    def _write(self, conn: psycopg.Connection[Any], items: list[tuple[bytes, bytes]],
               merge: Merge | None) -> None:
        with conn.transaction():
            if merge is not None:
                self._lock_keys(conn, [key for key, _ in items])
            for at in range(0, len(items), _KEYS_PER_WRITE):
                self._write_chunk(conn, items[at:at + _KEYS_PER_WRITE], merge)

    def commit_present(self, items: Sequence[tuple[bytes, bytes, bytes]],
                       merge: Merge | None = None) -> list[bytes]:
        # The guards are looked up by key, their values (whole records) never read out nor
        # row-locked: the advisory locks taken on them are enough, since only a merging
        # writer (prune's delete is one) can remove a key, and every merging writer takes
        # them first.
        if self._closed:
            raise StoreError(f"{self.url} is closed")
        if self._readonly:
            raise StoreError(f"{self.url} is open read-only")
        items = list(items)
        if not items:
            return []
        return self._run("commit", lambda conn: self._write_present(conn, items, merge))

    def _write_present(self, conn: psycopg.Connection[Any], items: list[tuple[bytes, bytes, bytes]],
                       merge: Merge | None) -> list[bytes]:
        guards = list(dict.fromkeys(guard for guard, _, _ in items))
        with conn.transaction():
            self._lock_keys(conn, guards + [key for _, key, _ in items])
            held = set(guards) - set(self._absent(conn, guards))
            kept = [(key, value) for guard, key, value in items if guard in held]
            for at in range(0, len(kept), _KEYS_PER_WRITE):
                self._write_chunk(conn, kept[at:at + _KEYS_PER_WRITE], merge)
        return [guard for guard in guards if guard not in held]

    @staticmethod
    def _absent(conn: psycopg.Connection[Any], keys: Sequence[bytes]) -> list[bytes]:
        """The keys, of these, that hold no value (read on `conn`, in its transaction)."""
        found: set[bytes] = set()
        for at in range(0, len(keys), _KEYS_PER_READ):
            rows = conn.cursor(binary=True).execute(
                sql.SQL("SELECT key FROM {} WHERE key = ANY(%b)").format(sql.Identifier(TABLE)),
                (list(keys[at:at + _KEYS_PER_READ]),)).fetchall()
            found |= {bytes(k) for (k,) in rows}
        return [key for key in keys if key not in found]

    def _lock_keys(self, conn: psycopg.Connection[Any], keys: list[bytes]) -> None:
        """The advisory locks every merging writer takes, always in this order."""
        ids = sorted({_key_lock(key) for key in keys})
        if len(ids) > _MAX_KEY_LOCKS:
            conn.execute("SELECT pg_advisory_xact_lock(%s::int8)", (self._table_lock,))
            return
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s::int8)", (self._table_lock,))
        conn.execute("SELECT count(pg_advisory_xact_lock(%s::int4, id)) "
                     "FROM unnest(%s::int4[]) AS id",
                     (self._table_lock, ids))

    @staticmethod
    def _write_chunk(conn: psycopg.Connection[Any], chunk: list[tuple[bytes, bytes]],
                     merge: Merge | None) -> None:
        old: dict[bytes, bytes | None] = {}
        if merge is not None:
            rows = conn.cursor(binary=True).execute(
                sql.SQL("SELECT key, value FROM {} WHERE key = ANY(%b) ORDER BY key FOR UPDATE")
                .format(sql.Identifier(TABLE)), (list({k for k, _ in chunk}),)).fetchall()
            old = {bytes(k): bytes(v) for k, v in rows}
        staged: dict[bytes, Any] = {}

        def read(key: bytes) -> bytes | None:
            value = staged.get(key, old.get(key))
            return None if value is DELETE else value

        apply_commit(chunk, merge, read, staged.__setitem__,
                     lambda key: staged.__setitem__(key, DELETE))
        gone = [k for k, v in staged.items() if v is DELETE]
        kept = sorted((k, v) for k, v in staged.items() if v is not DELETE)
        if gone:
            conn.execute(sql.SQL("DELETE FROM {} WHERE key = ANY(%b)").format(sql.Identifier(TABLE)),
                         (gone,))
        if kept:
            conn.execute(
                sql.SQL("INSERT INTO {} (key, value) SELECT * FROM unnest(%b::bytea[], %b::bytea[]) "
                        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
                .format(sql.Identifier(TABLE)), ([k for k, _ in kept], [v for _, v in kept]))

    def get(self, key: bytes) -> bytes | None:
        def read(conn: psycopg.Connection[Any]) -> bytes | None:
            row = conn.cursor(binary=True).execute(
                sql.SQL("SELECT value FROM {} WHERE key = %b").format(sql.Identifier(TABLE)),
                (key,)).fetchone()
            return None if row is None else bytes(row[0])

        return self._run("read", read)

    def missing(self, keys: Sequence[bytes]) -> list[bytes]:
        return self._run("read", lambda conn: self._absent(conn, keys))

    def keys(self, prefix: bytes = b"") -> Iterator[bytes]:
        # One index range scan a chunk at a time, resumed after the last key read.
        upper = _upper_bound(prefix)
        after: bytes | None = None
        while True:
            # (each lambda runs at once, in its own iteration)
            chunk = self._run("read", lambda conn: _scan(conn, prefix, upper, after))  # noqa: B023
            yield from chunk
            if len(chunk) < _KEYS_PER_READ:
                return
            after = chunk[-1]

    def integrity_problems(self) -> list[str]:
        """The table's rows counted twice in one snapshot, by a scan of the table and by
        its primary key's index: a row the index does not list is hidden from every lookup
        (recover: unknown handle) while the table holds it. And the index itself must be
        valid and unique."""
        def check(conn: psycopg.Connection[Any]) -> list[str]:
            table = sql.Identifier(TABLE)
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                conn.execute("SET LOCAL enable_indexscan = off")
                conn.execute("SET LOCAL enable_indexonlyscan = off")
                conn.execute("SET LOCAL enable_bitmapscan = off")
                rows = _count(conn, sql.SQL("SELECT count(*) FROM {}").format(table))
                conn.execute("SET LOCAL enable_seqscan = off")
                conn.execute("SET LOCAL enable_indexscan = on")
                conn.execute("SET LOCAL enable_indexonlyscan = on")
                listed = _count(conn, sql.SQL("SELECT count(*) FROM {} WHERE key >= ''::bytea")
                                .format(table))
                flags = conn.execute(
                    "SELECT bool_and(i.indisvalid AND i.indisready AND i.indisunique) "
                    "FROM pg_index i WHERE i.indrelid = to_regclass(%s) AND i.indisprimary",
                    (TABLE,)).fetchone()
            found = []
            if rows != listed:
                found.append(f"the table holds {rows:,} rows, its key index lists {listed:,} "
                             f"(REINDEX TABLE {TABLE} rebuilds it)")
            if flags is None or flags[0] is not True:
                found.append(f"the table's primary key index is missing, not valid or not "
                             f"unique (REINDEX TABLE {TABLE})")
            return found

        problems: list[str] = self._run("verify", check)
        return problems

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                with contextlib.suppress(Exception):
                    conn.close()


def _scan(conn: psycopg.Connection[Any], prefix: bytes, upper: bytes | None,
          after: bytes | None) -> list[bytes]:
    where, args = ["key >= %b"], [prefix]
    if upper is not None:
        where.append("key < %b")
        args.append(upper)
    if after is not None:
        where.append("key > %b")
        args.append(after)
    query = sql.SQL("SELECT key FROM {} WHERE " + " AND ".join(where) + " ORDER BY key LIMIT %s")
    rows = conn.cursor(binary=True).execute(query.format(sql.Identifier(TABLE)),
                                             (*args, _KEYS_PER_READ)).fetchall()
    return [bytes(k) for (k,) in rows]


def _count(conn: psycopg.Connection[Any], query: sql.Composed) -> int:
    row = conn.execute(query).fetchone()
    return int(row[0]) if row is not None else 0


def _upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _key_lock(key: bytes) -> int:
    """A key's advisory lock id (an int4; two keys sharing one only wait for each other)."""
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big", signed=True)


@contextlib.contextmanager
def _translated(url: str, secrets: list[str], action: str) -> Iterator[None]:
    """Driver errors become StoreError naming the store (never its password), once, here."""
    try:
        yield
    except psycopg.Error as exc:
        raise StoreError(_message(url, secrets, action, exc)) from exc


def _message(url: str, secrets: list[str], action: str, exc: psycopg.Error) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in secrets:
        text = text.replace(secret, "***")
    hint = next((h for kind, h in _HINTS.items() if isinstance(exc, kind)), None)
    if hint is None and isinstance(exc, psycopg.OperationalError):
        hint = "the server is unreachable or went away"
    return f"{url}: {action} failed: {text}" + (f" ({hint})" if hint else "")


def _connect(location: str, url: str, secrets: list[str]) -> psycopg.Connection[Any]:
    with _translated(url, secrets, "connect"):
        conn = psycopg.connect(f"postgresql://{location}", **_connect_kwargs(location))
        # durable on return from commit, whatever the server's default for sessions
        if conn.execute("SHOW synchronous_commit").fetchone() in (("off",), ("local",)):
            conn.execute("SET synchronous_commit TO on")
        # a row-level security policy on the table would hide records from every lookup
        # (verify said all verified; recover: unknown handle): with it off, a query such a
        # policy would filter is an error instead
        conn.execute("SET row_security TO off")
    return conn


def _set_readonly(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


def _prepare(conn: psycopg.Connection[Any], url: str, *, create: bool, readonly: bool) -> None:
    """Make sure the table is there and ours (making it when `create`), and writable
    unless `readonly`."""
    if readonly:
        _set_readonly(conn)
    found = _table_comment(conn)
    if found is None and create:
        found = _create_unless_made(conn)
    if found is None:
        raise missing_store(url)
    if found != MARKER:
        raise foreign_store(url, f"its table {TABLE} is another program's "
                                 f"(comment {found[:60]!r}, not {MARKER!r})")
    _check_layout(conn, url)
    if not readonly:
        _check_writable(conn, url)


def _check_layout(conn: psycopg.Connection[Any], url: str) -> None:
    """StoreError if our table's columns are not as made (an ALTER by hand: a value column
    of text gave a TypeError traceback on every read)."""
    columns = dict(conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
        (TABLE,)).fetchall())
    for name in ("key", "value"):
        if columns.get(name) != "bytea":
            found = columns.get(name)
            raise StoreError(f"{url}: its table {TABLE}'s layout was changed: column {name} is "
                             f"{found if found is not None else 'missing'}, not bytea; "
                             f"restore the table from a backup")


def _create_unless_made(conn: psycopg.Connection[Any]) -> str:
    """Make the table unless another host made it while we waited for the creation lock.

    It is looked for again in a transaction begun after the wait: a transaction that
    waited on an advisory lock can still answer catalog lookups as before the wait (no
    table), and its CREATE TABLE would then fail on the table made meanwhile."""
    conn.execute("SELECT pg_advisory_lock(%s)", (_CREATE_LOCK,))
    try:
        found = _table_comment(conn)
        if found is None:
            with conn.transaction():
                _create_table(conn)
            found = MARKER
    finally:
        if not conn.broken:  # (a broken session's locks went with it)
            conn.execute("SELECT pg_advisory_unlock(%s)", (_CREATE_LOCK,))
    return found


def _table_comment(conn: psycopg.Connection[Any]) -> str | None:
    """The comment of our table ('' if it has none), None if there is no such table."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL, "
                       "coalesce(obj_description(to_regclass(%s), 'pg_class'), '')",
                       (TABLE, TABLE)).fetchone()
    return None if row is None or not row[0] else str(row[1])


def _create_table(conn: psycopg.Connection[Any]) -> None:
    table = sql.Identifier(TABLE)
    conn.execute(sql.SQL("CREATE TABLE {} (key bytea PRIMARY KEY, value bytea NOT NULL)").format(table))
    # values are zstd frames already: stored out of line as they are, never compressed again
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN value SET STORAGE EXTERNAL").format(table))
    conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(table, sql.Literal(MARKER)))


def _check_writable(conn: psycopg.Connection[Any], url: str) -> None:
    """A role or server that may not write is said at open, not after a batch's work."""
    row = conn.execute(
        "SELECT current_user, current_setting('transaction_read_only'), "
        "bool_and(has_table_privilege(%s, p)) FROM unnest(%s::text[]) AS p",
        (TABLE, ["SELECT", "INSERT", "UPDATE", "DELETE"])).fetchone()  # each: a list means any
    assert row is not None
    user, read_only, allowed = row
    if read_only == "on":
        raise StoreError(f"{url}: the server or role {user!r} is read-only (a standby, or "
                         f"default_transaction_read_only); only commands that read can use it")
    if not allowed:
        raise StoreError(f"{url}: role {user!r} may not write the {TABLE} table (a read-only "
                         f"role?); writing needs SELECT, INSERT, UPDATE and DELETE on it, "
                         f"reading (recover, stats, verify) SELECT only")


__all__ = ["PostgresStore", "printable_url"]
