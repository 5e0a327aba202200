"""The index's writer process (indexwriter): requests answered in order, errors raised in
the parent, a writer that dies is an error, a parent that dies ends its writer."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from caveman_batch import indexing
from caveman_batch.errors import SearchIndexError
from caveman_batch.indexwriter import IndexWriter, LocalWriter, Tool
from caveman_batch.pipeline import Config, run
from caveman_batch.toolsearch import ToolIndex

FIELDS = {"name": "list issues", "description": "Lists the issues of a repository.",
          "params": "repo"}


def _catalog(server: str, *names: str) -> tuple[str, list[Tool], str, None, None]:
    """A catalog as indexwriter is handed it (tools as a pipeline worker makes them)."""
    tools = [(name, f"{i:064x}", b"", 0, f'{{"name":"{name}"}}', {**FIELDS, "name": name})
             for i, name in enumerate(names)]
    return (server, tools, "0" * 64, None, None)


def _new_index(path: Path) -> Path:
    """An empty index file (as the run's parent makes it before its writer starts)."""
    ToolIndex.open(path).close()
    return path


def test_the_writer_process_writes_what_the_parent_reads(tmp_path: Path) -> None:
    path = _new_index(tmp_path / "idx.db")
    with IndexWriter(str(path), embed=False) as writer:
        writer.defer_merges()
        writer.apply([_catalog("github", "list_issues", "create_issue")])
        writer.apply([_catalog("jira", "list_issues")], ["github"])
        writer.optimize()
    with ToolIndex.open(path, create=False) as index:
        assert [(d.server, d.name) for d in index.docs()] == [("jira", "list_issues")]
        assert [h.server for h in index.search("issues")] == ["jira"]


@pytest.mark.parametrize("embed", [False, True])
def test_the_writer_embeds_the_tools_only_when_asked(tmp_path: Path, embed: bool) -> None:
    """--embed: the writer embeds each tool it writes; --no-embed: it embeds none (not
    even with the embed extra installed, which would cost the run the model's time)."""
    import sqlite3

    from caveman_batch.embedding import EMBED_EXTRA_HINT, extra_installed

    if embed and not extra_installed():
        pytest.skip(f"embed extra not installed: {EMBED_EXTRA_HINT}")
    path = _new_index(tmp_path / "idx.db")
    with IndexWriter(str(path), embed=embed) as writer:
        writer.apply([_catalog("github", "list_issues", "create_issue")])
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM tool_vectors").fetchone() == (2 if embed else 0,)


def test_it_writes_as_an_index_of_this_process_does(tmp_path: Path) -> None:
    there, here = _new_index(tmp_path / "there.db"), ToolIndex.open(":memory:")
    catalogs = [_catalog("a", "list_issues", "close_issue"), _catalog("b", "list_pulls")]
    then = ([], ["a"], {"reg.jsonl": "1" * 64})  # a catalog removed, a file wholly indexed
    with IndexWriter(str(there), embed=False) as writer:
        writer.apply(catalogs)
        writer.apply(*then)
    local = LocalWriter(here)
    local.apply(catalogs)
    local.apply(*then)
    with ToolIndex.open(there, create=False) as index:
        assert list(index.docs()) == list(here.docs())
        assert index.search("list issues", 5) == here.search("list issues", 5)
        assert index.servers() == here.servers() and list(index.servers()) == ["b"]
        assert index.files() == here.files() == {"reg.jsonl": "1" * 64}


def test_an_error_in_the_writer_is_raised_in_the_parent(tmp_path: Path) -> None:
    path = _new_index(tmp_path / "idx.db")
    with IndexWriter(str(path), embed=False) as writer:
        writer.apply([("a", [("x", "0" * 64, b"", 0, "{}", FIELDS)], None, None, None)])
        with pytest.raises(TypeError):  # tools given as something else than a list
            writer.apply([("b", 5, None, None, None)])  # type: ignore[list-item]
    with ToolIndex.open(path, create=False) as index:
        assert [d.name for d in index.docs()] == ["x"]


def test_an_index_it_cannot_open_is_an_error_of_its_first_call(tmp_path: Path) -> None:
    path = tmp_path / "not-an-index.db"
    path.write_bytes(b"this is not a database file, not at all" * 100)
    with IndexWriter(str(path), embed=False) as writer:
        with pytest.raises(SearchIndexError, match="not-an-index.db is not a search index"):
            writer.defer_merges()


def test_a_writer_that_dies_is_an_error_naming_the_index(tmp_path: Path) -> None:
    path = _new_index(tmp_path / "idx.db")
    with IndexWriter(str(path), embed=False) as writer:
        writer.defer_merges()
        os.kill(writer._child.pid, signal.SIGKILL)
        writer._child.wait()
        with pytest.raises(SearchIndexError, match=r"writer of search index .*idx\.db died"):
            writer.apply([_catalog("a", "list_issues")])
        with pytest.raises(SearchIndexError, match=r"died \(exit status -9\)"):
            writer.optimize()


def test_a_writer_closed_answers_every_request_sent_before(tmp_path: Path) -> None:
    """Requests are pipelined: many submitted without waiting are all written, in order,
    by the time close returns; one submitted after close fails."""
    path = _new_index(tmp_path / "idx.db")
    writer = IndexWriter(str(path), embed=False)
    futures = [writer.submit("apply", [_catalog(f"s{i:03}", "list_issues")]) for i in range(50)]
    futures.append(writer.submit("apply", [], [f"s{i:03}" for i in range(0, 50, 2)]))
    writer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    with ToolIndex.open(path, create=False) as index:
        assert sorted(d.server for d in index.docs()) == [f"s{i:03}" for i in range(1, 50, 2)]
    with pytest.raises(SearchIndexError, match="has stopped"):
        writer.submit("optimize").result()


def test_a_request_that_cannot_be_sent_leaves_every_later_one_unsent(tmp_path: Path) -> None:
    """An apply that does not pickle is never sent, and neither is any request after it:
    the run's last apply (the files table: which source files are wholly indexed) must not
    land after catalogs that did not."""
    path = _new_index(tmp_path / "idx.db")
    with IndexWriter(str(path), embed=False) as writer:
        ok = writer.submit("apply", [_catalog("a", "list_issues")])
        unsent = writer.submit("apply", [("b", [lambda: None], None, None, None)])
        last = writer.submit("apply", [], [], files={"reg.jsonl": "0" * 64})
        assert ok.result() is None
        with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
            unsent.result()
        with pytest.raises(SearchIndexError, match="not written after an earlier failure"):
            last.result()
    with ToolIndex.open(path, create=False) as index:
        assert [d.server for d in index.docs()] == ["a"]
        assert index.files() == {}


def test_a_failed_request_leaves_the_pipelined_ones_after_it_unwritten(tmp_path: Path) -> None:
    """Requests sent before the writer answered an earlier one's failure are refused by
    it (never written), each future holding an error."""
    path = _new_index(tmp_path / "idx.db")
    with IndexWriter(str(path), embed=False) as writer:
        ok = writer.submit("apply", [_catalog("a", "list_issues")])
        bad = writer.submit("apply", [("b", 5, None, None, None)])
        after = [writer.submit("apply", [_catalog(f"c{i}", "list_pulls")]) for i in range(5)]
        assert ok.result() is None
        with pytest.raises(TypeError):
            bad.result()
        for future in after:
            with pytest.raises(SearchIndexError, match="not written after an earlier failure"):
                future.result()
    with ToolIndex.open(path, create=False) as index:
        assert [d.server for d in index.docs()] == ["a"]


def test_a_request_for_a_method_not_the_writers_is_refused_and_so_is_every_later_one(
        tmp_path: Path) -> None:
    """Only apply, defer_merges, merge_as_usual and optimize reach the index: another name
    (here its `close`) is refused, not called, and, as after any failure, nothing sent
    after it is written."""
    path = _new_index(tmp_path / "idx.db")
    with IndexWriter(str(path), embed=False) as writer:
        with pytest.raises(SearchIndexError, match="unknown index request 'close'"):
            writer.submit("close").result()
        with pytest.raises(SearchIndexError, match="not written after an earlier failure"):
            writer.apply([_catalog("a", "list_issues")])
    with ToolIndex.open(path, create=False) as index:
        assert len(index) == 0


PARENT = """
import sys
from caveman_batch.indexwriter import IndexWriter
writer = IndexWriter(sys.argv[1], embed=False)
writer.defer_merges()
print(writer._child.pid, flush=True)
import os
os._exit(0)  # dies without closing anything
"""


def test_a_parent_that_dies_ends_its_writer(tmp_path: Path) -> None:
    path = _new_index(tmp_path / "idx.db")
    done = subprocess.run([sys.executable, "-c", PARENT, str(path)], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    child = int(done.stdout.strip())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def test_a_writer_whose_parent_is_gone_ends_without_a_traceback(tmp_path: Path) -> None:
    """Its answers' pipe closed (the parent killed, as by the OOM killer): the writer's next
    answer meets EPIPE, and it ends quietly (a BrokenPipeError traceback landed on the run's
    stderr)."""
    from caveman_batch.indexwriter import _BOOT, _framed

    path = _new_index(tmp_path / "idx.db")
    child = subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdout.close()  # nobody will read an answer
    child.stdin.write(_framed((str(path), False)) + _framed(("defer_merges", (), {})))
    child.stdin.close()
    assert child.wait(30) != 0
    assert b"Traceback" not in child.stderr.read()


@pytest.mark.parametrize("cut", [3, 8 + 5])  # in the length, in the pickle
def test_a_request_cut_off_is_not_applied_and_the_writer_ends_quietly(
        tmp_path: Path, cut: int) -> None:
    """A parent killed mid-request: the writer reads its end of stdin mid-message, writes
    nothing of it and exits 0 without a traceback."""
    from caveman_batch.indexwriter import _BOOT, _framed

    path = _new_index(tmp_path / "idx.db")
    child = subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    request = _framed(("apply", ([_catalog("github", "list_issues")], [], None), {}))
    out, err = child.communicate(_framed((str(path), False)) + request[:cut], timeout=30)
    assert child.returncode == 0 and b"Traceback" not in err, err
    assert pickle.loads(out[8:]) == ("ok", None)  # the open's answer, no other
    with ToolIndex.open(path, create=False) as index:
        assert len(index) == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_a_build_of_many_transactions_is_optimized_and_searches_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a build ends with an optimize or not, searches give the same hits."""
    src = tmp_path / "reg.jsonl"  # 5 batches of 64 catalogs at most: a transaction each
    src.write_text("".join(json.dumps({"server": f"s{i:03}", "tools": [
        {"name": f"{verb}_{noun}", "description": f"{verb.title()}s {noun}s of server {i}."}
        for verb in ("list", "create", "delete") for noun in ("issue", "invoice")]}) + "\n"
        for i in range(300)))
    indexes = []
    for name, optimize_after in (("few", 10_000), ("many", 0)):
        monkeypatch.setattr(indexing, "_TOOLS_PER_COMMIT", 8)
        monkeypatch.setattr(indexing, "_OPTIMIZE_AFTER", optimize_after)
        run(Config([str(src)], tmp_path / name / "out", f"lmdb://{tmp_path / name / 'ccr'}",
                   workers=1, index=tmp_path / name / "idx.db", embed=False))
        indexes.append(tmp_path / name / "idx.db")
    with ToolIndex.open(indexes[0], create=False) as few, \
            ToolIndex.open(indexes[1], create=False) as many:
        assert len(few) > 16
        assert _segments(indexes[0]) > 1 and _segments(indexes[1]) == 1
        for query in ("list issues", "create a refund for an invoice", "delete", "zzz"):
            assert few.search(query, k=10) == many.search(query, k=10)


def test_a_build_of_as_many_transactions_as_the_limit_is_not_optimized(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README: a build of up to _OPTIMIZE_AFTER transactions leaves its segments as they
    are, a longer one ends with an optimize (here 5 transactions: 5 batches of 60)."""
    src = tmp_path / "reg.jsonl"
    src.write_text("".join(json.dumps({"server": f"s{i:03}", "tools": [
        {"name": f"tool_{i}_{j}", "description": f"Does thing {j} of server {i}."}
        for j in range(2)]}) + "\n" for i in range(300)))
    monkeypatch.setattr(indexing, "_TOOLS_PER_COMMIT", 8)
    segments = {}
    for optimize_after in (5, 4):
        root = tmp_path / str(optimize_after)
        monkeypatch.setattr(indexing, "_OPTIMIZE_AFTER", optimize_after)
        run(Config([str(src)], root / "out", f"lmdb://{root / 'ccr'}", workers=1,
                   index=root / "idx.db", embed=False))
        segments[optimize_after] = _segments(root / "idx.db")
    assert segments[5] > 1 and segments[4] == 1


def _segments(path: Path) -> int:
    """The full-text index's segments: the second varint of FTS5's structure record (row
    10 of %_data: a 4-byte cookie, then the levels, the segments, ...), one byte here."""
    import sqlite3

    with sqlite3.connect(path) as db:
        block = db.execute("SELECT block FROM tools_fts_data WHERE id = 10").fetchone()[0]
    assert block[4] < 128 and block[5] < 128  # one-byte varints
    return int(block[5])


@pytest.mark.parametrize("scheme", ["lmdb", "sqlite"])
def test_the_writer_commits_the_tool_records_before_the_index_names_them(
        tmp_path: Path, scheme: str) -> None:
    """The writer process commits the tools' own records to the run's store (opened from
    its URL), then indexes them: every handle the index gives recovers the tool's bytes."""
    from caveman_batch import ccr
    from caveman_batch.store import open_store

    src = tmp_path / "reg.jsonl"
    src.write_text("".join(json.dumps({"server": f"s{i}", "tools": [
        {"name": f"tool_{i}_{j}", "description": f"Does thing {j} of server {i}."}
        for j in range(3)]}) + "\n" for i in range(200)))
    url = f"{scheme}://{tmp_path / 'ccr'}"
    run(Config([str(src)], tmp_path / "out", url, workers=1, index=tmp_path / "idx.db",
               embed=False))
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index, open_store(url) as store:
        docs = list(index.docs())
        assert len(docs) == 600
        for doc in docs:
            assert doc.handle is not None
            assert json.loads(ccr.recover(store, doc.handle))["name"] == doc.name


def test_only_a_memory_store_is_out_of_other_processes_reach() -> None:
    from caveman_batch.store import shared_store

    assert not shared_store("memory://")
    assert shared_store("lmdb:///tmp/x") and shared_store("sqlite:///tmp/x.db")


def test_after_a_failed_write_the_writer_writes_nothing_more(tmp_path: Path) -> None:
    """A record commit that fails (here: a store that cannot open) fails its request, and
    every request queued after it: no catalog names a record left uncommitted, and no
    files table says a file is wholly indexed."""
    from caveman_batch import ccr
    from caveman_batch.store import open_store

    path = _new_index(tmp_path / "idx.db")
    good = f"sqlite://{tmp_path / 'ccr.db'}"
    tool = ("list_issues", ccr.digest_of(b'{"name":"list_issues"}'), b"", 0, "{}", FIELDS)
    with IndexWriter(str(path), embed=False) as writer:
        with pytest.raises(Exception, match="bogus"):
            writer.apply([("a", [tool], None, None, None)], store_url="bogus://nowhere")
        with pytest.raises(SearchIndexError, match="after an earlier failure"):
            writer.apply([("b", [tool], None, None, None)], store_url=good)
        with pytest.raises(SearchIndexError, match="after an earlier failure"):
            writer.apply([], [], files={"reg.jsonl": "0" * 64})
    with ToolIndex.open(path, create=False) as index:
        assert len(index) == 0 and index.files() == {}
    assert not (tmp_path / "ccr.db").exists() or ccr.missing(open_store(good), [tool[1]])


def test_a_rerun_that_writes_nothing_leaves_fts5_merging_as_usual(tmp_path: Path) -> None:
    import sqlite3

    src = tmp_path / "reg.jsonl"
    src.write_text("".join(json.dumps({"server": f"s{i}", "tools": [
        {"name": f"tool_{i}", "description": f"Does thing {i}."}]}) + "\n" for i in range(100)))
    config = Config([str(src)], tmp_path / "out", f"lmdb://{tmp_path / 'ccr'}", workers=1,
                    index=tmp_path / "idx.db", embed=False, incremental=True)
    for _ in range(2):  # a build, then a rerun with nothing to write
        run(config)
        with sqlite3.connect(tmp_path / "idx.db") as db:
            settings = dict(db.execute("SELECT k, v FROM tools_fts_config"))
        assert settings.get("automerge", 4) == 4 and settings.get("crisismerge", 16) == 16


def test_a_rerun_that_only_removes_catalogs_undoes_the_merges_a_killed_build_deferred(
        tmp_path: Path) -> None:
    """A build killed after deferring FTS5's merges leaves them deferred; a rerun that
    writes no catalog but removes one sets them back (as one that writes catalogs does)."""
    import sqlite3

    src = tmp_path / "reg.jsonl"
    lines = [json.dumps({"server": f"s{i}", "tools": [
        {"name": f"tool_{i}", "description": f"Does thing {i}."}]}) + "\n" for i in range(3)]
    src.write_text("".join(lines))
    config = Config([str(src)], tmp_path / "out", f"lmdb://{tmp_path / 'ccr'}", workers=1,
                    index=tmp_path / "idx.db", embed=False, incremental=True)
    run(config)
    with ToolIndex.open(tmp_path / "idx.db") as index:  # as a build killed mid-way left it
        index.defer_merges()
    src.write_text("".join(lines[:2]))  # s2 removed, s0 and s1 reused
    run(config)
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        assert sorted(index.servers()) == ["reg/s0", "reg/s1"]
    with sqlite3.connect(tmp_path / "idx.db") as db:
        settings = dict(db.execute("SELECT k, v FROM tools_fts_config"))
    assert settings.get("automerge", 4) == 4 and settings.get("crisismerge", 16) == 16


def test_a_store_is_shared_with_other_processes_only_if_its_backend_says_so() -> None:
    from backends.lmdb_store import LmdbStore
    from backends.sqlite_store import SqliteStore
    from caveman_batch.memory_store import MemoryStore
    from caveman_batch.store import Store

    assert not Store.shared and not MemoryStore.shared  # a backend opts in
    assert LmdbStore.shared and SqliteStore.shared


def test_an_index_in_memory_is_written_in_this_process(tmp_path: Path) -> None:
    builder = indexing.IndexBuilder.open(Path(":memory:"))
    try:
        assert isinstance(builder._sink, LocalWriter)
    finally:
        builder.close()
    src = Path(__file__).resolve().parents[1] / "bench_data" / "samples" / "registry.jsonl"
    summary = run(Config([str(src)], tmp_path / "out", "memory://", workers=1,
                         index=Path(":memory:"), embed=False))
    assert summary.documents > 0


def test_tools_the_writer_cannot_build_fail_the_request_naming_their_catalog(
        tmp_path: Path) -> None:
    """LocatedTools that do not build (a bug: located_later hands over only tools that do)
    fail the request with an error naming the catalog, and nothing is written."""
    from caveman_batch.toolspans import LocatedTools

    path = _new_index(tmp_path / "idx.db")
    broken = LocatedTools(b'{"tools":[{]}', b'{"tools":[{]}', [(10, 12, 10, 12)], "0" * 64)
    with IndexWriter(str(path), embed=False) as writer:
        with pytest.raises(SearchIndexError, match="catalog reg/broken"):
            writer.apply([("reg/broken", broken, None, None, None)],
                         store_url=f"lmdb://{tmp_path / 'ccr'}")
    with ToolIndex.open(path, create=False) as index:
        assert len(index) == 0


def test_a_kept_catalogs_record_the_writer_is_still_committing_is_waited_for(
        tmp_path: Path) -> None:
    """keep_records does not know the digests of LocatedTools (the writer builds them): one
    of a kept catalog's tools absent from the store is looked up again once the writer is
    done, not committed again from its catalog beside the writer's commit."""
    from caveman_batch import ccr
    from caveman_batch.store import open_store
    from caveman_batch.toolsearch import ToolDoc

    url = f"lmdb://{tmp_path / 'ccr'}"
    tool = b'{"name":"list_issues","description":"Lists issues."}'
    catalog = b'{"tools":[' + tool + b"]}"
    whole, digest = ccr.digest_of(catalog), ccr.digest_of(tool)
    path = _new_index(tmp_path / "idx.db")
    with ToolIndex.open(path) as index:
        index.replace_server("s", [ToolDoc("s", "list_issues", ccr.make_handle(digest), "{}",
                                           FIELDS)], catalog_sha256=whole, source="src")
    with open_store(url) as store:
        ccr.commit(store, [ccr.prepare(catalog)])  # the catalog's original; not its tool's
        builder = indexing.IndexBuilder.open(path, store_url=url)
        try:
            builder.kept.add("s")
            assert builder.builds_tools  # (its writer may be committing LocatedTools' records)

            landed: Future[None] = Future()  # a request of the writer's still in flight

            def writer_commit() -> None:  # the writer's commit of the tool's span record
                time.sleep(0.3)
                ccr.commit(store, [ccr.prepare_span(digest, len(tool), whole, 10)])
                landed.set_result(None)

            committing = threading.Thread(target=writer_commit)
            committing.start()
            builder._pending.append(landed)
            assert builder.keep_records(store) == set()
            header = ccr.decode_header(store.get(digest.encode("ascii")) or b"")
            assert header.codec == ccr.CODEC_SPAN  # the writer's record, not one made again
            assert ccr.recover(store, ccr.make_handle(digest)) == tool
            committing.join()
        finally:
            builder.close()


def test_the_writer_ignores_ctrl_c_from_its_first_import(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group, the writer too, while it imports (about half
    a second at a run's start): it must not die there printing a traceback. A stand-in
    caveman_batch whose indexwriter interrupts itself as it is imported shows it."""
    from caveman_batch import indexwriter

    fake = tmp_path / "caveman_batch"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "indexwriter.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.1)\n"
        "def _main():\n    print('served')\n")
    done = subprocess.run([sys.executable, "-c", indexwriter._BOOT,
                           json.dumps([str(tmp_path), *sys.path])],
                          capture_output=True, timeout=60,  # (SIGINT as a terminal's process
                          # has it: pytest run by a background job has it ignored, inherited)
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (done.returncode, done.stdout, done.stderr) == (0, b"served\n", b"")
