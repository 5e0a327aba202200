"""Package installs (pip, npm, cargo): errors, warnings and the summary; progress dropped."""

from __future__ import annotations

from ._lines import LineCut, rx

CUT = LineCut(
    name="install",
    signal=rx(r"^(?:Collecting |Downloading |Requirement already satisfied|Installing collected"
              r"|Successfully installed|npm (?:WARN|ERR!|notice)|added \d+ packages?"
              r"|[ \t]+(?:Compiling|Downloaded|Updating|Locking) [^ \t\n]+ v?\d)"),
    keep=((0, rx(r"^(?:ERROR|error)(?:\[\w+\])?:? |npm ERR! |[ \t]*×|.*\bfailed\b")),
          (1, rx(r"^(?:Successfully installed|added \d+ packages?|removed \d+ packages?"
                 r"|changed \d+ packages?|found \d+ vulnerabilit|\d+ vulnerabilit|up to date"
                 r"|[ \t]+Finished |[ \t]+Installed |audited \d+)")),
          (2, rx(r"^(?:WARNING|warning|npm WARN|DEPRECATION)[: ]")),
          (3, rx(r"^[ \t]+(?:note|hint|help): "))),
    context=2,
    min_hits=2,
)
