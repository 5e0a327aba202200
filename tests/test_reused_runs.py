"""Settled files one after another, reused whole as one ReusedRun (the stat cache tells each
unchanged): their rows, records and totals as a file-by-file reuse would carry them, when
rows before them moved, and with files changed, added or removed among them."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench_data.generate import generate_registry
from caveman_batch import fsio
from caveman_batch.pipeline import LOCK_FILE, Config, incremental, run

NOT_COMPARED = {".manifest.stat.json", LOCK_FILE}


def _tree_of(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in NOT_COMPARED}


def _run(tmp: Path, reg: Path, out: str = "out", store: str = "ccr") -> Any:
    return run(Config([str(reg)], tmp / out, f"lmdb://{tmp / store}", incremental=True))


def _as_fresh(tmp: Path, reg: Path) -> None:
    """OUT, manifest and fingerprint included, byte for byte what a first run writes."""
    _run(tmp, reg, "fresh", "fresh-ccr")
    assert _tree_of(tmp / "out") == _tree_of(tmp / "fresh")
    shutil.rmtree(tmp / "fresh")
    shutil.rmtree(tmp / "fresh-ccr")


@pytest.fixture
def reg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)  # every file settled: the stat cache holds
    reg = tmp_path / "reg"
    generate_registry(reg, seed=7, servers=10, oversize_bytes=0)
    return reg


def _files(reg: Path) -> list[Path]:
    return [p for p in sorted(reg.rglob("*.json")) if "_quirks" not in p.parts]


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """(sources, adjacent) of each ReusedRun a run makes."""
    seen: list[tuple[int, bool]] = []
    real = incremental._unchanged_run

    def watching(*args: Any) -> Any:
        got = real(*args)
        if got is not None:
            seen.append((len(got.rels), got.adjacent))
        return got

    monkeypatch.setattr(incremental, "_unchanged_run", watching)
    from caveman_batch.pipeline import sources
    monkeypatch.setattr(sources, "_unchanged_run", watching)
    return seen


def test_a_settled_tree_is_one_run(tmp_path: Path, reg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _run(tmp_path, reg)
    runs = _runs(monkeypatch)
    again = _run(tmp_path, reg)
    assert again.reused == again.documents == first.documents
    assert (again.ok, again.error, again.passthrough) == (first.ok, first.error, first.passthrough)
    assert (again.tokens_before, again.tokens_after) == (first.tokens_before, first.tokens_after)
    assert again.errors == first.errors
    assert sum(n for n, _ in runs) == len(list(reg.rglob("*.json"))) and all(a for _, a in runs)
    _as_fresh(tmp_path, reg)


def test_rows_moved_before_a_run(tmp_path: Path, reg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file removed and the next one edited: the run after them starts one row earlier
    than its rows did, and every first_row of it moves alike."""
    first = _run(tmp_path, reg)
    files = _files(reg)
    files[3].unlink()
    data = files[4].read_bytes()
    at = data.index(b"description") + 20
    files[4].write_bytes(data[:at] + (b"x" if data[at:at + 1] != b"x" else b"y") + data[at + 1:])
    runs = _runs(monkeypatch)
    edited = _run(tmp_path, reg)
    assert edited.documents == first.documents - 1
    assert edited.reused == edited.documents - 1  # the edited file alone compressed again
    assert any(a for _, a in runs[1:])  # the run after the edit: adjacent, its rows moved
    _as_fresh(tmp_path, reg)
    runs.clear()
    settled = _run(tmp_path, reg)
    assert settled.reused == settled.documents and all(a for _, a in runs)
    _as_fresh(tmp_path, reg)


def test_a_run_with_a_gap_in_its_rows(tmp_path: Path, reg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file removed among settled ones: those around it are one run, their rows no longer
    one after another in the old manifest (carried one by one)."""
    _run(tmp_path, reg)
    files = _files(reg)
    files[5].unlink()
    runs = _runs(monkeypatch)
    again = _run(tmp_path, reg)
    assert again.reused == again.documents
    assert not runs[0][1]  # one run across the gap, not adjacent
    _as_fresh(tmp_path, reg)
    os.utime(files[6])  # touched: hashed, found the same, the runs go on around it
    runs.clear()
    touched = _run(tmp_path, reg)
    assert touched.reused == touched.documents and len(runs) == 2
    _as_fresh(tmp_path, reg)
