"""`search`, `eval search` and `compress --index` given what is not an index, or odd queries,
through the real CLI (a subprocess): a clear error naming the path, exit 1, and the file
left byte for byte as it was; queries the tokenizer or SQLite cannot take as they are."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from caveman_batch.embedding import EMBED_EXTRA_HINT, extra_installed
from caveman_batch.toolsearch import ToolIndex, match_expression, tool_docs

TOOLS = [{"name": "sendEmail", "description": "Deliver a message to a recipient."},
         {"name": "read_file", "description": "Read a file from disk."}]


def _command() -> list[str]:
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_command(), *args], env=dict(os.environ), capture_output=True,
                          text=True, errors="surrogateescape", timeout=120, check=False)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another program's SQLite database, with a `meta` table naming a schema "1" (what an
    index of an older version holds) and a `tools` table."""
    path = tmp_path / "mine.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('schema', '1')")
        db.execute("CREATE TABLE tools (name TEXT)")
        db.execute("INSERT INTO tools VALUES ('precious')")
    db.close()
    return path


@pytest.fixture
def queries(tmp_path: Path) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"query": "read a file", "tools": ["read_file"]}) + "\n")
    return path


@pytest.mark.parametrize("command", ["search", "eval", "compress"])
def test_a_database_of_another_program_is_refused_and_left_as_it_was(
        tmp_path: Path, foreign: Path, queries: Path, command: str) -> None:
    before, listing = _digest(foreign), _files(tmp_path)
    if command == "search":
        done = _cli("search", "file", "--index", str(foreign), "--no-embed")
    elif command == "eval":
        done = _cli("eval", "search", str(queries), "--index", str(foreign), "--no-embed")
    else:
        src = tmp_path / "src"
        src.mkdir()
        (src / "a.json").write_text(json.dumps({"tools": TOOLS}))
        done = _cli("compress", str(src), "-o", str(tmp_path / "out"), "--index", str(foreign),
                    "--store", f"lmdb://{tmp_path / 'store'}", "--no-embed")
        listing = _files(tmp_path)  # (compress makes OUT and the store: not the index's)
    assert done.returncode == 1, done.stderr
    assert f"{foreign} is not a search index" in done.stderr and "Traceback" not in done.stderr
    assert _digest(foreign) == before and _files(tmp_path) == listing  # no -wal, no -shm
    with sqlite3.connect(foreign) as db:
        assert db.execute("SELECT name FROM tools").fetchall() == [("precious",)]
    db.close()


@pytest.mark.parametrize("content", [b"", b"not a database at all, only words " * 200])
def test_an_empty_or_garbage_file_is_no_index_to_read_and_is_not_written(
        tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "idx.db"
    path.write_bytes(content)
    done = _cli("search", "file", "--index", str(path), "--no-embed")
    assert done.returncode == 1, done.stderr
    assert str(path) in done.stderr and "Traceback" not in done.stderr
    assert path.read_bytes() == content and _files(tmp_path) == ["idx.db"]


def test_a_garbage_file_is_refused_by_compress_too(tmp_path: Path) -> None:
    path = tmp_path / "idx.db"
    path.write_bytes(b"not a database at all, only words " * 200)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text(json.dumps({"tools": TOOLS}))
    done = _cli("compress", str(src), "-o", str(tmp_path / "out"), "--index", str(path),
                "--store", f"lmdb://{tmp_path / 'store'}", "--no-embed")
    assert done.returncode == 1 and f"{path} is not a search index" in done.stderr
    assert path.read_bytes() == b"not a database at all, only words " * 200


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    path = tmp_path / "idx.db"
    with ToolIndex.open(path) as index:
        index.replace_server("mail", tool_docs("mail", TOOLS, TOOLS, [None] * len(TOOLS)))
    return path


def test_a_camel_case_name_in_a_query_finds_its_tool(index_path: Path) -> None:
    assert match_expression("sendEmail") == '"sendemail" OR "send" OR "email"'
    done = _cli("search", "sendEmail", "--index", str(index_path), "--no-embed", "--json")
    assert done.returncode == 0, done.stderr
    assert [hit["name"] for hit in json.loads(done.stdout)][:1] == ["sendEmail"]


def test_a_k_beyond_any_integer_sqlite_takes_is_every_hit(index_path: Path) -> None:
    done = _cli("search", "file", "--index", str(index_path), "--no-embed", "--json",
                "-k", str(2 ** 63 - 1))
    assert done.returncode == 0, done.stderr
    assert [hit["name"] for hit in json.loads(done.stdout)] == ["read_file"]


@pytest.mark.skipif(not extra_installed(), reason=f"embed extra not installed: {EMBED_EXTRA_HINT}")
def test_a_query_with_a_byte_that_is_not_utf8_is_searched_hybrid(index_path: Path) -> None:
    """A Latin-1 byte in argv reaches Python as a lone surrogate (surrogateescape), which
    the tokenizer refused: a traceback. Its other words are searched."""
    query = b"caf\xe9 file".decode("utf-8", "surrogateescape")
    done = _cli("search", query, "--index", str(index_path), "--embed", "--json")
    assert done.returncode == 0, done.stderr
    assert "read_file" in [hit["name"] for hit in json.loads(done.stdout)]


def _read_only_view(folder: Path, view: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    """`command` run where `view` is a read-only bind mount of `folder` (a mount namespace of
    its own: unshare, as root or in a user namespace); skips where neither is allowed."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here")
    view.mkdir()
    script = 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 2 && exec "$@"'
    for flags in (["-m"], ["-r", "-m"]):
        probe = subprocess.run([unshare, *flags, "sh", "-c", script, "sh", str(folder), str(view),
                                "true"], capture_output=True, timeout=30, check=False)
        if probe.returncode == 0:
            return subprocess.run([unshare, *flags, "sh", "-c", script, "sh", str(folder),
                                   str(view), *command], env=dict(os.environ),
                                  capture_output=True, text=True, timeout=120, check=False)
    pytest.skip(f"no read-only bind mount here: {probe.stderr.decode(errors='replace').strip()}")


def test_an_index_on_a_read_only_mount_is_searched(tmp_path: Path) -> None:
    """A WAL index's readers need its -shm beside it: on a read-only mount (an image's layer)
    none can be made, and the search failed with 'unable to open database file'."""
    folder = tmp_path / "ro"
    folder.mkdir()
    with ToolIndex.open(folder / "idx.db") as index:
        index.replace_server("mail", tool_docs("mail", TOOLS, TOOLS, [None] * len(TOOLS)))
    assert _files(folder) == ["idx.db"]  # (the last connection closed: no -wal, no -shm)
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    command = [beside] if beside else [sys.executable, "-m", "caveman_batch"]
    view = tmp_path / "view"
    done = _read_only_view(folder, view, [*command, "search", "read a file", "--index",
                                          str(view / "idx.db"), "--no-embed", "--json"])
    assert done.returncode == 0, done.stderr
    assert [hit["name"] for hit in json.loads(done.stdout)][:1] == ["read_file"]
    assert _files(folder) == ["idx.db"]


# -- a helper's findings: a schema that is a digit to str.isdigit() but not to int(), a reader
# of standard output that goes away, a damaged vector, a tool name that would forge a line
# of output, a lone CR inside a QUERIES line, a read-only index whose log holds commits


def _named_index(path: Path, names: list[str]) -> Path:
    tools = [{"name": name, "description": f"read a file {n}"} for n, name in enumerate(names)]
    with ToolIndex.open(path) as index:
        index.replace_server("srv", tool_docs("srv", tools, tools, [None] * len(tools)),
                             catalog_sha256="0" * 64)
    return path


@pytest.mark.parametrize("schema", ["²", "٣", "abc", ""])
def test_an_unknown_schema_is_one_line(tmp_path: Path, schema: str) -> None:
    path = _named_index(tmp_path / "i.db", ["read_file"])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (schema,))
    db.close()
    source = tmp_path / "src"
    source.mkdir()
    (source / "c.json").write_text('{"tools": [{"name": "a", "description": "b"}]}')
    for args in (["search", "file"], ["compress", str(source), "-o", str(tmp_path / "out"),
                                      "--store", f"lmdb://{tmp_path / 'store'}"]):
        done = _cli(*args, "--index", str(path), "--no-embed")
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr and str(path) in done.stderr


def test_a_reader_that_goes_away_is_exit_0(tmp_path: Path) -> None:
    path = _named_index(tmp_path / "i.db", [f"read_file_{n}" for n in range(3000)])
    for extra in ([], ["--json"]):
        with subprocess.Popen([*_command(), "search", "read file", "--index", str(path),
                               "--no-embed", "-k", "3000", *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.read(1)
            proc.stdout.close()
            err = proc.stderr.read()
        assert proc.returncode == 0, err


def test_a_name_cannot_forge_a_line(tmp_path: Path) -> None:
    path = _named_index(tmp_path / "i.db", ["ok\n   9.999  trusted/admin  ccr_0"])
    done = _cli("search", "read file", "--index", str(path), "--no-embed")
    assert done.returncode == 0 and done.stdout.count("\n") == 1, done.stdout


@pytest.mark.parametrize("mark", ["\u202e", "\u2067", "\u200f", "\u061c"])
def test_a_name_cannot_reorder_its_line(tmp_path: Path, mark: str) -> None:
    """A bidirectional override or isolate in a name shows the rest of the line reversed
    ("Trojan Source"): it is shown escaped, as a line break is."""
    path = _named_index(tmp_path / "i.db", [f"read{mark}nimda_file"])
    done = _cli("search", "read file", "--index", str(path), "--no-embed")
    assert done.returncode == 0 and mark not in done.stdout, done.stdout
    assert mark.encode("unicode_escape").decode("ascii") in done.stdout


def test_a_lone_cr_in_a_queries_line_is_white_space(tmp_path: Path) -> None:
    path = _named_index(tmp_path / "i.db", ["read_file"])
    queries = tmp_path / "q.jsonl"
    queries.write_bytes(b'{"query": "read file",\r"tools": ["read_file"]}\r\n\n{bad\n')
    done = _cli("eval", "search", str(queries), "--index", str(path), "--no-embed")
    assert done.returncode == 1 and "line 3:" in done.stderr, done.stderr


def test_a_damaged_vector_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("wordllama")
    path = _named_index(tmp_path / "i.db", ["read_file"])
    assert _cli("search", "file", "--index", str(path)).returncode == 0  # (embeds)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE tool_vectors SET vector = x'00'")
    db.close()
    done = _cli("search", "file", "--index", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


def test_an_index_on_a_read_only_mount_whose_log_holds_commits_is_refused(tmp_path: Path) -> None:
    """Without its -shm (a build killed before its checkpoint, an image made without it) a
    read-only mount's index was opened immutable, which never reads the -wal: searched as it
    stood at its last checkpoint (stale hits, exit 0), or as empty."""
    live, folder = tmp_path / "live", tmp_path / "ro"
    live.mkdir()
    folder.mkdir()
    with ToolIndex.open(live / "idx.db") as index:
        index.replace_server("mail", tool_docs("mail", TOOLS, TOOLS, [None] * len(TOOLS)))
    db = sqlite3.connect(live / "idx.db")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("DELETE FROM tools_fts")  # (committed to the log alone)
    db.commit()
    for name in ("idx.db", "idx.db-wal"):
        shutil.copyfile(live / name, folder / name)
    db.close()
    assert (folder / "idx.db-wal").stat().st_size > 0
    view = tmp_path / "view"
    done = _read_only_view(folder, view, [*_command(), "search", "read a file", "--index",
                                          str(view / "idx.db"), "--no-embed"])
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "idx.db-wal may hold transactions" in done.stderr and "Traceback" not in done.stderr


def test_a_listing_that_a_file_size_limit_cuts_short_fails(tmp_path: Path) -> None:
    """Unbuffered (PYTHONUNBUFFERED=1), the text layer took a write that went in part and
    said nothing: the listing stopped mid-line, exit 0."""
    import resource

    path = _named_index(tmp_path / "i.db", [f"read_file_{n}" for n in range(3000)])
    args = [*_command(), "search", "read file", "--index", str(path), "--no-embed", "-k", "3000"]
    whole = len(subprocess.run(args, capture_output=True, check=True, timeout=120).stdout)
    limit = whole - 10  # (inside the last line: no write after it to fail)
    assert limit > 65_536  # (above what SQLite's -shm takes)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with open(tmp_path / "out.txt", "wb") as out:
        done = subprocess.run(args, stdout=out, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=limited,
                              timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(b"cannot write to standard output: File too large")
