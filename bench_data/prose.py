"""Descriptions for synthetic tools and parameters, built from bench_data.words templates.

Descriptions are the part of a catalog the compressor rewrites, so their mix matters more than their
sense: a lead sentence, prose it may drop, rule sentences it must keep word for word, punctuation
that trips naive sentence splitters, lists, docstring blocks and some non-ASCII text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

from bench_data import words

# The product's display name and slug are substitution markers, filled per emitted server so that
# one pooled template can be re-emitted cheaply under many names (see catalogs.py).
NAME_MARK = "@@NAME@@"
SLUG_MARK = "@@SLUG@@"
VARIANT_MARK = "@@VAR@@"

# Weights of the sentence kinds added after the lead, per description style.
_MIX: dict[str, tuple[tuple[str, int], ...]] = {
    "terse": (("prose", 5), ("rule", 3), ("tricky", 1)),
    "rich": (("prose", 4), ("rule", 5), ("tricky", 2)),
    "agentic": (("prose", 2), ("rule", 4), ("selection", 3), ("tricky", 1)),
    "docstring": (("prose", 5), ("rule", 3), ("tricky", 1)),
}

# How many sentences follow the lead: mostly few, sometimes many, as in real catalogs.
_EXTRA: dict[str, tuple[int, ...]] = {
    "terse": (0, 0, 0, 0, 0, 1, 1, 2),
    "rich": (0, 1, 1, 2, 2, 3, 3, 4, 5, 7),
    "agentic": (1, 2, 3, 3, 4, 5, 6, 8),
    "docstring": (1, 1, 2, 3),
}


def article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def fill(template: str, slots: Mapping[str, object]) -> str:
    """Fill a template; slots the template does not use are ignored."""
    return template.format_map(slots)


class Prose:
    """Writes descriptions for one server; its style decides their length and their rule density."""

    def __init__(self, rng: random.Random, style: str, localized: bool) -> None:
        self.rng = rng
        self.style = style
        self.localized = localized

    def tool(self, slots: Mapping[str, object], params: list[tuple[str, str]]) -> str:
        """A tool description; params are (name, short description) pairs for docstring blocks."""
        essay = self.style != "terse" and self.rng.random() < 0.03
        count = self.rng.randint(12, 24) if essay else self.rng.choice(_EXTRA[self.style])
        text = self._join([self._lead(slots)] + self._extras(slots, count))
        if self.style == "docstring":
            return self._docstring(text, params)
        if essay or (self.style != "terse" and self.rng.random() < 0.1):
            text += "\n\n" + fill(self.rng.choice(words.LIST_BLOCKS), slots)
        return text + ("\n" if self.rng.random() < 0.08 else "")

    def param(self, base: str, slots: Mapping[str, object], rules: list[str]) -> str:
        """A parameter description: a short phrase, sometimes with a rule or more prose."""
        parts = [base]
        if rules and self.rng.random() < (0.2 if self.style == "terse" else 0.45):
            parts.append(self.rng.choice(rules))
        if self.style in ("rich", "agentic") and self.rng.random() < 0.06:
            parts.append(fill(self.rng.choice(words.PARAM_FLAVOUR), slots))
            parts.extend(self._extras(slots, self.rng.randint(1, 3)))
        return " ".join(parts)

    def _lead(self, slots: Mapping[str, object]) -> str:
        verb = str(slots["verb"])
        if verb in words.LEADS_BY_VERB and self.rng.random() < 0.75:
            return fill(self.rng.choice(words.LEADS_BY_VERB[verb]), slots)
        return fill(self.rng.choice(words.LEADS_GENERIC), slots)

    def _extras(self, slots: Mapping[str, object], count: int) -> list[str]:
        # Distinct sentences only: a repeated sentence would make dropping prose look too easy.
        chosen: dict[str, None] = {}
        for _ in range(count * 3):
            if len(chosen) == count:
                break
            chosen.setdefault(self._extra(slots))
        return list(chosen)

    def _extra(self, slots: Mapping[str, object]) -> str:
        if self.localized and self.rng.random() < 0.3:
            return fill(self.rng.choice(words.LOCALIZED), slots)
        kind = self._pick_kind()
        if kind == "prose":
            return fill(self.rng.choice(words.PROSE), slots)
        if kind == "tricky":
            return fill(self.rng.choice(words.TRICKY), slots)
        group = "selection" if kind == "selection" else self.rng.choice(tuple(words.RULES))
        return fill(self.rng.choice(words.RULES[group]), slots)

    def _pick_kind(self) -> str:
        kinds, weights = zip(*_MIX[self.style], strict=True)
        return str(self.rng.choices(kinds, weights)[0])

    def _join(self, sentences: list[str]) -> str:
        # Mostly one paragraph; sometimes line breaks or blank lines, which also end sentences.
        glue = self.rng.choices((" ", "\n", "\n\n"), (8, 1, 1))[0]
        return glue.join(sentences)

    def _docstring(self, text: str, params: list[tuple[str, str]]) -> str:
        lines = ["", text, ""]
        if params:
            lines.append("Args:")
            lines += [f"    {name}: {_first_sentence(desc)}" for name, desc in params]
            lines.append("")
        lines += ["Returns:", "    A JSON object with the matching records and a status field.", ""]
        return "\n".join(lines)


_FIRST = re.compile(r"^.*?[.!?](?=\s|$)")


def _first_sentence(text: str) -> str:
    match = _FIRST.match(text)
    return match.group(0) if match else text
