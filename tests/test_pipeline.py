"""`compress` end to end: inputs of every kind, ordering, durability, incremental refresh."""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from bench_data.generate import generate_registry
from caveman_batch import ccr, fsio, pipeline, tokens
from caveman_batch.catalog import Options, compress
from caveman_batch.cli import main
from caveman_batch.errors import StoreError, UsageError
from caveman_batch.pipeline import TMP_DIR, Config, incremental, run
from caveman_batch.store import open_store

SAMPLES = Path(__file__).resolve().parents[1] / "bench_data" / "samples"
SMALL_CAP = 12_000  # below the samples' oversize catalog (16 KB compact, 25 KB pretty)


def _rows(manifest: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in manifest.read_bytes().splitlines()]


STAT_CACHE = ".manifest.stat.json"  # this machine's file identities: differs between runs
NOT_COMPARED = {STAT_CACHE, pipeline.LOCK_FILE}  # (the lock file holds the last run's pid)


def _tree(root: Path) -> dict[str, str]:
    """Every file of OUT but the stat cache, by sha256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in NOT_COMPARED}


def _run(tmp: Path, *sources: str | Path, workers: int = 1, **kw: Any) -> tuple[Path, Any]:
    out = tmp / kw.pop("out_name", "out")
    config = Config([str(s) for s in sources], out, kw.pop("store", f"lmdb://{tmp}/ccr"),
                    workers=workers, max_bytes=kw.pop("max_bytes", SMALL_CAP), **kw)
    return out, run(config)


def _stored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that name an original; a row without a handle must say why (a document never
    read: over --max-bytes, or unreadable), and some row must name one."""
    for row in rows:
        if row["handle"] is None:
            assert row["status"] == "passthrough" and row["reason"], row
            assert "--max-bytes" in row["reason"] or row.get("broken"), row
    stored = [row for row in rows if row["handle"] is not None]
    assert stored
    return stored


def _recovers_all(rows: list[dict[str, Any]], store_url: str, originals: dict[str, bytes]) -> None:
    with open_store(store_url) as store:
        for row in _stored(rows):
            data = ccr.recover(store, row["handle"])
            assert hashlib.sha256(data).hexdigest() == row["sha256"]
            key = json.dumps(row["source"], sort_keys=True)
            if key in originals:
                assert data == originals[key]


def test_samples_every_kind_of_input(tmp_path: Path) -> None:
    out, summary = _run(tmp_path, SAMPLES)
    rows = _rows(out / "manifest.jsonl")
    assert summary.documents == len(rows) > 30
    by_reason = {r["reason"] for r in rows if r["status"] != "ok"}
    assert any("larger than --max-bytes" in (x or "") for x in by_reason)
    assert any("unknown shape" in (x or "") for x in by_reason)
    assert any("not UTF-8" in (x or "") for x in by_reason)
    errors = [r for r in rows if r["status"] == "error"]
    assert {"line": 3} .items() <= next(r["source"] for r in errors if "line" in r["source"]).items()
    # every output file a reader can see is complete: it parses, or it is the input copied as is
    for row in rows:
        if row["output"] and "offset" not in row["output"]:
            written = (out / row["output"]["path"]).read_bytes()
            original = Path(row["source"]["path"]).read_bytes()
            assert written == original or written == compress(original)[0]
    _recovers_all(rows, f"lmdb://{tmp_path}/ccr", {})
    assert not (out / TMP_DIR).exists()


def test_directory_tree_is_mirrored(tmp_path: Path) -> None:
    out, _ = _run(tmp_path, SAMPLES / "registry")
    src = sorted(p.relative_to(SAMPLES / "registry").as_posix()
                 for p in (SAMPLES / "registry").rglob("*.json"))
    got = sorted(p for p in _tree(out) if p not in ("manifest.jsonl", ".manifest.streams.json"))
    assert got == src


def test_jsonl_in_order_with_offsets(tmp_path: Path) -> None:
    src = SAMPLES / "registry.jsonl"
    out, _ = _run(tmp_path, src)
    rows = _rows(out / "manifest.jsonl")
    lines = src.read_bytes().splitlines()
    assert [r["source"]["line"] for r in rows] == list(range(1, len(lines) + 1))
    produced = (out / "registry.jsonl").read_bytes()
    assert produced.count(b"\n") == len(lines)
    for row, line in zip(rows, lines):
        where = row["output"]
        piece = produced[where["offset"]:where["offset"] + where["length"]]
        assert piece == compress(line)[0] or (row["status"] != "ok" and piece == line)
        assert hashlib.sha256(piece).hexdigest() == row["out_sha256"] or row["out_sha256"] is None


def test_oversize_jsonl_line_is_copied_not_buffered(tmp_path: Path) -> None:
    big = json.dumps({"tools": [{"name": "x", "description": "word " * 5000}]}).encode()
    small = b'{"tools":[{"name":"y","description":"ok","inputSchema":{"type":"object","title":"T"}}]}'
    src = tmp_path / "in.jsonl"
    src.write_bytes(small + b"\n" + big + b"\n" + b"{bad json\n" + small)
    out, summary = _run(tmp_path, src, max_bytes=4096)
    rows = _rows(out / "manifest.jsonl")
    assert [r["status"] for r in rows] == ["ok", "passthrough", "error", "ok"]
    assert "larger than --max-bytes" in rows[1]["reason"] and rows[1]["handle"] is None
    assert "line 1 column 2" in rows[2]["reason"] and rows[2]["source"]["line"] == 3
    produced = (out / "in.jsonl").read_bytes().split(b"\n")
    assert produced[1] == big and produced[2] == b"{bad json"
    assert summary.documents == 4


def test_array_registry_streamed_item_by_item(tmp_path: Path) -> None:
    items = [{"name": f"s{i}", "tools": [{"name": f"t{i}", "description": "Reads things. " * 30,
                                          "inputSchema": {"type": "object", "title": "X",
                                                          "properties": {"n": {"type": "number",
                                                                               "default": 1.10}}}}]}
             for i in range(40)]
    raw = b'{"servers": [' + b",\n ".join(json.dumps(i, indent=1).encode() for i in items) \
        + b'], "version": 3}\n'
    raw = raw.replace(b'"default": 1.1', b'"default": 1.10')  # a literal json.dumps would not write
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, summary = _run(tmp_path, src)
    assert summary.documents == 40 and summary.ok == 40
    produced = json.loads((out / "registry.json").read_bytes())
    assert produced["version"] == 3 and len(produced["servers"]) == 40
    assert b"1.10" in (out / "registry.json").read_bytes()
    rows = _rows(out / "manifest.jsonl")
    assert [r["source"]["item"] for r in rows] == list(range(40))
    expected = json.dumps(items[7], indent=1).encode().replace(b'"default": 1.1', b'"default": 1.10')
    assert rows[7]["sha256"] == hashlib.sha256(expected).hexdigest()  # the exact item bytes
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.recover(store, rows[7]["handle"]) == expected


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("wrapped", [False, True])
def test_array_registry_after_a_byte_order_mark_is_split_and_keeps_it(
        tmp_path: Path, wrapped: bool, big: bool) -> None:
    """A registry a Windows editor saved with a UTF-8 BOM is still a registry, item by item
    (it was one unknown document), and its output keeps the BOM."""
    items = [{"name": f"s{i}", "tools": [{"name": f"t{i}", "description": "Reads things. " * 30}]}
             for i in range(30 if not big else 3000)]  # past CHUNK: read as it streams
    body = b",\n".join(json.dumps(i).encode() for i in items)
    plain = (b'{"servers": [' + body + b"]}\n") if wrapped else b"[" + body + b"]\n"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "registry.json").write_bytes(plain)
    expected, expected_rows = _registry_out(tmp_path / "a", plain)
    (tmp_path / "b").mkdir()
    produced, rows = _registry_out(tmp_path / "b", codecs.BOM_UTF8 + plain)
    assert len(rows) == len(items) and all(r["status"] == "ok" for r in rows)
    assert produced == codecs.BOM_UTF8 + expected
    assert [(r["sha256"], r["source"]["item"]) for r in rows] == [
        (r["sha256"], r["source"]["item"]) for r in expected_rows]


def _registry_out(tmp_path: Path, raw: bytes) -> tuple[bytes, list[dict[str, Any]]]:
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=32 << 20)
    return (out / "registry.json").read_bytes(), _rows(out / "manifest.jsonl")


EMPTY = b'{"tools":[]}'  # a catalog shape with nothing to compress: passed through as it is


@pytest.mark.parametrize("big", [False, True], ids=["in-the-first-chunk", "past-the-first-chunk"])
def test_array_registry_not_utf8_keeps_the_items_before_the_bad_byte(tmp_path: Path, big: bool) -> None:
    """The items before the item holding a byte that is not UTF-8 are items as any (the
    whole chunk's were thrown out with it: a small registry lost every item before it)."""
    first = b'{"tools":[],"pad":"' + b"a" * (1_500_000 if big else 10) + b'"}'
    tail = b', {"tools": [], "bad": "\xff"}, ' + EMPTY + b"]}"
    raw = b'{"servers": [' + first + b", " + EMPTY + tail
    produced, rows = _registry_out(tmp_path, raw)
    assert [(r["status"], r["source"]["item"]) for r in rows] == [
        ("passthrough", 0), ("passthrough", 1), ("error", 2)]
    assert produced == b'{"servers": [' + first + b"," + EMPTY + tail  # the rest as written
    bad = raw.index(b"\xff")
    assert rows[2]["reason"].startswith(f"not UTF-8 at byte {bad}: the rest of the file")


def test_array_registry_oversize_item_cut_by_bytes_not_utf8_loses_nothing(tmp_path: Path) -> None:
    big = b'{"tools":[],"pad":"' + b"a" * 1_500_000 + b'\xff"}'  # over the cap, spilled chunk by chunk
    raw = b"[" + EMPTY + b", " + big + b", " + EMPTY + b"]"
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw.replace(b", ", b",", 1)
    rows = _rows(out / "manifest.jsonl")
    assert [r["status"] for r in rows] == ["passthrough", "passthrough", "error"]
    assert rows[2]["reason"].startswith(f"not UTF-8 at byte {raw.index(bytes([0xFF]))}")


def test_array_registry_small_broken_item_before_much_more_is_an_error_not_oversize(tmp_path: Path) -> None:
    raw = b"[" + EMPTY + b",{bad json}," + b",".join([EMPTY] * 3000) + b"]"  # 36 KB behind it
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert len(rows) == 3002 and rows[1]["status"] == "error" and "larger than" not in rows[1]["reason"]
    assert rows[1]["bytes_before"] == len(b"{bad json}")


def test_array_registry_oversize_scalar_items_end_where_they_end(tmp_path: Path) -> None:
    big = b'"' + b"s" * 20_000 + b'"'
    raw = b"[" + EMPTY + b"," + big + b"," + b"1" * 20_000 + b"," + EMPTY + b"]"
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src)  # --max-bytes 12,000
    assert (out / "registry.json").read_bytes() == raw
    rows = _rows(out / "manifest.jsonl")
    assert [r["source"]["item"] for r in rows] == [0, 1, 2, 3]
    assert [r["bytes_before"] for r in rows] == [len(EMPTY), len(big), 20_000, len(EMPTY)]


def test_array_registry_rest_after_the_bracket_keeps_a_split_character(tmp_path: Path) -> None:
    from caveman_batch.inputs import CHUNK

    head = b'{"s": [' + EMPTY + b'], "note": "'
    raw = head + b"x" * (CHUNK - len(head) - 1) + "é and more".encode() + b'"}'
    assert raw[CHUNK - 1:CHUNK + 1] == "é".encode()  # the first chunk read ends inside it
    produced, rows = _registry_out(tmp_path, raw)
    assert produced == raw
    assert [r["status"] for r in rows] == ["passthrough"]


@pytest.mark.parametrize(("raw", "item", "reason"), [
    (b"[" + EMPTY + b"," + EMPTY, 2, "the array ends without its closing bracket"),  # none is added
    (b"[" + EMPTY + b"," + EMPTY + b"\n", 2, "the array ends without its closing bracket"),
    (b"[" + EMPTY + b"," + EMPTY + b",", 2, "not JSON"),  # a trailing separator
    (b"[" + EMPTY + b",\n  {bad json} ]", 1, "not JSON"),  # the separator before it is kept
    (b"[" + EMPTY + b" \n ,{bad json}]", 1, "not JSON"),  # and the white space before that
    (b'{"servers": [   {bad json}]}', 0, "not JSON"),
    (b"[" + EMPTY + b" " + EMPTY + b"]", 1, "not JSON (a ',' or a ']' expected)"),  # no comma
    (b"[" + EMPTY + ",\u00a0".encode() + EMPTY + b"]", 1, "not JSON"),  # not JSON white space
    (b"[" + EMPTY + b"," + EMPTY + b', {"tools": [], "x": "\xc3"}]', 2, "not UTF-8 at byte 48"),  # \xc3 is byte 48
], ids=["unclosed", "unclosed-newline", "trailing-comma", "broken-item", "space-before-comma",
        "broken-first-item", "no-comma", "nbsp", "not-utf8"])
def test_array_registry_truncated_or_broken_goes_through_as_written(tmp_path: Path, raw: bytes, item: int,
                                                                   reason: str) -> None:
    produced, rows = _registry_out(tmp_path, raw)
    assert produced == raw
    assert [r["source"]["item"] for r in rows] == list(range(item + 1))
    assert rows[-1]["status"] == "error"
    assert rows[-1]["reason"] == f"{reason}: the rest of the file, from this item on, is copied through as written"


@pytest.mark.parametrize("where", ["first", "middle", "after-the-array"])
def test_array_registry_with_an_integer_of_over_4300_digits_is_split_as_any(
        tmp_path: Path, where: str) -> None:
    """An integer int() refuses (over 4,300 digits) is JSON: the item holding it was "not
    JSON" and the rest of the registry copied through uncompressed (first: the whole file
    one unknown document; after the array: an error row for the wrapper's own member)."""
    tool = {"name": "t", "description": "Reads things. " * 30, "inputSchema": {"type": "object"}}
    good = json.dumps({"tools": [tool]}).encode()
    big = good.replace(b'"type": "object"', b'"type": "object", "maximum": ' + b"9" * 5000)
    items = [big, good, good] if where == "first" else [good, big, good] if where == "middle" else [good] * 3
    tail = b', "total": ' + b"7" * 5000 + b"}" if where == "after-the-array" else b"}"
    produced, rows = _registry_out(tmp_path, b'{"servers": [' + b", ".join(items) + b"]" + tail)
    assert [(r["source"]["item"], r["status"]) for r in rows] == [(0, "ok"), (1, "ok"), (2, "ok")]
    assert produced.endswith(b"]" + tail) and produced.count(b"9" * 5000) == (where != "after-the-array")


@pytest.mark.parametrize(("value", "closes"), [
    (b"9" * 5000, True),  # int() refuses it: ijson's C backend crashed the process (SIGSEGV)
    (b"1e" + b"9" * 30, True),  # Decimal refuses it: a traceback, exit 2
    (b"[" * 200_000 + b"]" * 200_000, True),  # ijson.parse's prefixes: the square of the depth, a hang
    (b"0" + b"9" * 5000, False),  # a leading zero, still not JSON once its digits are cut
    (b"[" * 200_000, False),
], ids=["long-integer", "long-exponent", "deep", "leading-zero", "deep-unclosed"])
def test_array_registry_rest_past_a_chunk_is_checked_whatever_its_numbers_and_depth(
        tmp_path: Path, value: bytes, closes: bool) -> None:
    """A wrapper's members after its array, past CHUNK, are checked as they stream (ijson),
    and a batch neither dies nor hangs on what they hold; the catalog beside it is done."""
    from caveman_batch.inputs import CHUNK

    tool = {"name": "t", "description": "Reads things. " * 30, "inputSchema": {"type": "object"}}
    good = json.dumps({"tools": [tool]}).encode()
    raw = (b'{"servers": [' + good + b'], "pad": "' + b"x" * 3 * CHUNK + b'", "n": ' + value + b"}")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "registry.json").write_bytes(raw)
    (tmp_path / "src" / "other.json").write_bytes(good)
    proc = _cli("compress", str(tmp_path / "src"), "-o", str(tmp_path / "out"),
                "--store", f"lmdb://{tmp_path}/ccr", "--quiet")
    assert proc.returncode == 0, proc.stderr
    rows = _rows(tmp_path / "out" / "manifest.jsonl")
    assert [(r["source"]["path"].rsplit("/", 1)[1], r["status"]) for r in rows] == [
        ("other.json", "ok"), ("registry.json", "ok")] + ([] if closes else [("registry.json", "error")])
    produced = (tmp_path / "out" / "registry.json").read_bytes()
    assert produced.endswith(raw[raw.index(b'], "pad"'):])  # the rest as written


@pytest.mark.parametrize(("value", "closes"), [
    (b"[" * 100_000 + b"]" * 100_000, True),  # too deep for json: it was "not JSON", an error row
    (b"[" * 100_000, False),
    (b"NaN", False),  # not JSON (json took it, ijson past CHUNK did not)
    (b"-Infinity", False),
], ids=["deep", "deep-unclosed", "nan", "infinity"])
def test_array_registry_rest_in_memory_is_judged_as_past_a_chunk(
        tmp_path: Path, value: bytes, closes: bool) -> None:
    tool = {"name": "t", "description": "Reads things. " * 30, "inputSchema": {"type": "object"}}
    raw = b'{"servers": [' + json.dumps({"tools": [tool]}).encode() + b'], "n": ' + value + b"}"
    produced, rows = _registry_out(tmp_path, raw)
    assert [r["status"] for r in rows] == ["ok"] + ([] if closes else ["error"])
    assert produced.endswith(b'], "n": ' + value + b"}")


@pytest.mark.parametrize("big", [False, True], ids=["read-whole", "past-a-chunk"])
def test_a_file_rewritten_between_its_fstat_and_its_read_publishes_nothing_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, big: bool) -> None:
    """Its first size + 1 bytes of what it became were published (an invalid half of the
    new catalog, an error row whose output replaced the last run's); now an error row that
    keeps the last run's output, and the next run reads it."""
    from caveman_batch import inputs

    def catalog(n: int) -> bytes:
        tools = [{"name": f"t{i}", "description": "Reads things. " * 30} for i in range(n)]
        return json.dumps({"tools": tools}).encode()

    old = catalog(2500 if big else 2)
    new = catalog(5000 if big else 4)
    assert (len(old) >= inputs.CHUNK) == big
    (tmp_path / "src").mkdir()
    src = tmp_path / "src" / "a.json"
    src.write_bytes(old)
    out, _ = _run(tmp_path, tmp_path / "src", max_bytes=32 << 20)
    before = (out / "a.json").read_bytes()
    real_read_upto, real_json_file = inputs._read_upto, inputs._json_file

    def read_upto(fd: int, size: int) -> bytes:
        src.write_bytes(new)  # in place (same inode), after the fstat
        return real_read_upto(fd, size)

    def json_file(fh: Any, *args: Any) -> Any:
        src.write_bytes(new)
        return real_json_file(fh, *args)

    monkeypatch.setattr(inputs, "_read_upto", read_upto)
    monkeypatch.setattr(inputs, "_json_file", json_file)
    _run(tmp_path, tmp_path / "src", max_bytes=32 << 20)
    row, = _rows(out / "manifest.jsonl")
    assert row["status"] == "error" and row["reason"].startswith(
        f"changed while it was read ({len(old):,} bytes when opened)")
    assert (out / "a.json").read_bytes() == before
    monkeypatch.undo()
    _run(tmp_path, tmp_path / "src", max_bytes=32 << 20)
    row, = _rows(out / "manifest.jsonl")
    assert row["status"] == "ok" and row["bytes_before"] == len(new)


@pytest.mark.parametrize("big", [False, True], ids=["in-memory", "past-a-chunk"])
@pytest.mark.parametrize("again", [b'"servers"', b'"serv\\u0065rs"'], ids=["plain", "escaped"])
def test_array_registry_whose_wrapper_names_its_list_twice_is_an_error(
        tmp_path: Path, big: bool, again: bytes) -> None:
    """The second list (the one a reader keeping the last value takes) was copied through,
    its catalogs neither compressed nor named by any row, and the run said nothing."""
    from caveman_batch.inputs import CHUNK

    tool = {"name": "t", "description": "Reads things. " * 30, "inputSchema": {"type": "object"}}
    good = json.dumps({"tools": [tool]}).encode()
    pad = b', "pad": "' + b"x" * (3 * CHUNK if big else 10) + b'"'
    rest = pad + b", " + again + b": [" + good + b"]}"
    produced, rows = _registry_out(tmp_path, b'{"servers": [' + good + b"]" + rest)
    assert [r["status"] for r in rows] == ["ok", "error"]
    assert rows[1]["reason"] == ("the wrapper names 'servers' again after its array (a second list "
                                 "of catalogs, not read): copied through as written")
    assert produced.endswith(b"]" + rest)
    other = b'{"servers": [' + good + b"]" + pad + b', "items": []}'  # another key: data of its own
    assert [r["status"] for r in _registry_out(tmp_path, other)[1]] == ["ok"]


@pytest.mark.parametrize("big", [False, True], ids=["in-memory", "past-a-chunk"])
@pytest.mark.parametrize("second", [b'"items"', b'"c\\u0061talogs"'], ids=["plain", "escaped"])
def test_array_registry_whose_wrapper_holds_a_second_list_key_is_an_error(
        tmp_path: Path, big: bool, second: bytes) -> None:
    """A second of the wrapper's list keys ("items" beside "servers") holding objects was
    copied through, its catalogs neither compressed nor named by any row, and the run said
    nothing (the same key twice was already an error row)."""
    from caveman_batch.inputs import CHUNK

    tool = {"name": "t", "description": "Reads things. " * 30, "inputSchema": {"type": "object"}}
    good = json.dumps({"tools": [tool]}).encode()
    pad = b', "pad": "' + b"x" * (3 * CHUNK if big else 10) + b'"'
    rest = pad + b", " + second + b": [" + good + b"]}"
    produced, rows = _registry_out(tmp_path, b'{"servers": [' + good + b"]" + rest)
    assert [r["status"] for r in rows] == ["ok", "error"]
    assert rows[1]["source"]["path"].endswith("registry.json")
    name = "items" if second == b'"items"' else "catalogs"
    assert rows[1]["reason"] == (f"the wrapper holds a second list, {name!r}, beside its 'servers' "
                                 "array (catalogs it may hold not read): copied through as written")
    assert produced.endswith(b"]" + rest)
    for value in (b"[]", b'["a", 1]', b'{"tools": []}', b'"x"'):  # no catalogs
        data = b'{"servers": [' + good + b"]" + pad + b", " + second + b": " + value + b"}"
        assert [r["status"] for r in _registry_out(tmp_path, data)[1]] == ["ok"], value
    data = b'{"servers": [' + good + b"]" + pad + b", " + second + b": [[]]}"  # an array of arrays
    assert [r["status"] for r in _registry_out(tmp_path, data)[1]] == ["ok", "error"]


def test_array_registry_over_the_cap_whose_first_catalog_is_over_a_chunk_is_split(tmp_path: Path) -> None:
    """Only its first CHUNK was looked at, in which its first item does not end: not a
    registry, the whole file one passthrough over --max-bytes, none of its catalogs done."""
    from caveman_batch.inputs import CHUNK

    tool = {"name": "t", "description": "Reads things. " * 30, "inputSchema": {"type": "object"}}
    first = json.dumps({"tools": [dict(tool, name=f"t{i}") for i in range(3000)]}).encode()
    good = json.dumps({"tools": [tool]}).encode()
    raw = b"[" + first + b"," + b",".join([good] * 3000) + b"]"
    assert CHUNK < len(first) < 2 * CHUNK < len(raw)
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    out, _ = _run(tmp_path, src, max_bytes=2 * CHUNK)
    rows = _rows(out / "manifest.jsonl")
    assert len(rows) == 3001 and {r["status"] for r in rows} == {"ok"}
    out, _ = _run(tmp_path, src, max_bytes=CHUNK, out_name="small")  # the first item over the cap
    assert [r["status"] for r in _rows(out / "manifest.jsonl")] == ["passthrough"]
    assert (out / "registry.json").read_bytes() == raw


@pytest.mark.parametrize("start", [b'[{"tools": [ oops ', b"[\x00", b'[{"tools": [], "x": 1 2'])
def test_a_file_over_the_cap_starting_with_junk_is_not_read_on_to_the_cap(
        tmp_path: Path, start: bytes) -> None:
    """A file over --max-bytes whose first item is read on (doubling) until it ends: one
    that is no JSON a few bytes in was read whole up to the cap all the same (and decoded
    again at each doubling: 160 MB held for 32 MiB); it is one passthrough after its first
    chunk, as before."""
    from caveman_batch import inputs

    src = tmp_path / "junk.json"
    src.write_bytes(start + b"x" * (9 * inputs.CHUNK))
    read: list[int] = []

    class Counting(io.BufferedReader):
        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            read.append(len(data))
            return data

    with open(src, "rb", buffering=0) as raw, Counting(raw) as fh:  # type: ignore[arg-type]
        items = list(inputs._json_file(fh, os.fstat(fh.fileno()), str(src), "junk.json",
                                       8 * inputs.CHUNK, tmp_path))
    assert sum(read) == inputs.CHUNK
    assert isinstance(items[0], inputs.Document) and items[0].spill == src


def test_bare_array_of_tools_is_one_catalog(tmp_path: Path) -> None:
    tools = [{"name": "a", "description": "x", "inputSchema": {"type": "object", "title": "A"}}]
    src = tmp_path / "tools.json"
    src.write_text(json.dumps(tools, indent=2))
    out, summary = _run(tmp_path, src)
    assert summary.documents == 1 and summary.ok == 1
    assert json.loads((out / "tools.json").read_text()) == [
        {"name": "a", "description": "x", "inputSchema": {"type": "object"}}]


def test_same_output_for_any_worker_count(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    generate_registry(reg, seed=3, servers=30, oversize_bytes=0)
    one, _ = _run(tmp_path, reg, workers=1, out_name="one", store=f"lmdb://{tmp_path}/s1")
    two, _ = _run(tmp_path, reg, workers=2, out_name="two", store=f"lmdb://{tmp_path}/s2")
    assert _tree(one) == _tree(two)


def test_incremental_rerun_reuses_and_repairs(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    shutil.copytree(SAMPLES, reg)
    out, first = _run(tmp_path, reg)
    before = _tree(out)
    _, again = _run(tmp_path, reg, incremental=True)
    assert _tree(out) == before
    compressible = first.ok + first.passthrough + first.error - 2  # the oversize copies are not cached
    assert again.reused >= compressible - 2 and again.documents == first.documents
    # change one catalog, damage one output, delete another: only those are redone
    changed = reg / "registry" / "fjord" / "chartmaker.json"
    changed.write_bytes(changed.read_bytes().replace(b"  ", b"   ", 1))
    (out / "registry" / "hollow" / "agenda.json").write_bytes(b"garbage")
    (out / "registry" / "flint" / "crawler.json").unlink()
    _, third = _run(tmp_path, reg, incremental=True)
    assert third.reused == again.reused - 3
    fresh_out, _ = _run(tmp_path, reg, out_name="fresh", store=f"lmdb://{tmp_path}/s3")
    assert {k: v for k, v in _tree(out).items() if k != "manifest.jsonl"} == \
        {k: v for k, v in _tree(fresh_out).items() if k != "manifest.jsonl"}
    assert (out / "manifest.jsonl").read_bytes().replace(str(out).encode(), b"") == \
        (fresh_out / "manifest.jsonl").read_bytes().replace(str(fresh_out).encode(), b"")


def test_incremental_refreshes_last_seen(tmp_path: Path) -> None:
    src = tmp_path / "one.json"
    src.write_text(json.dumps({"tools": [{"name": "a", "description": "d", "inputSchema": {"title": "t"}}]}, indent=2))
    out, _ = _run(tmp_path, src)
    handle = _rows(out / "manifest.jsonl")[0]["handle"]
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        ccr.commit(store, [ccr.prepare(src.read_bytes(), now_ms=0)])  # an old last-seen …
        store.put(handle[4:].encode(), ccr.encode_record(  # … forced back to 0
            len(src.read_bytes()), "application/json", 0, 0,
            ccr.prepare(src.read_bytes()).value[ccr.decode_header(ccr.prepare(src.read_bytes()).value).payload_offset:]))
        store.delete([ccr.SEEN_PREFIX + handle[4:].encode()])  # (the run's last refresh's)
        assert ccr.info(store, handle).last_seen == 0
    _, summary = _run(tmp_path, src, incremental=True)
    assert summary.reused == 1
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        assert ccr.info(store, handle).last_seen > time.time() - 60


@pytest.mark.parametrize(("extra", "said"), [(["--checksum"], "--checksum goes with --incremental"),
                                            (["--no-embed"], "--embed/--no-embed go with --index"),
                                            (["--embed"], "--embed/--no-embed go with --index")])
def test_an_option_that_would_do_nothing_is_refused(tmp_path: Path, extra: list[str], said: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--checksum without --incremental, --embed/--no-embed without --index were taken and
    did nothing (proxy refuses its --deferred options without --deferred): exit 1, OUT and
    the store untouched."""
    code = main(["compress", str(SAMPLES / "registry.jsonl"), "-o", str(tmp_path / "out"),
                 "--store", f"lmdb://{tmp_path}/ccr", "--workers", "1", *extra])
    assert code == 1 and said in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "ccr").exists()


def test_unwritable_out_is_exit_2_and_publishes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["compress", str(SAMPLES / "registry.jsonl"), "-o", str(blocker / "out"),
                 "--store", f"lmdb://{tmp_path}/ccr", "--workers", "1"])
    assert code == 2
    assert "cannot create output folder" in capsys.readouterr().err


def test_store_failure_is_exit_2_and_publishes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = tmp_path / "out"
    code = main(["compress", str(SAMPLES / "registry"), "-o", str(out), "--workers", "1",
                 "--store", f"lmdb://{blocker}/ccr"])
    assert code == 2
    assert str(blocker) in capsys.readouterr().err
    assert [p for p in out.rglob("*") if p.is_file() and p.name != pipeline.LOCK_FILE] == []


def test_strict_exit_1_on_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compress", str(SAMPLES / "registry.jsonl"), "-o", str(tmp_path / "o"),
            "--store", f"lmdb://{tmp_path}/ccr", "--workers", "1", "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["error"] == 1 and summary["documents"] == 10
    assert main([*args, "--strict"]) == 1


def test_no_documents_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAVEMAN_ALLOW_MEMORY_STORE", "1")  # memory:// is refused otherwise
    (tmp_path / "empty").mkdir()
    assert main(["compress", str(tmp_path / "empty"), "-o", str(tmp_path / "o"),
                 "--store", "memory://"]) == 1
    assert "no *.json or *.jsonl" in capsys.readouterr().err


def _entry_point() -> list[str]:
    """The console script installed beside this interpreter (not just any on PATH)."""
    beside = shutil.which("caveman-batch", path=str(Path(sys.executable).parent))
    return [beside] if beside else [sys.executable, "-m", "caveman_batch"]


def _cli(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
         **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*_entry_point(), *args], input=stdin, capture_output=True,
                          env={**os.environ, **(env or {})}, timeout=120, **kw)


def test_stdin_jsonl_end_to_end(tmp_path: Path) -> None:
    data = (SAMPLES / "registry.jsonl").read_bytes()
    proc = _cli("compress", "-", "-o", str(tmp_path / "o"), "--store", f"lmdb://{tmp_path}/ccr",
                "--json", "--quiet", stdin=data)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["documents"] == 10
    rows = _rows(tmp_path / "o" / "manifest.jsonl")
    assert rows[0]["source"] == {"path": "<stdin>", "line": 1}
    assert not (tmp_path / "o" / ".manifest.streams.json").exists()  # stdin is never reused whole
    handle = rows[0]["handle"]
    got = _cli("recover", handle, "--store", f"lmdb://{tmp_path}/ccr")
    assert got.stdout == data.splitlines()[0]


def test_incremental_rerun_end_to_end(tmp_path: Path) -> None:
    """Through the console script: a rerun reuses everything, by the stat cache where it can
    or (--checksum) hashing every source and output; OUT stays byte for byte the same."""
    args = ("compress", str(SAMPLES / "registry"), str(SAMPLES / "registry.jsonl"),
            "-o", str(tmp_path / "o"), "--store", f"lmdb://{tmp_path}/ccr", "--json", "--quiet")
    first = _cli(*args)
    assert first.returncode == 0, first.stderr
    before = _tree(tmp_path / "o")
    for extra in (["--incremental"], ["--incremental", "--checksum"]):
        again = _cli(*args, *extra)
        assert again.returncode == 0, again.stderr
        summary = json.loads(again.stdout)
        assert summary["reused"] == summary["documents"] == json.loads(first.stdout)["documents"]
        assert _tree(tmp_path / "o") == before


def test_sigkill_mid_run_then_rerun_completes(tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl"
    generate_registry(None, seed=11, servers=40, jsonl=src, target_bytes=40_000_000, oversize_bytes=0)
    out, store_url = tmp_path / "o", f"lmdb://{tmp_path}/ccr"
    # the tree first: its outputs are out when the kill comes, in the big stream that follows
    args = ("compress", str(SAMPLES / "registry"), str(src), "-o", str(out), "--store", store_url,
            "--workers", "2", "--quiet")
    proc = subprocess.Popen([*_entry_point(), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and not list((out / TMP_DIR).glob("stream-*")):
        time.sleep(0.02)
    time.sleep(0.2)  # well inside the run: originals being committed, the stream half-written
    workers = psutil.Process(proc.pid).children()
    assert len(workers) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    _gone, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == []  # the workers died with their parent
    assert not (out / "big.jsonl").exists() and not (out / "manifest.jsonl").exists()
    visible = [p for p in out.rglob("*")  # the outputs (not the run's hidden journal)
               if p.is_file() and TMP_DIR not in p.parts and not p.name.startswith(".")]
    assert visible  # killed past the first batches: some outputs were out
    with open_store(store_url) as store:
        for path in visible:  # whatever was published is whole, and its original is stored
            original = (SAMPLES / path.relative_to(out)).read_bytes()
            assert path.read_bytes() in (original, compress(original)[0])
            assert ccr.recover(store, hashlib.sha256(original).hexdigest()) == original
    done = _cli(*args[:-1], "--json")
    assert done.returncode == 0, done.stderr
    rows = _rows(out / "manifest.jsonl")
    assert len(rows) == json.loads(done.stdout)["documents"]
    assert not (out / TMP_DIR).exists()
    sample = rows[:: max(1, len(rows) // 50)]
    _recovers_all(sample, store_url, {})


def test_a_worker_killed_mid_run_is_named_and_the_rerun_completes(tmp_path: Path) -> None:
    """A pool worker killed (the out-of-memory killer's SIGKILL) stops the run with exit 2
    naming it, with no traceback and no manifest; the rerun finishes the job."""
    src = tmp_path / "big.jsonl"
    generate_registry(None, seed=12, servers=40, jsonl=src, target_bytes=20_000_000, oversize_bytes=0)
    out, store_url = tmp_path / "o", f"lmdb://{tmp_path}/ccr"
    args = ("compress", str(src), "-o", str(out), "--store", store_url, "--workers", "2", "--quiet")
    proc = subprocess.Popen([*_entry_point(), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and not list((out / TMP_DIR).glob("stream-*")):
        time.sleep(0.02)
    workers = psutil.Process(proc.pid).children()
    assert len(workers) == 2
    workers[0].send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert b"Traceback" not in stderr and b"a worker process died (signal 9" in stderr, stderr
    assert not (out / "manifest.jsonl").exists() and not (out / "big.jsonl").exists()
    done = _cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    assert len(_rows(out / "manifest.jsonl")) == json.loads(done.stdout)["documents"]


def test_whole_corpora_as_a_registry(corpora: Path, tmp_path: Path) -> None:
    """Every real catalog: an output and a row each, originals recoverable, same OUT for 1 and 2 workers."""
    one, first = _run(tmp_path, corpora, workers=1, out_name="one", store=f"lmdb://{tmp_path}/s1",
                      max_bytes=32 << 20)
    two, _ = _run(tmp_path, corpora, workers=2, out_name="two", store=f"lmdb://{tmp_path}/s2",
                  max_bytes=32 << 20)
    assert _tree(one) == _tree(two)
    rows = _rows(one / "manifest.jsonl")
    files = sorted(p for p in corpora.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl")
                   and not any(part.startswith(".") for part in p.relative_to(corpora).parts))
    assert len(rows) == first.documents == len(files)
    assert all(r["output"] for r in rows)
    malformed = [r for r in rows if "raw_malformed" in r["source"]["path"]]
    assert malformed and all(r["status"] in ("ok", "passthrough", "error") for r in malformed)
    assert first.ratio > 0.23
    with open_store(f"lmdb://{tmp_path}/s1") as store:
        for row in rows:
            assert ccr.recover(store, row["handle"]) == Path(row["source"]["path"]).read_bytes()


def _jsonl_registry(tmp: Path) -> Path:
    src = tmp / "registry.jsonl"
    generate_registry(None, seed=5, servers=12, jsonl=src, oversize_bytes=0)
    return src


def test_unchanged_jsonl_source_is_reused_whole(tmp_path: Path) -> None:
    src = _jsonl_registry(tmp_path)
    out, first = _run(tmp_path, src, incremental=True)
    before = _tree(out)
    assert ".manifest.streams.json" in before  # the fingerprint of the source and its output
    _, again = _run(tmp_path, src, incremental=True)
    assert _tree(out) == before  # the same bytes: manifest rows carried over verbatim
    assert again.reused == again.documents == first.documents
    assert (again.ok, again.error, again.tokens_after) == (first.ok, first.error, first.tokens_after)
    with open_store(f"lmdb://{tmp_path}/ccr") as store:  # every handle still recovers
        for row in _stored(_rows(out / "manifest.jsonl")):
            assert hashlib.sha256(ccr.recover(store, row["handle"])).hexdigest() == row["sha256"]


def test_changed_jsonl_source_or_damaged_output_is_redone_per_document(tmp_path: Path) -> None:
    src = _jsonl_registry(tmp_path)
    cap = {"max_bytes": 32 << 20}  # no oversize line: every document can be reused
    out, first = _run(tmp_path, src, incremental=True, **cap)
    lines = src.read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"description":"', b'"description":"Changed. ', 1)
    src.write_bytes(b"".join(lines))
    _, changed = _run(tmp_path, src, incremental=True, **cap)
    assert changed.reused == first.documents - 1  # one line changed: the rest reused one by one
    target = out / "registry.jsonl"
    damaged = bytearray(target.read_bytes())
    damaged[10] ^= 0x20
    target.write_bytes(bytes(damaged))
    _, repaired = _run(tmp_path, src, incremental=True, **cap)
    assert repaired.reused == first.documents - 1  # the damaged document is compressed again
    fresh, _ = _run(tmp_path, src, out_name="fresh", store=f"lmdb://{tmp_path}/s2", **cap)
    assert target.read_bytes() == (fresh / "registry.jsonl").read_bytes()


def test_stale_stream_fingerprint_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _jsonl_registry(tmp_path)
    out, first = _run(tmp_path, src, incremental=True)
    manifest = out / "manifest.jsonl"
    oversize = sum("--max-bytes" in (row["reason"] or "") for row in _rows(manifest))
    assert oversize  # copied through: reused only with the whole stream, never one by one
    manifest.write_bytes(manifest.read_bytes() + b"\n")  # no longer the manifest it describes
    streamed: list[int] = []
    real = incremental._stream_spans
    monkeypatch.setattr(incremental, "_stream_spans", lambda *a: streamed.append(1) or real(*a))
    _, again = _run(tmp_path, src, incremental=True)
    assert streamed == []  # not even read for spans (nor the store asked): its size tells
    assert again.reused == first.documents - oversize  # reused document by document instead
    _, whole = _run(tmp_path, src, incremental=True)
    assert whole.reused == first.documents  # the fingerprint is back in step with the manifest
    _, other_cap = _run(tmp_path, src, incremental=True, max_bytes=SMALL_CAP + 1)
    assert other_cap.reused == first.documents - oversize  # another --max-bytes: not whole


def test_rerun_into_another_store_commits_the_originals_again(tmp_path: Path) -> None:
    """A handle is never published for an original the store does not hold (pruned, moved)."""
    src = _jsonl_registry(tmp_path)
    reg = tmp_path / "reg"
    shutil.copytree(SAMPLES / "registry", reg)
    out, first = _run(tmp_path, src, reg, incremental=True)
    other = f"sqlite:///{tmp_path}/other.db"
    _, again = _run(tmp_path, src, reg, incremental=True, store=other)
    assert again.documents == first.documents
    # the JSONL stream is not reused whole; its documents, and the files, are reused one by one
    # with their originals committed again from the bytes in hand
    rows = [r for r in _rows(out / "manifest.jsonl") if r["handle"]]
    assert rows
    with open_store(other) as store:
        for row in rows:
            assert hashlib.sha256(ccr.recover(store, row["handle"])).hexdigest() == row["sha256"]


def test_two_sources_for_one_output_path_is_a_usage_error(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(SAMPLES / "registry.jsonl", tmp_path / name / "x.jsonl")
    code = main(["compress", str(tmp_path / "a" / "x.jsonl"), str(tmp_path / "b" / "x.jsonl"),
                 "-o", str(tmp_path / "out"), "--store", f"lmdb://{tmp_path}/ccr", "--quiet"])
    assert code == 1 and "would both be written to x.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    same = tmp_path / "a" / "x.jsonl"  # one source named twice is read once
    out, summary = _run(tmp_path, same, same, out_name="twice")
    once, _ = _run(tmp_path, same, out_name="once", store=f"lmdb://{tmp_path}/s2")
    assert (out / "x.jsonl").read_bytes() == (once / "x.jsonl").read_bytes()


# -- a directory rerun: each unchanged file reused whole through the fingerprint ----------


def _dir_registry(tmp: Path) -> Path:
    """A generated tree, with a registry array and a JSONL file in it: every kind of file."""
    reg = tmp / "reg"
    generate_registry(reg, seed=5, servers=12, oversize_bytes=20_000)
    shutil.copy(SAMPLES / "registry-array.json", reg / "array.json")
    shutil.copy(SAMPLES / "registry.jsonl", reg / "lines.jsonl")
    (reg / "none.jsonl").write_bytes(b"")  # a source with no document: no row to carry
    return reg


def _catalog_files(reg: Path) -> list[Path]:
    """The generated one-catalog files small enough to be compressed (not copied through)."""
    return [p for p in sorted(reg.rglob("*.json"))
            if "_quirks" not in p.parts and p.name != "array.json" and p.stat().st_size < SMALL_CAP]


def _assert_as_fresh(tmp: Path, reg: Path, out: Path, **kw: Any) -> None:
    """OUT, manifest and fingerprint included, byte for byte what a first run writes."""
    fresh, _ = _run(tmp, reg, out_name="fresh", store=f"lmdb://{tmp}/fresh-ccr", **kw)
    assert _tree(out) == _tree(fresh)
    shutil.rmtree(fresh)
    shutil.rmtree(tmp / "fresh-ccr")


def _not_reusable(out: Path, path: Path) -> int:
    """Rows of `path` a per-document rerun cannot reuse: copied through, never cached."""
    return sum(r["source"]["path"] == str(path) and not r["handle"] for r in _rows(out / "manifest.jsonl"))


def _rewrite_keeping_times(path: Path, data: bytes) -> None:
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _flip_one_char(data: bytes) -> bytes:
    at = data.index(b"description") + 20  # inside a description: a letter for another
    return data[:at] + (b"x" if data[at:at + 1] != b"x" else b"y") + data[at + 1:]


def _age_every_record(store_url: str) -> None:
    """Set every original's first-stored and last-seen back to 1970 (their ~seen entries,
    which a run's last refresh writes, gone)."""
    with open_store(store_url) as store:
        for key, value in list(store.items()):
            if len(key) == 64:
                h = ccr.decode_header(value)
                store.put(key, ccr.encode_record(h.original_length, h.content_type, 0, 0,
                                                 value[h.payload_offset:]))
        store.delete(list(store.keys(ccr.SEEN_PREFIX)))


@pytest.fixture(params=["hashed", "stat"])
def trust(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A rerun that hashes every file (files too fresh for the stat cache, as generated just
    before), or one that trusts the stat cache (any ctime counts as settled)."""
    if request.param == "stat":
        monkeypatch.setattr(fsio, "SETTLE_NS", 0)
    return str(request.param)


def _count_hashing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths a run hashes to tell a fingerprinted source (or its output) unchanged."""
    hashed: list[str] = []
    real = incremental._file_sha256

    def counting(path: str, size: int | None = None) -> Any:
        hashed.append(path)
        return real(path, size)

    monkeypatch.setattr(incremental, "_file_sha256", counting)
    return hashed


def test_unchanged_directory_is_reused_whole(tmp_path: Path, trust: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    before = _tree(out)
    fingerprint = json.loads((out / ".manifest.streams.json").read_bytes())
    assert sorted(fingerprint["streams"]) == sorted(
        p.relative_to(reg).as_posix() for p in reg.rglob("*.json*"))  # every file, every kind
    assert any("--max-bytes" in (r["reason"] or "") for r in _rows(out / "manifest.jsonl"))
    _age_every_record(f"lmdb://{tmp_path}/ccr")
    hashed = _count_hashing(monkeypatch)
    _, again = _run(tmp_path, reg, incremental=True)
    assert len(hashed) == (2 * len(fingerprint["streams"]) if trust == "hashed" else 0)
    assert _tree(out) == before  # manifest rows and fingerprint carried over verbatim
    assert again.reused == again.documents == first.documents  # the copied-through ones too
    assert (again.ok, again.error, again.tokens_after) == (first.ok, first.error, first.tokens_after)
    with open_store(f"lmdb://{tmp_path}/ccr") as store:  # every original still there, seen now
        for row in _stored(_rows(out / "manifest.jsonl")):
            assert hashlib.sha256(ccr.recover(store, row["handle"])).hexdigest() == row["sha256"]
            assert ccr.info(store, row["handle"]).last_seen > time.time() - 60
    _assert_as_fresh(tmp_path, reg, out)


def test_directory_changes_are_redone_the_rest_reused_whole(tmp_path: Path, trust: str) -> None:
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    n = first.documents
    files = _catalog_files(reg)
    assert len(files) >= 4

    # a source edited in place, to the same size, its mtime set back: its bytes tell
    _rewrite_keeping_times(files[0], _flip_one_char(files[0].read_bytes()))
    _, edited = _run(tmp_path, reg, incremental=True)
    assert (edited.documents, edited.reused) == (n, n - 1)
    _assert_as_fresh(tmp_path, reg, out)

    # an output deleted, another altered in place (same size, mtime set back): both healed
    target = [out / p.relative_to(reg) for p in files[1:3]]
    target[0].unlink()
    _rewrite_keeping_times(target[1], _flip_one_char(target[1].read_bytes()))
    _, healed = _run(tmp_path, reg, incremental=True)
    assert (healed.documents, healed.reused) == (n, n - 2)
    _assert_as_fresh(tmp_path, reg, out)

    # one item of the registry array changed: that file is redone document by document
    array = reg / "array.json"
    _rewrite_keeping_times(array, _flip_one_char(array.read_bytes()))
    _, item = _run(tmp_path, reg, incremental=True)
    assert (item.documents, item.reused) == (n, n - 1 - _not_reusable(out, array))
    _assert_as_fresh(tmp_path, reg, out)

    # a source added, then another removed
    added = reg / "zz-new" / "tools.json"
    added.parent.mkdir()
    shutil.copy(files[3], added)  # the same bytes as another file: its original is at hand
    _, grown = _run(tmp_path, reg, incremental=True)
    assert (grown.documents, grown.reused) == (n + 1, n + 1)
    assert (out / "zz-new" / "tools.json").read_bytes() == (out / files[3].relative_to(reg)).read_bytes()
    _assert_as_fresh(tmp_path, reg, out)
    files[3].unlink()
    _, shrunk = _run(tmp_path, reg, incremental=True)
    assert (shrunk.documents, shrunk.reused) == (n, n)
    assert (shrunk.changes.removed, shrunk.changes.outputs_deleted) == (1, 1)
    assert not (out / files[3].relative_to(reg)).exists()  # a removed source's output goes
    _assert_as_fresh(tmp_path, reg, out)

    _, settled = _run(tmp_path, reg, incremental=True)
    assert settled.reused == settled.documents == n


def test_directory_rerun_with_other_options_redoes_everything(tmp_path: Path) -> None:
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    other = Options(lead_bytes=40)
    _, changed = _run(tmp_path, reg, incremental=True, options=other)
    assert changed.documents == first.documents and changed.reused == 0
    _assert_as_fresh(tmp_path, reg, out, options=other)
    _, back = _run(tmp_path, reg, incremental=True)
    assert back.reused == 0
    _, cap = _run(tmp_path, reg, incremental=True, max_bytes=SMALL_CAP + 1)
    oversize = sum(not r["handle"] for r in _rows(out / "manifest.jsonl"))
    assert oversize and cap.reused == first.documents - oversize  # document by document
    _assert_as_fresh(tmp_path, reg, out, max_bytes=SMALL_CAP + 1)


def test_directory_rerun_heals_originals_the_store_lacks(tmp_path: Path) -> None:
    reg = _dir_registry(tmp_path)
    store_url = f"lmdb://{tmp_path}/ccr"
    out, first = _run(tmp_path, reg, incremental=True)
    rows = [r for r in _rows(out / "manifest.jsonl") if r["handle"]]
    pruned = next(r for r in rows if r["source"]["path"] == str(_catalog_files(reg)[0]))
    with open_store(store_url) as store:
        store.delete([pruned["sha256"].encode()])
        assert ccr.missing(store, [pruned["sha256"]]) == [pruned["sha256"]]
    _, again = _run(tmp_path, reg, incremental=True)
    assert again.reused == first.documents  # its output reused, its original committed again
    _assert_as_fresh(tmp_path, reg, out)
    other = f"sqlite:///{tmp_path}/other.db"
    _, moved = _run(tmp_path, reg, incremental=True, store=other)
    assert moved.documents == first.documents
    for url in (store_url, other):
        with open_store(url) as store:
            for row in rows:
                assert hashlib.sha256(ccr.recover(store, row["handle"])).hexdigest() == row["sha256"]


@pytest.mark.parametrize("damage", ["garbage", "not-an-object", "foreign", "rows-swapped", "wrong-types",
                                    "totals-short", "deep-errors"])
def test_bad_directory_fingerprint_is_ignored(tmp_path: Path, damage: str) -> None:
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    fingerprint = out / ".manifest.streams.json"
    record = json.loads(fingerprint.read_bytes())
    streams = record["streams"]
    if damage == "garbage":
        fingerprint.write_bytes(b"\x00{not json")
    elif damage == "not-an-object":
        fingerprint.write_bytes(b"[1, 2]")
    elif damage == "foreign":  # another registry's, and another manifest's
        other, _ = _run(tmp_path, SAMPLES / "registry", out_name="other", store=f"lmdb://{tmp_path}/s2")
        shutil.copy(other / ".manifest.streams.json", fingerprint)
    elif damage == "rows-swapped":  # in step with the manifest, but naming other rows
        rels = list(streams)
        firsts = [streams[r]["first_row"] for r in rels]
        for rel, at in zip(rels, firsts[1:] + firsts[:1]):
            streams[rel]["first_row"] = at
        fingerprint.write_text(json.dumps(record))
    elif damage == "deep-errors":  # not _Tally's error rows (nested 300 deep): refused, never carried
        deep: list[Any] = []
        for _ in range(300):
            deep = [deep]
        for value in streams.values():
            value["errors"] = deep
        fingerprint.write_text(json.dumps(record))
    elif damage == "totals-short":
        for value in streams.values():
            value["totals"]["documents"] -= 1
        fingerprint.write_text(json.dumps(record))
    else:
        for value in streams.values():
            value.update(source_size=str(value["source_size"]), output_sha256=None)
        fingerprint.write_text(json.dumps(record))
    _, again = _run(tmp_path, reg, incremental=True)
    assert again.documents == first.documents
    oversize = sum(not r["handle"] for r in _rows(out / "manifest.jsonl"))
    assert again.reused == first.documents - oversize  # document by document, nothing wrong reused
    _assert_as_fresh(tmp_path, reg, out)



def test_an_output_left_in_place_is_written_again_if_it_changed_since_it_was_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog file reused document by document keeps its own output in place only if that
    output is still the file read (and hashed) then: one written over meanwhile (here between
    the batch's dispatch and its publish) is written again, not left as it was found."""
    reg = tmp_path / "reg"
    generate_registry(reg, seed=5, servers=6, oversize_bytes=0)
    out, first = _run(tmp_path, reg, incremental=True)
    outputs = {path: path.read_bytes() for path in out.rglob("*.json")}
    (out / ".manifest.streams.json").unlink()  # no source reused whole: one by one, in place
    real = pipeline._Publisher.publish

    def publish_after_a_write(self: Any, *args: Any) -> Any:
        for path in outputs:
            path.write_bytes(b"{}")
        return real(self, *args)

    monkeypatch.setattr(pipeline._Publisher, "publish", publish_after_a_write)
    _, again = _run(tmp_path, reg, incremental=True)
    assert again.reused > 0
    assert {path: path.read_bytes() for path in outputs} == outputs


# -- the stat cache: unchanged files told by identity, size and times, not read --------------


def _stat_cache(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / STAT_CACHE).read_bytes())["stats"])


def test_stat_cache_spares_reading_unchanged_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    fingerprint = json.loads((out / ".manifest.streams.json").read_bytes())
    assert sorted(_stat_cache(out)) == sorted(fingerprint["streams"])  # every source, every kind
    hashed = _count_hashing(monkeypatch)
    _, again = _run(tmp_path, reg, incremental=True)
    assert hashed == [] and again.reused == again.documents == first.documents
    _, checked = _run(tmp_path, reg, incremental=True, checksum=True)
    assert len(hashed) == 2 * len(fingerprint["streams"])  # --checksum: every source and output
    assert checked.reused == first.documents
    _assert_as_fresh(tmp_path, reg, out)


def test_files_too_fresh_are_hashed_until_settled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose ctime is within SETTLE_NS of its reading could still change in the same
    clock tick unseen: it is not in the stat cache, and the next run hashes it."""
    reg = _dir_registry(tmp_path)  # just written
    out, first = _run(tmp_path, reg, incremental=True)
    assert _stat_cache(out) == {}
    hashed = _count_hashing(monkeypatch)
    _, again = _run(tmp_path, reg, incremental=True)
    assert again.reused == first.documents and len(hashed) == 2 * len(list(reg.rglob("*.json*")))
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)  # as if they were older: a hashing rerun keeps them
    hashed.clear()
    _run(tmp_path, reg, incremental=True)
    assert len(_stat_cache(out)) == len(list(reg.rglob("*.json*")))
    hashed.clear()
    _, settled = _run(tmp_path, reg, incremental=True)
    assert hashed == [] and settled.reused == first.documents


def test_stat_cache_sees_a_file_renamed_over_a_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same size, same mtime, other bytes, put in place by rename: another inode, another ctime."""
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    victim = _catalog_files(reg)[0]
    st = victim.stat()
    other = tmp_path / "other.json"
    other.write_bytes(_flip_one_char(victim.read_bytes()))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, victim)
    _, again = _run(tmp_path, reg, incremental=True)
    assert (again.documents, again.reused) == (first.documents, first.documents - 1)
    _assert_as_fresh(tmp_path, reg, out)


def test_outputs_of_the_last_clock_tick_are_not_in_the_stat_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An output whose ctime is not older than OUT's clock when the run ends could be
    changed in that same tick unseen: left out of the cache (here: all of them)."""
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)
    monkeypatch.setattr(fsio, "fs_now_ns", lambda folder: 0)
    reg = _dir_registry(tmp_path)
    out, _ = _run(tmp_path, reg, incremental=True)
    assert _stat_cache(out) == {}


@pytest.mark.parametrize("damage", ["garbage", "stale", "wrong-identity"])
def test_bad_stat_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    victim, bystander = _catalog_files(reg)[:2]
    rel = victim.relative_to(reg).as_posix()
    cache = json.loads((out / STAT_CACHE).read_bytes())
    _rewrite_keeping_times(victim, _flip_one_char(victim.read_bytes()))
    if damage == "garbage":
        (out / STAT_CACHE).write_bytes(b"\x00[")
    elif damage == "stale":  # it would trust the changed file, but belongs to another fingerprint
        cache["stats"][rel][0] = fsio.identity(victim.stat())
        cache["fingerprint_sha256"] = "0" * 64
        (out / STAT_CACHE).write_text(json.dumps(cache))
    else:  # an unchanged file's entry that is not its identity: it is hashed, and reused
        cache["stats"][bystander.relative_to(reg).as_posix()][0][1] += 1
        (out / STAT_CACHE).write_text(json.dumps(cache))
    hashed = _count_hashing(monkeypatch)
    _, again = _run(tmp_path, reg, incremental=True)
    assert (again.documents, again.reused) == (first.documents, first.documents - 1)
    assert str(victim) in hashed
    if damage == "wrong-identity":
        assert str(bystander) in hashed and len(hashed) == 4  # those two, each with its output
    _assert_as_fresh(tmp_path, reg, out)


def test_stat_cache_of_another_boot_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs are not fsync'd: after a power loss one may keep its name, size and times and
    lose its bytes, so the identities recorded in another boot are not trusted (hashed)."""
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    assert json.loads((out / STAT_CACHE).read_bytes())["boot_id"] == fsio.boot_id()
    monkeypatch.setattr(fsio, "_BOOT_ID", "another-boot")
    hashed = _count_hashing(monkeypatch)
    _, again = _run(tmp_path, reg, incremental=True)
    assert again.reused == first.documents
    assert len(hashed) == 2 * len(list(reg.rglob("*.json*")))  # every source and output
    hashed.clear()
    _, settled = _run(tmp_path, reg, incremental=True)  # recorded again in this boot
    assert hashed == [] and settled.reused == first.documents


def test_identity_settles_and_the_file_system_clock(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"{}")
    st = os.stat(path)
    assert fsio.settled_identity(st) is None  # just written
    later = st.st_ctime_ns + fsio.SETTLE_NS
    assert fsio.settled_identity(st, later) == fsio.identity(st) == [
        st.st_dev, st.st_ino, 2, st.st_mtime_ns, st.st_ctime_ns]
    assert fsio.settled_identity(st, later - 1) is None
    assert st.st_ctime_ns <= fsio.fs_now_ns(tmp_path) <= time.time_ns()
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # the clock probe is gone
    boot = Path("/proc/sys/kernel/random/boot_id")  # Linux; elsewhere no stat cache
    assert fsio.boot_id() == (boot.read_text().strip() if boot.exists() else None)


def test_row_naming_a_wrong_handle_is_not_carried_over(tmp_path: Path) -> None:
    """A manifest row whose handle is not its original's (edited, with the fingerprint tied
    to the edited manifest): neither its source reused whole nor its row reused."""
    reg = _dir_registry(tmp_path)
    out, first = _run(tmp_path, reg, incremental=True)
    manifest = out / "manifest.jsonl"
    victim = str(_catalog_files(reg)[0])
    lines = manifest.read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if json.loads(line)["source"]["path"] == victim)
    row = json.loads(lines[at])
    lines[at] = lines[at].replace(row["handle"].encode(), b"ccr_" + b"0" * 64)
    manifest.write_bytes(b"".join(lines))
    fingerprint = out / ".manifest.streams.json"
    record = json.loads(fingerprint.read_bytes())
    record["manifest_sha256"] = hashlib.sha256(manifest.read_bytes()).hexdigest()
    fingerprint.write_text(json.dumps(record))
    _, again = _run(tmp_path, reg, incremental=True)
    assert (again.documents, again.reused) == (first.documents, first.documents - 1)
    assert _rows(manifest)[at]["handle"] == row["handle"]
    _assert_as_fresh(tmp_path, reg, out)


def test_source_given_another_sources_bytes_gets_its_output_rewritten(
        tmp_path: Path, trust: str) -> None:
    """Reused document by document from the other source's output: written out, not left."""
    reg = tmp_path / "reg"
    reg.mkdir()
    a, b = (SAMPLES / "registry" / "fjord" / "chartmaker.json", SAMPLES / "registry" / "showcase" / "allfeatures.json")
    shutil.copy(a, reg / "a.json")
    shutil.copy(b, reg / "b.json")
    out, first = _run(tmp_path, reg, incremental=True, max_bytes=32 << 20)
    shutil.copy(reg / "b.json", reg / "a.json")
    for _ in range(2):
        _, again = _run(tmp_path, reg, incremental=True, max_bytes=32 << 20)
        assert again.reused == first.documents
        assert (out / "a.json").read_bytes() == (out / "b.json").read_bytes()
    _assert_as_fresh(tmp_path, reg, out, max_bytes=32 << 20)


def test_output_changed_after_its_check_is_written_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An output found intact (hashed) and then changed before it is published: not left in
    place, nor put in the stat cache as the intact one."""
    monkeypatch.setattr(fsio, "SETTLE_NS", 0)
    reg = tmp_path / "reg"
    reg.mkdir()
    shutil.copy(SAMPLES / "registry" / "fjord" / "chartmaker.json", reg / "a.json")
    out, _ = _run(tmp_path, reg, incremental=True)
    (out / ".manifest.streams.json").unlink()  # document by document: its output read and hashed
    real = pipeline._Publisher._write_file

    def meddling(self: Any, doc: Any, result: Any) -> Any:
        target = self.out / doc.sink.rel
        st = target.stat()
        target.write_bytes(_flip_one_char(target.read_bytes()))  # same size, mtime restored
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        return real(self, doc, result)

    monkeypatch.setattr(pipeline._Publisher, "_write_file", meddling)
    _, meddled = _run(tmp_path, reg, incremental=True)
    monkeypatch.setattr(pipeline._Publisher, "_write_file", real)
    assert meddled.reused == 1
    row = _rows(out / "manifest.jsonl")[0]
    assert hashlib.sha256((out / "a.json").read_bytes()).hexdigest() == row["out_sha256"]
    _assert_as_fresh(tmp_path, reg, out)


def test_file_name_not_utf8_is_an_error_row(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    reg.mkdir()
    shutil.copy(SAMPLES / "registry" / "fjord" / "chartmaker.json", reg / "good.json")
    try:
        shutil.copy(SAMPLES / "registry" / "fjord" / "chartmaker.json", os.fsencode(reg) + b"/caf\xe9.json")
    except OSError:
        pytest.skip("this file system refuses a name that is not UTF-8")
    out, summary = _run(tmp_path, reg)
    assert (summary.documents, summary.ok, summary.error) == (2, 1, 1)
    bad = next(r for r in _rows(out / "manifest.jsonl") if r["status"] == "error")
    assert bad["source"] == {"path": f"{reg}/caf\\xe9.json"} and bad["output"] is None
    assert "not UTF-8" in bad["reason"]
    assert sorted(os.listdir(out)) == sorted([".manifest.stat.json", ".manifest.streams.json", "good.json", pipeline.LOCK_FILE,
                                              "manifest.jsonl"])


@pytest.mark.parametrize("small", [False, True])
def test_reused_rows_copied_and_their_originals_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     small: bool) -> None:
    """A source reused whole has its rows copied from the previous manifest in chunks (never
    held whole) and its originals' last-seen refreshed as the store is asked about them, a
    few thousand at a time; `small` makes every chunk and batch tiny, so that rows straddle
    chunk ends."""
    if small:
        monkeypatch.setattr(incremental, "_ROWS_CHUNK", 97)
        monkeypatch.setattr(incremental, "_PRESENCE_BATCH", 2)
    reg = _dir_registry(tmp_path)
    src = _jsonl_registry(tmp_path)
    out, first = _run(tmp_path, reg, src, incremental=True)
    before = _tree(out)
    _age_every_record(f"lmdb://{tmp_path}/ccr")
    _, again = _run(tmp_path, reg, src, incremental=True)
    assert again.reused == again.documents == first.documents
    assert _tree(out) == before
    with open_store(f"lmdb://{tmp_path}/ccr") as store:
        for row in _stored(_rows(out / "manifest.jsonl")):
            assert ccr.info(store, row["handle"]).last_seen > time.time() - 60


def test_prune_during_a_rerun_keeps_what_it_carries_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Originals of the rows a rerun carries over are seen as the rerun finds them: a prune
    running while it publishes does not take them away from under the new manifest."""
    reg = _dir_registry(tmp_path)
    store_url = f"lmdb://{tmp_path}/ccr"
    out, first = _run(tmp_path, reg, incremental=True)
    _age_every_record(store_url)  # not seen since 1970
    real = pipeline._Publisher.publish
    pruned: list[int] = []

    def publish_after_a_prune(self: Any, *args: Any) -> Any:
        if not pruned:
            with open_store(store_url) as store:
                pruned.append(len(ccr.prune(store, 3600)))
        return real(self, *args)

    monkeypatch.setattr(pipeline._Publisher, "publish", publish_after_a_prune)
    _, again = _run(tmp_path, reg, incremental=True)
    assert pruned == [0] and again.reused == first.documents
    with open_store(store_url) as store:
        for row in _stored(_rows(out / "manifest.jsonl")):
            assert hashlib.sha256(ccr.recover(store, row["handle"])).hexdigest() == row["sha256"]


@pytest.mark.parametrize("incremental", [False, True])
def test_a_prune_shorter_than_the_run_never_leaves_a_manifest_naming_what_it_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, incremental: bool) -> None:
    """A prune whose window is shorter than the run drops the originals the run committed
    (or reused) at its start: the manifest is not published, the run fails naming why, and
    the next run publishes one every handle of which recovers. Before, the run exited 0
    with a manifest naming thousands of handles no store held."""
    reg = _dir_registry(tmp_path)
    store_url = f"lmdb://{tmp_path}/ccr"
    out, first = _run(tmp_path, reg, incremental=incremental)
    before = (out / "manifest.jsonl").read_bytes()
    for path in reg.rglob("*.json"):  # (so that a run computes, and commits, anew)
        path.write_bytes(path.read_bytes().replace(b'"description": "', b'"description": "Now: ', 1))
    real = pipeline._Publisher.publish
    pruned: list[int] = []

    def publish_after_a_prune(self: Any, *args: Any) -> Any:
        if not pruned:  # a prune --not-seen-for 1s, as though the run had taken a minute so far
            with open_store(store_url) as store:
                pruned.append(len(ccr.prune(store, 1, now_ms=ccr.now_ms() + 60_000)))
        return real(self, *args)

    monkeypatch.setattr(pipeline._Publisher, "publish", publish_after_a_prune)
    with pytest.raises(StoreError, match="left the store while it ran") as failed:
        _run(tmp_path, reg, incremental=incremental)
    assert str(failed.value).startswith(f"{store_url}: ")  # (the store named)
    assert pruned[0] > 0
    assert (out / "manifest.jsonl").read_bytes() == before  # the one before stays
    monkeypatch.setattr(pipeline._Publisher, "publish", real)
    _, again = _run(tmp_path, reg, incremental=incremental)
    with open_store(store_url) as store:
        rows = _stored(_rows(out / "manifest.jsonl"))
        assert len(rows) == len(_stored([json.loads(line) for line in before.splitlines()]))
        for row in rows:
            assert hashlib.sha256(ccr.recover(store, row["handle"])).hexdigest() == row["sha256"]


def test_manifest_path_taken_by_a_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    src = _jsonl_registry(tmp_path)
    manifest = tmp_path / "m" / "manifest.jsonl"
    _run(tmp_path, src, incremental=True, manifest=manifest)
    manifest.unlink()
    manifest.mkdir()
    fds = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").exists() else None
    with pytest.raises(UsageError, match="is a folder"):
        _run(tmp_path, src, incremental=True, manifest=manifest)
    assert manifest.is_dir() and not any(manifest.iterdir())  # nothing written into it
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds  # nothing left open



@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts /proc/self/fd")
def test_an_incremental_rerun_leaves_no_file_open(tmp_path: Path) -> None:
    """A library caller running rerun after rerun in one process: each closes the previous
    manifest and the outputs it read documents back from (a JSONL source with a line added is
    reused document by document, from its JSONL output), whole or one by one."""
    src = _jsonl_registry(tmp_path)
    _run(tmp_path, src, incremental=True)
    with src.open("ab") as fh:
        fh.write(src.read_bytes().splitlines(keepends=True)[0])  # the source changed
    fds = len(os.listdir("/proc/self/fd"))
    _, again = _run(tmp_path, src, incremental=True)
    assert again.reused > 0
    _, whole = _run(tmp_path, src, incremental=True)  # unchanged now: reused whole
    assert whole.reused == again.documents
    assert len(os.listdir("/proc/self/fd")) == fds


def _batch_sizes(items: list[Any]) -> list[int]:
    """Documents per batch."""
    from caveman_batch.inputs import Document
    from caveman_batch.pipeline import sources
    batches = list(sources._batches(iter(items)))
    assert sum(map(len, batches)) == len(items)
    return [sum(isinstance(item, Document) for item in batch) for batch in batches]


def test_a_batch_of_small_catalog_files_goes_on_to_a_mebibyte_a_stream_s_closes_at_64() -> None:
    """Small catalog files (a tree) are committed and published a MiB at a time, not 64
    at a time (one fsync'd commit per batch); a stream's documents (a pipe among them)
    still 64 at a time, and no batch holds more than 4 MB."""
    from caveman_batch.inputs import Document, Sink, SinkEnd
    from caveman_batch.pipeline import sources

    def files(n: int, size: int) -> list[Any]:
        out: list[Any] = []
        for i in range(n):
            sink = Sink(f"f{i}.json", "file")
            out += [Document({"path": f"f{i}.json"}, sink, raw=b"x" * size, size=size), SinkEnd(sink)]
        return out

    assert _batch_sizes(files(600, 4096)) == [256, 256, 88]  # 256 files make a MiB
    assert _batch_sizes(files(3000, 10)) == [sources.FILES_BATCH_DOCS, 1024, 952]
    assert _batch_sizes(files(100, 100_000)) == [42, 42, 16]  # 4 MB at most
    stream = Sink("s.jsonl", "jsonl")
    lines = [Document({"path": "s.jsonl", "line": i}, stream, raw=b"{}", size=2) for i in range(150)]
    assert _batch_sizes(lines) == [64, 64, 22]
    mixed = files(10, 10) + lines[:60] + files(10, 10)  # a stream's document in it: 64
    assert _batch_sizes(mixed) == [64, 16]


def test_spooled_work_writes_each_output_to_its_temp_file_or_hands_it_back(tmp_path: Path) -> None:
    """A local pool's worker writes a catalog file's output to the temp file it is given (the
    parent renames it); one it is given none for, or cannot write, comes back as bytes."""
    from caveman_batch.pipeline import worker

    raws = [json.dumps({"tools": [{"name": f"t{i}", "description": "Reads things. " * 30,
                                   "inputSchema": {"type": "object"}}]}).encode() for i in range(3)]
    temps = [str(tmp_path / "a"), None, str(tmp_path / "no-such-folder" / "c")]
    done = worker.spooled_work(Options(), raws, False, temps)
    plain = worker.work(Options(), raws, False)
    assert done[0][0] == temps[0] and Path(temps[0]).read_bytes() == plain[0][0]
    assert [d[0] for d in done[1:]] == [p[0] for p in plain[1:]]  # the bytes themselves
    # the rest as `work` gives it (the record's value holds the time it was made)
    assert [(d[1], d[2], d[4]) for d in done] == [(p[1], p[2], p[4]) for p in plain]


@pytest.mark.parametrize(("raw", "bad"), [
    (b'[{"tools":[]}] trailing garbage', True),
    (b'{"servers":[{"tools":[]}]} x', True),
    (b'{"servers":[{"tools":[]}]', True),  # the wrapper left unclosed
    (b'{"servers":[{"tools":[]}], "version": 3}\n', False),
    (b'[{"tools":[]}]\n\n', False),
    (codecs.BOM_UTF8 + b'{"servers":[{"tools":[]}]}', False),
])
def test_a_registry_followed_by_what_is_not_json_says_so(tmp_path: Path, raw: bytes, bad: bool) -> None:
    """Its items are read as ever; what follows the array is copied through as written, and
    if it is not JSON, an error row says so (it passed in silence, even with --strict)."""
    produced, rows = _registry_out(tmp_path, raw)
    assert produced == raw
    assert [r["status"] for r in rows] == ["passthrough", "error"] if bad else ["passthrough"]
    if bad:
        assert rows[1]["source"]["item"] == 1 and "not JSON after the registry's array" in rows[1]["reason"]


@pytest.mark.parametrize("case", ["wrapper-tail", "garbage-tail", "broken-item"])
def test_a_registry_tail_past_a_chunk_is_streamed_not_held(tmp_path: Path, case: str) -> None:
    """What follows the items (a wrapper's long other member, trailing data, the rest after a
    broken item) is copied through as written, a chunk at a time: it was read whole into
    memory (150 MB of tail: 340 MB peak), whatever --max-bytes said."""
    import tracemalloc

    long = b"12345678901234567890," * 600_000 + b"1"  # 12.6 MB
    raw = {"wrapper-tail": b'{"servers":[' + EMPTY + b"," + EMPTY + b'], "other": [' + long + b"]}",
           "garbage-tail": b"[" + EMPTY + b"," + EMPTY + b"]" + long,
           "broken-item": b"[" + EMPTY + b",{bad json}" + long + b"]"}[case]
    src = tmp_path / "registry.json"
    src.write_bytes(raw)
    tokens.warm()  # (its tables, 11 MB, loaded once a process: not the run's to count)
    tracemalloc.start()
    try:
        out, _ = _run(tmp_path, src, max_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    produced, rows = (out / "registry.json").read_bytes(), _rows(out / "manifest.jsonl")
    assert produced == raw
    statuses = [r["status"] for r in rows]
    if case == "broken-item":  # (what the broken item is read as matters not: it ends in error)
        assert statuses[0] == "passthrough" and statuses[-1] == "error"
    else:
        assert statuses == ["passthrough"] * 2 + (["error"] if case == "garbage-tail" else [])
    assert peak < 10 << 20, peak  # a few chunks, never the 12.6 MB tail


def test_pool_workers_ignore_ctrl_c() -> None:
    """Ctrl-C reaches the whole process group; the parent stops the run and shuts the pool
    down. A worker that took it could be interrupted in the middle of sending a result,
    and the parent's shutdown then waited for the rest of it forever. (The workers start
    from this process's SIGINT as a terminal's process has it: pytest run by a background
    job has it ignored, which the workers would inherit whatever they do.)"""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    pool = pipeline.executors.ProcessPool(1)
    try:
        assert pool.submit(Options(), [b'{"tools": []}'], False).result(timeout=60)
        assert pool.pool.submit(signal.getsignal, signal.SIGINT).result(timeout=60) == signal.SIG_IGN
    finally:
        pool.shutdown()
        signal.signal(signal.SIGINT, previous)


# the CLI with each commit of originals held 0.1 s: a run of this size lasts a few
# seconds, whatever the machine, so a signal 0.3 s into its streaming lands mid-run
_SLOW_COMMITS = """
import sys, time
from caveman_batch import ccr
real = ccr.commit
def commit(*args, **kwargs):
    time.sleep(0.1)
    return real(*args, **kwargs)
ccr.commit = commit
from caveman_batch.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_mid_run_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """SIGINT to the run's process group (a terminal's Ctrl-C) in the middle of the work:
    the run stops with 130, no worker's traceback, nothing left running; a rerun completes.
    The parent's commits are slowed (0.1 s each) so that the run is still going when the
    signal lands: a run of about 1 s could end first on a machine faster or slower than the
    test's author's (CI: five runs in a row ended first, exit 0)."""
    src = tmp_path / "big.jsonl"
    generate_registry(None, seed=11, servers=40, jsonl=src, target_bytes=20_000_000, oversize_bytes=0)
    out = tmp_path / "o"
    args = ("compress", str(src), "-o", str(out), "--store", f"lmdb://{tmp_path}/ccr",
            "--workers", "2", "--quiet")
    # (SIGINT as a terminal's process gets it: a shell that ran these tests in the background
    # (`&`, no job control) had it ignored, and an ignored signal stays ignored across exec)
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_COMMITS, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline and not list((out / TMP_DIR).glob("stream-*")):
        time.sleep(0.02)
    time.sleep(0.3)  # results streaming back from both workers
    workers = psutil.Process(proc.pid).children()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err, err
    _gone, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == []
    assert not (out / "manifest.jsonl").exists()
    done = _cli(*args)
    assert done.returncode == 0, done.stderr
