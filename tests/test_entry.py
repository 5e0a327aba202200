"""The console script's entry (caveman_batch._entry): Ctrl-C during the CLI's imports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# imported at the interpreter's start (as `sitecustomize`): a SIGINT to this process when the
# CLI's imports reach caveman_batch.describe, half-way through them, as a Ctrl-C landing there
_INTERRUPT_IN_IMPORTS = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
class _Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "caveman_batch.describe":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _Interrupt())
"""


def _entry_point() -> list[str]:
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


@pytest.mark.parametrize("command", [_entry_point(), [sys.executable, "-m", "caveman_batch"]],
                         ids=["console-script", "python-m"])
def test_ctrl_c_in_imports_exits_130_without_a_traceback(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "sitecustomize.py").write_text(_INTERRUPT_IN_IMPORTS)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([*command, "--version"], capture_output=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, b"", b"")


def test_the_package_imports_nothing_of_its_own(tmp_path: Path) -> None:
    """What the entry's guard relies on: importing the package runs none of the CLI's
    imports, and its exported names still load on first use."""
    code = ("import sys, caveman_batch as c; "
            "assert not [m for m in sys.modules if m.startswith('caveman_batch.')], sys.modules; "
            "print(c.Store.__name__, c.open_store.__name__, c.CavemanError.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [b"Store", b"open_store", b"CavemanError"]
