"""Source code: the first import, definitions (signatures) at the margin from both ends
inwards, then the other imports, then nested definitions, each with its line number."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from itertools import islice
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, NumberedDoc, Run, census, finish, line_hits, pick
from ._lines import Stream, by_priority, rx

_EXTENSIONS: Final = (".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h",
                      ".cc", ".cpp", ".hpp", ".rb", ".php", ".cs", ".swift", ".scala")
_IMPORT = rx(r"^(?:import |from [\w.]+ import |#include |use |package |require\(|using )")
#: possessive (`*+`): no keyword starts with a blank and no final keyword is a prefix one, so
#: giving back indentation or a prefix never makes a line match, and trying (every indented line
#: of a file, an alternation per blank) cost most of the cut
_DEF = rx(r"^[ \t]*+(?:(?:export |pub(?:\([\w:]+\))? |public |private |protected |static |async "
          r"|abstract |final |default )*+(?:def |class |function |fn |func |interface |struct "
          r"|enum |trait |impl |type |const [\w$]+ = (?:async )?\(|module ))")
#: what every line _DEF matches holds (its final keyword): a text with none has no definition,
#: and is not searched line by line (a C file: its ~40k lines tried against the keywords)
_DEF_NEEDLES: Final = census("def ", "class ", "function ", "fn ", "func ", "interface ", "struct ", "enum ",
                             "trait ", "impl ", "type ", "const ", "module ")
#: a C-family function definition's head: at the margin, a name then "(", and no ";" after it
#: (a prototype, a call or a declaration ends with one); looked for only in text that has an
#: `#include` (a Python or JS call at the margin would match too)
#: (the lookahead for a letter first: an indented line, most of a C file, fails at once, not
#: after the ten keywords)
_C_FUNCTION = rx(r"^(?=[A-Za-z_])(?!(?:return|if|else|while|for|switch|do|case|goto|sizeof|typedef)\b)"
                 r"[A-Za-z_][\w \t*&:<>,~]*\([^;\n]*$")
_SIGNAL: Final = re.compile(r"^(?:import |from [\w.]+ import |def |class |function |func |fn "
                            r"|pub fn |package |#include "
                            # a C function's definition: `static int name(`, `void *name(`
                            r"|(?:(?:static|extern|inline|const|unsigned|signed) )*"
                            # (the type ends a word: two runs of \w side by side were tried
                            # at every split, quadratic in a long line's length)
                            r"(?:void|int|char|long|short|float|double|bool|size_t|struct \w+|\w+_t)"
                            r"\b ?\**\w+\()",
                            re.MULTILINE)
#: what each of _SIGNAL's alternatives holds (behind the newline it starts after): a C
#: function's definition its "("
_PROBES: Final = census("\nimport ", "\nfrom ", "\ndef ", "\nclass ", "\nfunction ", "\nfunc ", "\nfn ",
                        "\npub fn ", "\npackage ", "\n#include ", "(")
_C_FAMILY: Final = census("\n#include")[0]


class CodeCut:
    name = "code"

    def detect(self, text: str, hint: Hint) -> bool:
        if hint.path and hint.path.lower().endswith(_EXTENSIONS):
            return True
        return Doc.of(text).holds(_PROBES) and line_hits(_SIGNAL, text, 3)

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        numbered = NumberedDoc(doc)
        c_family = doc.has(_C_FAMILY)  # the text starts with an #include, or a line does
        return finish(pick(numbered, _outline_runs(doc, c_family), limits, presorted=True), limits)


def _outline(doc: Doc, c_family: bool) -> list[Run]:
    """The first import (what the file is written against), then the definitions at the margin
    (a module's classes and functions, a C file's functions), then the other imports, then
    nested definitions (methods): what a file offers, then what it needs, then the detail.
    The definitions at the margin come both ends and the middle first, the other imports,
    then the definitions ever finer between (a budget
    that holds only some of them shows where the file starts, ends and what lies between,
    not only its first screen)."""
    lines = doc.lines
    top = [i for i in doc.grep(_DEF) if lines[i][:1] not in (" ", "\t")]
    nested = [i for i in doc.grep(_DEF) if lines[i][:1] in (" ", "\t")]
    if c_family:
        top = sorted({*top, *doc.grep(_C_FUNCTION)})
    imports = doc.grep(_IMPORT)
    # the ends and the middle (levels 0, 1), the other imports (mostly one block: cheap), then
    # the definitions between, ever finer, then the methods
    prio = [1 + level if level <= 1 else 3 + level for level in _spread(len(top))]
    last = max(prio, default=3) + 1  # once: in the generator below it was a pass over `prio` a method
    return [*((0, i, i + 1) for i in imports[:1]),
            *((p, i, i + 1) for p, i in zip(prio, top)),
            *((3, i, i + 1) for i in imports[1:]),
            *((last, i, i + 1) for i in nested)]


def _outline_runs(doc: Doc, c_family: bool) -> Iterator[Run]:
    """`sorted(_outline(doc, c_family))` (the definition), lazily: a level of the bisection is
    made, the imports past the first read and the methods listed only when the picker gets to
    their priority. A view of a 40k-line file shows a few dozen of its thousands of lines."""
    defs = doc.grep(_DEF) if doc.holds(_DEF_NEEDLES) else []  # no keyword: no definition
    lines = doc.lines
    top = [i for i in defs if lines[i][:1] not in (" ", "\t")]
    if c_family:
        top = sorted({*top, *doc.grep(_C_FUNCTION)})
    imports = doc.igrep(_IMPORT)  # lazily: the first, the rest when their priority is reached
    first = [(0, i, i + 1) for i in islice(imports, 1)]
    depth = _depth(len(top))
    prio = [1 + level if level <= 1 else 3 + level for level in range(depth + 1)] if top else []
    last = max(prio, default=3) + 1
    rest = ((3, i, i + 1) for i in imports)  # the imports past the first: read when got to
    streams: list[Stream] = [(0, iter(first)), (3, rest)]
    streams += [(p, partial(_at_level, top, level, p)) for level, p in enumerate(prio)]
    streams.append((last, partial(_nested, defs, lines, last)))
    return by_priority(streams)


def _at_level(top: list[int], level: int, prio: int) -> Iterator[Run]:
    return ((prio, top[k], top[k] + 1) for k in _level(len(top), level))


def _nested(defs: list[int], lines: list[str], prio: int) -> Iterator[Run]:
    return ((prio, i, i + 1) for i in defs if lines[i][:1] in (" ", "\t"))


def _depth(n: int) -> int:
    """The deepest level `_spread(n)` gives: a span of `gaps` halves to at most ceil(gaps / 2)."""
    depth, gaps = 0, n - 1
    while gaps >= 2:
        depth, gaps = depth + 1, -(-gaps // 2)
    return depth


def _level(n: int, level: int) -> list[int]:
    """`[k for k, v in enumerate(_spread(n)) if v == level]`, the bisection's spans split
    breadth first, in order, up to `level` only."""
    if level == 0:
        return sorted({0, n - 1}) if n else []
    spans = [(0, n - 1)] if n > 2 else []
    for _ in range(level - 1):
        spans = [half for lo, hi in spans if hi - lo >= 2 for half in ((lo, (lo + hi) // 2), ((lo + hi) // 2, hi))]
    return [(lo + hi) // 2 for lo, hi in spans if hi - lo >= 2]


def _spread(n: int) -> list[int]:
    """Each of n items' level in a bisection: the two ends 0, the middle 1, the quarters 2, ..."""
    level = [0] * n
    todo = [(0, n - 1, 1)] if n > 2 else []
    while todo:
        lo, hi, depth = todo.pop()
        mid = (lo + hi) // 2
        if lo < mid < hi:
            level[mid] = depth
            todo += [(lo, mid, depth + 1), (mid, hi, depth + 1)]
    return level


CUT = CodeCut()
