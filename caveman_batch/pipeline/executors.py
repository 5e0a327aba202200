"""The executor seam: where a batch's documents are compressed (`compress --executor`).

    local, 1 worker      Inline       in the parent
    local, N workers     ProcessPool  N forked processes that die with the parent
    dask                 Dask         a LocalCluster of N one-thread worker processes
    dask://HOST:PORT     Dask         the workers of an existing scheduler
    tcp://HOST:PORT

Each runs worker.work on (options, raws, index) and hands back a concurrent.futures Future
of its result (Inline: the result itself), which `result` waits for. The tasks are pure,
bytes in and bytes out, so a task Dask retries after losing its worker is safe; the
parent stays the only writer of the store and OUT, whatever the executor. Each starts
on its first batch: a rerun that reuses everything starts no process and no cluster.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import re
import signal
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final, Protocol

from .. import __version__, tokens
from ..catalog import Options
from ..errors import BackendUnavailableError, ExecutorError, UsageError
from .worker import _worker_init, spooled_work, versioned_work, work

if TYPE_CHECKING:
    import distributed

LOCAL: Final = "local"
DASK_INSTALL: Final = "pip install 'caveman-batch[dask]'"
_SCHEDULER: Final = re.compile(r"(dask|tcp)://([^/\s?#]+)")
_DASK_PORT: Final = 8786
IN_FLIGHT_PER_THREAD: Final = 2  # batches in flight per Dask worker thread (4 and 8 measured no faster)
# The scheduler's HTTP server (health, metrics) starts even without the dashboard, on
# 8787 by default: on a port of its own, so that two runs (or a run and a cluster) do
# not contend for it.
_NO_DASHBOARD: Final = {"dashboard": False, "dashboard_address": ":0"}


class Executor(Protocol):
    @property
    def limit(self) -> int:
        """Batches in flight at most: a few per worker, so memory does not grow with the input."""
        ...

    def submit(self, options: Options, raws: list[bytes], index: bool,
               temps: list[str | None] | None = None
               ) -> Future[list[tuple[Any, ...]]] | list[tuple[Any, ...]]:
        """The batch's results; with `temps` (one per raw, or None), an executor whose
        workers share the parent's file system may write each output to its temp file
        instead of sending it back (worker.spooled_work); the others ignore them."""
        ...

    def result(self, pending: Future[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]: ...

    def shutdown(self) -> None: ...

    @property
    def other_clocks(self) -> bool:
        """Whether its workers may run on other hosts, by other clocks: then the records
        they made are stamped again by the run's own clock (dispatch._settle)."""
        ...


def scheduler_address(spec: str) -> str | None:
    """The Dask scheduler an --executor value names: None for `local`, "" for `dask` (a
    LocalCluster of our own), else tcp://HOST:PORT; a UsageError for anything else, and a
    BackendUnavailableError if it needs Dask and the dask extra is not installed."""
    if spec == LOCAL:
        return None
    if spec == "dask":
        address = ""
    elif (m := _SCHEDULER.fullmatch(spec)) and _port_ok(m.group(2)):
        host = m.group(2)
        address = f"tcp://{host}" if re.search(r":\d+$", host) else f"tcp://{host}:{_DASK_PORT}"
    else:
        raise UsageError(f"--executor {spec!r}: use local, dask (a LocalCluster of --workers "
                         "processes), or dask://HOST:PORT or tcp://HOST:PORT (an existing scheduler)")
    _import_distributed(spec)
    return address


def _port_ok(host: str) -> bool:
    """No port, or one a scheduler can listen on (tcp://h:99999 was tried for 30 s)."""
    port = re.search(r":(\d+)$", host)
    return port is None or 0 < int(port.group(1)) < 65536


def open_executor(spec: str, workers: int) -> Executor:
    """The executor an --executor value names (checked by scheduler_address)."""
    address = scheduler_address(spec)
    if address is None:
        return Inline() if workers == 1 else ProcessPool(workers)
    return Dask(address, workers)


def _import_distributed(spec: str) -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise BackendUnavailableError(f"--executor {spec} needs Dask's distributed, which is not "
                                      f"installed ({exc}); install it with: {DASK_INSTALL}") from exc
    return distributed


class Inline:
    """One worker: the parent compresses each batch as it comes."""

    limit: Final = 2
    other_clocks: Final = False
    # the index's writer builds the tools of the documents it can (indexing.BatchWork's
    # `later`), set by the run when its writer can (IndexBuilder.builds_tools)
    index_builds_tools: bool = False

    def submit(self, options: Options, raws: list[bytes], index: bool,
               temps: list[str | None] | None = None) -> list[tuple[Any, ...]]:
        # in the parent: nothing to spare it
        return work(options, raws, index, later=index and self.index_builds_tools)

    def result(self, pending: Future[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
        return pending.result()

    def shutdown(self) -> None:
        pass


class ProcessPool:
    """The worker processes, started when a batch first has something to compress."""

    other_clocks: Final = False

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.limit = max(2, 2 * workers)
        self.pool: Any = None  # a ProcessPoolExecutor once started
        self.processes: dict[int, Any] = {}  # its workers by pid (the pool forgets a dead one)

    def submit(self, options: Options, raws: list[bytes], index: bool,
               temps: list[str | None] | None = None) -> Future[Any]:
        if self.pool is None:
            from concurrent.futures import (
                ProcessPoolExecutor,  # (multiprocessing: ~30 ms to import)
            )

            if options.count_tokens:
                tokens.warm()  # loaded once here; forked workers inherit it (shared pages)
            self.pool = ProcessPoolExecutor(self.workers, initializer=_worker_init,
                                            initargs=(os.getpid(),))
        with self._named_death():
            if temps is not None and any(temps) and _spool_folder(temps):
                pending = self.pool.submit(spooled_work, options, raws, index, temps)
            else:
                pending = self.pool.submit(work, options, raws, index)
        self.processes.update(getattr(self.pool, "_processes", None) or {})
        return pending

    def result(self, pending: Future[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
        with self._named_death():
            return pending.result()

    @contextlib.contextmanager
    def _named_death(self) -> Iterator[None]:
        """A worker that died (the out-of-memory killer's SIGKILL, most often) breaks the
        pool: ExecutorError naming how it died, not a traceback called a bug (exit 2 all
        the same; nothing naming an uncommitted original was published)."""
        from concurrent.futures.process import BrokenProcessPool

        try:
            yield
        except BrokenProcessPool as exc:
            # the pool's own fix of gh-94777 (CPython 3.11.5): its queue's feeder thread,
            # blocked writing a batch into a pipe no worker reads any more, is let go; before
            # it (Debian 12's 3.11.2) the shutdown below, and the exit, waited for it for ever
            with contextlib.suppress(AttributeError, OSError):
                self.pool._call_queue._reader.close()
            self.pool.shutdown(cancel_futures=True)  # (its workers reaped: their exit codes known)
            codes = {-p.exitcode for p in self.processes.values()
                     if p.exitcode is not None and p.exitcode < 0}
            if len(codes) > 1:  # the pool then terminates the others (SIGTERM)
                codes.discard(signal.SIGTERM)
            how = ", ".join(f"signal {code}" for code in sorted(codes)) or "cause unknown"
            if codes == {signal.SIGKILL}:
                how += ": the out-of-memory killer?"
            raise ExecutorError(f"a worker process died ({how}): nothing published names an "
                                f"uncommitted original; run again") from exc

    def shutdown(self) -> None:
        if self.pool is not None:
            # A pool whose start failed part-way (EMFILE forking its second worker, under
            # a low `ulimit -n`) has a worker its shutdown does not stop: forked, it held
            # the index writer's stdin open, so the writer never saw it closed and the run
            # hung for ever. Every worker started is gone when this returns.
            started = list((getattr(self.pool, "_processes", None) or {}).values())
            self.pool.shutdown(cancel_futures=True)
            for process in started:
                if process.is_alive():
                    process.kill()
                process.join()


def _spool_folder(temps: list[str | None]) -> bool:
    """Make the folder a batch's temp files go in (one per batch: two workers never make
    files in one folder at once, nor while the parent renames files out of it); False if
    it cannot be made (the parent then writes them)."""
    try:
        os.mkdir(os.path.dirname(next(t for t in temps if t)))
    except OSError:
        return False
    return True


def _connect_timeout() -> float:
    """distributed's connect timeout, in seconds (its config: 30 s by default)."""
    import dask
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect")))


def _connect(distributed: Any, address: str) -> distributed.Client:
    """A client of the scheduler at `address`, or TimeoutError past distributed's connect
    timeout: its handshake has none, and a server that accepts and never answers (not a
    Dask scheduler, or one stalled) hung the run for ever. (The client's thread, if stuck,
    is a daemon: it ends with the run.)"""
    timeout = _connect_timeout()
    connected: Future[Any] = Future()

    def connect() -> None:
        try:
            connected.set_result(distributed.Client(address, set_as_default=False))
        except BaseException as exc:  # (handed to the run, without the failed client:
            connected.set_exception(exc.with_traceback(None))  # its __del__ may wait 60 s
        gc.collect()  # to close: here then, not in the run)

    threading.Thread(target=connect, name="dask-connect", daemon=True).start()
    try:
        # a client that is not connected soon may be retrying a refused connection (for the
        # whole connect timeout: 30 s with nothing listening); one probe says whether it is
        # (asked only then: a scheduler logs each probe's connection, closed unanswered)
        with contextlib.suppress(TimeoutError):
            return connected.result(min(_PROBE_AFTER_S, timeout))
        refused = _refused(address, min(_PROBE_S, timeout))
        if refused is not None:
            raise ConnectionRefusedError(f"cannot connect to {address}: {refused} "
                                         "(nothing listens there: is the scheduler running?)")
        return connected.result(timeout + 5)
    except TimeoutError:
        raise TimeoutError(f"no answer in {timeout + 5:g} s (is it a Dask scheduler?)") from None


# how long a client may take to connect before the scheduler's port is probed, and how
# long the probe may take (one that takes longer leaves it to the client, as before)
_PROBE_AFTER_S: Final = 0.5
_PROBE_S: Final = 2.0


def _refused(address: str, timeout: float) -> str | None:
    """Why a TCP connection to `address` (tcp://HOST:PORT) is refused, or None if it is not
    (it connects, or fails otherwise: unreachable, a name not resolved, no answer in
    `timeout`, which the client retries as distributed does). A refusal is final: every
    address the host has answered that nothing listens on the port."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme != "tcp":
        return None
    host, port = parse_host_port(location)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except ConnectionRefusedError as exc:
        return exc.strerror or str(exc)
    except OSError:
        return None


class _Call:
    """A call pickled as the call itself: `pickle.loads` of its bytes, the task a Dask worker
    runs, imports caveman_batch there and makes the call. A worker that cannot import it
    then fails the task with that ImportError; a task naming versioned_work itself failed
    in the worker's stream from the scheduler, which closed the worker (each in turn, the
    whole fleet), and the run waited for ever for a worker."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.fn, self.args

    def dumps(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)


# how often a run waiting for a batch looks whether its Dask client still has a scheduler
_POLL_S: Final = 1.0
# and how often, while no answer comes, it asks the scheduler itself whether it still
# answers (within distributed's connect timeout): one stopped or hung keeps its
# connections open, the client stays "running", and the run waited for ever
_PING_S: Final = 5.0


class Dask:
    """A Dask cluster's workers: a LocalCluster of `workers` one-thread processes of our
    own (address ""), or those of the scheduler at `address`. Tasks are submitted impure
    (each its own key: no hashing of the raws to name them) through the client's
    concurrent.futures executor; a worker lost mid-task has its tasks run again elsewhere
    by the scheduler. The LocalCluster's worker processes exit when the parent does,
    however it ends (distributed's nanny watches the parent's end of a pipe)."""

    # a scheduler's workers may be other hosts: a clock two days behind stamped its records
    # two days old, and a `prune --not-seen-for 1d` dropped them, handles published
    other_clocks: Final = True

    def __init__(self, address: str, workers: int) -> None:
        self.address, self.workers = address, workers
        self.limit = max(2, IN_FLIGHT_PER_THREAD * workers)
        self.cluster: distributed.LocalCluster | None = None
        self.client: distributed.Client | None = None
        self.executor: Any = None  # the client's ClientExecutor once started

    def __str__(self) -> str:
        return f"the Dask scheduler at {self.address}" if self.address else "the Dask LocalCluster"

    def submit(self, options: Options, raws: list[bytes], index: bool,
               temps: list[str | None] | None = None) -> Future[Any]:
        if self.executor is None:  # (its workers may be on other hosts: temps ignored)
            self._start()
        return self.executor.submit(pickle.loads, _Call(versioned_work, __version__, options,
                                                        raws, index).dumps())

    def _start(self) -> None:
        distributed = _import_distributed("dask")
        try:
            if self.address:
                self.client = _connect(distributed, self.address)
                threads = sum(self.client.nthreads().values())
            else:
                self.cluster = distributed.LocalCluster(
                    n_workers=self.workers, threads_per_worker=1, processes=True,
                    dashboard_address=None, scheduler_kwargs=_NO_DASHBOARD)
                self.client = distributed.Client(self.cluster, set_as_default=False)
                threads = self.workers
        except (OSError, TimeoutError) as exc:
            raise ExecutorError(f"{self}: cannot start: {exc}") from exc
        except Exception as exc:  # (a server that is not Dask's: its answer read as a frame)
            raise ExecutorError(f"{self}: cannot start (is it a Dask scheduler?): "
                                f"{type(exc).__name__}: {exc}") from exc
        # a scheduler with no worker yet still gets two batches, run when one joins
        self.limit = max(2, IN_FLIGHT_PER_THREAD * threads)
        self.executor = self.client.get_executor(pure=False)

    def result(self, pending: Future[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
        from concurrent.futures import CancelledError

        import distributed
        from distributed.comm import CommClosedError

        waited = 0.0
        while True:
            try:
                return pending.result(timeout=_POLL_S)
            except TimeoutError as exc:
                if pending.done():  # (the batch's own TimeoutError)
                    raise ExecutorError(f"{self}: a batch failed: TimeoutError: {exc}") from exc
                # reconnecting (every future it had is cancelled), closing, closed: no
                # answer will come (a future of its executor may stay pending for ever:
                # the run hung once its scheduler was killed)
                self._refuse_lost()
                waited += _POLL_S
                if waited % _PING_S == 0:
                    self._refuse_silent()
            except ImportError as exc:  # (raised on the worker, by _Call's pickle.loads)
                raise UsageError(f"{self}: a worker cannot import caveman-batch ({exc}): install "
                                 f"caveman-batch {__version__} on every worker of the cluster"
                                 ) from None
            except (distributed.KilledWorker, CommClosedError, CancelledError, OSError) as exc:
                if isinstance(exc, CancelledError):  # (as the client cancels every future
                    self._refuse_lost()              # when it loses its scheduler)
                raise ExecutorError(f"{self}: a batch failed: {type(exc).__name__}: {exc}"
                                    ) from exc

    def _refuse_lost(self) -> None:
        """ExecutorError if the client has lost its scheduler (its status not "running")."""
        status = getattr(self.client, "status", "running")
        if status != "running":
            raise ExecutorError(f"{self}: lost the scheduler (the client is {status})") from None

    def _refuse_silent(self) -> None:
        """ExecutorError if the scheduler does not answer within the connect timeout."""
        client: Any = self.client
        timeout = _connect_timeout()
        try:
            client.sync(client.scheduler.identity, callback_timeout=timeout)
        except (TimeoutError, OSError) as exc:
            raise ExecutorError(f"{self}: the scheduler does not answer ({exc})") from None

    def shutdown(self) -> None:
        import logging

        if self.executor is not None:
            self.executor.shutdown(wait=False)  # cancels what is still pending
        # closing a client that is reconnecting to a lost scheduler cancels its reconnect,
        # which distributed logs as an ERROR with a traceback: the run has said why it stops
        quiet = [logging.getLogger(name) for name in ("distributed.client", "distributed.utils")]
        levels = [log.level for log in quiet]
        for log in quiet:
            log.setLevel(logging.CRITICAL)
        try:
            if self.client is not None:
                self.client.close()
            if self.cluster is not None:
                self.cluster.close()
        finally:
            for log, level in zip(quiet, levels, strict=True):
                log.setLevel(level)
