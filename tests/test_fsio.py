"""fsio's atomic publication: a failed write leaves the old file and nothing beside it; a good
one is on disk, flushed and fsync'd, before its rename, and the rename before it returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from caveman_batch import fsio


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "manifest.jsonl"
    target.write_bytes(b"old\n")

    class Cut(Exception):
        pass

    with pytest.raises(Cut), fsio.atomic_writer(target) as fh:
        fh.write(b"half of the new")
        raise Cut
    assert target.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.jsonl"]


def test_an_atomic_write_is_fsynced_whole_before_its_rename_and_its_folder_after(
        tmp_path: Path, fsyncs: list[tuple[str, bytes | None]]) -> None:
    """What `-o FILE`, the journal and the changes file rely on: the new bytes are on disk
    (flushed, then fsync'd) before the rename publishes them, and the rename is (the folder
    fsync'd) before atomic_write returns."""
    target = tmp_path / "recovered.json"
    fsio.atomic_write(target, b"the original, byte for byte\n")
    assert [content for _, content in fsyncs] == [b"the original, byte for byte\n", None]
    assert fsyncs[0][0] != str(target) and fsyncs[1][0] == str(tmp_path)
