"""The console script's entry: the CLI's imports, then the CLI.

Ctrl-C in the CLI's imports (about 0.2 s of them, before the CLI maps an interrupt to exit 130)
printed Python's KeyboardInterrupt traceback from deep inside some module; it is exit 130
here too, with nothing written (nothing was started to undo). The package's own `__init__`
imports nothing on its own (its names load on first use), so the window left is the
interpreter's start-up, before any of this code runs.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # as the CLI exits on Ctrl-C (128 + SIGINT)


def main() -> int:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        return INTERRUPTED
    return cli_main()


if __name__ == "__main__":  # pragma: no cover (python -m caveman_batch runs __main__)
    sys.exit(main())
