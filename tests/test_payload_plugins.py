"""Outside cuts, installed for real (a distribution on sys.path with its entry points), and
the budget law holding whatever they return."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from caveman_batch.payload import Budget, Hint, reduce, registry
from caveman_batch.payload.view import count_lines

PLUGIN = '''
class Greedy:
    """Claims every output of its tool and ignores the limits it is given."""
    name = "greedy"

    def __init__(self, view):
        self.view = view

    def detect(self, text, hint):
        return hint.tool == "greedy-tool"

    def cut(self, text, limits):
        return self.view(text)


WHOLE = Greedy(lambda text: text[: len(text) - 1])            # 79 KB for a 1,000-char budget
MANY_LINES = Greedy(lambda text: "\\n".join("x" for _ in range(300)))  # few chars, too many lines
WIDE = Greedy(lambda text: "y" * 900)                              # one line wider than allowed
'''


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Install a distribution exposing one cut (by attribute name) under the plugin group."""
    def install(attr: str) -> None:
        site = tmp_path / f"site-{attr}"
        dist = site / "greedy_cut-1.0.dist-info"
        dist.mkdir(parents=True)
        (site / "greedy_cut.py").write_text(PLUGIN)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: greedy-cut\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(
            f"[{registry.ENTRY_POINT_GROUP}]\ngreedy = greedy_cut:{attr}\n")
        monkeypatch.syspath_prepend(str(site))
        sys.modules.pop("greedy_cut", None)
        registry.refresh()

    yield install
    sys.modules.pop("greedy_cut", None)
    registry.refresh()


@pytest.mark.parametrize(("attr", "budget"), [
    ("WHOLE", Budget(1_000)),
    ("MANY_LINES", Budget(5_000, max_lines=40)),
    ("WIDE", Budget(5_000, max_line_chars=300)),
])
def test_a_cut_that_ignores_its_limits_is_skipped(installed, attr: str, budget: Budget) -> None:  # type: ignore[no-untyped-def]
    installed(attr)
    text = "".join(f"plain line {i} of a long tool output\n" for i in range(2_200))  # ~79 KB
    result = reduce(text, Hint(tool="greedy-tool"), budget)
    assert result.strategy != "greedy"
    assert any("'greedy' ignored its limits" in w for w in result.warnings)
    assert len(result.content) <= budget.max_chars
    if budget.max_lines is not None:
        assert count_lines(result.content) <= budget.max_lines
    if budget.max_line_chars is not None:
        assert max(map(len, result.content.split("\n"))) <= budget.max_line_chars


def test_a_cut_within_its_limits_is_used(installed) -> None:  # type: ignore[no-untyped-def]
    installed("MANY_LINES")
    text = "".join(f"plain line {i}\n" for i in range(2_200))
    result = reduce(text, Hint(tool="greedy-tool"), Budget(5_000))
    assert result.strategy == "greedy" and not result.warnings
