"""Tool search: one index of every tool, ranked by SQLite FTS5's bm25 with field weights.

A `ToolDoc` is one tool ready to index: its catalog (server) id, its name, the handle of
its exact original bytes, its compressed definition (what a search returns) and its
search text by field. `ToolIndex` keeps them in one SQLite file: a `tools` table of what
a hit returns, its search text and its definition each stored once however many tools
share them (`texts`, whose ids are the FTS5 table's rowids, and `definitions`), and a
`servers` table of each catalog's sha256, so a rerun knows which catalogs changed.

Ranking belongs to the engine: `bm25()` with a weight per field (the name counts most),
the porter stemmer over unicode61 tokens. A natural-language query becomes an OR of its
quoted words (FTS5 reads implicit terms as AND, and bare words as syntax): any text is a
valid query. Ties are broken by (server, name, position), never by rowid, so the same
tools give the same results whatever order they were indexed in.

Every change is one transaction: a crash leaves the index as it was before the change.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from . import _accel
from .catalog import NAME_MAPS, ONE_SCHEMA, SCHEMA_KEYS, SCHEMA_LIST
from .errors import (
    NotASearchIndexError,
    SearchIndexError,
    SearchIndexInconsistentError,
    SearchIndexNotFoundError,
    SearchIndexOutdatedError,
)
from .store import sqlite_folder_hint, sqlite_io_hint
from .toolvectors import FUSION_DEPTH, VECTOR_SCHEMA, ToolVectors, fuse_weighted, top

if TYPE_CHECKING:
    from .embedding import Embedder

SCHEMA_VERSION: Final = 3
FIELDS: Final = ("name", "description", "params")
# bm25 weight per field, in FIELDS order: a word of the name says more than one of the
# description or the parameters.
WEIGHTS: Final = (3.0, 1.0, 1.0)
_WEIGHTS: Final = ", ".join(str(w) for w in WEIGHTS)
# search() ranks the best k + _TIE_MARGIN texts, unless their last ties with the k-th
_TIE_MARGIN: Final = 16
_MAX_K: Final = 1 << 40  # hits asked for beyond this: as many (no index holds that many tools)
TOKENIZER: Final = "porter unicode61 remove_diacritics 2"
# FTS5's merge settings (its defaults), and those of a build: no merging as it goes, only
# when a level holds this many segments (each commit adds one; FTS5 allows 2,000), then
# one `optimize` at the end. Merging as it goes cost 0.25 of the writer's 1.3 s CPU on
# the 50 MB bench registry; the optimize costs about the same either way.
_MERGE_DEFAULTS: Final = (("automerge", 4), ("crisismerge", 16))
_MERGE_DEFERRED: Final = (("automerge", 0), ("crisismerge", 128))
MAX_QUERY_TERMS: Final = 64
# meta row: what compressed the definitions (a run's version and options), written at a
# build's end with the files table
COMPRESSOR_KEY: Final = "compressor"

_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- a server's catalog sha256, and where it was read (a JSON source, as a manifest names it)
CREATE TABLE IF NOT EXISTS servers (server TEXT PRIMARY KEY, sha256 TEXT, source TEXT, path TEXT);
CREATE INDEX IF NOT EXISTS servers_by_source ON servers (source);
-- whole source files every tool of which is indexed, with the sha256 they had
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
-- search texts, each once however many tools share it (a registry repeats its tools): the
-- FTS row of text `id` has rowid `id`, and `refs` counts the tools that have it
-- (no index on digest: see _Shared)
CREATE TABLE IF NOT EXISTS texts (id INTEGER PRIMARY KEY, digest BLOB NOT NULL,
                                  refs INTEGER NOT NULL);
-- compressed definitions, each once likewise (`refs` counts the tools that have it)
CREATE TABLE IF NOT EXISTS definitions (id INTEGER PRIMARY KEY, digest BLOB NOT NULL,
                                        refs INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tools (
    id INTEGER PRIMARY KEY,
    server TEXT NOT NULL,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    handle TEXT,
    definition_id INTEGER NOT NULL,
    text_id INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tools_by_server ON tools (server, position);
CREATE INDEX IF NOT EXISTS tools_by_text ON tools (text_id);
CREATE VIRTUAL TABLE IF NOT EXISTS tools_fts USING fts5 ({", ".join(FIELDS)}, tokenize='{TOKENIZER}');
{VECTOR_SCHEMA};
"""
# every table any schema of the index has had (what an outdated index drops)
_EVERY_TABLE: Final = ("tools_fts", "tool_vectors", "tools", "texts", "definitions", "servers",
                       "files", "meta")
_PAGE_SIZE: Final = 16384
# what a hit reads of a tool: its definition joined from `definitions`
_TOOL_COLUMNS: Final = "t.text_id, t.server, t.name, t.position, t.handle, d.body"
_TOOLS: Final = "tools t JOIN definitions d ON d.id = t.definition_id"


@dataclass(frozen=True, slots=True)
class ToolDoc:
    """One tool, ready to index."""

    server: str
    name: str
    handle: str | None  # ccr_<sha256> of the tool object's exact original bytes, if stored
    definition: str  # the compressed tool object, compact JSON text
    fields: dict[str, str] = field(default_factory=dict)  # search text by FIELDS name


# One tool as the index writes it: (name, handle, definition, search fields), a ToolDoc
# without its server (its catalog's): what the index writer makes of a worker's tools.
ToolRow = tuple[str, "str | None", str, dict[str, str]]


def _rows(server: str, docs: Sequence[ToolDoc]) -> list[ToolRow]:
    stray = next((doc for doc in docs if doc.server != server), None)
    if stray is not None:
        raise ValueError(f"a doc of another server given as one of {server!r}")
    return [(doc.name, doc.handle, doc.definition, doc.fields) for doc in docs]


@dataclass(frozen=True, slots=True)
class Hit:
    server: str
    name: str
    score: float  # higher is better
    handle: str | None
    definition: str

    def as_dict(self) -> dict[str, Any]:
        return {"server": self.server, "name": self.name, "score": self.score,
                "handle": self.handle, "definition": self.definition}


# -- search text ------------------------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s_\-.:/]+")


def split_name(name: str) -> str:
    """`getPullRequest_v2.list-all` -> `get Pull Request v2 list all`."""
    return " ".join(w for part in _SEPARATORS.split(name) for w in _CAMEL.split(part) if w)


# the schema keys whose parameters are searched (not the output's), and the key sets the
# C path is handed (so that it reads the very sets _schema_text does)
_INPUT_SCHEMA_KEYS: Final = tuple(k for k in SCHEMA_KEYS if not k.startswith("output"))
_FAST_KEYS: Final = (_INPUT_SCHEMA_KEYS, NAME_MAPS, SCHEMA_LIST, ONE_SCHEMA)


def search_fields(tool: dict[str, Any]) -> dict[str, str]:
    """The search text of one parsed tool object, by field (by the C walker when it can
    build it exactly, else `_search_fields`, which defines it)."""
    fastwalk = _accel.fastwalk
    if fastwalk is not None and type(tool) is dict:
        fast = fastwalk.search_fields(tool, *_FAST_KEYS)
        if fast is not None:
            return {"name": fast[0], "description": fast[1], "params": fast[2]}
    return _search_fields(tool)


def _search_fields(tool: dict[str, Any]) -> dict[str, str]:
    """The search text of one parsed tool object, by field: the definition."""
    description = tool.get("description")
    params: list[str] = []
    for key in SCHEMA_KEYS:
        if key in tool and not key.startswith("output"):
            _schema_text(tool[key], params, 0)
    return {"name": split_name(str(tool.get("name", ""))),
            "description": description if isinstance(description, str) else "",
            "params": " ".join(params)}


def _schema_text(node: Any, out: list[str], depth: int) -> None:
    """Parameter names (split), their descriptions and enum values, in document order."""
    if not isinstance(node, dict) or depth > 64:
        return
    for key, value in node.items():
        if key == "description" and isinstance(value, str):
            out.append(value)
        elif key == "enum" and isinstance(value, list):
            out.extend(str(v) for v in value if isinstance(v, (str, int, float)))
        elif key in NAME_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                out.append(split_name(name))
                _schema_text(sub, out, depth + 1)
        elif key in SCHEMA_LIST and isinstance(value, list):
            for sub in value:
                _schema_text(sub, out, depth + 1)
        elif key in ONE_SCHEMA:
            _schema_text(value, out, depth + 1)


def definition_text(tool: dict[str, Any]) -> str:
    """A tool object as compact JSON text (number literals as parsed, key order kept)."""
    return orjson.dumps(tool).decode("utf-8")


def tool_docs(server: str, tools: list[dict[str, Any]], compressed: list[dict[str, Any]],
              handles: Sequence[str | None]) -> list[ToolDoc]:
    """Docs of one catalog: search text from the original tools, definitions compressed."""
    if not len(tools) == len(compressed) == len(handles):
        raise ValueError(f"{server}: {len(tools)} tools, {len(compressed)} compressed, "
                         f"{len(handles)} handles")
    return [ToolDoc(server, str(tool.get("name", "")), handle, definition_text(small),
                    search_fields(tool))
            for tool, small, handle in zip(tools, compressed, handles)]


# -- queries ----------------------------------------------------------------------

# a word: \w and the combining diacritics FTS5's unicode61 reads as part of a word (and
# drops), so that a mark with no precomposed form does not split the query's word where the
# index's is whole
_WORD = re.compile(r"[\w\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
STOP_WORDS: Final = frozenset("""
a an and are as at be by can could do does for from has have how i in into is it its me my
of on or our please that the their them then there these this to use using want was we what
when where which who will with would you your need needs some any all get
""".split())


def _camel_parts(word: str) -> list[str]:
    """The parts of a camelCase word (none for a word of one part)."""
    parts = _CAMEL.split(word)
    return [p for p in parts if p] if len(parts) > 1 else []


def _read_only_mount(location: str) -> bool:
    """Whether the file lies on a file system mounted read-only: no one writes it there
    (a folder this process may not write is not enough: its owner may be writing)."""
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(location))).f_flag
                    & os.ST_RDONLY)
    except OSError:
        return False


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH expression for free text: the OR of its quoted words, or None.

    Stop words go unless nothing else is left. Each word is quoted, so FTS5 syntax in
    the query (AND, NEAR, quotes, column filters) is only text. A word that is a name in
    camelCase (`sendEmail`) is searched whole and in its parts, as names are indexed
    (split_name). Past MAX_QUERY_TERMS distinct words, the rest are not searched.
    """
    # composed (NFC), as catalogs' text is: a query written decomposed (NFD, as macOS file
    # names hand text over: "re\u0301sume\u0301", Hangul as jamo) was split into "re" and
    # "sume", and FTS5 folds a precomposed Greek or Cyrillic letter apart from its NFD form
    query = unicodedata.normalize("NFC", query)
    words = [w.lower() for found in _WORD.findall(query)
             for w in dict.fromkeys((found, *_camel_parts(found)))]
    kept = [w for w in words if w not in STOP_WORDS] or words
    unique = list(dict.fromkeys(kept))[:MAX_QUERY_TERMS]
    if not unique:
        return None
    return " OR ".join(f'"{w}"' for w in unique)


# -- the index --------------------------------------------------------------------


def _composed(text: str) -> str:
    """Search text composed (NFC), as a query is (match_expression): FTS5 folds a decomposed
    Greek or Cyrillic letter apart from the composed one, and Hangul as jamo, so a catalog
    written decomposed was found by no query. (ASCII, most text, is composed already.)"""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def _chunks(items: Sequence[Any], size: int = 500) -> Iterator[Sequence[Any]]:
    for at in range(0, len(items), size):
        yield items[at:at + size]


class _Shared:
    """A table of rows stored once however many tools use them (texts, definitions): each
    has the digest of its content and `refs`, how many tools use it.

    The writer keeps each digest's id in memory, not in an index of the table: an index of
    digests takes them in random order, so each commit of a build rewrote most of its pages
    (with one on `definitions` too, storing them once cost the bench registry's build more
    CPU than it saved). The map is read again from the table when another connection has
    written since (`PRAGMA data_version`), or a change of ours rolled back.
    """

    def __init__(self, table: str) -> None:
        self.table = table
        self._ids: dict[bytes, int] | None = None
        self._version: int | None = None  # the data_version the map was read at

    def forget(self) -> None:
        self._ids = None

    def _loaded(self, db: sqlite3.Connection) -> dict[bytes, int]:
        version = db.execute("PRAGMA data_version").fetchone()[0]
        if self._ids is None or version != self._version:
            self._ids = dict(db.execute(f"SELECT digest, id FROM {self.table}"))
            self._version = version
        return self._ids

    def add(self, db: sqlite3.Connection,
            uses: Counter[bytes]) -> tuple[dict[bytes, int], list[tuple[int, bytes, int]]]:
        """Count these uses of digests: the rows the table has get their refs raised, the
        others an id each. Returns every digest's id, and the (id, digest, refs) rows for
        the caller to add."""
        ids = self._loaded(db)
        db.executemany(f"UPDATE {self.table} SET refs = refs + ? WHERE id = ?",
                       [(count, ids[digest]) for digest, count in uses.items() if digest in ids])
        next_id = db.execute(f"SELECT coalesce(max(id), 0) FROM {self.table}").fetchone()[0] + 1
        new = []
        for digest, count in uses.items():  # in first-use order
            if digest not in ids:
                ids[digest] = next_id
                new.append((next_id, digest, count))
                next_id += 1
        return ids, new

    def drop(self, db: sqlite3.Connection, ids: Iterable[int]) -> list[tuple[int]]:
        """Count these uses of rows no more; delete the rows nothing uses now and return
        their ids."""
        known = self._loaded(db)
        uses = Counter(ids)
        db.executemany(f"UPDATE {self.table} SET refs = refs - ? WHERE id = ?",
                       [(count, id_) for id_, count in uses.items()])
        unused: list[tuple[int]] = []
        for chunk in _chunks(sorted(uses)):
            for id_, digest in db.execute(f"SELECT id, digest FROM {self.table} WHERE refs <= 0 "
                                          f"AND id IN ({','.join('?' * len(chunk))})", chunk):
                unused.append((id_,))
                del known[digest]
        db.executemany(f"DELETE FROM {self.table} WHERE id = ?", unused)
        return unused


def _create_private(location: str) -> None:
    """A new index file is made 0600, as the store's files (it holds every tool's text and
    definition, as the store holds the originals); its -wal and -shm take its bits. One
    already there keeps its own (an owner may have shared it). Failing here, the open says
    why."""
    with contextlib.suppress(OSError):
        os.close(os.open(location, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


class ToolIndex:
    """A search index of tools in one SQLite file (or ":memory:").

    One writer at a time (SQLite serializes writers across processes); the caller
    serializes threads. Changes are transactions: all of a call or none of it.
    """

    def __init__(self, connection: sqlite3.Connection, location: str,
                 vectors: ToolVectors | None = None) -> None:
        self._db = connection
        self.location = location
        self._vectors = vectors
        self._texts, self._definitions = _Shared("texts"), _Shared("definitions")

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = True,
             embedder: Embedder | None = None) -> ToolIndex:
        """Open (or create) an index; with an `embedder`, search is hybrid (BM25 + dense).

        With an embedder, opening also embeds every tool that has no vector of this
        embedder yet (an index built without one, or by another model), in one transaction.
        """
        location = os.fspath(path)
        if location != ":memory:" and not create and not Path(location).is_file():
            what = ("is a folder, not a search index (give the index file)"
                    if Path(location).is_dir() else "is not there")
            raise SearchIndexNotFoundError(f"no search index at {location}: it {what}",
                                           location)
        if create and location != ":memory:":
            _create_private(location)
        try:
            return cls._opened(location, location, create, embedder)
        except SearchIndexError as exc:
            # a WAL file's readers need its -shm beside it: where none can be made (a
            # read-only mount, an image's layer), a reader opens the file as immutable
            # (no one can write it there either)
            if create or not isinstance(exc.__cause__, sqlite3.OperationalError) or (
                    not _read_only_mount(location)):
                raise
        # immutable means the -wal is never read: transactions it still holds (a build
        # killed before its checkpoint, an image made without the -shm) would be lost
        # silently, the index read as it stood at its last checkpoint
        try:
            logged = os.path.getsize(f"{location}-wal")
        except OSError:
            logged = 0
        if logged:
            raise SearchIndexError(
                f"cannot open search index {location}: it is on a read-only file system and "
                f"its write-ahead log {location}-wal may hold transactions, which cannot be "
                f"read without a {location}-shm beside it (SQLite cannot tell without one); "
                f"open it once where it can be written (or copy its -shm too)")
        uri = f"{Path(location).resolve().as_uri()}?mode=ro&immutable=1"
        return cls._opened(uri, location, create, embedder)

    @classmethod
    def _opened(cls, target: str, location: str, create: bool,
                embedder: Embedder | None) -> ToolIndex:
        try:
            db = sqlite3.connect(target, isolation_level=None, check_same_thread=False,
                                 uri=target.startswith("file:"))
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot open search index {location}: {exc}") from exc
        index = cls(db, location, None if embedder is None else ToolVectors(embedder))
        try:
            index._prepare(create)
        except BaseException as exc:
            db.close()  # an index refused is not left open
            if isinstance(exc, sqlite3.Error):
                hint = ""
                if embedder is not None and str(getattr(exc, "sqlite_errorname", "")
                                                ).startswith("SQLITE_READONLY"):
                    hint = (" (its tools have no vectors of this embedder yet, and it is "
                            "read-only here: search it with --no-embed, or build it with the "
                            "embed extra installed)")
                hint = (sqlite_folder_hint(location) or sqlite_io_hint(exc)
                        or hint)  # (the folder first: --no-embed would not help)
                raise SearchIndexError(f"cannot open search index {location}: {exc}{hint}"
                                       ) from exc
            raise
        return index

    @property
    def embedder(self) -> Embedder | None:
        """The embedder of a hybrid index (None: BM25 alone)."""
        return None if self._vectors is None else self._vectors.embedder

    def _prepare(self, create: bool) -> None:
        # a new file's pages: 16 KiB, not 4: a build writes a quarter as many WAL frames
        # (about 0.2 s of 1.4 s CPU replaying the bench registry's build, measured under
        # load); an existing file keeps its own (this writes nothing)
        try:
            self._db.execute(f"PRAGMA page_size={_PAGE_SIZE}")
            # NORMAL: a crash loses no committed transaction, a power loss at most the last
            # ones (a rerun redoes them)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA mmap_size=268435456")  # reads map the file, not copy pages
            self._db.execute("BEGIN")  # (a read: one snapshot of what a writer committed)
        except sqlite3.DatabaseError as exc:  # (not a database: the first read says so)
            if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB":
                raise self._not_an_index(str(exc)) from None
            raise
        try:
            found = self._schema()
            if found is None and not create:  # (an empty file: a reader writes nothing)
                raise SearchIndexNotFoundError(f"no search index at {self.location} (an empty "
                                               f"database)", self.location)
            if found is not None and found != str(SCHEMA_VERSION):
                self._refuse_outdated(found, create)
            # rows that disagree (edited by hand): a writer rebuilds the index (a rerun that
            # changed no catalog never looked at them again, however wrong), a reader
            # refuses it (its searches would miss tools, as if no catalog had them)
            disagree = self._inconsistency() if found == str(SCHEMA_VERSION) else None
            if disagree is not None and not create:
                raise SearchIndexInconsistentError(
                    f"search index {self.location}: its rows disagree ({disagree}; edited by "
                    f"hand?): rebuild it with `caveman-batch compress --index`")
            broken = disagree is not None
            current = found == str(SCHEMA_VERSION) and not broken and (
                self._vectors is None or self._vectors.adopted(self._db))
            unembedded = (self._vectors.missing(self._db) if self._vectors is not None
                          and found == str(SCHEMA_VERSION) and not current else [])
        finally:
            self._db.execute("COMMIT")
        if current:
            return  # nothing to write: an open does not wait for a writer's transaction
        # texts with no vector of this embedder: embedded holding no lock (a build writes
        # on meanwhile); the write transaction below embeds only what it added since
        made = self._vectors.embedded(unembedded) if self._vectors is not None else {}
        # WAL (kept in the file: every index is made so): readers (a proxy) go on while a
        # build writes. Set only here, by an open that writes, once the file is known to
        # be an index or empty: a reader never changes the file's journal mode
        self._db.execute("PRAGMA journal_mode=WAL" if self.location != ":memory:" else
                         "PRAGMA journal_mode=MEMORY")
        with self._transaction():
            found = self._schema()
            if found is not None and found != str(SCHEMA_VERSION):
                self._drop_outdated(found, create)
                found = None
            elif found is not None and create and self._inconsistency() is not None:
                self._drop_tables()  # (derived rows: the build that follows redoes them all)
                found = None
            for statement in _SCHEMA.split(";"):  # executescript would commit mid-way
                if statement.strip():
                    self._db.execute(statement)
            if found is None:
                self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            if self._vectors is not None:
                self._vectors.adopt(self._db, made)

    def _schema(self) -> str | None:
        """The schema version the file was made with (None: a new file, with no table at
        all). A database with tables that is not an index of any version (each had a
        `meta` table naming its schema and the `tools_fts` table) is refused: an index
        written into it, or an older one's tables dropped, would alter another program's
        data."""
        tables = {row[0] for row in self._db.execute(
            "SELECT name FROM sqlite_schema WHERE type='table'")}
        if not tables:
            return None
        row = None
        if {"meta", "tools_fts"} <= tables:
            try:
                row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            except sqlite3.OperationalError:  # (a `meta` of other columns)
                row = None
        if row is None or not isinstance(row[0], str):
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise self._not_an_index(f"an SQLite database with other tables ({shown})")
        return row[0]

    def _not_an_index(self, why: str) -> NotASearchIndexError:
        return NotASearchIndexError(f"{self.location} is not a search index ({why}); give "
                                    f"--index a new file or an index's path: it is left as "
                                    f"it was")

    def _refuse_outdated(self, found: str, create: bool) -> None:
        """An index of another schema than this version's: an error, unless it is older and
        this open may write (then `_drop_outdated`)."""
        numeric = found.isascii() and found.isdigit()  # ('²'.isdigit(), and int() fails)
        if not numeric:
            raise SearchIndexOutdatedError(f"search index {self.location} has schema {found!r}, "
                                           f"which this version does not know (it reads "
                                           f"{SCHEMA_VERSION})")
        if int(found) >= SCHEMA_VERSION:
            raise SearchIndexOutdatedError(f"search index {self.location} has schema {found}, "
                                           f"newer than this version reads ({SCHEMA_VERSION})")
        if not create:
            raise SearchIndexOutdatedError(f"search index {self.location} has schema {found}, "
                                           f"this version reads {SCHEMA_VERSION}: rebuild it "
                                           f"with `caveman-batch compress --index`")

    def _drop_outdated(self, found: str, create: bool) -> None:
        """An index of an older schema: a writer drops its tables (in the transaction that
        creates the new ones). Every row of an index is derived from the catalogs it was
        built from, so the build that follows loses nothing: it indexes them all again."""
        self._refuse_outdated(found, create)
        self._drop_tables()

    def _drop_tables(self) -> None:
        for table in _EVERY_TABLE:  # the FTS table first: it drops its own shadow tables
            self._db.execute(f"DROP TABLE IF EXISTS {table}")

    def _inconsistency(self) -> str | None:
        """What disagrees among the index's rows, or None: every tool's text and definition
        are counted in their `refs` (none is 0), and every text has its one FTS row. A row
        deleted by hand (sqlite3's DELETE FROM tools …) breaks one of these counts, or
        leaves tools of a catalog the `servers` table does not have; the
        writer never makes such a state (each change is one transaction)."""
        # one pass over each table (9 ms for 49k tools, 26k texts, on a quiet machine; 18
        # for 51k tools on a busy one, 6 of them the servers' lookup; FTS5 keeps one
        # `_docsize` row per row it holds: counted, not its content scanned)
        tools, = self._db.execute("SELECT count(*) FROM tools").fetchone()
        texts, text_refs, text_least = self._db.execute(
            "SELECT count(*), coalesce(sum(refs), 0), coalesce(min(refs), 1) FROM texts").fetchone()
        definition_refs, definition_least = self._db.execute(
            "SELECT coalesce(sum(refs), 0), coalesce(min(refs), 1) FROM definitions").fetchone()
        fts, = self._db.execute("SELECT count(*) FROM tools_fts_docsize").fetchone()
        # a catalog's `servers` row deleted: a rerun would add its tools again beside
        # those left (every hit twice); its servers, read off the tools' index, each looked up
        unlisted, = self._db.execute(
            "SELECT count(*) FROM (SELECT DISTINCT server FROM tools) t "
            "LEFT JOIN servers s ON s.server = t.server WHERE s.server IS NULL").fetchone()
        if (tools, tools, texts, 0) == (text_refs, definition_refs, fts, unlisted) and min(
                text_least, definition_least) > 0:
            return None
        return (f"{tools:,} tools, their texts counted {text_refs:,} times and their definitions "
                f"{definition_refs:,}, {texts:,} texts and {fts:,} full-text rows, "
                f"{unlisted:,} catalogs of tools not in its servers table")

    # transactions ------------------------------------------------------------------

    class _Tx:
        def __init__(self, db: sqlite3.Connection,
                     on_rollback: Callable[[], None] | None = None) -> None:
            self.db = db
            self.on_rollback = on_rollback

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, kind: object, *_: object) -> None:
            if kind is None:
                try:
                    self.db.execute("COMMIT")
                    return
                except BaseException:
                    self._roll_back()
                    raise
            self._roll_back()

        def _roll_back(self) -> None:
            if self.on_rollback is not None:
                self.on_rollback()
            if self.db.in_transaction:  # a COMMIT that failed may have ended it
                self.db.execute("ROLLBACK")

    def _transaction(self, on_rollback: Callable[[], None] | None = None) -> ToolIndex._Tx:
        return ToolIndex._Tx(self._db, on_rollback)

    # writing ----------------------------------------------------------------------

    def replace_server(self, server: str, docs: Sequence[ToolDoc], *,
                       catalog_sha256: str | None = None, source: str | None = None,
                       path: str | None = None) -> None:
        """Make `docs` the tools of `server` (all of them, in order), in one transaction.

        `source` and `path`: where the catalog was read (see `sources()`)."""
        self.apply([(server, docs, catalog_sha256, source, path)], [])

    def optimize(self) -> None:
        """Merge the full-text index into one segment (after a build: faster searches),
        and merge as FTS5 does by default from then on."""
        try:
            with self._transaction() as db:
                db.execute("INSERT INTO tools_fts (tools_fts) VALUES ('optimize')")
                self._merge_settings(db, _MERGE_DEFAULTS)
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot write search index {self.location}: {exc}"
                                   f"{sqlite_io_hint(exc)}") from None

    def merge_as_usual(self) -> None:
        """FTS5's own merge settings again, after a build that left few segments (they are
        searched as fast as one: an `optimize` would rewrite the whole index for nothing)."""
        try:
            with self._transaction() as db:
                self._merge_settings(db, _MERGE_DEFAULTS)
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot write search index {self.location}: {exc}"
                                   f"{sqlite_io_hint(exc)}") from None

    def defer_merges(self) -> None:
        """For a build of many transactions, ended by `optimize`: segments are merged
        only when a level holds many (a build killed before its optimize leaves them so,
        searchable, until the next build's)."""
        try:
            with self._transaction() as db:
                self._merge_settings(db, _MERGE_DEFERRED)
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot write search index {self.location}: {exc}"
                                   f"{sqlite_io_hint(exc)}") from None

    @staticmethod
    def _merge_settings(db: sqlite3.Connection, settings: Iterable[tuple[str, int]]) -> None:
        for name, value in settings:
            db.execute("INSERT INTO tools_fts (tools_fts, rank) VALUES (?, ?)", (name, value))

    def remove_server(self, server: str) -> None:
        self.apply([], [server])

    def apply(self, replace: Iterable[tuple[str, Sequence[ToolDoc], str | None, str | None,
                                            str | None]],
              remove: Iterable[str] = (), files: dict[str, str] | None = None,
              compressor: str | None = None) -> None:
        """Many changes in one transaction: servers replaced (server, docs, catalog sha256,
        source, path), servers removed, and (if given) the whole `files` table and what
        compressed the definitions (see `compressor`). A server
        replaced takes the file it was read from, and the one it is read from now, out of
        `files` (neither file, as that table has it, is wholly indexed any more)."""
        self.apply_rows([(server, _rows(server, docs), sha256, source, path)
                         for server, docs, sha256, source, path in replace], remove, files,
                        compressor)

    def apply_rows(self, replace: Iterable[tuple[str, Sequence[ToolRow], str | None, str | None,
                                                 str | None]],
                   remove: Iterable[str] = (), files: dict[str, str] | None = None,
                   compressor: str | None = None) -> None:
        """`apply`, each server's tools as ToolRows (its writer's form: no ToolDoc made)."""
        replace = list({r[0]: r for r in replace}.values())  # a server given twice: the last
        try:
            with self._transaction(on_rollback=self._forget_ids) as db:
                self._unfile_rewritten(db, replace)
                reuse: dict[bytes, bytes] = {}  # vectors of texts deleted here, by digest
                indexed = self._indexed(db, [*remove, *(r[0] for r in replace)])
                for server in indexed:
                    self._keep_vectors(db, server, reuse)
                    self._delete(db, server)
                added = self._insert(db, [(server, rows) for server, rows, *_ in replace])
                db.executemany("INSERT INTO servers VALUES (?, ?, ?, ?)",
                               [(server, sha256, source, path)
                                for server, _, sha256, source, path in replace])
                if self._vectors is not None:
                    self._vectors.fill(db, reuse, added)  # the texts new to the index
                if files is not None:
                    db.execute("DELETE FROM files")
                    db.executemany("INSERT INTO files VALUES (?, ?)", sorted(files.items()))
                if compressor is not None:
                    db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                               (COMPRESSOR_KEY, compressor))
            self._forget_vectors()
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot write search index {self.location}: {exc}"
                                   f"{sqlite_io_hint(exc)}") from None

    @staticmethod
    def _unfile_rewritten(db: sqlite3.Connection, replace: Sequence[tuple[Any, ...]]) -> None:
        """The files the servers `replace` rewrites were read from, and are read from now,
        out of `files`: until the run's end writes that table, a crash must not leave a
        file there whose catalogs are not all indexed as it was: a catalog's id gone to
        another source (a rerun would reuse that file whole without it), or a catalog of
        the file as it changed (a rerun of the file put back as it was would reuse it
        whole, with the changed catalog's tools)."""
        servers = [r[0] for r in replace]
        rewritten = {r[4] for r in replace if r[4] is not None}
        for at in range(0, len(servers), 500):
            chunk = servers[at:at + 500]
            rewritten.update(path for path, in db.execute(
                f"SELECT path FROM servers WHERE server IN ({','.join('?' * len(chunk))})",
                chunk) if path is not None)
        db.executemany("DELETE FROM files WHERE path = ?", [(path,) for path in sorted(rewritten)])

    @staticmethod
    def _indexed(db: sqlite3.Connection, servers: Sequence[str]) -> list[str]:
        """Those of `servers` the index holds, in the order given (one query per 500: a
        fresh build's batches need no delete at all)."""
        held: set[str] = set()
        for at in range(0, len(servers), 500):
            chunk = servers[at:at + 500]
            held.update(row[0] for row in db.execute(
                f"SELECT server FROM servers WHERE server IN ({','.join('?' * len(chunk))})",
                chunk))
        return list(dict.fromkeys(s for s in servers if s in held))

    def _delete(self, db: sqlite3.Connection, server: str) -> None:
        rows = db.execute("SELECT text_id, definition_id FROM tools WHERE server=?",
                          (server,)).fetchall()
        if rows:
            unused = self._texts.drop(db, (row[0] for row in rows))
            db.executemany("DELETE FROM tools_fts WHERE rowid = ?", unused)
            db.executemany("DELETE FROM tool_vectors WHERE id = ?", unused)
            self._definitions.drop(db, (row[1] for row in rows))
            db.execute("DELETE FROM tools WHERE server=?", (server,))
        db.execute("DELETE FROM servers WHERE server=?", (server,))

    def _insert(self, db: sqlite3.Connection, servers: Sequence[tuple[str, Sequence[ToolRow]]]
                ) -> list[tuple[int, bytes, tuple[str, str, str]]]:
        """The tools of these servers (none of them indexed now), their texts and
        definitions added once each (or counted once more), in bulk: one statement of each
        kind per call. Returns the texts new to the index: (id, digest, fields)."""
        tools = [(server, position, row) for server, rows in servers
                 for position, row in enumerate(rows)]
        if not tools:
            return []
        # comprehensions, the fields spelt out in FIELDS order, the digests inlined
        # (the sha256 of the UTF-8): this is the writer's hot loop
        sha256 = hashlib.sha256
        texts = [(_composed(f.get("name", "")), _composed(f.get("description", "")),
                  _composed(f.get("params", ""))) for f in (row[3] for _, _, row in tools)]
        text_digests = [sha256("\0".join(text).encode("utf-8", "surrogatepass")).digest()
                        for text in texts]
        definition_digests = [sha256(row[2].encode("utf-8", "surrogatepass")).digest()
                              for _, _, row in tools]
        text_ids, new_texts = self._texts.add(db, Counter(text_digests))
        text_of = dict(zip(text_digests, texts))
        db.executemany("INSERT INTO texts (id, digest, refs) VALUES (?, ?, ?)", new_texts)
        db.executemany(f"INSERT INTO tools_fts (rowid, {', '.join(FIELDS)}) VALUES (?, ?, ?, ?)",
                       [(id_, *text_of[digest]) for id_, digest, _ in new_texts])
        definition_ids, new_definitions = self._definitions.add(db, Counter(definition_digests))
        body_of = dict(zip(definition_digests, (row[2] for _, _, row in tools)))
        db.executemany("INSERT INTO definitions (id, digest, refs, body) VALUES (?, ?, ?, ?)",
                       [(*row, body_of[row[1]]) for row in new_definitions])
        db.executemany("INSERT INTO tools (server, position, name, handle, text_id, definition_id) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       [(server, position, row[0], row[1], text_ids[text],
                         definition_ids[definition])
                        for (server, position, row), text, definition in zip(
                            tools, text_digests, definition_digests)])
        return [(id_, digest, text_of[digest]) for id_, digest, _ in new_texts]

    def _forget_ids(self) -> None:
        # a change rolled back: the maps hold ids it gave (and whether every text has a
        # vector is what it was before the change, which may have filled in others')
        self._texts.forget()
        self._definitions.forget()
        if self._vectors is not None:
            self._vectors.rolled_back()

    def _keep_vectors(self, db: sqlite3.Connection, server: str,
                      reuse: dict[bytes, bytes]) -> None:
        # a server replaced by itself deletes its texts and adds them back under new ids
        if self._vectors is not None:
            reuse.update(self._vectors.of_server(db, server))

    def _forget_vectors(self) -> None:
        if self._vectors is not None:
            self._vectors.forget()

    # reading ----------------------------------------------------------------------

    def servers(self) -> dict[str, str | None]:
        """Every indexed server and the catalog sha256 recorded with it."""
        return dict(self._read("SELECT server, sha256 FROM servers ORDER BY server"))

    def sources(self) -> dict[str, tuple[str, str | None, str | None]]:
        """Where each server's catalog was read: source -> (server, sha256, path)."""
        return {row[0]: row[1:] for row in self._read(
            "SELECT source, server, sha256, path FROM servers WHERE source IS NOT NULL "
            "ORDER BY server")}

    def compressor(self) -> str | None:
        """What compressed the definitions, as the last build that finished said (None: not
        said): a build compressing otherwise writes every catalog again."""
        rows = self._read("SELECT value FROM meta WHERE key = ?", (COMPRESSOR_KEY,))
        return rows[0][0] if rows else None

    def files(self) -> dict[str, str]:
        """Source files every tool of which is indexed: path -> the sha256 it had."""
        return dict(self._read("SELECT path, sha256 FROM files ORDER BY path"))

    def handles(self, servers: Collection[str]) -> dict[str, list[str]]:
        """The CCR handles of these servers' tools (those that have one), by server, each
        server's in its tools' order."""
        found: dict[str, list[str]] = {}
        pending = sorted(servers)
        for at in range(0, len(pending), 500):
            chunk = pending[at:at + 500]
            for server, handle in self._read(
                    f"SELECT server, handle FROM tools WHERE handle IS NOT NULL AND server IN "
                    f"({','.join('?' * len(chunk))}) ORDER BY server, position", chunk):
                found.setdefault(server, []).append(handle)
        return found

    def docs(self, server: str | None = None) -> Iterator[ToolDoc]:
        """Every indexed tool (of one server), by server then position."""
        sql = ("SELECT t.server, t.name, t.handle, d.body, f.name, f.description, f.params "
               f"FROM {_TOOLS} JOIN tools_fts f ON f.rowid = t.text_id "
               + ("WHERE t.server = ? " if server is not None else "")
               + "ORDER BY t.server, t.position")
        for row in self._read(sql, () if server is None else (server,)):
            yield ToolDoc(row[0], row[1], row[2], row[3], dict(zip(FIELDS, row[4:])))

    def __len__(self) -> int:
        return self._read("SELECT count(*) FROM tools")[0][0]

    def search(self, query: str, k: int = 5, *,
               servers: Collection[str] | None = None) -> list[Hit]:
        """The k best tools for free text, best first (k <= 0: none)."""
        query = unicodedata.normalize("NFC", query)  # (embedded too: as match_expression reads it)
        expression = match_expression(query)
        if k <= 0 or (servers is not None and not servers):
            return []
        k = min(k, _MAX_K)  # (SQLite's LIMIT is a 64-bit integer: k + a margin must fit)
        with self._snapshot():
            if self._vectors is not None:  # (no word for BM25: the dense ranking's hits)
                return self._hybrid_search(query, expression, k, servers)
            if expression is None:
                return []
            cut = None
            if servers is None:
                best, cut = self._best_texts(expression, k + _TIE_MARGIN)
                if cut is None:
                    return self._tools_of(best, k)
            return self._hits(expression, k, servers, cut)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """The reads inside see one committed state of the index: a text's id, read from
        the full-text table, names the same text when its tools are read, whatever a
        writer commits meanwhile (it may delete that text, and give its id to another)."""
        if self._db.in_transaction:  # (a write of this connection's own: already one)
            yield
            return
        try:
            self._db.execute("BEGIN")
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot read search index {self.location}: {exc}") from None
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):  # (a read that failed may have ended it)
                self._db.execute("COMMIT")  # nothing written: it ends the snapshot

    def _best_texts(self, expression: str, limit: int) -> tuple[dict[int, float], float | None]:
        """The best `limit` texts' scores by id, and None; or, if the last of them ties with
        the ones before the margin, the score they tie at (then which of the tied texts make
        the cut would depend on their ids, which depend on the order the index was built
        in: the caller ranks every match that scores as much)."""
        rows = self._read(f"SELECT rowid, -bm25(tools_fts, {_WEIGHTS}) AS score FROM tools_fts "
                          f"WHERE tools_fts MATCH ? ORDER BY score DESC LIMIT ?",
                          (expression, limit))
        if len(rows) == limit and rows[-1][1] == rows[-_TIE_MARGIN - 1][1]:
            return {}, rows[-1][1]
        return dict(rows), None

    def _tools_of(self, scores: dict[int, float], k: int,
                  servers: Collection[str] | None = None) -> list[Hit]:
        """The k best tools of these texts (each text has one tool at least; of these
        servers only, a text shared with others)."""
        in_servers = ("" if servers is None
                      else f" AND t.server IN ({', '.join('?' * len(servers))})")
        rows = []
        for chunk in _chunks(list(scores)):  # (a k of every hit: past SQLite's variables)
            rows += self._read(f"SELECT {_TOOL_COLUMNS} FROM {_TOOLS} "
                               f"WHERE t.text_id IN ({', '.join('?' * len(chunk))}){in_servers}",
                               [*chunk, *(sorted(servers) if servers is not None else ())])
        rows.sort(key=lambda r: (-scores[r[0]], r[1], r[2], r[3]))
        return [Hit(r[1], r[2], scores[r[0]], r[4], r[5]) for r in rows[:k]]

    def _hits(self, expression: str, k: int, servers: Collection[str] | None,
              at_least: float | None = None) -> list[Hit]:
        """The k best tools of every match (of these servers; scoring `at_least`: the scores
        are the same, bit for bit, as those of another query in the same snapshot).

        (The tools of the matches below a tie at the k + _TIE_MARGIN-th text were joined
        and sorted too, for nothing: 18-75 ms a search of the bench registry's 51k tools,
        where most searches tie, its servers sharing tools.)"""
        params: list[Any] = [expression]
        where = []
        if servers is not None:
            where.append(f"t.server IN ({', '.join('?' * len(servers))})")
            params.extend(sorted(servers))
        if at_least is not None:
            where.append("m.score >= ?")
            params.append(at_least)
        sql = (f"WITH m AS (SELECT rowid AS text_id, -bm25(tools_fts, {_WEIGHTS}) AS score "
               f"FROM tools_fts WHERE tools_fts MATCH ?) "
               f"SELECT t.server, t.name, m.score, t.handle, d.body "
               f"FROM m JOIN tools t ON t.text_id = m.text_id "
               f"JOIN definitions d ON d.id = t.definition_id "
               + (f"WHERE {' AND '.join(where)} " if where else "")
               + "ORDER BY m.score DESC, t.server, t.name, t.position LIMIT ?")
        params.append(k)
        return [Hit(*row) for row in self._read(sql, params)]

    def _hybrid_search(self, query: str, expression: str | None, k: int,
                       servers: Collection[str] | None) -> list[Hit]:
        """BM25 and dense rankings of the texts, fused (toolvectors), then their tools (a
        query with no word for BM25, `🚀`, has the dense ranking alone)."""
        assert self._vectors is not None
        in_servers, params = "", [expression]
        if servers is not None:
            in_servers = f"t.server IN ({', '.join('?' * len(servers))})"
            params.extend(sorted(servers))
        sql = (f"SELECT rowid, -bm25(tools_fts, {_WEIGHTS}) AS score FROM tools_fts "
               f"WHERE tools_fts MATCH ?"
               + (f" AND rowid IN (SELECT t.text_id FROM tools t WHERE {in_servers})"
                  if servers is not None else "") + " ORDER BY score DESC")
        limit = FUSION_DEPTH + _TIE_MARGIN
        bm25 = self._read(f"{sql} LIMIT ?", [*params, limit]) if expression is not None else []
        if len(bm25) == limit and bm25[-1][1] == bm25[FUSION_DEPTH - 1][1]:
            # ties past the margin: every match that scores as much, as _best_texts
            bm25 = self._read(f"SELECT rowid, score FROM ({sql}) WHERE score >= ?",
                              [*params, bm25[-1][1]])
        allowed = None if servers is None else {row[0] for row in self._read(
            f"SELECT DISTINCT t.text_id FROM tools t WHERE {in_servers}", sorted(servers))}
        try:
            dense = self._vectors.rank(self._db, query, FUSION_DEPTH, allowed)
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot read search index {self.location}: {exc}") from None
        return self._tools_of(fuse_weighted(top(bm25, FUSION_DEPTH), dense), k, servers)

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        try:
            return self._db.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as exc:
            raise SearchIndexError(f"cannot read search index {self.location}: {exc}") from None

    # life -------------------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ToolIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ToolIndex({self.location!r})"
