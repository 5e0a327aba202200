"""The compressor over the real catalogs of ../shared/corpora (skipped when absent).

Every catalog parses, keeps its selection profile and its structure (the output is
the input with only descriptions changed and annotation keys removed, checked by a
walker written here, apart from the compressor's), loses no rule unit by our own
detector, and is idempotent. Each catalog is compressed once per session (cached).
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from caveman_batch.catalog import CompressResult, compress, parse
from caveman_batch.describe import ELLIPSIS, fold, split_sentences, units
from caveman_batch.profile import profile
from caveman_batch.rules import is_rule

CORPUS_NAMES = ["docker-mcp-registry", "github-mcp-server", "livemcpbench", "tooluniverse"]

# This walker's own idea of where schemas are (JSON Schema 2020-12 plus draft-07's dependencies).
ANNOTATIONS = {"title", "examples", "example", "$comment", "$schema"}
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
SCHEMA_ONE = {"items", "additionalItems", "additionalProperties", "contains", "propertyNames", "not", "if",
              "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
SCHEMA_LIST = {"anyOf", "oneOf", "allOf", "prefixItems", "items"}
TOOL_SCHEMAS = ("inputSchema", "input_schema", "parameters", "outputSchema", "output_schema")


@functools.cache
def compressed(path: Path) -> tuple[bytes, bytes, CompressResult]:
    raw = path.read_bytes()
    out, result = compress(raw)
    return raw, out, result


def catalogs(corpora: Path, name: str) -> list[Path]:
    folder = corpora / name / "catalogs"
    if not folder.is_dir():
        pytest.skip(f"corpus {name} not present")
    paths = sorted(folder.glob("*.json"))
    assert paths, f"{folder} holds no catalogs"
    return paths


def assert_none(failures: list[str], what: str) -> None:
    assert not failures, f"{len(failures)} catalog(s) {what}:\n" + "\n".join(failures[:10])


# -- an independent structure check -------------------------------------------------


def description_is_reduced_from(before: str, after: str) -> bool:
    """`after` is a subsequence of whole sentences of folded `before`, in order, joined by white
    space; one of them (the lead) may instead be a prefix of the source ending in an ellipsis."""
    source = fold(before)
    sentences = split_sentences(source)
    pos, first = 0, 0  # position in `after`; first source sentence still available
    while pos < len(after):
        for i in range(first, len(sentences)):
            start = sentences[i].start
            end = _longest_whole_match(source, sentences, i, after, pos)
            if end is not None:
                pos += end - start
                break
            cut = after.find(ELLIPSIS, pos)
            if cut > pos and source.startswith(after[pos:cut], start):
                pos, end = cut + len(ELLIPSIS), start + (cut - pos)
                break
        else:
            return False
        first = next((j for j, s in enumerate(sentences) if s.start >= end), len(sentences))
        while pos < len(after) and after[pos] in " \n":
            pos += 1
    return True


def _longest_whole_match(source: str, sentences: list[Any], i: int, after: str, pos: int) -> int | None:
    """The furthest sentence end e such that source[start_i:e] sits at after[pos:], then a break."""
    start, best = sentences[i].start, None
    for s in sentences[i:]:
        if not after.startswith(source[start:s.end], pos):
            break
        stop = pos + s.end - start
        if stop == len(after) or after[stop] in " \n":
            best = s.end
    return best


def same_except_prose(before: Any, after: Any, where: str, problems: list[str], schema: bool) -> None:
    """`after` is `before` with descriptions reduced and annotations dropped in schema positions only."""
    if not schema or not isinstance(before, dict):  # data: equal, key order included
        if isinstance(before, dict) and isinstance(after, dict) and list(before) == list(after):
            for key in before:
                same_except_prose(before[key], after[key], f"{where}/{key}", problems, False)
        elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
            for i, (b, a) in enumerate(zip(before, after)):
                same_except_prose(b, a, f"{where}/{i}", problems, False)
        elif before != after or type(before) is not type(after) or isinstance(before, dict | list):
            problems.append(f"{where}: data changed")
        return
    if not isinstance(after, dict):
        problems.append(f"{where}: schema became {type(after).__name__}")
        return
    expected_keys = [k for k in before if k not in ANNOTATIONS]
    if list(after) != expected_keys:
        problems.append(f"{where}: keys {list(after)} != {expected_keys}")
        return
    for key in expected_keys:
        b, a = before[key], after[key]
        path = f"{where}/{key}"
        if key == "description" and isinstance(b, str):
            if not (isinstance(a, str) and description_is_reduced_from(b, a)):
                problems.append(f"{path}: {a!r} is not a reduction of {b!r}")
        elif key in SCHEMA_MAPS and isinstance(b, dict):
            if list(a) != list(b):
                problems.append(f"{path}: names changed")
            for name in b:
                same_except_prose(b[name], a.get(name), f"{path}/{name}", problems, True)
        elif key in SCHEMA_LIST and isinstance(b, list):
            if not isinstance(a, list) or len(a) != len(b):
                problems.append(f"{path}: list changed")
                continue
            for i, (bi, ai) in enumerate(zip(b, a)):
                same_except_prose(bi, ai, f"{path}/{i}", problems, True)
        else:
            same_except_prose(b, a, path, problems, key in SCHEMA_ONE)


def tools_of(doc: Any) -> list[dict[str, Any]]:
    assert isinstance(doc, dict) and isinstance(doc["tools"], list)  # corpora are {"tools": [...]}
    return doc["tools"]


def structure_problems(raw: bytes, out: bytes) -> list[str]:
    before, after = json.loads(raw), json.loads(out)
    problems: list[str] = []
    if list(before) != list(after):
        return ["top-level keys changed"]
    tools_before, tools_after = tools_of(before), tools_of(after)
    if len(tools_before) != len(tools_after):
        return ["tool count changed"]
    for i, (tb, ta) in enumerate(zip(tools_before, tools_after)):
        if not isinstance(tb, dict):
            same_except_prose(tb, ta, f"/tools/{i}", problems, False)
            continue
        if list(tb) != list(ta):
            problems.append(f"/tools/{i}: tool keys changed")
            continue
        for key in tb:
            where = f"/tools/{i}/{key}"
            if key == "description" and isinstance(tb[key], str):
                if not description_is_reduced_from(tb[key], ta[key]):
                    problems.append(f"{where}: not a reduction")
            else:
                same_except_prose(tb[key], ta[key], where, problems, key in TOOL_SCHEMAS)
    return problems


def descriptions(node: Any, schema: bool = False) -> list[str]:
    """Every description string the compressor may reduce, by this file's walker."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                found.append(value)
            elif key in TOOL_SCHEMAS or key in SCHEMA_ONE or key in SCHEMA_LIST:
                for v in value if isinstance(value, list) else [value]:
                    found += descriptions(v, True)
            elif key in SCHEMA_MAPS and isinstance(value, dict):
                for v in value.values():
                    found += descriptions(v, True)
            elif key == "tools" and not schema:
                found += [d for t in value for d in descriptions(t)]
    return found


# -- the corpus-wide checks ---------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_parses_compresses_and_keeps_its_profile(corpora: Path, name: str) -> None:
    failures = []
    for path in catalogs(corpora, name):
        raw, out, result = compressed(path)
        parse(raw)  # strict parse succeeds (no Passthrough)
        if result.status != "ok" and result.reason != "not smaller":
            failures.append(f"{path.name}: {result.status} {result.reason}")
            continue
        before = profile(raw)
        if before != profile(out):
            failures.append(f"{path.name}: profile changed")
        elif before["shape"] != "mcp-tools" or not before["tools"]:
            failures.append(f"{path.name}: shape {before['shape']} with {len(before['tools'])} tools")
    assert_none(failures, "failed")


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_keeps_its_structure(corpora: Path, name: str) -> None:
    failures = []
    for path in catalogs(corpora, name):
        raw, out, _ = compressed(path)
        failures += [f"{path.name}{p}" for p in structure_problems(raw, out)]
    assert_none(failures, "changed more than prose")


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_loses_no_rule_unit(corpora: Path, name: str) -> None:
    lost = []
    for path in catalogs(corpora, name):
        raw, out, _ = compressed(path)
        pairs = list(zip(descriptions(json.loads(raw)), descriptions(json.loads(out)), strict=True))
        for before, after in pairs:
            folded = fold(before)
            lost += [f"{path.name}: {folded[u.start:u.end]!r}" for u in units(folded)
                     if is_rule(folded[u.start:u.end]) and folded[u.start:u.end] not in after]
    assert_none(lost, "lost rule units")


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_is_idempotent_and_saves_tokens(corpora: Path, name: str) -> None:
    failures = []
    before = after = 0
    for path in catalogs(corpora, name):
        raw, out, result = compressed(path)
        again, second = compress(out)
        if again != out:
            failures.append(f"{path.name}: second pass changed the output")
        assert second.status == "passthrough" and 0.0 <= result.ratio <= 1.0
        assert len(out) <= len(raw)
        if result.tokens_before is not None:
            before += result.tokens_before
            after += result.tokens_after or 0
    assert_none(failures, "not idempotent")
    assert 0 < after < before


# This file's own idea of a fenced block: an opening line (indented or not) of ``` or ~~~
# (a backtick fence's words hold no backtick) to a line of only a fence as long, of the same
# character; unclosed, the rest of the text. The block: from the opening line's start to the
# closing fence.
FENCE_LINE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
LONE_TAG = re.compile(r"[ \t]*<(/?)([A-Za-z][\w-]*)>[ \t\r]*")


def fenced_blocks(text: str) -> list[str]:
    blocks, opening, offset = [], None, 0
    for line in text.split("\n"):
        m = FENCE_LINE.fullmatch(line)
        if opening is None:
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                opening = (offset, m.group(1))
        elif m and m.group(1)[0] == opening[1][0] and len(m.group(1)) >= len(opening[1]) and not m.group(2).strip():
            blocks.append(text[opening[0]:offset + m.end(1)])
            opening = None
        offset += len(line) + 1
    if opening is not None:
        blocks.append(text[opening[0]:].rstrip())
    return blocks


def outside_blocks(text: str) -> str:
    for block in fenced_blocks(text):
        text = text.replace(block, "")
    return text


def lone_tag_counts(text: str) -> Counter[tuple[str, str]]:
    """How many lines of `text` outside blocks hold only an opening or a closing tag, by name."""
    return Counter((m.group(2), m.group(1)) for line in outside_blocks(text).split("\n")
                   if (m := LONE_TAG.fullmatch(line)))


def fences(text: str) -> int:
    return text.count("```") + text.count("~~~")


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_keeps_fenced_blocks_whole_and_tags_balanced(corpora: Path, name: str) -> None:
    """Every fenced block of every description is absent from the output or there byte for
    byte: every block the output holds is one of the input's, and no fence is left outside
    them that the input had not (a folded block would leave its fences); lone tags that were
    balanced stay balanced."""
    failures, kept = [], 0
    for path in catalogs(corpora, name):
        raw, out, _ = compressed(path)
        pairs = zip(descriptions(json.loads(raw)), descriptions(json.loads(out)), strict=True)
        for before, after in pairs:
            blocks = fenced_blocks(before)
            kept += sum(block in after for block in blocks)
            failures += [f"{path.name}: {b!r} is not a block of the input" for b in fenced_blocks(after)
                         if b not in blocks]
            if fences(outside_blocks(after)) > fences(outside_blocks(before)):
                failures.append(f"{path.name}: a fence outside any block in {after!r}")
            tags, tags_after = lone_tag_counts(before), lone_tag_counts(after)
            failures += [f"{path.name}: <{tag}> unbalanced in {after!r}" for tag, _ in tags
                         if tags[(tag, "")] == tags[(tag, "/")] and tags_after[(tag, "")] != tags_after[(tag, "/")]]
    assert_none(failures, "broke a block or a tag")
    if name == "livemcpbench":
        assert kept > 0  # the corpus holds blocks that are kept: this test can see them


def test_the_corpus_block_checker_sees_a_folded_block() -> None:
    before = "Example:\n    ```\n    run(\n        a=1\n    )\n    ```\n<hints>\n- x\n</hints>"
    assert fenced_blocks(before) == ["    ```\n    run(\n        a=1\n    )\n    ```"]
    folded = "Example: ``` run( a=1 ) ```"
    assert fenced_blocks(folded) == [] and fences(outside_blocks(folded)) > fences(outside_blocks(before))
    assert fenced_blocks("a\n~~~\nb  \n\n") == ["~~~\nb"]
    assert lone_tag_counts(before) == Counter({("hints", ""): 1, ("hints", "/"): 1})


def test_corpus_descriptions_are_found_by_both_walkers(corpora: Path) -> None:
    """A sanity check of this file's walker: the corpora hold reducible descriptions."""
    paths = catalogs(corpora, "github-mcp-server")
    raw, _, result = compressed(paths[0])
    assert result.status == "ok" and result.descriptions_reduced > 0
    assert len(descriptions(json.loads(raw))) >= result.descriptions_reduced


def test_raw_and_malformed_sources_never_raise(corpora: Path) -> None:
    files = sorted(p for pattern in ("*/raw_malformed/*", "*/raw/**/*") for p in corpora.glob(pattern)
                   if p.is_file())
    if not files:
        pytest.skip("no raw sources in the corpora")
    malformed = [p for p in files if p.parent.name == "raw_malformed"]
    for path in files:
        raw = path.read_bytes()
        out, result = compress(raw)
        assert result.status in ("ok", "passthrough"), path
        if result.status == "passthrough":
            assert out == raw and result.reason, path
        else:
            assert profile(raw) == profile(out), path
            assert compress(out)[0] == out, path
    for path in malformed:
        raw = path.read_bytes()
        out, result = compress(raw)
        assert (out, result.status) == (raw, "passthrough") and "invalid JSON" in (result.reason or ""), path


def test_structure_checker_catches_a_change() -> None:
    """The walker above is not a tautology: it sees data, key order and annotation changes."""
    raw = (b'{"tools":[{"name":"t","description":"Lists files.","inputSchema":{"title":"x","type":"object",'
           b'"properties":{"title":{"type":"string","default":{"description":"d"}}}}}]}')
    good = (b'{"tools":[{"name":"t","description":"Lists files.","inputSchema":{"type":"object",'
            b'"properties":{"title":{"type":"string","default":{"description":"d"}}}}}]}')
    assert structure_problems(raw, good) == []
    bad = [
        good.replace(b'"default":{"description":"d"}', b'"default":{"description":"D"}'),
        good.replace(b'"properties":{"title"', b'"properties":{"Title"'),
        (b'{"tools":[{"name":"t","description":"Lists files.","inputSchema":{"properties":{"title":{'
         b'"type":"string","default":{"description":"d"}}},"type":"object"}}]}'),  # key order
        good.replace(b'"description":"Lists files."', b'"description":"Deletes files."'),
        raw.replace(b'"title":{"type"', b'"title":{"title":"t","type"').replace(b'"title":"x",', b""),
    ]
    for changed in bad:
        assert structure_problems(raw, changed), changed


def test_description_checker_accepts_reductions_and_refuses_rewrites() -> None:
    source = ("Lists the files of a folder, one per line, with sizes and dates and owners and more. "
              "It is friendly. Paths must be absolute. Use this tool when asked.\n- a: one.\n- b: two.")
    assert description_is_reduced_from(source, source)
    assert description_is_reduced_from(source, "Lists the files of a folder… Paths must be absolute.")
    assert description_is_reduced_from(source, "It is friendly. Use this tool when asked. - b: two.")
    assert description_is_reduced_from(source, "Paths must be absolute.\n- b: two.")
    for rewritten in ["Paths must be absolute. It is friendly.",  # order changed
                      "Paths must be relative.",  # words changed
                      "Lists the files… Paths must be absolute. Lists the files…",  # two leads
                      "Paths must be absolute",  # a sentence cut without an ellipsis
                      "Paths must be absolute. Never delete.",  # invented
                      "It is friendly.Paths must be absolute."]:  # not separated
        assert not description_is_reduced_from(source, rewritten), rewritten
