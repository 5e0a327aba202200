"""The proxy's costs: added latency per message, a GitHub-sized tools/list, memory.

    python -m pytest benchmarks/test_bench_proxy.py --benchmark-enable --benchmark-only -s

In the normal run (--benchmark-disable) each runs once, small: 20 MB relayed instead
of 1 GB, a few round trips instead of hundreds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench_data.generate import generate_registry
from caveman_batch import describe, listing
from caveman_batch.proxy import Pending, ServerRelay
from caveman_batch.store import open_store
from caveman_batch.tokens import count_tokens

ECHO = "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line)\n    sys.stdout.buffer.flush()\n"
FLOOD = """import sys
line = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"data":"' + b"x" * 940 + b'"}}\\n'
block, left = line * 256, int(sys.argv[1])
while left > 0:
    sys.stdout.buffer.write(block)
    left -= len(block)
sys.stdout.buffer.flush()
"""


def entry_point() -> list[str]:
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


@pytest.fixture(scope="module")
def github_sized(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """bench_data's GitHub-sized server (the largest file of a 24-server registry), compact."""
    root = tmp_path_factory.mktemp("registry")
    generate_registry(root, seed=1234, servers=24, oversize_bytes=0)
    big = max((p for p in root.rglob("*.json") if "_quirks" not in p.parts),
              key=lambda p: p.stat().st_size)
    return orjson.dumps(orjson.loads(big.read_bytes()))


def test_rewrite_github_sized_tools_list(benchmark: BenchmarkFixture, github_sized: bytes,
                                         tmp_path: Path, benchmarks_enabled: bool) -> None:
    line = b'{"jsonrpc":"2.0","id":1,"result":' + github_sized + b"}\n"
    assert 30_000 < count_tokens(github_sized) < 45_000
    null = os.open(os.devnull, os.O_WRONLY)
    with open_store(f"lmdb://{tmp_path / 'ccr'}") as store:  # the default backend, fsync'd
        relay = ServerRelay(null, Pending(), store)

        def rewrite_cold() -> bytes:
            describe._reduce_cached.cache_clear()  # a new proxy process starts cold
            relay.pending.add(1, "tools/list")
            return relay._handle(line)

        out = benchmark(rewrite_cold)
    os.close(null)
    assert listing.META_KEY.encode() in out and len(out) < len(line)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["median_ms"] = round(stats.stats.median * 1000, 2)
        benchmark.extra_info["tokens_before"] = count_tokens(github_sized)
        benchmark.extra_info["tokens_after"] = count_tokens(out)
        if benchmarks_enabled:
            assert stats.stats.median < 0.050


class Pipe:
    """A process spoken to one line at a time."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    def round_trip(self, line: bytes) -> bytes:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line)
        return self.proc.stdout.readline()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        finally:
            self.proc.kill()
            self.proc.wait()


def _median_rtt(pipe: Pipe, line: bytes, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        assert pipe.round_trip(line) == line
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


@pytest.mark.parametrize("awaiting", [False, True], ids=["streaming", "list-pending"])
def test_passthrough_latency(benchmark: BenchmarkFixture, tmp_path: Path,
                             benchmarks_enabled: bool, awaiting: bool) -> None:
    """Echo round trip through the proxy minus the same round trip direct."""
    echo = tmp_path / "echo.py"
    echo.write_text(ECHO)
    line = b'{"jsonrpc":"2.0","id":77,"result":{"content":[{"type":"text","text":"ok"}]}}\n'
    rounds = 400 if benchmarks_enabled else 5
    direct = Pipe([sys.executable, str(echo)])
    proxied = Pipe([*entry_point(), "proxy", "--store", f"lmdb://{tmp_path / 'ccr'}", "--",
                    sys.executable, str(echo)])
    try:
        if awaiting:  # a tools/list nobody answers keeps the line-by-line path on
            request = b'{"jsonrpc":"2.0","id":"never","method":"tools/list"}\n'
            assert proxied.round_trip(request) == request
        base = _median_rtt(direct, line, rounds)
        _median_rtt(proxied, line, 3)  # warm
        benchmark.pedantic(proxied.round_trip, args=(line,), rounds=rounds, iterations=1)
        through = _median_rtt(proxied, line, rounds)
    finally:
        direct.close()
        proxied.close()
    added_ms = (through - base) * 1000
    benchmark.extra_info["direct_ms"] = round(base * 1000, 3)
    benchmark.extra_info["added_ms"] = round(added_ms, 3)
    assert added_ms < (1.0 if benchmarks_enabled else 50.0)


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for row in status:
            if row.startswith("VmHWM:"):
                return int(row.split()[1]) * 1024
    return 0


def test_memory_flat_while_relaying(benchmark: BenchmarkFixture, tmp_path: Path,
                                    benchmarks_enabled: bool) -> None:
    """A fast upstream, a reader that stalls first: the proxy's peak RSS stays put."""
    total = 1_000_000_000 if benchmarks_enabled else 20_000_000
    flood = tmp_path / "flood.py"
    flood.write_text(FLOOD)
    argv = [*entry_point(), "proxy", "--store", f"lmdb://{tmp_path / 'ccr'}", "--",
            sys.executable, str(flood), str(total)]

    def relay() -> dict[str, int]:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        peaks: list[int] = []
        try:
            assert proc.stdin is not None and proc.stdout is not None
            # a pending tools/list keeps every line on the line-by-line path
            proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n')
            got, start = len(proc.stdout.read(1 << 16)), time.perf_counter()  # it runs
            time.sleep(0.5)  # a stalled client: the pipes fill, nothing else may grow
            peaks.append(_peak_rss(proc.pid))
            while data := proc.stdout.read(1 << 20):
                got += len(data)
                if got % (64 << 20) < len(data):
                    peaks.append(_peak_rss(proc.pid))
            seconds = time.perf_counter() - start
            proc.stdin.close()
            assert proc.wait(30) == 0
        finally:
            proc.kill()
            proc.wait()
        return {"bytes": got, "peak_rss": max(peaks), "stalled_rss": peaks[0],
                "mb_per_s": int(got / 1e6 / seconds)}

    report = benchmark.pedantic(relay, rounds=1, iterations=1)
    assert report["bytes"] >= total
    benchmark.extra_info.update(peak_rss_mb=round(report["peak_rss"] / 2**20, 1),
                                stalled_rss_mb=round(report["stalled_rss"] / 2**20, 1),
                                relay_mb_per_s=report["mb_per_s"])
    # flat: whatever the volume, no more than a few MB above the stalled process
    assert report["peak_rss"] - report["stalled_rss"] < 16 * 2**20, json.dumps(report)
