"""Hybrid tool search: one stored vector per tool, computed once, fused with BM25."""

from __future__ import annotations

import sqlite3
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import pytest

from caveman_batch.embedding import EMBED_EXTRA_HINT, Embedder, extra_installed, load_embedder
from caveman_batch.errors import SearchIndexError
from caveman_batch.searcheval import compressed_copy
from caveman_batch.toolsearch import ToolDoc, ToolIndex, tool_docs
from caveman_batch.toolvectors import EMBEDDER_KEY, embed_text, fuse_rrf, fuse_weighted, top

pytestmark = pytest.mark.skipif(not extra_installed(),
                                reason=f"embed extra not installed: {EMBED_EXTRA_HINT}")

# "check" is all BM25 can match, and three tools have it: the paraphrase ("healthy" for
# "liveness", "up and responding") is what the dense half understands.
OPS = [
    {"name": "spell_check", "description": "Check the spelling and grammar of a text; "
                                           "check every word against a dictionary.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "check_in_guest", "description": "Check in a hotel guest and assign a room.",
     "inputSchema": {"type": "object", "properties": {"guest": {"type": "string"}}}},
    {"name": "health_check", "description": "Report whether the service is up and responding: "
                                            "liveness, uptime and version.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "list_invoices", "description": "List the invoices of a customer account.",
     "inputSchema": {"type": "object", "properties": {
         "customer": {"type": "string", "description": "Customer id"}}}},
]
FILES = [
    {"name": "delete_file", "description": "Delete a file from the workspace.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "read_file", "description": "Read a text file and return its content.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]
QUERY = "check if the API is healthy"


class Counting:
    """The real embedder, counting the texts it is asked to embed (and renameable)."""

    def __init__(self, inner: Embedder, suffix: str = "") -> None:
        self.inner, self.suffix, self.texts = inner, suffix, 0

    @property
    def name(self) -> str:
        return self.inner.name + self.suffix

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str]):  # -> a numpy array
        self.texts += len(texts)
        return self.inner.encode(texts)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder(required=True)


def _docs(server: str, tools: list[dict]) -> list[ToolDoc]:
    return tool_docs(server, tools, tools, [f"ccr_{server}{i}" for i in range(len(tools))])


def _build(path: Path | str, embedder: Embedder | None) -> ToolIndex:
    index = ToolIndex.open(path, embedder=embedder)
    index.replace_server("ops", _docs("ops", OPS), catalog_sha256="1" * 64)
    index.replace_server("files", _docs("files", FILES), catalog_sha256="2" * 64)
    return index


def _vector_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT t.server, t.name, length(v.vector) "
                          "FROM tool_vectors v JOIN tools t ON t.text_id = v.id "
                          "ORDER BY t.server, t.position").fetchall()


def test_hybrid_finds_the_paraphrase_bm25_misses(tmp_path: Path, embedder: Embedder) -> None:
    with _build(tmp_path / "bm25.db", None) as plain:
        assert "health_check" != plain.search(QUERY, 1)[0].name
    with _build(tmp_path / "hybrid.db", embedder) as hybrid:
        hits = hybrid.search(QUERY, 3)
    assert hits[0].name == "health_check" and hits[0].server == "ops"
    assert hits[0].handle == "ccr_ops2" and '"health_check"' in hits[0].definition
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_a_query_with_no_word_for_bm25_has_the_dense_ranking(tmp_path: Path,
                                                            embedder: Embedder) -> None:
    """An emoji is no word to FTS5: hybrid, the query found nothing at all (while `___`,
    a word no tool has, got the dense ranking's hits); a query of nothing to embed still
    finds nothing."""
    with _build(tmp_path / "bm25.db", None) as plain:
        assert plain.search("🏨") == []
    with _build(tmp_path / "hybrid.db", embedder) as hybrid:
        assert hybrid.search("🏨", 1)[0].name == "check_in_guest"
        assert hybrid.search("🧾", 1)[0].name == "list_invoices"
        assert hybrid.search("") == hybrid.search(" \n\t") == []


@pytest.mark.parametrize("query", ["vérifier la santé du service", "호텔 손님 체크인", "λογαριασμός πελάτη"])
def test_a_query_written_decomposed_ranks_as_composed(tmp_path: Path, embedder: Embedder,
                                                     query: str) -> None:
    """The query is composed (NFC) for BM25 and for the dense ranking alike: only the BM25
    expression was, and the embedder tokenizes a decomposed word apart (Hangul as jamo: a
    cosine of 0.14 between the two forms), so the hybrid hits of one form were not the other's."""
    with _build(tmp_path / "hybrid.db", embedder) as hybrid:
        composed = hybrid.search(unicodedata.normalize("NFC", query))
        assert composed and hybrid.search(unicodedata.normalize("NFD", query)) == composed


def test_a_catalog_written_decomposed_ranks_as_composed(tmp_path: Path,
                                                       embedder: Embedder) -> None:
    """A catalog's text written decomposed (NFD) is indexed and embedded composed, as the
    query is: its Hangul, Greek or Cyrillic words were found by no BM25 query, and the
    tokenizer splits a decomposed word apart, so the hybrid hits were another catalog's."""
    tools = [{"name": "check_in", "description": "호텔 손님 체크인"},
             {"name": "invoice", "description": "λογαριασμός πελάτη"},
             {"name": "order", "description": "заказ йогурта"}]
    hits = []
    for form in ("NFC", "NFD"):
        written = [{**tool, "description": unicodedata.normalize(form, tool["description"])}
                   for tool in tools]
        with ToolIndex.open(tmp_path / f"{form}.db", embedder=embedder) as index:
            index.replace_server("s", _docs("s", written))
            hits.append([[(hit.name, hit.score) for hit in index.search(tool["description"], 3)]
                         for tool in tools])
    assert hits[0] == hits[1]  # (each definition as written)
    assert [found[0][0] for found in hits[0]] == ["check_in", "invoice", "order"]


def test_one_vector_per_tool_in_the_index_file(tmp_path: Path, embedder: Embedder) -> None:
    counting = Counting(embedder)
    _build(tmp_path / "i.db", counting).close()
    assert counting.texts == len(OPS) + len(FILES)
    rows = _vector_rows(tmp_path / "i.db")
    assert [(s, n) for s, n, _ in rows] == [("files", "delete_file"), ("files", "read_file"),
                                            *(("ops", tool["name"]) for tool in OPS)]
    assert {size for _, _, size in rows} == {embedder.dim * 4}
    with sqlite3.connect(tmp_path / "i.db") as db:
        stored = db.execute("SELECT value FROM meta WHERE key=?", (EMBEDDER_KEY,)).fetchone()
    assert stored == (embedder.name,)


def test_refresh_embeds_only_new_and_changed_tools(tmp_path: Path, embedder: Embedder) -> None:
    path = tmp_path / "i.db"
    _build(path, embedder).close()
    before = {(s, n): v for s, n, v in _blobs(path)}
    counting = Counting(embedder)
    with ToolIndex.open(path, embedder=counting) as index:
        assert counting.texts == 0  # reopening embeds nothing
        index.replace_server("ops", _docs("ops", OPS), catalog_sha256="1" * 64)
        assert counting.texts == 0  # an unchanged catalog embeds nothing
        changed = [dict(OPS[0], description="Spell-check a text."), *OPS[1:],
                   {"name": "ping", "description": "Ping a host."}]
        index.replace_server("ops", _docs("ops", changed))
        assert counting.texts == 2  # the changed tool and the new one
        index.remove_server("files")
    after = {(s, n): v for s, n, v in _blobs(path)}
    assert set(after) == {("ops", tool["name"]) for tool in OPS} | {("ops", "ping")}
    with sqlite3.connect(path) as db:  # no vector outlives its tool
        assert db.execute("SELECT count(*) FROM tool_vectors").fetchone() == (len(after),)
    assert after[("ops", "health_check")] == before[("ops", "health_check")]
    assert after[("ops", "spell_check")] != before[("ops", "spell_check")]


def test_reopening_does_not_load_the_model(tmp_path: Path, embedder: Embedder) -> None:
    _build(tmp_path / "i.db", embedder).close()
    fresh = load_embedder(required=True)
    ToolIndex.open(tmp_path / "i.db", embedder=fresh).close()
    assert fresh._table is None  # type: ignore[attr-defined]  # nothing to embed: not loaded


def test_a_shared_text_has_one_vector(tmp_path: Path, embedder: Embedder) -> None:
    path = tmp_path / "i.db"
    counting = Counting(embedder)
    texts = len(OPS) + len(FILES)
    with _build(path, counting) as index:
        index.replace_server("mirror", _docs("mirror", OPS))
        assert counting.texts == texts  # the mirror's texts are all known
        hits = index.search(QUERY, 2)  # (embeds the query: one text)
        assert [(h.server, h.name) for h in hits] == [("mirror", "health_check"),
                                                      ("ops", "health_check")]
        assert hits[0].score == hits[1].score
        index.remove_server("ops")  # the mirror still has the texts, and their vectors
        # a catalog renamed (removed and added in one change) takes its vectors along
        index.apply([("renamed", _docs("renamed", OPS), None, None, None)], ["mirror"])
        assert counting.texts == texts + 1
        assert index.search(QUERY, 1)[0].server == "renamed"
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM tool_vectors").fetchone() == (texts,)


def test_another_embedder_replaces_every_vector(tmp_path: Path, embedder: Embedder) -> None:
    path = tmp_path / "i.db"
    _build(path, None).close()
    assert _vector_rows(path) == []  # built without the extra: BM25 only, no vectors
    first = Counting(embedder)
    ToolIndex.open(path, embedder=first).close()
    total = len(OPS) + len(FILES)
    assert first.texts == total and len(_vector_rows(path)) == total  # opening fills them in
    other = Counting(embedder, suffix="+other")
    ToolIndex.open(path, embedder=other).close()
    assert other.texts == total
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key=?",
                          (EMBEDDER_KEY,)).fetchone() == (other.name,)


def test_hybrid_is_deterministic_whatever_the_order(tmp_path: Path, embedder: Embedder) -> None:
    with _build(tmp_path / "a.db", embedder) as forward:
        expected = [h.as_dict() for h in forward.search(QUERY, 5)]
        assert [h.as_dict() for h in forward.search(QUERY, 5)] == expected
    with ToolIndex.open(tmp_path / "b.db", embedder=embedder) as backward:
        backward.replace_server("files", _docs("files", FILES))
        backward.replace_server("ops", _docs("ops", OPS))
        assert [h.as_dict() for h in backward.search(QUERY, 5)] == expected


def test_hybrid_honours_servers_and_k(tmp_path: Path, embedder: Embedder) -> None:
    with _build(tmp_path / "i.db", embedder) as index:
        assert {h.server for h in index.search(QUERY, 10, servers={"files"})} == {"files"}
        assert index.search(QUERY, 0) == [] and index.search(QUERY, 5, servers=()) == []
        assert len(index.search("file", 1)) == 1
        assert index.search("   ", 5) == []


def test_a_hybrid_tie_is_broken_by_server_then_name_then_position(embedder: Embedder) -> None:
    """Names that split alike (`w_x`, `w-x`) make one search text: one BM25 score, one
    vector, one fused score; the tools are then ranked by server, name, position."""
    tools = {"b": ["w-x"], "a": ["w_x"], "c": ["w_x", "w_x"]}
    with ToolIndex.open(":memory:", embedder=embedder) as index:
        for server, names in tools.items():
            catalog = [{"name": name, "description": "a widget"} for name in names]
            index.replace_server(server, tool_docs(server, catalog, catalog,
                                                   [f"{server}{i}" for i in range(len(names))]))
        for servers in (None, {"a", "b", "c"}):
            hits = index.search("widget", 10, servers=servers)
            assert [(h.server, h.name, h.handle) for h in hits] == [
                ("a", "w_x", "a0"), ("b", "w-x", "b0"), ("c", "w_x", "c0"), ("c", "w_x", "c1")]
            assert len({h.score for h in hits}) == 1
        # a text other servers share: their tools are not hits of these servers
        assert [h.server for h in index.search("widget", 10, servers={"b"})] == ["b"]


def test_hybrid_normalises_bm25_by_the_best_match_of_the_servers_searched(
        embedder: Embedder) -> None:
    """Searching one server, its best BM25 match has the whole BM25 share (0.3), whatever
    another server matches better."""
    import numpy as np

    strong = {"name": "widget_widget", "description": "widget widget widget"}
    weak = {"name": "paint_house", "description": "Paint a house; any widget."}
    with ToolIndex.open(":memory:", embedder=embedder) as index:
        index.replace_server("t", tool_docs("t", [strong], [strong], [None]))
        index.replace_server("s", tool_docs("s", [weak], [weak], [None]))
        hit, = index.search("widget", 5, servers={"s"})
        fields = next(index.docs("s")).fields
    vectors = embedder.encode([embed_text(fields), "widget"]).astype(np.float64)
    cosine = round(float(vectors[0] @ vectors[1]), 9)
    assert hit.score == pytest.approx(0.3 + 0.7 * cosine, abs=1e-8)


def test_hybrid_fuses_every_bm25_match_tied_past_the_fusion_depth(embedder: Embedder) -> None:
    """230 texts tie in BM25 (more than the 200 fused + the margin of 16): every one is
    fused (none cut by the order the index was built in), so every one is a hit."""
    catalog = [{"name": f"t{i:03d}", "description": "a widget"} for i in range(230)]
    results = []
    for order in (catalog, catalog[::-1]):
        with ToolIndex.open(":memory:", embedder=embedder) as index:
            index.replace_server("s", tool_docs("s", order, order, [None] * len(order)))
            results.append([h.as_dict() for h in index.search("widget", 300)])
    assert len(results[0]) == 230 and results[0] == results[1]
    # the dense ranking goes 200 deep: the 30 texts past it have the BM25 share alone
    assert sum(h["score"] == 0.3 for h in results[0]) == 30


def test_every_fused_hit_is_read_whatever_sqlites_limit_on_variables(
        embedder: Embedder) -> None:
    """The fused texts' tools were read in one statement of one variable per text: 1,100
    tied texts under a limit of 999 variables were "too many SQL variables"."""
    catalog = [{"name": f"t{i:04d}", "description": "a widget"} for i in range(1100)]
    with ToolIndex.open(":memory:", embedder=embedder) as index:
        index.replace_server("s", tool_docs("s", catalog, catalog, [None] * len(catalog)))
        index._db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)  # (before any search:
        # a statement prepared already is not checked again)
        assert sorted(h.name for h in index.search("widget", 2000)) == [c["name"] for c in catalog]


def test_the_dense_ranking_of_a_server_filter_is_of_its_texts_alone(embedder: Embedder) -> None:
    """210 texts of another server nearer the query fill the dense ranking's 200: the texts
    of the server searched are ranked among themselves, not cut behind those."""
    import numpy as np

    near = [{"name": f"widget_{i}", "description": "widget"} for i in range(210)]
    far = {"name": "paint_house", "description": "Paint a house; any widget."}
    with ToolIndex.open(":memory:", embedder=embedder) as index:
        index.replace_server("t", tool_docs("t", near, near, [None] * len(near)))
        index.replace_server("s", tool_docs("s", [far], [far], [None]))
        hit, = index.search("widget", 5, servers={"s"})
        fields = next(index.docs("s")).fields
    vectors = embedder.encode([embed_text(fields), "widget"]).astype(np.float64)
    assert hit.score == pytest.approx(0.3 + 0.7 * round(float(vectors[0] @ vectors[1]), 9),
                                      abs=1e-8)


def test_the_compressed_copy_of_a_hybrid_index_is_searched_hybrid(tmp_path: Path,
                                                                 embedder: Embedder) -> None:
    """`eval search --compare-original` of a hybrid index: both sides hybrid (the tools'
    definitions are their originals here, so the figures are the same)."""
    with _build(tmp_path / "i.db", embedder) as index, compressed_copy(index) as copy:
        assert copy.embedder is embedder
        assert [h.as_dict() for h in copy.search(QUERY, 3)] == [
            h.as_dict() for h in index.search(QUERY, 3)]


def test_a_write_by_another_connection_is_seen(tmp_path: Path, embedder: Embedder) -> None:
    path = tmp_path / "i.db"
    probe = {"name": "uptime_probe", "description": "Report the liveness and uptime of a host."}
    query = "is the host alive"
    with _build(path, embedder) as reader:
        assert "uptime_probe" not in [h.name for h in reader.search(query, 5)]
        with ToolIndex.open(path, embedder=embedder) as writer:
            writer.replace_server("net", _docs("net", [probe]))
            fresh = [h.as_dict() for h in writer.search(query, 5)]
        # the same hits and scores: the reader's cached vectors were reloaded, not reused
        assert [h.as_dict() for h in reader.search(query, 5)] == fresh
        assert fresh[0]["name"] == "uptime_probe"


def _without_vectors(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM texts WHERE id NOT IN "
                          "(SELECT id FROM tool_vectors)").fetchone()[0]


def test_texts_added_by_a_bm25_writer_meanwhile_get_vectors(tmp_path: Path,
                                                            embedder: Embedder) -> None:
    """A hybrid writer embeds the texts its own change adds without reading them back,
    but only while no other connection has written: a BM25-alone writer's texts, added in
    between, get their vectors in the hybrid writer's next change."""
    path = tmp_path / "i.db"
    with _build(path, embedder) as hybrid:
        with ToolIndex.open(path) as plain:  # no embedder: adds texts without vectors
            plain.replace_server("net", _docs("net", [{"name": "ping", "description": "Ping."}]))
        assert _without_vectors(path) == 1
        hybrid.replace_server("more", _docs("more", [{"name": "pong", "description": "Pong."}]))
        assert _without_vectors(path) == 0


def test_a_change_rolled_back_leaves_others_texts_to_embed(tmp_path: Path,
                                                           embedder: Embedder) -> None:
    """A hybrid change that gave vectors to another writer's texts, then rolled back: they
    have none again, and the next change embeds them."""
    path = tmp_path / "i.db"
    with _build(path, embedder) as hybrid:
        with ToolIndex.open(path) as plain:  # no embedder: adds texts without vectors
            plain.replace_server("files", _docs("files", FILES[:1]))
            plain.replace_server("net", _docs("net", [{"name": "ping", "description": "Ping."}]))
        # a change that fills them in, then rolls back (a files row without its sha256)
        with pytest.raises(SearchIndexError):
            hybrid.apply([("more", _docs("more", [{"name": "pong", "description": "Pong."}]),
                           None, None, None)], files={"f.json": None})  # type: ignore[dict-item]
        hybrid.replace_server("more", _docs("more", [{"name": "pong", "description": "Pong."}]))
        hybrid.replace_server("other", _docs("other", [{"name": "echo", "description": "Echo."}]))
    assert _without_vectors(path) == 0
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM tool_vectors").fetchone() == \
            db.execute("SELECT count(*) FROM texts").fetchone() == (len(OPS) + 1 + 3,)


def test_a_hybrid_change_does_not_read_its_texts_back(tmp_path: Path,
                                                      embedder: Embedder) -> None:
    with _build(tmp_path / "i.db", embedder) as index:
        statements: list[str] = []
        index._db.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        index.replace_server("net", _docs("net", [{"name": "ping", "description": "Ping."}]))
        index._db.set_trace_callback(None)  # type: ignore[attr-defined]
        assert any("INSERT INTO tool_vectors" in sql for sql in statements)
        assert not [sql for sql in statements if "JOIN tools_fts" in sql]
        assert [h.name for h in index.search("ping a host", 1)] == ["ping"]


class Gated(Counting):
    """The real embedder, each call waiting until the test lets it go (a model that takes
    long: 13 s for 37k texts)."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.entered, self.go = threading.Event(), threading.Event()

    def encode(self, texts: Sequence[str]):  # -> a numpy array
        self.entered.set()
        assert self.go.wait(30)
        return super().encode(texts)


def test_a_hybrid_open_embeds_holding_no_lock(tmp_path: Path, embedder: Embedder) -> None:
    """Opening a BM25-only index hybrid embeds its texts before its write transaction: a
    build writing meanwhile does not wait for the model (it waited inside the lock, and
    failed with `database is locked` after 5 s); the text the build added is embedded in
    the open's transaction, and every text ends with a vector."""
    path = tmp_path / "i.db"
    _build(path, None).close()
    gated = Gated(embedder)
    opened: list[ToolIndex] = []
    opener = threading.Thread(target=lambda: opened.append(ToolIndex.open(path, embedder=gated)))
    opener.start()
    try:
        assert gated.entered.wait(30)  # the open is embedding
        with ToolIndex.open(path) as build:  # no embedder: as `compress --index --no-embed`
            build._db.execute("PRAGMA busy_timeout=1000")  # (a lock held would fail it)
            build.replace_server("net", _docs("net", [{"name": "ping", "description": "Ping."}]))
    finally:
        gated.go.set()
        opener.join(30)
    assert opened and gated.texts == len(OPS) + len(FILES) + 1  # each text embedded once
    with opened[0] as index:
        assert [h.name for h in index.search("ping a host", 1)] == ["ping"]
    assert _without_vectors(path) == 0


def test_fusions_rank_by_both() -> None:
    bm25 = [(1, 10.0), (2, 5.0)]
    dense = [(3, 0.9), (2, 0.8), (1, 0.1)]
    weighted = fuse_weighted(bm25, dense, bm25_share=0.5)
    assert weighted == {1: pytest.approx(0.55), 2: pytest.approx(0.65), 3: pytest.approx(0.45)}
    rrf = fuse_rrf(list(reversed(bm25)), dense, k=1)  # ranked by score, not by list order
    assert rrf == {1: pytest.approx(1 / 2 + 1 / 4), 2: pytest.approx(1 / 3 + 1 / 3),
                   3: pytest.approx(1 / 2)}
    assert fuse_weighted([], []) == {} and fuse_weighted([(1, 0.0)], []) == {1: 0.0}


def test_weighted_fusion_gives_bm25_a_share_of_0_3_by_default() -> None:
    """README, "Hybrid ranking": 0.3 of the BM25 score over the best one, 0.7 of the cosine."""
    assert fuse_weighted([(1, 2.0), (2, 1.0)], [(2, 0.5), (3, 0.2)]) == {
        1: 0.3, 2: round(0.15 + 0.35, 9), 3: round(0.14, 9)}


def test_a_ranking_cut_keeps_every_score_tied_with_the_last_kept() -> None:
    ranking = [(4, 0.1), (2, 0.5), (1, 0.9), (3, 0.5)]
    assert top(ranking, 2) == [(2, 0.5), (1, 0.9), (3, 0.5)]
    assert top(ranking, 4) == ranking and top(ranking, 9) == ranking
    # scores equal to 9 decimals tie (a BLAS may sum in another order), not beyond
    assert top([(1, 0.5), (2, 0.5 + 1e-12), (3, 0.1)], 1) == [(1, 0.5), (2, 0.5 + 1e-12)]
    assert top([(1, 0.5), (2, 0.5 + 1e-8), (3, 0.1)], 1) == [(2, 0.5 + 1e-8)]


def test_reciprocal_rank_fusion_uses_k_60() -> None:
    assert fuse_rrf([(7, 3.0)], [(8, 0.1), (7, 0.2)]) == {7: round(2 / 61, 9),
                                                          8: round(1 / 62, 9)}


def test_the_embedded_text_is_name_description_params_cut_at_2000_characters() -> None:
    assert embed_text({"name": "n", "description": "d", "params": "p"}) == "n. d p"
    text = embed_text({"name": "n", "description": "d" * 5000, "params": "p"})
    assert text == "n. " + "d" * 1997


def _blobs(path: Path) -> list[tuple[str, str, bytes]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT t.server, t.name, v.vector FROM tool_vectors v "
                          "JOIN tools t ON t.text_id = v.id").fetchall()
