"""CCR store throughput and latency, per backend.

Timed for real with:

    python -m pytest benchmarks/test_bench_store.py --benchmark-enable --benchmark-only

In the normal test run (--benchmark-disable) each benchmark runs once on small data,
as a smoke test. Throughput is reported in `extra_info` as MB/s of ORIGINAL bytes
(1 MB = 10**6 bytes) at the median round. Targets from the issue: batched LMDB
commit >= 150 MB/s with hashing and zstd included; single-handle recover < 1 ms
median on LMDB with 100k records.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from caveman_batch import ccr
from caveman_batch.store import Store, open_store

BACKENDS = ["lmdb", "sqlite", "memory"]
BATCH = 256  # 20 KB catalogs per transaction: ~5 MB
BIG_STORE_RECORDS = 100_000
BIG_STORE_RECORDS_SMOKE = 5_000  # when not timed: keep the normal test run quick


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = {"lmdb": f"lmdb://{tmp_path}/ccr.lmdb", "sqlite": f"sqlite://{tmp_path}/ccr.db",
           "memory": "memory://"}[request.param]
    with open_store(url) as s:
        yield s


def report_throughput(benchmark: BenchmarkFixture, nbytes: int, what: str = "original") -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: nothing was timed
        return
    benchmark.extra_info[f"{what}_MB_per_s"] = round(nbytes / stats.stats.median / 1e6, 1)
    benchmark.extra_info["median_ms"] = round(stats.stats.median * 1e3, 2)


def test_commit_batched(
    benchmark: BenchmarkFixture, store: Store, catalogs: Any, benchmarks_enabled: bool
) -> None:
    """Hash, compress (zstd on threads) and commit 256 new 20 KB catalogs in one transaction."""
    rounds = 20 if benchmarks_enabled else 1
    batches = iter([catalogs.many(r * BATCH, BATCH) for r in range(rounds)])

    def next_batch() -> tuple[tuple[list[bytes]], dict[str, object]]:
        return (next(batches),), {}

    def prepare_and_commit(originals: list[bytes]) -> list[str]:
        return ccr.store_originals(store, originals)

    handles = benchmark.pedantic(prepare_and_commit, setup=next_batch, rounds=rounds, iterations=1)
    assert ccr.recover(store, handles[-1]) == catalogs.one(rounds * BATCH - 1)
    report_throughput(benchmark, sum(map(len, catalogs.many(0, BATCH))))


def test_commit_prepared(
    benchmark: BenchmarkFixture, store: Store, catalogs: Any, benchmarks_enabled: bool
) -> None:
    """The parent's share in the pipeline (workers prepare): commit 256 prepared catalogs."""
    rounds = 20 if benchmarks_enabled else 1
    batches = iter([[ccr.prepare(o) for o in catalogs.many(r * BATCH, BATCH)] for r in range(rounds)])

    def next_batch() -> tuple[tuple[list[ccr.Prepared]], dict[str, object]]:
        return (next(batches),), {}

    handles = benchmark.pedantic(lambda prepared: ccr.commit(store, prepared), setup=next_batch,
                                 rounds=rounds, iterations=1)
    assert ccr.recover(store, handles[0]) == catalogs.one((rounds - 1) * BATCH)
    report_throughput(benchmark, sum(map(len, catalogs.many(0, BATCH))))


def test_recover_batch(benchmark: BenchmarkFixture, store: Store, catalogs: Any) -> None:
    """recover (resolve + read + decompress + sha256 check) 256 catalogs by handle."""
    originals = catalogs.many(0, BATCH)
    handles = ccr.commit(store, [ccr.prepare(o) for o in originals])
    recovered = benchmark(lambda: [ccr.recover(store, h) for h in handles])
    assert recovered == originals
    report_throughput(benchmark, sum(map(len, originals)))


def test_get_raw(benchmark: BenchmarkFixture, store: Store, catalogs: Any) -> None:
    """The backend's bare get of 256 stored records (no decompression, no check)."""
    handles = ccr.commit(store, [ccr.prepare(o) for o in catalogs.many(0, BATCH)])
    keys = [h[len(ccr.HANDLE_PREFIX):].encode() for h in handles]
    values = benchmark(lambda: [store.get(k) for k in keys])
    assert all(values)
    report_throughput(benchmark, sum(map(len, values)), "stored")


TOUCHED = 3_449  # the bench tree's originals: what its nightly rerun refreshes


@pytest.mark.parametrize("checked", [False, True], ids=["touch", "touch_held"])
def test_touch(benchmark: BenchmarkFixture, store: Store, catalogs: Any, benchmarks_enabled: bool,
               checked: bool) -> None:
    """Refresh the last-seen of 3,449 stored originals (10 KB catalogs, ~2.5 KB stored each)
    in one transaction, a later time each round: the ~seen entries are written, never the
    records themselves. `touch_held` (what an incremental rerun does) also looks at each
    record in that transaction, to say which are gone."""
    count = TOUCHED if benchmarks_enabled else 100
    rounds = 10 if benchmarks_enabled else 1
    handles = []
    for start in range(0, count, BATCH):
        handles += ccr.commit(store, [ccr.prepare(o) for o in catalogs.many(start, min(BATCH, count - start), 10_000)])
    digests = [h[len(ccr.HANDLE_PREFIX):] for h in handles]
    records = {d: store.get(d.encode()) for d in digests[:10]}
    first = time.time_ns() // 1_000_000 + 60_000  # later than every record's own time
    stamps = iter(range(first, first + rounds))

    def next_stamp() -> tuple[tuple[list[str]], dict[str, int]]:
        return (digests,), {"now_ms": next(stamps)}

    if checked:
        def refresh(d: list[str], now_ms: int) -> None:
            assert ccr.touch_held(store, d, now_ms) == []
    else:
        def refresh(d: list[str], now_ms: int) -> None:
            ccr.touch(store, d, now_ms, present=True)

    benchmark.pedantic(refresh, setup=next_stamp, rounds=rounds, iterations=1)
    assert all(store.get(d.encode()) == value for d, value in records.items())  # not rewritten
    assert ccr.info(store, handles[0]).last_seen == (first + rounds - 1) / 1000
    if getattr(benchmark, "stats", None) is not None:
        benchmark.extra_info["originals"] = count
        benchmark.extra_info["median_ms"] = round(benchmark.stats.stats.median * 1e3, 2)


@pytest.fixture(scope="session")
def big_lmdb(
    tmp_path_factory: pytest.TempPathFactory, catalogs: Any, benchmarks_enabled: bool
) -> tuple[str, dict[str, bytes]]:
    """An LMDB store of 100k small records (one or two tools each, ~0.6-2 KB), built once
    per session; 1000 of them, seeded, by handle."""
    count = BIG_STORE_RECORDS if benchmarks_enabled else BIG_STORE_RECORDS_SMOKE
    url = f"lmdb://{tmp_path_factory.mktemp('big-lmdb')}/ccr.lmdb"
    with open_store(url) as s:
        for start in range(0, count, 5000):
            originals = [catalogs.one(n, 600) for n in range(start, min(start + 5000, count))]
            ccr.commit(s, [ccr.prepare(o) for o in originals])
    sample = [catalogs.one(n, 600) for n in random.Random(42).sample(range(count), 1000)]
    return url, {ccr.make_handle(ccr.digest_of(o)): o for o in sample}


@pytest.mark.parametrize("form", ["handle", "prefix8"])
def test_recover_latency_in_100k_lmdb(
    benchmark: BenchmarkFixture, big_lmdb: tuple[str, dict[str, bytes]], form: str
) -> None:
    """One recover call in a big store, cycling over 1000 different handles (no hot record)."""
    url, sample = big_lmdb
    cut = len(ccr.HANDLE_PREFIX) + (8 if form == "prefix8" else 64)
    pairs = itertools.cycle([(handle[:cut], original) for handle, original in sample.items()])
    with open_store(url) as s:

        def recover_one() -> bool:
            handle, original = next(pairs)
            return ccr.recover(s, handle) == original

        assert benchmark(recover_one)
        benchmark.extra_info["records"] = sum(1 for _ in s.keys())
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["median_us"] = round(stats.stats.median * 1e6, 1)


def _big_catalog_with_spans(k: int, tools: int) -> list[ccr.Prepared]:
    """A catalog of `tools` tools (about 1 KB each: 2 MiB for 2,000) and a span record
    for each of its tools, as compress --index commits them."""
    import json

    defs = [json.dumps({"name": f"c{k}_tool_{i}", "description": f"Does thing {i}. " * 60}).encode()
            for i in range(tools)]
    catalog = b'{"tools":[' + b",".join(defs) + b"]}"
    whole = ccr.digest_of(catalog)
    at = 10
    spans = []
    for d in defs:
        spans.append(ccr.prepare_span(ccr.digest_of(d), len(d), whole, at))
        at += len(d) + 1
    return [ccr.prepare(catalog), *spans]


def test_verify_spans_of_big_catalogs(benchmark: BenchmarkFixture, tmp_path: Path,
                                      benchmarks_enabled: bool) -> None:
    """verify (ccr.audit) of 3 catalogs of 2 MiB, 2,000 tool spans each, on LMDB: each catalog
    inflated once for all its spans (they lie all over the key order). Before the cache
    took catalogs over 1 MiB: median 2.87 s (each span inflated its catalog up to itself);
    after: 0.099 s (the whole `caveman-batch verify` process: 3.2-3.8 s, then 0.29-0.33 s)."""
    tools = 2000 if benchmarks_enabled else 1100  # (past 1 MiB either way)
    with open_store(f"lmdb://{tmp_path}/ccr.lmdb") as store:
        ccr.commit(store, [r for k in range(3) for r in _big_catalog_with_spans(k, tools)])
        report = benchmark.pedantic(ccr.audit, args=(store,), rounds=5 if benchmarks_enabled else 1)
        assert report.verified == 3 * (tools + 1) and not report.excluded
