"""Careless and hostile input (issue 15): what `compress`, `shrink` and `recover` refuse, and
what they never touch. Real files, FIFOs, devices, symlinks and processes throughout."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench_data.generate import generate_registry
from caveman_batch import ccr, single
from caveman_batch.cli import main
from caveman_batch.errors import IntegrityError, UsageError
from caveman_batch.pipeline import LOCK_FILE, TMP_DIR, Config, run
from caveman_batch.store import DELETE, open_store

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"
CATALOG = json.dumps({"tools": [{"name": "ping", "description": "Checks the server.",
                                 "inputSchema": {"type": "object"}}]}).encode()
DEEP = b"[" * 990 + b"]" * 990  # ~2 KB, deeper than Python's recursion limit allows json to parse


def _rows(manifest: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in manifest.read_bytes().splitlines()]


def _entry_point() -> list[str]:
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


def _cli(*args: str, stdin: bytes | None = None, timeout: float = 120,
         **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*_entry_point(), *args], input=stdin, capture_output=True,
                          env=dict(os.environ), timeout=timeout, **kw)


def _compress(tmp: Path, *sources: str | Path, out: Path | None = None, **kw: Any) -> tuple[Path, Any]:
    out = tmp / "out" if out is None else out
    config = Config([str(s) for s in sources], out, kw.pop("store", f"lmdb://{tmp}/ccr"),
                    workers=1, **kw)
    return out, run(config)


def _recovers_all(rows: list[dict[str, Any]], store_url: str) -> int:
    """Every handle named recovers to its row's sha256; how many were checked."""
    checked = 0
    with open_store(store_url) as store:
        for row in rows:
            if row["handle"]:
                assert hashlib.sha256(ccr.recover(store, row["handle"])).hexdigest() == row["sha256"]
                checked += 1
    return checked


def _age_every_record(store_url: str) -> None:
    """Set every original's first-stored and last-seen back to 1970 and drop its ~seen entry,
    in one transaction."""
    def aged(key: bytes, old: bytes | None, _new: bytes) -> Any:
        if old is None:
            return None
        if key.startswith(ccr.SEEN_PREFIX):
            return DELETE
        h = ccr.decode_header(old)
        return ccr.encode_record(h.original_length, h.content_type, 0, 0, old[h.payload_offset:])

    with open_store(store_url) as store:
        store.commit([(key, b"") for key in store.keys()], merge=aged)


# -- 1. two runs into one OUT --------------------------------------------------------------


def _holding_run(tmp: Path, out: Path, *more: str) -> subprocess.Popen[bytes]:
    """A real `compress - -o OUT` that holds OUT while it waits for the rest of its stdin."""
    proc = subprocess.Popen([*_entry_point(), "compress", "-", "-o", str(out), "--store",
                             f"lmdb://{tmp}/ccr", "--workers", "1", "--quiet", "--json", *more],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ))
    assert proc.stdin is not None
    proc.stdin.write(CATALOG + b"\n")
    proc.stdin.flush()
    deadline = time.time() + 60
    while time.time() < deadline and not (out / LOCK_FILE).exists():
        time.sleep(0.02)
    time.sleep(0.3)  # past start-up: the lock is held, the temp folder made
    assert proc.poll() is None
    return proc


def test_second_run_into_the_same_out_exits_1_naming_the_lock_and_its_holder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _holding_run(tmp_path, out)
    try:
        second = _cli("compress", str(SAMPLES / "registry.jsonl"), "-o", str(out), "--store",
                      f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet", timeout=60)
        assert second.returncode == 1, second.stderr
        err = second.stderr.decode()
        assert str(out / LOCK_FILE) in err and f"pid {first.pid}" in err
        assert (out / TMP_DIR).is_dir()  # the first run's work left alone
    finally:
        stdout, stderr = first.communicate(b'{"tools":[]}\n', timeout=60)
    assert first.returncode == 0, stderr
    rows = _rows(out / "manifest.jsonl")
    assert [r["source"] for r in rows] == [{"path": "<stdin>", "line": 1}, {"path": "<stdin>", "line": 2}]
    assert json.loads(stdout)["documents"] == 2
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, "manifest.jsonl", "stdin.jsonl"]



def test_second_run_into_the_same_index_exits_1_naming_its_lock_and_holder(tmp_path: Path) -> None:
    """Two runs into one search index from two OUTs: the second is refused as a second run
    into one OUT is (each removed the catalogs of the other's inputs, both exiting 0)."""
    index = tmp_path / "tools.db"
    first = _holding_run(tmp_path, tmp_path / "out", "--index", str(index), "--no-embed")
    try:
        second = _cli("compress", str(SAMPLES / "registry.jsonl"), "-o", str(tmp_path / "o2"),
                      "--store", f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet",
                      "--index", str(index), "--no-embed", timeout=60)
        assert second.returncode == 1, second.stderr
        err = second.stderr.decode()
        assert f"{index}.lock" in err and f"pid {first.pid}" in err
        assert not (tmp_path / "o2" / "manifest.jsonl").exists()
    finally:
        _, stderr = first.communicate(b'{"tools":[]}\n', timeout=60)
    assert first.returncode == 0, stderr
    con = sqlite3.connect(index)
    try:
        assert con.execute("SELECT DISTINCT server FROM tools").fetchall() == [("stdin/1",)]
    finally:
        con.close()
    done = _cli("compress", str(SAMPLES / "registry.jsonl"), "-o", str(tmp_path / "o2"), "--store",
                f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet", "--index", str(index), "--no-embed")
    assert done.returncode == 0, done.stderr  # the lock of a run that ended blocks nothing

def test_lock_of_a_killed_run_does_not_block(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _holding_run(tmp_path, out)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert (out / LOCK_FILE).read_text().strip() == str(first.pid)  # left behind, not held
    done = _cli("compress", str(SAMPLES / "registry.jsonl"), "-o", str(out), "--store",
                f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet")
    assert done.returncode == 0, done.stderr
    assert len(_rows(out / "manifest.jsonl")) == 10
    # OUT as a source (its manifest.jsonl would be o2's: that manifest goes elsewhere)
    _, summary = _compress(tmp_path, out, out=tmp_path / "o2", incremental=True,
                           manifest=tmp_path / "m2.jsonl")
    rows = _rows(tmp_path / "m2.jsonl")
    assert rows and LOCK_FILE not in json.dumps(rows)


# -- 9. OUT and SRC ------------------------------------------------------------------------


@pytest.mark.parametrize("name,options", [
    ("manifest.jsonl", []), (".manifest.streams.json", []), (".manifest.stat.json", []),
    (".manifest.pending.jsonl", []), (".caveman-batch.lock", []), ("m.jsonl", ["manifest"]),
    ("sub", ["manifest"]), ("changes.json", ["changes"]), ("tools.json", ["index"]),
    ("tools.json-wal", ["index"])])
def test_a_source_written_over_what_the_run_keeps_in_out_is_refused(
        tmp_path: Path, name: str, options: list[str]) -> None:
    """A source whose output would be the manifest (or the fingerprint, the stat cache, the
    journal, the lock, --changes, the index, or a folder one of them lies in): refused
    before anything is written (the manifest overwrote it, exit 0)."""
    src = tmp_path / "reg"
    src.mkdir()
    (src / name).write_bytes(CATALOG)
    out = tmp_path / "out"
    extra = {"manifest": ["--manifest", str(out / ("sub/m.jsonl" if name == "sub" else name))],
             "changes": ["--changes", str(out / name)],
             "index": ["--index", str(out / "tools.json")]}
    argv = [arg for o in options for arg in extra[o]]
    for sources in ([src / name], [src / name, SAMPLES / "registry.jsonl"]):
        done = _cli("compress", *map(str, sources), "-o", str(out), *argv, "--store",
                    f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet")
        assert done.returncode == 1, done.stderr
        assert f"{src / name} would be written to".encode() in done.stderr, done.stderr
        assert not [p for p in out.iterdir() if p.name != LOCK_FILE]


def test_two_sources_one_a_file_where_the_other_needs_a_folder_are_refused(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "x.json").write_bytes(CATALOG)
    (tmp_path / "two" / "x.json").mkdir(parents=True)
    (tmp_path / "two" / "x.json" / "inner.json").write_bytes(CATALOG)
    with pytest.raises(UsageError, match="needs a folder"):
        _compress(tmp_path, tmp_path / "one" / "x.json", tmp_path / "two" / "x.json")
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


@pytest.mark.parametrize("where", ["same", "same-by-symlink", "src-inside-out", "file-inside-out"])
def test_out_that_would_overwrite_the_sources_is_refused(tmp_path: Path, where: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    reg = tmp_path / "reg"
    shutil.copytree(SAMPLES / "registry", reg / "inner")
    before = {p: p.read_bytes() for p in reg.rglob("*") if p.is_file()}
    if where == "same":
        src, out = reg, reg
    elif where == "same-by-symlink":
        (tmp_path / "link").symlink_to(reg)
        src, out = reg, tmp_path / "link"
    elif where == "src-inside-out":
        src, out = reg / "inner", reg
    else:
        src, out = reg / "inner" / "fjord" / next(p.name for p in (reg / "inner" / "fjord").iterdir()), reg / "inner" / "fjord"
    code = main(["compress", str(src), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
                 "--workers", "1", "--quiet"])
    assert code == 1
    assert "would overwrite" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in reg.rglob("*") if p.is_file()} == before
    assert not (reg / TMP_DIR).exists() and not (reg / LOCK_FILE).exists()


def test_out_inside_src_is_skipped_by_the_walk(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    shutil.copytree(SAMPLES / "registry", reg)
    out, first = _compress(tmp_path, reg, out=reg / "zz-out", incremental=True)
    _, again = _compress(tmp_path, reg, out=reg / "zz-out", incremental=True)
    assert again.documents == first.documents and again.reused == first.documents
    assert not any("zz-out" in r["source"]["path"] for r in _rows(out / "manifest.jsonl"))


# -- 5. what is not a regular file, and symlinks -------------------------------------------


def test_fifo_in_src_is_an_error_row_not_a_hang(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "good.json").write_bytes(CATALOG)
    os.mkfifo(reg / "x.json")
    os.mkfifo(tmp_path / "named.jsonl")
    proc = _cli("compress", str(reg), str(tmp_path / "named.jsonl"), "-o", str(tmp_path / "out"),
                "--store", f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet", timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = {r["source"]["path"]: r for r in _rows(tmp_path / "out" / "manifest.jsonl")}
    for name in (f"{reg}/x.json", str(tmp_path / "named.jsonl")):
        assert rows[name]["status"] == "error" and "not a regular file (a FIFO)" in rows[name]["reason"]
        assert rows[name]["output"] is None
    assert rows[f"{reg}/good.json"]["status"] == "ok"


def _no_file_over_64_mib() -> None:
    """If /dev/zero were read after all, the run dies of SIGXFSZ instead of filling the disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))


def test_device_in_src_is_an_error_row_not_a_full_disk(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "good.json").write_bytes(CATALOG)
    (reg / "z.jsonl").symlink_to("/dev/zero")
    for follow in ([], ["--follow-symlinks"]):
        out = tmp_path / f"out{len(follow)}"
        proc = _cli("compress", str(reg), "/dev/zero", "-o", str(out), "--store",
                    f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet", *follow, timeout=60,
                    preexec_fn=_no_file_over_64_mib)
        assert proc.returncode == 0, proc.stderr
        rows = {r["source"]["path"]: r for r in _rows(out / "manifest.jsonl")}
        assert "not a regular file (a character device)" in rows["/dev/zero"]["reason"]
        linked = rows[f"{reg}/z.jsonl"]
        assert linked["status"] == "error" and linked["output"] is None
        assert ("not a regular file" if follow else "symlink, not followed (--follow-symlinks)") in linked["reason"]
        assert not (out / "z.jsonl").exists()


def test_symlinks_in_src_are_not_followed_without_the_flag(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    (reg / "sub").mkdir(parents=True)
    secret = tmp_path / "secret.json"
    secret.write_bytes(CATALOG.replace(b"ping", b"secret"))
    (reg / "sub" / "inside.json").write_bytes(CATALOG)
    (reg / "outside.json").symlink_to(secret)
    (reg / "inside.json").symlink_to(reg / "sub" / "inside.json")
    (reg / "linked-dir").symlink_to(reg / "sub")
    (reg / "loop").symlink_to(reg)
    (reg / "self.json").symlink_to(reg / "self.json")  # a link to itself: ELOOP if followed
    out, summary = _compress(tmp_path, reg)
    rows = {r["source"]["path"]: r for r in _rows(out / "manifest.jsonl")}
    for name in ("outside.json", "inside.json", "linked-dir", "loop", "self.json"):
        row = rows[f"{reg}/{name}"]
        assert row["status"] == "error" and row["output"] is None and row["handle"] is None
        assert row["reason"] == "symlink, not followed (--follow-symlinks)"
    assert rows[f"{reg}/sub/inside.json"]["status"] == "ok"
    assert not (out / "outside.json").exists()
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.missing(store, [hashlib.sha256(secret.read_bytes()).hexdigest()])
    # asked for: followed (each folder once: the loop back to the top is not walked again)
    out, summary = _compress(tmp_path, reg, out=tmp_path / "followed", follow_symlinks=True)
    rows = {r["source"]["path"]: r for r in _rows(out / "manifest.jsonl")}
    assert rows[f"{reg}/outside.json"]["status"] == "ok"
    assert (out / "outside.json").read_bytes() != b"" and (out / "linked-dir" / "inside.json").exists()
    assert not any("/loop/" in path for path in rows)


@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("name", ["a.json", "reg.jsonl"])
def test_an_incremental_rerun_refuses_a_symlink_swapped_in_as_a_full_run_does(
        tmp_path: Path, name: str, checksum: bool) -> None:
    """A source file replaced by a symlink to the very same bytes, elsewhere: an incremental
    rerun (stat cache or hashes) gives the full run's error row, never reuses it."""
    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / name).write_bytes(CATALOG + b"\n")
    (reg / "b.json").write_bytes(CATALOG)
    out, _ = _compress(tmp_path, reg, incremental=True)
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    os.replace(reg / name, outside)
    (reg / name).symlink_to(outside)
    _, again = _compress(tmp_path, reg, incremental=True, checksum=checksum)
    _, full = _compress(tmp_path, reg, out=tmp_path / "full")
    assert _rows(out / "manifest.jsonl") == _rows(tmp_path / "full" / "manifest.jsonl")
    row, = [r for r in _rows(out / "manifest.jsonl") if r["source"]["path"] == f"{reg}/{name}"]
    assert (row["status"], row["reason"]) == ("error", "symlink, not followed (--follow-symlinks)")
    assert again.error == full.error == 1 and not (out / name).exists()


def _others_can_read_the_venv() -> bool:
    """Whether a process dropped to `nobody` can still import from this interpreter's
    packages (typer imports some of its modules lazily, after the drop)."""
    here = Path(sys.prefix).resolve()
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [here, *here.parents])


AS_NOBODY = pytest.mark.skipif(
    os.geteuid() != 0 or not _others_can_read_the_venv(),
    reason="drops to an unprivileged user, who must be able to read this venv")


@AS_NOBODY
def test_source_that_cannot_be_looked_at_refuses_the_run(tmp_path: Path) -> None:
    """A SRC under a folder the user may not enter: refused naming it (exit 1), not a
    traceback; nor an error row, since whether it is a file or a folder is not known, so
    neither are the outputs of the last run to keep."""
    os.chmod(tmp_path, 0o700)
    shared = Path(tempfile.mkdtemp(prefix="caveman-src-"))
    os.chmod(shared, 0o777)
    script = textwrap.dedent(f"""
        import os, sys
        from caveman_batch import catalog, pipeline, tokens
        from backends import lmdb_store
        from caveman_batch.cli import main
        tokens.warm()
        catalog.compress({CATALOG!r})
        os.setgid(65534); os.setuid(65534)
        sys.exit(main(["compress", {str(tmp_path / "c.json")!r}, "-o", {str(shared / "out")!r},
                       "--store", {f"lmdb://{shared}/ccr"!r}, "--workers", "1", "--quiet"]))
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                              env={**os.environ, "CAVEMAN_HOME": "/nonexistent"})
        assert proc.returncode == 1, proc.stderr
        assert b"cannot be looked at: Permission denied" in proc.stderr
        assert str(tmp_path / "c.json").encode() in proc.stderr
        assert not (shared / "out" / "manifest.jsonl").exists()
    finally:
        shutil.rmtree(shared)


def test_a_symlink_named_on_the_command_line_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_bytes(CATALOG)
    (tmp_path / "named.json").symlink_to(tmp_path / "real.json")
    out, summary = _compress(tmp_path, tmp_path / "named.json")
    assert summary.ok == 1 and (out / "named.json").exists()


# -- 3. nesting too deep for a recursive parser ----------------------------------------------


@pytest.mark.parametrize("name,raw", [
    ("deep.json", DEEP),
    ("deep-item.json", b'[{"tools":[]},' + DEEP + b',{"tools":[]}]'),
    ("deep-wrapped.json", b'{"servers":[' + DEEP + b',{"tools":[]}]}'),
    ("deep-first.json", b'[' + DEEP + b',{"tools":[]}]'),
    ("very-deep.json", b"[" * 100_000 + b"]" * 100_000),
    ("deep.jsonl", b'{"tools":[]}\n' + DEEP + b"\n"),
])
def test_deep_nesting_is_a_passthrough_not_a_crash(tmp_path: Path, name: str, raw: bytes) -> None:
    src = tmp_path / name
    src.write_bytes(raw)
    proc = _cli("compress", str(src), "-o", str(tmp_path / "out"), "--store",
                f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    rows = _rows(tmp_path / "out" / "manifest.jsonl")
    deep = [r for r in rows if r["bytes_before"] >= len(DEEP)]
    assert deep and all(r["status"] != "ok" and r["reason"] for r in deep), rows
    assert (tmp_path / "out" / name).read_bytes() == raw  # copied through byte for byte
    assert _recovers_all(rows, f"lmdb://{tmp_path}/ccr") == len(rows)


@pytest.mark.parametrize("command", ["shrink", "lint", "profile"])
def test_deep_nesting_one_catalog_at_a_time(tmp_path: Path, command: str) -> None:
    src = tmp_path / "deep.json"
    src.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    proc = _cli(command, str(src), "--store", f"lmdb://{tmp_path}/ccr") if command == "shrink" \
        else _cli(command, str(src))
    assert b"Traceback" not in proc.stderr and b"RecursionError" not in proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    if command == "shrink":
        assert proc.returncode == 0 and proc.stdout == src.read_bytes()


# -- 4. -o onto what is not a regular file -----------------------------------------------------


def _stored_handle(tmp: Path, data: bytes) -> str:
    with open_store(f"lmdb://{tmp}/ccr") as store:
        return ccr.store_original(store, data)


def _char_device(tmp: Path) -> Path:
    """A character device to write into: as root a null device made in tmp (1, 3), never the
    machine's own /dev/null (code that replaces its target would replace it for everyone);
    as any other user /dev/null itself, which such a user cannot replace."""
    if os.geteuid() != 0:
        return Path("/dev/null")
    dev = tmp / "mynull"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return dev


def test_recover_and_shrink_into_a_device_write_into_it(tmp_path: Path) -> None:
    handle = _stored_handle(tmp_path, CATALOG)
    dev = _char_device(tmp_path)
    (tmp_path / "link").symlink_to(dev)
    src = tmp_path / "c.json"
    src.write_bytes(CATALOG)
    for target in (dev, tmp_path / "link"):
        got = _cli("recover", handle, "-o", str(target), "--store", f"lmdb://{tmp_path}/ccr")
        assert got.returncode == 0, got.stderr
        assert stat.S_ISCHR(dev.stat().st_mode) and dev.stat().st_rdev == os.makedev(1, 3)
        got = _cli("shrink", str(src), "-o", str(target), "--store", f"lmdb://{tmp_path}/ccr")
        assert got.returncode == 0, got.stderr
        assert stat.S_ISCHR(dev.stat().st_mode) and dev.stat().st_rdev == os.makedev(1, 3)
    assert (tmp_path / "link").is_symlink()
    assert not [n for n in os.listdir(dev.parent) if n.startswith(f".{dev.name}.")]  # no temp left


def test_recover_into_a_fifo_writes_into_it(tmp_path: Path) -> None:
    data = os.urandom(300_000)  # more than a pipe holds: the reader must be there
    handle = _stored_handle(tmp_path, data)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    proc = _cli("recover", handle, "-o", str(fifo), "--store", f"lmdb://{tmp_path}/ccr", timeout=60)
    reader.join(60)
    assert proc.returncode == 0, proc.stderr
    assert got == [data] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_recover_onto_proc_self_fd_1_writes_to_stdout(tmp_path: Path) -> None:
    handle = _stored_handle(tmp_path, CATALOG)
    proc = _cli("recover", handle, "-o", "/proc/self/fd/1", "--store", f"lmdb://{tmp_path}/ccr")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == CATALOG


def test_output_onto_own_stdout_a_file_writes_to_it(tmp_path: Path) -> None:
    # -o /dev/stdout (here its target, /proc/self/fd/1: /dev/stdout itself would be replaced
    # for the whole machine by the old code, as root) with standard output a file: it was
    # taken for a regular file to replace, so a temp file was made beside the link (in /dev,
    # in /proc/self/fd: exit 2) and renamed over it; `>> log` lost nothing either
    handle = _stored_handle(tmp_path, CATALOG)
    src = tmp_path / "c.json"
    src.write_bytes(CATALOG)
    log = tmp_path / "log"
    log.write_bytes(b"before\n")
    with open(log, "ab") as fh:
        proc = subprocess.run([*_entry_point(), "recover", handle, "-o", "/proc/self/fd/1", "--store",
                               f"lmdb://{tmp_path}/ccr"], stdout=fh, stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert log.read_bytes() == b"before\n" + CATALOG
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        proc = subprocess.run([*_entry_point(), "shrink", str(src), "-o", "/proc/self/fd/1", "--store",
                               f"lmdb://{tmp_path}/ccr"], stdout=fh, stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == single.shrink(CATALOG, "c", None).output


def test_output_onto_a_symlink_replaces_its_file(tmp_path: Path) -> None:
    # the link was replaced by a regular file, and the file it named kept its old bytes
    handle = _stored_handle(tmp_path, CATALOG)
    target = tmp_path / "target.json"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    assert main(["recover", handle, "-o", str(link), "--store", f"lmdb://{tmp_path}/ccr"]) == 0
    assert link.is_symlink() and target.read_bytes() == CATALOG
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_output_file_mode_kept_and_new_ones_private(tmp_path: Path) -> None:
    handle = _stored_handle(tmp_path, CATALOG)
    kept = tmp_path / "kept.json"
    kept.write_bytes(b"old")
    os.chmod(kept, 0o600)
    old = os.umask(0o022)
    try:
        assert main(["recover", handle, "-o", str(kept), "--store", f"lmdb://{tmp_path}/ccr"]) == 0
        assert kept.read_bytes() == CATALOG and stat.S_IMODE(kept.stat().st_mode) == 0o600
        os.chmod(kept, 0o640)
        assert main(["recover", handle, "-o", str(kept), "--store", f"lmdb://{tmp_path}/ccr"]) == 0
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
        new = tmp_path / "new.json"
        assert main(["recover", handle, "-o", str(new), "--store", f"lmdb://{tmp_path}/ccr"]) == 0
        assert stat.S_IMODE(new.stat().st_mode) == 0o600
        src = tmp_path / "c.json"
        src.write_bytes(CATALOG)
        shrunk = tmp_path / "shrunk.json"
        assert main(["shrink", str(src), "-o", str(shrunk), "--store", f"lmdb://{tmp_path}/ccr"]) == 0
        assert stat.S_IMODE(shrunk.stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("command", ["recover", "shrink", "compress"])
def test_empty_output_path_is_exit_1(tmp_path: Path, command: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    handle = _stored_handle(tmp_path, CATALOG)
    src = tmp_path / "c.json"
    src.write_bytes(CATALOG)
    args = {"recover": [handle], "shrink": [str(src)], "compress": [str(src)]}[command]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main([command, *args, "-o", "", "--store", f"lmdb://{tmp_path}/ccr"]) == 1
    finally:
        os.chdir(cwd)
    assert "-o" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["c.json", "ccr"]


# -- error messages name the user's target --------------------------------------------------


@pytest.mark.parametrize("command", ["recover", "shrink"])
def test_output_error_names_the_target_not_a_temp_file(tmp_path: Path, command: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    handle = _stored_handle(tmp_path, CATALOG)
    src = tmp_path / "c.json"
    src.write_bytes(CATALOG)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = {"recover": [handle], "shrink": [str(src)]}[command]
    for target in (blocker / "out.json", tmp_path):  # under a regular file; a folder
        assert main([command, *args, "-o", str(target), "--store", f"lmdb://{tmp_path}/ccr"]) == 2
        err = capsys.readouterr().err
        assert str(target) + ":" in err and ".tmp" not in err, err


@AS_NOBODY
def test_read_only_out_names_out_not_a_temp_path(tmp_path: Path) -> None:
    """As a user who cannot write OUT (root could): the error names OUT."""
    tmp_path = Path(tempfile.mkdtemp(prefix="caveman-ro-"))  # (pytest's tmp folders are 0700)
    os.chmod(tmp_path, 0o755)
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o555)
    (tmp_path / "store").mkdir(mode=0o777)
    os.chmod(tmp_path / "store", 0o777)
    src = tmp_path / "c.json"
    src.write_bytes(CATALOG)
    os.chmod(src, 0o644)
    script = textwrap.dedent(f"""
        import os, sys
        from caveman_batch import catalog, pipeline, tokens
        from backends import lmdb_store
        from caveman_batch.cli import main
        tokens.warm()  # what a run loads, loaded while the venv can still be read
        catalog.compress({CATALOG!r})
        os.setgid(65534); os.setuid(65534)
        sys.exit(main(["compress", {str(src)!r}, "-o", {str(out)!r},
                       "--store", {f"lmdb://{tmp_path}/store/ccr"!r}, "--workers", "1", "--quiet"]))
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                              env={**os.environ, "CAVEMAN_HOME": "/nonexistent"})
    finally:
        shutil.rmtree(tmp_path)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.decode()
    assert f"{out}:" in err and TMP_DIR not in err and ".tmp" not in err, err


# -- --checksum verifies the originals it reuses ------------------------------------------


def test_checksum_rerun_heals_a_tampered_original(tmp_path: Path) -> None:
    src = tmp_path / "reg.jsonl"
    generate_registry(None, seed=5, servers=12, jsonl=src, oversize_bytes=0)
    reg = tmp_path / "tree"
    reg.mkdir()
    (reg / "one.json").write_bytes(CATALOG)
    store_url = f"lmdb://{tmp_path}/ccr"
    out, first = _compress(tmp_path, src, reg, incremental=True, max_bytes=32 << 20)
    rows = [r for r in _rows(out / "manifest.jsonl") if r["handle"]]
    tampered = [rows[0]["sha256"], next(r["sha256"] for r in rows if "tree" in r["source"]["path"])]
    with open_store(store_url) as store:
        for digest in tampered:
            value = bytearray(store.get(digest.encode()))
            value[-3] ^= 0xFF  # inside the zstd frame: no longer the original
            store.put(digest.encode(), bytes(value))
        for digest in tampered:
            with pytest.raises(IntegrityError):
                ccr.recover(store, digest)
    _, plain = _compress(tmp_path, src, reg, incremental=True, max_bytes=32 << 20)
    assert plain.reused == first.documents  # metadata trusted: not read (the documented trade)
    _, checked = _compress(tmp_path, src, reg, incremental=True, checksum=True, max_bytes=32 << 20)
    assert checked.documents == first.documents
    assert _recovers_all(_rows(out / "manifest.jsonl"), store_url) == len(rows)



def test_checksum_rerun_heals_a_tampered_original_of_a_document_reused_alone(tmp_path: Path) -> None:
    """A JSONL source with a line added is not reused whole: its other lines are reused one
    by one (_Touches), and with --checksum a tampered original among theirs is read back,
    found wrong and committed again from the line's bytes (before, only a source reused whole
    had its originals verified: this one kept its tampered record, named by the manifest)."""
    src = tmp_path / "reg.jsonl"
    generate_registry(None, seed=5, servers=12, jsonl=src, oversize_bytes=0)
    store_url = f"lmdb://{tmp_path}/ccr"
    out, first = _compress(tmp_path, src, incremental=True)
    digest = next(r["sha256"] for r in _rows(out / "manifest.jsonl") if r["handle"])
    with open_store(store_url) as store:
        value = bytearray(store.get(digest.encode()))
        value[-3] ^= 0xFF  # inside the zstd frame: no longer the original
        store.put(digest.encode(), bytes(value))
    with src.open("ab") as fh:
        fh.write(CATALOG + b"\n")
    _, checked = _compress(tmp_path, src, incremental=True, checksum=True)
    assert checked.reused == first.documents  # one by one: the source itself changed
    with open_store(store_url) as store:
        assert hashlib.sha256(ccr.recover(store, digest)).hexdigest() == digest
    assert _recovers_all(_rows(out / "manifest.jsonl"), store_url) > 0


# -- 6. an incremental rerun racing prune ---------------------------------------------------


_PRUNE_LOOP = textwrap.dedent("""
    import os, sys, time
    from caveman_batch import ccr
    from caveman_batch.store import open_store
    url, stop, ready = sys.argv[1:]
    while not os.path.exists(stop):
        started = time.time()
        with open_store(url) as store:
            removed = len(ccr.prune(store, 3600))  # what no run has seen for an hour
        print(started, time.time(), removed, flush=True)
        if not os.path.exists(ready):
            open(ready, "w").close()
""")


@pytest.mark.parametrize("how", ["whole", "per-document", "tree", "per-document sqlite"])
def test_incremental_rerun_racing_a_real_prune_names_only_what_recovers(tmp_path: Path, how: str) -> None:
    """`prune` runs in a loop in another process while a rerun carries thousands of rows over:
    every original the rerun had not refreshed yet is eligible (its records aged to 1970), so
    any gap between asking the store and refreshing last-seen loses handles."""
    store_url = f"sqlite://{tmp_path}/ccr.db" if how.endswith("sqlite") else f"lmdb://{tmp_path}/ccr"
    if how == "tree":
        src = tmp_path / "reg"
        for i in range(12):  # thousands of small files, a few hundred per folder
            folder = src / f"f{i:02d}"
            folder.mkdir(parents=True)
            for j in range(250):
                (folder / f"{j:03d}.json").write_bytes(CATALOG.replace(b"ping", f"t{i}_{j}".encode()))
    else:
        src = tmp_path / "reg.jsonl"
        src.write_bytes(b"".join(CATALOG.replace(b"ping", f"t{i}".encode()) + b"\n" for i in range(6000)))
    out, first = _compress(tmp_path, src, incremental=True, store=store_url)
    assert first.documents >= 3000
    if how.startswith("per-document"):  # the fingerprint no longer matches: every row reused one by one
        (out / ".manifest.streams.json").unlink()
    stop, ready = tmp_path / "stop", tmp_path / "ready"
    pruner = subprocess.Popen([sys.executable, "-c", _PRUNE_LOOP, store_url, str(stop), str(ready)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline and pruner.poll() is None:
            time.sleep(0.01)
        _age_every_record(store_url)  # a round went by (nothing eligible): now everything is
        began = time.time()
        _, again = _compress(tmp_path, src, incremental=True, store=store_url)
        ended = time.time()
    finally:
        stop.touch()
        stdout, stderr = pruner.communicate(timeout=60)
    assert pruner.returncode == 0, stderr
    rounds = [tuple(map(float, line.split())) for line in stdout.splitlines()]
    assert any(start < ended and end > began for start, end, _ in rounds), rounds  # it raced the rerun
    assert again.documents == first.documents
    assert _recovers_all(_rows(out / "manifest.jsonl"), store_url) == first.documents


# -- --manifest and --changes where they do harm -----------------------------------------------


@pytest.mark.parametrize("case", ["manifest-is-source", "changes-is-source", "manifest-in-src",
                                  "changes-in-src", "manifest-folder", "changes-folder",
                                  "changes-is-manifest", "changes-is-stat-cache"])
def test_manifest_and_changes_that_would_do_harm_are_refused(tmp_path: Path, case: str) -> None:
    """Written over a source (exit 0, the source gone), read back as a source by the next run
    (a manifest growing every run), a folder (exit 2 after publishing), or over the run's own
    manifest (OUT then no longer followed SRC): each refused, exit 1, nothing written."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.json").write_bytes(CATALOG)
    (src / "sub" / "b.json").write_bytes(CATALOG)
    out = tmp_path / "out"
    argv = {"manifest-is-source": [str(src / "a.json"), "--manifest", str(src / "a.json")],
            "changes-is-source": [str(src), "--changes", str(src / "sub" / "b.json")],
            "manifest-in-src": [str(src), "--manifest", str(src / "m.jsonl")],
            "changes-in-src": [str(src), "--changes", str(src / "sub" / "changes.jsonl")],
            "manifest-folder": [str(src), "--manifest", str(tmp_path)],
            "changes-folder": [str(src), "--changes", str(tmp_path)],
            "changes-is-manifest": [str(src), "--changes", str(out / "manifest.jsonl")],
            "changes-is-stat-cache": [str(src), "--changes", str(out / ".manifest.stat.json")]}[case]
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    done = _cli("compress", *argv[:1], "-o", str(out), *argv[1:], "--store",
                f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet")
    assert done.returncode == 1, done.stderr
    assert argv[-1].encode() in done.stderr and b"Traceback" not in done.stderr
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before
    assert not out.exists() or [p.name for p in out.iterdir()] == []


@pytest.mark.parametrize("command", [["compress", "-", "-o", "OUT"], ["shrink", "-"], ["lint", "-"],
                                     ["profile", "-"], ["payload", "compress", "-"]],
                         ids=["compress", "shrink", "lint", "profile", "payload"])
def test_a_closed_stdin_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    """(the one-file commands crashed, exit 2 and a traceback)"""
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    store = [] if command[0] in ("lint", "profile") else ["--store", f"lmdb://{tmp_path}/ccr"]
    done = subprocess.run([sys.executable, "-m", "caveman_batch", *argv, *store],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                          preexec_fn=lambda: os.close(0))
    assert done.returncode == 1, done.stderr
    assert b"no standard input" in done.stderr and b"Traceback" not in done.stderr


def _small_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_a_full_disk_is_an_output_error_naming_out_not_a_traceback(tmp_path: Path) -> None:
    full = tmp_path / "full"
    if not _small_tmpfs(full, "200k"):
        pytest.skip("cannot mount a small tmpfs here (root and mount(8) needed)")
    try:
        src = tmp_path / "reg.jsonl"
        generate_registry(None, seed=3, jsonl=src, target_bytes=600_000, oversize_bytes=0)
        done = _cli("compress", str(src), "-o", str(full / "out"), "--store",
                    f"lmdb://{tmp_path}/ccr", "--workers", "1", "--quiet")
        assert done.returncode == 2, done.stderr
        assert b"No space left on device" in done.stderr and b"Traceback" not in done.stderr
        assert not (full / "out" / "manifest.jsonl").exists()
    finally:
        subprocess.run(["umount", str(full)], check=False)
