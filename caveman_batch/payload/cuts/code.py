"""Source code: imports and definitions (signatures), each with its line number."""

from __future__ import annotations

import re
from typing import Final

from ..model import Hint, Limits
from ..view import Doc, NumberedDoc, census, finish, line_hits, pick
from ._lines import rx

_EXTENSIONS: Final = (".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h",
                      ".cc", ".cpp", ".hpp", ".rb", ".php", ".cs", ".swift", ".scala")
_IMPORT = rx(r"^(?:import |from [\w.]+ import |#include |use |package |require\(|using )")
_DEF = rx(r"^[ \t]*(?:(?:export |pub(?:\([\w:]+\))? |public |private |protected |static |async "
          r"|abstract |final |default )*(?:def |class |function |fn |func |interface |struct "
          r"|enum |trait |impl |type |const [\w$]+ = (?:async )?\(|module ))")
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


class CodeCut:
    name = "code"

    def detect(self, text: str, hint: Hint) -> bool:
        if hint.path and hint.path.lower().endswith(_EXTENSIONS):
            return True
        return Doc.of(text).holds(_PROBES) and line_hits(_SIGNAL, text, 3)

    def cut(self, text: str, limits: Limits) -> str | None:
        doc = Doc.of(text)
        numbered = NumberedDoc(doc)
        runs = [(0, i, i + 1) for i in doc.grep(_IMPORT)]
        runs += [(1, i, i + 1) for i in doc.grep(_DEF)]
        return finish(pick(numbered, runs, limits), limits)


CUT = CodeCut()
