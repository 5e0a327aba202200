"""payload.reduce over the real-output corpus of issue 17 (made at test time by the machine's
own gcc, make, cargo, javac/java, node/npm, git, pip, pytest, unittest, mypy, ruff, find, ls,
Python logging): the cut each output reaches, and the facts its view keeps."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

from caveman_batch.payload import Budget, Hint, reduce
from caveman_batch.testing import payload_outputs as po

# as conftest.skip_or_fail (not importable by name: benchmarks/ has a conftest too)
IN_CI = bool(os.environ.get("CI"))


def skip_or_fail(reason: str) -> NoReturn:
    """Skip on a developer machine; in CI every tool the corpus runs must be there."""
    if IN_CI:
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)


SMALL = 2_000
#: the share of the facts that fit a 2,000-char view that must be in it
SMALL_SHARE = 0.95
#: facts that wait on a fix still to come (none now: the facts half of issue 17 landed)
FACTS_HALF = pytest.mark.xfail(strict=True, reason="a cut's fix still to come")
WAITING: dict[str, tuple[int, ...]] = {}
ROUTE_WAITING: tuple[str, ...] = ()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, po.Output]:
    made, skipped = po.shared_corpus(lambda: tmp_path_factory.mktemp("payload-corpus"))
    corpus = {o.name: o for o in made}
    corpus.update({f"skipped:{name}": why for name, why in skipped.items()})  # type: ignore[misc]
    return corpus


def _output(corpus: dict[str, po.Output], name: str) -> po.Output:
    out = corpus.get(name)
    if out is None:
        skipped: dict[str, str] = {key.removeprefix("skipped:"): str(why) for key, why in corpus.items()
                                   if key.startswith("skipped:")}
        maker = name.replace("-", "_")  # cargo-errors is made by cargo_errors
        reason = next((why for key, why in skipped.items() if maker in key), None)
        if reason is None:  # a maker named otherwise (npm_verbose makes npm-silly): every skip
            reason = "not made" + "".join(f"; {key} skipped: {why}" for key, why in sorted(skipped.items()))
        skip_or_fail(f"{name}: {reason}")
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


# -- the "Wrong cut" bullets of issue 17, one by one --------------------------------------


def test_errors_in_the_middle_of_a_long_build_are_seen(corpus: dict[str, po.Output]) -> None:
    out = _output(corpus, "gcc-mid-errors")
    text = out.data.decode()
    first = text.find(" error: ")
    assert 16_384 < first < len(text) - 4_096, "the errors must sit past a head and before a tail sample"
    view = reduce(out.data, Hint(), Budget(SMALL)).content
    assert all(f in view for f in out.facts)


def test_ansi_coloured_diagnostics_are_read_as_what_they_say(corpus: dict[str, po.Output]) -> None:
    out = _output(corpus, "gcc-color")
    assert b"\x1b[" in out.data
    result = reduce(out.data, Hint(), Budget(SMALL))
    assert result.strategy == "build" and "\x1b" not in result.content


def test_a_grep_listing_and_an_access_log_are_not_trees(corpus: dict[str, po.Output]) -> None:
    grep = _output(corpus, "grep-rn")
    assert reduce(grep.data, Hint(), Budget(SMALL)).strategy != "tree"
    access = "".join(f'10.0.0.{i % 9} - - [01/Dec/2026:10:{i % 60:02d}:00 +0000] "GET /api/items/{i} HTTP/1.1" '
                     f"200 {100 + i}\n" for i in range(400))  # Common Log Format
    assert reduce(access, Hint(), Budget(SMALL)).strategy != "tree"


def test_a_log_with_patches_is_a_log_and_its_commits_survive(corpus: dict[str, po.Output]) -> None:
    out = _output(corpus, "git-log-p")
    result = reduce(out.data, Hint(), Budget(SMALL))
    assert result.strategy == "gitlog"
    assert all(f in result.content for f in out.facts)  # the newest commit ids and subjects


def test_the_diff_cut_counts_distinct_files(corpus: dict[str, po.Output]) -> None:
    """Two diffs of the same 30 files, one after the other: 30 files changed, not 60."""
    edit = _output(corpus, "git-diff").data
    rewrite = _output(corpus, "git-diff-rewrite").data
    view = reduce(edit + rewrite, Hint(), Budget(SMALL)).content
    assert "[diff cut: 30 files changed]" in view


@pytest.mark.parametrize(("name", "command", "cut"), [
    ("git-log-p", "git log -p -12", "gitlog"), ("git-show", "git show HEAD", "gitlog"),
    ("pip-build-failure", "pip install ./fastthing", "install"), ("make-k", "make -k", "build"),
    ("npm-offline", "npm install", "install"), ("git-diff", "/usr/bin/git diff HEAD~1", "diff"),
])
def test_a_clear_command_hint_picks_its_cut(corpus: dict[str, po.Output], name: str, command: str,
                                            cut: str) -> None:
    out = _output(corpus, name)
    assert reduce(out.data, Hint(command=command), Budget(SMALL)).strategy == cut


def test_a_hint_names_the_cut_tried_first_but_it_must_still_claim_the_text() -> None:
    from caveman_batch.payload import registry

    assert registry.hinted(Hint(command="git log --stat")) == "gitlog"
    assert registry.hinted(Hint(command="python3 -m pip install x")) == "install"
    assert registry.hinted(Hint(command="make test")) == "build"
    assert registry.hinted(Hint(command="gitk")) is None and registry.hinted(Hint(tool="bash")) is None
    text = "".join(f"line {i}: nothing a compiler says\n" for i in range(300))
    assert reduce(text, Hint(command="make"), Budget(SMALL)).strategy.startswith("size")
