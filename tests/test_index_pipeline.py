"""`compress --index`: per-tool originals, build, refresh, removal, crash, determinism."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from caveman_batch import ccr
from caveman_batch.pipeline import Config, run
from caveman_batch.store import open_store
from caveman_batch.toolsearch import ToolIndex

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"
LONG = " This sentence explains the background at length and states nothing at all." * 3


def _catalog(*names: str, server: str | None = None, extra: str = "") -> bytes:
    tools = [{"name": n, "description": f"Does {n.replace('_', ' ')} things.{LONG}{extra}",
              "inputSchema": {"type": "object", "properties": {
                  f"{n}_id": {"type": "string", "description": f"The {n} to act on."}}}}
             for n in names]
    doc: dict[str, Any] = {"tools": tools}
    if server is not None:
        doc = {"server": server, **doc}
    return json.dumps(doc, indent=2).encode()


def _tree(root: Path) -> Path:
    (root / "team").mkdir(parents=True)
    (root / "github.json").write_bytes(_catalog("create_issue", "merge_pull_request"))
    (root / "weather.json").write_bytes(_catalog("get_forecast"))
    (root / "team" / "chat.json").write_bytes(_catalog("send_message", "list_channels"))
    (root / "notes.txt").write_text("not a catalog")
    (root / "broken.json").write_bytes(b'{"tools": [')
    return root


def _run(tmp: Path, *sources: Path, workers: int = 1, index: str = "idx.db", **kw: Any) -> Any:
    return run(Config([str(s) for s in sources], tmp / kw.pop("out", "out"),
                      kw.pop("store", f"lmdb://{tmp}/ccr"), workers=workers,
                      index=tmp / index, **kw))


def _contents(path: Path) -> tuple[dict[str, Any], list[Any]]:
    with ToolIndex.open(path, create=False) as index:
        return index.servers(), [(d.server, d.name, d.handle, d.definition, d.fields)
                                 for d in index.docs()]


def test_build_names_servers_and_stores_each_tool(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    _run(tmp_path, src)
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        servers = index.servers()
        docs = list(index.docs())
    assert sorted(servers) == ["github", "team/chat", "weather"]
    assert servers["github"] == ccr.digest_of((src / "github.json").read_bytes())
    assert [(d.server, d.name) for d in docs] == [
        ("github", "create_issue"), ("github", "merge_pull_request"),
        ("team/chat", "send_message"), ("team/chat", "list_channels"),
        ("weather", "get_forecast")]
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.missing(store, [d.handle[4:] for d in docs]) == []  # type: ignore[index]
        for doc in docs:
            raw = (src / f"{doc.server}.json").read_bytes()
            original = ccr.recover(store, doc.handle)  # type: ignore[arg-type]
            assert original in raw and original.startswith(b"{") and b"\n" in original
            # a span of its catalog's record (committed with it), no bytes of its own
            value = store.get(doc.handle[4:].encode())  # type: ignore[index]
            assert value is not None and ccr.span_of(ccr.decode_header(value), value) == (
                ccr.digest_of(raw), raw.index(original))
            # the definition is the tool as the compressed output has it
            out = (tmp_path / "out" / f"{doc.server}.json").read_bytes()
            assert doc.definition.encode() in out
            assert json.loads(doc.definition)["name"] == doc.name
    assert docs[0].fields["name"] == "create issue"
    with sqlite3.connect(tmp_path / "idx.db") as db:  # the build's deferred merging undone
        assert dict(db.execute("SELECT k, v FROM tools_fts_config WHERE k LIKE '%merge'")) == {
            "automerge": 4, "crisismerge": 16}


def test_without_index_nothing_more_is_stored(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    run(Config([str(src)], tmp_path / "out", f"lmdb://{tmp_path}/ccr"))
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        plain = sorted(store.keys())
    _run(tmp_path, src, out="out2", store=f"lmdb://{tmp_path}/ccr2")
    with open_store(f"lmdb://{tmp_path}/ccr2") as store:
        indexed = sorted(store.keys())
    assert len(indexed) == len(plain) + 5 and set(plain) <= set(indexed)  # the 5 tools


@pytest.mark.parametrize("incremental", [False, True])
def test_refresh_adds_replaces_and_removes(tmp_path: Path, incremental: bool) -> None:
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=incremental)
    (src / "weather.json").write_bytes(_catalog("get_forecast", "get_alerts"))  # changed
    (src / "maps.json").write_bytes(_catalog("find_route"))  # added
    (src / "team" / "chat.json").unlink()  # removed
    _run(tmp_path, src, incremental=incremental)
    servers, docs = _contents(tmp_path / "idx.db")
    assert sorted(servers) == ["github", "maps", "weather"]
    assert servers["weather"] == ccr.digest_of((src / "weather.json").read_bytes())
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        assert index.search("alerts", k=1)[0].name == "get_alerts"
        assert index.search("send message channels", k=10) == []
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _run(fresh, src, incremental=incremental)
    assert _contents(fresh / "idx.db") == (servers, docs)



def test_a_rerun_of_a_settled_tree_keeps_every_catalog_in_the_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rerun whose files the stat cache tells unchanged (reused as one run of sources, not
    read) keeps their catalogs indexed, ids and all (no test had the index told of such a
    run's files: had it not been, it would have dropped every one)."""
    from caveman_batch import fsio
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)  # the files settled at once (a tree days old)
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=True)
    before = _contents(tmp_path / "idx.db")
    again = _run(tmp_path, src, incremental=True)
    assert again.reused == again.documents > 0
    assert _contents(tmp_path / "idx.db") == before


def test_an_incremental_rerun_fills_a_new_index(tmp_path: Path) -> None:
    """Outputs all reusable, but the index has never seen them: it is built all the same."""
    src = _tree(tmp_path / "src")
    run(Config([str(src)], tmp_path / "out", f"lmdb://{tmp_path}/ccr"))
    summary = _run(tmp_path, src, incremental=True)
    assert sorted(_contents(tmp_path / "idx.db")[0]) == ["github", "team/chat", "weather"]
    again = _run(tmp_path, src, incremental=True)
    assert again.reused == again.documents == summary.documents
    assert sorted(_contents(tmp_path / "idx.db")[0]) == ["github", "team/chat", "weather"]
    (tmp_path / "idx.db").unlink()  # lost: the next rerun rebuilds it
    _run(tmp_path, src, incremental=True)
    assert sorted(_contents(tmp_path / "idx.db")[0]) == ["github", "team/chat", "weather"]


@pytest.mark.parametrize("incremental", [False, True])
def test_an_index_of_an_older_schema_is_rebuilt(tmp_path: Path, schema_2_index: Path,
                                                incremental: bool) -> None:
    """`compress --index` over an index an older version made (and over outputs it could
    all reuse): the old rows go, every catalog is indexed again."""
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=incremental, index="fresh.db")
    shutil.copy(schema_2_index, tmp_path / "idx.db")
    _run(tmp_path, src, incremental=incremental)
    assert _contents(tmp_path / "idx.db") == _contents(tmp_path / "fresh.db")
    assert "old" not in _contents(tmp_path / "idx.db")[0]


@pytest.mark.parametrize("edit", [
    "DELETE FROM tools WHERE id = (SELECT min(id) FROM tools)",
    "DELETE FROM tools_fts WHERE rowid = (SELECT min(rowid) FROM tools_fts)",
    "DELETE FROM texts WHERE id = (SELECT max(id) FROM texts)",
    "UPDATE definitions SET refs = refs + 1 WHERE id = (SELECT min(id) FROM definitions)",
    "DELETE FROM servers WHERE server = 'github'",
], ids=["tool", "fts-row", "text", "refs", "server"])
def test_an_index_edited_by_hand_is_rebuilt_by_the_next_run(tmp_path: Path, edit: str) -> None:
    """Rows deleted with sqlite3: an incremental rerun that changed no catalog left the
    index as it was for ever (a tool missing from every search); its counts disagree,
    and the next `compress --index` rebuilds it whole."""
    def counts() -> tuple[int, ...]:
        with contextlib.closing(sqlite3.connect(tmp_path / "idx.db")) as db:
            return tuple(db.execute(
                "SELECT (SELECT count(*) FROM tools), (SELECT count(*) FROM texts), "
                "(SELECT count(*) FROM tools_fts), (SELECT sum(refs) FROM texts), "
                "(SELECT sum(refs) FROM definitions), (SELECT count(*) FROM servers)").fetchone())

    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=True)
    before, rows = _contents(tmp_path / "idx.db"), counts()
    with contextlib.closing(sqlite3.connect(tmp_path / "idx.db")) as db, db:
        db.execute(edit)
    assert counts() != rows
    _run(tmp_path, src, incremental=True)
    assert counts() == rows
    assert _contents(tmp_path / "idx.db") == before



def test_catalogs_reused_one_by_one_stay_in_the_index(tmp_path: Path) -> None:
    """A JSONL file with a line added is read again, its other lines reused one by one as
    the index holds them: their catalogs stay (no test had such a rerun with --index, so
    the index not told of them, and dropping them all, went unseen)."""
    src = tmp_path / "reg.jsonl"
    src.write_bytes(b"".join(json.dumps(json.loads(_catalog(name, server=name))).encode() + b"\n"
                             for name in ("alpha", "beta")))
    _run(tmp_path, src, incremental=True)
    servers, docs = _contents(tmp_path / "idx.db")
    with src.open("ab") as fh:
        fh.write(json.dumps(json.loads(_catalog("gamma", server="gamma"))).encode() + b"\n")
    again = _run(tmp_path, src, incremental=True)
    assert again.reused == 2
    grown, grown_docs = _contents(tmp_path / "idx.db")
    assert sorted(grown) == ["reg/alpha", "reg/beta", "reg/gamma"]
    assert {k: grown[k] for k in servers} == servers
    assert grown_docs[:len(docs)] == docs


def test_jsonl_catalogs_are_named_by_their_server(tmp_path: Path) -> None:
    lines = [_catalog("a_one", server="alpha"), _catalog("b_one"), _catalog("c_one", server="alpha")]
    src = tmp_path / "reg.jsonl"
    src.write_bytes(b"\n".join(json.dumps(json.loads(x)).encode() for x in lines) + b"\n")
    _run(tmp_path, src)
    servers, docs = _contents(tmp_path / "idx.db")
    assert sorted(servers) == ["reg/2", "reg/alpha", "reg/alpha@3"]
    assert [(s, n) for s, n, *_ in docs] == [("reg/2", "b_one"), ("reg/alpha", "a_one"),
                                             ("reg/alpha@3", "c_one")]


def test_an_id_taken_with_its_line_too_takes_the_next_number(tmp_path: Path) -> None:
    """README, Catalog ids: an id taken gets `@line`, then `@2`, `@3`, ... after that (a
    catalog file: `@2`, `@3`, ...)."""
    src = tmp_path / "src"
    (src / "reg").mkdir(parents=True)
    lines = [_catalog("one", server="alpha@3"), _catalog("two", server="alpha"),
             _catalog("three", server="alpha"), _catalog("four", server="alpha@3@2"),
             _catalog("five", server="alpha"), _catalog("six", server="beta")]
    (src / "reg.jsonl").write_bytes(b"".join(json.dumps(json.loads(x)).encode() + b"\n"
                                             for x in lines))
    for name in ("beta", "beta@2"):  # after the registry's lines, as its folder is
        (src / "reg" / f"{name}.json").write_bytes(_catalog(f"file_{name}"))
    _run(tmp_path, src)
    _, docs = _contents(tmp_path / "idx.db")
    assert sorted((s, n) for s, n, *_ in docs) == [
        ("reg/alpha", "two"), ("reg/alpha@3", "one"), ("reg/alpha@3@2", "three"),
        ("reg/alpha@3@2@4", "four"), ("reg/alpha@5", "five"), ("reg/beta", "six"),
        ("reg/beta@2", "file_beta"), ("reg/beta@2@2", "file_beta@2")]


def test_a_catalog_id_drops_the_extension_whatever_its_case(tmp_path: Path) -> None:
    """README, Catalog ids: a file's path without the extension `.json` or `.jsonl`, which
    the input takes in any case (`.JSON`, `.Jsonl`); a file given by name keeps any other."""
    src = tmp_path / "src"
    (src / "team").mkdir(parents=True)
    (src / "team" / "Chat.JSON").write_bytes(_catalog("send_message"))
    (src / "Reg.Jsonl").write_bytes(json.dumps(json.loads(_catalog("b_one", server="alpha")))
                                    .encode() + b"\n")
    (tmp_path / "tools.txt").write_bytes(_catalog("get_forecast"))  # named: any name
    _run(tmp_path, src, tmp_path / "tools.txt")
    servers, _ = _contents(tmp_path / "idx.db")
    assert sorted(servers) == ["src/Reg/alpha", "src/team/Chat", "tools.txt"]


def test_same_index_for_any_worker_count_and_the_samples(tmp_path: Path) -> None:
    sources = (SAMPLES / "registry", SAMPLES / "registry.jsonl", SAMPLES / "registry-array.json")
    one = tmp_path / "one"
    two = tmp_path / "two"
    one.mkdir()
    two.mkdir()
    _run(one, *sources, workers=1)
    _run(two, *sources, workers=2)
    first, second = _contents(one / "idx.db"), _contents(two / "idx.db")
    assert first == second and len(first[1]) > 50
    with ToolIndex.open(one / "idx.db", create=False) as a, \
            ToolIndex.open(two / "idx.db", create=False) as b:
        for query in ("list issues", "create a refund for an invoice", "delete", "zzz"):
            assert a.search(query, k=10) == b.search(query, k=10)


def _entry_point() -> list[str]:
    return [sys.executable, "-m", "caveman_batch"]


# the CLI writing the index 512 tools a transaction: the killed run's build is many
# transactions, so the index moves well before the run ends
_SMALL_TRANSACTIONS = [sys.executable, "-c", "from caveman_batch import indexing; "
                "indexing._TOOLS_PER_COMMIT = 512; from caveman_batch.cli import main; "
                "raise SystemExit(main())"]


def _change_every_catalog(src: Path, mark: str) -> None:
    for path in sorted(src.rglob("*.json")):
        data = path.read_bytes()
        if b'"description": "' in data:
            path.write_bytes(data.replace(b'"description": "', f'"description": "{mark} '.encode(), 1))


def _killed_once_the_index_moves(args: list[str], index: Path, before: dict[str, Any]) -> bool:
    """Start the run and SIGKILL it as soon as the index holds a changed catalog; False if
    the run ended first (a loaded machine, a fast run: the caller changes the catalogs
    again and retries)."""
    proc = subprocess.Popen([*_SMALL_TRANSACTIONS, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        servers, _ = _contents(index)
        if any(servers.get(s) != before.get(s) for s in servers):
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def test_sigkill_mid_build_leaves_the_index_usable_and_a_rerun_repairs(tmp_path: Path) -> None:
    from bench_data.generate import generate_registry

    src = tmp_path / "reg"
    generate_registry(src, seed=5, target_bytes=12_000_000, oversize_bytes=0)
    store = f"lmdb://{tmp_path}/ccr"
    _run(tmp_path, src, store=store)  # the previous index, complete
    args = ["compress", str(src), "-o", str(tmp_path / "out"), "--store", store, "--index",
            str(tmp_path / "idx.db"), "--workers", "2", "--quiet"]
    for attempt in range(4):  # every catalog changes, then the run is killed mid-build
        before, _ = _contents(tmp_path / "idx.db")
        _change_every_catalog(src, f"Changed {attempt}.")
        if _killed_once_the_index_moves(args, tmp_path / "idx.db", before):
            break
    else:
        pytest.fail("four runs ended before they could be killed")
    servers, docs = _contents(tmp_path / "idx.db")  # opens, consistent: old and new catalogs
    assert 0 < sum(servers.get(s) != before.get(s) for s in servers) < len(before)
    assert {d[0] for d in docs} == set(servers)
    with open_store(store) as opened:  # every handle it names is stored
        assert ccr.missing(opened, sorted({d[2][4:] for d in docs})) == []
    done = subprocess.run([*_entry_point(), *args], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _run(fresh, src, store=f"lmdb://{fresh}/ccr")
    assert _contents(tmp_path / "idx.db") == _contents(fresh / "idx.db")


def test_an_index_write_that_fails_on_the_writer_thread_fails_the_run(tmp_path: Path) -> None:
    """The index is written on a thread of its own: a transaction it cannot make (another
    writer holds the file) still fails the run with SearchIndexError, leaves the index as
    its last transaction did, and a rerun completes it."""
    import sqlite3

    from caveman_batch.errors import SearchIndexError

    src = tmp_path / "reg.jsonl"
    src.write_bytes(b"".join(json.dumps(json.loads(_catalog(f"tool_{i}", server=f"s{i:03}"))).encode()
                             + b"\n" for i in range(200)))  # 4 batches of 64 documents at most
    other: list[sqlite3.Connection] = []

    def lock_after_the_first_batch(_: Any) -> None:
        if not other:  # (the writer's first transaction may be done by now, or not begun)
            db = sqlite3.connect(tmp_path / "idx.db", isolation_level=None, timeout=60)
            db.execute("BEGIN EXCLUSIVE")
            other.append(db)

    config = Config([str(src)], tmp_path / "out", f"lmdb://{tmp_path}/ccr", workers=1,
                    index=tmp_path / "idx.db", embed=False)
    with pytest.raises(SearchIndexError, match="locked"):
        run(config, lock_after_the_first_batch)
    other[0].execute("ROLLBACK")
    other[0].close()
    servers, docs = _contents(tmp_path / "idx.db")
    assert len(servers) < 200 and {d[0] for d in docs} == set(servers)  # whole batches
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.missing(store, sorted({d[2][4:] for d in docs})) == []
    run(config)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _run(fresh, src)
    assert _contents(tmp_path / "idx.db") == _contents(fresh / "idx.db")
    assert len(_contents(fresh / "idx.db")[0]) == 200


def test_a_file_reverted_after_a_run_failed_mid_way_is_not_reused_with_its_changed_catalogs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run over a changed registry writes some of its changed catalogs to the index, then
    fails (here its progress callback raises: Ctrl-C, a full disk); the registry is put back
    as it was. The index's `files` table still named it wholly indexed as it was, so the
    next incremental run reused it whole, and those catalogs kept the changed file's tools
    for good (searches found tools no input held)."""
    lines = [_catalog(f"tool_{i}", server=f"s{i:03}") for i in range(200)]
    src = _jsonl_registry(tmp_path / "reg.jsonl", *lines)
    _run(tmp_path, src, incremental=True)
    before, _ = _contents(tmp_path / "idx.db")
    _jsonl_registry(src, *(_catalog(f"tool_{i}", server=f"s{i:03}", extra=" Changed.")
                           for i in range(200)))
    monkeypatch.setattr("caveman_batch.indexing._TOOLS_PER_COMMIT", 64)

    def fail_once_the_index_moves(_: Any) -> None:
        deadline = time.time() + 60
        while time.time() < deadline:
            if _contents(tmp_path / "idx.db")[0] != before:
                raise KeyboardInterrupt
            time.sleep(0.02)

    config = Config([str(src)], tmp_path / "out", f"lmdb://{tmp_path}/ccr", workers=1,
                    incremental=True, index=tmp_path / "idx.db", embed=False)
    with pytest.raises(KeyboardInterrupt):
        run(config, fail_once_the_index_moves)
    _jsonl_registry(src, *lines)  # put back
    run(config)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _run(fresh, src)
    assert _contents(tmp_path / "idx.db") == _contents(fresh / "idx.db")


def test_a_tool_repeated_across_batches_is_stored_once_and_named_everywhere(tmp_path: Path) -> None:
    shared = _catalog("shared_tool")  # the same tool object in every catalog, 3 batches of them
    lines = [json.dumps({"server": f"s{i:03}", "tools": [*json.loads(shared)["tools"],
                                                          *json.loads(_catalog(f"own_{i}"))["tools"]]})
             for i in range(150)]
    src = tmp_path / "reg.jsonl"
    src.write_text("\n".join(lines) + "\n")
    _run(tmp_path, src)
    _, docs = _contents(tmp_path / "idx.db")
    assert len(docs) == 300 and len({d[2] for d in docs if d[1] == "shared_tool"}) == 1
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.missing(store, sorted({d[2][4:] for d in docs})) == []
        records = [k for k in store.keys() if not k.startswith(ccr.SEEN_PREFIX)]
        assert len(records) == 150 + 150 + 1  # the catalogs, their own tools, the shared
        shared_original = ccr.recover(store, docs[0][2] if docs[0][1] == "shared_tool" else docs[1][2])
    assert json.loads(shared_original) == json.loads(shared)["tools"][0]


def _handles(index: Path) -> list[str]:
    with ToolIndex.open(index, create=False) as opened:
        return [d.handle for d in opened.docs() if d.handle is not None]


def _jsonl_registry(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(json.dumps(json.loads(line)).encode() + b"\n" for line in lines))
    return path


@pytest.mark.parametrize("shape", ["tree", "jsonl"])
def test_a_rerun_keeps_the_tool_records_the_index_names_from_prune(tmp_path: Path,
                                                                    shape: str) -> None:
    """Nightly: every run refreshes the originals it keeps, then `prune` drops what no run
    has seen lately. The per-tool records of catalogs kept as they were are kept too: a
    search never hands out a handle whose original is gone."""
    if shape == "tree":
        src = _tree(tmp_path / "src")
    else:
        src = _jsonl_registry(tmp_path / "reg.jsonl", _catalog("create_issue", server="github"),
                              _catalog("get_forecast", server="weather"))
    _run(tmp_path, src, incremental=True)
    time.sleep(0.05)
    if shape == "jsonl":  # one line changed: the file is read again, the other line reused
        _jsonl_registry(src, _catalog("create_issue", server="github"),
                        _catalog("get_forecast", "get_alerts", server="weather"))
    before_rerun = int(time.time() * 1000)
    again = _run(tmp_path, src, incremental=True)
    assert again.reused >= 1
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        ccr.prune(store, 0, now_ms=before_rerun)  # whatever the rerun did not see goes
        handles = _handles(tmp_path / "idx.db")
        assert handles and all(ccr.recover(store, h) for h in handles)


def test_a_rerun_commits_again_the_tool_records_the_store_lacks(tmp_path: Path) -> None:
    """Tool records gone from the store (pruned by an older version, or another store) while
    their catalogs are kept: the rerun gives them back from the catalogs' originals."""
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=True)
    handles = _handles(tmp_path / "idx.db")
    url = f"lmdb://{tmp_path}/ccr"
    with open_store(url) as store:
        expected = {h: ccr.recover(store, h) for h in handles}
        store.delete([h[4:].encode("ascii") for h in handles])
        assert ccr.missing(store, [h[4:] for h in handles]) == [h[4:] for h in handles]
    again = _run(tmp_path, src, incremental=True)
    assert again.reused == again.documents
    assert _handles(tmp_path / "idx.db") == handles
    with open_store(url) as store:
        assert {h: ccr.recover(store, h) for h in handles} == expected


def test_a_rerun_commits_again_the_tool_records_of_a_line_it_reuses(tmp_path: Path) -> None:
    """The same, a catalog reused alone (a line of a JSONL file read again for another
    line that changed): its tool records the store lacks are given back too."""
    src = _jsonl_registry(tmp_path / "reg.jsonl", _catalog("create_issue", server="github"),
                          _catalog("get_forecast", server="weather"))
    _run(tmp_path, src, incremental=True)
    handles = _handles(tmp_path / "idx.db")
    url = f"lmdb://{tmp_path}/ccr"
    with open_store(url) as store:
        expected = {h: ccr.recover(store, h) for h in handles}
        store.delete([h[4:].encode("ascii") for h in handles])
    _jsonl_registry(src, _catalog("create_issue", server="github"),
                    _catalog("get_forecast", "get_alerts", server="weather"))
    assert _run(tmp_path, src, incremental=True).reused >= 1
    assert set(handles) <= set(_handles(tmp_path / "idx.db"))
    with open_store(url) as store:
        assert {h: ccr.recover(store, h) for h in handles} == expected


def test_a_store_the_writer_cannot_open_has_the_tool_records_committed_by_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store out of other processes' reach (memory://, as its backend says: here an lmdb
    one said to be, to read it after the run): the run commits the tool records itself,
    then its writer indexes the catalogs, and every handle recovers."""
    from caveman_batch import indexing

    monkeypatch.setattr(indexing, "shared_store", lambda url: False)
    src = _tree(tmp_path / "src")
    _run(tmp_path, src)
    assert sorted(_contents(tmp_path / "idx.db")[0]) == ["github", "team/chat", "weather"]
    handles = _handles(tmp_path / "idx.db")
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert len(handles) == 5 and ccr.missing(store, [h[4:] for h in handles]) == []
        assert sorted(json.loads(ccr.recover(store, h))["name"] for h in handles) == [
            "create_issue", "get_forecast", "list_channels", "merge_pull_request",
            "send_message"]


def test_a_rerun_into_another_store_commits_the_tools_of_catalogs_indexed_as_they_are(
        tmp_path: Path) -> None:
    """A run without --incremental computes every catalog again and finds each indexed as
    it is (it keeps its id, the index is not rewritten): the tool records still go to the
    run's store, here one that never had them, so every handle the index hands out
    recovers from it."""
    src = _tree(tmp_path / "src")
    _run(tmp_path, src)
    handles = _handles(tmp_path / "idx.db")
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        expected = {h: ccr.recover(store, h) for h in handles}
    _run(tmp_path, src, out="out2", store=f"lmdb://{tmp_path}/ccr2")
    assert _handles(tmp_path / "idx.db") == handles
    with open_store(f"lmdb://{tmp_path}/ccr2") as store:
        assert ccr.missing(store, [h[4:] for h in handles]) == []
        assert {h: ccr.recover(store, h) for h in handles} == expected


def test_a_kept_catalog_whose_tools_cannot_be_given_back_leaves_the_index(tmp_path: Path) -> None:
    """A reused catalog one of whose tool records is gone, its own record damaged (present,
    so reuse takes it; not readable, so the tool cannot be committed again from it): the
    catalog leaves the index, and its file is not recorded as wholly indexed (the next run
    indexes it again), never an index handing out a handle that recovers nothing."""
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=True)
    url = f"lmdb://{tmp_path}/ccr"
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        catalog = index.servers()["weather"]
        [tool] = [d.handle for d in index.docs() if d.server == "weather"]
        assert any(path.endswith("weather.json") for path in index.files())
    with open_store(url) as store:
        store.delete([tool[4:].encode("ascii")])  # type: ignore[index]
        key = catalog.encode("ascii")
        value = bytearray(store.get(key))  # type: ignore[arg-type]
        value[-1] ^= 0xFF
        store.commit([(key, bytes(value))], merge=lambda _k, _old, new: new)
    _run(tmp_path, src, incremental=True)
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        assert "weather" not in index.servers()
        assert not any(d.handle == tool for d in index.docs())
        assert not any(path.endswith("weather.json") for path in index.files())


@pytest.mark.parametrize("incremental", [False, True])
def test_a_rerun_that_compresses_otherwise_rewrites_the_definitions_it_indexed(
        tmp_path: Path, incremental: bool) -> None:
    """Another version (or other options) compresses every catalog again, unchanged ones too;
    the index kept each unchanged catalog's definitions as the last compressor made them
    (found indexed as it is, by its sha256), so a search handed out definitions OUT no
    longer had. The ids stay."""
    from caveman_batch.catalog import Options

    desc = ("Send an SMS message to a phone number through the provider's gateway. Messages "
            "longer than 160 characters are split into several parts and billed per part.")
    src = tmp_path / "src"
    (src / "team").mkdir(parents=True)
    (src / "sms.json").write_text(json.dumps({"tools": [{"name": "send_sms", "description": desc}]}))
    (src / "team" / "chat.json").write_bytes(_catalog("send_message"))
    _run(tmp_path, src, incremental=incremental)
    before, _ = _contents(tmp_path / "idx.db")
    _run(tmp_path, src, incremental=incremental, options=Options(lead_bytes=30, short_bytes=20))
    out = json.loads((tmp_path / "out" / "sms.json").read_bytes())["tools"][0]
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        assert index.servers() == before
        assert [json.loads(doc.definition) for doc in index.docs("sms")] == [out]
    assert "\u2026" in out["description"]  # (the other options cut it)


def test_an_index_behind_the_manifest_is_brought_up_to_date_by_a_reused_run(tmp_path: Path) -> None:
    """A catalog changed by a run that wrote another index: the next run with the first
    index reuses the document (its output is current) but not the index's old catalog
    (indexed from other bytes): it is indexed again, as it is now."""
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=True)
    (src / "weather.json").write_bytes(_catalog("get_forecast", "get_alerts"))
    _run(tmp_path, src, incremental=True, index="other.db")
    _run(tmp_path, src, incremental=True)
    servers, docs = _contents(tmp_path / "idx.db")
    assert servers["weather"] == ccr.digest_of((src / "weather.json").read_bytes())
    assert sorted(name for server, name, *_ in docs if server == "weather") == [
        "get_alerts", "get_forecast"]


def test_a_checksum_rerun_heals_a_tampered_tool_record(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=True)
    handle = _handles(tmp_path / "idx.db")[0]
    url = f"lmdb://{tmp_path}/ccr"
    with open_store(url) as store:
        original = ccr.recover(store, handle)
        key = handle[4:].encode("ascii")
        value = bytearray(store.get(key))  # type: ignore[arg-type]
        value[-1] ^= 0xFF
        store.commit([(key, bytes(value))], merge=lambda _k, _old, new: new)
        with pytest.raises(ccr.IntegrityError):
            ccr.recover(store, handle)
    _run(tmp_path, src, incremental=True)  # metadata says all is well: not looked at
    _run(tmp_path, src, incremental=True, checksum=True)
    with open_store(url) as store:
        assert ccr.recover(store, handle) == original


@pytest.mark.parametrize("which", ["catalog", "tool"])
def test_a_checksum_rerun_heals_a_flipped_codec_byte(tmp_path: Path, which: str) -> None:
    """A record whose codec byte was flipped (a catalog's zstd read as a span, a tool's span
    as zstd) keeps its payload: the rerun's commit of the same record heals it, so no
    handle is published whose original cannot be read."""
    src = _tree(tmp_path / "src")
    _run(tmp_path, src, incremental=True)
    tool = _handles(tmp_path / "idx.db")[0]
    url = f"lmdb://{tmp_path}/ccr"
    with open_store(url) as store:
        catalog = next(ccr.make_handle(k.decode()) for k, v in store.items()
                       if ccr.decode_header(v).codec == ccr.CODEC_ZSTD)
        handle = tool if which == "tool" else catalog
        original = ccr.recover(store, handle)
        key = handle[4:].encode("ascii")
        value = bytearray(store.get(key))  # type: ignore[arg-type]
        value[4] = ccr.CODEC_ZSTD if value[4] == ccr.CODEC_SPAN else ccr.CODEC_SPAN
        store.commit([(key, bytes(value))], merge=lambda _k, _old, new: new)
        with pytest.raises(ccr.IntegrityError):
            ccr.recover(store, handle)
    _run(tmp_path, src, incremental=True, checksum=True)
    with open_store(url) as store:
        assert ccr.recover(store, handle) == original


@pytest.mark.parametrize("jsonl", [False, True])
def test_an_incremental_rerun_keeps_every_tool_record_it_reuses_from_prune(
        tmp_path: Path, jsonl: bool) -> None:
    """A rerun that reuses catalogs (one by one, or a JSONL source whole) refreshes their
    tools' records too: a prune of what the rerun did not see keeps every handle the
    index names."""
    src = _tree(tmp_path / "src")
    if jsonl:
        lines = [_catalog("a_tool", server="alpha"), _catalog("b_tool", server="beta")]
        (src / "reg.jsonl").write_bytes(b"\n".join(json.dumps(json.loads(line)).encode()
                                                    for line in lines) + b"\n")
    _run(tmp_path, src, incremental=True)
    time.sleep(1.1)
    between = time.time()
    time.sleep(1.1)
    again = _run(tmp_path, src, incremental=True)
    assert again.documents > 0
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        ccr.prune(store, time.time() - between)  # all the rerun did not see
        with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
            docs = list(index.docs())
        assert len(docs) == (7 if jsonl else 5)
        for doc in docs:
            assert ccr.recover(store, doc.handle)  # type: ignore[arg-type]


def test_a_new_index_is_as_private_as_the_store_and_an_old_one_keeps_its_mode(tmp_path: Path) -> None:
    """The index holds every tool's description and definition, as the store holds the
    originals: a new one is 0600 (with its -wal and -shm), whatever the umask; an index an
    owner made readable stays so across rebuilds."""
    src = _tree(tmp_path / "src")
    old_umask = os.umask(0o022)
    try:
        _run(tmp_path, src)
        made = [p for p in tmp_path.iterdir() if p.name.startswith("idx.db")]
        assert made and {stat.S_IMODE(p.stat().st_mode) for p in made} == {0o600}, made
        (tmp_path / "idx.db").chmod(0o644)
        _run(tmp_path, src)
        assert stat.S_IMODE((tmp_path / "idx.db").stat().st_mode) == 0o644
    finally:
        os.umask(old_umask)


def test_a_catalog_with_a_lone_surrogate_keeps_its_tools_in_the_index(tmp_path: Path) -> None:
    """A tool whose text holds an escape no UTF-8 can (\\ud800): its catalog is passed
    through, and its tools are all indexed (they were all left out, silently), that one with
    its bytes as written for definition and U+FFFD in its search text."""
    src = tmp_path / "src"
    src.mkdir()
    odd = b'{"name":"get_x","description":"Gets the x \\ud800 value.","inputSchema":{"type":"object"}}'
    (src / "odd.json").write_bytes(b'{"tools":[' + odd + b',\n {"name":"put_y","description":'
                                   b'"Puts the y value.","inputSchema":{"type":"object"}}]}')
    _run(tmp_path, src)
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        docs = {d.name: d for d in index.docs()}
        assert sorted(docs) == ["get_x", "put_y"]
        assert docs["get_x"].definition == odd.decode()
        assert index.search("gets the x value", k=1)[0].name == "get_x"
        assert index.search("puts y", k=1)[0].name == "put_y"
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.recover(store, docs["get_x"].handle) == odd


def test_a_registry_label_with_a_lone_surrogate_names_its_catalog_with_u_fffd(
        tmp_path: Path) -> None:
    """A wrapper's "server" label holding \\ud800 names its catalog with U+FFFD in its place
    (as a tool's name has it); before, every run with --index failed with an internal error,
    and no catalog of the run was indexed."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "reg.jsonl").write_bytes(
        b'{"server":"we\\ud800ird","tools":[{"name":"t1","description":"Weather now."}]}\n'
        b'{"server":"ok","tools":[{"name":"t2","description":"Weather later."}]}\n')
    for _ in range(2):  # (and the rerun, unchanged)
        _run(tmp_path, src)
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        assert sorted(index.servers()) == ["reg/ok", "reg/we\ufffdird"]
        assert {h.name for h in index.search("weather", k=5)} == {"t1", "t2"}


def test_a_prune_mid_run_never_leaves_the_index_naming_a_tool_record_it_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune shorter than the run drops a catalog's original and its tools' records,
    committed at the run's start; the same catalog later in the input commits its original
    again, but its tools' records are committed once a run: the run exited 0 with the index
    naming tool handles no store held (a helper's race over the corpora: 5,445 of 8,854).
    Now the run checks, once the writer is done, that every tool record its index names is
    there, and commits any gone again from its catalog's original."""
    from caveman_batch import indexing
    from caveman_batch.pipeline import sources

    line = _catalog("create_issue", "merge_pull_request", server="github")
    src = _jsonl_registry(tmp_path / "reg.jsonl", line, _catalog("get_forecast"), line)
    monkeypatch.setattr(sources, "BATCH_DOCS", 1)
    monkeypatch.setattr(indexing, "_TOOLS_PER_COMMIT", 1)
    real = indexing.IndexBuilder.added
    pruned: list[int] = []

    def added_then_pruned(self: Any, store: Any) -> None:
        real(self, store)
        if not pruned:  # a prune --not-seen-for 1s, as though the run had taken a minute
            self._drain()  # (the first catalog's tool records committed by now)
            pruned.append(len(ccr.prune(store, 1, now_ms=ccr.now_ms() + 60_000)))

    monkeypatch.setattr(indexing.IndexBuilder, "added", added_then_pruned)
    _run(tmp_path, src)
    assert pruned[0] >= 3  # the catalog and its two tools
    handles = _handles(tmp_path / "idx.db")
    assert len(handles) == 5
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.missing(store, sorted({h[4:] for h in handles})) == []
        for handle in handles:
            ccr.recover(store, handle)


def _prune_a_minute_on(store_url: str) -> int:
    """A prune --not-seen-for 1s, as though the run had taken a minute so far."""
    with open_store(store_url) as store:
        return len(ccr.prune(store, 1, now_ms=ccr.now_ms() + 60_000))


def test_a_prune_while_the_index_is_finished_fails_the_run_before_its_manifest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest's check (every original it names refreshed and there) ran before the
    index was finished, which waits for its writer (seconds, on a large run): a prune in
    that tail dropped every original the published manifest named, and the run exited 0.
    The index is finished first now, so the check sees such a prune."""
    from caveman_batch import indexing
    from caveman_batch.errors import StoreError

    src = _tree(tmp_path / "src")
    real = indexing.IndexBuilder.finish
    pruned: list[int] = []

    def finish_then_prune(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        pruned.append(_prune_a_minute_on(f"lmdb://{tmp_path}/ccr"))

    monkeypatch.setattr(indexing.IndexBuilder, "finish", finish_then_prune)
    with pytest.raises(StoreError, match="left the store while it ran"):
        _run(tmp_path, src)
    assert pruned[0] > 0 and not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_prune_before_the_tools_records_leaves_no_span_naming_a_catalog_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index writer commits a catalog's tool records (spans of the catalog's record)
    after the run committed the catalog: a prune in between dropped the catalog, and the
    writer then committed spans naming bytes that were gone (`verify`: span target
    missing, for good). Now each is committed only beside its catalog's record,
    refreshed with it: the run fails (exit 2), and the store holds no such span."""
    from caveman_batch import indexing
    from caveman_batch.errors import StoreError

    src = _tree(tmp_path / "src")
    url = f"lmdb://{tmp_path}/ccr"
    real = indexing.IndexBuilder._flush
    pruned: list[int] = []

    def pruned_then_flushed(self: Any, store: Any) -> None:
        if not pruned and self._held:
            pruned.append(_prune_a_minute_on(url))
        real(self, store)

    monkeypatch.setattr(indexing.IndexBuilder, "_flush", pruned_then_flushed)
    with pytest.raises(StoreError, match="left the store before their tools' records"):
        _run(tmp_path, src)
    assert pruned[0] > 0
    with open_store(url) as store:
        assert not ccr.audit(store).excluded
