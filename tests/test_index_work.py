"""What a worker computes per document for the index (indexing.BatchWork): the same as
its definition, toolspans.index_entries with each tool's record made by ccr.prepare_span."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from caveman_batch import ccr, indexing, toolspans
from caveman_batch.catalog import compress_located
from caveman_batch.toolspans import index_entries

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from test_catalog_properties import catalogs, encoded  # noqa: E402
from test_toolspans import LAW  # noqa: E402

_STAMPS = slice(16, 32)  # a record header's first-stored and last-seen times


def _unstamped(value: bytes) -> bytes:
    return value[:_STAMPS.start] + value[_STAMPS.stop:]


def _expected(raw: bytes, out: bytes, digest: str) -> indexing.WorkerTools:
    """BatchWork's output for one document, from its definition."""
    found = index_entries(raw, out)
    if found is None:
        return None
    label, entries = found
    tools = []
    for entry in entries:
        sha = hashlib.sha256(entry.original).hexdigest()
        record = ccr.prepare_span(sha, len(entry.original), digest, entry.start)
        tools.append((entry.name, sha, _unstamped(record.value), record.original_length,
                      entry.definition, entry.fields))
    return label, tools


def _worked(raws: list[bytes], later: bool = False, left: list[int] | None = None) -> list[Any]:
    """BatchWork's output for these documents, as the pipeline's worker feeds it; `later`:
    with the tools it leaves for the index's writer (counted in `left`) built as it builds
    them (toolspans.built_tools)."""
    work = indexing.BatchWork(later)
    for raw in raws:
        out, result, located = compress_located(raw)
        work.add(None if result.broken else raw, out, ccr.digest_of(raw), located)
    done = work.finish()
    if left is not None:
        left.append(sum(1 for doc in done if doc is not None
                        and isinstance(doc[1], toolspans.LocatedTools)))
    return [None if doc is None else
            (doc[0], [(n, d, _unstamped(v), length, de, f)
                      for n, d, v, length, de, f in toolspans.built_tools(doc[1])])
            for doc in done]


def _check(raws: list[bytes], left: list[int] | None = None) -> int:
    """BatchWork of `raws` (its cache empty, then full; its tools built here, or left for
    the index's writer and built there) is their definition's; the tools."""
    expected = []
    for raw in raws:
        out, result, _ = compress_located(raw)
        expected.append(None if result.broken else _expected(raw, out, ccr.digest_of(raw)))
    indexing.clear_cache()
    assert _worked(raws) == expected
    assert _worked(raws) == expected  # every tool's text known already
    indexing.clear_cache()
    assert _worked(raws, later=True, left=left) == expected
    return sum(len(doc[1]) for doc in expected if doc is not None)


def test_every_corpus_catalog(corpora: Path) -> None:
    raws = [path.read_bytes() for path in sorted(corpora.rglob("*.json"))]
    left: list[int] = []
    assert _check(raws, left) > 8000
    assert left[0] > 700  # most documents' tools were left for the writer


def test_a_passthrough_or_a_document_compress_did_not_locate_is_built_here() -> None:
    """Only tools located by compress in a document it changed are left to build later."""
    tool = b'{"name":"get_issue","description":"Gets one.","inputSchema":{}}'
    changed = b'{"tools": [\n  ' + tool + b"\n]}"  # (minified: the output is not the input)
    kept = b'{"tools":[' + tool + b"]}"  # nothing to cut: the output is the input
    bom = b"\xef\xbb\xbf" + changed  # compressed by the Python path: not located
    left: list[int] = []
    for raw in (changed, kept, bom):
        _worked([raw], later=True, left=left)
    assert compress_located(kept)[0] == kept and compress_located(changed)[0] != changed
    assert compress_located(bom)[2] is None
    assert left == [1, 0, 0]
    _check([changed, kept, bom])


def test_a_registry_repeating_its_tools() -> None:
    tool = b'{"name":"getPullRequest_v2","description":"Gets one.","inputSchema":{}}'
    raws = [b'{"server":"a","tools":[' + tool + b"]}", b'{"tools":[' + tool + b"," + tool + b"]}",
            b'{"tools":[' + tool.replace(b"one", b"two") + b"]}"]
    assert _check(raws) == 4


@LAW
@given(st.lists(encoded(catalogs()), min_size=1, max_size=3))
def test_random_catalogs(raws: list[bytes]) -> None:
    _check(raws)  # (with its tools built later too)


@LAW
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=4),
       st.sampled_from(["application/json", "text/plain", "x" * 300]),
       st.integers(0, 2**64 - 1))
def test_span_values_are_span_records(spans: list[tuple[int, int]], content_type: str,
                                      stamp: int) -> None:
    whole = ccr.digest_of(b"the catalog")
    assert ccr.span_values(whole, spans, content_type, now_ms=stamp) == [
        ccr.encode_record(length, content_type, stamp, stamp,
                          ccr._SPAN.pack(whole.encode("ascii"), offset), ccr.CODEC_SPAN)
        for length, offset in spans]
