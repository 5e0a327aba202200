"""Token savings over ../shared/corpora, with the baselines needed to read them (skipped when absent).

    python -m pytest benchmarks/test_bench_savings.py --benchmark-enable --benchmark-only -s

Four exact o200k_base counts over every catalog of the corpora:

* as given: the files byte for byte (mostly pretty-printed);
* minified: the same documents with no white space between tokens. Clients re-serialize
  tool definitions before a model sees them, so the saving beyond this is the one an
  agent feels;
* ours: `caveman_batch.catalog.compress`;
* ceiling: what the same contract could save if no sentence at all were a rule (every
  long description reduced to its 80-byte lead, annotations dropped). No compressor
  that keeps rule sentences can pass it; the distance to it is what keeping rules costs;
* issue words: an ablation, the same reduction with a rule detector limited to the
  compressor issue's own word list (caveman_batch.testing.issue_rules) in place of ours.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from caveman_batch import catalog, describe
from caveman_batch.testing.issue_rules import ISSUE_RULE
from caveman_batch.tokens import count_tokens

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"


def _lead_only(text: str) -> str:
    folded = describe.fold(text)
    if describe._is_short(folded, describe.SHORT_BYTES):
        return folded
    first = describe.split_sentences(folded)[0]
    return describe.cut_lead(folded[first.start:first.end])


def _issue_words_only(text: str) -> str:
    """describe.reduce with the issue's word list as the only rule detector."""
    folded = describe.fold(text)
    if describe._is_short(folded, describe.SHORT_BYTES):
        return folded
    parts: list[str] = []
    lead = None
    for unit in describe.units(folded):
        body = folded[unit.start:unit.end]
        if not ISSUE_RULE.search(body):
            if lead is not None:
                continue
            body = lead = describe.cut_lead(body)
        parts += [describe._separator(folded, unit.start), body] if parts else [body]
    return "".join(parts)


def _rewritten(raw: bytes, reducer: Callable[[str], str]) -> bytes:
    doc = catalog.parse(raw)
    walk = catalog._Walk(catalog.DEFAULT_OPTIONS, reducer)
    for tool in catalog.locate_tools(doc)[1]:
        walk.tool(tool, "")
    return catalog.serialize(doc)


def _figures(paths: list[Path]) -> dict[str, int]:
    totals = dict.fromkeys(("as_given", "minified", "ours", "issue_words", "ceiling"), 0)
    for path in paths:
        raw = path.read_bytes()
        totals["as_given"] += count_tokens(raw)
        totals["minified"] += count_tokens(json.dumps(json.loads(raw), separators=(",", ":"),
                                                      ensure_ascii=False))
        totals["ours"] += count_tokens(catalog.compress(raw)[0])
        totals["issue_words"] += count_tokens(_rewritten(raw, _issue_words_only))
        totals["ceiling"] += count_tokens(_rewritten(raw, _lead_only))
    return totals


def test_savings_over_the_corpora(benchmark: BenchmarkFixture) -> None:
    paths = sorted(CORPORA.glob("*/catalogs/*.json"))
    if not paths:
        if os.environ.get("CI"):  # CI lays them beside the clone: absent there is a failure
            pytest.fail(f"CI: shared corpora not present at {CORPORA}")
        pytest.skip(f"shared corpora not present at {CORPORA}")
    totals = benchmark.pedantic(_figures, args=(paths,), rounds=1, iterations=1)
    saved = {f"{name}_vs_{base}": round(1 - totals[name] / totals[base], 4)
             for name in ("ours", "issue_words", "ceiling") for base in ("as_given", "minified")}
    benchmark.extra_info.update(catalogs=len(paths), **totals, **saved)
    assert totals["ceiling"] <= totals["issue_words"] <= totals["ours"] < totals["minified"] < totals["as_given"]
    assert saved["ours_vs_as_given"] >= 0.23
