"""Tool search: query latency over 10,000 tools, the cost of `compress --index`, retrieval.

    python -m pytest benchmarks/test_bench_search.py --benchmark-enable --benchmark-only -s

- search: BM25 (FTS5) over an index of 10,000 tools of the seeded bench registry (seed
  1234), built through `compress --index`; one search of 5 hits per round, queries drawn
  from the same words (seeded), every round a different query. Target: p50 < 5 ms.
  The same over BM25 + dense vectors when the embed extra is installed (no target), and
  BM25 over the 50 MB registry's ~50,000 tools (no target).
- index cost: `compress` of the seeded 50 MB JSONL registry (2 MB when benchmarks are
  disabled), 1 worker, caches cold, with and without `--index` (BM25 alone: `--no-embed`),
  timed in alternating pairs; the figure is the median of the pairs' ratios. Target: <= 1.25.
  The same, hybrid (the embed extra installed; no target).
- retrieval: LiveMCPBench's 94 annotated tasks against its 527 tools (skipped without
  ../shared/corpora): recall@1/5/10 and MRR, original and compressed search text.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench_data import livemcpbench
from bench_data.generate import generate_registry
from caveman_batch import describe, indexing, tokens
from caveman_batch.embedding import EMBED_EXTRA_HINT, extra_installed, load_embedder
from caveman_batch.pipeline import Config, Summary, run
from caveman_batch.searcheval import compare_original, read_queries
from caveman_batch.toolsearch import ToolIndex

MB = 1_000_000
CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
QUERY_WORDS = ("list open issues in a repository", "create an invoice refund for a customer",
               "delete a deployment", "search messages in a channel", "get the backup snapshot",
               "update a user role permission", "export dashboard metrics", "merge pull request",
               "archive old records in a table", "sync stock of a warehouse item")


@pytest.fixture(scope="module")
def search_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index of at least 10,000 tools from the seeded registry, built by the pipeline."""
    root = tmp_path_factory.mktemp("search-bench")
    src = root / "reg.jsonl"
    generate_registry(None, seed=1234, jsonl=src, target_bytes=12 * MB, oversize_bytes=0)
    run(Config([str(src)], root / "out", f"lmdb://{root / 'ccr'}", workers=1,
               index=root / "idx.db", embed=None))  # vectors too if the extra is installed
    return root / "idx.db"


def test_search_p50_over_10000_tools(benchmark: BenchmarkFixture, search_index: Path) -> None:
    with ToolIndex.open(search_index, create=False) as index:
        _time_searches(benchmark, index)


@pytest.fixture(scope="module")
def large_search_index(tmp_path_factory: pytest.TempPathFactory, benchmarks_enabled: bool,
                       search_index: Path) -> Path:
    """A BM25 index of the seeded 50 MB registry (~50,000 tools, whose servers share tools:
    most searches tie past the margin); when benchmarks are disabled, the 10,000 tools'."""
    if not benchmarks_enabled:
        return search_index
    root = tmp_path_factory.mktemp("large-search-bench")
    src = root / "reg.jsonl"
    generate_registry(None, seed=1234, jsonl=src, target_bytes=50 * MB, oversize_bytes=0)
    run(Config([str(src)], root / "out", f"lmdb://{root / 'ccr'}", workers=1,
               index=root / "idx.db", embed=False))
    return root / "idx.db"


def test_search_p50_over_50000_tools(benchmark: BenchmarkFixture, large_search_index: Path) -> None:
    """No target: how the BM25 search scales (FTS5 scores every match of a query's words)."""
    with ToolIndex.open(large_search_index, create=False) as index:
        _time_searches(benchmark, index)


@pytest.mark.skipif(not extra_installed(), reason=f"embed extra not installed: {EMBED_EXTRA_HINT}")
def test_hybrid_search_p50_over_10000_tools(benchmark: BenchmarkFixture, search_index: Path) -> None:
    with ToolIndex.open(search_index, create=False, embedder=load_embedder(required=True)) as index:
        _time_searches(benchmark, index)


def _time_searches(benchmark: BenchmarkFixture, index: ToolIndex) -> None:
    """Seeded queries of 2-8 of the query words, one search of 5 hits a round."""
    rng = random.Random(1234)
    words = " ".join(QUERY_WORDS).split()
    queries = [" ".join(rng.sample(words, rng.randint(2, 8))) for _ in range(500)] + list(QUERY_WORDS)
    assert len(index) >= 10_000
    turn = iter(queries * 1000)
    hits = benchmark.pedantic(lambda: index.search(next(turn), 5), rounds=len(queries),
                              iterations=1, warmup_rounds=20)
    assert len(hits) == 5
    if getattr(benchmark, "stats", None) is not None:
        stats = benchmark.stats.stats
        benchmark.extra_info["tools"] = len(index)
        benchmark.extra_info["p50_ms"] = round(stats.median * 1e3, 3)
        benchmark.extra_info["max_ms"] = round(stats.max * 1e3, 3)


def _cold() -> None:
    """A new process's caches, as test_bench_pipeline has them (the index's too)."""
    describe._reduce_cached.cache_clear()
    counter = tokens._fast()
    if counter is not None:
        counter.cache_clear()
    indexing.clear_cache()


def _timed(src: Path, work: Path, index: bool, embed: bool = False) -> tuple[Summary, float]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.sync()
    _cold()
    started = time.perf_counter()
    summary = run(Config([str(src)], work / "out", f"lmdb://{work / 'ccr'}", workers=1,
                         index=work / "idx.db" if index else None, embed=embed))
    return summary, time.perf_counter() - started


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, benchmarks_enabled: bool) -> Path:
    """The seeded bench registry: 50 MB (2 MB when benchmarks are disabled)."""
    src = tmp_path_factory.mktemp("registry") / "reg.jsonl"
    generate_registry(None, seed=1234, jsonl=src, target_bytes=(50 if benchmarks_enabled else 2) * MB,
                      oversize_bytes=0)
    return src


def test_index_overhead(benchmark: BenchmarkFixture, tmp_path_factory: pytest.TempPathFactory,
                        benchmarks_enabled: bool, registry: Path) -> None:
    _overhead(benchmark, tmp_path_factory.mktemp("index-cost"), benchmarks_enabled, registry,
              embed=False)


@pytest.mark.skipif(not extra_installed(), reason=f"embed extra not installed: {EMBED_EXTRA_HINT}")
def test_hybrid_index_overhead(benchmark: BenchmarkFixture,
                               tmp_path_factory: pytest.TempPathFactory,
                               benchmarks_enabled: bool, registry: Path) -> None:
    """The same with the embed extra (what `compress --index` does when it is installed);
    no target."""
    _overhead(benchmark, tmp_path_factory.mktemp("hybrid-index-cost"), benchmarks_enabled,
              registry, embed=True)


def _overhead(benchmark: BenchmarkFixture, root: Path, benchmarks_enabled: bool, src: Path,
              embed: bool) -> None:
    ratios: list[float] = []
    seconds: list[tuple[float, float]] = []

    def pair() -> Summary:
        _, plain = _timed(src, root / "plain", False)
        summary, indexed = _timed(src, root / "indexed", True, embed)
        ratios.append(indexed / plain)
        seconds.append((plain, indexed))
        return summary

    summary = benchmark.pedantic(pair, rounds=5 if benchmarks_enabled else 1, iterations=1)
    assert summary.documents > 0
    with ToolIndex.open(root / "indexed" / "idx.db", create=False,
                        embedder=load_embedder(required=True) if embed else None) as index:
        assert len(index) > 0
    if getattr(benchmark, "stats", None) is not None:
        benchmark.extra_info["ratios"] = [round(r, 2) for r in ratios]
        benchmark.extra_info["median_ratio"] = round(statistics.median(ratios), 2)
        benchmark.extra_info["seconds_plain_indexed"] = [round(statistics.median(s), 2)
                                                         for s in zip(*seconds)]


def test_livemcpbench_retrieval(benchmark: BenchmarkFixture, tmp_path: Path) -> None:
    bench = CORPORA / "livemcpbench"
    if not bench.is_dir():
        pytest.skip(f"shared corpora not present at {CORPORA}")
    run(Config([str(bench / "catalogs")], tmp_path / "out", f"lmdb://{tmp_path / 'ccr'}",
               workers=1, index=tmp_path / "idx.db", embed=False))  # the target: BM25 alone
    queries = read_queries(livemcpbench.write_queries(bench, tmp_path / "q.jsonl"))
    with ToolIndex.open(tmp_path / "idx.db", create=False) as index:
        report = benchmark.pedantic(compare_original, args=(index, queries), rounds=1, iterations=1)
    assert report["original"]["recall@10"] >= 0.45
    if getattr(benchmark, "stats", None) is not None:
        benchmark.extra_info.update({f"original_{k}": v for k, v in report["original"].items()})
        benchmark.extra_info.update({f"compressed_{k}": v for k, v in report["compressed"].items()})
    print(report, file=sys.stderr)
