"""payload.reduce over the real-output corpus of issue 17 (made at test time by the machine's
own gcc, make, cargo, javac/java, node/npm, git, pip, pytest, unittest, mypy, ruff, find, ls,
Python logging): the cut each output reaches, and the facts its view keeps."""

from __future__ import annotations

import pytest
from conftest import skip_or_fail

from caveman_batch.payload import Budget, Hint, reduce
from caveman_batch.testing import payload_outputs as po

SMALL = 2_000
#: the share of the facts that fit a 2,000-char view that must be in it
SMALL_SHARE = 0.95
#: facts that wait on the other half of issue 17 (the cuts' own fixes, branch `facts`)
FACTS_HALF = pytest.mark.xfail(strict=True, reason="issue 17 facts half")
#: output -> the budgets at which its facts wait on the facts half: cargo's 30 identical
#: headlines crowd out the locations (grouping), pytest's short summary block, the code cut's
#: outline (top-level classes first; C functions), the binary view
WAITING: dict[str, tuple[int, ...]] = {
    "cargo-errors": (SMALL,), "pytest-many": (SMALL,), "python-source": (SMALL,), "c-source": (SMALL,),
    "binary": (SMALL, 20_000),
}
#: outputs whose cut waits on the facts half: binary input gets "[binary: N bytes, type]"
ROUTE_WAITING = ("binary",)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, po.Output]:
    made, skipped = po.corpus(tmp_path_factory.mktemp("payload-real"))
    corpus = {o.name: o for o in made}
    corpus.update({f"skipped:{name}": why for name, why in skipped.items()})  # type: ignore[misc]
    return corpus


def _output(corpus: dict[str, po.Output], name: str) -> po.Output:
    out = corpus.get(name)
    if out is None:
        reason = next((why for key, why in corpus.items() if key.startswith("skipped:") and name in key), None)
        skip_or_fail(f"{name}: {reason or 'not made'}")
    return out


NAMES = ("pytest", "traceback", "deep-traceback", "git-log", "git-diff", "git-diff-rewrite", "find",
         "git-log-p", "git-log-stat", "git-show", "git-csv", "gcc-mid-errors", "gcc-color", "gcc-link",
         "make-k", "make-recursive", "cargo-errors", "cargo-warnings", "cargo-test", "cargo-panic", "javac",
         "java-trace", "node-crash", "node-error-object", "node-rejection", "npm-offline", "npm-silly", "grep-rn",
         "pip-missing", "pip-build-failure", "pytest-many", "pytest-collect", "unittest", "mypy", "ruff-full",
         "ruff-concise", "ruff-syntax", "find-big", "find-system", "ls-laR", "ls-R", "python-logging",
         "ndjson-log", "binary", "python-source", "c-source")


def test_the_corpus_has_at_least_40_outputs(corpus: dict[str, po.Output]) -> None:
    made = [name for name in corpus if not name.startswith("skipped:")]
    assert set(made) <= set(NAMES), f"outputs no test here names: {sorted(set(made) - set(NAMES))}"
    assert len(made) >= 40, f"only {len(made)} real outputs made: {[k for k in corpus if k.startswith('skipped:')]}"


@pytest.mark.parametrize("name", [pytest.param(n, marks=[FACTS_HALF] if n in ROUTE_WAITING else [])
                                  for n in NAMES])
def test_each_output_reaches_its_cut(corpus: dict[str, po.Output], name: str) -> None:
    out = _output(corpus, name)
    assert len(out.data) > SMALL, "an output that fits 2,000 chars tests no cut"
    result = reduce(out.data, Hint(tool=out.tool), Budget(SMALL))
    assert result.strategy == out.strategy
    default = reduce(out.data, Hint(tool=out.tool)).strategy
    assert default in (out.strategy, "none")


def _facts(name: str, budget: int) -> object:
    marks = [FACTS_HALF] if budget in WAITING.get(name, ()) else []
    return pytest.param(name, budget, marks=marks, id=f"{name}-{budget}")


@pytest.mark.parametrize(("name", "budget"), [_facts(n, b) for n in NAMES for b in (SMALL, 20_000)])
def test_each_view_keeps_its_facts(corpus: dict[str, po.Output], name: str, budget: int) -> None:
    """At 2,000 chars 95% of the facts that fit (a fact longer than the view cannot); at the
    default budget every one."""
    out = _output(corpus, name)
    view = reduce(out.data, Hint(tool=out.tool), Budget(budget)).content
    fitting = [f for f in out.facts if len(f) < budget // 4]
    missing = [f for f in fitting if f not in view]
    if budget == SMALL:
        assert len(fitting) - len(missing) >= SMALL_SHARE * len(fitting), f"{name} lost {missing}"
    else:
        assert not missing, f"{name} lost {missing}"


def test_the_fact_rate_at_2000_chars_is_at_least_95_percent(corpus: dict[str, po.Output]) -> None:
    """Over the whole corpus, the facts that wait on the facts half included."""
    made = [o for name, o in corpus.items() if not name.startswith("skipped:")]
    kept = total = 0
    for out in made:
        view = reduce(out.data, Hint(tool=out.tool), Budget(SMALL)).content
        fitting = [f for f in out.facts if len(f) < SMALL // 4]
        kept += sum(1 for f in fitting if f in view)
        total += len(fitting)
    assert kept >= SMALL_SHARE * total, f"{kept} of {total} facts kept"
