"""The console script's entry: the CLI's imports, then the CLI.

Ctrl-C in the CLI's imports (about 0.2 s of them, before the CLI maps an interrupt to exit 130)
printed Python's KeyboardInterrupt traceback from deep inside some module; it is exit 130
here too, with nothing written (nothing was started to undo). The package's own `__init__`
imports nothing on its own (its names load on first use), so the window left is the
interpreter's start-up, before any of this code runs.
"""

from __future__ import annotations

import os
import sys

INTERRUPTED = 130  # as the CLI exits on Ctrl-C (128 + SIGINT)


def _utf8_mode() -> None:
    """Run this CLI in Python's UTF-8 mode when the locale's encoding is not UTF-8 (LC_ALL=C
    with PYTHONUTF8=0, a Latin-1 locale): Python decodes file names, arguments and store
    paths by the locale, so a UTF-8 name that is not ASCII (`é.json`) was an error row ("not
    UTF-8") under C, mojibake in the manifest and the index under Latin-1, and a store or
    index in a folder so named a traceback. Re-executed once, with `-X utf8` (the option, not
    the variable: the upstreams a proxy starts keep the user's environment); only as the
    program's own entry (`python -m caveman_batch` or the console script), never when some
    other program calls main()."""
    if (os.name != "posix" or sys.getfilesystemencoding() == "utf-8" or "utf8" in sys._xoptions
            or not sys.executable or getattr(sys.modules.get("__main__"), "main", None) is not main):
        return
    try:
        os.execv(sys.executable, [sys.executable, "-X", "utf8", *sys.orig_argv[1:]])
    except OSError:
        pass  # run on as before


def main() -> int:
    try:
        _utf8_mode()
        from .cli import main as cli_main
    except KeyboardInterrupt:
        return INTERRUPTED
    return cli_main()


if __name__ == "__main__":  # pragma: no cover (python -m caveman_batch runs __main__)
    sys.exit(main())
