"""`compress --index`: the server ids of an incremental run depend on the input and the
previous index only (never on the worker count, the executor or how far dispatch ran
ahead), no two catalogs share one, and every catalog of the input stays searchable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from caveman_batch.pipeline import Config, run
from caveman_batch.toolsearch import ToolIndex

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
