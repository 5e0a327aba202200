"""`compress --executor`: a Dask cluster's throughput next to the local process pool's.

    python -m pytest benchmarks/test_bench_executor.py --benchmark-enable --benchmark-only -s

Input: bench_data JSONL (seed 1234) of 50 MB (2 MB when benchmarks are disabled, as a smoke
test), everything a real run does included. The pool and a Dask LocalCluster of as many
one-thread workers (started once, outside the timing, as a fleet's scheduler is) are timed
in alternation, pair by pair, so the machine's drift falls on both alike; the figure is the
median of the pairs' ratios (Dask's seconds over the pool's). The cluster's start-up is
timed apart.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench_data.generate import generate_registry
from caveman_batch import describe, tokens
from caveman_batch.pipeline import Config, Summary, run
from caveman_batch.pipeline.executors import _NO_DASHBOARD

MB = 1_000_000
WORKERS = 2


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, benchmarks_enabled: bool) -> Path:
    megabytes = 50 if benchmarks_enabled else 2
    path = tmp_path_factory.mktemp("executor-bench") / f"bench-{megabytes}.jsonl"
    generate_registry(None, seed=1234, jsonl=path, target_bytes=megabytes * MB, oversize_bytes=0)
    return path


@pytest.fixture(scope="module")
def scheduler() -> Iterator[tuple[str, float]]:
    """A LocalCluster's address, and how long it took to start."""
    distributed = pytest.importorskip("distributed")
    started = time.perf_counter()
    with distributed.LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                                  dashboard_address=None, scheduler_kwargs=_NO_DASHBOARD) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(WORKERS)
        yield str(cluster.scheduler_address), time.perf_counter() - started


def _cold() -> None:
    """The parent's caches emptied, as a new process has them (see test_bench_pipeline)."""
    describe._reduce_cached.cache_clear()
    counter = tokens._fast()
    if counter is not None:
        counter.cache_clear()


def _timed(src: Path, work: Path, executor: str) -> tuple[Summary, float]:
    shutil.rmtree(work, ignore_errors=True)
    _cold()
    started = time.perf_counter()
    summary = run(Config([str(src)], work / "out", f"lmdb://{work / 'ccr'}", workers=WORKERS,
                         executor=executor))
    return summary, time.perf_counter() - started


def test_dask_vs_pool_throughput(benchmark: BenchmarkFixture, registry: Path, tmp_path: Path,
                                 scheduler: tuple[str, float], benchmarks_enabled: bool) -> None:
    address, start_up = scheduler
    pairs = 3 if benchmarks_enabled else 1
    ratios: list[float] = []
    rates: dict[str, list[float]] = {"pool": [], "dask": []}
    size = registry.stat().st_size

    def pair() -> Summary:
        _, pool_s = _timed(registry, tmp_path / "pool", "local")
        summary, dask_s = _timed(registry, tmp_path / "dask", address)
        ratios.append(dask_s / pool_s)
        rates["pool"].append(size / pool_s / MB)
        rates["dask"].append(size / dask_s / MB)
        return summary

    summary = benchmark.pedantic(pair, rounds=pairs, iterations=1)
    assert summary.documents > 0 and summary.tokens_after < summary.tokens_before
    info: dict[str, Any] = {
        "dask_over_pool_seconds": [round(r, 2) for r in ratios],
        "median_ratio": round(statistics.median(ratios), 2),
        "MB_per_s_pool": round(statistics.median(rates["pool"]), 2),
        "MB_per_s_dask": round(statistics.median(rates["dask"]), 2),
        "cluster_start_s": round(start_up, 2),
    }
    if getattr(benchmark, "stats", None) is not None:
        benchmark.extra_info.update(info)
        print(f"\nexecutor {WORKERS} workers, {size / MB:.0f} MB: {info}")
