"""`compress` end to end: throughput per worker count, the incremental rerun, peak memory.

    python -m pytest benchmarks/test_bench_pipeline.py --benchmark-enable --benchmark-only

Input: bench_data JSONL (seed 1234) of 50 MB (2 MB when benchmarks are disabled, as a
smoke test); for the directory rerun, the same generator's registry tree (seed 1234, one
file per catalog, the quirk files included) of about the same size. Everything a real run does is included: reading, parsing, compressing,
exact o200k token counts before and after, sha256, zstd, LMDB commits (fsync'd) and
atomic publication. MB/s is of input bytes (1 MB = 10**6 B) at the median round.

Trees of many small catalogs (`-k small_tree`): the real corpora's 828 catalogs copied 20
times (16,560 pretty-printed files, 110 MB; skipped when ../shared/corpora is absent) and a
seeded generated tree of the same shape (small catalogs, at most 6 tools each, 110 MB); 200
files of each as a smoke test. Such a run spends much of its time in the kernel making
files and folders, so its figures depend on the file system under pytest's temp folder;
`--basetemp` says where it is (inputs, OUT and store all go there), e.g. on tmpfs:

    python -m pytest benchmarks/test_bench_pipeline.py --benchmark-enable --benchmark-only -s \
        -k small_tree --basetemp=/dev/shm/bench-small-tree

and on the disk with `--basetemp=/tmp/bench-small-tree` (ext4 here). `-k small_tree_scaling`
also gives the CPU seconds (user + system, the workers included) of each worker count at
its median.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench_data.generate import generate_registry
from caveman_batch import ccr, describe, fsio, tokens
from caveman_batch.catalog import Options, compress
from caveman_batch.pipeline import Config, Summary, run

MB = 1_000_000
CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
_NO_TOKENS = Options(count_tokens=False)


def _jsonl(root: Path, megabytes: float) -> Path:
    path = root / f"bench-{megabytes:g}.jsonl"
    if not path.exists():
        generate_registry(None, seed=1234, jsonl=path, target_bytes=int(megabytes * MB),
                          oversize_bytes=0)
    return path


def _tree(root: Path, megabytes: float) -> Path:
    path = root / f"bench-{megabytes:g}"
    if not path.exists():
        generate_registry(path, seed=1234, target_bytes=int(megabytes * MB), oversize_bytes=0)
    return path


def _corpora_tree(root: Path, copies: int, limit: int | None = None) -> Path:
    """The corpora's catalog files copied `copies` times, each copy in its own folder, as
    they are (mostly pretty-printed): one small catalog per server."""
    path = root / f"corpora-x{copies}-{limit}"
    if not path.exists():
        files = sorted(CORPORA.glob("*/catalogs/*.json"))[:limit]
        for copy in range(copies):
            for file in files:
                target = path / f"copy-{copy:02d}" / file.parent.parent.name / file.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, target)
    return path


def _generated_tree(root: Path, megabytes: float, limit: int | None = None) -> Path:
    """The generator's tree with small catalogs (at most 6 tools each, pretty-printed or
    not as the generator's shapes are), cut to its first `limit` files."""
    path = root / f"small-{megabytes:g}-{limit}"
    if not path.exists():
        generate_registry(path, seed=1234, target_bytes=int(megabytes * MB), oversize_bytes=0,
                          max_tools=6)
        if limit is not None:
            for file in sorted(p for p in path.rglob("*") if p.is_file())[limit:]:
                file.unlink()
    return path


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline-bench")


@pytest.fixture(scope="session")
def registry(data_dir: Path, benchmarks_enabled: bool) -> Path:
    return _jsonl(data_dir, 50 if benchmarks_enabled else 2)


@pytest.fixture(scope="session")
def registry_tree(data_dir: Path, benchmarks_enabled: bool) -> Path:
    return _tree(data_dir, 50 if benchmarks_enabled else 2)


@pytest.fixture(scope="session", params=["corpora", "generated"])
def small_tree(request: pytest.FixtureRequest, data_dir: Path, benchmarks_enabled: bool) -> Path:
    """A tree of many small catalog files, settled (as a nightly run sees it)."""
    limit = None if benchmarks_enabled else 200
    if request.param == "corpora":
        if not CORPORA.is_dir():
            pytest.skip(f"shared corpora not present at {CORPORA}")
        tree = _corpora_tree(data_dir, 20 if benchmarks_enabled else 1, limit)
    else:
        tree = _generated_tree(data_dir, 110 if benchmarks_enabled else 2, limit)
    _wait_until_settled(tree)
    return tree


def _cold() -> None:
    """Empty the per-process caches (description reductions, token counts) as a new process
    has them: every run is timed as a first run in its own process would be (forked
    workers inherit the parent's caches, so the parent's are emptied too)."""
    describe._reduce_cached.cache_clear()
    counter = tokens._fast()
    if counter is not None:
        counter.cache_clear()


def _clean(work: Path) -> None:
    """An empty work folder and nothing left to write back on the file system (untimed): the
    run's fsyncs (store commits, manifest) then wait for its own writes, not for the
    generated input or the last round's."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.sync()


def _wait_until_settled(source: Path) -> None:
    files = [source] if source.is_file() else [p for p in source.rglob("*") if p.is_file()]
    newest = max(p.stat().st_ctime_ns for p in files)
    time.sleep(max(0.0, (newest + fsio.SETTLE_NS - time.time_ns()) / 1e9 + 0.05))


def _fresh_run(src: Path, work: Path, workers: int, incremental: bool = False,
               checksum: bool = False) -> Summary:
    _cold()
    return run(Config([str(src)], work / "out", f"lmdb://{work / 'ccr'}", workers=workers,
                      incremental=incremental, checksum=checksum))


@pytest.mark.parametrize("workers", [1, 2])
def test_compress_end_to_end(benchmark: BenchmarkFixture, registry: Path, tmp_path: Path,
                             workers: int, benchmarks_enabled: bool) -> None:
    rounds = 3 if benchmarks_enabled else 1
    work = tmp_path / "w"

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        _clean(work)
        return (registry, work, workers), {}

    summary = benchmark.pedantic(_fresh_run, setup=setup, rounds=rounds, iterations=1)
    assert summary.documents > 0 and summary.tokens_after < summary.tokens_before
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["MB_per_s"] = round(registry.stat().st_size / stats.stats.median / MB, 2)


def test_two_workers_scaling(benchmark: BenchmarkFixture, registry: Path, tmp_path: Path,
                             benchmarks_enabled: bool) -> None:
    """1 and 2 workers timed in alternation, pair by pair, so that the machine's drift
    (10-30% over minutes on this shared machine) falls on both alike: the figure is the
    median of the pairs' ratios (timed by hand; pytest-benchmark's figures are of whole pairs)."""
    pairs = 5 if benchmarks_enabled else 1
    ratios: list[float] = []
    cpu: list[tuple[float, float]] = []  # CPU seconds in all (this process and its workers)

    def timed(workers: int) -> tuple[Summary, float, float]:
        _clean(tmp_path / f"w{workers}")
        before = _cpu_seconds()
        started = time.perf_counter()
        summary = _fresh_run(registry, tmp_path / f"w{workers}", workers)
        return summary, time.perf_counter() - started, _cpu_seconds() - before

    def pair() -> Summary:
        _, alone, alone_cpu = timed(1)
        summary, both, both_cpu = timed(2)  # the pool is shut down: its workers are counted
        ratios.append(alone / both)
        cpu.append((alone_cpu, both_cpu))
        return summary

    summary = benchmark.pedantic(pair, rounds=pairs, iterations=1)
    assert summary.documents > 0
    if getattr(benchmark, "stats", None) is not None:
        benchmark.extra_info["ratios"] = [round(r, 2) for r in ratios]
        benchmark.extra_info["median_ratio"] = round(statistics.median(ratios), 2)
        benchmark.extra_info["cpu_s_1_vs_2_workers"] = [round(statistics.median(c), 2) for c in zip(*cpu)]


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def test_worker_stages(benchmark: BenchmarkFixture, registry: Path, benchmarks_enabled: bool) -> None:
    """Where a worker's time goes: each stage of `work` timed alone (CPU seconds) over the
    registry's first 2,000 documents, caches cold; the shares of their medians."""
    with registry.open("rb") as fh:
        docs = [line for _, line in zip(range(2000), fh) if line.strip()]
    outs = [compress(doc, _NO_TOKENS)[0] for doc in docs]
    stages: dict[str, Callable[[], object]] = {
        "compress (C parse, rewrite, reduce)": lambda: [compress(doc, _NO_TOKENS) for doc in docs],
        "token counts (before and after)": lambda: [(tokens.count_tokens(d), tokens.count_tokens(o))
                                                    for d, o in zip(docs, outs)],
        "zstd and sha256 of the original": lambda: [ccr.prepare(doc) for doc in docs],
        "sha256 of the output": lambda: [hashlib.sha256(out).digest() for out in outs],
    }
    seconds: dict[str, list[float]] = {name: [] for name in stages}

    def each() -> None:
        for name, stage in stages.items():
            _cold()
            started = time.process_time()
            stage()
            seconds[name].append(time.process_time() - started)

    benchmark.pedantic(each, rounds=3 if benchmarks_enabled else 1, iterations=1)
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    total = sum(medians.values())
    assert total > 0
    if getattr(benchmark, "stats", None) is not None:
        benchmark.extra_info["shares_percent"] = {name: round(100 * t / total) for name, t in medians.items()}


@pytest.mark.parametrize("path", ["whole", "checksum", "per-document"])
@pytest.mark.parametrize("kind", ["jsonl", "tree"])
def test_incremental_rerun(benchmark: BenchmarkFixture, request: pytest.FixtureRequest, tmp_path: Path,
                           benchmarks_enabled: bool, kind: str, path: str) -> None:
    """An unchanged registry, a JSONL file or a tree of catalog files: each file source
    reused whole, told unchanged by the stat cache ("whole") or by hashing it and its
    output (--checksum), or, with the fingerprint removed before each round, document by
    document (each one hashed, its output checked). The files a nightly run sees are old;
    these were just generated, so the first run waits until they are settled (see
    fsio.SETTLE_NS: a file younger than that is hashed by the next run whatever its stat)."""
    source: Path = request.getfixturevalue("registry" if kind == "jsonl" else "registry_tree")
    work = tmp_path / "w"
    _clean(work)
    _wait_until_settled(source)
    started = time.perf_counter()
    first = _fresh_run(source, work, 1)
    first_s = time.perf_counter() - started
    rounds = 3 if benchmarks_enabled else 1
    fingerprint = work / "out" / ".manifest.streams.json"
    assert fingerprint.exists()
    manifest = (work / "out" / "manifest.jsonl").read_bytes()
    unreadable = sum(b'"output":null' in line for line in manifest.splitlines())

    def forget() -> None:
        if path == "per-document":
            fingerprint.unlink(missing_ok=True)

    again = benchmark.pedantic(_fresh_run, args=(source, work, 1, True, path == "checksum"),
                               setup=forget, rounds=rounds, iterations=1)
    assert again.documents == first.documents
    assert again.reused == first.documents - unreadable  # nothing redone but what has no output
    assert (work / "out" / "manifest.jsonl").read_bytes() == manifest
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["first_run_s"] = round(first_s, 2)
        benchmark.extra_info["speedup"] = round(first_s / stats.stats.median, 1)


def _cli() -> list[str]:
    exe = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "caveman_batch"]


@pytest.mark.parametrize("kind", ["jsonl", "tree"])
def test_cli_rerun(benchmark: BenchmarkFixture, request: pytest.FixtureRequest, tmp_path: Path,
                   benchmarks_enabled: bool, kind: str) -> None:
    """What a nightly job sees: the console script, a new process each run (its start-up
    and imports included), 1 worker, the first run then --incremental reruns."""
    source: Path = request.getfixturevalue("registry" if kind == "jsonl" else "registry_tree")
    work = tmp_path / "w"
    _clean(work)
    _wait_until_settled(source)
    args = [*_cli(), "compress", str(source), "-o", str(work / "out"), "--store",
            f"lmdb://{work}/ccr", "--workers", "1", "--quiet"]
    started = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    first_s = time.perf_counter() - started
    benchmark.pedantic(subprocess.run, args=([*args, "--incremental"],),
                       kwargs={"check": True, "stdout": subprocess.DEVNULL},
                       rounds=3 if benchmarks_enabled else 1, iterations=1)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["first_run_s"] = round(first_s, 2)
        benchmark.extra_info["speedup"] = round(first_s / stats.stats.median, 1)


_RSS_PROBE = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_rss_kib(src: Path, work: Path, *extra: str) -> int:
    probe = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, *_cli(), "compress", str(src), "-o", str(work / "out"),
         "--store", f"lmdb://{work}/ccr", "--workers", "2", "--quiet", *extra],
        capture_output=True, check=True, text=True, timeout=3600)
    return int(probe.stdout.strip())


def test_peak_rss_flat(data_dir: Path, tmp_path: Path, benchmarks_enabled: bool,
                       record_property: object) -> None:
    """Peak RSS of the largest process: 500 MB of input within 20% of 50 MB. Also shown: the
    same for an --incremental rerun that reuses everything (rows copied, originals looked up
    and touched, never held whole)."""
    small_mb, big_mb = (50, 500) if benchmarks_enabled else (1, 10)
    small_src, big_src = _jsonl(data_dir, small_mb), _jsonl(data_dir, big_mb)
    _wait_until_settled(small_src)  # as a nightly registry's: the reruns trust the stat cache
    _wait_until_settled(big_src)
    small = _peak_rss_kib(small_src, tmp_path / "small")
    big = _peak_rss_kib(big_src, tmp_path / "big")
    small_again = _peak_rss_kib(small_src, tmp_path / "small", "--incremental")
    big_again = _peak_rss_kib(big_src, tmp_path / "big", "--incremental")
    figures = {"small_MB": small_mb, "big_MB": big_mb, "small_peak_MiB": round(small / 1024, 1),
               "big_peak_MiB": round(big / 1024, 1), "ratio": round(big / small, 3),
               "rerun_small_peak_MiB": round(small_again / 1024, 1),
               "rerun_big_peak_MiB": round(big_again / 1024, 1),
               "rerun_ratio": round(big_again / small_again, 3)}
    print(json.dumps(figures))
    # The smoke run's sizes (1 and 10 MB) are below what may be in flight at once (2 x 2
    # workers' batches of up to 4 MB): the 1 MB run never fills that window, the 10 MB one
    # does, more so on a busy machine (the reader runs ahead of slowed workers; 1.2015x once,
    # beside another test process). So there the growth may also be the window's 16 MiB.
    allowance = 0 if benchmarks_enabled else 16 << 10
    assert big <= small * 1.2 + allowance, figures


def _tree_bytes(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*.json"))


def _timed_run(src: Path, work: Path, workers: int, incremental: bool = False) -> tuple[Summary, float]:
    started = time.perf_counter()
    summary = _fresh_run(src, work, workers, incremental)
    return summary, time.perf_counter() - started


def test_small_tree_scaling(benchmark: BenchmarkFixture, small_tree: Path, tmp_path: Path,
                            benchmarks_enabled: bool) -> None:
    """2 workers vs 1 on a tree of many small catalogs, timed in alternating pairs (as
    `-k scaling`): the median of the pairs' ratios, and each's MB/s at its median."""
    pairs = 5 if benchmarks_enabled else 1
    times: dict[int, list[float]] = {1: [], 2: []}
    cpu: dict[int, list[float]] = {1: [], 2: []}  # user + system, this process and its workers

    def pair() -> Summary:
        for workers in (1, 2):
            _clean(tmp_path / f"w{workers}")
            before = _cpu_seconds()
            summary, seconds = _timed_run(small_tree, tmp_path / f"w{workers}", workers)
            cpu[workers].append(_cpu_seconds() - before)  # (the pool is shut down: counted)
            times[workers].append(seconds)
        return summary

    summary = benchmark.pedantic(pair, rounds=pairs, iterations=1)
    assert summary.documents > 0
    if getattr(benchmark, "stats", None) is not None:
        size = _tree_bytes(small_tree)
        ratios = [a / b for a, b in zip(times[1], times[2])]
        benchmark.extra_info["files"] = summary.documents
        benchmark.extra_info["MB"] = round(size / MB, 1)
        benchmark.extra_info["ratios"] = [round(r, 2) for r in ratios]
        benchmark.extra_info["median_ratio"] = round(statistics.median(ratios), 2)
        benchmark.extra_info["MB_per_s_1_vs_2_workers"] = [
            round(size / statistics.median(times[w]) / MB, 1) for w in (1, 2)]
        benchmark.extra_info["cpu_s_1_vs_2_workers"] = [
            round(statistics.median(cpu[w]), 2) for w in (1, 2)]


def test_small_tree_rerun(benchmark: BenchmarkFixture, small_tree: Path, tmp_path: Path,
                          benchmarks_enabled: bool) -> None:
    """A first run (1 worker) then an --incremental rerun of the unchanged, settled tree,
    pair after pair in a fresh OUT and store: the median of the pairs' ratios."""
    pairs = 3 if benchmarks_enabled else 1
    firsts: list[float] = []
    reruns: list[float] = []
    work = tmp_path / "w"

    def pair() -> Summary:
        _clean(work)
        first, first_s = _timed_run(small_tree, work, 1)
        manifest = (work / "out" / "manifest.jsonl").read_bytes()
        unreadable = sum(b'"output":null' in line for line in manifest.splitlines())
        again, again_s = _timed_run(small_tree, work, 1, incremental=True)
        assert again.reused == first.documents - unreadable  # nothing compressed again
        assert (work / "out" / "manifest.jsonl").read_bytes() == manifest
        firsts.append(first_s)
        reruns.append(again_s)
        return again

    summary = benchmark.pedantic(pair, rounds=pairs, iterations=1)
    assert summary.documents > 0
    if getattr(benchmark, "stats", None) is not None:
        ratios = [a / b for a, b in zip(firsts, reruns)]
        benchmark.extra_info["first_s"] = [round(s, 2) for s in firsts]
        benchmark.extra_info["rerun_s"] = [round(s, 3) for s in reruns]
        benchmark.extra_info["ratios"] = [round(r, 1) for r in ratios]
        benchmark.extra_info["median_ratio"] = round(statistics.median(ratios), 1)
