"""_fastwalk.identities (the stat cache's stats, all in one call with the GIL released)
against fsio.identities' pure-Python path, which defines it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from caveman_batch import _accel, fsio

fastwalk = _accel.fastwalk
pytestmark = pytest.mark.skipif(
    fastwalk is None, reason="caveman_batch._fastwalk is not built (python setup.py build_ext "
    "--inplace) or CAVEMAN_PURE_PYTHON is set: nothing to compare")


def _python(paths: list[str]) -> list[list[int] | None]:
    saved = _accel.fastwalk
    _accel.fastwalk = None
    try:
        return fsio.identities(paths)
    finally:
        _accel.fastwalk = saved


def _every_kind(tmp_path: Path) -> list[str]:
    (tmp_path / "file.json").write_bytes(b"{}")
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link.json").symlink_to(tmp_path / "file.json")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone.json")
    odd = os.fsdecode(b"caf\xe9.json")  # not UTF-8: surrogateescape, as a walk names it
    (tmp_path / odd).write_bytes(b"[]")
    return [str(tmp_path / name) for name in
            ("file.json", "empty.json", "folder", "link.json", "dangling.json", "gone.json", odd)] + [
        "", "nul\0inside", str(tmp_path / "file.json" / "below"), str(tmp_path / "lone\ud800.json")]


def test_identities_are_the_python_paths(tmp_path: Path) -> None:
    paths = _every_kind(tmp_path)
    assert fastwalk is not None
    got = fastwalk.identities(paths)
    assert got == _python(paths)
    assert [g is None for g in got] == [False, False, False, False, True, True, False, True, True, True, True]
    st = os.stat(paths[0])
    assert got[0] == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    assert got[3] == got[0]  # a symlink followed
    assert fastwalk.identities([]) == []


def test_a_time_past_int64_nanoseconds_is_left_to_python(tmp_path: Path) -> None:
    late = tmp_path / "late.json"
    late.write_bytes(b"{}")
    try:
        os.utime(late, ns=(0, 9_500_000_000 * 10**9))  # the year 2271
    except (OSError, OverflowError):
        pytest.skip("this file system cannot store that time")
    paths = [str(late), str(tmp_path)]
    assert fastwalk is not None
    assert fastwalk.identities(paths) is None
    assert fsio.identities(paths) == _python(paths)
    assert fsio.identities(paths)[0][3] == 9_500_000_000 * 10**9


def test_bad_arguments_raise() -> None:
    assert fastwalk is not None
    with pytest.raises(TypeError):
        fastwalk.identities(("a", "b"))
    with pytest.raises(TypeError):
        fastwalk.identities(["a", b"b"])


def test_the_stats_run_without_the_gil(tmp_path: Path) -> None:
    """What a thread of the pipeline relies on (incremental.stat_ahead): another thread's
    Python runs while the call stats (a C call that held the GIL would let none run
    between its start and its end)."""
    (tmp_path / "f").write_bytes(b"x")
    paths = [str(tmp_path / "f")] * 200_000
    stamps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            time.sleep(0.0005)
            stamps.append(time.perf_counter())

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        assert fastwalk is not None
        time.sleep(0.01)
        started = time.perf_counter()
        fastwalk.identities(paths)
        ended = time.perf_counter()
    finally:
        stop.set()
        ticker.join()
    margin = (ended - started) / 10
    assert any(started + margin < at < ended - margin for at in stamps)
