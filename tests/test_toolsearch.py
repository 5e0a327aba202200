"""The tool-search index: docs from tools, replace/remove by server, bm25 search."""

from __future__ import annotations

import sqlite3
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from caveman_batch.errors import (
    NotASearchIndexError,
    SearchIndexError,
    SearchIndexInconsistentError,
    SearchIndexNotFoundError,
)
from caveman_batch.toolsearch import (
    ToolDoc,
    ToolIndex,
    match_expression,
    search_fields,
    split_name,
    tool_docs,
)

GITHUB = [
    {"name": "create_issue", "description": "Create a new issue in a GitHub repository.",
     "inputSchema": {"type": "object", "properties": {
         "owner": {"type": "string", "description": "Repository owner"},
         "title": {"type": "string"},
         "state": {"type": "string", "enum": ["open", "closed"]}}}},
    {"name": "getPullRequest", "description": "Get details of a specific pull request.",
     "inputSchema": {"type": "object", "properties": {"pullNumber": {"type": "number"}}}},
    {"name": "search_code", "description": "Search for code across repositories.",
     "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}},
]
WEATHER = [
    {"name": "get_forecast", "description": "Weather forecast for a city, by day.",
     "inputSchema": {"type": "object", "properties": {
         "city": {"type": "string", "description": "City name"},
         "units": {"type": "string", "enum": ["metric", "imperial"]}}}},
]


def _docs(server: str, tools: list[dict]) -> list[ToolDoc]:
    return tool_docs(server, tools, tools, [f"ccr_{server}{i}" for i in range(len(tools))])


@pytest.fixture
def index(tmp_path: Path) -> ToolIndex:
    with ToolIndex.open(tmp_path / "tools.db") as index:
        index.replace_server("github", _docs("github", GITHUB), catalog_sha256="a" * 64)
        index.replace_server("weather", _docs("weather", WEATHER), catalog_sha256="b" * 64)
        yield index


def test_split_name_on_case_and_separators() -> None:
    assert split_name("getPullRequest_v2.list-all") == "get Pull Request v2 list all"
    assert split_name("HTTPServer") == "HTTP Server"
    assert split_name("") == ""


def test_split_name_splits_after_a_digit_and_at_every_separator() -> None:
    """A capital after a digit starts a word (`v2Beta`); white space (collapsed), `:` and `/`
    separate as `_`, `-`, `.` do; a leading or doubled separator leaves no empty word."""
    assert split_name("list2Items") == "list2 Items"
    assert split_name("a\tb  c") == "a b c"
    assert split_name("ns:tool/sub") == "ns tool sub"
    assert split_name("_private__name") == "private name"
    assert split_name("__init__") == "init"


def test_search_fields_take_parameter_names_descriptions_and_enums() -> None:
    fields = search_fields(GITHUB[0])
    assert fields["name"] == "create issue"
    assert fields["description"] == GITHUB[0]["description"]
    assert fields["params"] == "owner Repository owner title state open closed"


def test_enum_values_of_scalars_only_are_search_text() -> None:
    """Numbers (and booleans, as str() spells them) are enum text; null, lists, objects not."""
    tool = {"name": "t", "inputSchema": {"properties": {"level": {
        "enum": ["low", 2, 3.5, True, None, [4], {"x": "five"}]}}}}
    assert search_fields(tool)["params"] == "level low 2 3.5 True"


def test_output_schema_and_a_description_not_text_are_not_search_text() -> None:
    tool = {"name": "t", "description": 42, "inputSchema": {"properties": {"city": {}}},
            "outputSchema": {"properties": {"temperature": {"description": "in kelvin"}}}}
    fields = search_fields(tool)
    assert fields["description"] == ""
    assert fields["params"] == "city"


def test_parameters_nested_past_64_levels_are_not_search_text() -> None:
    """Schema depth 64 is read, deeper is not (the C walker stops at the same depth)."""
    node: dict = {}
    for level in reversed(range(70)):
        node = {"properties": {f"p{level}": node}}
    tool = {"name": "t", "inputSchema": node}
    assert search_fields(tool)["params"].split() == [f"p{level}" for level in range(65)]


def test_nested_parameters_are_search_text() -> None:
    tool = {"name": "t", "inputSchema": {"properties": {"filter": {"anyOf": [
        {"properties": {"labelName": {"enum": ["bug"]}}}], "items": {"description": "deep"}}}}}
    assert search_fields(tool)["params"] == "filter label Name bug deep"


def test_search_ranks_the_named_tool_first(index: ToolIndex) -> None:
    hits = index.search("open a new issue", k=3)
    assert hits[0].server == "github" and hits[0].name == "create_issue"
    assert hits[0].handle == "ccr_github0"
    assert hits[0].definition.startswith('{"name":"create_issue"')
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))


def test_camel_case_name_and_stemming(index: ToolIndex) -> None:
    assert index.search("pull requests", k=1)[0].name == "getPullRequest"
    assert index.search("forecasts for the weather", k=1)[0].name == "get_forecast"


def test_or_semantics_a_word_nowhere_does_not_empty_the_result(index: ToolIndex) -> None:
    assert index.search("weather zyzzyva", k=1)[0].name == "get_forecast"


@pytest.mark.parametrize("query", ['foo AND "bar', "NEAR(a b)", "name:x", "*", "-", "'\"", "^a",
                                   "a OR", ") (", "\x00", "col : umn"])
def test_any_text_is_a_valid_query(index: ToolIndex, query: str) -> None:
    index.search(query)


@pytest.mark.parametrize("word", ["résumé", "tiếng", "naïve", "ẹ̀kọ́", "ελληνικά", "ёлка", "한국어"])
def test_a_word_written_decomposed_finds_its_tool(tmp_path: Path, word: str) -> None:
    """A query in NFD (macOS file names, some keyboards) was split at each combining mark
    (`re`, `sume`), or folded by FTS5 apart from the composed letters the index holds
    (Greek, Cyrillic; Hangul as jamo): nothing found; so was a word with a mark that has no
    precomposed form (Yoruba's ẹ̀). A catalog's text written decomposed is indexed composed:
    Greek, Cyrillic or Hangul indexed as written was found by no query, composed as each is."""
    for indexed in ("NFC", "NFD"):
        tool = {"name": "t", "description": f"Reads {unicodedata.normalize(indexed, word)} text."}
        with ToolIndex.open(tmp_path / f"{indexed}.db") as index:
            index.replace_server("s", tool_docs("s", [tool], [tool], [None]))
            for asked in ("NFC", "NFD"):
                query = unicodedata.normalize(asked, word)
                assert [h.name for h in index.search(query)] == ["t"], (indexed, asked)


def test_empty_query_or_k_gives_nothing(index: ToolIndex) -> None:
    assert index.search("   ") == []
    assert index.search("issue", k=0) == []


def test_stop_words_only_still_search() -> None:
    assert match_expression("the") == '"the"'
    assert match_expression("the weather") == '"weather"'
    assert match_expression('foo AND "bar') == '"foo" OR "bar"'
    assert match_expression('NEAR(x y)') == '"near" OR "x" OR "y"'


def test_a_query_is_composed_lowercased_and_camel_case_split_before_its_terms_are_made() -> None:
    nfd = unicodedata.normalize("NFD", "résumé")
    assert match_expression(nfd) == f'"{unicodedata.normalize("NFC", "résumé")}"'
    assert match_expression("Send EMAIL send") == '"send" OR "email"'
    assert match_expression("sendEmail") == '"sendemail" OR "send" OR "email"'
    assert match_expression("getPullRequest") == '"getpullrequest" OR "pull" OR "request"'


def test_a_query_searches_its_first_64_distinct_words() -> None:
    words = ["w0", "w1", "w0"] + [f"w{i}" for i in range(70)]
    assert match_expression(" ".join(words)) == " OR ".join(f'"w{i}"' for i in range(64))


# the words a request in English is made of besides what it asks for (toolsearch.STOP_WORDS)
_FILLER = """
a an and are as at be by can could do does for from has have how i in into is it its me my
of on or our please that the their them then there these this to use using want was we what
when where which who will with would you your need needs some any all get
""".split()


@pytest.mark.parametrize("word", _FILLER)
def test_a_filler_word_is_not_searched_beside_others(word: str) -> None:
    assert match_expression(f"{word} widget {word.upper()}") == '"widget"'


def test_a_name_word_weighs_three_times_a_description_or_parameter_word() -> None:
    """README: bm25 with weights name 3, description 1, parameters 1. Every field one word
    long, so only the weights differ: FTS5 saturates the weighted count f as
    f * (k1 + 1) / (f + k1), k1 = 1.2."""
    def doc(name: str, *words: str) -> ToolDoc:
        return ToolDoc("s", name, None, "{}", dict(zip(("name", "description", "params"), words)))

    docs = [doc("in_name", "widget", "foo", "foo"), doc("in_description", "foo", "widget", "foo"),
            doc("in_params", "foo", "foo", "widget")]
    docs += [doc(f"other{i}", f"n{i}", f"d{i}", f"p{i}") for i in range(7)]
    with ToolIndex.open(":memory:") as index:
        index.replace_server("s", docs)
        hits = index.search("widget", k=5)
    assert [h.name for h in hits] == ["in_name", "in_description", "in_params"]
    assert hits[1].score == hits[2].score
    assert hits[0].score / hits[1].score == pytest.approx(3 * 2.2 / (3 + 1.2) / (2.2 / 2.2))


def test_servers_filter(index: ToolIndex) -> None:
    assert [h.server for h in index.search("city repository", k=5, servers=["weather"])] == \
        ["weather"]
    assert index.search("city", servers=[]) == []


def test_replace_and_remove_server(index: ToolIndex) -> None:
    assert index.servers() == {"github": "a" * 64, "weather": "b" * 64}
    index.replace_server("github", _docs("github", GITHUB[:1]), catalog_sha256="c" * 64)
    assert index.servers()["github"] == "c" * 64
    assert [d.name for d in index.docs("github")] == ["create_issue"]
    assert index.search("pull request") == []
    index.remove_server("weather")
    assert index.servers() == {"github": "c" * 64}
    assert index.search("forecast") == []
    assert len(index) == 1


def test_a_server_given_twice_in_one_change_has_the_tools_given_last(index: ToolIndex) -> None:
    index.apply([("github", _docs("github", GITHUB[:1]), "c" * 64, None, None),
                 ("github", _docs("github", GITHUB[1:]), "d" * 64, None, None)])
    assert index.servers()["github"] == "d" * 64
    assert [d.name for d in index.docs("github")] == ["getPullRequest", "search_code"]


def test_a_failed_replace_changes_nothing(index: ToolIndex) -> None:
    bad = [*_docs("github", GITHUB[:1]), _docs("weather", WEATHER)[0]]
    with pytest.raises(ValueError):
        index.replace_server("github", bad, catalog_sha256="c" * 64)
    assert index.servers()["github"] == "a" * 64
    assert len(list(index.docs("github"))) == 3


def test_results_do_not_depend_on_index_order(tmp_path: Path, index: ToolIndex) -> None:
    with ToolIndex.open(tmp_path / "other.db") as other:
        other.replace_server("weather", _docs("weather", WEATHER), catalog_sha256="b" * 64)
        other.replace_server("github", _docs("github", GITHUB), catalog_sha256="a" * 64)
        for query in ("issue", "request city", "code repositories", "get"):
            assert other.search(query, k=10) == index.search(query, k=10)


def test_reopen_keeps_everything(tmp_path: Path, index: ToolIndex) -> None:
    index.close()
    with ToolIndex.open(tmp_path / "tools.db", create=False) as again:
        assert again.servers() == {"github": "a" * 64, "weather": "b" * 64}
        assert [d.fields for d in again.docs("weather")] == [search_fields(WEATHER[0])]


@pytest.mark.parametrize("edit", [
    "UPDATE texts SET refs = refs + 1 WHERE id = (SELECT min(id) FROM texts)",
    "UPDATE definitions SET refs = refs + 1 WHERE id = (SELECT min(id) FROM definitions)",
    # the sum of refs kept, one of them 0 (its tools would outlive it)
    "UPDATE texts SET refs = CASE WHEN id = (SELECT min(id) FROM texts) THEN 0 ELSE refs + 1 END "
    "WHERE id IN (SELECT min(id) FROM texts UNION SELECT max(id) FROM texts)",
    "UPDATE definitions SET refs = CASE WHEN id = (SELECT min(id) FROM definitions) THEN 0 "
    "ELSE refs + 1 END WHERE id IN (SELECT min(id) FROM definitions UNION "
    "SELECT max(id) FROM definitions)",
], ids=["text-refs", "definition-refs", "text-refs-0", "definition-refs-0"])
def test_refs_edited_by_hand_are_refused_by_a_reader_and_rebuilt_by_a_writer(
        tmp_path: Path, index: ToolIndex, edit: str) -> None:
    index.close()
    path = tmp_path / "tools.db"
    with sqlite3.connect(path) as db:
        db.execute(edit)
    db.close()
    with pytest.raises(SearchIndexInconsistentError, match="rows disagree"):
        ToolIndex.open(path, create=False)
    with ToolIndex.open(path) as writer:  # (its derived rows dropped: a build redoes them)
        assert writer.servers() == {} and len(writer) == 0
    with ToolIndex.open(path, create=False) as reader:
        assert reader.search("issue") == []


def test_an_empty_index_is_consistent(tmp_path: Path) -> None:
    ToolIndex.open(tmp_path / "empty.db").close()
    with ToolIndex.open(tmp_path / "empty.db", create=False) as reader:
        assert len(reader) == 0


def test_missing_index_is_named(tmp_path: Path) -> None:
    with pytest.raises(SearchIndexNotFoundError, match="nope.db"):
        ToolIndex.open(tmp_path / "nope.db", create=False)


def test_a_file_that_is_not_an_index(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(SearchIndexError, match="junk.db"):
        ToolIndex.open(path)


@pytest.mark.parametrize("make", [
    ["CREATE TABLE meta (key TEXT, value TEXT)", "INSERT INTO meta VALUES ('schema', '3')"],
    ["CREATE TABLE meta (key TEXT, value)", "INSERT INTO meta VALUES ('schema', 3)",
     "CREATE VIRTUAL TABLE tools_fts USING fts5 (name)"],
], ids=["meta-without-tools_fts", "schema-not-text"])
def test_a_database_that_only_looks_like_an_index_is_refused_as_it_was(
        tmp_path: Path, make: list[str]) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        for statement in make:
            db.execute(statement)
    db.close()
    before = path.read_bytes()
    for create in (False, True):
        with pytest.raises(NotASearchIndexError, match="is not a search index"):
            ToolIndex.open(path, create=create)
    assert path.read_bytes() == before


def test_memory_index() -> None:
    with ToolIndex.open(":memory:") as index:
        index.replace_server("w", _docs("w", WEATHER))
        assert index.servers() == {"w": None}
        assert index.search("city")[0].name == "get_forecast"


def test_tool_docs_lengths_must_agree() -> None:
    with pytest.raises(ValueError):
        tool_docs("s", GITHUB, GITHUB[:1], [None])
    with pytest.raises(ValueError):
        tool_docs("s", GITHUB, GITHUB, [None])


def test_schema_version_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    ToolIndex.open(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    with pytest.raises(SearchIndexError, match="schema 99"):
        ToolIndex.open(path)


def test_ties_are_broken_by_server_and_name_whatever_the_build_order() -> None:
    """40 tools of equal score (more than search's margin): the first k by server, name."""
    tools = {f"s{i:02d}": [{"name": f"t{i:02d}", "description": "a widget"}] for i in range(40)}
    expected = [("s00", "t00"), ("s01", "t01"), ("s02", "t02")]
    for order in (sorted(tools), sorted(tools, reverse=True)):
        with ToolIndex.open(":memory:") as index:
            for server in order:
                index.replace_server(server, tool_docs(server, tools[server], tools[server], [None]))
            hits = index.search("widget", k=3)
            assert [(h.server, h.name) for h in hits] == expected
            assert len({h.score for h in index.search("widget", k=40)}) == 1


@pytest.mark.parametrize("servers", [None, {"a", "b", "c"}], ids=["fast-path", "every-match"])
def test_a_tie_is_broken_by_server_then_name_then_position(servers: set[str] | None) -> None:
    """Equal scores: server first (a/z before b/a), then name, then the catalog's order
    (two tools of one name and text: the first listed first)."""
    tools = {"b": [{"name": "a", "description": "widget"}],
             "a": [{"name": "z", "description": "widget"}, {"name": "m", "description": "widget"}],
             "c": [{"name": "dup", "description": "widget"}, {"name": "dup", "description": "widget"}]}
    with ToolIndex.open(":memory:") as index:
        for server, catalog in tools.items():
            index.replace_server(server, tool_docs(server, catalog, catalog,
                                                   [f"{server}{i}" for i in range(len(catalog))]))
        hits = index.search("widget", k=10, servers=servers)
    assert [(h.server, h.name, h.handle) for h in hits] == [
        ("a", "m", "a1"), ("a", "z", "a0"), ("b", "a", "b0"), ("c", "dup", "c0"), ("c", "dup", "c1")]


def test_the_fast_path_ranks_as_every_match_would(index: ToolIndex) -> None:
    for query in ("issue", "request city", "code repositories", "get", "weather forecast city"):
        for k in (1, 2, 5):
            assert index.search(query, k) == index._hits(match_expression(query), k, None)


def test_a_tie_past_the_margin_ranks_as_every_match_would() -> None:
    """Texts better than a tie of 40 (more than the margin), the tie, and worse ones: the
    tools of the matches scoring as much as the tie are ranked, as every match's would be."""
    tools = {f"s{i:02d}": [{"name": f"t{i:02d}", "description": "a widget"}] for i in range(40)}
    tools |= {f"b{i}": [{"name": f"widget{i}", "description": "a widget"}] for i in range(4)}
    tools |= {f"w{i}": [{"name": f"u{i}", "description": "a widget, " + "and more " * i}]
              for i in range(1, 30)}
    with ToolIndex.open(":memory:") as index:
        for server in sorted(tools, reverse=True):
            index.replace_server(server, tool_docs(server, tools[server], tools[server], [None]))
        for k in (1, 3, 4, 5, 20, 44, 45, 60, 100):
            assert index.search("widget", k) == index._hits(match_expression("widget"), k, None)
        assert [h.server for h in index.search("widget", 6)] == ["b0", "b1", "b2", "b3", "s00",
                                                                 "s01"]


def test_every_hit_is_read_whatever_sqlites_limit_on_variables() -> None:
    """A k past the matches asks for every one: their tools were read in one statement of
    one variable per text, past SQLite's limit (32,766 by default; 999 before 3.32) on an
    index that large ("too many SQL variables"). 1,200 texts, 50 scores, under a limit
    of 999."""
    tools = [{"name": f"t{i:04d}", "description": "widget " + "more " * (i % 50)}
             for i in range(1200)]
    with ToolIndex.open(":memory:") as index:
        index.replace_server("s", tool_docs("s", tools, tools, [None] * len(tools)))
        index._db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        hits = index.search("widget", 2000)
        assert len(hits) == 1200
        assert hits == index._hits(match_expression("widget"), 2000, None)


def _segments(index: ToolIndex) -> int:
    """How many segments an index's FTS5 table has (its 'integrity-check' would say too)."""
    return sum(1 for _ in index._db.execute(
        "SELECT DISTINCT id >> 37 FROM tools_fts_data WHERE id >> 37 > 0"))


def test_a_build_defers_merging_until_its_optimize(tmp_path: Path) -> None:
    """defer_merges: every transaction leaves its own segment (FTS5 merges none as it
    goes); optimize merges them into one and puts FTS5's defaults back. Searches rank
    alike whatever the segments."""
    with ToolIndex.open(tmp_path / "fresh.db") as fresh:
        fresh.replace_server("github", _docs("github", GITHUB), catalog_sha256="a" * 64)
        fresh.replace_server("weather", _docs("weather", WEATHER), catalog_sha256="b" * 64)
        expected = {q: fresh.search(q, k=10) for q in ("issue", "request city", "get")}
    with ToolIndex.open(tmp_path / "built.db") as built:
        built.defer_merges()
        for i in range(6):  # default merging would have merged these 12 transactions' segments
            built.replace_server(f"github{i}", _docs(f"github{i}", GITHUB))
            built.remove_server(f"github{i}")
        built.replace_server("github", _docs("github", GITHUB), catalog_sha256="a" * 64)
        built.replace_server("weather", _docs("weather", WEATHER), catalog_sha256="b" * 64)
        settings = dict(built._db.execute("SELECT k, v FROM tools_fts_config WHERE k LIKE '%merge'"))
        assert settings == {"automerge": 0, "crisismerge": 128}
        assert _segments(built) == 14
        assert {q: built.search(q, k=10) for q in expected} == expected
        built.optimize()
        settings = dict(built._db.execute("SELECT k, v FROM tools_fts_config WHERE k LIKE '%merge'"))
        assert settings == {"automerge": 4, "crisismerge": 16}
        assert _segments(built) == 1
        assert {q: built.search(q, k=10) for q in expected} == expected


# -- storage: texts and definitions once each, schema versions -------------------------

def _rows(index: ToolIndex, table: str) -> int:
    return index._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_a_definition_is_stored_once_however_many_tools_share_it(tmp_path: Path) -> None:
    with ToolIndex.open(tmp_path / "tools.db") as index:
        index.replace_server("a", _docs("a", GITHUB))
        index.replace_server("b", _docs("b", [*GITHUB[:2], GITHUB[0]]))
        assert len(index) == 6
        assert (_rows(index, "definitions"), _rows(index, "texts")) == (3, 3)
        index.remove_server("a")
        assert [d.definition for d in index.docs("b")] == [d.definition for d in
                                                           _docs("b", [*GITHUB[:2], GITHUB[0]])]
        assert (_rows(index, "definitions"), _rows(index, "texts")) == (2, 2)
        assert [h.name for h in index.search("pull request")] == ["getPullRequest"]
        index.remove_server("b")
        assert (_rows(index, "definitions"), _rows(index, "texts"), _rows(index, "tools_fts")) \
            == (0, 0, 0)


def test_tools_of_one_text_keep_their_own_definitions(tmp_path: Path) -> None:
    """The same search text (original) compressed two ways: each tool returns its own."""
    with ToolIndex.open(tmp_path / "tools.db") as index:
        short = {**WEATHER[0], "description": "Forecast."}
        index.replace_server("w", tool_docs("w", WEATHER * 2, [WEATHER[0], short], [None, None]))
        hits = index.search("forecast city", k=5)
        assert sorted(h.definition for h in hits) == sorted(
            [d.definition for d in tool_docs("w", WEATHER * 2, [WEATHER[0], short], [None] * 2)])
        assert (_rows(index, "definitions"), _rows(index, "texts")) == (2, 1)


def test_another_writer_between_two_changes_is_seen(tmp_path: Path) -> None:
    """A writer keeps digests' ids in memory: another connection's commit (which deleted the
    rows they named) must be read, not the stale map trusted."""
    with ToolIndex.open(tmp_path / "tools.db") as first, \
            ToolIndex.open(tmp_path / "tools.db") as second:
        first.replace_server("a", _docs("a", GITHUB))
        second.remove_server("a")
        second.replace_server("w", _docs("w", WEATHER))
        first.replace_server("b", _docs("b", GITHUB))
        assert [d.definition for d in first.docs("b")] == [d.definition
                                                           for d in _docs("b", GITHUB)]
        assert [h.server for h in second.search("forecast", k=5)] == ["w"]
        assert [h.server for h in second.search("pull request", k=5)] == ["b"]


@pytest.mark.parametrize("hybrid", [False, True], ids=["bm25", "hybrid"])
def test_a_search_sees_one_state_of_the_index_whatever_commits_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hybrid: bool) -> None:
    """Another connection replaces a server between the search's first read (the texts'
    ids and scores) and its next: the hits are the state the first read saw. Before, the
    deleted text's id, given to the new text, joined the score of `weather` to a tool that
    has nothing of it."""
    def doc(server: str, name: str, description: str) -> ToolDoc:
        return ToolDoc(server, name, None, f'{{"name":"{name}"}}',
                       {"name": name, "description": description, "params": ""})

    if hybrid:
        pytest.importorskip("wordllama")
    embedder = None
    if hybrid:
        from caveman_batch.embedding import choose_embedder
        embedder = choose_embedder(True)
    path = tmp_path / "tools.db"
    with ToolIndex.open(path, embedder=embedder) as writer, \
            ToolIndex.open(path, create=False, embedder=embedder) as reader:
        writer.replace_server("a", [doc("a", "alpha", "filler text")])
        writer.replace_server("b", [doc("b", "weather_tool", "weather forecast for a city")])
        read = reader._read
        raced: list[int] = []

        def racing_read(sql: str, params: Any = ()) -> list[Any]:
            rows = read(sql, params)
            if not raced:  # right after the first read: a writer's commit lands
                raced.append(1)
                writer.replace_server("b", [doc("b", "drop_all", "drops every table")])
            return rows

        monkeypatch.setattr(reader, "_read", racing_read)
        names = [h.name for h in reader.search("weather", k=5)]  # (hybrid: alpha after it)
        assert names[0] == "weather_tool" and "drop_all" not in names
        monkeypatch.setattr(reader, "_read", read)
        names = [h.name for h in reader.search("weather", k=5)]  # the new state, after
        assert "weather_tool" not in names and (hybrid or names == [])


def test_a_change_rolled_back_leaves_no_ids_behind(tmp_path: Path) -> None:
    with ToolIndex.open(tmp_path / "tools.db") as index:
        docs = _docs("a", GITHUB)
        with pytest.raises(SearchIndexError):  # the files table refuses a missing sha256
            index.apply([("a", docs, None, None, None)],
                        files={"a.json": None})  # type: ignore[dict-item]
        assert len(index) == 0
        index.apply([("a", docs, None, None, None)])
        assert [d.definition for d in index.docs()] == [d.definition for d in docs]
        assert index.search("pull request", k=1)[0].name == "getPullRequest"


def test_a_current_index_opens_while_a_writer_holds_its_lock(tmp_path: Path,
                                                            index: ToolIndex) -> None:
    """Opening an index whose schema is current writes nothing, so it does not wait for a
    build's transaction (without: 'database is locked' after the 5 s busy timeout)."""
    writer = sqlite3.connect(tmp_path / "tools.db", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM servers WHERE server = 'weather'")  # not committed
        with ToolIndex.open(tmp_path / "tools.db", create=False) as reader:
            assert sorted(reader.servers()) == ["github", "weather"]
            assert reader.search("forecast", k=1)[0].server == "weather"
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_reader_of_an_older_index_is_told_to_rebuild_it(schema_2_index: Path) -> None:
    path = schema_2_index
    with pytest.raises(SearchIndexError, match=r"schema 2, this version reads \d+: rebuild it "
                                               r"with `caveman-batch compress --index`"):
        ToolIndex.open(path, create=False)
    with sqlite3.connect(path) as db:  # left as it was
        assert db.execute("SELECT value FROM meta").fetchall() == [("2",)]
        assert db.execute("SELECT name FROM tools").fetchall() == [("old_tool",)]
    db.close()


def test_a_writer_rebuilds_an_older_index_from_scratch(schema_2_index: Path) -> None:
    path = schema_2_index
    with ToolIndex.open(path) as index:
        assert index.servers() == {} and len(index) == 0 and index.search("old tool") == []
        index.replace_server("github", _docs("github", GITHUB), catalog_sha256="a" * 64)
    with ToolIndex.open(path, create=False) as index:
        assert index.servers() == {"github": "a" * 64}
        assert index.search("open a new issue", k=1)[0].name == "create_issue"
        tables = {row[0] for row in index._db.execute(
            "SELECT name FROM sqlite_schema WHERE type='table'")}
        assert {"definitions", "tools", "tools_fts", "texts"} <= tables
        columns = {row[1] for row in index._db.execute("PRAGMA table_info(tools)")}
        assert "definition" not in columns and "definition_id" in columns
