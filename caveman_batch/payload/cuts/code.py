"""Source code: the first import, definitions (signatures) at the margin from both ends
inwards, then the other imports, then nested definitions, each with its line number."""

from __future__ import annotations

import re
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, NumberedDoc, Run, census, finish, line_hits, pick
from ._lines import rx

_EXTENSIONS: Final = (".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h",
                      ".cc", ".cpp", ".hpp", ".rb", ".php", ".cs", ".swift", ".scala")
_IMPORT = rx(r"^(?:import |from [\w.]+ import |#include |use |package |require\(|using )")
#: possessive (`*+`): no keyword starts with a blank and no final keyword is a prefix one, so
#: giving back indentation or a prefix never makes a line match, and trying (every indented line
#: of a file, an alternation per blank) cost most of the cut
_DEF = rx(r"^[ \t]*+(?:(?:export |pub(?:\([\w:]+\))? |public |private |protected |static |async "
          r"|abstract |final |default )*+(?:def |class |function |fn |func |interface |struct "
          r"|enum |trait |impl |type |const [\w$]+ = (?:async )?\(|module ))")
#: a C-family function definition's head: at the margin, a name then "(", and no ";" after it
#: (a prototype, a call or a declaration ends with one); looked for only in text that has an
#: `#include` (a Python or JS call at the margin would match too)
_C_FUNCTION = rx(r"^(?!(?:return|if|else|while|for|switch|do|case|goto|sizeof|typedef)\b)"
                 r"[A-Za-z_][\w \t*&:<>,~]*\([^;\n]*$")
_SIGNAL: Final = re.compile(r"^(?:import |from [\w.]+ import |def |class |function |func |fn "
                            r"|pub fn |package |#include "
                            # a C function's definition: `static int name(`, `void *name(`
                            r"|(?:(?:static|extern|inline|const|unsigned|signed) )*"
                            r"(?:void|int|char|long|short|float|double|bool|size_t|struct \w+|\w+_t) ?\**\w+\()",
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
        return finish(pick(numbered, _outline(doc, c_family), limits), limits)


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
