"""`compress --index`: the server ids of an incremental run depend on the input and the
previous index only (never on the worker count, the executor or how far dispatch ran
ahead), no two catalogs share one, and every catalog of the input stays searchable."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from caveman_batch.pipeline import Config, run, sources
from caveman_batch.toolsearch import ToolDoc, ToolIndex

LONG = " This sentence explains the background at length and states nothing at all." * 3


def _line(label: str | None, tool: str, extra: str = "") -> bytes:
    """One JSONL catalog: its wrapper's "server" (if any) and one tool of its own."""
    doc: dict[str, Any] = {"tools": [{
        "name": tool, "description": f"Does {tool.replace('_', ' ')} things.{extra}{LONG}",
        "inputSchema": {"type": "object", "properties": {
            "id": {"type": "string", "description": "The thing to act on."}}}}]}
    if label is not None:
        doc = {"server": label, **doc}
    return json.dumps(doc).encode()


def _write_jsonl(path: Path, lines: list[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _run(root: Path, src: Path, workers: int) -> None:
    run(Config([str(src)], root / "out", f"lmdb://{root}/ccr", workers=workers,
               incremental=True, index=root / "idx.db", embed=False))


def _rows(root: Path) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """The index as a search sees it: servers with their catalogs' sha256, and each tool's
    (server, name, handle)."""
    with ToolIndex.open(root / "idx.db", create=False) as index:
        return index.servers(), [(d.server, d.name, d.handle) for d in index.docs()]


def _names(root: Path) -> set[str]:
    return {name for _, name, _ in _rows(root)[1]}


def _unique_servers(root: Path) -> None:
    servers, docs = _rows(root)
    assert {d[0] for d in docs} == set(servers)


def test_a_relabelled_line_takes_the_same_id_whatever_the_worker_count(tmp_path: Path) -> None:
    """Line 1 was "a" and becomes "b" while line 150 still is "b" (reused): dispatch runs
    up to 4 batches of 64 ahead with 2 workers, 0 inline. The index must be the same, and
    line 150's catalog must stay searchable (its tools not replaced by line 1's)."""
    labels = ["a"] + [f"s{i:03}" for i in range(2, 150)] + ["b"] + [f"s{i:03}" for i in range(151, 161)]
    lines = [_line(label, f"tool_{i:03}") for i, label in enumerate(labels, 1)]
    roots = {workers: tmp_path / f"w{workers}" for workers in (1, 2)}
    for workers, root in roots.items():
        src = _write_jsonl(root / "src" / "reg.jsonl", lines)
        _run(root, src, workers)
        lines_now = [_line("b", "tool_001", extra=" Renamed."), *lines[1:]]
        _write_jsonl(src, lines_now)
        _run(root, src, workers)
    one, two = _rows(roots[1]), _rows(roots[2])
    assert one == two
    every_tool = {f"tool_{i:03}" for i in range(1, 161)}
    assert _names(roots[1]) == every_tool
    _unique_servers(roots[1])
    assert one[0]["reg/b"] is not None and "reg/b@1" in one[0]


def test_a_catalog_kept_with_its_file_is_not_replaced_by_an_earlier_one(tmp_path: Path) -> None:
    """A file reused whole (keep_file) holds "reg/b"; a line of a JSONL earlier in the input
    is relabelled to the same id. The kept file's catalog stays searchable, in this run and
    in the next (its file is not marked wholly indexed while its catalog is not)."""
    root = tmp_path
    src = root / "src"
    lines = [_line("a", "tool_000")] + [_line(f"s{i:03}", f"tool_{i:03}") for i in range(1, 100)]
    reg = _write_jsonl(src / "reg.jsonl", lines)
    (src / "reg").mkdir()
    (src / "reg" / "b.json").write_bytes(_line(None, "kept_tool"))
    _run(root, src, 1)
    assert "reg/b" in _rows(root)[0]
    _write_jsonl(reg, [_line("b", "tool_000", extra=" Renamed."), *lines[1:]])
    for _ in range(2):  # the run that relabels, then one over the same input
        _run(root, src, 1)
        assert _names(root) == {"kept_tool"} | {f"tool_{i:03}" for i in range(100)}
        _unique_servers(root)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copytree(src, fresh / "src")
    _run(fresh, fresh / "src", 2)
    assert _names(fresh) == _names(root)


# -- the property: random registries, random label changes --------------------------------

LABELS = st.sampled_from(["a", "b", "c", None])
# a line of the second input: an old line (its index, its label changed or not, its tool's
# description changed or not) or a new one (its label)
_OLD = st.tuples(st.just("old"), st.integers(0, 7), st.one_of(st.just("same"), LABELS),
                 st.booleans())
_NEW = st.tuples(st.just("new"), LABELS)


def _second(first: list[tuple[str | None, str]],
            plan: list[tuple[Any, ...]]) -> list[tuple[str | None, str, str]]:
    lines = []
    for n, step in enumerate(plan):
        if step[0] == "new":
            lines.append((step[1], f"new_{n}", ""))
            continue
        _, at, label, changed = step
        old_label, tool = first[at % len(first)]
        lines.append((old_label if label == "same" else label, tool, " Changed." if changed else ""))
    return lines


def _scenario(root: Path, first: list[tuple[str | None, str]],
              second: list[tuple[str | None, str, str]], file_changes: bool, workers: int,
              batch_docs: int) -> tuple[Any, dict[str, bytes]]:
    """Two incremental runs at `root` (a JSONL registry beside a catalog file whose id,
    "reg/a", a line labelled "a" wants too), the second over the changed input; the index
    rows (server, name, handle) and every file of OUT but the stat cache."""
    shutil.rmtree(root, ignore_errors=True)
    src = root / "src"
    (src / "reg").mkdir(parents=True)
    (src / "reg" / "a.json").write_bytes(_line(None, "file_tool"))
    reg = _write_jsonl(src / "reg.jsonl", [_line(label, tool) for label, tool in first])
    with pytest.MonkeyPatch.context() as mp:  # batches of a few documents: dispatch runs ahead
        mp.setattr(sources, "BATCH_DOCS", batch_docs)
        _run(root, src, workers)
        _write_jsonl(reg, [_line(label, tool, extra) for label, tool, extra in second])
        if file_changes:
            (src / "reg" / "a.json").write_bytes(_line(None, "file_tool", " Changed."))
        _run(root, src, workers)
    out = {str(p.relative_to(root / "out")): p.read_bytes()
           for p in sorted((root / "out").rglob("*")) if p.is_file() and "stat" not in p.name}
    return _rows(root), out


@settings(derandomize=True, database=None, deadline=None, max_examples=8,
          suppress_health_check=[HealthCheck.too_slow])
@given(first=st.lists(st.tuples(LABELS, st.just("")), min_size=1, max_size=8),
       plan=st.lists(st.one_of(_OLD, _NEW), min_size=1, max_size=8), file_changes=st.booleans())
@example(first=[("a", "")] + [(None, "")] * 4 + [("b", "")],  # the reviewer's case, in small
         plan=[("old", 0, "b", False), *[("old", i, "same", False) for i in range(1, 6)]],
         file_changes=False)
def test_ids_depend_on_the_input_only_and_every_catalog_is_found(
        first: list[tuple[str | None, str]], plan: list[tuple[Any, ...]],
        file_changes: bool) -> None:
    first = [(label, f"tool_{n}") for n, (label, _) in enumerate(first)]
    second = _second(first, plan)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"  # (the same path for both: the manifest names the sources)
        one = _scenario(root, first, second, file_changes, workers=1, batch_docs=64)
        two = _scenario(root, first, second, file_changes, workers=2, batch_docs=2)
    assert one == two
    servers, docs = one[0]
    wanted = sorted(["file_tool", *(tool for _, tool, _ in second)])
    assert sorted(name for _, name, _ in docs) == wanted  # every catalog, once
    assert len(servers) == len(wanted) == len({server for server, _, _ in docs})


def test_an_id_given_to_another_source_takes_its_file_out_of_the_wholly_indexed(
        tmp_path: Path) -> None:
    """Until a run's end writes the `files` table anew, a crash must not leave a file there
    whose catalog's id went to another source's catalog: a rerun would reuse that file
    whole, and its catalog would be missing from search for good. Nor one whose catalog was
    rewritten from the same source (the file changed: put back as it was, a rerun would
    reuse it whole with the changed catalog's tools)."""
    def tool(server: str, name: str) -> ToolDoc:
        return ToolDoc(server, name, None, json.dumps({"name": name}), {"name": name})

    files = {"f.json": "3" * 64, "g.json": "7" * 64, "r.jsonl": "4" * 64}
    with ToolIndex.open(tmp_path / "idx.db") as index:
        index.apply([("reg/b", [tool("reg/b", "kept_tool")], "1" * 64, '{"path":"f.json"}', "f.json"),
                     ("reg/s", [tool("reg/s", "other")], "2" * 64, '{"line":1,"path":"r.jsonl"}',
                      "r.jsonl")], files=files)
        index.apply([("reg/s", [tool("reg/s", "other_again")], "5" * 64,
                      '{"line":1,"path":"r.jsonl"}', "r.jsonl")])  # the same source, changed
        assert index.files() == {"f.json": "3" * 64, "g.json": "7" * 64}
        index.apply([], files=files)
        index.apply([("reg/b", [tool("reg/b", "new_tool")], "6" * 64,
                      '{"line":2,"path":"r.jsonl"}', "r.jsonl")])
        assert index.files() == {"g.json": "7" * 64}


def test_catalogs_read_from_stdin_keep_their_ids_too(tmp_path: Path) -> None:
    """`compress -` (JSONL on stdin), through the CLI: a line relabelled to the id of a
    later line that is reused takes "@line", and the reused line's tools stay."""
    lines = [_line("a", "tool_1"), *(_line(f"s{i}", f"tool_{i}") for i in range(2, 6)),
             _line("b", "tool_6")]
    args = [sys.executable, "-m", "caveman_batch", "compress", "-", "-o", str(tmp_path / "out"),
            "--store", f"lmdb://{tmp_path}/ccr", "--index", str(tmp_path / "idx.db"),
            "--incremental", "--no-embed", "--quiet"]
    for version in (lines, [_line("b", "tool_1", extra=" Renamed."), *lines[1:]]):
        done = subprocess.run(args, input=b"".join(line + b"\n" for line in version),
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr
    servers, docs = _rows(tmp_path)
    assert sorted(s for s in servers if s.startswith("stdin/b")) == ["stdin/b", "stdin/b@1"]
    assert sorted((server, name) for server, name, _ in docs if server.startswith("stdin/b")) == [
        ("stdin/b", "tool_6"), ("stdin/b@1", "tool_1")]


@pytest.mark.parametrize("second", [
    [("b", "tool_0", ""), ("b", "tool_1", "")],  # a relabelled line wants the id of the next
    [("a", "tool_0", ""), ("b", "tool_1", " Changed."), (None, "tool_2", ""), ("a", "new", "")],
])
def test_a_run_without_incremental_keeps_the_ids_of_the_catalogs_indexed_as_they_are(
        tmp_path: Path, second: list[tuple[str | None, str, str]]) -> None:
    """Ids depend on the input and the previous index, not on --incremental: the same input
    again, every document computed again, gives every catalog the id it has."""
    first = [("a", "tool_0"), ("b", "tool_1"), (None, "tool_2")]
    root = tmp_path / "run"
    ids, _ = _scenario(root, first, second, file_changes=False, workers=1, batch_docs=64)
    run(Config([str(root / "src")], root / "out", f"lmdb://{root}/ccr", workers=1,
               incremental=False, index=root / "idx.db", embed=False))
    assert _rows(root) == ids
