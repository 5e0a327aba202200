"""The pipeline's first promise, watched directly: no output is visible before its original
is durably committed.

The store's commit and every publication by rename are spied on (the real LMDB store, the
real files): each event is recorded as it happens, and every output the manifest names must
appear after the commit of every original it stands for, batch after batch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from backends.lmdb_store import LmdbStore
from caveman_batch.pipeline import Config, run

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"


def _tree_of_many(root: Path, count: int) -> None:
    """`count` distinct small catalogs, so that the run takes several batches (64 a batch)."""
    base = orjson.loads((SAMPLES / "registry" / "flint" / "crawler.json").read_bytes())
    for i in range(count):
        base["tools"][0]["description"] = f"Crawls site number {i}. " + "Plain words here. " * 12
        path = root / f"s{i // 50:02d}" / f"c{i:04d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(base, option=orjson.OPT_INDENT_2))
    (root / "all.jsonl").write_bytes(b"\n".join(
        orjson.dumps({**base, "name": f"line{i}"}) for i in range(150)) + b"\n")


class _Spy:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def committed(self, keys: list[bytes]) -> None:
        self.events.append(("commit", {k.decode("ascii", "replace") for k in keys}))

    def published(self, target: Path) -> None:
        self.events.append(("publish", Path(target).resolve()))

    def first(self, kind: str, match: Any) -> int:
        for i, (k, what) in enumerate(self.events):
            if k == kind and (match in what if kind == "commit" else what == match):
                return i
        raise AssertionError(f"no {kind} event for {match}")


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    watcher = _Spy()
    real_commit, real_replace = LmdbStore.commit, os.replace

    def commit(self: LmdbStore, items: Any, merge: Any = None) -> None:
        items = list(items)
        real_commit(self, items, merge)
        watcher.committed([k for k, _ in items])  # durable now: the commit has returned

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        real_replace(src, dst, **kw)
        watcher.published(dst)

    monkeypatch.setattr(LmdbStore, "commit", commit)
    monkeypatch.setattr(os, "replace", replace)
    return watcher


@pytest.mark.parametrize("workers", [1, 2])
def test_no_output_is_published_before_its_original_is_committed(
        tmp_path: Path, spy: _Spy, workers: int) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    _tree_of_many(src, 300)
    run(Config([str(src)], out, f"lmdb://{tmp_path}/ccr", workers=workers))
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_bytes().splitlines()]
    assert len(rows) == 450 and all(r["handle"] for r in rows)
    commits = [i for i, (kind, _) in enumerate(spy.events) if kind == "commit"]
    assert len(commits) >= 5  # several batches: the order inside the run is what is checked
    manifest_at = spy.first("publish", (out / "manifest.jsonl").resolve())
    for row in rows:
        digest = row["handle"].removeprefix("ccr_")
        published = spy.first("publish", (out / row["output"]["path"]).resolve())
        assert spy.first("commit", digest) < published < manifest_at + 1, row["source"]
    # outputs are published batch by batch, not all at the end, so the order checked above
    # is the order inside the run: the first output appears before the last commit
    publishes = [i for i, (kind, _) in enumerate(spy.events) if kind == "publish"]
    assert publishes[0] < commits[-1]


# -- durability settings: what makes a commit or a manifest survive a power loss ------------


def test_lmdb_commits_are_synced(tmp_path: Path) -> None:
    from caveman_batch.store import open_store

    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        flags = store._live().flags()  # type: ignore[attr-defined]
    # sync + metasync: every commit is on disk when it returns; map_async would defer it
    assert (flags["sync"], flags["metasync"], flags["map_async"]) == (True, True, False)


def test_sqlite_commits_are_synced(tmp_path: Path) -> None:
    from caveman_batch.store import open_store

    with open_store(f"sqlite://{tmp_path}/ccr.db") as store:
        conn = store._live()  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: WAL synced per commit
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_manifest_is_fsynced_with_its_rename(tmp_path: Path,
                                                fsyncs: list[tuple[str, bytes | None]]) -> None:
    """The manifest's bytes are fsync'd before it is renamed into place, and its folder after."""
    out = tmp_path / "out"
    run(Config([str(SAMPLES)], out, f"lmdb://{tmp_path}/ccr", workers=1))
    manifest = (out / "manifest.jsonl").read_bytes()
    at = [i for i, (_, content) in enumerate(fsyncs) if content == manifest]
    assert at, "the manifest's bytes were never fsync'd"
    assert any(path == str(out.resolve()) and content is None for path, content in fsyncs[at[0]:])
