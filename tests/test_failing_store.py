"""A store that opens but fails on commit: nothing names a handle whose original is not stored.

The store is real: a SQLite store of ours whose table refuses every write (a trigger that
raises, as a full disk or a read-only file system would at commit time). Each command that
mints handles is run through the console script against it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from caveman_batch.pipeline import LOCK_FILE
from caveman_batch.store import open_store
from test_proxy import Upstream, entry_point, request, tool, w

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"
CATALOG = SAMPLES / "registry" / "flint" / "crawler.json"


@pytest.fixture
def failing_store(tmp_path: Path) -> str:
    url = f"sqlite://{tmp_path / 'failing' / 'ccr.db'}"
    with open_store(url):
        pass
    conn = sqlite3.connect(tmp_path / "failing" / "ccr.db")
    for when in ("INSERT", "UPDATE"):
        conn.execute(f"CREATE TRIGGER refuse_{when.lower()} BEFORE {when} ON ccr "
                     "BEGIN SELECT RAISE(ABORT, 'disk full (test)'); END")
    conn.commit()
    conn.close()
    return url


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*entry_point(), *args], input=stdin, capture_output=True, timeout=60)


def test_the_store_really_fails_on_commit(failing_store: str) -> None:
    from caveman_batch import ccr
    from caveman_batch.errors import StoreError

    with open_store(failing_store) as store, pytest.raises(StoreError, match="disk full"):
        ccr.store_original(store, b"{}")


def test_shrink_passes_the_original_through_with_no_handle(failing_store: str) -> None:
    proc = _cli("shrink", str(CATALOG), "--store", failing_store)
    assert proc.returncode == 0
    assert proc.stdout == CATALOG.read_bytes()
    report = json.loads(proc.stderr.splitlines()[-1])
    assert report["handle"] is None and report["status"] == "passthrough"
    assert "disk full" in report["reason"]


def test_compress_publishes_nothing_and_exits_2(failing_store: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _cli("compress", str(SAMPLES), "-o", str(out), "--store", failing_store, "--quiet")
    assert proc.returncode == 2
    assert b"disk full" in proc.stderr and b"Traceback" not in proc.stderr
    published = [p for p in out.rglob("*") if p.is_file() and p.name != LOCK_FILE]
    assert published == []  # no output, no manifest: nothing names an unstored original


def test_payload_compress_names_no_handle(failing_store: str) -> None:
    text = "".join(f"line {i}: nothing failed here\n" for i in range(5000)).encode()
    proc = _cli("payload", "compress", "-", "--store", failing_store, "--max-chars", "800",
                stdin=text)
    assert proc.returncode == 0
    assert b"ccr_" not in proc.stdout and b"retrieve" not in proc.stdout
    assert b"not stored" in proc.stdout  # the view says its original is not kept
    assert b"disk full" in proc.stderr
    envelope = json.loads(_cli("payload", "compress", "-", "--store", failing_store,
                               "--max-chars", "800", "--json", stdin=text).stdout)
    assert envelope["handle"] is None


def test_proxy_forwards_the_original_response(failing_store: str, tmp_path: Path) -> None:
    upstream = Upstream(tmp_path)
    upstream.store = failing_store
    line = (b'{"jsonrpc":"2.0","id":@ID@,"result":'
            + json.dumps({"tools": [tool("x"), tool("y")]}).encode() + b"}\n")
    proc = upstream.run({"on": {"tools/list": [w(line)]}}, request(1, "tools/list"))
    assert proc.returncode == 0
    assert proc.stdout == line.replace(b"@ID@", b"1")  # byte for byte, no handle in _meta
    assert b"disk full" in proc.stderr

