"""The description reducer, golden: folding, sentence splitting, units, the lead cut, rule keeping.

F1 and F2 are filler sentences that state no rule: a long description made of a lead,
F1, F2 and rule sentences must come out as the lead plus the rules, in order. The
regex probes at the end check that every pattern in describe.py and rules.py runs in
linear time on inputs built to make a backtracking engine stall.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caveman_batch import describe, markup, rules
from caveman_batch.describe import (
    ELLIPSIS,
    cut_lead,
    explain,
    fold,
    reduce,
    split_sentences,
    units,
)
from caveman_batch.rules import is_rule

F1 = "The output is shown as a friendly table in the terminal window."
F2 = "This is a friendly helper for people who like gardens and flowers."


def sentences(text: str) -> list[str]:
    folded = fold(text)
    return [folded[s.start:s.end] for s in split_sentences(folded)]


def unit_texts(text: str) -> list[str]:
    folded = fold(text)
    return [folded[u.start:u.end] for u in units(folded)]


def test_fillers_state_no_rule() -> None:
    assert not is_rule(F1) and not is_rule(F2)
    assert len(f"Lists files. {F1} {F2}".encode()) < 160 < len(f"Lists files. {F1} {F2} {F1}".encode())


# -- folding -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "folded"), [
    ("  a \t b  ", "a b"),
    ("a\nb", "a b"),
    ("a\r\nb", "a b"),
    ("a\n\tb", "a b"),
    ("a\u00a0b\u2028c", "a b c"),
    ("a\n\n\nb", "a\n\nb"),
    ("a\r\n\r\nb", "a\n\nb"),
    ("a\n  \n b", "a\n\nb"),
    ("a\n- b", "a\n- b"),
    ("a\n 1. b", "a\n1. b"),
    ("a\n* b\n+ c\n• d\n2) e\n(iv) f\na) g", "a\n* b\n+ c\n• d\n2) e\n(iv) f\na) g"),
    ("a\n100. b\n(viii) c", "a\n100. b\n(viii) c"),  # the longest numbers a list marker takes
    ("a\n1000. b\n(viiii) c", "a 1000. b (viiii) c"),
    ("a\n-b", "a -b"),
    ("\n- a\n- b\n", "- a\n- b"),
    ("x", "x"),
    ("", ""),
])
def test_fold(text: str, folded: str) -> None:
    assert fold(text) == folded
    assert fold(folded) == folded


@pytest.mark.parametrize("text", ["Options:\n- ", "a\n- \n- b", "Steps\n1. "])
def test_fold_idempotent_on_an_empty_list_item(text: str) -> None:
    assert fold(fold(text)) == fold(text)
    assert reduce(reduce(text)) == reduce(text)


# -- sentence splitting --------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("Stop! Go? Yes. Done", ["Stop!", "Go?", "Yes.", "Done"]),
    ("One.\n\nTwo\n\nThree", ["One.", "Two", "Three"]),
    ("Intro:\n- a\n- b", ["Intro:", "- a", "- b"]),
    ("Intro\n1. a\n2. b", ["Intro", "1. a", "2. b"]),
    ("Use e.g. Apples here. Next one.", ["Use e.g. Apples here.", "Next one."]),
    ("Fruits, i.e. Apples. Next one.", ["Fruits, i.e. Apples.", "Next one."]),
    ("Pears etc. Apples are here. Next one.", ["Pears etc. Apples are here.", "Next one."]),
    ("Apples vs. Oranges is here. Next one.", ["Apples vs. Oranges is here.", "Next one."]),
    ("E.g. this one. Next one.", ["E.g. this one.", "Next one."]),
    ("Written by J. Smith and J. R. R. Tolkien. Next one.", ["Written by J. Smith and J. R. R. Tolkien.", "Next one."]),
    ("Value 1.5 or 3.14 is fine. Next one.", ["Value 1.5 or 3.14 is fine.", "Next one."]),
    ("Version v1.2.3 is out. Next one.", ["Version v1.2.3 is out.", "Next one."]),
    ("Read config.json or Config.Json first. Next one.", ["Read config.json or Config.Json first.", "Next one."]),
    ("See https://example.com/A.B/c?x=1. Next one.", ["See https://example.com/A.B/c?x=1.", "Next one."]),
    ("Path /srv/Data.Old/x here. Next one.", ["Path /srv/Data.Old/x here.", "Next one."]),
    ("Path C:\\Users\\Me.Txt here. Next one.", ["Path C:\\Users\\Me.Txt here.", "Next one."]),
    ("Paths are absolute, e.g. /srv/data. Next one.", ["Paths are absolute, e.g. /srv/data.", "Next one."]),
    ("Run `a.B() Now. Then` first. Next one.", ["Run `a.B() Now. Then` first.", "Next one."]),
    ('He said "Stop. Now? Go!" loudly. Next one.', ['He said "Stop. Now? Go!" loudly.', "Next one."]),
    ("He said “Stop. Now” loudly. Next one.", ["He said “Stop. Now” loudly.", "Next one."]),
    ('It ends here." Next one.', ['It ends here."', "Next one."]),
    ("It ends (here.) Next one.", ["It ends (here.)", "Next one."]),
    ("Wait… Next one.", ["Wait…", "Next one."]),
    ("Lower case. after a period stays.", ["Lower case. after a period stays."]),
    ("At most 10. Use less.", ["At most 10. Use less."]),
    ('Use "fast". Then wait.', ['Use "fast".', "Then wait."]),
    ("It ends [see (here.)] Next one.", ["It ends [see (here.)]", "Next one."]),
    ("It ends (see ‘here…’) Next one.", ["It ends (see ‘here…’)", "Next one."]),
    ("First part\n\nsecond part starts lower.", ["First part", "second part starts lower."]),
    ("Pick one:\na) red\nb) blue", ["Pick one:", "a) red", "b) blue"]),  # a kept break ends one, lowercase or not
    ("Go to step 1. Then wait. Next one.", ["Go to step 1. Then wait.", "Next one."]),
    ("Some fruit (e.g. Apples) is here. Next one.", ["Some fruit (e.g. Apples) is here.", "Next one."]),
    ("Ask Dr. Who now. Next one.", ["Ask Dr. Who now.", "Next one."]),
    ("Press A! Then go? Try 2? Next one.", ["Press A!", "Then go?", "Try 2?", "Next one."]),
])
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


# Written out here, not read from describe._ABBREVIATIONS: a word dropped from that set
# must fail this test.
FROZEN_ABBREVIATIONS = """e.g i.e etc vs v cf approx incl excl esp ca resp fig no nos vol pp p
    mr mrs ms dr prof st jr sr inc ltd co corp dept est min max sec hr hrs
    jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
    a.m p.m u.s u.k e.u n.b al""".split()


@pytest.mark.parametrize("word", FROZEN_ABBREVIATIONS)
def test_a_period_after_an_abbreviation_ends_no_sentence(word: str) -> None:
    text = f"Take {word}. Five of them here. Next one."
    assert sentences(text) == [f"Take {word}. Five of them here.", "Next one."]
    capital = word[0].upper() + word[1:]
    assert sentences(f"Take {capital}. Five of them here. Next one.")[0] == f"Take {capital}. Five of them here."


def test_sentence_offsets_index_the_folded_text() -> None:
    folded = fold("  One.   Two!\n\nThree?  ")
    spans = [(s.start, s.end) for s in split_sentences(folded)]
    assert folded == "One. Two!\n\nThree?"
    assert spans == [(0, 4), (5, 9), (11, 17)]


@pytest.mark.parametrize(("text", "expected"), [
    ("Must be one of:\n- a/b\n- c (d).\n\nDone.", ["Must be one of:\n- a/b\n- c (d).", "Done."]),
    ("Must be one of:\n- a/b\n- c (d)\n\nDone.", ["Must be one of:\n- a/b\n- c (d)\n\nDone."]),
    ("Heading\n\nParagraph one. Two.", ["Heading\n\nParagraph one.", "Two."]),
    ("Ends.\n- a\n- b", ["Ends.", "- a\n- b"]),
    ("Ends…\n- a\n- b", ["Ends…", "- a\n- b"]),
    ("Ends?\n- a\n- b", ["Ends?", "- a\n- b"]),
    ('Ends (see "here.")\n- a\n- b', ['Ends (see "here.")', "- a\n- b"]),
    ("Steps:\n1. Open it.\n2. Close it.", ["Steps:\n1. Open it.", "2. Close it."]),
    # an item's own sentences stay with it, also the item a unit runs into: none hangs on
    # to the next item's head (a rule ended up under the item before it)
    ("Signals:\n- A: you must confirm first! Ask user, then deploy\n- B: gone! Use a plan.\n\nDone.",
     ["Signals:\n- A: you must confirm first! Ask user, then deploy\n- B: gone! Use a plan.",
      "Done."]),
    ("Signals:\n- A: ready! Ask user.\n- B: gone! Use a plan.",
     ["Signals:\n- A: ready! Ask user.", "- B: gone! Use a plan."]),
    # the same where the text holds markup (a heading)
    ("# Deploy\n\nSignals:\n- A: you must confirm first! Ask user, then deploy\n- B: gone! Use a plan.\n\nDone.",
     ["# Deploy\n\nSignals:\n- A: you must confirm first! Ask user, then deploy\n- B: gone! Use a plan.",
      "Done."]),
])
def test_units_glue_an_unterminated_line_to_what_follows(text: str, expected: list[str]) -> None:
    assert unit_texts(text) == expected


# -- short and long descriptions -------------------------------------------------------


def test_short_stays_whole_long_is_reduced() -> None:
    base = f"Lists files. {F1} {F2}"
    pad = "x" * (160 - len(base.encode()) - 1)
    at_limit = f"{base} {pad}"
    assert len(at_limit.encode()) == 160
    assert reduce(at_limit) == at_limit
    assert reduce("  " + at_limit.replace(" ", "   ") + "\n") == at_limit  # folded, still whole
    over = at_limit + "y"
    assert reduce(over) == "Lists files."


def test_short_is_measured_in_utf8_bytes() -> None:
    text = f"Zählt Dateien. {F1} Größe: {'ü' * 70}"
    assert len(text) <= 160 < len(text.encode())
    assert reduce(text) == "Zählt Dateien."


def test_one_byte_over_the_short_limit_is_reduced_though_the_characters_fit() -> None:
    text = f"Zählt Dateien. {F1} {'x' * 81}"
    assert len(text) == 160 and len(text.encode()) == 161
    assert reduce(text) == "Zählt Dateien."
    assert reduce(text[:-1]) == text[:-1]  # 160 bytes: short


def test_explain_lists_what_every_pass_dropped() -> None:
    # a quote makes explain re-split the text made, over 160 bytes: a second pass, which
    # drops nothing
    rules = ('Lists files. Must be "set". Paths must be absolute and must never contain spaces or tabs. '
             "Never delete the root folder of the disk here, you must ask the user first.")
    why = explain(f"{rules} {F1} {F2} Done.")
    assert why.text == rules and len(rules.encode()) > 160
    assert why.dropped == [F1, F2, "Done."]


def test_few_characters_of_four_bytes_each_are_not_short() -> None:
    text = "A" + "😀" * 20 + ". B" + "😀" * 25 + "."  # 50 characters, 185 bytes
    assert len(text) <= 160 // 3 and len(text.encode()) > 160
    assert reduce(text) == "A" + "😀" * 19 + ELLIPSIS


def test_lead_and_rules_kept_in_order() -> None:
    lead = "Returns the current weather report for a city, including wind, rain and sun hours for the week."
    text = f"Paths must be absolute. {lead} {F1} {F2} Paths cannot contain spaces."
    assert reduce(text) == ("Paths must be absolute. Returns the current weather report for a city, "
                            "including wind, rain and sun… Paths cannot contain spaces.")
    why = explain(text)
    assert why.dropped == [F1, F2]
    assert why.lead == "Returns the current weather report for a city, including wind, rain and sun…"
    assert why.kept == ["Paths must be absolute.", why.lead, "Paths cannot contain spaces."]


def test_all_rules_nothing_dropped() -> None:
    text = " ".join(["Must be set.", "Never empty.", "At most 5 items.", "Defaults to 10.",
                     "Only one of a or b.", "Do not use for files.", "Use this tool when asked."] * 2)
    assert len(text.encode()) > 160
    assert reduce(text) == text
    assert explain(text).dropped == []


def test_long_rule_sentence_never_cut() -> None:
    rule = ("The date must be given in ISO 8601 format with a time zone offset, for example "
            "2024-01-31T12:00:00+01:00, and never in local time.")
    assert len(rule.encode()) > 80
    assert reduce(f"Books a room. {F1} {F2} {rule}") == f"Books a room. {rule}"
    assert reduce(f"{rule} {F1} {F2}") == f"{rule} {F1}"  # the first non-rule sentence is the lead


@pytest.mark.parametrize("rule", [
    "Each path is absolute, e.g. /srv/data.",
    "Do not use this tool for pull requests.",
    "Do not use this for local files.",
    "Use this tool when you need fresh results.",
    "Use this tool to look up a user by email.",
    "(Optional, default true)",
    "This field should be omitted on the first call.",
    "Prefer search_code for code.",
    "Deprecated: use list_runs instead.",
    "Dates follow RFC 3339.",
    "Returns at most 100 results per page.",
    "Names are case-sensitive.",
    "Exactly one of id or name.",
    "Provide the run ID from list_runs.",
    "IMPORTANT: use the full path.",
    "Pass a value > 0.",
    "Warning: this deletes the branch.",
    "Avoid calling this in a loop.",
    "Page size between 1 and 100.",
])
def test_rule_sentences_kept_verbatim(rule: str) -> None:
    assert is_rule(rule)
    assert reduce(f"Lists files. {F1} {F2} {rule}") == f"Lists files. {rule}"
    assert reduce(f"{rule} {F1} {F2}") in (f"{rule} {F1}", f"{rule} {F1} {F2}")  # merged when unterminated


def test_a_lead_that_is_one_long_word_after_a_list_marker_is_cut_inside_it() -> None:
    """Not to "…" alone (the marker before the word's space is no lead), which a second pass
    folded into the text before: compress(compress(x)) differed."""
    url = "https://api.example.com/v1/organisations/{organisation_id}/projects/{project_id}/x"
    lead = cut_lead(f"- {url}", 80)
    assert lead.startswith("- https://api.example.com/") and lead.endswith("…")
    assert len(lead.encode()) <= 80 and cut_lead(lead, 80) == lead
    text = f"You must pass a token.\n- {url}\nReturns the newest artifact of the project."
    once = reduce(text)
    assert reduce(once) == once and "https://api.example.com/" in once


@pytest.mark.parametrize("items", ["\n- hourly.\n- daily.\n- weekly.",
                                   "\n1. `hourly`: one row per hour.\n2. `daily`: one a day.",
                                   "\n- hourly\n- daily."])
def test_a_rule_running_into_a_list_keeps_every_item(items: str) -> None:
    """Items that end with "." are units of their own: a kept unit that runs into the list
    keeps them all (every item past the first was dropped); a list no kept unit runs
    into is judged item by item."""
    assert reduce(f"Lists files. {F1} {F2}\nValid values:{items}") == \
        fold(f"Lists files.\nValid values:{items}")
    assert reduce(f"Lists files. {F1} {F2}\nReturns:{items}\n- never empty.") == \
        fold("Lists files.\n- never empty.")


def test_valid_values_glued_rule_keeps_its_items() -> None:
    text = f"Lists files. {F1} {F2}\nMust be one of:\n- a/b\n- c (d)"
    assert reduce(text) == "Lists files. Must be one of:\n- a/b\n- c (d)"


@pytest.mark.parametrize("values", ["\nValid values:\n- RECRUITING\n- COMPLETED (final)",
                                    " Valid values: RECRUITING, COMPLETED, WITHDRAWN.",
                                    "\nValid values:\n- hourly.\n- daily.\n- weekly."])
def test_valid_values_list_is_kept(values: str) -> None:
    """(items ending with "." too: every item but the first was dropped)"""
    text = f"Filters trials by status. {F1} {F2}{values}"
    assert reduce(text) == fold(f"Filters trials by status.{values}")


def test_paragraph_breaks_kept_between_kept_sentences() -> None:
    text = f"Lists files.\n\n{F1}\n\n{F2}\n\nMust be one of the values."
    assert reduce(text) == "Lists files.\n\nMust be one of the values."


def test_rule_inside_quotes_and_code_is_part_of_its_sentence() -> None:
    assert reduce(f'Lists files. {F1} {F2} He said "Stop. This must end" loudly.') == \
        'Lists files. He said "Stop. This must end" loudly.'
    assert reduce(f"Lists files. {F1} {F2} Run `a.B() must` first.") == "Lists files. Run `a.B() must` first."


# -- the lead cut ----------------------------------------------------------------------


def test_cut_lead_on_a_word_boundary_with_ellipsis() -> None:
    sentence = "abc " * 20 + "d"
    cut = cut_lead(sentence)
    assert cut == "abc " * 18 + "abc…"
    assert len(cut.encode()) <= 80


def test_cut_lead_keeps_what_fits_and_drops_trailing_punctuation() -> None:
    assert cut_lead("a" * 80) == "a" * 80
    assert cut_lead("word, " * 20) == "word, " * 12 + "word…"
    assert cut_lead("a (b" + " c" * 50).endswith("c…")
    assert cut_lead("x" * 90) == "x" * 77 + ELLIPSIS  # one long word: cut inside it


def test_a_cut_lead_is_its_first_line() -> None:
    lead = "Choose one of these:\n- first option here\n- second option here\n- third option"
    assert cut_lead(lead, 40) == "Choose one of these…"


@pytest.mark.parametrize("marker", ["*", "+", "•", "- *"])
def test_a_cut_lead_is_never_a_list_marker_alone(marker: str) -> None:
    cut = cut_lead(f"{marker} https://example.com/" + "a" * 100, 40)
    assert cut.startswith(f"{marker} https://example.com/aaa") and cut.endswith("a" + ELLIPSIS)


def test_a_cut_lead_never_ends_with_an_open_parenthesis() -> None:
    lead = "x" * 75 + " ( and a few more words after it"
    assert cut_lead(lead) == "x" * 75 + ELLIPSIS


@pytest.mark.parametrize("char", ["é", "€", "日", "😀"])
@pytest.mark.parametrize("offset", range(4))
def test_lead_cut_mid_utf8_breaks_no_character(char: str, offset: int) -> None:
    sentence = "a" * offset + char * 60
    cut = cut_lead(sentence)
    encoded = cut.encode("utf-8")  # would raise on a broken surrogate
    assert 80 - 4 < len(encoded) <= 80
    assert cut.endswith(ELLIPSIS) and sentence.startswith(cut[:-1])
    assert "\ufffd" not in cut
    reduced = reduce(f"{sentence} {F1} {F2}")
    assert reduced == cut and reduce(reduced) == reduced


def test_lead_cut_mid_utf8_with_words() -> None:
    text = "Returns data " + "é" * 40 + f" and more text here. {F1} {F2}"
    assert reduce(text) == "Returns data…"
    text = "Gibt die Wetterdaten für Köln zurück, mit Wind, Regen und Sonnenstunden für die Woche. " + F1 + F2
    cut = reduce(text)
    assert cut == "Gibt die Wetterdaten für Köln zurück, mit Wind, Regen und Sonnenstunden…"
    assert len(cut.encode()) <= 80


@pytest.mark.parametrize("text", [
    "Returns the weather report for the city that is named in the request\n- " + "x" * 100,
    "Returns the weather report for the city that is named in the request\n1. Berlin is first. "
    + "Returns the weather report for the city that is named." * 2,
])
def test_lead_cut_in_a_multi_line_unit_is_idempotent(text: str) -> None:
    once = reduce(text)
    assert "\n" + ELLIPSIS not in once and not once.endswith("\n1." + ELLIPSIS)
    assert reduce(once) == once


# -- idempotence and explain ---------------------------------------------------------------

GOLDEN_TEXTS = [
    f"Paths must be absolute. Returns data. {F1} {F2} Paths cannot contain spaces.",
    f"Lists files.\n\n{F1}\n\n{F2}\n\nMust be one of:\n- a\n- b",
    f'He said "Stop. Now" loudly. {F1} `code. Span` {F2} Must be "quoted. Yes".',
    "日本語のテキスト。" * 30,
    "a" * 500,
    f"Wow! Really? {F1} {F2} Never do that!",
]


@pytest.mark.parametrize("text", GOLDEN_TEXTS)
def test_reduce_idempotent(text: str) -> None:
    once = reduce(text)
    assert reduce(once) == once
    assert len(once.encode()) <= len(fold(text).encode())


@pytest.mark.parametrize("text", [
    # a unit that opens mid-line with "# " (or a tag) is no heading: nothing after it
    # may be put on a line of its own (a break the next pass folds away again)
    "Lists things. # of things must be positive. Results must be sorted. It is a very nice"
    " tool and people really enjoy using it every single day.\n\n<br>\n\nMore filler words.",
    "Lists things! <br> Results must be sorted. It is a very nice tool and people really enjoy"
    " using it every single day.\n\n<br>\n\nMore filler words.",
])
def test_reduce_idempotent_after_a_mid_line_heading_mark(text: str) -> None:
    once = reduce(text)
    assert "\n" not in once.split("\n\n")[0]
    assert reduce(once) == once


def test_reduce_idempotent_when_a_mid_line_heading_mark_follows_a_heading() -> None:
    # (a helper's review) "# of ..." mid-line after a dropped sentence, now after a heading:
    # run on, it lengthened the heading's line; and a piece run on after another was taken
    # for one starting a line of the text, or not, by where it stood in the text, not here
    text = ("  Lists things.\n# of things must be positive.\nIt is a very nice tool and people "
            "really enjoy using it every single day. # of things must be positive.  * item\n\n"
            "  You must give a limit. It is a very nice tool and people really enjoy using it "
            "every single day.")
    once = reduce(text)
    assert reduce(once) == once
    assert "\n# of things must be positive.\n# of things must be positive." in once


def test_reduce_idempotent_when_a_kept_unit_opens_mid_line_with_a_fence() -> None:
    # (found by fuzzing) "sit! ``` </b>1. ..." with "sit!" dropped put the ``` at a line's
    # start after a block: a block the text never had, read otherwise by the next pass
    text = ("`x` ametsit\u00e9 \n1. x`x`\n~~~\n \n1. x ? ipsum \n~~~\n \r mustavoid e.g.\"q\" "
            "<br> sit\u00a0! ``` </b>1. ipsumdolor <b> amet \n# e.g. when\n~~~\n\t \n \u2028 "
            "\u2028Provide the run ID for * \n```py\n\r ~~~e.g. \u2028 </b> \u2028\u2028</hints> "
            "\n```\n 1.Provide the run ID for<x-y> this   ipsumdefault")
    once = reduce(text)
    assert reduce(once) == once
    assert "! ``` </b>" in once  # the fence still mid-line


def test_reduce_keeps_no_unit_for_a_mid_line_fence_that_stays_mid_line() -> None:
    # (a helper's review) the unit before a mid-line fence was kept even where the fence
    # stays mid-line anyway (after a piece that ends no block): for nothing, and the next
    # pass, seeing no markup left, dropped it
    text = ("sfiles. Lorem ipsum dolor sit amet, consectetur adipiscing elit.It is a very nice "
            "tool and people really enjoy using it every single day.\xa0~~~ Never pass secrets.\n#")
    once = reduce(text)
    assert reduce(once) == once == "sfiles. ~~~ Never pass secrets."


def test_reduce_idempotent_when_a_fence_runs_on_from_a_lone_tag() -> None:
    # the piece after </hints> opens with "~~~" and so cannot start a line: the tag
    # no longer stands alone, and the break before it goes too (else the next pass folds it)
    text = ("Lists the items of the account for the user.\n<hints>\nYou must give a limit.\n"
            "</hints>\n\n## Details\n\nThis is a fun tool to use every day\u2026 ~~~text here must not be empty.")
    once = reduce(text)
    assert reduce(once) == once


def test_explain_matches_reduce_and_reports_short_text() -> None:
    for text in GOLDEN_TEXTS:
        assert explain(text).text == reduce(text)
    short = explain("  Lists   files. ")
    assert (short.text, short.kept, short.dropped, short.lead) == ("Lists files.", ["Lists files."], [], None)


def test_custom_thresholds() -> None:
    text = f"Lists the files of the given folder. {F1} Must be absolute."
    assert reduce(text, short_bytes=1000) == text
    assert reduce(text, short_bytes=20, lead_bytes=15) == "Lists the… Must be absolute."


# -- the rule detector -----------------------------------------------------------------------


@pytest.mark.parametrize("sentence", [
    "It must be set.", "You cannot undo it.", "It shall pass.", "A token is required.",
    "It requires a token.", "Rejects empty names.", "Never retries.", "Do not retry.",
    "It does not retry.", "At least one tag.", "At most ten tags.", "The maximum is 10.",
    "The minimum is 1.", "Between 1 and 10.", "Up to ten tags.", "If it exceeds the cap.",
    "The limit is 10.", "Uses the format YYYY.", "Dates in ISO 8601.", "Per RFC 3339.",
    "An absolute path.", "Matches the pattern.", "The default is 10.",
    "Optional, defaults to 10.", "Exactly one tag.", "One of a, b.", "Only admins.",
    "They are mutually exclusive.", "Names are unique.", "It is case-sensitive.",
    "Warning: slow.", "This is deprecated.", "Use this tool when asked.", "Use this tool for repos.",
    "Use this tool to search.", "Prefer the other one.", "Use x instead.", "Avoid loops.",
    "You should page.", "You should not page.", "Greater than 1.", "Less than 10.",
    "More than 3.", "Fewer than 3.", "Over 100.", "Above 100.", "Below 100.", "Under 100.",
    "A range of ids.", "Invalid ids fail.",
    # the typographic apostrophe; a prerequisite; more words of other languages
    "You can’t undo it.", "It isn’t reversible.", "Don’t retry.", "It won’t retry.",
    "You mustn’t retry.", "Deactivating is a prerequisite for deleting.",
    "Prerequisites: set the key.", "O campo não pode ser vazio.", "Le champ est requis.",
    "Dieses Feld ist erforderlich.", "El campo es necesario.",
    # each holds one rule word or signal only (a mutant deleting it from `rules` survived)
    "This is the legacy endpoint.", "Ratings run 1–5.", "Pass the run id.",
    "Scores > 20 are flagged.", "TIP: the cache is shared.",
])
def test_is_rule_positive(sentence: str) -> None:
    assert is_rule(sentence)
    assert rules.rule_category(sentence) is not None


@pytest.mark.parametrize("sentence", [F1, F2, "Returns the weather report for a city.", "Lists files.",
                                      "Gets the current user.", "Creates a new issue in a repository.",
                                      "Plays a piano tune."])  # "no" ends "piano": whole words only
def test_is_rule_negative(sentence: str) -> None:
    assert not is_rule(sentence)
    assert rules.rule_category(sentence) is None


def test_rule_category_of_a_signal_alone_is_warning() -> None:
    assert rules.rule_category("⚠ Readings lag by a day.") == "warning"
    assert rules.rule_category("Pass the run id.") == "instruction"


def test_an_instruction_on_a_later_line_in_lower_case() -> None:
    """A list item opening with the verb on the second line makes the unit an instruction."""
    assert rules.opens_with_instruction("Steps\n- pass the run id")
    assert rules.opens_with_instruction("Steps\nfirst a name\n- pass the run id")
    assert not rules.opens_with_instruction("Steps\n- the run id")


def test_rule_scan_offsets_survive_a_lower_that_lengthens() -> None:
    """"İ".lower() is two characters: the scan's offsets stay those of the text."""
    text = "İİİİİİİİ İzmir. Wind is never."
    start = text.index("Wind")
    scan = rules.RuleScan(text)
    assert not scan.states_rule(0, start - 1)
    assert scan.states_rule(start, len(text))


# -- linear time: probes against every regex ---------------------------------------------------

PROBES = {
    "period-space": ". ", "a-period": "a.", "backtick": "`", "quote": '"', "curly-quote": "“",
    "eg": "e.g. ", "list-item": "\n- ", "ab-star": "ab", "no-spaces": "x", "initial": "A. ",
    "abbrev": "Ab. ", "digits": "1. ", "caps": "ABC ", "star": "a* ", "blank-line": "x\n\n",
    "bang": "! ", "closer": ".) ", "newline": "\n", "spaces": "  ", "tab": "\t", "lt": "< 1 ",
    "backtick-word": "`a", "quote-word": '"a', "unterminated": "word\n", "dots": ".",
    "mixed": "e.g. `a. B` \"c. D\" 1.5 v1.2. J. K. ", "rule-words": "must not at least ",
    "uppercase-run": "A", "word-star": "x*", "ellipsis": "… ",
    "fence-lines": "```\n", "tilde-fence": "~~~ x\n", "indented-fence": "  ````a`\n", "heading": "## h\n",
    "tag-lines": "<a>\n", "closing-tag-lines": "</a>\n", "tag-pairs": "<a>x</a> ", "open-tags": "<a>",
    "closing-tags": "</b>", "hashes": "#",
}
SMALL_CHARS = 20_000  # the probe at n and at 4n; linear code takes ~4x, we allow 8x


def cpu_seconds(fn: Callable[[str], object], text: str, repeat: int) -> float:
    """Best CPU time of `repeat` runs (CPU time: other processes on the machine count less).

    Each run gets a different text of the same length, so no cache answers for it.
    """
    best = float("inf")
    gc.disable()
    try:
        for i in range(repeat):
            fresh = f"Run {i}. {text}"
            started = time.process_time()
            fn(fresh)
            best = min(best, time.process_time() - started)
    finally:
        gc.enable()
    return best


def assert_linear(fn: Callable[[str], object], unit: str, small_chars: int = SMALL_CHARS,
                  attempts: int = 3) -> None:
    """4n costs less than 8x n (linear: 4x; quadratic: 16x). Measured again, up to
    `attempts` times, when a busy machine's pause lands in the large run: a quadratic
    function fails every time, a linear one does not."""
    small = unit * (small_chars // len(unit))
    large = small * 4
    for attempt in range(attempts):
        t_small = cpu_seconds(fn, small, 3)
        t_large = cpu_seconds(fn, large, 2)
        if t_large < 8 * t_small + 0.02 or attempt == attempts - 1:
            break
    assert t_large < 8 * t_small + 0.02, f"{unit!r}: {t_small:.4f}s at n, {t_large:.4f}s at 4n"
    assert t_large < 5.0, f"{unit!r}: {t_large:.2f}s for {len(large):,} chars"


def regexes() -> list[tuple[str, object]]:
    found = []
    for module in (describe, markup, rules):
        for name, value in sorted(vars(module).items()):
            if isinstance(value, re.Pattern) or type(value).__name__ == "_Regexp":
                found.append((f"{module.__name__}.{name}", value))
            elif name == "_BY_CATEGORY":
                found += [(f"{module.__name__}.{name}[{k}]", v) for k, v in value.items()]
    return found


def test_every_regex_is_probed() -> None:
    names = {name for name, _ in regexes()}
    assert {"caveman_batch.describe._END_ASCII", "caveman_batch.describe._SPANS",
            "caveman_batch.describe._FOLDABLE", "caveman_batch.rules._RULE",
            "caveman_batch.rules._SIGNAL", "caveman_batch.rules._IMPERATIVE",
            "caveman_batch.markup.MARKUP", "caveman_batch.markup._OPENING", "caveman_batch.markup._CLOSING",
            "caveman_batch.markup._ALONE", "caveman_batch.markup._TAG"} <= names


@pytest.mark.parametrize("probe", list(PROBES))
def test_regexes_linear(probe: str) -> None:
    unit = PROBES[probe]
    for name, pattern in regexes():
        lowered = unit.lower() if "rules" in name else unit

        def scan(text: str, pattern: object = pattern) -> int:
            return sum(1 for _ in pattern.finditer(text))  # type: ignore[attr-defined]

        try:
            assert_linear(scan, lowered)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


@pytest.mark.parametrize("probe", list(PROBES))
def test_reduce_and_is_rule_linear(probe: str) -> None:
    unit = PROBES[probe]
    assert_linear(lambda text: reduce("Lead sentence. " + text), unit)
    assert_linear(is_rule, unit)
    assert_linear(rules.rule_starts, unit)


def test_units_linear_in_glued_lines() -> None:
    line = "- " + " ".join(["abcdefghi"] * 20) + "\n"  # items without terminal punctuation: one unit
    assert fold("Intro:\n" + line * 3) == "Intro:\n" + (line * 3).strip()  # already folded
    assert_linear(units, line, small_chars=len(line) * 2_500)


# -- markup: fenced blocks, headings, paired tags ------------------------------------------------

ISSUE_BLOCK = "```\ncreate_team(organizationSlug='x')\n```"
YAML_BLOCK = ("```yaml\napiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 3\n  template:\n"
              "    containers:\n      - name: web\n        image: nginx:1.25\n```")
SENTRY_SHAPE = """Find issues in Sentry.

Use this tool when you need to:
- View all issues in a Sentry organization

<examples>
### Find the newest unresolved issues across 'my-organization'

```
find_issues(organizationSlug='my-organization', query='is:unresolved', sortBy='last_seen')
```
</examples>

<hints>
- The organization is shown in the web address of every page.
- Pass the project slug when you know it.
</hints>"""


@pytest.mark.parametrize(("text", "folded"), [
    ("a\n```\nx  y\n\n\n  z\n```\nb", "a\n```\nx  y\n\n\n  z\n```\nb"),
    ("a\n~~~python\n\tx = 1  \n~~~\nb", "a\n~~~python\n\tx = 1  \n~~~\nb"),
    ("a\n    ```\n    x\n    ```\n    b", "a\n    ```\n    x\n    ```\nb"),  # the opening line's indentation is the block's
    ("a\n\n\n```\nx\n```  \n\n\nb", "a\n\n```\nx\n```\n\nb"),
    ("a\n```\nx   y\n\n\nz  \n\n", "a\n```\nx   y\n\n\nz"),  # unclosed: the rest of the text
    ("a\n````\n```\nx\n````\nb", "a\n````\n```\nx\n````\nb"),  # closed by a fence as long only
    ("a\n```\n~~~\nx\n```\nb", "a\n```\n~~~\nx\n```\nb"),  # and of the same character
    ("```\nx\n```\n```\ny\n```", "```\nx\n```\n```\ny\n```"),
    ("a ```\nb  c", "a ``` b c"),  # not at a line start: no fence
    ("```a`b\nc", "```a`b c"),  # a backtick fence's words hold no backtick
    ("Intro\n## Title\nBody\ntext", "Intro\n## Title\nBody text"),
    ("  ### T  \n  b", "### T\nb"),
    ("#tag\nx", "#tag x"),  # no heading without white space after the marks
    ("a\n<hints>\n- x\n</hints>\nb", "a\n<hints>\n- x\n</hints>\nb"),
    ("a\n<b>x</b>\nc", "a <b>x</b> c"),  # a tag with more on its line: no line of its own
])
def test_fold_keeps_markup(text: str, folded: str) -> None:
    assert fold(text) == folded
    assert fold(folded) == folded


def test_a_fenced_block_is_one_sentence() -> None:
    text = "Call it so:\n```\nrun(a). Then(b)! Done?\n\n  indented. Line\n```\nNext one. And more."
    assert sentences(text) == ["Call it so:", "```\nrun(a). Then(b)! Done?\n\n  indented. Line\n```",
                               "Next one.", "And more."]
    assert unit_texts(text) == ["Call it so:\n```\nrun(a). Then(b)! Done?\n\n  indented. Line\n```",
                                "Next one.", "And more."]


def test_the_issues_block_is_kept_byte_for_byte_with_its_lead_in() -> None:
    text = f"Creates a team. {F1}\n\nThe slug must be given like this:\n{ISSUE_BLOCK}\n\n{F2}"
    assert reduce(text) == f"Creates a team.\n\nThe slug must be given like this:\n{ISSUE_BLOCK}"


def test_a_block_is_dropped_whole_with_its_lead_in() -> None:
    text = f"Creates a team. {F1}\n\nFor example:\n{ISSUE_BLOCK}\n\n{F2}"
    assert reduce(text) == "Creates a team."


def test_a_fenced_yaml_example_keeps_its_indentation() -> None:
    text = f"Creates a deployment from a manifest. {F1}\n\nThe manifest must look like this:\n{YAML_BLOCK}\n\n{F2}"
    assert reduce(text) == f"Creates a deployment from a manifest.\n\nThe manifest must look like this:\n{YAML_BLOCK}"
    assert reduce(reduce(text)) == reduce(text)


def test_a_block_under_a_finished_sentence_on_the_next_line_is_its_example() -> None:
    text = f"Creates a team. {F1}\nNames must be unique.\n{ISSUE_BLOCK}\n\nApples.\n\n{ISSUE_BLOCK}\n{F2}"
    # the first block hangs under the rule; the second stands alone after a blank line
    assert reduce(text) == f"Creates a team. Names must be unique.\n{ISSUE_BLOCK}"


def test_a_block_never_leads_and_a_rule_in_it_keeps_it() -> None:
    block = "```\ntulips(a)\n```"
    assert reduce(f"{block}\n\nLists files. {F1} {F2}") == "Lists files."
    rule = "```\nlimit: 10  # must not exceed 10\n```"
    assert reduce(f"Lists files. {F1} {F2}\n\n{rule}") == f"Lists files.\n\n{rule}"


def test_an_unclosed_fence_is_the_rest_of_the_text() -> None:
    rest = "```\nmust   stay\n\n\n  as   written. Really"
    text = f"Lists files. {F1} {F2}\nExample:\n{rest}"
    assert reduce(text) == f"Lists files. Example:\n{rest}"


def test_a_short_description_keeps_its_block_unfolded() -> None:
    text = "Runs it:\n```\na  =  1\n\n\nb = 2\n```"
    assert len(text.encode()) <= 160
    assert reduce(text) == text


def test_a_heading_keeps_its_breaks() -> None:
    text = f"Lists files. {F1}\n## Limits\nAt most 10 items. {F2}"
    assert reduce(text) == "Lists files.\n## Limits\nAt most 10 items."
    # the lead is the heading: what is kept after it still starts a line of its own
    text = f"## Notes.\n{F1} Must be set. {F2} {F1}"
    assert reduce(text) == "## Notes.\nMust be set."
    assert reduce(reduce(text)) == reduce(text)
    # the sentences of a heading's line stay together, as a list item's do
    assert reduce(f"Lists files. {F1}\n## Step one. Must be set.\n{F2}") == "Lists files.\n## Step one. Must be set."


def test_a_hints_list_ending_in_a_rule_item_keeps_both_tags() -> None:
    assert reduce(SENTRY_SHAPE) == ("Find issues in Sentry.\n\nUse this tool when you need to:\n"
                                    "- View all issues in a Sentry organization\n\n"
                                    "<hints>\n- Pass the project slug when you know it.\n</hints>")
    why = explain(SENTRY_SHAPE)
    assert "<examples>" in why.dropped and "</examples>" in why.dropped  # nothing inside was kept


def test_paired_tags_go_together_when_nothing_inside_is_kept() -> None:
    text = f"Lists files. {F1}\n<hints>\n- {F1}\n- {F2}\n</hints>\nMust be set."
    assert reduce(text) == "Lists files. Must be set."  # the break was the closing tag's


def test_nested_paired_tags_stay_balanced() -> None:
    text = f"Lists files. {F1}\n<a>\n<b>\n{F2}\n</b>\n<c>\nMust be set.\n</c>\n</a>"
    assert reduce(text) == "Lists files.\n<a>\n<c>\nMust be set.\n</c>\n</a>"


def test_a_pair_not_alone_on_its_lines_keeps_what_it_spans_together() -> None:
    text = f"Lists files. {F1} <tip>{F2} Must be set.</tip>"
    assert reduce(text) == f"Lists files. <tip>{F2} Must be set.</tip>"
    assert reduce(f"Lists files. {F1} <tip>{F2} {F1}</tip>") == "Lists files."


def test_pairs_in_running_text_that_share_a_unit_hold_together_as_one() -> None:
    # the <i> pair joins the first two sentences, the <b> pair opens in the second: all
    # three are one unit, and a rule in the third keeps the <b> that opens it
    assert unit_texts("See <i>One. Two</i> <b>Three. Four</b> Five. Six.") == [
        "See <i>One. Two</i> <b>Three. Four</b> Five.", "Six."]
    text = f"Fetches data. See <i>One. Two</i> <b>Three. You must never delete it</b> here. {F1} {F2}"
    assert reduce(text) == "Fetches data. See <i>One. Two</i> <b>Three. You must never delete it</b> here."


def test_the_lead_is_not_cut_through_a_pair() -> None:
    text = f"<b>{F1}</b> {F2}\n\nLists files. Must be set."
    assert reduce(text) == "Lists files. Must be set."  # the first unit could lead only cut


def test_a_lead_whose_first_line_holds_no_tag_is_cut_though_later_lines_do() -> None:
    text = f"Lists every file in the folder, sorted by name:\n- <b>a</b> one\n- two\n\n{F1} {F2}"
    assert reduce(text) == "Lists every file in the folder, sorted by name…"


@pytest.mark.parametrize("fence", ["```", "~~~"])
def test_a_cut_that_would_open_a_fenced_block_is_no_lead(fence: str) -> None:
    text = f"Must be set. {fence} The output is shown in the terminal window and {F2} {F1}"
    assert reduce(text) == f"Must be set. {F1}"


def test_a_kept_list_item_keeps_its_line_break_in_a_text_with_markup() -> None:
    text = f"# Tool\n\nLists files. {F1}\nMust be set.\n- Never delete it. {F2}"
    assert reduce(text) == f"# Tool\n\nLists files. Must be set.\n- Never delete it. {F2}"


def test_a_kept_piece_after_a_kept_block_starts_a_line_of_its_own() -> None:
    text = f"Lists files. You must run:\n```\nls\n```\n{F2} Must be set. {F1}"
    assert reduce(text) == "Lists files. You must run:\n```\nls\n```\nMust be set."  # the fence ends its line


def test_a_piece_opening_with_a_fence_runs_on_after_a_lone_tag() -> None:
    # on a line of its own the fence would open a block the text never had
    text = f"Lists files.\n<tip>\nMust be set.\n</tip>\n{F1} ``` Never delete it. {F2}"
    reduced = reduce(text)
    assert reduced == "Lists files.\n<tip>\nMust be set. </tip> ``` Never delete it."
    assert markup.fenced_blocks(reduced) == []


def test_a_text_whose_quotes_pair_anew_once_reduced_is_reduced_again() -> None:
    # (found by fuzzing) dropping units moves which quote pairs with which: the text
    # made is split again, and its second reduction is the answer
    text = ("“a. B” o```The output is ly table in the terminal windo” Signals\n```\nls\n```\n`a. B` "
            "\"q\"`</b>Ne!“x”~~~ “a. B” Two …<note>oneExample:Use it.Must be set. `a.")
    once = reduce(text)
    assert reduce(once) == once
    assert once.endswith("Use it.Must be set.")


def test_a_unit_opening_mid_line_with_a_fence_keeps_the_unit_before_it() -> None:
    # the unit before cannot lead (its cut would part the pair of tags), and the kept rule
    # alone would start the text with a fence: a block the text never had
    text = f"Lists <tag>\n{F1}\n</tag> and {F2} ~~~ Must be set."
    assert reduce(text) == f"Lists <tag> {F1} </tag> and {F2} ~~~ Must be set."


MARKUP_PIECES = ["```", "```yaml", "~~~", "~~~~", "````", "    ```", "  ~~~ py", "```a`b", "#", "## Title",
                 "### Notes.", "#tag", "<hints>", "</hints>", "<examples>", "</examples>", "<b>", "</b>",
                 "< b>", "</ b>", "\n", "\n\n", "\n  ", "  \n", " ", "\t", "\r\n", "Example:", "Must be set.",
                 "Use this tool when asked.", F1, F2, "- item", "- Must be set.", "1. first", "Lists files.",
                 "key: value", "  nested: 1", "a. B", "e.g.", '"', "`", "…", "Valid values:", "Pass the id."]
markup_text = st.lists(st.sampled_from(MARKUP_PIECES), max_size=50).flatmap(
    lambda pieces: st.sampled_from(["", " ", "\n"]).map(lambda joint: joint.join(pieces)))


@settings(derandomize=True, database=None, deadline=None, max_examples=600,
          suppress_health_check=[HealthCheck.too_slow])
@given(markup_text, st.sampled_from([(160, 80), (40, 20), (0, 20), (20, 200)]))
def test_markup_is_idempotent_and_keeps_blocks_whole(text: str, limits: tuple[int, int]) -> None:
    short_bytes, lead_bytes = limits
    folded = fold(text)
    assert fold(folded) == folded
    once = reduce(text, short_bytes=short_bytes, lead_bytes=lead_bytes)
    assert reduce(once, short_bytes=short_bytes, lead_bytes=lead_bytes) == once
    blocks = markup.fenced_blocks(folded)
    outside = "".join(folded[a:b] for a, b in zip([0] + [e for _, e in blocks], [s for s, _ in blocks] + [len(folded)]))
    if "```" not in outside and "~~~" not in outside:  # a fence mid-line may start a line once cut free
        assert all(once[a:b] in {folded[a:b] for a, b in blocks} for a, b in markup.fenced_blocks(once))
