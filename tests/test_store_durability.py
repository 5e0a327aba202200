"""The store on real files: on-disk tampering, concurrent processes, SIGKILL, map growth, modes.

Every test here uses real LMDB and SQLite files. The multi-process tests run this
module as a script in child processes (see `_child_main` at the bottom), so the
children are real interpreters with their own environments and locks.
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import lmdb_store
from caveman_batch import ccr, cli
from caveman_batch.errors import IntegrityError, StoreError, UnknownHandleError
from caveman_batch.store import DELETE, Store, open_store

SCRIPT = Path(__file__).resolve()
CHILD_TIMEOUT_S = 60.0
BACKENDS = ["lmdb", "sqlite"]


def store_url(backend: str, root: Path) -> str:
    return f"lmdb://{root}/ccr.lmdb" if backend == "lmdb" else f"sqlite://{root}/ccr.db"


def data_path(url: str) -> Path:
    scheme, location = url.split("://", 1)
    return Path(location) / "data.mdb" if scheme == "lmdb" else Path(location)


def noise(seed: int, size: int) -> bytes:
    """Seeded incompressible bytes: zstd stores them verbatim, so they can be found on disk."""
    return random.Random(seed).randbytes(size)


def run_cli(argv: list[str]) -> int:
    """cli.main in-process, its exit status whether it returns or raises SystemExit."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


# -- 1. tampering on disk ------------------------------------------------------


def flip_on_disk(path: Path, needle: bytes, at: int) -> None:
    """Flip one bit of the byte `at` bytes into the single on-disk copy of `needle`."""
    blob = path.read_bytes()
    assert blob.count(needle) == 1, f"expected exactly one copy of the needle in {path}"
    offset = blob.index(needle) + at
    with path.open("r+b") as fh:
        fh.seek(offset)
        fh.write(bytes([blob[offset] ^ 0x01]))
        fh.flush()
        os.fsync(fh.fileno())


def header_needle(original: bytes, content_type: str = "application/json") -> bytes:
    """The start of the record header up to and including the original-length field."""
    return b"CCR" + bytes([1, 1, len(content_type)]) + b"\0\0" + struct.pack(">Q", len(original))


@pytest.mark.parametrize("where", ["payload", "header-length"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_tampered_on_disk_refused_reported_and_healed(
    backend: str, where: str, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    url = store_url(backend, tmp_path)
    original = b"tamper-me:" + noise(1, 6000)
    good = b'{"tools":[{"name":"fine"}]}\n' * 40
    with open_store(url) as store:
        handle = ccr.store_original(store, original)
        ccr.store_original(store, good)
    assert not Path(str(data_path(url)) + "-wal").exists()  # checkpointed on close

    if where == "payload":
        flip_on_disk(data_path(url), original[3000:3064], 32)
    else:  # the length field's last byte: the payload itself is untouched
        flip_on_disk(data_path(url), header_needle(original), len(header_needle(original)) - 1)

    with open_store(url) as store:
        with pytest.raises(IntegrityError) as refused:
            ccr.recover(store, handle)
        assert refused.value.handle == handle and handle in str(refused.value)
    capfdbinary.readouterr()

    assert run_cli(["recover", handle, "--store", url]) == 1
    out, err = capfdbinary.readouterr()
    assert out == b"" and handle.encode() in err

    assert run_cli(["verify", "--store", url]) == 1
    out, err = capfdbinary.readouterr()
    assert f"FAILED {handle}".encode() in out and b"failed verification" in err

    assert run_cli(["stats", "--json", "--store", url]) == 0
    report = json.loads(capfdbinary.readouterr().out)
    assert (report["records"], report["verified"]) == (2, 1)
    assert report["original_bytes"] == len(good)  # totals from the verified record only
    # a payload flip decodes, then mis-hashes; a length flip disagrees with the frame's size
    assert report["excluded"] == {"digest mismatch" if where == "payload" else "corrupt": 1}

    with open_store(url) as store:  # committing the same original again heals it
        assert ccr.store_original(store, original) == handle
        assert ccr.recover(store, handle) == original
    assert run_cli(["verify", "--store", url]) == 0
    capfdbinary.readouterr()
    assert run_cli(["recover", handle, "--store", url]) == 0
    assert capfdbinary.readouterr().out == original


# -- child processes -------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


class LineReader:
    """Complete stdout lines of a child, with a deadline (a wedged child fails, not hangs)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._buf = b""
        self._sel = selectors.DefaultSelector()
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        self._sel.register(proc.stdout, selectors.EVENT_READ)

    def lines(self, timeout: float = CHILD_TIMEOUT_S) -> Iterator[str]:
        """Yield lines until EOF; fail the test if none arrives within `timeout`."""
        assert self.proc.stdout is not None
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                yield line.decode()
            if not self._sel.select(timeout):
                self.proc.kill()
                pytest.fail(f"child {self.proc.args} silent for {timeout}s; stderr: {self.stderr()}")
            chunk = self.proc.stdout.read()
            if not chunk:
                return  # EOF; a trailing partial line was never completed
            self._buf += chunk

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")


def wait_ok(proc: subprocess.Popen[bytes], reader: LineReader) -> None:
    rest = list(reader.lines())
    code = proc.wait(CHILD_TIMEOUT_S)
    assert code == 0, f"child {proc.args} exited {code}: {rest} {reader.stderr()}"


# -- 2. concurrency: two writers and a reader --------------------------------------

WRITERS, BATCHES, BATCH = 2, 150, 8


def concurrent_original(writer: int, index: int) -> bytes:
    # sizes from a few hundred bytes to past a page, some compressible, some not
    size = 100 + (index * 7919) % 6000
    body = noise(writer * 1_000_003 + index, size // 2) + b'{"k":1}' * (size // 14)
    return b"w%d-r%d:" % (writer, index) + body


@pytest.mark.parametrize("backend", ["lmdb", "lmdb-growing", "sqlite"])
def test_two_writers_and_a_reader(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = store_url(backend.split("-")[0], tmp_path)
    map_size = str(256 << 10 if backend == "lmdb-growing" else 0)  # tiny: grows under load
    go, stop = tmp_path / "go", tmp_path / "stop"
    if int(map_size):
        monkeypatch.setattr(lmdb_store, "INITIAL_MAP_SIZE", int(map_size))
    with open_store(url):
        pass  # create it once, so the children race on commits, not on creation
    reader = spawn("reader", url, str(stop), map_size)
    reader_lines = LineReader(reader)
    assert next(reader_lines.lines()) == "ready"
    writers = [spawn("writer", url, str(w), str(go), map_size) for w in range(WRITERS)]
    writer_lines = [LineReader(p) for p in writers]
    for lines in writer_lines:
        assert next(lines.lines()) == "ready"
    go.touch()

    spans = []
    for proc, lines in zip(writers, writer_lines, strict=True):
        spans.append(json.loads(next(lines.lines())))
        wait_ok(proc, lines)
    stop.touch()
    report = json.loads(next(reader_lines.lines()))
    wait_ok(reader, reader_lines)

    assert report["errors"] == [], report["errors"][:5]
    (a0, a1), (b0, b1) = (s["span"] for s in spans)
    assert a0 < b1 and b0 < a1, "the writers did not overlap in time"
    during = [t for t in report["hit_times"] if min(a0, b0) <= t <= max(a1, b1)]
    assert len(during) >= 5, "the reader saw too few records while the writers ran"
    with open_store(url) as store:
        for writer in range(WRITERS):
            for index in range(BATCHES * BATCH):
                original = concurrent_original(writer, index)
                assert ccr.recover(store, ccr.make_handle(ccr.digest_of(original))) == original
        report = ccr.audit(store)
    assert report.records == report.verified == WRITERS * BATCHES * BATCH


def child_writer(url: str, writer: int, go: Path, map_size: int) -> None:
    prepared = [ccr.prepare(concurrent_original(writer, i)) for i in range(BATCHES * BATCH)]
    with open_store(url) as store:
        print("ready", flush=True)
        while not go.exists():
            time.sleep(0.001)
        start = time.time()
        for b in range(BATCHES):
            ccr.commit(store, prepared[b * BATCH:(b + 1) * BATCH])
        print(json.dumps({"span": [start, time.time()]}), flush=True)


def child_reader(url: str, stop: Path, map_size: int) -> None:
    universe = [(w, i) for w in range(WRITERS) for i in range(BATCHES * BATCH)]
    originals = {wi: concurrent_original(*wi) for wi in universe}
    handles = {wi: ccr.make_handle(ccr.digest_of(o)) for wi, o in originals.items()}
    rng = random.Random(7)
    errors: list[str] = []
    hit_times: list[float] = []
    reads = 0

    def check(store: Store, wi: tuple[int, int], must_exist: bool) -> bool:
        nonlocal reads
        reads += 1
        try:
            got = ccr.recover(store, handles[wi])
        except UnknownHandleError:
            if must_exist:
                errors.append(f"{wi}: a batch-mate is visible but this record is not")
            return False
        except Exception as exc:  # torn, corrupt, driver error: all count
            errors.append(f"{wi}: {type(exc).__name__}: {exc}")
            return False
        if got != originals[wi]:
            errors.append(f"{wi}: wrong bytes")
        return True

    with open_store(url) as store:
        print("ready", flush=True)
        while not stop.exists():
            writer, index = rng.choice(universe)
            if check(store, (writer, index), must_exist=False):
                hit_times.append(time.time())
                first = index - index % BATCH  # a batch is one transaction: all or none
                for mate in range(first, first + BATCH):
                    check(store, (writer, mate), must_exist=True)
            if reads % 50 == 0:
                listed = set(store.keys())
                if not all(len(k) == 64 for k in listed):
                    errors.append("keys() listed a malformed key")
    print(json.dumps({"hit_times": hit_times, "reads": reads, "errors": errors[:50]}), flush=True)


# -- 3. SIGKILL mid-commit ------------------------------------------------------


def crash_original(round_: int, batch: int, index: int) -> bytes:
    return b"r%d-b%d-i%d:" % (round_, batch, index) + noise(round_ * 10**6 + batch * 1000 + index, 24_000)


def kill_mid_commit(url: str, round_: int, rng: random.Random) -> dict[str, tuple[int, int]]:
    """Run a committing child and SIGKILL it in its fifth or later commit; every
    handle it reported committed -> (batch, index).

    Even rounds kill it inside the write transaction for sure (it says 'inside'
    with half the batch written); odd rounds kill it at a random moment after
    'begin', which lands in the commit and its fsync or just after.
    """
    proc = spawn("crasher", url, str(round_))
    lines = LineReader(proc)
    committed: dict[str, tuple[int, int]] = {}
    trigger = "inside" if round_ % 2 == 0 else "begin"

    def note(line: str) -> bool:
        verb, batch, *handles = line.split()
        if verb == "committed":
            committed.update((h, (int(batch), i)) for i, h in enumerate(handles))
        return verb == trigger and int(batch) >= 4

    for line in lines.lines():
        if note(line):
            time.sleep(rng.uniform(0, 0.003))
            proc.send_signal(signal.SIGKILL)
            break
    else:
        pytest.fail(f"crasher ended before it was killed: {lines.stderr()}")
    for line in lines.lines():  # lines written before the kill landed count too
        note(line)
    assert proc.wait(CHILD_TIMEOUT_S) == -signal.SIGKILL
    return committed


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_mid_commit_keeps_every_committed_record(
    backend: str, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    url = store_url(backend, tmp_path)
    rng = random.Random(3)
    for round_ in range(4):  # each child reopens the store the previous crash left
        committed = kill_mid_commit(url, round_, rng)
        assert len(committed) >= 4 * CRASH_BATCH
        with open_store(url) as store:
            for handle, (batch, index) in committed.items():
                assert ccr.recover(store, handle) == crash_original(round_, batch, index)
        capfdbinary.readouterr()
        assert run_cli(["verify", "--store", url]) == 0, capfdbinary.readouterr()
    with open_store(url) as store:  # still writable after the crashes
        handle = ccr.store_original(store, b"after the crashes")
        assert ccr.recover(store, handle) == b"after the crashes"


CRASH_BATCH = 16


def child_crasher(url: str, round_: int) -> None:
    def merge_then_stall(key: bytes, old: bytes | None, new: bytes) -> bytes | None:
        if key == halfway:  # half the batch is in the open transaction: get killed here
            print(f"inside {batch}", flush=True)
            time.sleep(1)
        return ccr.merge_record(key, old, new)

    with open_store(url) as store:
        for batch in range(10**6):
            prepared = [ccr.prepare(crash_original(round_, batch, i)) for i in range(CRASH_BATCH)]
            halfway = prepared[CRASH_BATCH // 2].key if round_ % 2 == 0 and batch >= 4 else b""
            print(f"begin {batch}", flush=True)
            store.commit([(r.key, r.value) for r in prepared], merge=merge_then_stall)
            print(f"committed {batch} {' '.join(r.handle for r in prepared)}", flush=True)


# -- 4. LMDB map growth -----------------------------------------------------------


def test_lmdb_map_grows_from_a_tiny_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lmdb_store, "INITIAL_MAP_SIZE", 1 << 20)
    url = f"lmdb://{tmp_path}/ccr.lmdb"
    originals = [noise(100 + i, 256 << 10) for i in range(96)]  # 24 MiB in 6 batches
    big_batch = [noise(1000 + i, 1 << 20) for i in range(16)]  # 16 MiB in one transaction
    with open_store(url) as store:
        for b in range(6):
            ccr.commit(store, [ccr.prepare(o) for o in originals[b * 16:(b + 1) * 16]])
        ccr.commit(store, [ccr.prepare(o) for o in big_batch])
        assert store._live().info()["map_size"] >= 40 << 20  # type: ignore[attr-defined]
    with open_store(url) as store:
        for original in originals + big_batch:
            assert ccr.recover(store, ccr.make_handle(ccr.digest_of(original))) == original


def test_lmdb_adopts_growth_by_another_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lmdb_store, "INITIAL_MAP_SIZE", 1 << 20)
    url = f"lmdb://{tmp_path}/ccr.lmdb"
    with open_store(url) as store:  # held open at 1 MiB while the child grows the map
        mine = ccr.store_original(store, b"before the child")
        child = spawn("grower", url, str(1 << 20))
        lines = LineReader(child)
        theirs = json.loads(next(lines.lines()))
        wait_ok(child, lines)
        assert theirs["map_size"] >= 8 << 20
        for i, handle in enumerate(theirs["handles"]):  # read path: MapResizedError adopted
            assert ccr.recover(store, handle) == grower_original(i)
        more = [noise(500 + i, 1 << 20) for i in range(12)]  # write path: past the adopted size
        ccr.commit(store, [ccr.prepare(o) for o in more])
        assert store._live().info()["map_size"] > theirs["map_size"]  # type: ignore[attr-defined]
        assert ccr.recover(store, mine) == b"before the child"
        assert all(ccr.recover(store, ccr.make_handle(ccr.digest_of(o))) == o for o in more)
        assert ccr.audit(store).verified == 1 + len(theirs["handles"]) + len(more)


def test_lmdb_map_release_follows_a_resize_by_another_store_object(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two store objects share one environment; when one grows the map, LMDB maps the file
    again, maybe elsewhere: the other must not release (MADV_DONTNEED) the old address range,
    which may hold the process's own memory by then (that would zero it)."""
    import ctypes

    monkeypatch.setattr(lmdb_store, "INITIAL_MAP_SIZE", 4 << 20)
    url = f"lmdb://{tmp_path}/ccr.lmdb"
    with open_store(url) as first, open_store(url) as second:
        env = first._live()  # type: ignore[attr-defined]
        assert env is second._live()  # type: ignore[attr-defined]
        first.put(b"a", b"x")
        data = tmp_path / "ccr.lmdb" / "data.mdb"
        [(start, _end)] = lmdb_store._MAPS[id(env)]
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        below = libc.mmap(start - (4 << 20), 4 << 20, 3, 0x22, -1, 0)  # push the new map elsewhere
        second.commit([(b"k%d" % i, noise(700 + i, 100_000)) for i in range(80)])  # grows the map
        assert env.info()["map_size"] > 4 << 20
        blocks = []
        for _ in range(64):  # anonymous memory, some of it maybe where the old map was
            block = libc.mmap(None, 256 << 10, 3, 0x22, -1, 0)
            ctypes.memset(block, 0xAB, 256 << 10)
            blocks.append(block)
        first.put(b"b", b"y")  # releases the map: the live one
        assert lmdb_store._MAPS[id(env)] == lmdb_store._mapping_ranges(data)
        assert all(ctypes.string_at(b, 256 << 10) == b"\xab" * (256 << 10) for b in blocks)
        for block in [*blocks, below]:
            libc.munmap(ctypes.c_void_p(block), ctypes.c_size_t(256 << 10 if block != below else 4 << 20))
        assert first.get(b"a") == b"x" and second.get(b"k3") == noise(703, 100_000)


def grower_original(index: int) -> bytes:
    return noise(9000 + index, 1 << 20)


def child_grower(url: str, map_size: int) -> None:
    with open_store(url) as store:
        handles = ccr.commit(store, [ccr.prepare(grower_original(i)) for i in range(8)])
        size = store._live().info()["map_size"]  # type: ignore[attr-defined]
    print(json.dumps({"handles": handles, "map_size": size}), flush=True)


# -- 5. permissions -------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A permissive umask, so modes come from the code, not from the environment."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_default_lmdb_store_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None
) -> None:
    home = tmp_path / "missing" / "parents" / "home"
    monkeypatch.setenv("CAVEMAN_HOME", str(home))
    url = cli.default_store_url()
    assert url == f"lmdb://{home}/ccr.lmdb"
    with open_store(url) as store:
        ccr.store_original(store, b"secret")
    for folder in (tmp_path / "missing", tmp_path / "missing" / "parents", home, home / "ccr.lmdb"):
        assert mode(folder) == 0o700, folder
    for name in ("data.mdb", "lock.mdb"):
        assert mode(home / "ccr.lmdb" / name) == 0o600, name


def test_sqlite_store_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None) -> None:
    db = tmp_path / "a" / "b" / "ccr.db"
    monkeypatch.setenv("CAVEMAN_CCR_STORE", f"sqlite://{db}")
    with open_store(cli.default_store_url()) as store:
        ccr.store_original(store, b"secret")
        for suffix in ("", "-wal", "-shm"):  # the WAL files exist while it is open
            assert mode(Path(f"{db}{suffix}")) == 0o600, suffix
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700


# -- child entry point --------------------------------------------------------------


def _child_main(role: str, args: list[str]) -> None:
    if role in ("reader", "writer", "grower") and int(args[-1]):
        lmdb_store.INITIAL_MAP_SIZE = int(args[-1])
    if role == "writer":
        child_writer(args[0], int(args[1]), Path(args[2]), int(args[3]))
    elif role == "reader":
        child_reader(args[0], Path(args[1]), int(args[2]))
    elif role == "crasher":
        child_crasher(args[0], int(args[1]))
    elif role == "grower":
        child_grower(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2:])


# -- checking and refreshing in one transaction (an incremental rerun racing prune) -------------


@pytest.mark.parametrize("backend", [*BACKENDS, "memory"])
def test_touch_held_refreshes_what_is_held_and_names_the_rest(tmp_path: Path, backend: str) -> None:
    """ccr.touch_held asks and refreshes in the one write transaction (Store.commit_present:
    so a prune commits either before it, and the record is named absent, or after, and keeps
    it). memory:// runs the Store base class's commit_present, the others their own."""
    url = "memory://" if backend == "memory" else store_url(backend, tmp_path)
    with open_store(url) as store:
        held = ccr.store_original(store, b"held")[len("ccr_"):]
        gone = ccr.store_original(store, b"gone")[len("ccr_"):]
        never = ccr.digest_of(b"never stored")
        assert len(ccr.prune(store, 0, now_ms=ccr._now_ms() + 1)) == 2  # both pruned
        held = ccr.store_original(store, b"held")[len("ccr_"):]
        assert ccr.touch_held(store, [held, gone, never, held], now_ms=9 << 40) == [gone, never]
        assert ccr.info(store, held).last_seen == (9 << 40) / 1000
        assert list(store.keys(ccr.SEEN_PREFIX)) == [ccr.SEEN_PREFIX + held.encode()]  # none for the absent
        assert ccr.touch_held(store, []) == []
        # a prune whose cutoff is before the refresh keeps the record
        assert ccr.prune(store, 1, now_ms=(9 << 40) + 500) == []


# -- a whole handle is read at once ---------------------------------------------------------


def test_a_whole_handle_is_read_without_a_prefix_scan() -> None:
    """recover and info of a 64-digit handle read the record straight away (a network
    store pays a round trip per lookup); a shorter prefix is resolved by a scan first."""
    from caveman_batch.memory_store import MemoryStore

    class Counting(MemoryStore):
        scans = 0

        def keys(self, prefix: bytes = b"") -> Iterator[bytes]:
            Counting.scans += 1
            return super().keys(prefix)

    with Counting.open("") as store:
        handle = ccr.store_original(store, b"original")
        assert ccr.recover(store, handle) == b"original"
        assert ccr.recover(store, handle.upper().replace("CCR_", "ccr://")) == b"original"
        assert ccr.info(store, handle).original_length == len(b"original")
        assert Counting.scans == 0
        with pytest.raises(UnknownHandleError) as exc:
            ccr.recover(store, "ccr_" + "0" * 64)
        assert "ccr_" + "0" * 64 in str(exc.value) and Counting.scans == 0
        assert ccr.recover(store, handle[:12]) == b"original"
        assert Counting.scans == 1


# -- 6. spans of big catalogs: each catalog inflated once per scan -------------------------


def _catalog_and_spans(k: int, tools: int) -> tuple[list[ccr.Prepared], bytes]:
    defs = [json.dumps({"name": f"c{k}_t{i}", "description": f"Tool {i} of {k}. " * 70}).encode()
            for i in range(tools)]
    catalog = b'{"tools":[' + b",".join(defs) + b"]}"
    spans = [ccr.prepare_span(ccr.digest_of(d), len(d), ccr.digest_of(catalog), catalog.index(d))
             for d in defs]
    return [ccr.prepare(catalog), *spans], catalog


def test_a_scan_inflates_each_big_catalog_once_for_all_its_spans(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify/stats/prune/migrate read spans in key order, all over their catalogs: a catalog
    over 1 MiB was inflated again up to each span (quadratic); now once, while the cache's
    budget holds it, the least recently used going first when it does not."""
    records, catalogs = [], []
    for k in range(3):
        prepared, catalog = _catalog_and_spans(k, 1000)
        assert len(catalog) > 1 << 20
        records += prepared
        catalogs.append(catalog)
    inflated: list[int] = []
    real = ccr._inflate

    def counting(header: ccr.Header, value: bytes) -> bytes:
        found = real(header, value)
        if header.original_length > 1 << 20:
            inflated.append(len(found))
        return found

    monkeypatch.setattr(ccr, "_inflate", counting)
    with open_store(f"lmdb://{tmp_path}/ccr.lmdb") as store:
        ccr.commit(store, records)
        report = ccr.audit(store)
        assert report.verified == len(records) and not report.excluded
        assert len(inflated) == 3  # each once: as a whole record, then held for its spans
        wholes = ccr._Wholes()
        monkeypatch.setattr(ccr, "_WHOLES_MAX", 2 * len(catalogs[0]) + 10)  # room for two
        for k in (0, 1, 0, 2):  # 1 is the least recently used when 2 comes
            found = wholes.get(str(k), ccr.decode_header(records[0].value), records[0].value)
            assert found == catalogs[0]
        assert list(wholes.inflated) == ["0", "2"] and wholes.size == 2 * len(catalogs[0])
    with open_store(f"lmdb://{tmp_path}/one.lmdb") as store:
        ccr.commit(store, records[:101])  # a catalog and 100 of its spans
        monkeypatch.setattr(ccr, "_WHOLES_MAX", 1 << 20)  # room for none: read up to each span
        inflated.clear()
        assert ccr.audit(store).verified == 101 and not inflated



def test_a_store_made_by_another_process_meanwhile_is_not_taken_for_a_lost_one(
        tmp_path: Path) -> None:
    """LmdbStore.open finds no data.mdb, then another process makes the store (data.mdb,
    then the marker) before the lost-store check looks for the marker: that check trusted
    the first look and refused the new store as one whose data.mdb is gone (a helper saw
    1-3 of 250 opens by 5 processes at once refused). It looks at data.mdb itself, after
    the marker."""
    from backends import lmdb_store

    path = tmp_path / "s"
    url = f"lmdb://{path}"
    open_store(url).close()  # (what the other process made: data.mdb, then the marker)
    lmdb_store._refuse_lost(path, url)  # (LmdbStore.open had found no data.mdb before)
    lmdb_store.data_file(path).unlink()
    with pytest.raises(StoreError, match="data.mdb is missing"):
        lmdb_store._refuse_lost(path, url)


def test_migrate_totals_leave_out_a_span_pruned_during_the_run(tmp_path: Path) -> None:
    """A span whose record fails verification goes over whole, read again after the scan;
    one pruned meanwhile was taken out of `records` and `verified` but its bytes stayed in
    `original_bytes` and `stored_bytes` (`migrate --json`: totals of a record not copied)."""
    from caveman_batch.memory_store import MemoryStore

    head, tail = b'{"tools":[{"name":"a"}]}', b"x" * 200
    whole = ccr.prepare(head + tail)
    span = ccr.prepare_span(ccr.digest_of(head), len(head), whole.digest, 0)
    plain = next(p for p in (ccr.prepare(b"plain %d" % i) for i in range(100))
                 if p.key > span.key)  # scanned after the span: copied while the scan runs
    with open_store(f"sqlite://{tmp_path}/source.db") as source:
        ccr.commit(source, [whole, span, plain])
        # the record the span lies in tampered past the span (same length, other bytes)
        source.commit([(whole.key, ccr.prepare(head + b"y" * 200).value)])

        class PrunedMeanwhile(MemoryStore):
            """The target; its first commit comes once the span is scanned: a prune of
            the source removes the span and its record then."""

            def commit(self, items: Any, merge: Any = None) -> None:
                source.commit([(span.key, b""), (whole.key, b"")], merge=lambda *_: DELETE)
                super().commit(items, merge)

        target = PrunedMeanwhile()
        report = ccr.migrate(source, target, batch_size=1)
    assert (report.records, report.verified) == (2, 1)
    assert sorted(target.keys()) == [plain.key]
    assert (report.original_bytes, report.stored_bytes) == (plain.original_length, len(plain.value))
