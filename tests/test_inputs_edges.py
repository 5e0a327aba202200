"""Edges of reading hostile input (caveman_batch.inputs, .sources) that a mutation pass over
those modules found no test held: each test here failed with one small change to the code."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from caveman_batch.errors import UsageError
from caveman_batch.pipeline import Config, run

EMPTY = b'{"tools":[]}'  # a catalog shape with nothing to compress: passed through as it is


def _rows(manifest: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in manifest.read_bytes().splitlines()]


def _run(tmp: Path, *sources: str | Path, max_bytes: int = 12_000, **kw: Any) -> tuple[Path, Any]:
    out = tmp / "out"
    config = Config([str(s) for s in sources], out, f"lmdb://{tmp}/ccr", workers=1,
                    max_bytes=max_bytes, **kw)
    return out, run(config)


def _catalog(size: int) -> bytes:
    """A catalog of at least `size` bytes, padded to exactly `size` with spaces (JSON white
    space: the same catalog)."""
    tool = {"name": "t", "description": "Reads the things it is given. " * 20,
            "inputSchema": {"type": "object", "title": "T", "properties": {"a": {"type": "string"}}}}
    raw = json.dumps({"tools": [dict(tool, name=f"t{i}") for i in range(size // 800 + 1)]}).encode()
    assert len(raw) <= size
    return raw[:-1] + b" " * (size - len(raw)) + b"}"


def test_a_catalog_file_of_exactly_max_bytes_past_a_chunk_is_read(tmp_path: Path) -> None:
    """--max-bytes is the largest document read: one of exactly that size is compressed
    (past a chunk, the reading that keeps an oversize file in place; one byte less of cap:
    passed through, over it)."""
    from caveman_batch.inputs import CHUNK

    src = tmp_path / "big.json"
    src.write_bytes(_catalog(CHUNK + 4096))
    for cap, status in ((CHUNK + 4096, "ok"), (CHUNK + 4095, "passthrough")):
        out, _ = _run(tmp_path, src, max_bytes=cap)
        [row] = _rows(out / "manifest.jsonl")
        assert row["status"] == status, row
        assert (row["reason"] is not None and "--max-bytes" in row["reason"]) == (status != "ok"), row


def test_a_broken_registry_item_holding_an_escaped_quote_ends_where_it_ends(tmp_path: Path) -> None:
    """A broken item (found by the scanner, not json) whose string holds \\" and brackets:
    the escaped quote does not close the string, so the item ends at its own "}", and the
    items after it are read as any."""
    bad = b'{"tools": [], "d": "a\\"]}, ", bad}'
    raw = b"[" + EMPTY + b"," + bad + b"," + b",".join([EMPTY] * 1500) + b"]"  # 18 KB behind it
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert len(rows) == 1502 and [r["status"] for r in rows[:3]] == ["passthrough", "error", "passthrough"]
    assert rows[1]["bytes_before"] == len(bad) and rows[1]["source"] == {"path": str(src), "item": 1}


def test_a_file_of_exactly_max_bytes_that_grows_as_it_is_read_publishes_nothing_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the cap, as under it: a file found longer than its fstat said is "changed while
    it was read", not the first max_bytes + 1 bytes of what it became copied through."""
    from caveman_batch import inputs

    old = _catalog(inputs.CHUNK + 4096)
    src = tmp_path / "big.json"
    src.write_bytes(old)
    real_json_file = inputs._json_file

    def json_file(fh: Any, *args: Any) -> Any:
        src.write_bytes(old + b" " * 10)  # in place (same inode), after the fstat
        return real_json_file(fh, *args)

    monkeypatch.setattr(inputs, "_json_file", json_file)
    out, _ = _run(tmp_path, src, max_bytes=len(old))
    [row] = _rows(out / "manifest.jsonl")
    assert row["status"] == "error" and row["reason"].startswith(
        f"changed while it was read ({len(old):,} bytes when opened)"), row
    assert not (out / "big.json").exists()


def test_one_of_several_sources_under_a_hidden_path_the_run_keeps_is_refused(tmp_path: Path) -> None:
    """A folder named on the command line (never skipped as hidden, as the walk skips one)
    whose outputs would lie under the run's fingerprint file: refused before anything is
    written."""
    hidden = tmp_path / ".manifest.streams.json"
    hidden.mkdir()
    (hidden / "a.json").write_bytes(EMPTY)
    other = tmp_path / "b.json"
    other.write_bytes(EMPTY)
    with pytest.raises(UsageError, match=r"under \.manifest\.streams\.json, where this run keeps"):
        _run(tmp_path, hidden, other)
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_byte_not_utf8_just_past_a_chunk_after_a_split_character_is_named_at_its_offset(
        tmp_path: Path) -> None:
    """The first byte of a character cut by a chunk's end, then a byte that cannot follow
    it: the error row names the file offset of that first byte."""
    from caveman_batch.inputs import CHUNK

    head = b'[{"tools":[],"pad":"'
    raw = head + b"a" * (CHUNK - len(head)) + b'\xc3A"}, ' + EMPTY + b"]"
    assert raw.index(b"\xc3") == CHUNK  # the last byte of the first chunk read after "["
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=32 << 20)
    assert (out / "registry.json").read_bytes() == raw
    [row] = _rows(out / "manifest.jsonl")
    assert row["status"] == "error" and row["source"] == {"path": str(src), "item": 0}
    assert row["reason"].startswith(f"not UTF-8 at byte {CHUNK}: the rest of the file"), row


def test_blank_lines_of_a_jsonl_source_are_no_documents(tmp_path: Path) -> None:
    """An empty or white-space line holds no document (no row), and the lines after it keep
    their own numbers."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(EMPTY + b"\n\n  \t\n" + EMPTY + b"\n")
    out, summary = _run(tmp_path, src)
    rows = _rows(out / "manifest.jsonl")
    assert [r["source"]["line"] for r in rows] == [1, 4] and summary.documents == 2
    assert [r["status"] for r in rows] == ["passthrough", "passthrough"]


def test_a_registry_number_cut_by_a_chunk_s_end_is_one_item(tmp_path: Path) -> None:
    """A number that ends the text read so far may go on in the next chunk: read on, one
    item, not two halves."""
    from caveman_batch.inputs import CHUNK

    first = b'{"tools":[],"pad":"' + b"s" * (CHUNK - 27) + b'"}'  # a catalog: a registry
    raw = b"[" + first + b"," + b"1234567890" + b"," + EMPTY + b"]"
    assert raw.index(b"1234") < CHUNK < raw.index(b"7890")  # the first chunk read after "["
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=32 << 20)
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert [r["source"]["item"] for r in rows] == [0, 1, 2]
    assert [r["bytes_before"] for r in rows] == [len(first), 10, len(EMPTY)]


@pytest.mark.parametrize("after", [b"," + b",".join([EMPTY] * 1500) + b"]", b"]" + b" " * 13_000],
                         ids=["separator", "closing-bracket"])
def test_a_broken_bare_literal_before_much_more_ends_where_it_ends(tmp_path: Path, after: bytes) -> None:
    """A bare value that is not JSON (`tru`), found by the scanner (more than the cap
    behind it), ends before the separator or the array's "]" that follows it."""
    raw = b"[" + EMPTY + b",tru" + after
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert [r["status"] for r in rows[:3]] == ["passthrough", "error"] + (["passthrough"] if after[0] == 44 else [])
    assert rows[1]["bytes_before"] == len(b"tru") and len(rows) == (1502 if after[0] == 44 else 2)


def test_hidden_files_and_folders_in_a_src_folder_are_skipped(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    (reg / ".git").mkdir(parents=True)
    (reg / ".git" / "a.json").write_bytes(EMPTY)
    (reg / ".b.json").write_bytes(EMPTY)
    (reg / "c.json").write_bytes(EMPTY)
    out, _ = _run(tmp_path, reg)
    assert [r["source"]["path"] for r in _rows(out / "manifest.jsonl")] == [str(reg / "c.json")]
    assert not (out / ".git").exists() and not (out / ".b.json").exists()


def test_a_src_that_is_not_there_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"gone\.json: no such file or folder: nothing was read"):
        _run(tmp_path, tmp_path / "gone.json")
    assert not (tmp_path / "out").exists()


def test_a_registry_whose_first_catalog_is_over_the_cap_is_one_document_not_read_on(
        tmp_path: Path) -> None:
    """Its head is read (doubling) up to the cap and no further: a first item that does
    not end within it leaves the file one document over --max-bytes, copied through."""
    from caveman_batch.inputs import CHUNK

    first = b'{"tools":[],"pad":"' + b"a" * (CHUNK + 5000) + b'"}'
    raw = b"[" + first + b"," + EMPTY + b"]"
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=CHUNK + 1000)
    assert (out / "registry.json").read_bytes() == raw
    [row] = _rows(out / "manifest.jsonl")
    assert row["source"] == {"path": str(src)} and "--max-bytes" in row["reason"], row


@pytest.mark.parametrize("big", [False, True], ids=["in-memory", "past-a-chunk"])
@pytest.mark.parametrize("other", [b'"items": ["a", {"tools": []}]', b'"items": "x", "more": [{}]'],
                         ids=["scalar-first", "not-a-list"])
def test_a_second_list_key_is_judged_by_its_own_first_item_alone(
        tmp_path: Path, big: bool, other: bytes) -> None:
    """Beside "servers", an "items" whose first item is no object or array (or that is no
    array) holds no catalogs, whatever comes after it: no error row."""
    from caveman_batch.inputs import CHUNK

    pad = b', "pad": "' + b"x" * (2 * CHUNK if big else 10) + b'"'
    raw = b'{"servers": [' + EMPTY + b"]" + pad + b", " + other + b"}"
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=32 << 20)
    assert (out / "registry.json").read_bytes() == raw
    assert [r["status"] for r in _rows(out / "manifest.jsonl")] == ["passthrough"]


def test_a_file_that_cannot_be_opened_keeps_its_last_output(tmp_path: Path) -> None:
    """A catalog file whose open fails for a reason other than its absence (a symlink
    looping on itself, followed) is an error row that keeps the last run's output (its
    source is unknown this time, not gone)."""
    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "a.json").write_bytes(EMPTY)
    out, _ = _run(tmp_path, reg)
    assert (out / "a.json").read_bytes() == EMPTY
    (reg / "a.json").unlink()
    (reg / "a.json").symlink_to("a.json")
    _run(tmp_path, reg, follow_symlinks=True)
    [row] = _rows(out / "manifest.jsonl")
    assert row["status"] == "error" and row["reason"].startswith("cannot read: "), row
    assert (out / "a.json").read_bytes() == EMPTY


def test_an_escape_cut_by_a_chunk_s_end_still_escapes_in_an_item_over_the_cap(tmp_path: Path) -> None:
    """An item over the cap, its end found by the scanner chunk by chunk, with a backslash
    as the last byte of a chunk: the quote after it, in the next chunk, is escaped (the item
    ends at its own "}", not at the "]}" inside a string)."""
    from caveman_batch.inputs import CHUNK

    head = b'{"tools": [], "d": "'
    big = head + b"a" * (CHUNK - 14 - len(head)) + b'\\"", "e": "]}, a string", bad}'
    raw = b"[" + EMPTY + b"," + big + b"," + b",".join([EMPTY] * 3) + b"]"
    assert raw.index(b"\\") == CHUNK  # the last byte of the first chunk read after "["
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert [r["source"]["item"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[1]["bytes_before"] == len(big) and "--max-bytes" in rows[1]["reason"], rows[1]


def test_a_last_jsonl_line_of_exactly_max_bytes_without_a_newline_is_read(tmp_path: Path) -> None:
    """--max-bytes is the largest line read, the last one too (no line break after it):
    compressed, not copied through as over the cap; a byte more is over it."""
    line = _catalog(6000)
    src = tmp_path / "in.jsonl"
    src.write_bytes(EMPTY + b"\n" + line)
    for cap, status in ((len(line), "ok"), (len(line) - 1, "passthrough")):
        out, _ = _run(tmp_path, src, max_bytes=cap)
        rows = _rows(out / "manifest.jsonl")
        assert [r["source"]["line"] for r in rows] == [1, 2]
        assert rows[1]["status"] == status and rows[1]["bytes_before"] == len(line), rows[1]
        assert (out / "in.jsonl").read_bytes().split(b"\n")[0] == EMPTY


def test_the_default_cap_of_one_catalog_is_32_mib(tmp_path: Path) -> None:
    """README: --max-bytes defaults to 32 MiB: a file of that size is read, a byte more is
    refused naming it (a sparse file: nothing written to disk)."""
    from caveman_batch.errors import InputTooLargeError
    from caveman_batch.sources import read_source

    src = tmp_path / "big.json"
    with open(src, "wb") as fh:
        fh.truncate(32 << 20)
    label, data = read_source(str(src))
    assert label == str(src) and len(data) == 32 << 20
    with open(src, "ab") as fh:
        fh.write(b" ")
    with pytest.raises(InputTooLargeError, match=rf"^{src}: input is larger than 33,554,432 bytes"):
        read_source(str(src))


def test_a_byte_not_utf8_in_the_first_chunk_of_a_longer_registry_stops_its_reading(
        tmp_path: Path) -> None:
    """Nothing is decoded past a byte that is not UTF-8 (the next chunk read on would be
    joined to the text before it): that item's error row names the byte, and the rest of the
    file, over a chunk of it, is copied through byte for byte."""
    from caveman_batch.inputs import CHUNK

    bad = b'{"tools": [], "bad": "\xff"}'
    raw = b"[" + EMPTY + b", " + bad + b", " + b", ".join([EMPTY] * (CHUNK // 10)) + b"]"
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=32 << 20)
    assert (out / "registry.json").read_bytes() == raw  # the separator before it too
    rows = _rows(out / "manifest.jsonl")
    assert [(r["status"], r["source"]["item"]) for r in rows] == [("passthrough", 0), ("error", 1)]
    at = raw.index(bytes([0xFF]))
    assert rows[1]["reason"].startswith(f"not UTF-8 at byte {at}: the rest")


def test_a_jsonl_line_of_white_space_json_does_not_know_is_an_error_row(tmp_path: Path) -> None:
    """Only JSON's white space (space, tab, CR) makes a blank line: a line of form feeds or
    vertical tabs is not JSON, an error row naming its line, copied through (it went without
    a row, and without its line in the output: --strict passed)."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(EMPTY + b"\n\x0c\n\x0b \r\n \t\r\n" + EMPTY + b"\n")
    out, summary = _run(tmp_path, src)
    rows = _rows(out / "manifest.jsonl")
    assert [(r["source"]["line"], r["status"]) for r in rows] == [
        (1, "passthrough"), (2, "error"), (3, "error"), (5, "passthrough")]
    assert (out / "in.jsonl").read_bytes() == EMPTY + b"\n\x0c\n\x0b \r\n" + EMPTY + b"\n"


def test_a_small_file_whose_first_item_is_cut_short_is_one_document(tmp_path: Path) -> None:
    """A file read whole is all there is: a first item cut short (a string left open) is no
    registry's "read on" but one document that is not JSON, its error row naming the file
    (no item)."""
    raw = b'[{"tools": [], "d": "cut'
    src = tmp_path / "cut.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)
    [row] = _rows(out / "manifest.jsonl")
    assert row["source"] == {"path": str(src)} and row["status"] == "error", row
    assert (out / "cut.json").read_bytes() == raw


def test_following_symlinks_a_folder_met_again_is_skipped_and_the_walk_goes_on(tmp_path: Path) -> None:
    """With --follow-symlinks each folder is walked once: a link to one walked already is
    passed over, and the folders after it are walked as any."""
    reg = tmp_path / "reg"
    for name in ("a", "c"):
        (reg / name).mkdir(parents=True)
        (reg / name / f"{name}.json").write_bytes(EMPTY)
    (reg / "b").symlink_to("a")
    out, _ = _run(tmp_path, reg, follow_symlinks=True)
    assert [r["source"]["path"] for r in _rows(out / "manifest.jsonl")] == [
        str(reg / "a" / "a.json"), str(reg / "c" / "c.json")]


def test_a_broken_item_late_in_a_registry_is_judged_by_what_follows_it_alone(tmp_path: Path) -> None:
    """How much of the registry came before a broken item (over the cap, here) does not
    count: with little behind it, it is README's first item that is not JSON, the rest of
    the file copied through from it."""
    raw = b"[" + b",".join([EMPTY] * 1500) + b",{bad json}," + EMPTY + b"]"  # 18 KB before it
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert len(rows) == 1501 and rows[-1]["source"]["item"] == 1500 and rows[-1]["status"] == "error"
    assert rows[-1]["reason"] == "not JSON: the rest of the file, from this item on, is copied through as written"


def test_an_oversize_jsonl_line_is_counted_at_its_own_size(tmp_path: Path) -> None:
    """A line over the cap, copied through a temp file: its row's bytes_before is the line's
    length without its line break, as for any line."""
    big = _catalog(3 << 20)  # past the readline of max_bytes + 1 and a chunk after it
    src = tmp_path / "in.jsonl"
    src.write_bytes(EMPTY + b"\n" + big + b"\n" + EMPTY + b"\n")
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    rows = _rows(out / "manifest.jsonl")
    assert [r["bytes_before"] for r in rows] == [len(EMPTY), len(big), len(EMPTY)]
    assert "--max-bytes" in rows[1]["reason"]
    assert (out / "in.jsonl").read_bytes() == src.read_bytes()


def test_a_registry_cut_within_a_character_just_past_a_chunk_names_the_byte(tmp_path: Path) -> None:
    """A last read of nothing but the first byte of a character (the file ends there): not
    an array that merely ends early, but bytes that are not UTF-8, at that byte."""
    from caveman_batch.inputs import CHUNK

    head = b"[" + EMPTY + b',{"tools":[],"pad":"'
    raw = head + b"a" * (CHUNK - len(head) + 1) + b"\xc3"
    assert len(raw) == CHUNK + 2  # "[", a first chunk, then that byte alone
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=32 << 20)
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert [(r["source"]["item"], r["status"]) for r in rows] == [(0, "passthrough"), (1, "error")]
    assert rows[1]["reason"].startswith(f"not UTF-8 at byte {CHUNK + 1}: the rest of the file"), rows[1]


def test_reading_a_tree_of_small_catalogs_leaves_no_file_open(tmp_path: Path) -> None:
    """Each file read whole is closed once read (a tree of thousands ran out of file
    descriptors: EMFILE, exit 2)."""
    reg = tmp_path / "reg"
    reg.mkdir()
    for i in range(200):
        (reg / f"{i:03}.json").write_bytes(EMPTY)
    before = len(os.listdir("/proc/self/fd"))
    out, _ = _run(tmp_path, reg)
    assert len(_rows(out / "manifest.jsonl")) == 200
    assert len(os.listdir("/proc/self/fd")) - before < 20


def test_a_source_where_another_needs_a_folder_two_levels_up_is_refused(tmp_path: Path) -> None:
    """Every folder an output lies in is one no other output may be written to, not only
    the one just above it (`x.json` against `x.json/sub/inner.json`)."""
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "x.json").write_bytes(EMPTY)
    (tmp_path / "two" / "x.json" / "sub").mkdir(parents=True)
    (tmp_path / "two" / "x.json" / "sub" / "inner.json").write_bytes(EMPTY)
    with pytest.raises(UsageError, match=r"would be written to x\.json in the output folder, where .* needs a folder"):
        _run(tmp_path, tmp_path / "one" / "x.json", tmp_path / "two" / "x.json")
    assert not (tmp_path / "out" / "manifest.jsonl").exists()



def test_a_registry_item_of_exactly_max_bytes_is_read(tmp_path: Path) -> None:
    item = _catalog(6000)
    raw = b"[" + EMPTY + b"," + item + b"]"
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    for cap, status in ((len(item), "ok"), (len(item) - 1, "passthrough")):
        out, _ = _run(tmp_path, src, max_bytes=cap)
        rows = _rows(out / "manifest.jsonl")
        assert [r["source"]["item"] for r in rows] == [0, 1]
        assert rows[1]["status"] == status and rows[1]["bytes_before"] == len(item), rows[1]


def test_a_broken_registry_item_of_exactly_max_bytes_is_held_and_said_why(tmp_path: Path) -> None:
    """One the scanner ends (more than the cap behind it) of exactly --max-bytes is read
    as any: an error row saying it is not JSON, not a passthrough over the cap."""
    bad = b'{"tools": [], "d": "' + b"a" * (12_000 - 27) + b'", bad}'
    assert len(bad) == 12_000
    raw = b"[" + EMPTY + b"," + bad + b"," + b",".join([EMPTY] * 1500) + b"]"
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert rows[1]["status"] == "error" and "--max-bytes" not in rows[1]["reason"], rows[1]
    assert rows[1]["bytes_before"] == 12_000 and len(rows) == 1502
