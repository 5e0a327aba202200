"""`payload.reduce` throughput over a mixed corpus of real tool outputs, and facts kept.

Timed for real with:

    python -m pytest benchmarks/test_bench_payload.py --benchmark-enable --benchmark-only

The corpus is the real-output corpus of tests/test_payload_real.py (46 outputs of the
machine's gcc, make, cargo, javac/java, node/npm, git, pip, pytest, unittest, mypy, ruff,
find, ls, Python logging...), made on the spot, plus the written-format outputs of
`po.fixtures` (a JSON API document, a service log, tsc/gcc/eslint/ruff/cargo), each scaled
up by repetition when timed. Throughput is MB/s of input (1 MB = 10**6 bytes) at the median
round, one core, no store (the store's own cost is in test_bench_store.py). The facts share
is over the must-survive facts of each output at a 2,000-char budget.
"""

from __future__ import annotations

import re

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from caveman_batch.payload import Budget, Hint, reduce
from caveman_batch.testing import payload_outputs as po

TARGET_MB_PER_S = 60


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> list[po.Output]:
    real, _ = po.shared_corpus(lambda: tmp_path_factory.mktemp("payload-corpus"))
    return real + [po.api_json(), po.service_log(), po.tsc_output(), po.gcc_output(), po.eslint_output(),
                   po.ruff_output(), po.cargo_output()]


def _scaled(out: po.Output, size: int) -> bytes:
    if out.strategy == "json":
        return po.api_json(max(5_000, size // 110)).data  # JSON cannot be repeated in place
    return out.data * max(1, size // len(out.data))


def _facts_kept(out: po.Output, view: str) -> tuple[int, int]:
    """(kept, total); a log's ERROR line counts as kept only if shown, not counted."""
    return sum(1 for fact in out.facts if fact in view), len(out.facts)


def test_reduce_mixed_corpus(benchmark: BenchmarkFixture, outputs: list[po.Output],
                             benchmarks_enabled: bool) -> None:
    size = 1_000_000 if benchmarks_enabled else 0
    corpus = [(_scaled(o, size), Hint(tool=o.tool)) for o in outputs]
    nbytes = sum(len(data) for data, _ in corpus)

    def run() -> int:
        return sum(len(reduce(data, hint, Budget(2_000)).content) for data, hint in corpus)

    rounds = 5 if benchmarks_enabled else 1
    benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=1 if benchmarks_enabled else 0)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["input_MB"] = round(nbytes / 1e6, 1)
        benchmark.extra_info["MB_per_s"] = round(nbytes / stats.stats.median / 1e6, 1)
        benchmark.extra_info["target_MB_per_s"] = TARGET_MB_PER_S


def test_facts_kept_at_2000_chars(benchmark: BenchmarkFixture, outputs: list[po.Output]) -> None:
    def run() -> dict[str, tuple[int, int]]:
        return {o.name: _facts_kept(o, reduce(o.data, Hint(tool=o.tool), Budget(2_000)).content)
                for o in outputs}

    kept = benchmark.pedantic(run, rounds=1, iterations=1)
    total = sum(t for _, t in kept.values())
    share = sum(k for k, _ in kept.values()) / total
    benchmark.extra_info["facts_kept_share"] = round(share, 3)
    benchmark.extra_info["facts"] = total
    benchmark.extra_info["below_all"] = ",".join(n for n, (k, t) in kept.items() if k < t) or "none"
    assert share >= 0.9
    assert re.search(r"3 failed, 600 passed", reduce(outputs[0].data, budget=Budget(2_000)).content)
