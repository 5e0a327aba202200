"""The C accelerators are really in use wherever they can be built (or were turned off on purpose)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from caveman_batch import _accel


def test_accelerators_are_built_where_a_compiler_is() -> None:
    if _accel.DISABLED:
        pytest.skip("CAVEMAN_PURE_PYTHON is set: the pure-Python path is under test")
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): a pure-Python install")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("no Python headers (Python.h): a pure-Python install")
    assert all(_accel.status().values()), (
        f"a C compiler is here but the accelerators are not importable ({_accel.status()}): "
        "install with pip install -e '.[test]', or run python setup.py build_ext --inplace")


def test_pure_python_switch_and_version_report() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAVEMAN_")}
    pure = subprocess.run([sys.executable, "-m", "caveman_batch", "--version"], capture_output=True,
                          text=True, env={**env, "CAVEMAN_PURE_PYTHON": "1"}, timeout=60, check=True)
    assert pure.stdout.strip().endswith("(C accelerators: none)")
    if _accel.DISABLED:
        return  # this process cannot tell what the build provides
    default = subprocess.run([sys.executable, "-m", "caveman_batch", "--version"],
                             capture_output=True, text=True, env=env, timeout=60, check=True)
    active = [name for name, on in _accel.status().items() if on]
    assert default.stdout.strip().endswith(f"(C accelerators: {', '.join(active) or 'none'})")
