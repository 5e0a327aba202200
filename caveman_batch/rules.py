"""Which sentences state a rule: the over-keep detector.

A sentence that states an obligation or prohibition, a limit or range, a format
or standard, a default, an exclusive choice, a warning or deprecation, or when
(not) to use the tool is never dropped or cut. The word list errs wide on purpose:
keeping a sentence too many costs a few tokens; dropping a rule costs a wrong call.

The phrases compile into one RE2 automaton, matched on lower-cased text: linear
time on any input (RE2 never backtracks) and about four times as fast as `re` on
this alternation.
"""

from __future__ import annotations

import re
from typing import Final

import re2

# Each entry is a regex fragment valid on its own; grouped only for the reader. A
# contraction takes the typographic apostrophe (U+2019, "can’t") as well as the ASCII one.
CATEGORIES: Final[dict[str, tuple[str, ...]]] = {
    "obligation": (
        "must", "mustn(?:'|’)?t", "shall", "shan(?:'|’)?t", "cannot", "can(?:'|’)?t",
        "can not", "required", "requires?", "requiring", "requirements?", r"prerequisites?",
        "mandatory", "necessary", "needs? to", "have to", "has to", "ensure", "make sure",
        "always", "never", "do not", "don(?:'|’)?t", "does not", "doesn(?:'|’)?t", "did not",
        "isn(?:'|’)?t", "aren(?:'|’)?t", "will not", "won(?:'|’)?t",
        "may not", "not allowed", "not permitted", "not supported", "unsupported",
        "forbidden", "prohibited", "disallowed", "rejects?", "rejected", "invalid", "only",
        "should", "shouldn(?:'|’)?t", "ought to", "accepts?", "accepted", "allowed", "permitted",
        "(?:valid|allowed|accepted|possible|supported|permitted) (?:values?|options?|inputs?|formats?)",
    ),
    "negation": ("not", "no", "never", "nothing", "without", "neither", "nor"),
    "limit": (
        "at least", "at most", "maximum", "minimum", "max", "min", "maxlength", "minlength",
        "maxitems", "minitems", "between", "up to", "exceeds?", "exceeded", "exceeding",
        "limits?", "limited", "limiting", "no more than", "no less than", "no fewer than",
        "less than", "greater than", "more than", "fewer than", "larger than",
        "smaller than", "higher than", "lower than", "over", "above", "below", "under",
        "ranges?", "ranging", "capped", r"truncat\w{0,6}", "per page", "page size",
        r"\d+ ?(?:-|–|to) ?\d+",
        r"\d+ ?(?:ms|s|sec|secs|seconds|minutes?|mins?|hours?|days?|items|results|records"
        r"|rows|entries|tokens|requests|calls|pages|characters|chars|bytes|[kmgt]i?b)",
    ),
    "format": (
        "formats?", "formatted", "formatting", "iso", r"iso ?\d{3,5}(?:-\d)?", r"rfc ?\d{3,5}",
        "absolute", "relative path", "patterns?", r"regex\w{0,4}", "regular expressions?",
        "syntax", "yyyy", "utc", "time ?zones?", "epoch", r"unix time\w{0,5}", r"e\.164",
        "uuids?", "base64", "url-encoded", "percent-encoded", "utf-8", "comma[- ]separated",
        "separated by", "delimited", "case[- ]sensitive", "case[- ]insensitive",
        "lower-?case", "upper-?case", "prefix(?:ed)?", "suffix(?:ed)?", "starts? with",
        "ends? with",
    ),
    "default": (
        "defaults?", "defaulted", "optional", "optionally", "omit", "omits", "omitted",
        "omitting", "if not", "when not", "unless", "leave (?:it )?(?:empty|blank)",
        "if empty", "when empty", "falls? back", "fallback", "otherwise",
    ),
    "choice": (
        "exactly", "one of", "mutually exclusive", "exclusive", "unique", "uniquely",
        "either", "all of", "any of", "at a time", "instead", "instead of", "rather than",
        "but not", "except", "excluding", "if and only if", "cannot be combined",
        "conflicts? with", "alternatively",
    ),
    "warning": (
        "warnings?", "warns?", "caution", "careful", "carefully", r"danger\w{0,4}",
        "deprecated", r"deprecat\w{0,6}", "obsolete", "legacy", "destructive",
        "irreversibl[ey]", r"permanent\w{0,3}", "undone", r"overwrit\w{1,4}",
        "side effects?", r"rate[- ]limit\w{0,3}", "quota", "expensive", "experimental",
        "unstable", "important", "note", "caveat",
    ),
    # The commonest rule words of the languages real registries are written in.
    "other languages": (
        "solo", "sólo", "debe", "deben", "obligatorio", "requerido", "necesario",
        "por defecto", "máximo", "mínimo", "nunca", "deve", "padrão", "obrigatório",
        "necessário", "não", "seulement", "uniquement", "doit", "obligatoire", "requis",
        "requise", "nécessaire", "par défaut", "jamais", "nur", "muss", "müssen", "pflicht",
        "erforderlich", "standardmäßig", "nicht", "niemals",
    ),
    "selection": (
        "use this", "use it", "use these", "use them", "use when", "use for", "use only",
        "when to use", "do not use", "don(?:'|’)?t use", "not for", "not intended",
        "intended for", r"prefer\w{0,4}", r"avoid\w{0,3}", r"recommend\w{0,4}", "best for",
        "ideal for", "useful (?:for|when)", "before (?:calling|using)",
        "after (?:calling|using)", "first call", r"call \w+ first", "if you", "when you",
        "if the user", "when the user",
    ),
}


def _pattern(fragments: tuple[str, ...] | list[str]) -> str:
    ordered = sorted(set(fragments), key=lambda f: (-len(f), f))
    return r"\b(?:" + "|".join(ordered) + r")\b"


_ALL: Final = [f for group in CATEGORIES.values() for f in group]
_RULE: Final = re2.compile(_pattern(_ALL))
# An instruction for building the call: a sentence (or list item) that opens with
# an imperative such as "Provide the run ID for 'get_run'".
_IMPERATIVE: Final = re.compile(
    r"(?:[-*+•]\s*|\d{1,3}[.)]\s*)?(?:provide|specify|pass|set|supply|include|call|use"
    r"|select|choose|omit|leave)\b",
    re.IGNORECASE,
)
# The same verbs capitalised after a space inside a unit: an instruction the unit does not
# open with ("Example: Use 8 for quick screening", "1) Use intact_get_interactions …", an
# unpunctuated fragment before "Provide the run ID"). Case-sensitive, so the running verb
# "use" is not one; a name such as "MANE Select" is kept too, which costs a few tokens.
_IMPERATIVE_INSIDE: Final = re.compile(
    r"(?<=\s)(?:Provide|Specify|Pass|Set|Supply|Include|Call|Use|Select|Choose|Omit|Leave)\b"
)
# Warning glyphs, a required-marker (project_id*), a comparison (> 20%), and
# shouted words (IMPORTANT:, NOT, ONLY) before an instruction.
_SIGNAL: Final = re.compile(
    # every branch opens with a character class, so the engine skips ahead at C speed
    r"[⚠❗‼🚨⛔🛑]|\*(?<=\w\*)(?=[\s,;)]|$)|[<>≤≥]=? ?\d"
    r"|[A-Z](?<![\w][A-Z])[A-Z]{2,}(?!\w)(?=[:!]| (?:use|call|do|the|this|must|be)\b)"
)
_MATCH: Final = _RULE._regexp.Match  # the automaton itself, on UTF-8 bytes
_UNANCHORED: Final = re2._Anchor.UNANCHORED
_BY_CATEGORY: Final = {name: re2.compile(_pattern(group)) for name, group in CATEGORIES.items()}


class RuleScan:
    """Asks, span by span, whether a description states a rule there.

    The text is lower-cased and encoded once; each span is then one call into RE2's
    automaton on the bytes (the `re2` module's per-match Python layer is skipped: it
    cost more than the matching). Spans must come in increasing order. No pattern
    can match across a sentence boundary, so asking per unit equals asking each
    unit on its own.
    """

    __slots__ = ("_ascii", "_bytes", "_char", "_byte", "_signals", "_text")

    def __init__(self, text: str) -> None:
        lowered = text.lower()
        if len(lowered) != len(text):  # lower() changed lengths (e.g. "İ"): keep offsets aligned
            lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
        self._text = lowered
        self._ascii = lowered.isascii()
        self._bytes = lowered.encode("utf-8")
        self._char = self._byte = 0  # a known char offset and its byte offset
        self._signals = [m.start() for m in _SIGNAL.finditer(text)] if _SIGNAL.search(text) else []

    def _to_byte(self, char: int) -> int:
        if self._ascii:
            return char
        if char < self._char:
            self._char = self._byte = 0
        self._byte += len(self._text[self._char:char].encode("utf-8"))
        self._char = char
        return self._byte

    def states_rule(self, start: int, end: int) -> bool:
        """Does text[start:end] hold a rule word or signal?"""
        if self._signals and any(start <= p < end for p in self._signals):
            return True
        b_start, b_end = self._to_byte(start), self._to_byte(end)
        return _MATCH(_UNANCHORED, self._bytes, b_start, b_end)[0][0] >= 0


def rule_starts(text: str) -> list[int]:
    """Sorted offsets into `text` where a rule word or signal starts (for reports and tests)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    starts = [m.start() for m in _RULE.finditer(lowered)]
    if _SIGNAL.search(text) is not None:
        starts = sorted(starts + [m.start() for m in _SIGNAL.finditer(text)])
    return starts


def opens_with_instruction(unit: str) -> bool:
    """Does the unit, or a line of it, open with an imperative ("Provide the ID …"), or
    hold one capitalised after a space ("Example: Use 8 for …")?"""
    if _IMPERATIVE.match(unit) is not None or _IMPERATIVE_INSIDE.search(unit) is not None:
        return True
    return "\n" in unit and any(_IMPERATIVE.match(line) for line in unit.split("\n")[1:])


def is_rule(sentence: str) -> bool:
    """Does `sentence` (or unit) state a rule?"""
    return (_RULE.search(sentence.lower()) is not None or _SIGNAL.search(sentence) is not None
            or opens_with_instruction(sentence))


def rule_category(sentence: str) -> str | None:
    """The first category whose words occur in `sentence` (for lint reports)."""
    lowered = sentence.lower()
    for name, pattern in _BY_CATEGORY.items():
        if pattern.search(lowered):
            return name
    if opens_with_instruction(sentence):
        return "instruction"
    return "warning" if _SIGNAL.search(sentence) else None
