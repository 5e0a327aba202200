"""A rule detector written apart from caveman_batch.rules, from the compressor issue's own words.

Tests use it to check, independently, that no rule sentence is lost; the savings
benchmark uses it for an ablation (what a detector this narrow would save).
"""

from __future__ import annotations

import re
from typing import Any, Final

# The issue's own list: obligation and prohibition, limits and ranges, formats and
# standards, defaults, exclusivity and choice, warnings and deprecation, selection guidance.
ISSUE_RULE_WORDS: Final = (
    "must", "cannot", "shall", "required", "never", "do not", "does not",
    "at least", "at most", "maximum", "minimum", "between", "up to", "exceeds", "limit",
    "format", "iso 8601", "rfc 3339", "absolute path", "pattern",
    "default", "optional, defaults to",
    "exactly one", "one of", "only", "mutually exclusive", "unique", "case-sensitive",
    "warning", "deprecated",
    "use this tool when", "use this tool for", "use this tool to", "prefer", "instead", "avoid",
    "should", "should not",
)
ISSUE_RULE: Final = re.compile(r"\b(?:" + "|".join(map(re.escape, ISSUE_RULE_WORDS)) + r")\b",
                               re.IGNORECASE)
# A sentence ends at . ! ? or … (then closing quotes or brackets) before white space and a
# character that is not a lower-case letter, except after "e.g." and "i.e."; lines always end one.
_NAIVE_END: Final = re.compile(r"(?<![ (]e\.g\.)(?<![ (]i\.e\.)(?<=[.!?…])[\"')\]”’]*\s+(?=[^a-z\s])|\n+")


def independent_rule_sentences(description: str) -> list[str]:
    """Sentences of `description` (white space folded) that state a rule by the issue's words."""
    sentences = (" ".join(part.split()) for part in _NAIVE_END.split(description))
    return [s for s in sentences if s and ISSUE_RULE.search(s)]


def lost_rule_sentences(before: Any, after: Any) -> list[str]:
    """Rule sentences of any description in `before` that are missing, word for word, from
    the description at the same place in `after` (white space folded on both sides)."""
    lost: list[str] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for key, value in before.items():
            if key == "description" and isinstance(value, str):
                kept = " ".join(str(after.get(key, "")).split())
                lost += [s for s in independent_rule_sentences(value) if s not in kept]
            elif key in after:
                lost += lost_rule_sentences(value, after[key])
    elif isinstance(before, list) and isinstance(after, list):
        for b, a in zip(before, after):
            lost += lost_rule_sentences(b, a)
    return lost
