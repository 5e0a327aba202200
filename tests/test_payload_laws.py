"""The laws every cut obeys, on random text (hypothesis) and adversarial inputs; plugins."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from caveman_batch.payload import Budget, Hint, Limits, reduce, registry
from caveman_batch.payload.view import count_lines
from payload_kinds import KINDS
from test_payload import check_laws

_TOKENS = [
    "ERROR", "WARN", "INFO", "PASSED", "FAILED test_x.py::t - E", "=== 1 failed, 2 passed in 0.1s ===",
    "diff --git a/x b/x", "+++ b/x", "@@ -1,2 +1,2 @@", "+add", "-del", "commit 0123456789abcdef0123",
    "src/a.ts(3,5): error TS2322: x", "a.c:1:2: error: y", "  1:2  error  msg  rule", "x.py:1:1: F401 z",
    "Traceback (most recent call last):", '  File "x.py", line 1, in f', "    at f (a.js:1:2)",
    "./a/b/c.txt", "a,b,c", "1,2,3", "{", "}", "[", "]", '"k": 1,', "import os", "def f(x):",
    "Collecting pkg", "npm WARN x", "😀", "\ud83d\ude00", "\r", "\t", "…", "[… 3 lines omitted …]",
]
lines = st.one_of(st.sampled_from(_TOKENS), st.text(max_size=60),
                  st.builds(lambda a, b: a + " " + b, st.sampled_from(_TOKENS), st.text(max_size=30)))
texts = st.lists(lines, max_size=400).map("\n".join)
budgets = st.builds(Budget, st.integers(400, 4_000),
                    st.one_of(st.none(), st.integers(5, 80)), st.one_of(st.none(), st.integers(256, 600)))
hints = st.builds(Hint, st.sampled_from([None, "bash", "grep", "read", "mcp_tool"]))


def _big_enough(text: str, budget: Budget) -> bool:
    """The laws need room for a footer: an input under ~250 chars over budget only by its
    line count cannot shrink and still name its handle (documented limit)."""
    return len(text) > 600 or (len(text) <= budget.max_chars and (budget.max_lines or 10**9) >= count_lines(text))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, budgets, hints)
def test_laws_on_random_text(text: str, budget: Budget, hint: Hint) -> None:
    if not _big_enough(text, budget):
        return
    check_laws(text, budget, reduce(text, hint, budget), hint)


long_lines = st.builds(lambda token, n, tail: (token + " ") * n + tail, st.sampled_from(_TOKENS),
                       st.integers(10, 400), st.text(max_size=20))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(lines, long_lines), min_size=2, max_size=60).map("\n".join), budgets, hints)
def test_laws_with_over_long_lines(text: str, budget: Budget, hint: Hint) -> None:
    """Lines of 200+ chars among short ones: those cut to the room left keep every law."""
    if not _big_enough(text, budget):
        return
    result = reduce(text, hint, budget)
    event(result.strategy)
    check_laws(text, budget, result, hint)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(lines, min_size=50, max_size=400).map("\n".join), st.integers(400, 3_000))
def test_laws_on_random_bytes(text: str, max_chars: int) -> None:
    raw = text.encode("utf-8", "surrogatepass") + b"\xff\n"
    result = reduce(raw, None, Budget(max_chars))
    check_laws(raw.decode("utf-8", "replace"), Budget(max_chars), result)


@st.composite
def over_budget(draw: st.DrawFn, kind: str) -> str:
    """A tool output of one kind, with random lines mixed in here and there."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    body = KINDS[kind](rnd, draw(st.integers(150, 600)))
    for extra in draw(st.one_of(st.just([]), st.lists(lines, max_size=8))):  # half pure
        body.insert(rnd.randrange(len(body) + 1), extra)
    return "\n".join(body)


EACH_KIND = settings(max_examples=25, derandomize=True, database=None, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.parametrize("kind", sorted(KINDS))
@EACH_KIND
@given(data=st.data(), budget=budgets, hint=hints)
def test_laws_on_over_budget_text_of_every_kind(kind: str, data: st.DataObject, budget: Budget,
                                                hint: Hint) -> None:
    text = data.draw(over_budget(kind))
    assume(len(text) > budget.max_chars)
    result = reduce(text, hint, budget)
    event(result.strategy)
    assert result.strategy != "none"  # over budget: something was cut
    check_laws(text, budget, result, hint)


@pytest.mark.parametrize("kind", sorted(KINDS))
@EACH_KIND
@given(data=st.data(), max_chars=st.integers(400, 3_000),
       junk=st.lists(st.binary(min_size=1, max_size=3), min_size=1, max_size=6))
def test_laws_on_over_budget_bytes_of_every_kind(kind: str, data: st.DataObject, max_chars: int,
                                                 junk: list[bytes]) -> None:
    """Bytes that are not UTF-8 (random junk and 0xFF at line starts) in any kind of output."""
    rows = data.draw(over_budget(kind)).encode("utf-8", "surrogatepass").split(b"\n")
    for i, piece in enumerate(junk):
        at = (i * 7919) % len(rows)
        rows[at] = piece + b"\xff" + rows[at]
    raw = b"\n".join(rows)
    result = reduce(raw, None, Budget(max_chars))
    event(result.strategy)
    check_laws(raw.decode("utf-8", "replace"), Budget(max_chars), result)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_reaches_its_cut(kind: str) -> None:
    """The generator above makes what it says: each kind goes to its own cut, over budget."""
    for seed in range(3):
        text = "\n".join(KINDS[kind](random.Random(seed), 300))
        result = reduce(text, Hint(), Budget(2_000))
        assert len(text) > 2_000 and result.strategy == kind, (seed, result.strategy)


ADVERSARIAL = [
    "a" * 200_000, " " * 200_000, "\n" * 200_000, "=" * 200_000, "= " * 100_000, "E " * 100_000,
    "\t" * 200_000, "1:1 " * 50_000, "(1,1): error " * 20_000, "  1:1  error " + " " * 200_000 + "x",
    "x" + ":1" * 100_000, "Error" * 40_000, "a/" * 100_000, "[" * 100_000, "{\"a\":" * 30_000,
    "\n".join(["  1:2  error  " + "a" * 5_000] * 40), "+" * 200_000, "commit " + "a" * 200_000,
    ("\n" + "-" * 3) * 60_000, "=" * 100_000 + " passed " + "=" * 100_000,
    # a C function's head: a type and a name side by side were tried at every split
    "struct " + "a" * 100_000 + " (", "#include <a.h>\n" + "x_t" * 40_000 + " (",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=[f"adv{i}" for i in range(len(ADVERSARIAL))])
def test_every_cut_runs_in_linear_time_on_adversarial_input(text: str) -> None:
    for cut in registry.cuts(Hint(), []):
        start = time.perf_counter()
        if cut.detect(text, Hint()):
            cut.cut(text, Limits(1_760))
        assert time.perf_counter() - start < 1.5, cut.name
    check_laws(text, Budget(2_000), reduce(text, budget=Budget(2_000)))


@dataclass
class _EveryThing:
    name: str = "everything"

    def detect(self, text: str, hint: Hint) -> bool:
        return hint.tool == "plugin-tool"

    def cut(self, text: str, limits: Limits) -> str | None:
        return "[everything cut: all omitted]"


class _ExplodingCut(_EveryThing):
    name = "explodes"

    def detect(self, text: str, hint: Hint) -> bool:
        raise RuntimeError("boom")


class _BytesCut(_EveryThing):
    def cut(self, text: str, limits: Limits) -> str | None:
        return b"[all omitted]"  # type: ignore[return-value]


class _ExitingCut(_EveryThing):
    def cut(self, text: str, limits: Limits) -> str | None:
        raise SystemExit(3)


@dataclass
class _EP:
    name: str
    target: object

    def load(self) -> object:
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


def test_plugins_load_lazily_and_broken_ones_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = [_EP("broken", ImportError("no module")), _EP("explodes", _ExplodingCut(name="explodes")),
           _EP("bytes", _BytesCut(name="bytes")), _EP("exits", _ExitingCut(name="exits")),
           _EP("number-named", _EveryThing(name=42)),  # type: ignore[arg-type]
           _EP("two-lines", _EveryThing(name="two\nlines")), _EP("good", _EveryThing),
           _EP("not-a-cut", object())]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == registry.ENTRY_POINT_GROUP else [])
    registry.refresh()
    try:
        text = "\n".join(f"plain {i}" for i in range(2_000))
        result = reduce(text, Hint(tool="plugin-tool"), Budget(1_000))
        assert result.strategy == "everything"
        assert any("'broken' skipped" in w for w in result.warnings)
        assert any("'not-a-cut' skipped" in w for w in result.warnings)
        assert any("'explodes' failed" in w for w in result.warnings)
        assert any("'bytes' returned bytes" in w for w in result.warnings)
        assert any("'exits' failed" in w and "SystemExit" in w for w in result.warnings)
        assert any("'number-named' skipped" in w for w in result.warnings)
        assert any("'two-lines' skipped" in w for w in result.warnings)
        footer = result.content.split("\n")[-1]  # the good one's name, on the footer's one line
        assert footer.startswith("[caveman-batch: ") and "(everything cut)" in footer
        assert reduce(text, Hint(tool="bash"), Budget(1_000)).strategy == "size-tail"
    finally:
        registry.refresh()
