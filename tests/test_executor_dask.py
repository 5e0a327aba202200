"""`compress --executor dask`: the per-document work on a Dask cluster, every promise kept.

One LocalCluster (2 one-thread worker processes) serves the module as "an existing
scheduler" (tcp:// and dask:// addresses); `--executor dask` starts one of its own in the
tests that need it (the CLI run, the parent killed), and a real `dask scheduler` /
`dask worker` pair runs once. In CI these tests run, never skip.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bench_data.generate import generate_registry
from caveman_batch import __version__, ccr
from caveman_batch.cli import main
from caveman_batch.errors import ExecutorError, UsageError
from caveman_batch.pipeline import LOCK_FILE, TMP_DIR, Config, Summary, run
from caveman_batch.pipeline.executors import _NO_DASHBOARD, scheduler_address
from caveman_batch.store import open_store

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"
NOT_COMPARED = {".manifest.stat.json", LOCK_FILE}  # this machine's file identities; a pid


def _distributed() -> Any:
    """Dask's distributed; in CI (where the test extra installs it) these tests must run."""
    try:
        import distributed
    except ImportError:
        reason = "Dask's distributed is not installed (pip install '.[dask]')"
        if os.environ.get("CI"):
            pytest.fail(f"CI: {reason}")
        pytest.skip(reason)
    return distributed


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A client of the module's LocalCluster: 2 worker processes of 1 thread each."""
    distributed = _distributed()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, scheduler_kwargs=_NO_DASHBOARD) as cluster, \
            distributed.Client(cluster, set_as_default=False) as connected:
        yield connected


@pytest.fixture
def address(client: Any) -> str:
    client.wait_for_workers(2, timeout=60)  # (a worker killed by a test before is back)
    return str(client.scheduler.address)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL registry of about 5 MB: six batches, more than the window holds."""
    path = tmp_path_factory.mktemp("dask-data") / "registry.jsonl"
    generate_registry(None, seed=21, jsonl=path, target_bytes=5_000_000, oversize_bytes=0)
    return path


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree of some 130 small catalogs (a few tools each), the quirk files among them."""
    path = tmp_path_factory.mktemp("dask-tree") / "tree"
    generate_registry(path, seed=22, target_bytes=600_000, max_tools=4, oversize_bytes=0)
    return path


def _tree(root: Path) -> dict[str, str]:
    """Every file of OUT (but the stat cache and the lock), by sha256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in NOT_COMPARED}


def _run(tmp: Path, source: Path, name: str, **kw: Any) -> tuple[Path, Summary]:
    out = tmp / name
    config = Config([str(source)], out, f"lmdb://{tmp}/ccr-{name}", **kw)
    return out, run(config)


def _reference(tmp: Path, source: Path) -> dict[str, str]:
    """OUT of --workers 1, the definition."""
    out, _ = _run(tmp, source, "one", workers=1)
    return _tree(out)


@pytest.mark.parametrize("source", ["samples", "small_tree"])
def test_same_out_as_one_worker_and_the_pool(tmp_path: Path, address: str, source: str,
                                             request: pytest.FixtureRequest) -> None:
    src = SAMPLES if source == "samples" else request.getfixturevalue(source)
    expected = _reference(tmp_path, src)
    pool, _ = _run(tmp_path, src, "pool", workers=2)
    assert _tree(pool) == expected
    # the scheduler as tcp:// and as dask://
    for name, spec in (("tcp", address), ("dask", address.replace("tcp://", "dask://"))):
        out, summary = _run(tmp_path, src, name, workers=2, executor=spec, incremental=True)
        assert _tree(out) == expected
        assert summary.documents == summary.ok + summary.passthrough + summary.error > 30
        # --incremental unchanged: a rerun reuses everything and starts no task
        _, again = _run(tmp_path, src, name, workers=2, executor=spec, incremental=True)
        assert again.reused == again.documents == summary.documents
        assert _tree(out) == expected


def test_cli_executor_dask_starts_a_local_cluster(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _distributed()
    expected = _reference(tmp_path, SAMPLES)
    out = tmp_path / "cli"
    code = main(["compress", str(SAMPLES), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr-cli",
                 "--executor", "dask", "--workers", "2", "--json", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["documents"] > 30
    assert _tree(out) == expected


def test_executor_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _distributed()
    assert scheduler_address("local") is None
    assert scheduler_address("dask") == ""
    assert scheduler_address("dask://sched.internal:9000") == "tcp://sched.internal:9000"
    assert scheduler_address("dask://sched.internal") == "tcp://sched.internal:8786"
    assert scheduler_address("tcp://10.0.0.7:8786") == "tcp://10.0.0.7:8786"
    for bad in ("", "ray", "dask:/x", "http://h:1", "tcp://", "tcp://h:1/path", "tcp://h:99999",
                "dask://h:0"):
        with pytest.raises(UsageError, match="--executor"):
            scheduler_address(bad)
    out = tmp_path / "o"
    assert main(["compress", str(SAMPLES), "-o", str(out), "--executor", "spark", "--quiet"]) == 1
    assert "--executor 'spark'" in capsys.readouterr().err
    assert not out.exists()  # refused before anything was written


def test_an_unreachable_scheduler_is_exit_2_and_publishes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    _distributed()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "o"
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        code = main(["compress", str(SAMPLES), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
                     "--executor", f"tcp://127.0.0.1:{port}", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"tcp://127.0.0.1:{port}" in err and "Traceback" not in err
    assert [p.name for p in out.iterdir()] == [LOCK_FILE]


def test_a_refused_connection_fails_at_once_not_after_the_connect_timeout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening on the scheduler's port: distributed retries a refused connection
    for its whole connect timeout (30 s by default) before the run said so; a refusal is
    final, said within a second or two, the same exit 2 naming the address."""
    import socket

    import dask

    _distributed()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "o"
    started = time.monotonic()
    with dask.config.set({"distributed.comm.timeouts.connect": "20s"}):
        code = main(["compress", str(SAMPLES), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
                     "--executor", f"tcp://127.0.0.1:{port}", "--quiet"])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert took < 10, f"{took:.1f} s: the connect timeout waited out"
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert (f"the Dask scheduler at tcp://127.0.0.1:{port}: cannot start: cannot connect to "
            f"tcp://127.0.0.1:{port}: Connection refused") in err, err
    assert [p.name for p in out.iterdir()] == [LOCK_FILE]


@pytest.mark.parametrize("answer", [None, b"HTTP/1.0 400 Bad Request\r\n\r\n"])
def test_a_server_that_is_not_a_dask_scheduler_is_a_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], answer: bytes | None) -> None:
    """A port whose server accepts and never answers hung the run for ever (distributed's
    handshake has no timeout); one that answers as HTTP does was an internal error's
    traceback (a MemoryError: its answer read as a frame's length) a minute later."""
    import socket

    import dask

    _distributed()
    with socket.socket() as server, \
            dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def serve() -> None:
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = server.accept()
                    if answer is not None:
                        conn.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        out = tmp_path / "o"
        codes: list[int] = []
        runner = threading.Thread(target=lambda: codes.append(main([
            "compress", str(SAMPLES), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
            "--executor", f"tcp://127.0.0.1:{port}", "--quiet"])), daemon=True)
        runner.start()
        runner.join(15)
        assert not runner.is_alive(), "the run hung on a server that never answers"
    err = capsys.readouterr().err
    assert codes == [2], err
    assert err.count("\n") == 1 and f"tcp://127.0.0.1:{port}" in err and "Dask scheduler" in err, err
    assert [p.name for p in out.iterdir()] == [LOCK_FILE]


@contextlib.contextmanager
def _fleet(tmp_path: Path, *worker_args: str, env: dict[str, str] | None = None
           ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A `dask scheduler` and one one-thread `dask worker` (with `worker_args`, in `env`) as
    a fleet would run them, the worker joined: (the scheduler's address, its process). Both
    are stopped on the way out, whatever the test did to them."""
    distributed = _distributed()
    info = tmp_path / "scheduler.json"
    cmd = [sys.executable, "-m", "dask"]
    scheduler = subprocess.Popen([*cmd, "scheduler", "--scheduler-file", str(info), "--port", "0",
                                  "--no-dashboard", "--host", "127.0.0.1"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.time() + 60
        while not info.exists() and time.time() < deadline:
            time.sleep(0.1)
        worker = subprocess.Popen([*cmd, "worker", "--scheduler-file", str(info), "--nworkers", "1",
                                   "--nthreads", "1", "--no-dashboard", *worker_args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        address = json.loads(info.read_text())["address"]
        with distributed.Client(address, set_as_default=False) as c:
            c.wait_for_workers(1, timeout=60)
        yield address, scheduler
    finally:
        for proc in (worker, scheduler):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


def test_a_real_dask_scheduler_and_worker(tmp_path: Path) -> None:
    """`dask scheduler` and `dask worker` processes, as a fleet would run them."""
    expected = _reference(tmp_path, SAMPLES)
    with _fleet(tmp_path) as (address, _):
        out, _ = _run(tmp_path, SAMPLES, "fleet", workers=1, executor=address)
    assert _tree(out) == expected


_NO_CAVEMAN = textwrap.dedent("""
    import sys

    class NoCaveman:  # a worker whose environment lacks caveman-batch
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "caveman_batch":
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoCaveman())
""")


def test_a_worker_that_cannot_import_caveman_batch_refuses_the_work(tmp_path: Path) -> None:
    """A `dask worker` whose environment lacks caveman-batch: the run exits 1 at once naming
    it, and the worker lives on. The task named versioned_work, which the worker failed to
    unpickle in its stream from the scheduler: it closed, and the run waited for ever."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NO_CAVEMAN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    outcome: list[BaseException | None] = []
    with _fleet(tmp_path, env=env) as (address, _):
        config = Config([str(SAMPLES)], tmp_path / "out", f"lmdb://{tmp_path}/ccr", workers=1,
                        executor=address)
        runner = threading.Thread(target=lambda: outcome.append(_outcome(config)), daemon=True)
        runner.start()
        runner.join(60)
        assert not runner.is_alive(), "the run hung: its worker closed"
        distributed = _distributed()
        with distributed.Client(address, set_as_default=False) as c:
            assert len(c.nthreads()) == 1  # the worker is still there
    assert outcome and isinstance(outcome[0], UsageError), outcome
    assert "cannot import caveman-batch" in str(outcome[0])
    assert [p.name for p in (tmp_path / "out").iterdir()] == [LOCK_FILE]


def _outcome(config: Config) -> BaseException | None:
    try:
        run(config)
    except Exception as exc:  # (what the test looks at)
        return exc
    return None


SKEWED = """# dask worker --preload: this worker's clock runs 2 days behind (NTP off)
import time
import caveman_batch.ccr as ccr
ccr._now_ms = lambda: time.time_ns() // 1_000_000 - 2 * 86_400_000
"""


def test_records_are_stamped_by_the_runs_clock_not_a_workers(tmp_path: Path) -> None:
    """A `dask worker` on a host whose clock is two days behind: its records are stamped
    by the run's clock, so a `prune --not-seen-for 1d` right after keeps every one (it
    dropped them all, and the manifest named handles nobody could recover)."""
    preload = tmp_path / "skewed.py"
    preload.write_text(SKEWED)
    with _fleet(tmp_path, "--preload", str(preload)) as (address, _):
        began = time.time()
        out, _ = _run(tmp_path, SAMPLES, "fleet", workers=1, executor=address)
    handles = [row["handle"] for row in map(json.loads, (out / "manifest.jsonl").open())
               if row.get("handle")]
    assert handles
    with open_store(f"lmdb://{tmp_path}/ccr-fleet") as store:
        for handle in handles:
            record = ccr.info(store, handle)
            assert record.first_stored >= began - 60 and record.last_seen >= began - 60, handle


def test_a_scheduler_killed_mid_run_fails_the_run_at_once(tmp_path: Path, registry: Path) -> None:
    """`dask scheduler` SIGKILLed after the first batch: the run fails within seconds
    (ExecutorError naming the lost scheduler, exit 2), OUT as the previous run left it; a
    rerun converges. It hung, now and then, for ever: a future of the client's executor
    stayed pending once the client had given up."""
    src, out, store = tmp_path / "registry.jsonl", tmp_path / "out", f"lmdb://{tmp_path}/ccr"
    src.write_bytes(SAMPLES.joinpath("registry.jsonl").read_bytes())
    run(Config([str(src)], out, store, workers=1))
    before = _tree(out)
    src.write_bytes(registry.read_bytes())  # the source changed: a new run is due
    outcome: list[BaseException | None] = []
    killed: list[float] = []
    with _fleet(tmp_path) as (address, scheduler):
        config = Config([str(src)], out, store, workers=1, executor=address)

        def kill_the_scheduler(_summary: Summary) -> None:
            if scheduler.poll() is None:
                scheduler.kill()
                killed.append(time.monotonic())

        def go() -> None:
            try:
                run(config, progress=kill_the_scheduler)
                outcome.append(None)
            except BaseException as exc:  # (what the test looks at)
                outcome.append(exc)

        runner = threading.Thread(target=go, daemon=True)
        runner.start()
        runner.join(90)
        assert not runner.is_alive(), "the run hung once its scheduler was killed"
        took = time.monotonic() - killed[0]
    assert outcome and isinstance(outcome[0], ExecutorError), outcome
    assert outcome[0].exit_code == 2
    # (not "a batch failed: CancelledError: ", as when the client cancelled its futures)
    assert str(outcome[0]).startswith(f"the Dask scheduler at {address}: lost the scheduler"), outcome
    assert took < 10, took  # (the client is looked at every second)
    assert {k: v for k, v in _tree(out).items() if not k.startswith(TMP_DIR)} == before
    run(Config([str(src)], out, store, workers=1, incremental=True))
    assert _tree(out) == _reference(tmp_path, src)


def test_a_scheduler_that_stops_answering_fails_the_run(tmp_path: Path, registry: Path) -> None:
    """`dask scheduler` SIGSTOPped after the first batch (hung: its connections stay open,
    the client "running"): the run fails once the scheduler has not answered within the
    connect timeout (ExecutorError, exit 2), the manifest unpublished. It waited for ever."""
    import dask

    outcome: list[BaseException | None] = []
    with _fleet(tmp_path) as (address, scheduler):
        config = Config([str(registry)], tmp_path / "out", f"lmdb://{tmp_path}/ccr", workers=1,
                        executor=address)

        def stop_the_scheduler(_summary: Summary) -> None:
            if not outcome:
                scheduler.send_signal(signal.SIGSTOP)
                outcome.append(None)

        def go() -> None:
            try:
                run(config, progress=stop_the_scheduler)
            except BaseException as exc:  # (what the test looks at)
                outcome.append(exc)

        try:
            with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
                runner = threading.Thread(target=go, daemon=True)
                runner.start()
                runner.join(30)
                assert not runner.is_alive(), "the run hung once its scheduler stopped answering"
        finally:
            scheduler.send_signal(signal.SIGCONT)
    assert len(outcome) == 2 and isinstance(outcome[1], ExecutorError), outcome
    assert str(outcome[1]).startswith(f"the Dask scheduler at {address}: the scheduler does not "
                                      "answer"), outcome
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_worker_killed_mid_run_is_retried(tmp_path: Path, client: Any, address: str,
                                            registry: Path) -> None:
    """A worker SIGKILLed while it runs a batch: Dask runs that batch again on another, and
    OUT is the same; never more tasks on the scheduler than the window holds (4)."""
    expected = _reference(tmp_path, registry)
    killed: list[int] = []
    most = [0]
    done = threading.Event()

    def killer() -> None:
        while not done.is_set():
            most[0] = max(most[0], client.run_on_scheduler(_our_tasks))
            busy = [w for w, keys in client.processing().items() if keys]
            if busy and not killed:
                pid = client.run(os.getpid, workers=busy[:1])[busy[0]]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.005)

    watcher = threading.Thread(target=killer, daemon=True)
    watcher.start()
    try:
        out, summary = _run(tmp_path, registry, "killed", workers=2, executor=address)
    finally:
        done.set()
        watcher.join(timeout=30)
    assert killed, "no worker was seen running a batch"
    assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == "zombie"
    assert _tree(out) == expected
    assert summary.documents > 5 * 64  # more batches than the window holds
    assert 1 <= most[0] <= 4


def _our_tasks(dask_scheduler: Any) -> int:
    """Our batches the scheduler has not computed yet (a batch whose result the run has read
    may stay on it in memory a moment longer: the client's release reaches it afterwards)."""
    return sum(1 for key, task in dask_scheduler.tasks.items()
               if "loads" in str(key) and task.state not in ("memory", "released",
                                                                      "forgotten", "erred"))


_KILLABLE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from caveman_batch.pipeline import Config, run

    src, out, store, marker = sys.argv[1:]

    def progress(summary):  # after the first batch is published: hold the run open
        if not Path(marker).exists():
            Path(marker).write_text("mid-run")
            time.sleep(600)

    run(Config([src], Path(out), store, workers=2, executor="dask"), progress)
""")


def test_the_parent_killed_mid_run_leaves_out_as_before(tmp_path: Path, registry: Path) -> None:
    """SIGKILL of the parent mid-run: OUT as the previous run left it (the new stream is
    published only whole, the manifest last), its LocalCluster's processes gone with it;
    a rerun finishes the job, with the same OUT as --workers 1."""
    _distributed()
    src = tmp_path / "registry.jsonl"
    src.write_bytes(b"".join(SAMPLES.joinpath("registry.jsonl").read_bytes().splitlines(True)))
    out, store = tmp_path / "o", f"lmdb://{tmp_path}/ccr"
    run(Config([str(src)], out, store, workers=1))
    before = _tree(out)
    src.write_bytes(registry.read_bytes())  # the source changed: a new run is due
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", _KILLABLE, str(src), str(out), store,
                             str(marker)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.stderr.read() if proc.poll() is not None else "no batch in 120 s"
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children  # the LocalCluster's worker processes
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _gone, alive = psutil.wait_procs(children, timeout=30)
    assert alive == []  # the cluster died with its parent
    assert {k: v for k, v in _tree(out).items() if not k.startswith(TMP_DIR)} == before
    first = registry.read_bytes().splitlines()[0]
    with open_store(store) as opened:  # the published batch's originals were committed first
        assert ccr.recover(opened, hashlib.sha256(first).hexdigest()) == first
    run(Config([str(src)], out, store, workers=2, executor="dask"))
    assert _tree(out) == _reference(tmp_path, src)


_NO_DASK = textwrap.dedent("""
    import sys

    class NoDask:  # as if the dask extra were not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("distributed", "dask"):
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoDask())
""")


def test_executor_dask_without_the_extra_is_a_clear_error(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NO_DASK)
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    for spec in ("dask", "tcp://127.0.0.1:8786"):
        proc = subprocess.run([sys.executable, "-m", "caveman_batch", "compress", str(SAMPLES),
                               "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
                               "--executor", spec, "--quiet"],
                              capture_output=True, env=env, timeout=120)
        err = proc.stderr.decode()
        assert proc.returncode == 1, err
        assert "pip install 'caveman-batch[dask]'" in err and "Traceback" not in err
        assert not out.exists()  # refused before anything was written


def test_workers_must_run_the_parents_version() -> None:
    from caveman_batch.catalog import DEFAULT_OPTIONS
    from caveman_batch.pipeline.worker import versioned_work

    raw = SAMPLES.joinpath("registry.jsonl").read_bytes().splitlines()[0]
    assert versioned_work(__version__, DEFAULT_OPTIONS, [raw])[0][2] == hashlib.sha256(raw).hexdigest()
    with pytest.raises(UsageError, match="same version on every worker"):
        versioned_work("0.0.0-other", DEFAULT_OPTIONS, [raw])
