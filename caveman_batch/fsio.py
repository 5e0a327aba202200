"""Atomic publication of files (a reader sees the old file or the whole new one), and what
tells a file unchanged without reading it."""

from __future__ import annotations

import contextlib
import os
import select
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from . import _accel
from .errors import OutputError


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new(path: str, data: bytes) -> None:
    """`data` into a file of ours, made or emptied (as open(path, "wb") would, without a
    buffered file object: a tree's outputs are thousands of small files)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


class ReaderGone(Exception):
    """Standard output's reader went away (`| head`): nothing more to write to (exit 0).
    Not an OSError: typer's own handler makes a BrokenPipeError exit 1."""


def write_stdout(data: bytes) -> None:
    """All of `data` on standard output, flushed, or the write's error. Unbuffered
    (PYTHONUNBUFFERED=1, python -u: common in containers), sys.stdout.buffer is the raw file,
    whose write() may take only part of it (a disk that fills, a file size limit) and says
    so only by its count: a recovered original was cut short, exit 0. The rest is written
    until it is all in (the next write raises: ENOSPC, EFBIG)."""
    out = sys.stdout.buffer
    view = memoryview(data)
    try:
        sys.stdout.flush()  # (what the text layer holds goes first)
        while view:
            written = out.write(view)
            if written is None:  # a non-blocking stream that cannot take more now
                select.select([], [out], [])
                continue
            view = view[written:]
        out.flush()
    except BrokenPipeError:
        raise ReaderGone from None


@contextlib.contextmanager
def _temp_beside(path: Path, *, durable: bool, new_mode: int | None) -> Iterator[tuple[BinaryIO, Path]]:
    """A temp file beside `path` and its name: once the block succeeds, flushed (fsync'd if
    `durable`) and given the mode of the regular file at `path` (a new one: `new_mode`,
    default 0666 less the umask, as open() would); removed if anything fails. OutputError
    naming `path`."""
    mode = _mode_of(path)
    if mode is None:
        mode = 0o666 & ~_umask() if new_mode is None else new_mode
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh, Path(tmp)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
        raise


@contextlib.contextmanager
def atomic_writer(path: Path, *, durable: bool = True, new_mode: int | None = None) -> Iterator[BinaryIO]:
    """Write to a temp file beside `path`; rename over it only if the block succeeds. The
    file keeps the mode of the regular file it replaces; a new one gets `new_mode` (default:
    0666 less the umask, as open() would)."""
    path = Path(path)
    with _temp_beside(path, durable=durable, new_mode=new_mode) as (fh, tmp):
        yield fh
    try:
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def _mode_of(path: Path) -> int | None:
    """The permission bits of the regular file at `path` (a symlink followed), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None


def atomic_write(path: Path, data: bytes, *, durable: bool = True, new_mode: int | None = None) -> None:
    with atomic_writer(path, durable=durable, new_mode=new_mode) as fh:
        fh.write(data)


def staged_write(path: Path, data: bytes) -> Path:
    """`data` whole in a temp file beside `path` (fsync'd, with the mode `path` will have),
    for publish_staged to rename over it later: what can fail for want of space fails
    here, before whatever must come first is published. OutputError naming `path` (the
    temp file removed)."""
    with _temp_beside(Path(path), durable=True, new_mode=None) as (fh, tmp):
        fh.write(data)
    return tmp


def publish_staged(tmp: Path, path: Path) -> None:
    """A staged_write's temp file renamed over `path`, the rename fsync'd."""
    try:
        os.replace(tmp, path)
        fsync_dir(Path(path).parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def regular_or_absent(path: Path) -> bool:
    """Whether `path` (a symlink followed) is a regular file or nothing: what may be
    replaced by rename. A FIFO, a device or /dev/stdout is written into instead (a rename
    would put a regular file in its place: as root, over /dev/null for the whole machine)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return True  # (the write says why)


def write_target(path: Path, data: bytes) -> None:
    """What `-o FILE` does with the user's FILE. Something that is not a regular file (a FIFO,
    a device, a terminal, /proc/self/fd/1) is written into as it is: replacing it would put a
    regular file in its place (as root, even over /dev/null). A regular file is replaced
    atomically, its mode kept; a new one is 0600, as the store's files (a recovered original
    is no more readable than the store it came from). A symlink to a regular file stays a
    link, its file replaced; our own standard output (`/dev/stdout` when it is a file: `> out`,
    `>> log`) is written to as standard output is, never replaced (as root that replaced
    /dev/stdout itself, and the bytes never reached the file)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    if st is not None and stat.S_ISREG(st.st_mode):
        if _is_stdout(st):  # -o /dev/stdout with standard output a file (> out, >> log)
            write_stdout(data)
            return
        real = os.path.realpath(path)  # a symlink stays one: its file takes the bytes
        if _same_file(real, st):
            atomic_write(Path(real), data, new_mode=0o600)
            return
        # else a link of /proc naming an open file by no path (deleted): written into
    elif st is None or stat.S_ISDIR(st.st_mode):
        atomic_write(path, data, new_mode=0o600)  # (a folder: refused by the rename)
        return
    try:
        trunc = os.O_TRUNC if st is not None and stat.S_ISREG(st.st_mode) else 0
        with open(os.open(path, os.O_WRONLY | os.O_CLOEXEC | trunc), "wb") as fh:  # no O_CREAT: never a new file
            fh.write(data)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def _is_stdout(st: os.stat_result) -> bool:
    if sys.stdout is None:  # (closed: its fd 1 may be any file opened since)
        return False
    try:
        return os.path.samestat(st, os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):
        return False


def _same_file(path: str, st: os.stat_result) -> bool:
    try:
        return os.path.samestat(st, os.stat(path))
    except OSError:
        return False


_UMASK: int | None = None


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        current = os.umask(0)
        os.umask(current)
        _UMASK = current
    return _UMASK


# -- a file unchanged, told by its metadata (the stat cache of `compress --incremental`) ------


def identity(st: os.stat_result) -> list[int]:
    """Device, inode, size, mtime and ctime (ns) of a file. Any write, truncation, rename
    into place, chmod or utime() moves its ctime to the clock's now, and no call sets a
    ctime back, so a file whose identity is unchanged since a settled one (below) is the
    same file with the same bytes (as git's index, or make, assumes with less)."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def identities(paths: list[str]) -> list[list[int] | None]:
    """identity(os.stat(path)) of each path (symlinks followed), None where it cannot be
    stat'ed. With the C accelerator the stats run with the GIL released, all in one call:
    on a thread, a tree's tens of thousands of them go on beside the caller's Python."""
    fast = _accel.fastwalk
    if fast is not None:
        got: list[list[int] | None] | None = fast.identities(paths)
        if got is not None:
            return got
    return [_identity_or_none(path) for path in paths]


def _identity_or_none(path: str) -> list[int] | None:
    try:
        return identity(os.stat(path))
    except (OSError, ValueError):  # (ValueError: a NUL in the name)
        return None


# A change in the same clock tick as the ctime already seen would leave the identity as it
# was: a file's identity is worth keeping only once its ctime is this much older than the
# clock (well over the coarsest tick of Linux file systems, 2 s on FAT, and small clock
# steps). A file changed since is read (and hashed) by the next run instead.
SETTLE_NS: Final = 3_000_000_000


def settled_identity(st: os.stat_result, now_ns: int | None = None) -> list[int] | None:
    """identity(st) if its ctime has settled (see SETTLE_NS), else None."""
    now = time.time_ns() if now_ns is None else now_ns
    return identity(st) if st.st_ctime_ns + SETTLE_NS <= now else None


def fs_now_ns(folder: Path) -> int:
    """The current time of folder's file system clock (what it stamps a new file with)."""
    fd, name = tempfile.mkstemp(prefix=".clock-", dir=folder)
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        os.unlink(name)


def boot_id() -> str | None:
    """This boot's id (Linux), or None: what a file's identity is worth only within, for a
    file not fsync'd (a power loss can leave its name and size and lose its bytes)."""
    global _BOOT_ID
    if _BOOT_ID is None:
        try:
            _BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip() or ""
        except OSError:
            _BOOT_ID = ""
    return _BOOT_ID or None


_BOOT_ID: str | None = None
