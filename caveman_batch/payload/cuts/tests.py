"""Test runs (pytest, unittest, jest/vitest, go test, cargo test).

The final summary line outranks everything; then pytest's short summary (every
failure's name and message, one line each), then every failure's name, then its
message and location, then the rest of its report. Passing lines are never kept
for a failing run: a run must not look green because its passes were what fit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..model import Limits
from ..view import Doc, Run
from ._lines import LineCut, Stream, rx

_SUMMARY = rx(
    r"^(?:=+ .*\b(?:passed|failed|errors?|skipped|deselected|no tests ran)\b.* =+\r?$"  # pytest
    r"|\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)\b[^\n]* in [\d.]+s"  # -q
    r"|Ran \d+ tests? in |OK(?: \(.*\))?\r?$|FAILED \((?:failures|errors)=.*\)\r?$"  # unittest
    r"|(?:Tests|Test Suites|Test Files|Snapshots):[ \t]+\d"  # jest
    r"| *(?:Test Files|Tests) +\d+ (?:failed|passed)"  # vitest
    r"|(?:ok|FAIL)[ \t]+[^ \t\n]+[ \t]+[\d.]+s\r?$|FAIL\r?$|PASS\r?$"  # go test
    r"|test result: )"  # cargo
)
_FAILURE = rx(
    r"^(?:FAILED |ERROR |_{3,} .* _{3,}\r?$|(?:FAIL|ERROR): |=+ (?:FAILURES|ERRORS) =+"
    r"| *● |FAIL |[ \t]*--- FAIL: |test .* \.\.\. FAILED\r?$|---- .* stdout ----|failures:\r?$"
    r"| *(?:×|✗|✕) )"
)
_DETAIL = rx(
    r"^(?:E |[^ \t\n:]+\.py:\d+: |[ \t]*File \"[^\"]*\", line \d+"
    r"|\w*(?:Error|Exception)\b[^\n]{0,200}:|[ \t]+[^ \t\n]+_test\.go:\d+:|.*panicked at "
    r"|[ \t]+(?:Expected|Received)|[ \t]+at [^ \t\n]+:\d+:\d+|[ \t]+> \d+ \|)"
)
#: the short summary pytest ends a failing run with: each failure's name and message, one line
#: each, worth more than the `____ test ____` headers of the reports above it
_SHORT = rx(r"^(?:=+ short test summary info =+\r?$|FAILED [^ \t\n]+::|ERROR [^ \t\n]+(?:::| - ))")
#: what marks one passing test's line (pytest -v, unittest -v, cargo, jest/vitest, go test): a
#: bare "ok " is not one ("ok ok ok" printed by a test, go's package line, prose)
_PASS_NEEDLES = ("PASSED", "... ok", "✓", "--- PASS")
_PYTEST_PASSED = rx(r"^(?:=+ (?:.*\D)?(\d+) passed\b.* =+\r?$"
                    r"|(?:\d+ \w+, )*(\d+) passed\b[^\n]* in [\d.]+s)")  # and pytest -q's line
_UNITTEST_RAN = rx(r"^Ran (\d+) tests? in ")
_UNITTEST_BAD = rx(r"^FAILED \((.*)\)\r?$")


def _passes(doc: Doc) -> int:
    """How many tests passed: the runs' own counts where their summaries give them (pytest's
    "N passed", unittest's "Ran N tests" less its failures; several runs add up), else one
    per passing line. Only lines holding the summaries' words are searched."""
    lines = doc.lines
    summaries = doc.grep(_PYTEST_PASSED, (" passed",))
    if summaries:
        return sum(int(next(filter(None, m.groups())))
                   for i in summaries if (m := _PYTEST_PASSED.search(lines[i])))  # grep found it
    ran = doc.grep(_UNITTEST_RAN, ("Ran ",))
    if ran:
        total = sum(int(m.group(1)) for i in ran if (m := _UNITTEST_RAN.search(lines[i])))
        failed = sum(int(n) for i in doc.grep(_UNITTEST_BAD, ("FAILED (",))
                     for n in re.findall(r"(?:failures|errors)=(\d+)", lines[i]))
        return max(total - failed, 0)
    return sum(map(doc.count, _PASS_NEEDLES))  # one needle per passing line


class TestsCut(LineCut):
    def lead(self, doc: Doc, limits: Limits) -> list[str]:
        passing = _passes(doc)
        return [f"[tests cut: {passing:,} passing tests omitted; failures and summary kept]"] if passing else []

    def streams(self, doc: Doc) -> list[Stream]:
        return [*super().streams(doc), (6, lambda: _reports(doc))]  # the rest of each report, if room


def _reports(doc: Doc) -> Iterator[Run]:
    """The lines after each failure's name (up to 60, to the next failure), passes left out."""
    failures = doc.grep(_FAILURE)
    lines = doc.lines
    for start, end in zip(failures, [*failures[1:], len(doc)]):
        for i in range(start + 1, min(end, start + 60)):
            if not any(n in lines[i] for n in _PASS_NEEDLES):
                yield (6, i, i + 1)


CUT = TestsCut(
    name="tests",
    signal=rx(r"^(?:=+ (?:test session starts|FAILURES|short test summary info) =+"
              r"|=+ .* in [\d.]+s(?: \([\d:]+\))? =+\r?$|Ran \d+ tests? in "
              r"|Tests:[ \t]+\d|Test Suites:|[ \t]*Test Files[ \t]|--- FAIL: |=== RUN "
              r"|test result: |running \d+ tests?\r?$)"),
    # what each of the signal's alternatives holds, behind the newline it starts after or not
    probes=("\n=", "\nRan ", "\nTests:", "\nTest Suites:", "Test Files",
            "\n--- FAIL: ", "\ntest result: ", "\nrunning "),
    keep=((0, _SUMMARY), (1, _SHORT), (2, _FAILURE), (3, _DETAIL)),
    gap_counts=(("failure", _FAILURE),),
    gap_needles=(("passing", _PASS_NEEDLES),),
    # the short summary's lines hold one of these: only those lines are searched
    needles={_SHORT.pattern: ("short test summary info", "FAILED ", "ERROR ")},
)
