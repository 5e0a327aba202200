"""The output tree's folders: each made once, by one mkdir when its parent is known to be
there (OUT, or a folder this run made), by makedirs only where a branch starts deeper."""

from __future__ import annotations

import os
import shutil
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


@pytest.mark.parametrize("incremental", [False, True])
def test_a_source_file_become_a_folder_and_back_makes_its_old_output_give_way(
        tmp_path: Path, incremental: bool) -> None:
    """A source `b.json` replaced by a folder `b.json/` (and back): the last run's output of
    the other kind is stale, and gives way (every later run failed on it, exit 2)."""
    src = _tree(tmp_path / "src", ["a.json", "b.json"])
    out = tmp_path / "out"
    config = Config([str(src)], out, f"lmdb://{tmp_path}/ccr", incremental=incremental)
    run(config)
    (src / "b.json").unlink()
    _tree(src, ["b.json/x.json", "b.json/deeper/y.json"])
    became_folder = run(config)
    assert (out / "b.json" / "x.json").is_file() and (out / "b.json" / "deeper" / "y.json").is_file()
    assert became_folder.changes.outputs_deleted == 1
    shutil.rmtree(src / "b.json")
    _tree(src, ["b.json"])
    became_file = run(config)
    assert (out / "b.json").read_bytes() == (out / "a.json").read_bytes()
    assert became_file.changes.outputs_deleted == 2
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "a.json", "b.json", "manifest.jsonl"]


def test_what_no_manifest_named_never_gives_way(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", ["a.json", "b.json"])
    out = tmp_path / "out"
    config = Config([str(src)], out, f"lmdb://{tmp_path}/ccr")
    run(config)
    (src / "b.json").unlink()
    _tree(src, ["b.json/x.json"])
    (out / "b.json").unlink()
    (out / "b.json").write_bytes(b"the user's")  # there, but not as the last run left it? still named
    (src / "c").mkdir()
    (src / "c" / "z.json").write_bytes(CATALOG)
    (out / "c").write_bytes(b"the user's own file")  # no manifest named it
    with pytest.raises(OSError, match=f"{out}/c: in the way"):
        run(config)
    assert (out / "c").read_bytes() == b"the user's own file"
    (out / "c").unlink()
    run(config)
    # the other way: a folder holding a file of the user's is not cleared for an output
    shutil.rmtree(src / "b.json")
    _tree(src, ["b.json"])
    (out / "b.json" / "notes.txt").write_bytes(b"mine")
    with pytest.raises(OSError, match="notes.txt"):
        run(config)
    assert (out / "b.json" / "notes.txt").read_bytes() == b"mine"
    assert (out / "b.json" / "x.json").is_file()  # nothing touched
