"""An audit of the nightly rerun (`compress --incremental`) and of determinism, with real
files and real runs: a source edited with its mtime set back (in the tick after the last
run read it), replaced by a rename with the same size and mtime, an output edited by hand,
a file moved between two SRC folders, JSONL lines inserted, removed and duplicated, a
registry's items reordered, any worker count (and Dask), a run SIGKILLed mid-way; and the
law under all of them: any edits, then an incremental run, give the OUT a full rebuild
gives (into a fresh OUT, and into the same one)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_data.generate import generate_registry
from caveman_batch import fsio
from caveman_batch.pipeline import LOCK_FILE, Config, run

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"
# README: all of OUT is the same for the same input, but the stat cache and the lock file
NOT_COMPARED = {".manifest.stat.json", LOCK_FILE}
SETTLE_NS = 200_000_000  # files settle in 0.2 s here (3 s in a real run): the stat cache holds


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in NOT_COMPARED}


def _catalogs() -> list[bytes]:
    return [p.read_bytes() for p in sorted((SAMPLES / "registry").rglob("*.json"))
            if "_quirks" not in p.parts]


def _changes(path: Path) -> list[tuple[str, dict[str, Any]]]:
    return [(c["change"], c["source"]) for c in map(orjson.loads, path.read_bytes().splitlines())]


class Job:
    """The nightly job: the same SRC into one OUT and store, run after run, in process."""

    def __init__(self, tmp: Path, sources: list[Path], **options: Any) -> None:
        self.tmp, self.sources, self.options = tmp, [str(s) for s in sources], options
        self.out = tmp / "out"

    def run(self, out: Path | None = None, store: str = "ccr", incremental: bool = True,
            **extra: Any) -> Any:
        out = out or self.out
        return run(Config(self.sources, out, f"sqlite:///{self.tmp / store}.db",
                          incremental=incremental, changes=out.with_name(out.name + ".changes"),
                          **{**self.options, **extra}))

    def changes(self, out: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
        out = out or self.out
        return _changes(out.with_name(out.name + ".changes"))

    def stats(self) -> dict[str, Any]:
        return orjson.loads((self.out / ".manifest.stat.json").read_bytes())["stats"]

    def assert_as_full_rebuild(self) -> None:
        """OUT as a full rebuild leaves it: into a fresh OUT (and store), and into a copy of
        the OUT before this run (that one also reports the same changes)."""
        fresh = self.tmp / "fresh"
        shutil.rmtree(fresh, ignore_errors=True)
        self.run(fresh, store="fresh", incremental=False)
        assert _tree(self.out) == _tree(fresh)
        shutil.rmtree(fresh)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsio, "SETTLE_NS", SETTLE_NS)


def _settle() -> None:
    time.sleep(SETTLE_NS / 1e9 + 0.05)


def _tree_job(tmp_path: Path, files: int = 4) -> tuple[Job, Path]:
    src = tmp_path / "src"
    src.mkdir()
    for i, raw in enumerate(_catalogs()[:files]):
        (src / f"c{i}.json").write_bytes(raw)
    return Job(tmp_path, [src]), src


def _same_size_edit(path: Path) -> None:
    """One byte changed, the size kept and the mtime (and atime) set back: only the ctime
    tells, which nothing can set back."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    at = data.index(b" ") if b" " in data else 0
    data[at] = ord("\t") if data[at] == ord(" ") else ord(" ")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_source_edited_right_after_the_run_read_it_mtime_set_back_is_compressed_again(
        tmp_path: Path, settled: None) -> None:
    job, src = _tree_job(tmp_path)
    _settle()
    job.run()
    assert job.run().reused == 4 and len(job.stats()) == 4  # the stat cache holds every file
    _same_size_edit(src / "c1.json")  # in the same second the run read it
    again = job.run()
    assert (again.changes.changed, again.reused) == (1, 3)
    assert job.changes() == [("changed", {"path": f"{src}/c1.json"})]
    job.assert_as_full_rebuild()


def test_a_source_not_settled_when_read_is_left_out_of_the_stat_cache(tmp_path: Path,
                                                                        settled: None) -> None:
    job, src = _tree_job(tmp_path)
    _settle()
    _same_size_edit(src / "c2.json")  # edited just before the run: its ctime is this tick's
    job.run()
    assert sorted(job.stats()) == ["c0.json", "c1.json", "c3.json"]
    _same_size_edit(src / "c2.json")  # within the tick: the ctime may not move, the bytes did
    assert job.run().changes.changed == 1
    job.assert_as_full_rebuild()


def test_a_source_replaced_by_a_rename_with_the_same_size_and_mtime_is_compressed_again(
        tmp_path: Path, settled: None) -> None:
    job, src = _tree_job(tmp_path)
    _settle()
    job.run()
    target = src / "c0.json"
    st = target.stat()
    data = bytearray(target.read_bytes())
    data[data.index(b" ")] = ord("\t")
    other = src / ".incoming"
    other.write_bytes(bytes(data))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(other, target)
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    again = job.run()
    assert (again.changes.changed, again.reused) == (1, 3)
    job.assert_as_full_rebuild()


def test_an_output_edited_by_hand_is_written_again(tmp_path: Path, settled: None) -> None:
    job, src = _tree_job(tmp_path)
    _settle()
    job.run()
    _settle()  # the outputs settled too: the stat cache would hold them
    job.run()
    output = job.out / "c3.json"
    written = output.read_bytes()
    _same_size_edit(output)
    assert output.read_bytes() != written
    again = job.run()
    assert output.read_bytes() == written
    assert again.reused == 3 and again.changes.unchanged == 4  # compressed again, as it was
    job.assert_as_full_rebuild()


def test_a_file_moved_between_two_src_folders_is_removed_there_and_added_here(
        tmp_path: Path, settled: None) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    raws = _catalogs()
    for i in range(3):
        (one / f"a{i}.json").write_bytes(raws[i])
        (two / f"b{i}.json").write_bytes(raws[i + 3])
    job = Job(tmp_path, [one, two])
    _settle()
    job.run()
    os.rename(one / "a1.json", two / "a1.json")
    again = job.run()
    assert (again.changes.added, again.changes.removed, again.changes.unchanged) == (1, 1, 5)
    assert again.changes.outputs_deleted == 1 and not (job.out / "one" / "a1.json").exists()
    assert job.changes() == [("removed", {"path": f"{one}/a1.json"}),
                             ("added", {"path": f"{two}/a1.json"})]
    job.assert_as_full_rebuild()


def _lines() -> list[bytes]:
    return (SAMPLES / "registry.jsonl").read_bytes().splitlines(keepends=True)[:6]


@pytest.mark.parametrize(("edit", "expected"), [
    # a line inserted: the lines after it moved, the same documents
    (lambda L: L[:2] + [b'{"name":"new","tools":[]}\n'] + L[2:], [("added", 3)]),
    (lambda L: L[:1] + L[2:], [("removed", 2)]),
    # a line duplicated: the copy is the one added (its twin pairs by content first)
    (lambda L: L[:4] + L[3:], [("added", 5)]),
    # a line edited in place, with one removed before it: changed, whatever moved
    (lambda L: L[1:3] + [L[3].replace(b'"', b' "', 1)] + L[4:], [("removed", 1), ("changed", 3)]),
    # two lines swapped: each the same document, moved
    (lambda L: [L[4]] + L[1:4] + [L[0]] + L[5:], []),
    # the lines before one reversed, and it edited in place: changed (not removed, added)
    (lambda L: L[2::-1] + [L[3].replace(b'"', b' "', 1)] + L[4:], [("changed", 4)]),
    (lambda L: [L[1], L[0], L[2].replace(b'"', b' "', 1)] + L[3:], [("changed", 3)]),
], ids=["insert", "remove", "duplicate", "edit-after-removal", "swap", "edit-after-reversal",
        "edit-after-swap"])
def test_jsonl_changes_pair_lines_by_content_then_by_where_they_lie(
        tmp_path: Path, edit: Any, expected: list[tuple[str, int]]) -> None:
    source = tmp_path / "r.jsonl"
    source.write_bytes(b"".join(_lines()))
    job = Job(tmp_path, [source])
    job.run()
    source.write_bytes(b"".join(edit(_lines())))
    job.run()
    path = str(source)
    # (a removed line is named where it was, an added or changed one where it is)
    assert job.changes() == [(change, {"path": path, "line": at}) for change, at in expected]
    job.assert_as_full_rebuild()


def _registry(items: list[bytes]) -> bytes:
    return b'{"servers": [\n' + b",\n".join(items) + b"\n]}\n"


def test_a_registry_whose_items_are_reordered_is_the_same_documents_in_a_new_order(
        tmp_path: Path) -> None:
    items = [raw.strip() for raw in _catalogs()[:4]]
    source = tmp_path / "registry.json"
    source.write_bytes(_registry(items))
    job = Job(tmp_path, [source])
    job.run()
    source.write_bytes(_registry([items[2], items[0], items[3], items[1]]))
    again = job.run()
    assert (again.reused, again.changes.unchanged, job.changes()) == (4, 4, [])
    job.assert_as_full_rebuild()


def test_a_registry_reordered_with_an_item_edited_in_place_says_it_changed(tmp_path: Path) -> None:
    """A registry sorted anew each night (by popularity, say), one server updated: the items
    that moved are the same, the one edited where it lies is changed, old handle to new."""
    items = [raw.strip() for raw in _catalogs()[:5]]
    source = tmp_path / "registry.json"
    source.write_bytes(_registry(items))
    job = Job(tmp_path, [source])
    job.run()
    edited = items[4].replace(b'"', b' "', 1)
    source.write_bytes(_registry([items[3], items[1], items[0], items[2], edited]))
    again = job.run()
    assert (again.changes.changed, again.changes.unchanged) == (1, 4)
    assert job.changes() == [("changed", {"path": str(source), "item": 4})]
    job.assert_as_full_rebuild()


# -- real subprocesses: worker counts, Dask, SIGKILL -------------------------------------


def _cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "caveman_batch", "compress", *map(str, args),
                           "--quiet"], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def _mixed_sources(tmp_path: Path) -> list[str]:
    """A tree (quirks and an oversize file among them), a JSONL and a registry array."""
    generate_registry(tmp_path / "tree", seed=11, servers=12, oversize_bytes=200_000,
                      jsonl=tmp_path / "all.jsonl", array=tmp_path / "all.json")
    return ["tree", "all.jsonl", "all.json", "--max-bytes", "150000"]


def test_any_worker_count_gives_a_byte_identical_out(tmp_path: Path) -> None:
    sources = _mixed_sources(tmp_path)
    for workers in (1, 2, 4):
        done = _cli(*sources, "-o", f"w{workers}", "--store", f"sqlite:///{tmp_path}/w{workers}.db",
                    "--workers", str(workers), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert _tree(tmp_path / "w1") == _tree(tmp_path / "w2") == _tree(tmp_path / "w4")
    assert (tmp_path / "w1" / "tree").is_dir()


def test_dask_gives_the_out_of_a_local_run(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    sources = _mixed_sources(tmp_path)
    for name, executor in (("local", "local"), ("dask", "dask")):
        done = _cli(*sources, "-o", name, "--store", f"sqlite:///{tmp_path}/{name}.db",
                    "--workers", "2", "--executor", executor, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert _tree(tmp_path / "local") == _tree(tmp_path / "dask")


def _killed_mid_way(tmp_path: Path, args: list[str]) -> int:
    """Starts the run, SIGKILLs it (and its workers) once it has published some outputs but
    not its manifest: how many outputs its journal named by then."""
    proc = subprocess.Popen([sys.executable, "-m", "caveman_batch", "compress", *args, "--quiet"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    journal = tmp_path / "out" / ".manifest.pending.jsonl"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.is_file() and journal.stat().st_size > 2000:
                break
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    return len(journal.read_bytes().splitlines())


def test_an_incremental_rerun_after_a_sigkill_mid_way_ends_as_a_clean_full_run(
        tmp_path: Path) -> None:
    generate_registry(tmp_path / "tree", seed=5, servers=60, target_bytes=12_000_000,
                      oversize_bytes=0)
    args = ["tree", "-o", "out", "--store", f"sqlite:///{tmp_path}/ccr.db", "--workers", "2"]
    published = _killed_mid_way(tmp_path, args)
    assert published > 0 and not (tmp_path / "out" / "manifest.jsonl").exists()
    again = _cli(*args, "--incremental", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    clean = _cli("tree", "-o", "clean", "--store", f"sqlite:///{tmp_path}/clean.db", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert (tmp_path / "out" / "manifest.jsonl").read_bytes() == \
        (tmp_path / "clean" / "manifest.jsonl").read_bytes()
    assert _tree(tmp_path / "out") == _tree(tmp_path / "clean")
    assert not (tmp_path / "out" / ".caveman-tmp").exists()


# -- the law: any edits, then an incremental run == a full rebuild -----------------------

_CATALOGS = _catalogs()
_LINES = _lines()

_edits = st.lists(st.one_of(
    st.tuples(st.just("file"), st.integers(0, 5), st.integers(0, len(_CATALOGS) - 1)),
    st.tuples(st.just("delete-file"), st.integers(0, 5), st.just(0)),
    st.tuples(st.just("same-size"), st.integers(0, 5), st.just(0)),
    st.tuples(st.just("move"), st.integers(0, 5), st.just(0)),
    st.tuples(st.just("insert-line"), st.integers(0, 8), st.integers(0, len(_LINES) - 1)),
    st.tuples(st.just("delete-line"), st.integers(0, 8), st.just(0)),
    st.tuples(st.just("duplicate-line"), st.integers(0, 8), st.just(0)),
    st.tuples(st.just("swap-items"), st.integers(0, 8), st.integers(0, 8)),
    st.tuples(st.just("edit-output"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("delete-output"), st.integers(0, 20), st.just(0)),
), min_size=1, max_size=4)


class _Sources:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders = [root / "a", root / "b"]
        self.lines = list(_LINES)
        self.items = [raw.strip() for raw in _CATALOGS[:3]]
        shutil.rmtree(root, ignore_errors=True)
        for folder in self.folders:
            folder.mkdir(parents=True)
        for i in range(4):
            (self.folders[i % 2] / f"c{i}.json").write_bytes(_CATALOGS[i])
        self.write()

    @property
    def paths(self) -> list[Path]:
        return [*self.folders, self.root / "r.jsonl", self.root / "reg.json"]

    def write(self) -> None:
        (self.root / "r.jsonl").write_bytes(b"".join(self.lines))
        (self.root / "reg.json").write_bytes(_registry(self.items))

    def files(self) -> list[Path]:
        return sorted(p for folder in self.folders for p in folder.glob("*.json"))

    def edit(self, what: str, at: int, arg: int, out: Path) -> None:
        files = self.files()
        outputs = sorted(p for p in out.rglob("*.json*") if p.is_file() and not p.name.startswith("."))
        if what == "file":
            (self.folders[at % 2] / f"c{at}.json").write_bytes(_CATALOGS[arg])
        elif what in ("delete-file", "same-size", "move") and files:
            path = files[at % len(files)]
            if what == "delete-file":
                path.unlink()
            elif what == "same-size":
                _same_size_edit(path)
            elif not (other := self.folders[path.parent == self.folders[0]] / path.name).exists():
                os.rename(path, other)
        elif what == "insert-line":
            self.lines.insert(at % (len(self.lines) + 1), _LINES[arg])
        elif what == "delete-line" and self.lines:
            del self.lines[at % len(self.lines)]
        elif what == "duplicate-line" and self.lines:
            self.lines.insert(at % len(self.lines), self.lines[at % len(self.lines)])
        elif what == "swap-items":
            i, j = at % len(self.items), arg % len(self.items)
            self.items[i], self.items[j] = self.items[j], self.items[i]
        elif what == "edit-output" and outputs:
            _same_size_edit(outputs[at % len(outputs)])
        elif what == "delete-output" and outputs:
            outputs[at % len(outputs)].unlink()
        self.write()


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rounds=st.lists(_edits, min_size=1, max_size=3))
def test_any_edits_then_an_incremental_run_give_the_out_of_a_full_rebuild(
        tmp_path: Path, rounds: list[list[tuple[str, int, int]]]) -> None:
    root = tmp_path / "law"
    shutil.rmtree(root, ignore_errors=True)
    sources = _Sources(root / "src")
    job = Job(root, sources.paths)
    job.run()
    for edits in rounds:
        for what, at, arg in edits:
            sources.edit(what, at, arg, job.out)
        before = root / "before"
        shutil.copytree(job.out, before)
        job.run()
        job.run(before, incremental=False)  # a full rebuild into the OUT as it was
        assert _tree(job.out) == _tree(before)
        assert job.changes() == job.changes(before)
        shutil.rmtree(before)
        job.assert_as_full_rebuild()
