"""The abstract store interface and the backend registry.

A store is a small transactional map from bytes keys to bytes values. Backends
implement five things: `commit` (many records in one transaction, each through an
optional merge function), `get`, `keys` by prefix, `close`, and `open`. Everything
else (`put`, `delete`, `items`, `__contains__`, context management, pickling) is
built on those here, once.

A store is named by a URL and prints itself back as that URL:
`lmdb:///var/lib/caveman/ccr`, `sqlite:///srv/ccr.db`, `memory://`. The same string
is the CLI option, the environment value, the pickled state and the test id. A URL
has no query or fragment: `sqlite:///x.db?mode=ro` is refused, not a file name.

A store opened `readonly` changes nothing on disk (commands that only read it), and
every backend refuses a location that holds something not its own (another program's
database): ForeignStoreError, with that location left exactly as it was.
"""

from __future__ import annotations

import importlib
import os
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

from .errors import (
    BackendUnavailableError,
    ForeignStoreError,
    StoreError,
    StoreNotFoundError,
    StoreURLError,
)


class _Delete:
    """Sentinel a merge function returns to delete the key inside the transaction."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE: Final = _Delete()

#: merge(key, old value or None, proposed value) -> value to write, None to leave
#: the key as it is, or DELETE. Runs inside the write transaction, so a
#: read-modify-write is atomic even with other processes writing.
Merge = Callable[[bytes, bytes | None, bytes], "bytes | None | _Delete"]

ENTRY_POINT_GROUP: Final = "caveman_batch.stores"


def apply_commit(items: Iterable[tuple[bytes, bytes]], merge: Merge | None,
                 read: Callable[[bytes], bytes | None], write: Callable[[bytes, bytes], object],
                 delete: Callable[[bytes], object]) -> None:
    """The commit loop every backend runs inside its own transaction."""
    for key, value in items:
        result = value if merge is None else merge(key, read(key), value)
        if result is None:
            continue
        if isinstance(result, _Delete):  # DELETE, the one instance (mypy narrows on isinstance)
            delete(key)
        else:
            write(key, result)

# scheme -> "module:attr"; built-in backends go through the same table an outside
# one registered by entry point would, and are imported only when used.
_BACKENDS: dict[str, str] = {
    "lmdb": "backends.lmdb_store:LmdbStore",
    "sqlite": "backends.sqlite_store:SqliteStore",
    "memory": "caveman_batch.memory_store:MemoryStore",
    "postgresql": "backends.postgres_store:PostgresStore",
    "postgres": "backends.postgres_store:PostgresStore",  # libpq takes both spellings
}
_INSTALL_HINTS: dict[str, str] = {
    "lmdb": "pip install 'lmdb>=1.4'",
    "sqlite": "a Python built with the sqlite3 module",
    "postgresql": "pip install 'caveman-batch[postgres]' (psycopg 3)",
    "postgres": "pip install 'caveman-batch[postgres]' (psycopg 3)",
}
#: schemes whose URL is libpq's, where a query is connection parameters (?sslmode=require)
_QUERY_SCHEMES: Final = frozenset({"postgresql", "postgres"})


class Store(ABC):
    """A transactional bytes->bytes map named by a URL."""

    scheme: ClassVar[str]
    #: whether another process opening the same URL reaches the same records (a backend
    #: says so; one registered at run time is not known to another interpreter anyway)
    shared: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def open(cls, location: str, create: bool = True, readonly: bool = False) -> Store:
        """Open the store at `location` (the URL minus scheme://).

        With `create=False` a store that does not exist yet is StoreNotFoundError
        instead of a new empty one (commands that only read: a typo must not
        create a store). With `readonly` (which implies `create=False`) nothing is
        written: the files are opened read-only (a store whose files are 0444 can be
        read) and `commit` raises StoreError. Whatever the mode, a location holding
        something that is not this backend's store is ForeignStoreError, untouched.
        """

    @classmethod
    def canonical_url(cls, location: str) -> str:
        """The URL a store at `location` would print, without opening it."""
        return f"{cls.scheme}://{location}"

    @property
    @abstractmethod
    def url(self) -> str:
        """The canonical URL that reopens this store."""

    @abstractmethod
    def commit(self, items: Sequence[tuple[bytes, bytes]], merge: Merge | None = None) -> None:
        """Write every item in ONE transaction: all land or none do.

        Without `merge` each value overwrites; with it, merge(key, old, new) decides.
        """

    @abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value under `key`, or None."""

    def missing(self, keys: Sequence[bytes]) -> list[bytes]:
        """The keys, of these, that hold no value (a backend may answer in one read)."""
        return [key for key in keys if self.get(key) is None]

    def commit_present(self, items: Sequence[tuple[bytes, bytes, bytes]],
                       merge: Merge | None = None) -> list[bytes]:
        """For each (guard, key, value): write key (through `merge`, as commit does) only if
        `guard` holds a value, all in ONE transaction; return the guards that hold none,
        checked in that same transaction (no other writer can remove a guard between the
        check and the write). Guards are never written, and are not among the keys.

        Built here on commit (each guard read by a merge that writes nothing); a backend
        may look guards up without reading their values."""
        guards = {guard for guard, _, _ in items}
        held: dict[bytes, bool] = {}  # set again if a backend runs the transaction again
        last: list[bytes] = []  # the guard read just before (each item's own: read in order)

        def guarded(key: bytes, old: bytes | None, new: bytes) -> bytes | None | _Delete:
            if key in guards:
                held[key] = old is not None
                last[:] = [key]
                return None
            if not held[last[0]]:
                return None
            return new if merge is None else merge(key, old, new)

        plan: list[tuple[bytes, bytes]] = []
        for guard, key, value in items:
            plan += [(guard, b""), (key, value)]
        self.commit(plan, merge=guarded)
        return [guard for guard in dict.fromkeys(g for g, _, _ in items) if not held[guard]]

    @abstractmethod
    def keys(self, prefix: bytes = b"") -> Iterator[bytes]:
        """Keys starting with `prefix`, in ascending byte order."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; further use is an error. Closing twice is harmless."""

    def integrity_problems(self) -> list[str]:
        """What the backend's own check of its file finds wrong (an index that no longer
        lists every row, ...), beyond what each record's sha256 can tell; [] if nothing, or
        if the backend has no such check."""
        return []

    # -- helpers built on the abstract methods --------------------------------

    def put(self, key: bytes, value: bytes) -> None:
        self.commit([(key, value)])

    def delete(self, keys: Iterable[bytes]) -> None:
        self.commit([(k, b"") for k in keys], merge=lambda _k, _old, _new: DELETE)

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        for key in self.keys(prefix):
            value = self.get(key)
            if value is not None:  # deleted by another writer since we listed it
                yield key, value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self.get(key) is not None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (open_store, (self.url,))


def register_backend(scheme: str, target: str) -> None:
    """Register `target` ("module:attr") as the backend for `scheme`."""
    if ":" not in target:
        raise ValueError(f"backend target must be 'module:attr', got {target!r}")
    _BACKENDS[scheme] = target


def backend_schemes() -> list[str]:
    _load_entry_points()
    return sorted(_BACKENDS)


def entry_points(group: str) -> Any:
    """importlib.metadata.entry_points(group=...), imported on first use: it costs ~50 ms,
    a third of the command line's start-up, and only an unknown scheme needs it."""
    from importlib.metadata import entry_points as installed

    return installed(group=group)


def _load_entry_points() -> None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _BACKENDS.setdefault(ep.name, ep.value)


#: query parameters whose value is a secret (libpq's): never printed
SECRET_PARAMS: Final = frozenset({"password", "sslpassword"})
#: schemes whose URL is a path (no user part, nothing secret): printed as given
_PATH_SCHEMES: Final = frozenset({"lmdb", "sqlite", "memory"})


def printable(url: str) -> str:
    """`url` as a report or an error may print it: a backend's canonical URL where one can
    be made (postgresql:// without its password), else `url` with the password of any
    user part and every secret parameter taken out. Never fails."""
    try:
        return canonical_url(url)
    except Exception:  # (a URL that does not parse, a driver not installed, ...)
        return redacted(url)


def redacted(url: str) -> str:
    """`url` without secrets, read leniently (a URL that does not parse included): in a
    user part (up to the last `@` before any `?`), all after its first `:`; `password=`
    and `sslpassword=` parameters. A path scheme's URL (lmdb, sqlite, a bare path) is
    printed as given."""
    scheme, sep, location = url.partition("://")
    if not sep:  # (`postgresql:user:pw@host`, a URL missing its //, too)
        scheme, sep, location = url.partition(":")
        if not sep or not scheme.isidentifier():
            return url
    if scheme.lower() in _PATH_SCHEMES:
        return url
    body, q, query = location.partition("?")
    userinfo, at, rest = body.rpartition("@")
    if at:
        body = f"{userinfo.partition(':')[0]}@{rest}"
    if q:
        kept = [p for p in query.split("&")
                if urllib.parse.unquote(p.partition("=")[0]).strip().lower() not in SECRET_PARAMS]
        return f"{scheme}{sep}{body}" + (f"?{'&'.join(kept)}" if kept else "")
    return f"{scheme}{sep}{body}"


def split_store_url(url: str) -> tuple[str, str]:
    """`scheme://location` -> (scheme, location). A bare path means LMDB (and may hold
    any character a file name may); a URL takes no fragment, and no query but libpq's."""
    if not url.strip():
        raise StoreURLError(f"empty store URL {url!r}: give one, e.g. lmdb:///var/lib/caveman/ccr")
    if "://" not in url:
        scheme, colon, rest = url.partition(":")
        if colon and scheme.lower() in _BACKENDS:
            # `sqlite:/x.db`, `sqlite:x.db`: a URL missing its //, not an LMDB folder of that
            # name (a path starting so is still one spelled ./sqlite:/x.db)
            shown = redacted(url).partition(":")[2].lstrip("/")
            raise StoreURLError(f"store URL {redacted(url)!r} lacks the // after {scheme}: write "
                                f"{scheme.lower()}:///{shown} (absolute) or "
                                f"{scheme.lower()}://{shown} (relative); a folder so named: "
                                f"./{redacted(url)}")
        return "lmdb", url
    scheme, _, location = url.partition("://")
    if not scheme.isidentifier():
        raise StoreURLError(f"malformed store URL {redacted(url)!r}")
    if "#" in location or ("?" in location and scheme.lower() not in _QUERY_SCHEMES):
        raise StoreURLError(f"store URL {redacted(url)!r} has a query or fragment (?… or #…), which no "
                            f"store takes; give the path alone")
    return scheme.lower(), location


def resolve_backend(scheme: str) -> type[Store]:
    """Import the class registered for `scheme`, or say how to get it."""
    if scheme not in _BACKENDS:
        _load_entry_points()
    target = _BACKENDS.get(scheme)
    if target is None:
        known = ", ".join(f"{s}://" for s in sorted(_BACKENDS))
        raise StoreURLError(f"unknown store scheme {scheme!r}; known: {known}")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(scheme, f"install the package providing {module_name}")
        raise BackendUnavailableError(
            f"the {scheme}:// store needs a driver that is not installed ({exc}); "
            f"install it with: {hint}"
        ) from exc
    cls: type[Store] = getattr(module, attr)
    return cls


def open_store(url: str, *, create: bool = True, readonly: bool = False) -> Store:
    """Open the store named by `url` (see the module docstring)."""
    scheme, location = split_store_url(url)
    backend = resolve_backend(scheme)
    if readonly:
        return backend.open(location, False, readonly=True)
    return backend.open(location, create)


def shared_store(url: str) -> bool:
    """Whether another process opening `url` reaches the store this one does."""
    return resolve_backend(split_store_url(url)[0]).shared


def canonical_url(url: str) -> str:
    """What `str(open_store(url))` would be, without opening anything."""
    scheme, location = split_store_url(url)
    return resolve_backend(scheme).canonical_url(location)


def foreign_store(url: str, what: str) -> ForeignStoreError:
    return ForeignStoreError(f"{url} is not a caveman-batch store ({what}); refused, "
                             f"nothing there was changed")


def file_mode(path: Path, url: str) -> int | None:
    """The mode of what is at `path` (a symlink followed), None if nothing is; one that
    cannot be looked at (a folder not ours to enter) is a StoreError naming the store."""
    try:
        return os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StoreError(f"{url}: cannot look at {path}: {exc.strerror or exc}") from exc


def missing_store(url: str) -> StoreNotFoundError:
    return StoreNotFoundError(f"no store at {url} (nothing was ever committed there)")


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) as 0700; an existing dir is left alone."""
    missing: list[Path] = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):  # makedirs would give parents umask bits
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # another process made it first
        os.chmod(folder, 0o700)  # mkdir's mode is filtered by the umask
    return path


def sqlite_folder_hint(path: Path | str) -> str:
    """What to add to SQLite's "attempt to write a readonly database" (or "unable to open
    database file") for a file this process may write in a folder it may not: the folder
    is at fault, where SQLite makes the file's -wal and -shm (the message blamed the file,
    whose mode was fine)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.access(path, os.W_OK) and not os.access(folder, os.W_OK):
        return (f" (its folder {folder} is not writable here, and SQLite makes the file's "
                f"-wal and -shm beside it)")
    return ""


def sqlite_io_hint(exc: BaseException) -> str:
    """What to add to SQLite's plain "disk I/O error": a write past a file size limit
    (EFBIG) is reported so, where a full disk is "database or disk is full"."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    return " (a full disk or a file size limit is reported so too)" if name.startswith(
        "SQLITE_IOERR") else ""


def local_path(location: str) -> Path:
    """A store location as an absolute path (`~` expanded)."""
    if not location:
        raise StoreURLError("this store needs a path, e.g. lmdb:///var/lib/caveman/ccr")
    return Path(os.path.expanduser(location)).absolute()


def path_url(scheme: str, path: Path) -> str:
    return f"{scheme}://{path.as_posix()}" if path.is_absolute() else f"{scheme}://{path}"
