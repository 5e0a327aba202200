"""The worker: pure, bytes in, bytes and numbers out. What every executor runs, in the
parent, a forked process or a Dask worker (which imports caveman_batch to run it)."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from typing import Any, Final

from .. import __version__, ccr, fsio
from ..catalog import Options, compress, compress_located
from ..errors import UsageError


def _worker_init(parent: int) -> None:
    """Die with the parent: a SIGKILLed run must not leave workers behind. Deaf to Ctrl-C,
    which reaches the whole process group: the parent stops and shuts the pool down (a
    worker interrupted as it sent a result left half of it in the pool's pipe, and the
    parent's shutdown waited for the rest forever; an idle one printed a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took hold
        os._exit(1)

    def watch() -> None:  # elsewhere (and as a backstop), poll for the parent
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


# What a worker sends back per document besides the output bytes and the stored record:
# a flat tuple (with a dict and a dataclass per document, pickling and unpickling a
# bench_data result took 21 us; now 10, mostly the bytes themselves): the fields of
# CompressResult the parent's manifest row uses, then out_sha256.
_RESULT_FIELDS: Final = ("status", "broken", "reason", "shape", "tools", "bytes_before",
                         "bytes_after", "tokens_before", "tokens_after")


def work(options: Options, raws: list[bytes], index: bool = False,
         later: bool = False) -> list[tuple[Any, ...]]:
    """Compress, hash and zstd each document: (output, result fields + the output's sha256,
    then the original's digest, record value and length; with `index`, what the index
    needs of its tools, see indexing.BatchWork, with `later` some left for its writer)."""
    out: list[tuple[Any, ...]] = []
    tools = None
    if index:
        from .. import indexing  # only a run with --index pays its import

        tools = indexing.BatchWork(later)
    for raw in raws:
        if index:  # and where the C path found the tools: no second walk for the index
            data, result, located = compress_located(raw, options)
        else:
            (data, result), located = compress(raw, options), None
        fields = (*(getattr(result, name) for name in _RESULT_FIELDS),
                  hashlib.sha256(data).hexdigest())  # here, not in the busy parent
        record = ccr.prepare(raw, result.content_type)
        out.append((data, fields, record.digest, record.value, record.original_length))
        if tools is not None:
            tools.add(raw if not result.broken else None, data, record.digest, located)
    if tools is not None:
        out = [(*done, found) for done, found in zip(out, tools.finish())]
    return out


def spooled_work(options: Options, raws: list[bytes], index: bool,
                 temps: list[str | None]) -> list[tuple[Any, ...]]:
    """`work`, each output with a temp path (a catalog file's, for a local process pool:
    the parent's own file system) written there, not sent back: the temp file's path in
    place of the bytes. The parent renames it into OUT once its original is committed, as
    it would its own temp file; a tree's thousands of small files are then made in the
    workers, not one after another in the parent. An output that cannot be written here
    goes back as bytes: the parent writes it, and names the file if it cannot either."""
    done = work(options, raws, index)
    for i, temp in enumerate(temps):
        if temp is None:
            continue
        try:
            fsio.write_new(temp, done[i][0])
        except OSError:
            continue
        done[i] = (temp, *done[i][1:])
    return done


def versioned_work(version: str, options: Options, raws: list[bytes],
                   index: bool = False) -> list[tuple[Any, ...]]:
    """`work` on a worker the parent did not start (a Dask cluster's): only if it runs the
    parent's version, since OUT must not depend on which worker compressed what."""
    if version != __version__:
        raise UsageError(f"a Dask worker runs caveman-batch {__version__}, this run {version}: "
                         "install the same version on every worker of the cluster")
    return work(options, raws, index)
