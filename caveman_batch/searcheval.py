"""`eval search`: retrieval quality of a tool index, measured on labelled queries.

QUERIES.jsonl has one query a line, {"query": "...", "tools": ["name" or "server/name", ...]}.
Each query is searched for its first DEPTH hits. recall@k is the share of its expected
tools found in the first k hits, MRR the reciprocal rank of the first hit that is an
expected tool (0 if none in the first DEPTH); both averaged over the queries.

An expected "server/name" (split at the last "/" whose left is a server the index knows)
must be that tool of that server; otherwise the whole string is a tool name, found in any
server.

`compare_original`: the index's search text is built from each tool's original object;
the same queries are run again over an index, in memory, whose search text is built from
each tool's compressed definition instead (same engine, same weights). The difference is
what the compressor's cuts cost search.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .errors import QueryFileError, SearchIndexInconsistentError
from .toolsearch import Hit, ToolDoc, ToolIndex, search_fields
from .toolspans import replace_surrogates

DEPTH: Final = 10
CUTOFFS: Final = (1, 5, 10)


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    tools: tuple[str, ...]


def read_queries(path: Path) -> list[Query]:
    """Every query of a QUERIES.jsonl file; a bad line is an error naming file and line."""
    try:
        # lines end at "\n" (and a "\r" before it goes): a lone "\r" is JSON white space,
        # and splitlines() would split a valid line there and count lines an editor does not
        lines = [line.removesuffix(b"\r") for line in path.read_bytes().split(b"\n")]
    except OSError as exc:
        raise QueryFileError(f"{path}: cannot read: {exc.strerror or exc}", str(path)) from None
    queries = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            queries.append(_query(line, path, number))
    if not queries:
        raise QueryFileError(f"{path}: no queries", str(path))
    return queries


def _query(line: bytes, path: Path, number: int) -> Query:
    def bad(why: str) -> QueryFileError:
        return QueryFileError(f"{path}, line {number}: {why}", str(path), number)

    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"not JSON ({exc})") from None
    except RecursionError:
        raise bad("not JSON (nested too deep)") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("query"), str):
        raise bad('expected {"query": "...", "tools": [...]}')
    tools = obj.get("tools")
    if (not isinstance(tools, list) or not tools
            or not all(isinstance(t, str) and t for t in tools)):
        raise bad('"tools" must be a non-empty list of tool names')
    return Query(obj["query"], tuple(dict.fromkeys(tools)))


Matcher = Callable[[Hit], bool]


def _matcher(spec: str, servers: set[str]) -> Matcher:
    # split at the last "/" whose left is a server: a tool name may hold "/" too
    # (MCP's SEP-986 allows it), as catalog ids do ("team/chat")
    at = spec.rfind("/")
    while at > 0:
        server, name = spec[:at], spec[at + 1:]
        if server in servers:
            return lambda hit: hit.server == server and hit.name == name
        at = spec.rfind("/", 0, at)
    return lambda hit: hit.name == spec


def scores(hits: Sequence[Hit], expected: Sequence[str], servers: set[str]) -> dict[str, float]:
    """recall@k for CUTOFFS and the reciprocal rank of one query's hits."""
    matchers = [_matcher(spec, servers) for spec in expected]
    found_at = [next((rank for rank, hit in enumerate(hits, 1) if match(hit)), None)
                for match in matchers]
    out = {f"recall@{k}": sum(1 for r in found_at if r is not None and r <= k) / len(expected)
           for k in CUTOFFS}
    first = min((r for r in found_at if r is not None), default=None)
    out["mrr"] = 1.0 / first if first is not None else 0.0
    return out


def evaluate(index: ToolIndex, queries: Sequence[Query]) -> dict[str, Any]:
    """{"queries", "recall@1", "recall@5", "recall@10", "mrr"}, averaged over the queries."""
    servers = set(index.servers())
    totals = dict.fromkeys([f"recall@{k}" for k in CUTOFFS] + ["mrr"], 0.0)
    for query in queries:
        for key, value in scores(index.search(query.text, DEPTH), query.tools, servers).items():
            totals[key] += value
    report: dict[str, Any] = {"queries": len(queries)}
    report.update({key: round(value / len(queries), 4) for key, value in totals.items()})
    return report


def compressed_copy(index: ToolIndex) -> ToolIndex:
    """The index in memory, its search text built from each tool's compressed definition."""
    copy = ToolIndex.open(":memory:", embedder=index.embedder)
    servers = index.servers()
    by_server: dict[str, list[ToolDoc]] = {}
    for doc in index.docs():
        fields = {key: replace_surrogates(text)  # (as the build has them: toolspans)
                  for key, text in search_fields(_definition(index, doc)).items()}
        by_server.setdefault(doc.server, []).append(
            ToolDoc(doc.server, doc.name, doc.handle, doc.definition, fields))
    copy.apply((server, docs, servers.get(server), None, None) for server, docs in by_server.items())
    return copy


def _definition(index: ToolIndex, doc: ToolDoc) -> dict[str, Any]:
    """A tool's compressed definition, parsed: what a build wrote is always a JSON object,
    so anything else is a row edited by hand, refused as the reader refuses rows that
    disagree (naming the tool, not a traceback)."""
    try:
        tool = json.loads(doc.definition)
    except (ValueError, TypeError) as exc:  # (not JSON text, bytes of no UTF, NULL)
        problem = f"not JSON ({exc})"
    else:
        if isinstance(tool, dict):
            return tool
        problem = f"a JSON {type(tool).__name__}, not an object"
    raise SearchIndexInconsistentError(
        f"search index {index.location}: the compressed definition of "
        f"{json.dumps(f'{doc.server}/{doc.name}')} "
        f"is {problem} (edited by hand?): rebuild it with `caveman-batch compress --index`")


def compare_original(index: ToolIndex, queries: Sequence[Query]) -> dict[str, Any]:
    """The same queries over original and compressed search text, and the difference."""
    original = evaluate(index, queries)
    with compressed_copy(index) as copy:
        compressed = evaluate(copy, queries)
    delta = {key: round(compressed[key] - original[key], 4) for key in original if key != "queries"}
    return {"queries": len(queries), "original": original, "compressed": compressed,
            "delta": delta}
