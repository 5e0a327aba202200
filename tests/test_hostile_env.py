"""The CLI in a hostile environment, end to end through a real `python -m caveman_batch`: a
file size limit (RLIMIT_FSIZE, which makes write() fail with EFBIG as a full disk fails it
with ENOSPC), /dev/full, too few file descriptors (RLIMIT_NOFILE), folders it may not write.
Each run must end with a clear error naming the file and a non-zero exit (or a working run),
never a traceback, never a half-written file in place of a good one, and a rerun with room
must finish the job."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "caveman_batch"]

# a catalog whose description compresses (and whose original zstd shrinks to a few hundred
# bytes): many copies make a large manifest, changes file or output beside a tiny store
CATALOG = json.dumps({"tools": [{"name": "t", "description": "Do a thing. " * 30, "inputSchema": {
    "type": "object", "properties": {"a": {"type": "string", "title": "A"}}}}]})


def run(*args: str, preexec: Callable[[], None] | None = None,
        stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], env=dict(os.environ), stdout=stdout,
                          stderr=subprocess.PIPE, timeout=60, check=False, preexec_fn=preexec)


def file_size_limit(limit: int) -> Callable[[], None]:
    """For preexec_fn: no file written past `limit` bytes; write() then fails with EFBIG
    (SIGXFSZ ignored: it would kill the process instead)."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limited


def open_files_limit(limit: int) -> Callable[[], None]:
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return limited


def clean_failure(done: subprocess.CompletedProcess[bytes], code: int = 2) -> str:
    """The run failed with `code` and one line of error, no traceback; that line."""
    err = done.stderr.decode()
    assert done.returncode == code, (done.returncode, err)
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("caveman-batch: error: "), err
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compress(tmp_path: Path, src: Path, *args: str,
             preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess[bytes]:
    return run("compress", str(src), "-o", str(tmp_path / "out"), "--store",
               f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet", *args, preexec=preexec)


def registry(tmp_path: Path, lines: int) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "reg.jsonl").write_text((CATALOG + "\n") * lines)
    return src


def changes_of(path: Path) -> list[str]:
    return [json.loads(line)["change"] for line in path.read_text().splitlines()]


# -- a full disk or a file size limit --------------------------------------------------------


def test_a_changes_file_that_cannot_be_written_leaves_the_last_manifest_so_a_rerun_reports(
        tmp_path: Path) -> None:
    """599 lines removed make a 120 KB --changes file beside a manifest of one row: with no
    room for it, the manifest was published first and then the changes file failed (exit 2),
    so the rerun compared with that manifest and reported nothing: the removals were lost
    for good. Now the changes file is written whole before the manifest is published."""
    src = registry(tmp_path, 600)
    changes = tmp_path / "changes.jsonl"
    assert compress(tmp_path, src, "--changes", str(changes)).returncode == 0
    manifest = tmp_path / "out" / "manifest.jsonl"
    before = digest(manifest), digest(changes)
    registry(tmp_path, 1)
    failed = compress(tmp_path, src, "--changes", str(changes), preexec=file_size_limit(40_000))
    assert clean_failure(failed).endswith(f"{changes}: cannot write: File too large")
    assert (digest(manifest), digest(changes)) == before  # the last good ones, both
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    done = compress(tmp_path, src, "--changes", str(changes))
    assert done.returncode == 0, done.stderr
    assert changes_of(changes) == ["removed"] * 599


def test_a_manifest_that_cannot_be_written_leaves_the_last_one(tmp_path: Path) -> None:
    src = tmp_path / "src"
    long = "x" * 150  # 120 small outputs, a ~90 KB manifest (two long paths a row), one original
    for i in range(120):
        (src / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 10}" / f"c{i}{long}.json").write_text(CATALOG)
    assert compress(tmp_path, src).returncode == 0
    manifest = tmp_path / "out" / "manifest.jsonl"
    before = digest(manifest)
    (src / "d0" / f"c0{long}.json").write_text(CATALOG.replace("thing", "task"))
    failed = compress(tmp_path, src, preexec=file_size_limit(60_000))
    assert clean_failure(failed).endswith(f"{manifest}: cannot write: File too large")
    assert digest(manifest) == before
    done = compress(tmp_path, src, "--incremental")
    assert done.returncode == 0, done.stderr
    assert digest(manifest) != before


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_output_that_cannot_be_written_is_named(tmp_path: Path, workers: str) -> None:
    """The write of a JSONL output (or of a catalog file's, by the parent when a worker
    could not write it) names no file: the error named OUT, not the output."""
    src = tmp_path / "src"
    src.mkdir()
    tools = [{"name": f"tool_{i}", "description": f"Fetch widget {i} from the warehouse. "
              + "Prose about nothing. " * 3, "inputSchema": {"type": "object"}} for i in range(600)]
    big = json.dumps({"tools": tools})
    limit = len(big) * 13 // 10  # over one catalog's output, under two's
    out = tmp_path / "out"
    args = ["compress", str(src), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
            "--workers", workers, "--quiet"]
    (src / "reg.jsonl").write_text(big + "\n" + big.replace("widget", "gadget") + "\n")
    (src / "one.json").write_text(big.replace("widget", "gizmo"))
    failed = run(*args, preexec=file_size_limit(limit))
    assert clean_failure(failed).endswith(f"{out}/reg.jsonl: cannot write output: File too large")
    assert not (out / "reg.jsonl").exists() and not (out / "manifest.jsonl").exists()
    (src / "reg.jsonl").write_text(big + "\n")
    (src / "one.json").write_text(json.dumps({"tools": tools * 2}))
    failed = run(*args, preexec=file_size_limit(limit))
    assert clean_failure(failed).endswith(f"{out}/one.json: cannot write output: File too large")
    done = run(*args)
    assert done.returncode == 0, done.stderr
    assert (out / "reg.jsonl").is_file() and (out / "manifest.jsonl").is_file()


@pytest.mark.parametrize("command", ["recover", "shrink"])
def test_dash_o_that_cannot_take_the_bytes_keeps_the_file_it_had(command: str, tmp_path: Path) -> None:
    src = registry(tmp_path, 1)
    catalog = tmp_path / "big.json"
    catalog.write_text(json.dumps({"tools": [json.loads(CATALOG)["tools"][0] | {"name": f"t{i}"}
                                             for i in range(200)]}))
    url = f"lmdb://{tmp_path}/ccr"
    shrunk = run("shrink", str(catalog), "--store", url)
    handle = json.loads(shrunk.stderr.decode())["handle"]
    target = tmp_path / "target.bin"
    target.write_bytes(b"the good file")
    args = ["recover", handle] if command == "recover" else ["shrink", str(catalog)]
    failed = run(*args, "-o", str(target), "--store", url, preexec=file_size_limit(20_000))
    assert failed.returncode == 2, failed.stderr
    assert f"{target}: cannot write: File too large" in failed.stderr.decode()
    assert "Traceback" not in failed.stderr.decode()
    assert target.read_bytes() == b"the good file"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert src.is_dir()


def test_an_index_that_cannot_be_written_fails_the_run_and_a_rerun_builds_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    tools = [{"name": f"tool_{i}_alpha", "description": f"Fetch widget {i} from the warehouse.",
              "inputSchema": {"type": "object", "properties": {f"p{i}": {"type": "string"}}}}
             for i in range(400)]
    (src / "big.json").write_text(json.dumps({"tools": tools}))
    index = tmp_path / "index.db"
    failed = compress(tmp_path, src, "--index", str(index), preexec=file_size_limit(200_000))
    line = clean_failure(failed)  # (SQLite says only "disk I/O error" of EFBIG)
    assert f"search index {index}" in line
    assert line.endswith("(a full disk or a file size limit is reported so too)"), line
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert compress(tmp_path, src, "--index", str(index)).returncode == 0
    found = run("search", "widget 7", "--index", str(index), "--json", "--no-embed")
    assert found.returncode == 0, found.stderr
    assert any(hit["name"] == "tool_7_alpha" for hit in json.loads(found.stdout))


def test_an_sqlite_store_that_cannot_be_written_says_why_and_a_rerun_commits(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    tools = [{"name": f"tool_{i}", "description": f"Fetch widget {i} from the warehouse.",
              "inputSchema": {"type": "object"}} for i in range(400)]
    (src / "big.json").write_text(json.dumps({"tools": tools}))
    url = f"sqlite://{tmp_path}/ccr.db"
    args = ["compress", str(src), "-o", str(tmp_path / "out"), "--store", url, "--quiet"]
    failed = run(*args, preexec=file_size_limit(12_000))
    line = clean_failure(failed)  # (SQLite says only "disk I/O error" of EFBIG)
    assert line.startswith(f"caveman-batch: error: {url}: ") and line.endswith(
        "failed: disk I/O error (a full disk or a file size limit is reported so too)"), line
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert run(*args).returncode == 0
    assert run("verify", "--store", url).returncode == 0


# -- /dev/full, /dev/stdout, FIFOs where a path is asked for ---------------------------------


def test_a_changes_file_on_a_device_is_written_into_not_replaced(tmp_path: Path) -> None:
    """`--changes` naming a device (/dev/full, /dev/stdout) was replaced by a regular file by
    rename: as root, /dev/stdout itself, for the whole machine. The links here stand for
    them (the old code replaced the link, not the device): written into, as -o is."""
    src = registry(tmp_path, 3)
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    failed = compress(tmp_path, src, "--changes", str(full))
    assert clean_failure(failed).endswith(f"{full}: cannot write: No space left on device")
    assert full.is_symlink() and full.is_char_device()
    registry(tmp_path, 2)
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    done = compress(tmp_path, src, "--changes", str(stdout))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(b"{")]  # (and the summary)
    assert [json.loads(line)["change"] for line in lines] == ["removed"]
    assert stdout.is_symlink()


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink"])
def test_a_manifest_that_is_not_a_regular_file_is_refused(kind: str, tmp_path: Path) -> None:
    """The manifest is replaced by rename and its hidden files made beside it: one that is a
    device or a link (/dev/null, /dev/stdout) was replaced, as root for the whole machine."""
    src = registry(tmp_path, 1)
    manifest = tmp_path / "manifest.jsonl"
    if kind == "fifo":
        os.mkfifo(manifest)
    else:
        manifest.symlink_to("/dev/full" if kind == "device" else tmp_path / "real.jsonl")
    failed = compress(tmp_path, src, "--manifest", str(manifest))
    assert "is not a regular file" in clean_failure(failed, 1)
    assert not (tmp_path / "out").exists()
    assert manifest.is_fifo() if kind == "fifo" else manifest.is_symlink()


# -- too few file descriptors --------------------------------------------------------------


def _jsonl_tree(tmp_path: Path, files: int) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for k in range(files):
        line = CATALOG.replace('"t"', f'"t{k}"')
        (src / f"r{k:03}.jsonl").write_text(line + "\n" + line + "\n")
    return src


def test_a_rerun_reusing_many_jsonl_outputs_line_by_line_works_under_ulimit_n_64(
        tmp_path: Path) -> None:
    """Reused document by document (its fingerprint lost), each JSONL output was held open
    to the end of the run: 150 of them, and under `ulimit -n 64` the run died with a
    traceback."""
    src = _jsonl_tree(tmp_path, 150)
    out = tmp_path / "out"
    assert compress(tmp_path, src, "--workers", "2").returncode == 0
    (out / ".manifest.streams.json").unlink()
    done = compress(tmp_path, src, "--workers", "2", "--incremental", preexec=open_files_limit(64))
    assert done.returncode == 0, done.stderr
    summary = compress(tmp_path, src, "--incremental", "--json")
    assert json.loads(summary.stdout)["unchanged"] == 300


def test_too_few_file_descriptors_for_the_pool_is_a_clear_error(tmp_path: Path) -> None:
    src = _jsonl_tree(tmp_path, 20)
    failed = compress(tmp_path, src, "--workers", "2", preexec=open_files_limit(16))
    line = clean_failure(failed)
    assert "too many open files" in line and "may open 16 (ulimit -n)" in line
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert compress(tmp_path, src, "--workers", "2").returncode == 0


def test_sources_that_cannot_be_opened_for_want_of_descriptors_fail_the_run(tmp_path: Path) -> None:
    """EMFILE is this process's limit, not the source's: each source became an error row
    ("cannot read: Too many open files") and the run exited 0, its manifest all errors."""
    src = _jsonl_tree(tmp_path, 20)
    failed = compress(tmp_path, src, preexec=open_files_limit(8))
    line = clean_failure(failed)
    assert "too many open files" in line and str(src / "r000.jsonl") in line
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_pool_cut_short_by_the_limit_beside_the_index_writer_fails_and_does_not_hang(
        tmp_path: Path) -> None:
    """Just short of enough descriptors, the pool forked its first worker and failed on its
    second; its shutdown left that worker running, holding the index writer's stdin open,
    so the writer never ended and the run hung for ever. Where that limit lies depends on
    the machine: found by bisection, every attempt on the way a clean failure or a run."""
    src = _jsonl_tree(tmp_path, 3)
    out, index = tmp_path / "out", tmp_path / "index.db"

    def works(limit: int) -> bool:
        shutil.rmtree(out, ignore_errors=True)
        for stale in tmp_path.glob("index.db*"):
            stale.unlink()
        done = subprocess.run(
            [*CLI, "compress", str(src), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
             "--workers", "2", "--quiet", "--index", str(index)], env=dict(os.environ),
            capture_output=True, timeout=20, preexec_fn=open_files_limit(limit))
        if done.returncode:
            assert "too many open files" in clean_failure(done)
        return done.returncode == 0

    fails, runs = 16, 48  # (a bound not probed unless need be: each run costs ~0.8 s)
    while runs - fails > 1:
        middle = (fails + runs) // 2
        if works(middle):
            runs = middle
        else:
            fails = middle
    assert runs < 48 or works(48)  # (the last attempt that failed was the limit just short)


# -- folders it may not write -----------------------------------------------------------------

_PR_CAPBSET_DROP = 24
_DAC_CAPS = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def _bound_by_modes() -> None:
    """For preexec_fn: as root, drop the capabilities by which root ignores file modes."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _DAC_CAPS:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _modes_bind() -> bool:
    try:
        subprocess.run(["true"], preexec_fn=_bound_by_modes, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


MODES_BIND = pytest.mark.skipif(not _modes_bind(), reason="cannot drop CAP_DAC_OVERRIDE here")


@MODES_BIND
@pytest.mark.parametrize("where", ["out", "out-parent", "out-subfolder", "out-written-before",
                                   "index-folder"])
def test_a_folder_it_may_not_write_is_a_clear_error_and_nothing_is_published(
        where: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "one.json").write_text(CATALOG)
    (src / "two.json").write_text(CATALOG.replace("thing", "task"))
    out = tmp_path / "box" / "out" if where == "out-parent" else tmp_path / "out"
    locked = {"out": out, "out-parent": out.parent, "out-subfolder": out / "a",
              "out-written-before": out, "index-folder": tmp_path / "ix"}[where]
    if where in ("out-subfolder", "out-written-before"):  # (its lock file there already)
        assert compress(tmp_path, src).returncode == 0
        (src / "a" / "one.json").write_text(CATALOG.replace("thing", "chore"))
    locked.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.jsonl"
    before = manifest.read_bytes() if manifest.exists() else None
    extra = ["--index", str(locked / "index.db")] if where == "index-folder" else []
    locked.chmod(0o555)
    try:
        failed = run("compress", str(src), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
                     "--quiet", *extra, preexec=_bound_by_modes)
    finally:
        locked.chmod(0o755)
    line = clean_failure(failed)
    assert "Permission denied" in line and str(locked) in line, line
    assert "cannot create output folder" not in line or not out.is_dir(), line  # (it was there)
    assert (manifest.read_bytes() if manifest.exists() else None) == before
    done = run("compress", str(src), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
               "--quiet", *extra)
    assert done.returncode == 0, done.stderr


def test_a_changes_file_in_a_folder_not_made_yet_gets_its_folder(tmp_path: Path) -> None:
    src = registry(tmp_path, 2)
    changes = tmp_path / "hooks" / "changes.jsonl"
    done = compress(tmp_path, src, "--changes", str(changes))
    assert done.returncode == 0, done.stderr
    assert changes_of(changes) == ["added", "added"]


def test_an_index_in_a_folder_not_made_yet_gets_its_folder(tmp_path: Path) -> None:
    """As OUT's and the store's: it was exit 2, "No such file or directory"."""
    src = registry(tmp_path, 2)
    index = tmp_path / "search" / "index.db"
    done = compress(tmp_path, src, "--index", str(index))
    assert done.returncode == 0, done.stderr
    assert index.is_file()


@MODES_BIND
@pytest.mark.parametrize("kind", ["store", "index"])
def test_an_sqlite_file_in_a_folder_it_may_not_write_names_the_folder(kind: str, tmp_path: Path) -> None:
    """SQLite makes a WAL database's -wal and -shm beside it: in a folder this process may
    not write, the message was "attempt to write a readonly database", blaming the file,
    whose mode was fine."""
    src = registry(tmp_path, 1)
    folder = tmp_path / "db"
    url = f"sqlite://{folder}/ccr.db" if kind == "store" else f"lmdb://{tmp_path}/ccr"
    index = folder / "index.db"
    args = ["compress", str(src), "-o", str(tmp_path / "out"), "--store", url, "--quiet"]
    assert run(*args, "--index", str(index)).returncode == 0
    folder.chmod(0o555)
    try:
        if kind == "store":
            failed = run(*args, preexec=_bound_by_modes)
        else:
            failed = run("search", "thing", "--index", str(index), "--no-embed",
                         preexec=_bound_by_modes)
    finally:
        folder.chmod(0o755)
    assert clean_failure(failed).endswith(
        f"(its folder {folder} is not writable here, and SQLite makes the file's -wal and "
        "-shm beside it)")


# -- a locale whose file names are not UTF-8 --------------------------------------------------


def test_a_locale_that_is_not_utf8_names_files_as_a_utf8_one_does(tmp_path: Path) -> None:
    """Under LC_ALL=C with Python's UTF-8 mode off (or any Latin-1 locale), Python decodes file
    names by the locale: every UTF-8 name that is not ASCII (`é.json`) was an error row, "file
    name is not UTF-8: skipped", with no output, and a store in a folder so named a traceback
    (in a Latin-1 locale: mojibake in the manifest and the index's ids instead, and a name
    truly not UTF-8 compressed). The CLI now runs itself in UTF-8 mode: the OUT, manifest and
    index a UTF-8 locale gives (those below)."""
    src = tmp_path / "src"
    for name in ("é.json", "日本/ü.json", "a.json"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(CATALOG)
    with open(os.fsencode(src) + b"/\xff.json", "w") as fh:  # not UTF-8: an error row
        fh.write(CATALOG)
    (tmp_path / "ü").mkdir()  # OUT, store and index under a name not ASCII
    done = subprocess.run(
        [*CLI, "compress", "src", "-o", "ü/out", "--store", "lmdb://ü/ccr", "--index",
         "ü/index.db", "--no-embed", "--workers", "1", "--quiet"],
        env={**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0"}, cwd=tmp_path,
        capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = tmp_path / "ü" / "out"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("[!.]*.json")) == [
        "a.json", "é.json", "日本/ü.json"]
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text("utf-8").splitlines()]
    assert [(r["source"]["path"], r["status"]) for r in rows] == [
        ("src/a.json", "ok"), ("src/é.json", "ok"), ("src/\\xff.json", "error"),
        ("src/日本/ü.json", "ok")]
    with sqlite3.connect(tmp_path / "ü" / "index.db") as db:
        assert sorted(db.execute("SELECT server FROM servers")) == [("a",), ("é",), ("日本/ü",)]
