"""Package installs (pip, npm, cargo): errors, warnings and the summary; progress dropped."""

from __future__ import annotations

from ..view import census
from ._lines import LineCut, rx

#: lines only pip or npm print (npm 11 writes `npm error` / `npm warn`, older ones `npm ERR!`):
#: the build cut leaves a text holding one to this cut, even with a compiler's error inside
INSTALLER = rx(r"^(?:Using pip |Collecting |Processing |Looking in (?:indexes|links): "
               r"|npm (?:ERR!|error|WARN|warn|notice|verbose|info|http|silly|timing) "
               r"|[ \t]*error: subprocess-exited-with-error|error: metadata-generation-failed)")
#: what each of INSTALLER's alternatives holds (behind the newline it starts after)
INSTALLER_PROBES = census("\nUsing pip ", "\nCollecting ", "\nProcessing ", "\nLooking in ", "\nnpm ",
                          "error: subprocess-exited-with-error", "\nerror: metadata-generation-failed")

CUT = LineCut(
    name="install",
    signal=rx(r"^(?:Collecting |Downloading |Requirement already satisfied|Installing collected"
              r"|Successfully installed|Using pip |Processing |Looking in (?:indexes|links): "
              r"|npm (?:ERR!|error|WARN|warn|notice|verbose|info|http|silly|timing) |added \d+ packages?"
              r"|[ \t]*error: subprocess-exited-with-error|error: metadata-generation-failed"
              r"|[ \t]+(?:Compiling|Downloaded|Updating|Locking) [^ \t\n]+ v?\d)"),
    # the failure first: pip's and npm's error lines, and a compiler's error inside a build
    keep=((0, rx(r"^(?:(?:ERROR|error)(?:\[\w+\])?:? |npm (?:ERR!|error) |[ \t]*×|.*\bfailed\b"
                 r"|[ \t]+error: |[ \t]*[^ \t\n:][^\n:]*:\d+:\d+: (?:fatal )?error:)")),
          (1, rx(r"^(?:Successfully installed|added \d+ packages?|removed \d+ packages?"
                 r"|changed \d+ packages?|found \d+ vulnerabilit|\d+ vulnerabilit|up to date"
                 r"|[ \t]+Finished |[ \t]+Installed |audited \d+)")),
          (2, rx(r"^(?:WARNING|warning|npm WARN|npm warn|DEPRECATION)[: ]")),
          (3, rx(r"^[ \t]+(?:note|hint|help): "))),
    context=2,
    min_hits=2,
    # what each of the signal's alternatives holds (behind the newline it starts after)
    probes=(*INSTALLER_PROBES, "\nDownloading ", "\nRequirement already satisfied", "\nInstalling collected",
            "\nSuccessfully installed", "\nadded ",
            *(f"{space}{word} " for space in " \t" for word in ("Compiling", "Downloaded", "Updating", "Locking"))),
)
