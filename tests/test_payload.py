"""payload.reduce over real outputs made at test time: routing, kept facts, the laws, the store."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from caveman_batch import ccr
from caveman_batch.payload import Budget, Hint, PayloadResult, reduce
from caveman_batch.payload.core import DECODED
from caveman_batch.payload.view import Doc, count_lines, plain
from caveman_batch.store import Store, open_store
from caveman_batch.testing import payload_outputs as po

BUDGETS = (2_000, 20_000)
# what every omission marker says: how many of what were left out
# (or, for a listing, each folder's entries counted in place of them)
_MARKED = re.compile(r"\d[\d,]* (?:\w+ ){0,2}(?:omitted|more)\b|\(\+[\d,]+ chars\)"
                     r"|repeated [\d,]+ more|\([\d,]+ entr(?:y|ies)\)")
# cuts whose every kept line is a line of the input (the rest synthesize a summary)
LINE_CUTS = {"tests", "build", "stacktrace", "gitlog", "install", "log", "csv", "repeat"}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, po.Output]:
    made = po.fixtures(tmp_path_factory.mktemp("payload-outputs"))
    return {o.name: o for o in made}


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory://") as s:
        yield s


def check_laws(text: str, budget: Budget, result: PayloadResult, hint: Hint | None = None) -> None:
    view = result.content
    assert not [w for w in result.warnings if "store failed" not in w], result.warnings
    assert len(view) <= budget.max_chars
    if result.strategy == DECODED:  # bytes not UTF-8, shown whole: the footer names them
        body, footer = view.rsplit("\n", 1)
        assert body == text and footer.startswith("[caveman-batch: ")
        assert reduce(view, hint, budget).content == view, "a second pass changed the view"
        return
    assert len(view) <= len(text)
    if budget.max_lines is not None:
        assert count_lines(view) <= budget.max_lines
    if budget.max_line_chars is not None:
        assert max(map(len, view.split("\n"))) <= budget.max_line_chars
    assert reduce(view, hint, budget).content == view, "a second pass changed the view"
    if _encodes(text):  # no lone surrogate in the input: none may appear in the view
        assert _encodes(view)
    if result.strategy == "none":
        assert view == text
        return
    body, footer = view.rsplit("\n", 1)
    assert footer.startswith("[caveman-batch: ")
    if result.strategy == "binary":  # no line of it is shown: its size and type say what it was
        assert re.fullmatch(r"\[binary: [\d,]+ bytes, [\w/ -]+\]", body), body
        return
    assert _MARKED.search(body), "the view does not say what it left out"  # the footer always would
    if result.strategy in LINE_CUTS or result.strategy.startswith("size"):
        source = set(text.split("\n")) | set(plain(text).split("\n"))  # cuts read it without ANSI codes
        for line in view.split("\n"):
            assert line in source or line.startswith("[") or line.endswith("chars omitted]"), line


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


NAMES = ("pytest", "traceback", "deep-traceback", "git-log", "git-diff", "git-diff-rewrite", "find", "api-json", "log", "tsc", "gcc",
         "eslint", "ruff", "cargo")


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", NAMES)
def test_real_output_routes_keeps_facts_and_obeys_the_laws(
        outputs: dict[str, po.Output], name: str, budget: int, store: Store) -> None:
    out = outputs[name]
    text = out.data.decode("utf-8", "replace")
    hint = Hint(tool=out.tool)
    result = reduce(out.data, hint, Budget(budget), store)
    if len(text) > budget:
        assert result.strategy == out.strategy
    check_laws(text, Budget(budget), result, hint)
    if name == "log":
        _all_errors_or_counted(out, result.content)
    else:
        missing = [f for f in out.facts if f not in result.content]
        assert not missing, f"{name} lost {missing}"
    if result.strategy != "none":
        assert result.handle is not None and result.handle in result.content.split("\n")[-1]
        assert ccr.recover(store, result.handle) == out.data


def _all_errors_or_counted(out: po.Output, view: str) -> None:
    """Every ERROR line is in the view, or a gap marker counts it exactly."""
    shown = sum(1 for line in out.facts if line in view)
    counted = sum(int(n.replace(",", "")) for n in re.findall(r"\(([\d,]+) error", view))
    assert shown + counted == len(out.facts)
    assert shown > 0


def test_pytest_run_has_the_failures_and_the_summary_not_the_passes(outputs: dict[str, po.Output]) -> None:
    view = reduce(outputs["pytest"].data, Hint(tool="bash"), Budget(2_000)).content
    assert "PASSED" not in view
    assert re.search(r"\b3 failed, 600 passed\b", view)
    assert "(600 passing)" in view


def test_traceback_collapses_dependency_frames(outputs: dict[str, po.Output]) -> None:
    view = reduce(outputs["traceback"].data, budget=Budget(2_000)).content
    assert "site-packages" not in view and "json/decoder.py" not in view
    assert re.search(r"\(\d+ dependency frames\)", view)


def test_tsc_errors_are_never_a_table() -> None:
    out = po.tsc_output(400)
    result = reduce(out.data, budget=Budget(2_000))
    assert result.strategy == "build"


def test_over_budget_pytest_summary_survives_even_tiny_budgets(outputs: dict[str, po.Output]) -> None:
    view = reduce(outputs["pytest"].data, budget=Budget(600)).content
    assert "3 failed, 600 passed" in view


def test_fitting_output_comes_back_unchanged(store: Store) -> None:
    result = reduce("short\noutput\n", store=store)
    assert (result.content, result.strategy, result.handle) == ("short\noutput\n", "none", None)
    assert list(store.keys()) == []


def test_no_store_names_no_handle() -> None:
    result = reduce(po.service_log().data, budget=Budget(2_000))
    assert result.handle is None
    assert "ccr_" not in result.content and "original not stored" in result.content


class _BrokenStore:
    url = "broken://"

    def commit(self, *a: object, **k: object) -> None:
        raise OSError("disk full")


def test_failing_store_names_no_handle() -> None:
    result = reduce(po.service_log().data, budget=Budget(2_000), store=_BrokenStore())  # type: ignore[arg-type]
    assert result.handle is None and "ccr_" not in result.content
    assert any("store failed" in w for w in result.warnings)


def test_bytes_original_is_what_is_stored(store: Store) -> None:
    raw = b"\xff\xfe bad utf-8\r\n" + b"line\r\n" * 3000
    result = reduce(raw, budget=Budget(2_000), store=store)
    assert result.handle and ccr.recover(store, result.handle) == raw
    assert ccr.info(store, result.handle).content_type == "application/octet-stream"
    check_laws(raw.decode("utf-8", "replace"), Budget(2_000), result)


@pytest.mark.parametrize("raw", [b"ok\nresult: caf\xe9\n", b"\x80" + bytes(range(256)),
                                 b"x" * 300 + b"\xff"])
def test_bytes_not_utf8_within_the_budget_name_their_stored_original(raw: bytes,
                                                                    store: Store) -> None:
    """Their text is not the original (each bad byte is U+FFFD), so however small they
    are, the view is that text and a footer naming the original, stored first."""
    result = reduce(raw, budget=Budget(2_000), store=store)
    text = raw.decode("utf-8", "replace")
    assert result.strategy == DECODED and result.content.split("\n[caveman-batch: ")[0] == text
    assert result.handle and result.handle in result.content.split("\n")[-1]
    assert ccr.recover(store, result.handle) == raw
    check_laws(text, Budget(2_000), result)
    alone = reduce(raw, budget=Budget(2_000))  # no store: the footer says it is not kept
    assert alone.handle is None and alone.content.endswith("original not stored]")


def test_bytes_not_utf8_past_the_room_of_the_footer_are_cut() -> None:
    raw = b"line \xff\n" * 150  # fits 1,200 chars alone, not with the footer
    assert len(raw.decode("utf-8", "replace")) <= 1_200
    result = reduce(raw, budget=Budget(1_200))
    assert result.strategy not in ("none", DECODED)
    check_laws(raw.decode("utf-8", "replace"), Budget(1_200), result)


def test_an_osc_escape_left_open_hides_only_the_rest_of_its_line() -> None:
    """A title escape (ESC ]) with no BEL or ESC \\ ends with its line: the log after it
    is read and cut as ever, its errors shown, not swallowed whole unmarked."""
    rows = ["starting", "\x1b]0;a title never closed"] + [
        f"2026-01-01 12:00:{i % 60:02d} ERROR job {i} failed: disk full" if i % 50 == 0
        else f"2026-01-01 12:00:{i % 60:02d} INFO step {i} ok" for i in range(3_000)]
    text = "\n".join(rows) + "\n"
    assert plain(text).count("\n") == text.count("\n")
    result = reduce(text, budget=Budget(2_000))
    assert result.strategy == "log" and "ERROR job 0 failed" in result.content
    check_laws(text, Budget(2_000), result)
    closed = "a \x1b]8;;http://x\x1b\\link\x1b]8;;\x07 b\n"  # a terminated one: taken out whole
    assert plain(closed) == "a link b\n"


def test_max_lines_and_line_chars_budgets(outputs: dict[str, po.Output]) -> None:
    for out in outputs.values():
        text = out.data.decode("utf-8", "replace")
        for budget in (Budget(20_000, max_lines=30), Budget(5_000, max_line_chars=300)):
            check_laws(text, budget, reduce(out.data, Hint(tool=out.tool), budget))


def test_one_huge_line_is_cut_at_a_character_boundary() -> None:
    text = "😀" * 50_000
    surrogates = text.encode("utf-16-le").decode("utf-16-le", "surrogatepass")
    result = reduce(text, budget=Budget(1_000))
    assert result.content.startswith("😀") and "chars omitted]" in result.content
    check_laws(text, Budget(1_000), result)
    assert surrogates == text


def test_split_surrogate_pairs_are_never_made() -> None:
    pair = "\ud83d\ude00"  # a pair as two code points (what surrogateescape-style text holds)
    text = "x" + pair * 30_000
    view = reduce(text, budget=Budget(1_000)).content
    assert view.count("\ud83d") == view.count("\ude00")


def test_size_fallback_keeps_the_end_for_shell_and_the_start_for_reads() -> None:
    text = "\n".join(f"plain line {i}" for i in range(5_000))
    tail = reduce(text, Hint(tool="bash"), Budget(1_000))
    head = reduce(text, Hint(tool="grep"), Budget(1_000))
    both = reduce(text, None, Budget(1_000))
    assert tail.strategy == "size-tail" and "plain line 4999" in tail.content
    assert "plain line 0\n" not in tail.content
    assert head.strategy == "size-head" and head.content.startswith("plain line 0\n")
    assert "plain line 0\n" in both.content and "plain line 4999" in both.content


def test_json_error_object_deep_in_a_large_array_is_kept() -> None:
    out = po.api_json(20_000)
    view = reduce(out.data, budget=Budget(2_000)).content
    assert "E_UPSTREAM_TIMEOUT" in view and "(item 15,000:)" in view
    assert re.search(r"\([\d,]+ more items\)", view)


def test_json_values_clipped_say_what_they_are() -> None:
    """A long string is clipped at a character of its own (an escape never cut in two) and
    counts the characters of it left out; a long number is clipped without a quote (it
    read as a string), its digits counted; a lone surrogate escape stays an escape."""
    s = "x" * 398 + '"' + "y" * 50
    doc = ('{"s": ' + json.dumps(s) + ', "n": ' + "9" * 500 + ', "lone": "a\\ud800b", "rows": ['
           + ",".join(f'{{"k": {i}}}' for i in range(300)) + "]}")
    result = reduce(doc, budget=Budget(2_000))
    assert result.strategy == "json"
    view = result.content
    view.encode("utf-8")  # (a lone surrogate in it could not be)
    line_s = next(line for line in view.split("\n") if line.lstrip().startswith('"s"'))
    shown = json.loads(line_s.split(": ", 1)[1].split("…")[0] + '"')
    assert s.startswith(shown) and line_s.endswith(f'…" (+{len(s) - len(shown):,} chars)')
    line_n = next(line for line in view.split("\n") if line.lstrip().startswith('"n"'))
    digits = line_n.split(": ", 1)[1].split("…")[0]
    assert set(digits) == {"9"} and line_n.endswith(f"… (+{500 - len(digits):,} digits)")
    assert '"lone": "a\\ud800b"' in view
    check_laws(doc, Budget(2_000), result)


def test_find_of_a_folder_does_not_count_the_folder_as_its_own_entry() -> None:
    lines = ["."] + [f"./dir{d}/file {f}.txt" for d in range(40) for f in range(d * 3 + 1)]
    view = reduce("\n".join(lines) + "\n", Hint(tool="find"), Budget(2_000)).content
    assert view.startswith("[tree cut: 2,380 entries in 40 directories]")
    assert "./ (" not in view  # `.` is the folder searched, not an entry of it


@pytest.mark.parametrize("maker,strategy", [
    (lambda: "\n".join(["id,name,amount"] + [f"{i},row {i},{i * 3}" for i in range(3000)]), "csv"),
    (lambda: "\n".join(["same line again"] * 3000 + ["the end"]), "repeat"),
    (lambda: "".join(f"Collecting pkg{i}\n  Downloading pkg{i}-1.0.tar.gz (12 kB)\n" for i in range(800))
     + "ERROR: Could not find a version that satisfies the requirement nope==9\n"
     + "Successfully installed pkg1-1.0\n", "install"),
    (lambda: "import os\nfrom x import y\n\n" + "".join(
        f"def fn_{i}(a, b):\n    return a + b + {i}\n\n" for i in range(800)), "code"),
])
def test_other_cuts_route(maker: object, strategy: str) -> None:
    text = maker()  # type: ignore[operator]
    result = reduce(text, budget=Budget(2_000))
    assert result.strategy == strategy
    check_laws(text, Budget(2_000), result)


def test_install_keeps_the_error_and_summary() -> None:
    text = "".join(f"Collecting pkg{i}\n  Downloading pkg{i}-1.0.tar.gz (12 kB)\n" for i in range(800))
    text += "ERROR: Could not find a version that satisfies the requirement nope==9\nSuccessfully installed pkg1-1.0\n"
    view = reduce(text, budget=Budget(2_000)).content
    assert "ERROR: Could not find a version" in view and "Successfully installed" in view
    assert "Collecting pkg5\n" not in view


def test_budget_floor_is_a_usage_error() -> None:
    from caveman_batch.errors import UsageError

    with pytest.raises(UsageError):
        Budget(100)


GO_TEST = "".join(f"=== RUN   TestOk{i}\n--- PASS: TestOk{i} (0.00s)\n" for i in range(400)) + (
    "=== RUN   TestParse\n    parse_test.go:42: want 3, got 4\n--- FAIL: TestParse (0.01s)\n"
    "FAIL\nFAIL\texample.com/shop\t0.412s\n")
JEST = "".join(f"  ✓ renders item {i} (3 ms)\n" for i in range(500)) + (
    "  ● Cart › totals › adds tax\n\n    expect(received).toBe(expected)\n\n    Expected: 107\n"
    "    Received: 100\n\n      at Object.<anonymous> (src/cart.test.js:12:23)\n\n"
    "Test Suites: 1 failed, 4 passed, 5 total\nTests:       1 failed, 500 passed, 501 total\n")
CARGO_TEST = "running 402 tests\n" + "".join(f"test tests::ok_{i} ... ok\n" for i in range(400)) + (
    "test tests::parses_header ... FAILED\ntest tests::rounds ... FAILED\n\nfailures:\n\n"
    "---- tests::parses_header stdout ----\nthread 'tests::parses_header' panicked at src/lib.rs:9:5:\n"
    "assertion failed: ok\n\nfailures:\n    tests::parses_header\n    tests::rounds\n\n"
    "test result: FAILED. 400 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n")
UNITTEST = "".join(f"test_ok_{i} (t.T.test_ok_{i}) ... ok\n" for i in range(500)) + (
    "test_bad (t.T.test_bad) ... FAIL\n\n======================================================================\n"
    "FAIL: test_bad (t.T.test_bad)\n----------------------------------------------------------------------\n"
    'Traceback (most recent call last):\n  File "t.py", line 9, in test_bad\n    self.assertEqual(1, 2)\n'
    "AssertionError: 1 != 2\n\n----------------------------------------------------------------------\n"
    "Ran 501 tests in 0.020s\n\nFAILED (failures=1)\n")


@pytest.mark.parametrize("text,facts", [
    (GO_TEST, ("--- FAIL: TestParse", "parse_test.go:42: want 3, got 4", "FAIL\texample.com/shop")),
    (JEST, ("● Cart › totals › adds tax", "Tests:       1 failed, 500 passed", "Expected: 107")),
    (CARGO_TEST, ("test tests::parses_header ... FAILED", "test result: FAILED. 400 passed; 2 failed",
                  "panicked at src/lib.rs:9:5")),
    (UNITTEST, ("FAIL: test_bad (t.T.test_bad)", "AssertionError: 1 != 2", "FAILED (failures=1)",
                "Ran 501 tests")),
], ids=["go", "jest", "cargo", "unittest"])
def test_other_test_runners_keep_failures_and_summary(text: str, facts: tuple[str, ...]) -> None:
    result = reduce(text, Hint(tool="bash"), Budget(2_000))
    assert result.strategy == "tests"
    assert not [f for f in facts if f not in result.content]
    check_laws(text, Budget(2_000), result)


def test_command_hint_picks_the_fallback_end() -> None:
    text = "\n".join(f"plain line {i}" for i in range(5_000))
    assert reduce(text, Hint(command="rg -n foo src/"), Budget(1_000)).strategy == "size-head"
    assert reduce(text, Hint(command="/usr/bin/make all"), Budget(1_000)).strategy == "size-tail"


# -- where the budget goes (issue 12) ----------------------------------------------------

_MARKER = re.compile(r"\[… ([\d,]+) (?:line|lines|rows) omitted(?: \((.*)\))? …\]")


def _walk(view: str, text: str) -> tuple[list[int | None], list[tuple[str, list[str]]]]:
    """A line cut's view read against its original: the original index of each view line
    (None for a marker) and each gap marker with the lines it stands for. Every line that is
    not a marker must be the next line of the original, every marker must count its gap
    exactly; lines of a cut's own lead (on top, not in the original) are skipped."""
    lines = Doc(text).lines
    source = set(lines)
    body = view.split("\n")[:-1]  # the footer is last
    while body and body[0] not in source and not _MARKER.fullmatch(body[0]):
        body.pop(0)
    at: list[int | None] = []
    gaps: list[tuple[str, list[str]]] = []
    pos = 0
    for line in body:
        marker = _MARKER.fullmatch(line)
        if marker:
            k = int(marker[1].replace(",", ""))
            gaps.append((line, lines[pos:pos + k]))
            at.append(None)
            pos += k
            continue
        assert lines[pos] == line or (line.endswith(" chars omitted]")
                                      and lines[pos].startswith(line[:line.rindex(" [… ")])), (pos, line)
        at.append(pos)
        pos += 1
    assert pos == len(lines), "the markers do not count every hidden line"
    return at, gaps


WALKED = ("traceback", "deep-traceback", "git-log", "git-diff", "git-diff-rewrite", "pytest", "log", "tsc",
          "gcc", "cargo")


@pytest.mark.parametrize("budget", (2_000, 6_000, 20_000))
@pytest.mark.parametrize("name", WALKED)
def test_no_gap_is_marked_that_costs_less_to_show(outputs: dict[str, po.Output], name: str, budget: int) -> None:
    out = outputs[name]
    text = out.data.decode()
    result = reduce(out.data, Hint(tool=out.tool), Budget(budget))
    if result.strategy == "none":
        return
    assert result.strategy == out.strategy
    _, gaps = _walk(result.content, text)
    cheap = [(marker, hidden) for marker, hidden in gaps if sum(len(x) + 1 for x in hidden) <= len(marker) + 1]
    assert not cheap


def test_markers_are_reserved_at_their_true_size() -> None:
    """Errors between info lines: the budget is filled to within one error and its marker,
    which a reservation at the longest marker (counts included) would leave far from full."""
    from caveman_batch.payload.cuts import log
    from caveman_batch.payload.model import Limits

    text = "".join(f"2026-01-02T03:04:{i % 60:02d}Z INFO step {i} ok\n" * 3
                   + f"2026-01-02T03:04:{i % 60:02d}Z ERROR job {i:04d} failed\n" for i in range(3_000))
    view = log.CUT.cut(text, Limits(1_800))
    assert view is not None
    error = len("2026-01-02T03:04:00Z ERROR job 0000 failed")
    assert 1_800 - len(view) < error + 1 + len("[… 3 lines omitted …]") + 1 + 2
    assert view.count(" ERROR job ") > 1_800 // (error + 1 + len("[… 11,999 lines omitted (2,999 error) …]"))


def _count(marker: str, what: str) -> int:
    found = re.search(rf"([\d,]+) {what}", marker)
    return int(found[1].replace(",", "")) if found else 0


@pytest.mark.parametrize("budget", (2_000, 6_000))
def test_deep_traceback_keeps_both_ends_and_collapses_the_middle(
        outputs: dict[str, po.Output], budget: int) -> None:
    out = outputs["deep-traceback"]
    text = out.data.decode()
    assert text.count('  File "') == 120 and "^^^^" in text  # a real deep trace, 3.11 carets in it
    view = reduce(out.data, budget=Budget(budget)).content
    assert not [f for f in out.facts if f not in view]  # <module>, handler, dispatch ... parse_leaf, check
    at, gaps = _walk(view, text)
    assert len(gaps) == 1, "the middle is one marker"
    shown = view.count('  File "')
    assert _count(gaps[0][0], "frames") == 120 - shown == sum(1 for x in gaps[0][1] if x.startswith('  File "'))
    lines = Doc(text).lines
    carets = 0
    for k, i in enumerate(at):  # every shown frame comes whole: its code and caret lines with it
        if i is not None and lines[i].startswith('  File "'):
            end = i + 1
            while lines[end].startswith("    "):
                end += 1
            own = list(range(i + 1, end))
            assert at[k + 1:k + 1 + len(own)] == own
            carets += sum(lines[j].strip(" ^") == "" for j in own)
    assert carets >= 5
    outer = [line for line in view.split("\n") if line.startswith('  File "')][:3]
    assert [line.rsplit(" in ", 1)[1] for line in outer] == ["<module>", "handler", "dispatch"]


def test_git_log_shows_the_newest_commit_whole_and_more_subjects(outputs: dict[str, po.Output]) -> None:
    out = outputs["git-log"]
    text = out.data.decode()
    assert text.count("\ncommit ") + 1 == 61 and len(set(re.findall(r"^Author: .*", text, re.M))) == 7
    view = reduce(out.data, budget=Budget(2_000)).content
    newest = text.split("\n\n", 1)[0]  # commit, Author, Date
    assert view.startswith(newest + "\n")
    subjects = [line for line in view.split("\n") if re.match(r"    Change \d+:", line)]
    assert len(subjects) >= 15  # what the view showed before (and no Author or Date line)
    _walk(view, text)


def test_a_long_git_log_shows_authors_and_dates_at_the_default_budget(tmp_path: Path) -> None:
    repo = po.git_repo(tmp_path, commits=200)
    log = subprocess.run(["git", "log"], cwd=repo, capture_output=True, check=True).stdout.decode()
    view = reduce(log).content
    dates = re.findall(r"^Date: .*", view, re.M)
    assert len(dates) >= 10 and re.findall(r"^Date: .*", log, re.M)[:len(dates)] == dates  # the newest
    assert len(re.findall(r"^    Change \d+:", view, re.M)) >= 150
    _walk(view, log)


def _file_changes(text: str) -> dict[str, list[str]]:
    """Each file of a git diff with its hunk headers and changed lines."""
    files: dict[str, list[str]] = {}
    for part in ("\n" + text).split("\ndiff --git ")[1:]:
        head, *rest = part.split("\n")
        files["diff --git " + head] = [x for x in rest if x.startswith(("@@", "+", "-"))
                                       and not x.startswith(("+++ ", "--- "))]
    return files


@pytest.mark.parametrize("budget,least", [(2_000, 4), (6_000, 20)])
def test_diff_spends_the_budget_on_hunks_file_by_file(
        outputs: dict[str, po.Output], budget: int, least: int) -> None:
    out = outputs["git-diff"]
    text = out.data.decode()
    files = _file_changes(text)
    assert len(files) == 30 and len(text) > 6_000
    view = reduce(out.data, budget=Budget(budget)).content
    shown = [f for f in files if f in view.split("\n")]
    whole = [f for f in shown if all(x in view.split("\n") for x in files[f])]
    assert shown == list(files)[:len(shown)]  # file by file, in order
    assert whole == shown[:len(whole)] and len(whole) >= max(least, len(shown) - 1)
    assert len(whole) > len(files) // 2 or budget < 6_000  # at 6,000: most files' changed lines
    _, gaps = _walk(view, text)
    assert sum(_count(marker, "files?") for marker, _ in gaps) == len(files) - len(shown)  # the rest counted
    assert view.split("\n")[1:31] == [f"  {name.split(' b/')[-1]} +{sum(x[0] == '+' for x in files[name])} "
                                      f"-{sum(x[0] == '-' for x in files[name])}" for name in files]


def test_diff_of_whole_rewrites_shows_hunks_too(outputs: dict[str, po.Output]) -> None:
    out = outputs["git-diff-rewrite"]
    view = reduce(out.data, budget=Budget(2_000)).content.split("\n")
    first = _file_changes(out.data.decode())["diff --git a/src/mod_00.py b/src/mod_00.py"]
    assert first[0] in view and sum(x in view for x in first[1:]) >= 10


def test_a_diff_of_many_files_lists_what_fits_and_still_shows_hunks(tmp_path: Path) -> None:
    repo = po.git_repo(tmp_path, commits=2, files=300)
    text = subprocess.run(["git", "diff", "HEAD~1", "HEAD"], cwd=repo, capture_output=True, check=True).stdout.decode()
    result = reduce(text, budget=Budget(2_000))
    check_laws(text, Budget(2_000), result)
    view = result.content.split("\n")
    listed = [x for x in view if re.fullmatch(r"  src/mod_\d+\.py \+\d+ -\d+", x)]
    assert view[0] == "[diff cut: 300 files changed]" and view[len(listed) + 1] == f"  … {300 - len(listed)} more files"
    assert 20 <= len(listed) < 300
    changes = _file_changes(text)["diff --git a/src/mod_00.py b/src/mod_00.py"]
    assert all(x in view for x in changes)


def test_a_short_binary_is_named_binary_by_its_magic_bytes() -> None:
    """Below 400 chars the binary check was skipped: a 41-byte PNG was shown decoded, NULs
    and all, though the README says binary input gets [binary: ...] even within the budget."""
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 13 + b"\x00\x00\x00\x00IEND\xaeB`\x82"
    result = reduce(png)
    assert result.strategy == "binary" and result.content.startswith("[binary: 41 bytes, PNG]")
    few = "a short log line with one bad byte \xff here\n".encode("latin-1")
    assert reduce(few).strategy != "binary"  # (no magic: a few bytes prove nothing)


def test_json_nested_too_deep_to_parse_is_no_cuts_failure() -> None:
    """The JSON cut's RecursionError reached the report as 'cut json failed and was skipped',
    which reads as a broken plug-in."""
    result = reduce("[" * 100_000 + "]" * 100_000)
    assert result.warnings == () and result.strategy != "json"


def test_a_text_too_long_only_by_its_colour_codes_is_shown_without_them() -> None:
    """Every cut must be shorter than the (stripped) text it cuts: each failed, and the view
    said the whole output was omitted, nothing fitting the budget."""
    text = "\x1b[2K\x1b[1G" * 5000 + "done: 3 files\n"
    result = reduce(text, budget=Budget(2_000))
    assert result.strategy == "stripped" and result.content.startswith("done: 3 files\n")
    assert "omitted" not in result.content


def test_the_json_view_shows_each_number_as_written() -> None:
    """Floats were parsed and re-serialized: 1e400 showed as Infinity (a fact the original
    does not hold), 1e-400 as 0.0, 1E5 as 100000.0, 0.10 as 0.1, -0 as 0, and a long one's
    digits were counted of the re-serialized text."""
    numbers = ["1e400", "1e-400", "3.14159265358979323846264338", "1E5", "0.5e308", "-0", "2.50",
               "NaN", "-Infinity", "7"]
    text = ('{"values": [' + ", ".join(numbers) + '], "long": 1.' + "1" * 900 + ', "pad": "'
            + "x" * 3000 + '"}')
    result = reduce(text, budget=Budget(2_000))
    assert result.strategy == "json"
    lines = [line.strip() for line in result.content.splitlines()]
    assert lines[2:2 + len(numbers)] == numbers, result.content
    long = next(line for line in lines if line.startswith('"long": '))
    digits = len("1." + "1" * 900)
    shown = long[len('"long": '):].split("…")[0]
    assert long.endswith(f"(+{digits - len(shown):,} digits)") and shown.startswith("1.111")
    plain = reduce('{"n": [1, 2, 3], "pad": "' + "x" * 3000 + '"}', budget=Budget(2_000))
    assert '"n": [' in plain.content  # (no float: the fast parse, the same view)
