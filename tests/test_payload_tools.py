"""The real-output makers' check that a tool can run here (payload_outputs.unusable): a tool on
PATH whose own probe fails, as a rustup shim with no toolchain does under a fresh HOME, is Missing
and skipped; one whose probe passes is used, and a failure of its real job is not hidden.

The tools are real executables: shell scripts written into a folder put first on PATH, which
answer as rustup's cargo shim does, toolchain or none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from caveman_batch.testing import fact_outputs as fo
from caveman_batch.testing import payload_outputs as po

NO_TOOLCHAIN = ("error: rustup could not choose a version of cargo to run, because one wasn't specified "
                "explicitly, and no default is configured.")

#: cargo as rustup's shim runs it: no toolchain in rustup's home ($RUSTUP_HOME, else ~/.rustup),
#: the shim's error; else a version, or for any other command the build output given, with
#: cargo's exit code for a failed build. Each call is logged with the environment it ran in.
CARGO = """\
#!/bin/sh
printf '%s\\t%s\\t%s\\t%s\\n' "$*" "$HOME" "$RUSTUP_HOME" "$CARGO_HOME" >> "{log}"
if [ ! -d "${{RUSTUP_HOME:-$HOME/.rustup}}/toolchains" ]; then
    echo "{no_toolchain}" >&2
    echo "help: run 'rustup default stable' to download the latest stable release of Rust." >&2
    exit 1
fi
if [ "$1" = "--version" ]; then
    echo "cargo 1.95.0 (fake 2026-03-21)"
    exit 0
fi
printf '%s\\n' "{build_output}" >&2
exit 101
"""


def _cargo(tmp: Path, build_output: str) -> Path:
    """A cargo script in a folder of its own first on PATH; the log it writes its calls to."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp / "cargo-calls.log"
    script = bin_dir / "cargo"
    script.write_text(CARGO.format(log=log, no_toolchain=NO_TOOLCHAIN, build_output=build_output))
    script.chmod(0o755)
    return log


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME, rustup's and cargo's homes left to be found from it as on a new machine."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RUSTUP_HOME", raising=False)
    monkeypatch.delenv("CARGO_HOME", raising=False)
    return home


def _on_path(tmp: Path, monkeypatch: pytest.MonkeyPatch, build_output: str) -> Path:
    log = _cargo(tmp, build_output)
    monkeypatch.setenv("PATH", f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return log


def _calls(log: Path) -> list[list[str]]:
    """Each call cargo got: its arguments, then HOME, RUSTUP_HOME and CARGO_HOME."""
    return [line.split("\t") for line in log.read_text().splitlines()]


def test_a_tool_whose_probe_fails_is_missing_with_its_first_error_line(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _on_path(tmp_path, monkeypatch, "error: never reached")
    with pytest.raises(po.Missing, match=f"^cargo is installed but cannot run: {NO_TOOLCHAIN}") as caught:
        po.cargo_errors(tmp_path / "maker")
    assert "help: run" not in str(caught.value)  # the first line only
    assert [call[0] for call in _calls(log)] == ["--version"]  # probed, never asked to build


def test_the_probe_is_run_once_a_process_for_every_maker_of_both_corpora(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _on_path(tmp_path, monkeypatch, "error: never reached")
    for k, maker in enumerate((po.cargo_errors, po.cargo_warnings, po.cargo_test, po.cargo_panic)):
        with pytest.raises(po.Missing):
            maker(tmp_path / f"maker-{k}")
    with pytest.raises(fo.ToolMissing, match=f"^cargo is installed but cannot run: {NO_TOOLCHAIN}"):
        fo.cargo_mismatched(tmp_path / "facts")
    assert [call[0] for call in _calls(log)] == ["--version"]


def test_the_probe_runs_in_the_makers_environment_with_the_users_rustup_home(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The maker gives cargo a HOME of its own and the user's RUSTUP_HOME (~/.rustup): the
    probe sees the same, so a toolchain there makes the tool usable."""
    (home / ".rustup" / "toolchains").mkdir(parents=True)
    log = _on_path(tmp_path, monkeypatch, "error[E0308]: mismatched types")
    out = po.cargo_errors(tmp_path / "maker")
    assert out.data == b"error[E0308]: mismatched types\n"
    probe, build = _calls(log)
    assert (probe[0], build[0]) == ("--version", "build --offline")
    assert probe[1:] == build[1:] == [str(tmp_path / "maker"), str(home / ".rustup"), str(home / ".cargo")]


def test_a_real_failure_after_a_good_probe_still_raises(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / ".rustup" / "toolchains").mkdir(parents=True)
    _on_path(tmp_path, monkeypatch, "error: could not exec the linker cc: No such file or directory")
    with pytest.raises(RuntimeError, match="could not exec the linker cc") as caught:
        po.cargo_panic(tmp_path / "maker")
    assert not isinstance(caught.value, po.Missing)


def test_a_tool_not_on_path_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(po.Missing, match="^cargo is not installed$"):
        po.cargo_errors(tmp_path / "maker")
