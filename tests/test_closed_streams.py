"""A command started with a standard stream closed (`2>&-`, `>&-`, `<&-`: cron lines, daemons
that close what they do not use): the stream acts closed, and no file takes its number."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"


def _closed(redirect: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`caveman-batch ARGS` in a real subprocess, its stream closed by the shell."""
    return subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m",
                           "caveman_batch", *args], capture_output=True, timeout=300)


def test_a_closed_standard_error_is_no_failure(tmp_path: Path) -> None:
    """With standard error closed every command exited 1 (sys.stderr None: our own flush of
    it failed), a run that did its work too; and OUT's lock file became the run's fd 2."""
    store, index, out = f"lmdb://{tmp_path / 'ccr'}", tmp_path / "idx.db", tmp_path / "out"
    done = _closed("2>&-", "compress", str(SAMPLES / "registry.jsonl"), "-o", str(out),
                   "--store", store, "--index", str(index), "--no-embed", "--quiet", "--workers", "2")
    assert done.returncode == 0, done.stdout
    handles = [row["handle"] for row in map(json.loads, (out / "manifest.jsonl").read_bytes().splitlines())
               if row.get("handle")]
    assert handles and _closed("2>&-", "stats", "--store", store).returncode == 0
    assert _closed("2>&-", "verify", "--store", store).returncode == 0
    recovered = _closed("2>&-", "recover", "--handle", handles[0], "--store", store)
    assert recovered.returncode == 0 and recovered.stdout.startswith(b"{")
    assert (out / ".caveman-batch.lock").read_bytes().strip().isdigit()  # (only its pid)
    hits = _closed("2>&-", "search", "issue", "--index", str(index), "--no-embed", "--json")
    assert hits.returncode == 0 and json.loads(hits.stdout)


def test_a_closed_standard_output_is_a_clean_error(tmp_path: Path) -> None:
    """`recover >&-` was an internal error with a traceback (sys.stdout None): it is the
    error of a standard output that cannot take what is written, exit 2."""
    store = f"lmdb://{tmp_path / 'ccr'}"
    done = _closed("", "compress", str(SAMPLES / "registry.jsonl"), "-o", str(tmp_path / "out"),
                   "--store", store, "--quiet", "--json")
    handle = next(row["handle"] for row in map(json.loads, (tmp_path / "out" / "manifest.jsonl")
                                               .read_bytes().splitlines()) if row.get("handle"))
    assert done.returncode == 0
    gone = _closed(">&-", "recover", "--handle", handle, "--store", store)
    assert gone.returncode == 2 and b"Traceback" not in gone.stderr
    assert b"cannot write to standard output: it is closed" in gone.stderr
    stdin = _closed("<&-", "compress", "-", "-o", str(tmp_path / "o2"), "--store", store)
    assert stdin.returncode == 1 and b"standard input" in stdin.stderr  # (as before: said)
    assert not (tmp_path / "o2").exists()  # refused before OUT is made (it made OUT and its lock)


def test_a_closed_stream_is_held_so_no_file_takes_its_number(tmp_path: Path) -> None:
    """Held by /dev/null opened the other way round: a write to it still fails (EBADF), and
    the next file opened (a store's, as a worker's first) is not fd 2."""
    code = ("import errno, os, sys\n"
            "from caveman_batch.cli import _hold_standard_streams\n"
            "_hold_standard_streams()\n"
            f"fd = os.open({str(tmp_path / 'data')!r}, os.O_RDWR | os.O_CREAT)\n"
            "try:\n"
            "    os.write(2, b'x')\n"
            "    wrote = 'wrote'\n"
            "except OSError as exc:\n"
            "    wrote = errno.errorcode[exc.errno]\n"
            "print(fd, wrote, os.get_inheritable(2))\n")
    done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-c", code],
                          capture_output=True, timeout=60)
    fd, wrote, inheritable = done.stdout.split()
    assert int(fd) > 2 and (wrote, inheritable) == (b"EBADF", b"True"), done
    assert (tmp_path / "data").read_bytes() == b""
