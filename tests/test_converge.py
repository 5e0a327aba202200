"""A rerun converges OUT to its sources: stale outputs go, what changed is counted and listed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from caveman_batch import ccr
from caveman_batch.catalog import compress
from caveman_batch.cli import main
from caveman_batch.converge import journal_path
from caveman_batch.errors import OutputError
from caveman_batch.pipeline import LOCK_FILE, Config, run
from caveman_batch.store import open_store

STAT_CACHE = ".manifest.stat.json"  # this machine's file identities: differs between runs


def _catalog(name: str, words: str = "Reads things.") -> bytes:
    tool = {"name": name, "description": f"{words} " * 20 + "Never deletes anything.",
            "inputSchema": {"type": "object", "title": "Args",
                            "properties": {"q": {"type": "string", "title": "Query"}}}}
    return json.dumps({"tools": [tool]}, indent=2).encode()


def _registry(tmp: Path) -> Path:
    """A tree of catalog files, a JSONL file and a registry array."""
    reg = tmp / "reg"
    for rel in ("alpha/ref.json", "alpha/docs.json", "beta/git.json", "beta/deep/time.json", "top.json"):
        (reg / rel).parent.mkdir(parents=True, exist_ok=True)
        (reg / rel).write_bytes(_catalog(rel.replace("/", "_")[:-5]))
    lines = [json.dumps(json.loads(_catalog(f"line{i}"))).encode() for i in range(5)]
    (reg / "lines.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    items = [_catalog(f"item{i}") for i in range(4)]
    (reg / "array.json").write_bytes(b'{"servers": [' + b", ".join(items) + b"]}")
    return reg


def _run(tmp: Path, *sources: Path, out_name: str = "out", **kw: Any) -> tuple[Path, Any]:
    out = tmp / out_name
    config = Config([str(s) for s in sources], out, kw.pop("store", f"lmdb://{tmp}/ccr"),
                    workers=1, **kw)
    return out, run(config)


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != STAT_CACHE}


def _folders(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir())


def _assert_as_fresh(tmp: Path, reg: Path, out: Path) -> None:
    """OUT (files and folders) what a first run into an empty OUT writes, byte for byte."""
    fresh, _ = _run(tmp, reg, out_name="fresh", store=f"lmdb://{tmp}/fresh-ccr")
    assert _tree(out) == _tree(fresh)
    assert _folders(out) == _folders(fresh)
    shutil.rmtree(fresh)
    shutil.rmtree(tmp / "fresh-ccr")


def _changes(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _counts(summary: Any) -> tuple[int, int, int, int]:
    c = summary.changes
    assert c.added + c.changed + c.unchanged == summary.documents  # each document is one of them
    return c.added, c.changed, c.unchanged, c.removed


def _handle(data: bytes) -> str:
    return ccr.make_handle(hashlib.sha256(data).hexdigest())


# Convergence is not an --incremental feature: any run that finds a previous manifest
# (a full rebuild into the same OUT too) leaves OUT as a first run would.
@pytest.fixture(params=[True, False], ids=["incremental", "full"])
def incremental(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_first_run_adds_every_document(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    out, summary = _run(tmp_path, reg, changes=tmp_path / "changes.jsonl")
    assert _counts(summary) == (summary.documents, 0, 0, 0) and summary.documents == 14
    lines = _changes(tmp_path / "changes.jsonl")
    assert {line["change"] for line in lines} == {"added"} and len(lines) == 14
    assert lines == sorted(lines, key=lambda x: (x["source"]["path"], x["source"].get("line", x["source"].get("item", -1))))
    assert not journal_path(out / "manifest.jsonl").exists()  # gone once the manifest is out
    _, again = _run(tmp_path, reg, changes=tmp_path / "changes.jsonl")
    assert _counts(again) == (0, 0, 14, 0)
    assert (tmp_path / "changes.jsonl").read_bytes() == b""


def test_removed_source_output_and_its_empty_folders_go(tmp_path: Path, incremental: bool) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=incremental)
    gone = reg / "beta" / "deep" / "time.json"
    old = gone.read_bytes()
    gone.unlink()
    (reg / "beta" / "deep").rmdir()
    changes = tmp_path / "changes.jsonl"
    _, summary = _run(tmp_path, reg, incremental=incremental, changes=changes)
    assert _counts(summary) == (0, 0, 13, 1)
    assert summary.changes.outputs_deleted == 1
    assert not (out / "beta" / "deep").exists() and (out / "beta" / "git.json").exists()
    assert _changes(changes) == [{"change": "removed", "source": {"path": str(gone)},
                                  "output": "beta/deep/time.json", "old_handle": _handle(old),
                                  "new_handle": None}]
    _assert_as_fresh(tmp_path, reg, out)
    # the whole registry leaves: nothing but bookkeeping is left in OUT
    shutil.rmtree(reg / "beta")
    _, summary = _run(tmp_path, reg, incremental=incremental)
    assert summary.changes.removed == 1 and not (out / "beta").exists()


def test_renamed_source(tmp_path: Path, incremental: bool) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=incremental)
    (reg / "alpha" / "ref.json").rename(reg / "alpha" / "ref2.json")
    changes = tmp_path / "changes.jsonl"
    _, summary = _run(tmp_path, reg, incremental=incremental, changes=changes)
    assert _counts(summary) == (1, 0, 13, 1)
    assert not (out / "alpha" / "ref.json").exists()
    assert (out / "alpha" / "ref2.json").read_bytes() == compress(_catalog("alpha_ref"))[0]
    assert [(c["change"], c["output"]) for c in _changes(changes)] == [
        ("removed", "alpha/ref.json"), ("added", "alpha/ref2.json")]
    _assert_as_fresh(tmp_path, reg, out)


def test_moved_between_folders(tmp_path: Path, incremental: bool) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=incremental)
    (reg / "gamma").mkdir()
    (reg / "beta" / "deep" / "time.json").rename(reg / "gamma" / "time.json")
    _, summary = _run(tmp_path, reg, incremental=incremental)
    assert _counts(summary) == (1, 0, 13, 1)
    assert not (out / "beta" / "deep").exists() and (out / "gamma" / "time.json").exists()
    _assert_as_fresh(tmp_path, reg, out)


def test_source_renamed_onto_a_removed_sources_output_path(tmp_path: Path, incremental: bool) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=incremental)
    (reg / "alpha" / "ref.json").replace(reg / "alpha" / "docs.json")  # docs.json's content goes
    changes = tmp_path / "changes.jsonl"
    _, summary = _run(tmp_path, reg, incremental=incremental, changes=changes)
    # by path: docs.json is the same source with other content; ref.json is removed
    assert _counts(summary) == (0, 1, 12, 1)
    assert (out / "alpha" / "docs.json").read_bytes() == compress(_catalog("alpha_ref"))[0]
    assert not (out / "alpha" / "ref.json").exists()
    assert [(c["change"], c["output"], c["old_handle"], c["new_handle"]) for c in _changes(changes)] == [
        ("changed", "alpha/docs.json", _handle(_catalog("alpha_docs")), _handle(_catalog("alpha_ref"))),
        ("removed", "alpha/ref.json", _handle(_catalog("alpha_ref")), None)]
    _assert_as_fresh(tmp_path, reg, out)


def test_jsonl_line_removed_edited_and_inserted(tmp_path: Path, incremental: bool) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=incremental)
    src = reg / "lines.jsonl"
    lines = src.read_bytes().splitlines()
    removed = lines.pop(1)  # every later line moves up one: still the same documents
    src.write_bytes(b"\n".join(lines) + b"\n")
    changes = tmp_path / "changes.jsonl"
    _, summary = _run(tmp_path, reg, incremental=incremental, changes=changes)
    assert _counts(summary) == (0, 0, 13, 1)
    assert (out / "lines.jsonl").read_bytes() == b"".join(compress(line)[0] + b"\n" for line in lines)
    assert _changes(changes) == [{"change": "removed", "source": {"path": str(src), "line": 2},
                                  "output": "lines.jsonl", "old_handle": _handle(removed),
                                  "new_handle": None}]
    # a line edited in place is changed; one inserted, added
    edited = json.dumps(json.loads(_catalog("line3", "Writes things."))).encode()
    inserted = json.dumps(json.loads(_catalog("new", "Lists things."))).encode()
    old_line = lines[2]
    lines[2] = edited
    lines.insert(0, inserted)
    src.write_bytes(b"\n".join(lines) + b"\n")
    _, summary = _run(tmp_path, reg, incremental=incremental, changes=changes)
    # the edited line moved from line 3 to 4, and every other line by one: still the line
    # between the same two neighbours
    assert _counts(summary) == (1, 1, 12, 0)
    assert [(c["change"], c["source"]["line"], c["old_handle"], c["new_handle"])
            for c in _changes(changes)] == [("added", 1, None, _handle(inserted)),
                                            ("changed", 4, _handle(old_line), _handle(edited))]
    assert summary.changes.outputs_deleted == 0
    _assert_as_fresh(tmp_path, reg, out)


def test_jsonl_line_edited_in_place_is_changed(tmp_path: Path, incremental: bool) -> None:
    reg = _registry(tmp_path)
    _run(tmp_path, reg, incremental=incremental)
    src = reg / "lines.jsonl"
    lines = src.read_bytes().splitlines()
    old, lines[3] = lines[3], json.dumps(json.loads(_catalog("line3", "Writes things."))).encode()
    src.write_bytes(b"\n".join(lines) + b"\n")
    changes = tmp_path / "changes.jsonl"
    _, summary = _run(tmp_path, reg, incremental=incremental, changes=changes)
    assert _counts(summary) == (0, 1, 13, 0)
    assert _changes(changes) == [{"change": "changed", "source": {"path": str(src), "line": 4},
                                  "output": "lines.jsonl", "old_handle": _handle(old),
                                  "new_handle": _handle(lines[3])}]


def test_registry_array_item_removed(tmp_path: Path, incremental: bool) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=incremental)
    items = [_catalog(f"item{i}") for i in (0, 2, 3)]
    (reg / "array.json").write_bytes(b'{"servers": [' + b", ".join(items) + b"]}")
    changes = tmp_path / "changes.jsonl"
    _, summary = _run(tmp_path, reg, incremental=incremental, changes=changes)
    assert _counts(summary) == (0, 0, 13, 1)
    assert [(c["change"], c["source"]["item"], c["old_handle"]) for c in _changes(changes)] == [
        ("removed", 1, _handle(_catalog("item1")))]
    assert len(json.loads((out / "array.json").read_bytes())["servers"]) == 3
    _assert_as_fresh(tmp_path, reg, out)


def test_a_whole_stream_source_removed(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    (reg / "empty.jsonl").write_bytes(b"")  # a source with no document: an output, no row
    out, _ = _run(tmp_path, reg, incremental=True)
    assert (out / "empty.jsonl").exists()
    (reg / "lines.jsonl").unlink()
    (reg / "empty.jsonl").unlink()
    _, summary = _run(tmp_path, reg, incremental=True)
    assert _counts(summary) == (0, 0, 9, 5)
    assert not (out / "lines.jsonl").exists() and not (out / "empty.jsonl").exists()
    _assert_as_fresh(tmp_path, reg, out)


def test_a_stream_source_whose_rows_name_no_output_removed(tmp_path: Path, incremental: bool) -> None:
    """A registry array whose first item is not UTF-8, or that ends unclosed, is one error
    row with no output, its rest copied through into an output: gone with its source."""
    reg = _registry(tmp_path)
    (reg / "latin.json").write_bytes(b'{"servers": [{"name": "caf\xe9"}]}')
    (reg / "unclosed.json").write_bytes(b'{"servers": [')
    out, _ = _run(tmp_path, reg, incremental=incremental)
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_bytes().splitlines()]
    assert [r["output"] for r in rows if r["source"]["path"].endswith(("latin.json", "unclosed.json"))] \
        == [None, None]
    assert (out / "latin.json").exists() and (out / "unclosed.json").exists()
    _run(tmp_path, reg, incremental=incremental)  # written again: still known as ours
    (reg / "latin.json").unlink()
    (reg / "unclosed.json").unlink()
    _, summary = _run(tmp_path, reg, incremental=incremental)
    assert _counts(summary) == (0, 0, 14, 2) and summary.changes.outputs_deleted == 2
    assert not (out / "latin.json").exists() and not (out / "unclosed.json").exists()
    _assert_as_fresh(tmp_path, reg, out)


def test_keep_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg)
    (reg / "top.json").unlink()
    (reg / "alpha" / "ref.json").unlink()
    args = ["compress", str(reg), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
            "--workers", "1", "--quiet", "--keep-removed"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "2 removed" in text and "2 output(s) of removed documents kept (--keep-removed)" in text
    assert (out / "top.json").exists() and (out / "alpha" / "ref.json").exists()
    assert main([*args, "--json"]) == 0  # no longer named by the manifest: left alone from now on
    report = json.loads(capsys.readouterr().out)
    assert (report["removed"], report["outputs_kept"], report["outputs_deleted"]) == (0, 0, 0)
    assert (out / "top.json").exists()


def test_summary_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reg = _registry(tmp_path)
    args = ["compress", str(reg), "-o", str(tmp_path / "out"), "--store", f"lmdb://{tmp_path}/ccr",
            "--workers", "1", "--quiet", "--incremental"]
    assert main(args) == 0
    capsys.readouterr()
    (reg / "top.json").unlink()
    (reg / "beta" / "git.json").write_bytes(_catalog("other"))
    (reg / "alpha" / "new.json").write_bytes(_catalog("new"))
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {k: report[k] for k in ("added", "changed", "unchanged", "removed", "error",
                                   "outputs_deleted", "outputs_kept")} == {
        "added": 1, "changed": 1, "unchanged": 12, "removed": 1, "error": 0,
        "outputs_deleted": 1, "outputs_kept": 0}
    (reg / "alpha" / "new.json").unlink()
    assert main(args) == 0
    assert ("changes: 0 added, 0 changed, 13 unchanged, 1 removed, 0 in error; "
            "1 stale output(s) deleted") in capsys.readouterr().out


def test_files_no_manifest_named_and_paths_outside_out_are_never_touched(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.json").write_bytes(b"keep me")
    (outside / "time.json").write_bytes(b"keep me too")
    # files of someone else's in OUT, beside and among the outputs
    (out / "notes.txt").write_bytes(b"mine")
    (out / "alpha" / "extra.json").write_bytes(b"mine")
    (out / "lonely").mkdir()
    # a manifest edited to name paths outside OUT, and an output replaced by a symlink out
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_bytes().splitlines()]
    doomed = dict(rows[0], source={"path": "gone1.json"}, output={"path": "../outside/victim.json"})
    absolute = dict(rows[0], source={"path": "gone2.json"}, output={"path": str(outside / "victim.json")})
    linked = dict(rows[0], source={"path": "gone3.json"}, output={"path": "link/time.json"})
    os.symlink(outside, out / "link")  # a folder symlink in OUT: never walked through
    (out / "top.json").unlink()
    os.symlink(outside / "victim.json", out / "top.json")  # an output now a symlink out
    (out / "manifest.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n"
                                                  for r in [*rows, doomed, absolute, linked]))
    (reg / "top.json").unlink()
    _, summary = _run(tmp_path, reg)
    assert summary.changes.removed == 4 and summary.changes.outputs_deleted == 0
    assert (outside / "victim.json").read_bytes() == b"keep me"
    assert (outside / "time.json").read_bytes() == b"keep me too"
    assert (out / "top.json").is_symlink()  # not a regular file: not ours to delete
    assert (out / "notes.txt").read_bytes() == b"mine" == (out / "alpha" / "extra.json").read_bytes()
    assert (out / "lonely").is_dir()
    # a stale output in a folder holding someone else's file: the file and folder stay
    (reg / "alpha" / "ref.json").unlink()
    (reg / "alpha" / "docs.json").unlink()
    _run(tmp_path, reg)
    assert not (out / "alpha" / "ref.json").exists() and (out / "alpha" / "extra.json").exists()


def test_removed_originals_stay_unseen_and_prune_reclaims_them(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    reg = _registry(tmp_path)
    store_url = f"lmdb://{tmp_path}/ccr"
    _run(tmp_path, reg, incremental=True)
    with open_store(store_url) as store:  # every original last seen in 1970
        for key, value in list(store.items()):
            if len(key) == 64:
                h = ccr.decode_header(value)
                store.put(key, ccr.encode_record(h.original_length, h.content_type, 0, 0,
                                                 value[h.payload_offset:]))
        store.delete(list(store.keys(ccr.SEEN_PREFIX)))  # (the run's last refresh's)
    gone = _handle((reg / "top.json").read_bytes())
    (reg / "top.json").unlink()
    _, summary = _run(tmp_path, reg, incremental=True)
    assert summary.reused == summary.documents == 13
    with open_store(store_url) as store:
        assert ccr.info(store, gone).last_seen == 0  # still there, no longer seen
        assert ccr.info(store, _handle((reg / "beta" / "git.json").read_bytes())).last_seen > time.time() - 60
    assert main(["prune", "--not-seen-for", "1d", "--store", store_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == [gone]


# -- a SIGKILL between the deletions and the manifest's publication --------------------

_KILL_AT_MANIFEST = """
import os, signal, sys
real = os.replace
def replace(src, dst, *args, **kwargs):
    if os.fspath(dst) == sys.argv[1]:  # stale outputs deleted, the manifest not yet in place
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
from caveman_batch.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_sigkill_before_the_manifest_then_rerun_converges(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=True)
    old_manifest = (out / "manifest.jsonl").read_bytes()
    (reg / "top.json").unlink()  # a server leaves …
    (reg / "alpha" / "fresh.json").write_bytes(_catalog("fresh"))  # … and one comes
    args = ["compress", str(reg), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
            "--workers", "1", "--quiet", "--incremental"]
    changes = tmp_path / "changes.jsonl"
    proc = subprocess.run([sys.executable, "-c", _KILL_AT_MANIFEST, str(out / "manifest.jsonl"),
                           *args, "--changes", str(changes)], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not changes.exists()  # written only after the manifest
    assert not (out / "top.json").exists()  # deleted before the manifest …
    assert (out / "manifest.jsonl").read_bytes() == old_manifest  # … which still names it
    assert (out / "alpha" / "fresh.json").exists()  # published, in no manifest: in the journal
    assert b"alpha/fresh.json" in journal_path(out / "manifest.jsonl").read_bytes()
    (reg / "alpha" / "fresh.json").unlink()  # and gone from the registry before the rerun
    assert main([*args, "--changes", str(changes)]) == 0
    assert [(c["change"], c["output"]) for c in _changes(changes)] == [("removed", "top.json")]
    assert not (out / "alpha" / "fresh.json").exists()  # the killed run's output, stale now
    assert not journal_path(out / "manifest.jsonl").exists()
    _assert_as_fresh(tmp_path, reg, out)


def test_oversize_documents_copied_through_are_told_changed_by_their_bytes(tmp_path: Path,
                                                                             incremental: bool) -> None:
    """Copied through without an original in the store (no handle), an oversize document is
    still told changed by its output's sha256, even at the same size."""
    reg = _registry(tmp_path)
    big = _catalog("big", "Reads a great many things.")
    (reg / "big.json").write_bytes(big)
    (reg / "lines.jsonl").write_bytes(json.dumps(json.loads(big)).encode() + b"\n")
    cap = len(big) - 1
    _run(tmp_path, reg, incremental=incremental, max_bytes=cap)
    same_size = big.replace(b"great", b"grand")
    (reg / "big.json").write_bytes(same_size)
    changes = tmp_path / "changes.jsonl"
    _, summary = _run(tmp_path, reg, incremental=incremental, max_bytes=cap, changes=changes)
    assert _counts(summary) == (0, 1, 10, 0)
    assert [(c["change"], c["output"], c["old_handle"]) for c in _changes(changes)] == [
        ("changed", "big.json", None)]
    (reg / "lines.jsonl").write_bytes(json.dumps(json.loads(same_size)).encode() + b"\n")
    _, summary = _run(tmp_path, reg, incremental=incremental, max_bytes=cap, changes=changes)
    assert _counts(summary) == (0, 1, 10, 0)
    assert [(c["change"], c["source"]) for c in _changes(changes)] == [
        ("changed", {"path": str(reg / "lines.jsonl"), "line": 1})]


def test_a_stale_output_that_cannot_be_deleted_fails_the_run_before_its_manifest(tmp_path: Path) -> None:
    """Not silently left: an OutputError naming it, the old manifest still in place (so the
    next run tries again). Root ignores file modes: an immutable file (chattr +i) it is."""
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg)
    stuck = out / "top.json"
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(stuck)],
                                                        capture_output=True).returncode != 0:
        pytest.skip("no immutable files here (chattr)")
    try:
        before = (out / "manifest.jsonl").read_bytes()
        (reg / "top.json").unlink()
        with pytest.raises(OutputError, match=f"{stuck}: cannot delete stale output"):
            _run(tmp_path, reg)
        assert (out / "manifest.jsonl").read_bytes() == before
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    _, summary = _run(tmp_path, reg)
    assert summary.changes.outputs_deleted == 1 and not stuck.exists()


def test_changes_file_is_the_same_for_any_worker_count(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    for workers in (1, 2):
        out = f"out{workers}"
        run(Config([str(reg)], tmp_path / out, f"lmdb://{tmp_path}/ccr{workers}", workers=workers))
    (reg / "top.json").unlink()
    (reg / "beta" / "git.json").write_bytes(_catalog("other"))
    lines = (reg / "lines.jsonl").read_bytes().splitlines()
    (reg / "lines.jsonl").write_bytes(b"\n".join(lines[1:] + lines[:1]) + b"\n")  # reordered
    got = []
    for workers in (1, 2):
        changes = tmp_path / f"changes{workers}.jsonl"
        run(Config([str(reg)], tmp_path / f"out{workers}", f"lmdb://{tmp_path}/ccr{workers}",
                   workers=workers, incremental=True, changes=changes))
        got.append(changes.read_bytes())
    assert got[0] == got[1]
    assert [c["change"] for c in _changes(tmp_path / "changes1.jsonl")] == ["changed", "removed"]


# -- a SIGKILL just after an output's rename into OUT ----------------------------------

_KILL_AFTER_RENAME = """
import os, signal, sys
real = os.replace
out = sys.argv[1]
def replace(src, dst, *args, **kwargs):
    done = real(src, dst, *args, **kwargs)
    if os.fspath(dst).startswith(out + "/") and "/.caveman" not in os.fspath(dst):
        os.kill(os.getpid(), signal.SIGKILL)  # the first output in OUT, nothing after it
    return done
os.replace = replace
from caveman_batch.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_an_output_renamed_into_out_is_in_the_journal_and_its_original_stored(tmp_path: Path) -> None:
    """A batch's files are noted in the journal together, before the first is renamed, and
    renamed only once their originals are committed: killed right after the first rename,
    the run leaves that output named in the journal (the next run knows it) and its
    original in the store (recoverable)."""
    reg = tmp_path / "reg"
    for i in range(5):
        (reg / f"s{i}").mkdir(parents=True)
        (reg / f"s{i}" / "tools.json").write_bytes(_catalog(f"tool{i}"))
    out = tmp_path / "out"
    args = ["compress", str(reg), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
            "--workers", "1", "--quiet"]
    proc = subprocess.run([sys.executable, "-c", _KILL_AFTER_RENAME, str(out), *args],
                          capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    published = sorted(p.relative_to(out).as_posix() for p in out.glob("s*/tools.json"))
    assert published == ["s0/tools.json"]
    journal = journal_path(out / "manifest.jsonl").read_bytes().splitlines()
    assert set(published) <= {json.loads(line) for line in journal}
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        for i in range(5):
            original = (reg / f"s{i}" / "tools.json").read_bytes()
            assert ccr.recover(store, _handle(original)) == original
    assert main(args) == 0
    _assert_as_fresh(tmp_path, reg, out)



# -- a SIGKILL in the middle of an atomic write of a file beside the manifest -----------

_KILL_AT_REPLACE = """
import os, signal, sys
real = os.replace
def replace(src, dst, *args, **kwargs):
    if os.path.basename(os.fspath(dst)) == sys.argv[1]:  # its temp file written, not renamed
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
from caveman_batch.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("target", [".manifest.streams.json", STAT_CACHE, "changes.jsonl"])
def test_a_temp_file_left_by_a_run_killed_mid_write_is_cleared_by_the_next(
        tmp_path: Path, target: str) -> None:
    """The fingerprint, the stat cache and the changes file are written to a temp file
    beside them and renamed: a run killed in between leaves that temp file (hidden, in OUT
    for the first two), which the next run clears (it stayed, one more each such kill)."""
    reg = _registry(tmp_path)
    out, changes = tmp_path / "out", tmp_path / "report" / "changes.jsonl"
    changes.parent.mkdir()
    args = ["compress", str(reg), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
            "--workers", "1", "--quiet", "--incremental", "--changes", str(changes)]
    proc = subprocess.run([sys.executable, "-c", _KILL_AT_REPLACE, target, *args],
                          capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [*out.glob(".*.tmp"), *changes.parent.glob(".*.tmp")]
    assert len(left) == 1 and left[0].name.startswith(f".{target}.")  # the kill's
    assert main(args) == 0
    assert not [*out.glob(".*.tmp"), *changes.parent.glob(".*.tmp")]
    _assert_as_fresh(tmp_path, reg, out)


def test_a_manifest_naming_the_runs_own_files_never_has_them_deleted(tmp_path: Path) -> None:
    """A manifest edited to name the run's own files under OUT (itself, the fingerprint, the
    stat cache) as outputs of sources now gone: they are not stale outputs, never deleted
    (the manifest would be gone until the new one is published), nor OUT's lock file (the
    run that held it deleted it: another could then take a new one and run in OUT at once)."""
    reg = _registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=True)
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_bytes().splitlines()]
    own = ["manifest.jsonl", ".manifest.stat.json", ".manifest.streams.json", LOCK_FILE]
    assert all((out / name).is_file() for name in own)
    named = [dict(rows[0], source={"path": f"gone{i}.json"}, output={"path": name})
             for i, name in enumerate(own)]
    (out / "manifest.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n"
                                                  for r in [*rows, *named]))
    _, summary = _run(tmp_path, reg, incremental=True)
    assert summary.changes.removed == len(own) and summary.changes.outputs_deleted == 0


def test_a_torn_journal_line_does_not_swallow_the_next_runs_first_entry(tmp_path: Path) -> None:
    """A run killed in the middle of a journal write leaves a line without its newline; the
    next run's entries start on a line of their own, so the outputs they name stay known."""
    from caveman_batch.converge import Converger, _read_journal

    out = tmp_path / "out"
    out.mkdir()
    manifest = out / "manifest.jsonl"
    journal = journal_path(manifest)
    journal.write_bytes(b'"s0/tools.json"\n"s1/too')  # killed mid-write
    converger = Converger(out, out / ".caveman-tmp", manifest, out / "streams.json", [],
                          keep_removed=False, want_lines=False)
    try:
        converger.note_outputs(["s2/tools.json", "s3/tools.json"])
    finally:
        converger.close()
    assert _read_journal(journal)[0] == {"s0/tools.json", "s2/tools.json", "s3/tools.json"}
