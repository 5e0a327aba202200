"""OUT follows its sources, so a source that could not be read must never look removed: a
SRC that is not there refuses the run, a folder or file the run cannot read keeps its
outputs (and its documents are not reported removed), and the run after it sorts them out."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caveman_batch.converge import journal_path
from test_cli_store import MODES_BIND, _without_dac_override, run_as_modes_say, snapshot

CATALOG = b'{"tools":[{"name":"get_weather","description":"Get the weather. Returns JSON.",' \
          b'"inputSchema":{"type":"object","properties":{"city":{"type":"string"}}}}]}'


def _compress(tmp: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """compress in a real process that file modes bind (root's overrides dropped)."""
    return run_as_modes_say("compress", *args, "--store", f"lmdb://{tmp}/ccr", "--workers", "1")


@contextlib.contextmanager
def _unreadable(*paths: Path) -> Iterator[None]:
    """`paths` mode 0 for the block (a folder not listable, a file not openable)."""
    modes = [path.stat().st_mode for path in paths]
    for path in paths:
        path.chmod(0)
    try:
        yield
    finally:
        for path, mode in zip(paths, modes):
            path.chmod(mode)


def _rows(manifest: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in manifest.read_bytes().splitlines()]


def _files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*")
            if p.is_file() and not p.name.startswith(".")}


def _tree(tmp: Path) -> Path:
    src = tmp / "src"
    for folder in ("a", "b", "b/deep"):
        (src / folder).mkdir(parents=True)
        (src / folder / "one.json").write_bytes(CATALOG)
        (src / folder / "two.jsonl").write_bytes(CATALOG + b"\n" + CATALOG + b"\n")
    return src


@pytest.mark.parametrize("missing", ["gone", "gone/", "a/one.json/x", "dangling"])
def test_a_src_that_is_not_there_refuses_the_run_and_out_is_untouched(
        tmp_path: Path, missing: str) -> None:
    src = _tree(tmp_path)
    out = tmp_path / "out"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    folders = [out, out / "a", out / "b", out / "b" / "deep"]

    def outputs() -> dict[Path, Any]:  # (the lock file too: its pid is not rewritten)
        return {p: snapshot(p) for p in folders}

    before = outputs()
    named = str(tmp_path / missing) if missing != "a/one.json/x" else str(src / missing)
    for sources in ([named], [str(src), named]):
        done = _compress(tmp_path, *sources, "-o", str(out))
        assert done.returncode == 1, done.stderr
        assert named.rstrip("/").encode() in done.stderr and b"no such file or folder" in done.stderr
        assert outputs() == before  # not one output deleted
    fresh = tmp_path / "new-out"
    done = _compress(tmp_path, str(src), named, "-o", str(fresh))
    assert done.returncode == 1 and not fresh.exists()  # no OUT made, nor its lock file


@MODES_BIND
def test_a_folder_that_cannot_be_read_keeps_its_outputs(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    out, changes = tmp_path / "out", tmp_path / "changes.jsonl"
    assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    everything = _files(out)
    kept = {rel: (out / rel).read_bytes() for rel in everything if rel.startswith("b/")}
    assert len(kept) == 4
    with _unreadable(src / "b"):
        done = _compress(tmp_path, str(src), "-o", str(out), "--changes", str(changes))
    assert done.returncode == 0, done.stderr
    assert _files(out) == everything
    assert {rel: (out / rel).read_bytes() for rel in kept} == kept
    errors = [r for r in _rows(out / "manifest.jsonl") if r["status"] == "error"]
    assert [(r["source"], r["output"]) for r in errors] == [({"path": f"{src}/b"}, None)]
    assert "cannot read folder: Permission denied" in errors[0]["reason"]
    assert b"4 output(s) of sources that could not be read kept" in done.stdout
    lines = [json.loads(line) for line in changes.read_bytes().splitlines()]
    assert [line["change"] for line in lines] == ["added"]  # the error row; nothing removed
    # the kept outputs are named for the next run, which no manifest does now
    journal = journal_path(out / "manifest.jsonl")
    named = [json.loads(line) for line in journal.read_bytes().splitlines()]
    assert sorted(n for n in named if isinstance(n, str)) == sorted(kept)
    assert sorted(n["output"]["path"] for n in named if isinstance(n, dict)) == sorted(
        ["b/one.json", "b/two.jsonl", "b/two.jsonl", "b/deep/one.json", "b/deep/two.jsonl",
         "b/deep/two.jsonl"])  # and their rows

    # readable again: written again, the journal gone, nothing kept or deleted
    done = _compress(tmp_path, str(src), "-o", str(out), "--incremental")
    assert done.returncode == 0, done.stderr
    assert _files(out) == everything and not journal.exists()
    assert all(r["status"] != "error" for r in _rows(out / "manifest.jsonl"))

    # unreadable, then removed: the run that cannot see it keeps, the next deletes
    with _unreadable(src / "b"):
        assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    shutil.rmtree(src / "b")
    done = _compress(tmp_path, str(src), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert _files(out) == everything - set(kept) and not journal.exists()
    assert b"4 stale output(s) deleted" in done.stdout


@MODES_BIND
def test_a_file_that_cannot_be_read_keeps_its_output(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    out = tmp_path / "out"
    assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    before = (out / "a" / "two.jsonl").read_bytes()
    with _unreadable(src / "a" / "two.jsonl"):
        done = _compress(tmp_path, str(src), "-o", str(out), "--incremental")
    assert done.returncode == 0, done.stderr
    assert (out / "a" / "two.jsonl").read_bytes() == before
    error, = [r for r in _rows(out / "manifest.jsonl") if r["status"] == "error"]
    assert error["source"] == {"path": f"{src}/a/two.jsonl"} and "Permission denied" in error["reason"]


@MODES_BIND
def test_an_unreadable_src_folder_named_alone_keeps_every_output(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    out = tmp_path / "out"
    assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    everything = _files(out)
    with _unreadable(src):
        done = _compress(tmp_path, str(src), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert _files(out) == everything


@MODES_BIND
def test_a_src_whose_parent_cannot_be_entered_refuses_the_run(tmp_path: Path) -> None:
    """It cannot be told a file or a folder, so not which outputs are its: refused, OUT
    untouched (taken for a file, every output of the folder it is was deleted)."""
    src = _tree(tmp_path / "p")
    out = tmp_path / "out"
    assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    everything = {rel: (out / rel).read_bytes() for rel in _files(out)}
    with _unreadable(tmp_path / "p"):
        for sources in ([str(src)], [str(src), str(tmp_path / "other.json")]):
            (tmp_path / "other.json").write_bytes(CATALOG)
            done = _compress(tmp_path, *sources, "-o", str(out))
            assert done.returncode == 1, done.stderr
            assert f"{src}: cannot be looked at: Permission denied".encode() in done.stderr
    assert {rel: (out / rel).read_bytes() for rel in _files(out)} == everything


def _changes(path: Path) -> list[tuple[str, Any, Any]]:
    return [(c["change"], c["source"], c["output"])
            for c in (json.loads(line) for line in path.read_bytes().splitlines())]


@MODES_BIND
def test_changes_never_report_what_could_not_be_read(tmp_path: Path) -> None:
    """An unreadable file's documents are neither changed nor removed; an unreadable
    folder's last rows go on (in the journal), so the run after compares with them: nothing
    changed once it is readable again, every document removed once it is gone."""
    src = _tree(tmp_path)
    out, changes = tmp_path / "out", tmp_path / "changes.jsonl"
    assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    errors = [({"path": f"{src}/a/two.jsonl"}, None), ({"path": f"{src}/b"}, None)]
    with _unreadable(src / "a" / "two.jsonl", src / "b"):
        for run in range(2):  # unreadable for two runs: the rows go on from journal to journal
            done = _compress(tmp_path, str(src), "-o", str(out), "--changes", str(changes))
            assert done.returncode == 0, done.stderr
            # the error rows come (and then stay): nothing of the documents
            assert _changes(changes) == ([("added", *e) for e in errors] if run == 0 else [])
    done = _compress(tmp_path, str(src), "-o", str(out), "--changes", str(changes))
    assert done.returncode == 0, done.stderr
    assert _changes(changes) == [("removed", *e) for e in errors]  # the documents as before
    journal = journal_path(out / "manifest.jsonl")
    assert not journal.exists()
    with _unreadable(src / "b"):
        assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    shutil.rmtree(src / "b")
    done = _compress(tmp_path, str(src), "-o", str(out), "--changes", str(changes))
    assert done.returncode == 0, done.stderr
    removed = [c for c in _changes(changes) if c[2] is not None]  # (and the error row)
    assert {c[0] for c in removed} == {"removed"} and len(removed) == 6  # one.json, two lines, deep's
    assert {c[2] for c in removed} == {"b/one.json", "b/two.jsonl", "b/deep/one.json",
                                       "b/deep/two.jsonl"}
    assert not any(rel.startswith("b/") for rel in _files(out)) and not journal.exists()


@MODES_BIND
def test_kept_outputs_are_named_before_the_manifest_is_published(tmp_path: Path) -> None:
    """Killed just after the manifest that no longer names them is published, the run
    leaves the kept outputs and rows named in the journal: the next run deletes them once
    their source is gone (they stayed in OUT for ever, named by nothing)."""
    src = _tree(tmp_path)
    out = tmp_path / "out"
    assert _compress(tmp_path, str(src), "-o", str(out)).returncode == 0
    killer = tmp_path / "killer.py"
    killer.write_text(
        "import os, sys\n"
        "real = os.replace\n"
        "def replace(a, b, *args, **kw):\n"
        "    real(a, b, *args, **kw)\n"
        "    if str(b).endswith('manifest.jsonl'):\n"
        "        os._exit(137)\n"
        "os.replace = replace\n"
        "from caveman_batch.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    drop = _without_dac_override if os.geteuid() == 0 else None
    with _unreadable(src / "b"):
        killed = subprocess.run([sys.executable, str(killer), "compress", str(src), "-o", str(out),
                                 "--store", f"lmdb://{tmp_path}/ccr", "--workers", "1"],
                                capture_output=True, timeout=120, preexec_fn=drop)
    assert killed.returncode == 137, killed.stderr
    shutil.rmtree(src / "b")
    done = _compress(tmp_path, str(src), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert not any(rel.startswith("b/") for rel in _files(out))
