"""The output tree's folders: each made once, by one mkdir when its parent is known to be
there (OUT, or a folder this run made), by makedirs only where a branch starts deeper."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from caveman_batch.pipeline import Config, run

CATALOG = b'{"tools": [{"name": "ping", "description": "Ping.", "inputSchema": {"type": "object"}}]}'


def _tree(root: Path, files: list[str]) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(CATALOG)
    return root


def _count(monkeypatch: pytest.MonkeyPatch, name: str, under: Path) -> list[str]:
    """The folders under `under` that os.<name> is asked to make."""
    asked: list[str] = []
    real = getattr(os, name)

    def counting(path: Any, *args: Any, **kw: Any) -> Any:
        if str(path).startswith(str(under)):
            asked.append(os.path.relpath(path, under))
        return real(path, *args, **kw)

    monkeypatch.setattr(os, name, counting)
    return asked


def test_each_folder_is_one_mkdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src", ["a.json", "x/b.json", "x/y/c.json", "x/y/d.json", "z/e.json",
                                   "deep/er/still/f.json", "deep/er/zz/g.json"])
    out = tmp_path / "out"
    mkdirs = _count(monkeypatch, "mkdir", out)
    makedirs = _count(monkeypatch, "makedirs", out)
    summary = run(Config([str(src)], out, f"lmdb://{tmp_path}/ccr"))
    assert summary.documents == summary.ok == 7
    for rel in ("a.json", "x/y/d.json", "deep/er/still/f.json", "deep/er/zz/g.json"):
        assert (out / rel).read_bytes() == (out / "a.json").read_bytes()
    made = [m for m in mkdirs if not m.startswith(".")]  # (OUT and its temp folder: their own)
    # the walk's order: a folder's files, then its folders; "deep/er/still" starts a branch
    # whose parents hold no file: makedirs makes it (and them), known to be there after
    assert [m for m in makedirs if m != "."][0] == "deep/er/still"
    assert "deep/er/zz" not in makedirs  # its parent known: one mkdir
    assert sorted(made) == ["deep", "deep/er", "deep/er/still", "deep/er/zz", "x", "x/y", "z"]
    assert len(made) == len(set(made))  # each folder asked for once


def test_folders_already_there_and_a_file_in_the_way(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", ["x/y/c.json", "x/b.json"])
    out = tmp_path / "out"
    run(Config([str(src)], out, f"lmdb://{tmp_path}/ccr"))
    again = run(Config([str(src)], out, f"lmdb://{tmp_path}/ccr"))  # every folder there
    assert again.ok == 2 and (out / "x" / "y" / "c.json").is_file()
    (tmp_path / "src" / "w").mkdir()
    (tmp_path / "src" / "w" / "d.json").write_bytes(CATALOG)
    (out / "w").write_bytes(b"not a folder")
    with pytest.raises(OSError, match="w"):
        run(Config([str(src)], out, f"lmdb://{tmp_path}/ccr"))
