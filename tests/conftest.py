from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
# Read at import, before any test's environment is isolated: .ci/run's throwaway server.
POSTGRES_URL = os.environ.get("CAVEMAN_TEST_POSTGRES_URL", "")
IN_CI = bool(os.environ.get("CI"))


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep the developer's CAVEMAN_* settings and ~/.caveman out of every test.

    CAVEMAN_PURE_PYTHON stays: it is how a run of the suite (CI's second pass) asks for the
    pure-Python path in this process and in every subprocess a test starts."""
    for name in list(os.environ):
        if name.startswith("CAVEMAN_") and name != "CAVEMAN_PURE_PYTHON":
            monkeypatch.delenv(name)
    monkeypatch.setenv("CAVEMAN_HOME", str(tmp_path / "caveman-home"))
    yield


@pytest.fixture
def corpora() -> Path:
    if not CORPORA.is_dir():
        if os.environ.get("CI"):  # CI lays them beside the clone: absent there is a failure
            pytest.fail(f"CI: shared corpora not present at {CORPORA}")
        pytest.skip(f"shared corpora not present at {CORPORA}")
    return CORPORA


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes | None]]:
    """Each os.fsync of the test, in order: the path synced and its bytes as they stood then
    (None for a folder)."""
    synced: list[tuple[str, bytes | None]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")  # the file as it stands when synced
        synced.append((path, None if os.path.isdir(path) else Path(path).read_bytes()))

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def skip_or_fail(reason: str) -> NoReturn:
    """Skip on a developer machine; in CI what a test needs must be there."""
    if IN_CI:
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL database the tests may make schemas and roles in:
    $CAVEMAN_TEST_POSTGRES_URL (CI starts one), else a throwaway cluster of our own when
    the server binaries are installed, else a skip (a failure in CI)."""
    try:
        import psycopg
    except ImportError:
        skip_or_fail("psycopg is not installed (pip install '.[postgres]')")
    if POSTGRES_URL:
        try:
            psycopg.connect(POSTGRES_URL, connect_timeout=10).close()
        except psycopg.Error as exc:
            pytest.fail(f"CAVEMAN_TEST_POSTGRES_URL names a server that does not answer: {exc}")
        yield POSTGRES_URL
        return
    from caveman_batch.testing.postgres_server import Cluster, cannot_start

    reason = cannot_start()
    if reason is not None:
        skip_or_fail(f"{reason}, and no CAVEMAN_TEST_POSTGRES_URL")
    with Cluster.start_new() as cluster:
        yield cluster.url()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A store URL of its own for this test (a fresh schema on the shared server)."""
    from caveman_batch.testing.postgres_server import fresh_schema

    with fresh_schema(postgres_server) as url:
        yield url


@pytest.fixture
def postgres_cluster() -> Iterator[Any]:
    """A server of this test's own, to stop and start (never the shared one)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        skip_or_fail("psycopg is not installed (pip install '.[postgres]')")
    from caveman_batch.testing.postgres_server import Cluster, cannot_start

    reason = cannot_start()
    if reason is not None:
        skip_or_fail(f"{reason}: no server of this test's own")
    with Cluster.start_new() as cluster:
        yield cluster


# a tool-search index of schema 2, as the version before schema 3 made it (one tool)
_SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE servers (server TEXT PRIMARY KEY, sha256 TEXT, source TEXT, path TEXT);
CREATE INDEX servers_by_source ON servers (source);
CREATE TABLE files (path TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
CREATE TABLE texts (id INTEGER PRIMARY KEY, digest BLOB NOT NULL UNIQUE, refs INTEGER NOT NULL);
CREATE TABLE tools (id INTEGER PRIMARY KEY, server TEXT NOT NULL, position INTEGER NOT NULL,
    name TEXT NOT NULL, handle TEXT, definition TEXT NOT NULL, text_id INTEGER NOT NULL);
CREATE INDEX tools_by_server ON tools (server, position);
CREATE INDEX tools_by_text ON tools (text_id);
CREATE VIRTUAL TABLE tools_fts USING fts5 (name, description, params,
    tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE tool_vectors (id INTEGER PRIMARY KEY, vector BLOB NOT NULL);
INSERT INTO meta VALUES ('schema', '2');
INSERT INTO servers VALUES ('old', NULL, NULL, NULL);
INSERT INTO texts VALUES (1, x'00', 1);
INSERT INTO tools VALUES (1, 'old', 0, 'old_tool', NULL, '{"name":"old_tool"}', 1);
INSERT INTO tools_fts (rowid, name, description, params) VALUES (1, 'old tool', 'Old.', '');
"""


@pytest.fixture
def schema_2_index(tmp_path: Path) -> Path:
    """A real search index file of an older schema (2), with one tool of server 'old'."""
    path = tmp_path / "old-index.db"
    db = sqlite3.connect(path)
    try:
        db.executescript(_SCHEMA_2)
    finally:
        db.close()
    return path
