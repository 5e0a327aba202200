"""What a worker computes per document for the index (indexing.BatchWork): the same as
its definition, toolspans.index_entries with each tool's record made by ccr.prepare_span."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from caveman_batch import ccr, indexing
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


def _worked(raws: list[bytes]) -> list[Any]:
    """BatchWork's output for these documents, as the pipeline's worker feeds it."""
    work = indexing.BatchWork()
    for raw in raws:
        out, result, located = compress_located(raw)
        work.add(None if result.broken else raw, out, ccr.digest_of(raw), located)
    return [None if doc is None else
            (doc[0], [(n, d, _unstamped(v), length, de, f) for n, d, v, length, de, f in doc[1]])
            for doc in work.finish()]


def _check(raws: list[bytes]) -> int:
    """BatchWork of `raws` (its cache empty, then full) is their definition's; the tools."""
    expected = []
    for raw in raws:
        out, result, _ = compress_located(raw)
        expected.append(None if result.broken else _expected(raw, out, ccr.digest_of(raw)))
    indexing.clear_cache()
    assert _worked(raws) == expected
    assert _worked(raws) == expected  # every tool's text known already
    return sum(len(doc[1]) for doc in expected if doc is not None)


def test_every_corpus_catalog(corpora: Path) -> None:
    raws = [path.read_bytes() for path in sorted(corpora.rglob("*.json"))]
    assert _check(raws) > 8000


def test_a_registry_repeating_its_tools() -> None:
    tool = b'{"name":"getPullRequest_v2","description":"Gets one.","inputSchema":{}}'
    raws = [b'{"server":"a","tools":[' + tool + b"]}", b'{"tools":[' + tool + b"," + tool + b"]}",
            b'{"tools":[' + tool.replace(b"one", b"two") + b"]}"]
    assert _check(raws) == 4


@LAW
@given(st.lists(encoded(catalogs()), min_size=1, max_size=3))
def test_random_catalogs(raws: list[bytes]) -> None:
    _check(raws)


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
