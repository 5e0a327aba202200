"""The compressor's speed, stage by stage, on the seeded bench corpus.

    python -m pytest benchmarks/test_bench_compressor.py --benchmark-enable --benchmark-only

The bench corpus is bench_data's default registry (seed 1234, 60 servers + the showcase,
every server distinct): 61 catalogs of 872,957 B (0.87 MB; the _quirks files are left
out), holding 408 long descriptions (folded, over SHORT_BYTES; all distinct) of 149,644 B
(0.15 MB). The sentence-split, rule-detection and reduce rows run on those descriptions,
the whole-catalog rows on the catalogs; each row reports its MB (extra_info). Reductions
are cached per process, so the whole-catalog benchmarks clear the cache before every
round: the figures are cold. Throughput is MB/s of the bytes in (1 MB = 10**6 B) at the
median round, one core.

Token counting (exact o200k_base) has rows of its own: the C counter (_fastcount) with its
piece cache emptied before every round (cold) and kept (warm), quicktok's own count of the
same text for comparison, and what each costs to start (quicktok's tokenizer is built,
the C counter reads the vocabulary file).

Production runs the C reducer (_fastreduce) when it is built: the plain rows time it,
stage by stage (split_sentences; rule_units on the units found beforehand) and whole
(reduce), each C call loading (folding) its text as reduce() does; the *_pure_python rows
time the Python reference path (what CAVEMAN_PURE_PYTHON=1 runs), for comparison.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench_data.generate import generate_registry
from caveman_batch import describe, rules, tokens
from caveman_batch.catalog import Options, compress, parse

NO_TOKENS = Options(count_tokens=False)


@pytest.fixture(scope="session")
def bench_corpus(tmp_path_factory: pytest.TempPathFactory, benchmarks_enabled: bool) -> list[bytes]:
    root = tmp_path_factory.mktemp("bench-corpus")
    generate_registry(root, seed=1234, servers=60 if benchmarks_enabled else 8, oversize_bytes=0)
    docs = [p.read_bytes() for p in sorted(root.rglob("*.json")) if "_quirks" not in p.parts]
    return docs


@pytest.fixture(scope="session")
def long_descriptions(bench_corpus: list[bytes]) -> list[str]:
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "description" and isinstance(value, str):
                    folded = describe.fold(value)
                    if len(folded.encode()) > describe.SHORT_BYTES:
                        found.append(folded)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for raw in bench_corpus:
        walk(parse(raw))
    return found


def _report(benchmark: BenchmarkFixture, nbytes: int) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["MB_per_s"] = round(nbytes / stats.stats.median / 1e6, 1)
        benchmark.extra_info["MB"] = round(nbytes / 1e6, 2)


@pytest.fixture
def fast() -> ModuleType:
    """The C reducer as describe.reduce uses it; its rows skip when it is not built."""
    if describe._FAST is None:
        pytest.skip("caveman_batch._fastreduce is not built or not configured (see _accel)")
    return describe._FAST


def test_sentence_split(benchmark: BenchmarkFixture, long_descriptions: list[str],
                        fast: ModuleType) -> None:
    """The C sentence scan reduce() runs (as (start, end) pairs)."""
    result = benchmark(lambda: [fast.split_sentences(t) for t in long_descriptions])
    assert None not in result
    assert sum(map(len, result)) > len(long_descriptions)
    _report(benchmark, sum(len(t.encode()) for t in long_descriptions))


def test_sentence_split_pure_python(benchmark: BenchmarkFixture, long_descriptions: list[str]) -> None:
    """describe.split_sentences: the Python reference path."""
    result = benchmark(lambda: [describe.split_sentences(t) for t in long_descriptions])
    assert sum(map(len, result)) > len(long_descriptions)
    _report(benchmark, sum(len(t.encode()) for t in long_descriptions))


def test_rule_detection(benchmark: BenchmarkFixture, long_descriptions: list[str],
                        fast: ModuleType) -> None:
    """What reduce() does in C: one question per unit (the units found beforehand)."""
    spans = [fast.units(t) for t in long_descriptions]
    assert None not in spans

    def run() -> int:
        return sum(sum(fast.rule_units(text, units)) for text, units in zip(long_descriptions, spans))

    assert benchmark(run) > 0
    _report(benchmark, sum(len(t.encode()) for t in long_descriptions))


def test_rule_detection_pure_python(benchmark: BenchmarkFixture, long_descriptions: list[str]) -> None:
    """What the Python path does: one RuleScan per description, one question per unit."""
    spans = [describe.units(t) for t in long_descriptions]

    def run() -> int:
        found = 0
        for text, units in zip(long_descriptions, spans):
            scan = rules.RuleScan(text)
            found += sum(scan.states_rule(u.start, u.end)
                         or rules.opens_with_instruction(text[u.start:u.end]) for u in units)
        return found

    assert benchmark(run) > 0
    _report(benchmark, sum(len(t.encode()) for t in long_descriptions))


def _reduce_cold(benchmark: BenchmarkFixture, long_descriptions: list[str]) -> None:
    def run() -> list[str]:
        describe._reduce_cached.cache_clear()
        return [describe.reduce(t) for t in long_descriptions]

    result = benchmark(run)
    assert sum(map(len, result)) < sum(map(len, long_descriptions))
    benchmark.extra_info["fastreduce"] = describe._FAST is not None
    _report(benchmark, sum(len(t.encode()) for t in long_descriptions))


def test_reduce_cold(benchmark: BenchmarkFixture, long_descriptions: list[str]) -> None:
    """describe.reduce as the compressor calls it: the C reducer when it is built (see _accel)."""
    _reduce_cold(benchmark, long_descriptions)


def test_reduce_cold_pure_python(benchmark: BenchmarkFixture, long_descriptions: list[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python reference path alone (what CAVEMAN_PURE_PYTHON=1 runs)."""
    monkeypatch.setattr(describe, "_FAST", None)
    _reduce_cold(benchmark, long_descriptions)


def test_compress_catalogs_cold(benchmark: BenchmarkFixture, bench_corpus: list[bytes]) -> None:
    def run() -> int:
        describe._reduce_cached.cache_clear()
        return sum(len(compress(raw, NO_TOKENS)[0]) for raw in bench_corpus)

    out = benchmark(run)
    total = sum(map(len, bench_corpus))
    assert out < total
    _report(benchmark, total)


def test_compress_catalogs_with_token_counts(benchmark: BenchmarkFixture,
                                             bench_corpus: list[bytes]) -> None:
    counter = tokens._fast()

    def run() -> int:
        describe._reduce_cached.cache_clear()
        if counter is not None:
            counter.cache_clear()
        return sum(compress(raw)[1].tokens_after or 0 for raw in bench_corpus)

    assert benchmark(run) > 0
    _report(benchmark, sum(map(len, bench_corpus)))


@pytest.fixture
def counter() -> ModuleType:
    """The C token counter as count_tokens uses it; its rows skip when it is not built."""
    found = tokens._fast()
    if found is None:
        pytest.skip("caveman_batch._fastcount is not built (see _accel)")
    return found


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_token_count(benchmark: BenchmarkFixture, bench_corpus: list[bytes], counter: ModuleType,
                     cache: str) -> None:
    def run() -> int:
        if cache == "cold":
            counter.cache_clear()
        return sum(tokens.count_tokens(raw) for raw in bench_corpus)

    expected = sum(tokens._count_text(raw.decode()) for raw in bench_corpus)
    assert benchmark(run) == expected
    benchmark.extra_info["pieces_encoded_in_C"] = counter.cache_info()["encoded"]
    _report(benchmark, sum(map(len, bench_corpus)))


def test_token_count_quicktok(benchmark: BenchmarkFixture, bench_corpus: list[bytes]) -> None:
    texts = [raw.decode() for raw in bench_corpus]
    encoder = tokens._encoder()
    assert benchmark(lambda: sum(encoder.count(text) for text in texts)) > 0
    _report(benchmark, sum(map(len, bench_corpus)))


# Resident memory a fresh process gains by loading each counter (probed in a subprocess).
_RSS_PROBE = """
import sys, psutil, quicktok
from caveman_batch import tokens
before = psutil.Process().memory_info().rss
if sys.argv[1] == "quicktok":
    quicktok.get_encoding("o200k_base")
else:
    assert tokens._fast().cache_info()["vocabulary"]
print(psutil.Process().memory_info().rss - before)
"""


def _loaded_mib(which: str) -> float:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _RSS_PROBE, which], capture_output=True, text=True,
                          check=True, timeout=120)
    return round(int(done.stdout) / 2**20, 1)


def test_token_counter_start_quicktok(benchmark: BenchmarkFixture) -> None:
    import quicktok

    benchmark.pedantic(lambda: quicktok.Tokenizer(tokens.ENCODING, ""), rounds=3, iterations=1)
    benchmark.extra_info["rss_MiB"] = _loaded_mib("quicktok")


def test_token_counter_start_c(benchmark: BenchmarkFixture, counter: ModuleType) -> None:
    import hashlib
    from importlib import resources

    def start() -> int:
        vocab = resources.files("quicktok").joinpath(*tokens.VOCAB_FILE).read_bytes()
        if hashlib.sha256(vocab).hexdigest() != tokens.VOCAB_SHA256:
            pytest.skip("quicktok's vocabulary file is not the pinned one (tokens.VOCAB_SHA256)")
        return int(counter.load_ranks(vocab))

    assert benchmark.pedantic(start, rounds=3, iterations=1) == 199_998
    benchmark.extra_info["rss_MiB"] = _loaded_mib("c")
