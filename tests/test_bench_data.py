"""bench_data: the synthetic registry is deterministic, well-formed, malformed where it says so, and
the committed samples are exactly what the documented command regenerates."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # bench_data is not an installed package: it runs from the repo
    sys.path.insert(0, str(REPO))

from bench_data.generate import generate_registry, main  # noqa: E402
from bench_data.quirks import QUIRKS  # noqa: E402

SAMPLES = REPO / "bench_data" / "samples"
README = REPO / "bench_data" / "README.md"
SAMPLE_COMMAND = (
    "python -m bench_data.generate bench_data/samples/registry --seed 7 --servers 7 "
    "--max-tools 3 --oversize-kb 24 --jsonl bench_data/samples/registry.jsonl "
    "--array bench_data/samples/registry-array.json"
)
SHAPES = {"mcp", "jsonrpc", "openai_functions", "openai_tools", "anthropic", "anthropic_list",
          "single_tool"}


# Independent shape check: what a reader of the README would write, not the generator's code.

def classify(doc: object) -> tuple[str, list[dict[str, Any]]] | None:
    if isinstance(doc, list) and doc and all(isinstance(t, dict) for t in doc):
        if all(t.get("type") == "function" and "function" in t for t in doc):
            return "openai_tools", [t["function"] for t in doc]
        if all("input_schema" in t for t in doc):
            return "anthropic_list", doc
        return None
    if not isinstance(doc, dict):
        return None
    if doc.get("jsonrpc") == "2.0" and isinstance(doc.get("result"), dict):
        return "jsonrpc", doc["result"]["tools"]
    if isinstance(doc.get("functions"), list):
        return "openai_functions", doc["functions"]
    tools = doc.get("tools")
    if isinstance(tools, list) and tools:
        return ("anthropic" if "input_schema" in tools[0] else "mcp"), tools
    if "name" in doc and "inputSchema" in doc:
        return "single_tool", [doc]
    return None


def schema_of(tool: dict[str, Any]) -> Any:
    for key in ("inputSchema", "input_schema", "parameters"):
        if key in tool:
            return tool[key]
    return None


def check_tools(tools: list[dict[str, Any]]) -> None:
    for tool in tools:
        assert isinstance(tool["name"], str) and tool["name"]
        assert "@@" not in json.dumps(tool), "an unfilled marker leaked"
        assert isinstance(tool["description"], str)
        schema = schema_of(tool)
        assert isinstance(schema, dict) and schema.get("type") == "object"


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def index_rows(root: Path) -> list[dict[str, str]]:
    lines = (root / "INDEX.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The default registry (60 servers, GitHub-sized one included), with a small oversize."""
    base = tmp_path_factory.mktemp("registry")
    summary = generate_registry(base / "out", seed=1234, oversize_bytes=64 * 1024,
                                jsonl=base / "all.jsonl", array=base / "all-array.json")
    return base / "out", summary


def _small(out: Path, seed: int) -> dict[str, Any]:
    return generate_registry(out / "tree", seed=seed, servers=12, oversize_bytes=16 * 1024,
                             jsonl=out / "s.jsonl", array=out / "s-array.json")


def test_same_seed_gives_byte_identical_outputs(tmp_path: Path) -> None:
    first, second = _small(tmp_path / "a", 5), _small(tmp_path / "b", 5)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert first["tree"]["bytes"] == second["tree"]["bytes"]


def test_different_seed_differs(tmp_path: Path) -> None:
    _small(tmp_path / "a", 5)
    _small(tmp_path / "b", 6)
    assert tree_bytes(tmp_path / "a") != tree_bytes(tmp_path / "b")


def test_every_valid_file_parses_and_has_its_documented_shape(registry: tuple[Path, Any]) -> None:
    root, summary = registry
    seen = set()
    for row in index_rows(root):
        if row["kind"] != "valid":
            continue
        found = classify(json.loads((root / row["path"]).read_bytes().decode("utf-8")))
        assert found is not None, row["path"]
        shape, tools = found
        assert shape == row["shape"], row["path"]
        assert len(tools) == int(row["tools"])
        check_tools(tools)
        seen.add(shape)
    assert seen == SHAPES
    assert summary["servers"] == sum(summary["shapes"].values()) == 61  # 60 + the showcase


def test_index_lists_every_file_and_nothing_is_hidden(registry: tuple[Path, Any]) -> None:
    root, _ = registry
    on_disk = set(tree_bytes(root)) - {"INDEX.tsv"}
    assert on_disk == {row["path"] for row in index_rows(root)}
    assert not [p for p in on_disk if any(part.startswith(".") for part in p.split("/"))]
    assert {p for p in on_disk if p.startswith("_quirks/")} == {f"_quirks/{n}" for n in QUIRKS}


def test_sizes_are_heavy_tailed_with_a_github_sized_server(registry: tuple[Path, Any]) -> None:
    rows = [r for r in index_rows(registry[0]) if r["kind"] == "valid"]
    tools = sorted(int(r["tools"]) for r in rows)
    assert tools[0] == 1 and tools[len(tools) // 2] <= 10 and tools[-1] >= 100
    assert max(int(r["bytes"]) for r in rows) > 120_000


def _raw_decode(data: bytes) -> tuple[object, str]:
    text = data.decode("utf-8")
    value, end = json.JSONDecoder().raw_decode(text)
    return value, text[end:].strip()


def test_quirk_files_are_malformed_as_advertised(registry: tuple[Path, Any]) -> None:
    quirks = registry[0] / "_quirks"
    read = {name: (quirks / name).read_bytes() for name in QUIRKS}
    for name in ("truncated.json", "not_json.json", "second_value.json",
                 "trailing_garbage.json"):
        with pytest.raises(json.JSONDecodeError):
            json.loads(read[name].decode("utf-8"))
    first, rest = _raw_decode(read["second_value.json"])
    assert classify(first) is not None and json.loads(rest) == {"tools": []}
    first, rest = _raw_decode(read["trailing_garbage.json"])
    assert classify(first) is not None and rest.startswith("//")
    with pytest.raises(UnicodeDecodeError):
        read["non_utf8.json"].decode("utf-8")
    assert classify(json.loads(read["non_utf8.json"].decode("latin-1"))) is not None
    assert classify(json.loads(read["unknown_shape.json"])) is None
    assert read["empty.json"] == b""
    oversize = read["oversize.json"]
    assert 0.9 * 64 * 1024 <= len(oversize) <= 1.2 * 64 * 1024
    assert classify(json.loads(oversize))[0] == "mcp"  # type: ignore[index]


def test_jsonl_lines_parse_except_the_malformed_one(registry: tuple[Path, Any]) -> None:
    _, summary = registry
    lines = Path(summary["jsonl"]["path"]).read_bytes().split(b"\n")
    assert lines.pop() == b""  # ends with a newline
    assert len(lines) == summary["jsonl"]["lines"] == summary["servers"] + 2
    bad = []
    for number, line in enumerate(lines, 1):
        try:
            found = classify(json.loads(line.decode("utf-8")))
        except json.JSONDecodeError:
            bad.append(number)
            continue
        assert found is not None, number
        check_tools(found[1])
    assert bad == [summary["jsonl"]["malformed_line"]]


def test_array_file_holds_every_catalog_and_one_unknown_item(registry: tuple[Path, Any]) -> None:
    _, summary = registry
    items = json.loads(Path(summary["array"]["path"]).read_bytes())["servers"]
    assert len(items) == summary["array"]["items"] == summary["servers"] + 2
    unknown = [item for item in items if classify(item) is None]
    assert unknown == [{"foo": 1}]
    named = [i for i in items if isinstance(i, dict) and ("tools" in i or "functions" in i)]
    assert named and all(next(iter(i)) == "name" for i in named)


def test_features_the_compressor_must_survive_are_present(registry: tuple[Path, Any]) -> None:
    root, _ = registry
    raw = b"".join(p.read_bytes() for p in root.rglob("*.json") if "_quirks" not in p.parts)
    text = raw.decode("utf-8")
    for literal in (rb'"default": 1.10', rb'"default": 1e3', rb'"default": -0,', rb'"$defs"',
                    rb'"definitions"', rb'"$ref"', rb'"const"', rb'"anyOf"', rb'"oneOf"',
                    rb'"$schema"', rb'"examples"', rb'"$comment"', rb'"outputSchema"',
                    rb'"_meta"', rb'"annotations": null', rb'"title": {', rb'"description": {',
                    rb'"count(*)"', rb'"application/vnd.api+json"', rb'"default": {',
                    rb'"description": ""'):
        assert literal in raw, literal
    for phrase in ("e.g.", "i.e.", "etc.", "config.json", "https://", "/srv/", "`", "\\n- ",
                   "\\n1. ", "must", "Never", "At most", "ISO 8601", "Exactly one of",
                   "Use this tool when", "Do not use this", "Deprecated", "case-sensitive",
                   "Defaults to"):
        assert phrase in text, phrase
    assert re.search(r"v\d+\.\d+\.\d+", text) and re.search(r"[^\x00-\x7f]", text)


def test_target_size_is_reached_roughly(tmp_path: Path) -> None:
    tree = generate_registry(tmp_path / "t", seed=3, servers=10, target_bytes=2_000_000,
                             oversize_bytes=64 * 1024)["tree"]
    assert 1_800_000 <= tree["bytes"] <= 2_200_000
    assert tree["bytes"] == sum(len(b) for p, b in tree_bytes(tmp_path / "t").items()
                                if p != "INDEX.tsv")
    jsonl = generate_registry(None, seed=3, servers=10, target_bytes=2_000_000,
                              oversize_bytes=64 * 1024, jsonl=tmp_path / "t.jsonl")["jsonl"]
    assert 1_800_000 <= (tmp_path / "t.jsonl").stat().st_size == jsonl["bytes"] <= 2_200_000
    lines = (tmp_path / "t.jsonl").read_bytes().splitlines()
    assert len(set(lines)) == len(lines) == jsonl["lines"]  # re-emitted servers stay distinct


def test_refuses_a_non_empty_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        generate_registry(tmp_path, servers=2, oversize_bytes=0)
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_samples_equal_what_the_documented_command_regenerates(tmp_path: Path) -> None:
    assert SAMPLE_COMMAND in README.read_text(encoding="utf-8")
    argv = [arg.replace("bench_data/samples", str(tmp_path)) for arg in
            shlex.split(SAMPLE_COMMAND)[3:]]
    assert main(argv) == 0
    assert tree_bytes(tmp_path) == tree_bytes(SAMPLES), "regenerate the samples (see README)"
    assert sum(len(b) for b in tree_bytes(SAMPLES).values()) < 300_000


def test_samples_cover_every_shape_and_quirk() -> None:
    rows = index_rows(SAMPLES / "registry")
    assert {r["shape"] for r in rows if r["kind"] == "valid"} == SHAPES
    assert {r["path"] for r in rows if r["kind"] == "quirk"} == {f"_quirks/{n}" for n in QUIRKS}


def test_cli_runs_as_a_module(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bench_data.generate", str(tmp_path / "o"),
                           "--servers", "3", "--oversize-kb", "0"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    summary = json.loads(done.stdout)
    assert summary["servers"] == 4 and "oversize.json" not in " ".join(summary["quirks"])
    assert "MB/s" in done.stderr
