"""The postgresql:// store against a local server, next to LMDB in the same run.

Timed for real with:

    python -m pytest benchmarks/test_bench_postgres.py --benchmark-enable --benchmark-only

The shapes are benchmarks/test_bench_store.py's (seeded 20 KB catalogs, 256 per
transaction; a big store of small records; 3,449 last-seen refreshes), so the figures sit
next to LMDB's there; each benchmark here also runs on LMDB, so a ratio to LMDB comes from
one run on one machine. The server is $CAVEMAN_TEST_POSTGRES_URL when set (then only
that one, as given: `given`), else a throwaway cluster (caveman_batch/testing/
postgres_server.py) reached over its Unix socket (`pg_socket`) and over TCP loopback
(`pg_tcp`); without PostgreSQL binaries the postgres cases skip, saying why (in CI: fail).
Every store is a schema of its own. The cluster runs with fsync and synchronous_commit on
(a commit is durable when it returns, as on LMDB) and the helper's shared_buffers, 32 MB.

`test_four_processes_commit_at_once` starts 4 child processes (this file run as a script)
that each commit their share in batches of 256 once told to go: their originals are all
distinct, or every child commits the same ones (in a different batch order). Reported:
aggregate MB/s of the originals the children were handed, from "go" to the last child's
answer; afterwards every record is there and verifies.

In the normal test run (--benchmark-disable) each runs once on small data: a smoke test.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from caveman_batch import ccr
from caveman_batch.store import Store, open_store

SCRIPT = Path(__file__).resolve()
GIVEN_URL = os.environ.get("CAVEMAN_TEST_POSTGRES_URL", "")  # a test module: not the library
IN_CI = bool(os.environ.get("CI"))
POSTGRES = ["given"] if GIVEN_URL else ["pg_socket", "pg_tcp"]
BACKENDS = ["lmdb", *POSTGRES]
BATCH = 256  # as in test_bench_store.py: 20 KB catalogs, ~5 MB per transaction
BIG_STORE_RECORDS = 100_000
BIG_STORE_RECORDS_SMOKE = 2_000
TOUCHED = 3_449
WRITERS = 4
WRITER_BATCHES = 4  # per child and round, timed: 4 x 4 x 256 x 20 KB = 84 MB per round
CHILD_TIMEOUT_S = 600.0


# -- the server and the stores -----------------------------------------------------------


def skip_or_fail(reason: str) -> NoReturn:
    """Skip on a developer machine; in CI (as tests/conftest.py) a server must be there."""
    if IN_CI:
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def postgres_urls() -> Iterator[dict[str, str]]:
    """backend id -> URL of a database the benchmarks may make schemas in."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        skip_or_fail("psycopg is not installed (pip install '.[postgres]')")
    if GIVEN_URL:
        yield {"given": GIVEN_URL}
        return
    from caveman_batch.testing.postgres_server import Cluster, find_bindir

    if find_bindir() is None:
        skip_or_fail("no PostgreSQL server here (initdb/pg_ctl) and no CAVEMAN_TEST_POSTGRES_URL")
    with Cluster.start_new(tcp=True) as cluster:
        yield {"pg_socket": cluster.url(), "pg_tcp": cluster.url(tcp=True)}


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new empty store on the backend the test is parametrized with."""
    backend = request.param
    if backend == "lmdb":
        yield f"lmdb://{tmp_path}/ccr.lmdb"
        return
    from caveman_batch.testing.postgres_server import fresh_schema

    urls = request.getfixturevalue("postgres_urls")
    with fresh_schema(urls[backend], "bench") as url:
        yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as s:
        yield s


def on_every_backend(test: Any) -> Any:
    return pytest.mark.parametrize("store_url", BACKENDS, indirect=True)(test)


def report(benchmark: BenchmarkFixture, **figures: Any) -> None:
    """Put the median round's figures in extra_info (nothing when not timed)."""
    stats = getattr(benchmark, "stats", None)
    if stats is None:
        return
    median = stats.stats.median
    for name, value in figures.items():
        benchmark.extra_info[name] = round(value / median / 1e6, 1) if name.endswith("MB_per_s") else value
    benchmark.extra_info["median_ms"] = round(median * 1e3, 2)


# -- one process -------------------------------------------------------------------------


@on_every_backend
def test_commit_batched(benchmark: BenchmarkFixture, store: Store, catalogs: Any,
                        benchmarks_enabled: bool) -> None:
    """Hash, compress (zstd on threads) and commit 256 new 20 KB catalogs in one transaction."""
    rounds = 20 if benchmarks_enabled else 1
    batches = iter([catalogs.many(r * BATCH, BATCH) for r in range(rounds)])

    def next_batch() -> tuple[tuple[list[bytes]], dict[str, object]]:
        return (next(batches),), {}

    handles = benchmark.pedantic(lambda originals: ccr.store_originals(store, originals),
                                 setup=next_batch, rounds=rounds, iterations=1)
    assert ccr.recover(store, handles[-1]) == catalogs.one(rounds * BATCH - 1)
    report(benchmark, original_MB_per_s=sum(map(len, catalogs.many(0, BATCH))))


@on_every_backend
def test_commit_prepared(benchmark: BenchmarkFixture, store: Store, catalogs: Any,
                         benchmarks_enabled: bool) -> None:
    """The store's own share: commit 256 catalogs already hashed and compressed."""
    rounds = 20 if benchmarks_enabled else 1
    batches = iter([[ccr.prepare(o) for o in catalogs.many(r * BATCH, BATCH)] for r in range(rounds)])

    def next_batch() -> tuple[tuple[list[ccr.Prepared]], dict[str, object]]:
        return (next(batches),), {}

    handles = benchmark.pedantic(lambda prepared: ccr.commit(store, prepared), setup=next_batch,
                                 rounds=rounds, iterations=1)
    assert ccr.recover(store, handles[0]) == catalogs.one((rounds - 1) * BATCH)
    report(benchmark, original_MB_per_s=sum(map(len, catalogs.many(0, BATCH))))


@on_every_backend
def test_recommit_batched(benchmark: BenchmarkFixture, store: Store, catalogs: Any,
                          benchmarks_enabled: bool) -> None:
    """Commit 256 catalogs the store already holds (a rerun's or another host's): the merge
    reads each old record and keeps it."""
    rounds = 10 if benchmarks_enabled else 1
    originals = catalogs.many(0, BATCH)
    ccr.store_originals(store, originals)
    handles = benchmark.pedantic(lambda: ccr.store_originals(store, originals), rounds=rounds,
                                 iterations=1)
    assert ccr.recover(store, handles[-1]) == originals[-1]
    report(benchmark, original_MB_per_s=sum(map(len, originals)))


@on_every_backend
@pytest.mark.parametrize("checked", [False, True], ids=["touch", "touch_held"])
def test_touch(benchmark: BenchmarkFixture, store: Store, catalogs: Any, benchmarks_enabled: bool,
               checked: bool) -> None:
    """Refresh the last-seen of 3,449 stored originals (10 KB catalogs) in one transaction,
    a later time each round; `touch_held` (an incremental rerun's) also checks each record
    is there, in that transaction."""
    count = TOUCHED if benchmarks_enabled else 100
    rounds = 10 if benchmarks_enabled else 1
    handles = []
    for start in range(0, count, BATCH):
        prepared = [ccr.prepare(o) for o in catalogs.many(start, min(BATCH, count - start), 10_000)]
        handles += ccr.commit(store, prepared)
    digests = [h[len(ccr.HANDLE_PREFIX):] for h in handles]
    records = {d: store.get(d.encode()) for d in digests[:10]}
    first = time.time_ns() // 1_000_000 + 60_000  # later than every record's own time
    stamps = iter(range(first, first + rounds))

    def next_stamp() -> tuple[tuple[list[str]], dict[str, int]]:
        return (digests,), {"now_ms": next(stamps)}

    def refresh(d: list[str], now_ms: int) -> None:
        if checked:
            assert ccr.touch_held(store, d, now_ms) == []
        else:
            ccr.touch(store, d, now_ms, present=True)

    benchmark.pedantic(refresh, setup=next_stamp, rounds=rounds, iterations=1)
    assert all(store.get(d.encode()) == value for d, value in records.items())  # not rewritten
    assert ccr.info(store, handles[0]).last_seen == (first + rounds - 1) / 1000
    report(benchmark, originals=count)


# -- recover in a big store ----------------------------------------------------------------


@pytest.fixture(scope="module")
def big_sample(catalogs: Any, benchmarks_enabled: bool) -> tuple[int, dict[str, bytes]]:
    """How many small records (one or two tools, ~0.6-2 KB) a big store holds; 1000 of
    them, seeded, by handle."""
    count = BIG_STORE_RECORDS if benchmarks_enabled else BIG_STORE_RECORDS_SMOKE
    sample = [catalogs.one(n, 600) for n in random.Random(42).sample(range(count), 1000)]
    return count, {ccr.make_handle(ccr.digest_of(o)): o for o in sample}


@pytest.fixture(scope="module")
def big_lmdb(tmp_path_factory: pytest.TempPathFactory, catalogs: Any,
             big_sample: tuple[int, dict[str, bytes]]) -> str:
    url = f"lmdb://{tmp_path_factory.mktemp('big-lmdb')}/ccr.lmdb"
    _fill(url, catalogs, big_sample[0])
    return url


@pytest.fixture(scope="module")
def big_schema(postgres_urls: dict[str, str], catalogs: Any,
               big_sample: tuple[int, dict[str, bytes]]) -> Iterator[str]:
    """The schema of one big postgres store, reached through the socket and over TCP."""
    from caveman_batch.testing.postgres_server import fresh_schema

    with fresh_schema(next(iter(postgres_urls.values())), "big") as url:
        _fill(url, catalogs, big_sample[0])
        yield url.rsplit("%3D", 1)[1]


def big_store_url(request: pytest.FixtureRequest, backend: str) -> str:
    """The big store on `backend`, built on first use (a skipped backend builds nothing)."""
    if backend == "lmdb":
        return str(request.getfixturevalue("big_lmdb"))
    from caveman_batch.testing.postgres_server import with_schema

    urls = request.getfixturevalue("postgres_urls")
    return with_schema(urls[backend], request.getfixturevalue("big_schema"))


def _fill(url: str, catalogs: Any, count: int) -> None:
    with open_store(url) as s:
        for start in range(0, count, 5000):
            originals = [catalogs.one(n, 600) for n in range(start, min(start + 5000, count))]
            ccr.commit(s, [ccr.prepare(o) for o in originals])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["handle", "prefix8"])
def test_recover_latency_in_big_store(
    benchmark: BenchmarkFixture, request: pytest.FixtureRequest,
    big_sample: tuple[int, dict[str, bytes]], backend: str, form: str
) -> None:
    """One recover call (prefix lookup by index, read, decompress, sha256 check) in a store
    of 100k records, cycling over 1000 different handles (no hot record)."""
    count, sample = big_sample
    cut = len(ccr.HANDLE_PREFIX) + (8 if form == "prefix8" else 64)
    pairs = itertools.cycle([(handle[:cut], original) for handle, original in sample.items()])
    with open_store(big_store_url(request, backend)) as s:

        def recover_one() -> bool:
            handle, original = next(pairs)
            return ccr.recover(s, handle) == original

        assert benchmark(recover_one)
        assert sum(1 for _ in s.keys()) == count
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["records"] = count
        benchmark.extra_info["median_us"] = round(stats.stats.median * 1e6, 1)


# -- four processes at once -----------------------------------------------------------------


def _write_originals(path: Path, originals: list[bytes]) -> None:
    with open(path, "wb") as fh:
        for original in originals:
            fh.write(struct.pack(">I", len(original)) + original)


def _read_originals(path: Path) -> list[bytes]:
    data, at, found = path.read_bytes(), 0, []
    while at < len(data):
        (length,) = struct.unpack_from(">I", data, at)
        found.append(data[at + 4:at + 4 + length])
        at += 4 + length
    return found


class Writers:
    """WRITERS child processes, each holding its originals and an open store, waiting."""

    def __init__(self, url: str, shares: list[list[bytes]], folder: Path) -> None:
        self.children: list[subprocess.Popen[bytes]] = []
        for n, share in enumerate(shares):
            path = folder / f"writer-{n}.bin"
            _write_originals(path, share)
            self.children.append(subprocess.Popen(
                [sys.executable, str(SCRIPT), url, str(path)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for child in self.children:
            self._expect(child, "ready")

    def go(self) -> list[dict[str, float]]:
        """Tell every child to commit; their answers once all have committed."""
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.flush()
        return [json.loads(self._expect(child, "done")) for child in self.children]

    def close(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait(CHILD_TIMEOUT_S)

    @staticmethod
    def _expect(child: subprocess.Popen[bytes], word: str) -> str:
        assert child.stdout is not None
        line = child.stdout.readline().decode()
        if not line.startswith(word):
            child.kill()
            err = child.stderr.read().decode() if child.stderr else ""
            raise AssertionError(f"writer said {line!r}, not {word}: {err[-3000:]}")
        return line[len(word):]


def _shares(catalogs: Any, first: int, per_writer: int, overlapping: bool) -> list[list[bytes]]:
    """Each writer's originals: its own range, or everyone the same ones rotated by a
    batch each (so the children meet on the same keys in different orders)."""
    if not overlapping:
        return [catalogs.many(first + n * per_writer, per_writer) for n in range(WRITERS)]
    common = catalogs.many(first, per_writer)
    return [common[n * BATCH:] + common[:n * BATCH] for n in range(WRITERS)]


@on_every_backend
@pytest.mark.parametrize("overlapping", [False, True], ids=["distinct", "overlapping"])
def test_four_processes_commit_at_once(
    benchmark: BenchmarkFixture, store_url: str, catalogs: Any, benchmarks_enabled: bool,
    tmp_path: Path, overlapping: bool
) -> None:
    """4 processes hash, compress and commit 256 catalogs per transaction, all at once."""
    rounds = 3 if benchmarks_enabled else 1
    per_writer = WRITER_BATCHES * BATCH if benchmarks_enabled else 32
    with open_store(store_url):
        pass  # made once, before the children open it
    given: list[list[list[bytes]]] = []
    started: list[Writers] = []

    def start_writers() -> tuple[tuple[Writers], dict[str, object]]:
        first = len(given) * WRITERS * per_writer
        given.append(_shares(catalogs, first, per_writer, overlapping))
        started.append(Writers(store_url, given[-1], tmp_path))
        return (started[-1],), {}

    try:
        benchmark.pedantic(lambda writers: writers.go(), setup=start_writers, rounds=rounds,
                           iterations=1)
    finally:
        for writers in started:
            writers.close()
    expected = {ccr.digest_of(o): o for rnd in given for share in rnd for o in share}
    with open_store(store_url) as store:
        audit = ccr.audit(store)
        assert (audit.records, audit.verified, audit.excluded) == (len(expected), len(expected), {})
        for digest, original in expected.items():
            assert ccr.recover(store, ccr.make_handle(digest)) == original
    submitted = sum(len(o) for share in given[0] for o in share)
    report(benchmark, aggregate_MB_per_s=submitted, writers=WRITERS, records=len(expected))


def _writer_main(url: str, originals_path: Path, out: IO[str]) -> None:
    """A child: open the store, say ready, wait for go, commit batch by batch, say done."""
    originals = _read_originals(originals_path)
    with open_store(url) as store:
        out.write("ready\n")
        out.flush()
        if sys.stdin.readline() != "go\n":
            raise SystemExit("no go")
        started = time.perf_counter()
        for at in range(0, len(originals), BATCH):
            ccr.store_originals(store, originals[at:at + BATCH])
        took = time.perf_counter() - started
    out.write("done" + json.dumps({"seconds": took}) + "\n")
    out.flush()


if __name__ == "__main__":
    _writer_main(sys.argv[1], Path(sys.argv[2]), sys.stdout)
