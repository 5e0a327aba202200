"""The tool-schema compressor, golden: every shape, every rule, fail-open, adversarial inputs.

Inputs are small literal documents and outputs exact bytes, so a change in any byte
(key order, escaping, spacing, a number literal) fails a test. Two descriptions recur:
LONG (a tool description) and OWNER (a parameter description); both are longer than
160 bytes and hold filler that goes, a lead that stays and a rule that stays.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from caveman_batch import catalog
from caveman_batch.catalog import CompressResult, Options, compress
from caveman_batch.profile import profile

LONG = ("Searches the issues of a repository and returns them as a list. "
        "The output is shown as a friendly table in the terminal window. "
        "This is a friendly helper for people who like gardens and flowers. "
        "Do not use this tool for pull requests.")
LONG_OUT = "Searches the issues of a repository and returns them as a list. Do not use this tool for pull requests."
OWNER = ("The login of the account that owns the repository, a user or an organization on the site. "
         "This is a friendly helper for people who like gardens and flowers. Must be lowercase.")
OWNER_OUT = "The login of the account that owns the repository, a user or an organization… Must be lowercase."


def doc(template: str) -> bytes:
    """A literal document with LONG/OWNER spliced in (templates use @LONG@ and @OWNER@)."""
    return template.replace("@LONG@", LONG).replace("@OWNER@", OWNER).encode()


def expect(template: str) -> bytes:
    return template.replace("@LONG@", LONG_OUT).replace("@OWNER@", OWNER_OUT).encode()


def ok(raw: bytes, options: Options = catalog.DEFAULT_OPTIONS) -> tuple[bytes, CompressResult]:
    out, result = compress(raw, options)
    assert (result.status, result.reason) == ("ok", None), result
    return out, result


def test_descriptions_used_here_do_reduce() -> None:
    assert len(LONG.encode()) > 160 and len(OWNER.encode()) > 160
    from caveman_batch.describe import reduce

    assert (reduce(LONG), reduce(OWNER)) == (LONG_OUT, OWNER_OUT)


# -- every shape -------------------------------------------------------------------

SCHEMA_IN = """{
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "title": "SearchArgs",
        "properties": {
          "owner": {"type": "string", "description": "@OWNER@", "examples": ["octocat"]},
          "state": {"type": "string", "enum": ["open", "closed"], "default": "open"}
        },
        "required": ["owner"],
        "additionalProperties": false
      }"""
SCHEMA_OUT = ('{"type":"object","properties":{"owner":{"type":"string","description":"@OWNER@"},'
              '"state":{"type":"string","enum":["open","closed"],"default":"open"}},'
              '"required":["owner"],"additionalProperties":false}')

SHAPES = {
    "mcp-tools": (
        """{
  "tools": [
    {
      "name": "search_issues",
      "title": "Search issues",
      "description": "@LONG@",
      "inputSchema": %s,
      "annotations": {"title": "Search", "readOnlyHint": true},
      "_meta": {"z": 1, "title": "kept", "description": "@LONG@"}
    },
    {"name": "ping", "description": "Checks   that the server\\nis up."}
  ],
  "nextCursor": "abc"
}
""" % SCHEMA_IN,
        '{"tools":[{"name":"search_issues","title":"Search issues","description":"@LONG@",'
        '"inputSchema":%s,"annotations":{"title":"Search","readOnlyHint":true},'
        '"_meta":{"z":1,"title":"kept","description":"%s"}},'
        '{"name":"ping","description":"Checks that the server is up."}],"nextCursor":"abc"}'
        % (SCHEMA_OUT, LONG),
        2,
    ),
    "jsonrpc-tools-list": (
        """{"jsonrpc": "2.0", "id": 7, "result": {"tools": [
  {"name": "search_issues", "description": "@LONG@", "inputSchema": %s}
], "nextCursor": null, "_meta": {"title": "t"}}}""" % SCHEMA_IN,
        '{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"search_issues","description":"@LONG@",'
        '"inputSchema":%s}],"nextCursor":null,"_meta":{"title":"t"}}}' % SCHEMA_OUT,
        1,
    ),
    "openai-functions": (
        """{"functions": [
  {"name": "search_issues", "description": "@LONG@", "parameters": %s}
]}""" % SCHEMA_IN,
        '{"functions":[{"name":"search_issues","description":"@LONG@","parameters":%s}]}' % SCHEMA_OUT,
        1,
    ),
    "openai-tools": (
        """[
  {"type": "function", "function": {"name": "search_issues", "description": "@LONG@",
   "parameters": %s, "strict": true}}
]""" % SCHEMA_IN,
        '[{"type":"function","function":{"name":"search_issues","description":"@LONG@",'
        '"parameters":%s,"strict":true}}]' % SCHEMA_OUT,
        1,
    ),
    "tool-array": (
        """[
  {"name": "search_issues", "description": "@LONG@", "input_schema": %s},
  {"name": "ping", "input_schema": {"type": "object", "title": "PingArgs"}}
]""" % SCHEMA_IN,
        '[{"name":"search_issues","description":"@LONG@","input_schema":%s},'
        '{"name":"ping","input_schema":{"type":"object"}}]' % SCHEMA_OUT,
        2,
    ),
    "single-tool": (
        """{
  "name": "search_issues",
  "description": "@LONG@",
  "inputSchema": %s,
  "outputSchema": {"type": "object", "title": "Out", "$comment": "x",
                   "properties": {"title": {"type": "string", "title": "T", "description": "@OWNER@"}}}
}""" % SCHEMA_IN,
        '{"name":"search_issues","description":"@LONG@","inputSchema":%s,'
        '"outputSchema":{"type":"object","properties":{"title":{"type":"string","description":"@OWNER@"}}}}'
        % SCHEMA_OUT,
        1,
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_golden(shape: str) -> None:
    template, expected, ntools = SHAPES[shape]
    out, result = ok(doc(template))
    assert out == expect(expected)
    assert (result.shape, result.tools) == (shape, ntools)
    assert result.bytes_after == len(out) < result.bytes_before == len(doc(template))


def test_result_counts_what_changed() -> None:
    _, result = ok(doc(SHAPES["mcp-tools"][0]))
    # LONG, OWNER and "Checks   that…" (folded) changed; $schema, title, examples dropped
    assert (result.descriptions_reduced, result.annotations_dropped) == (3, 3)
    assert result.content_type == "application/json"
    assert (result.encoding, result.basis) == ("o200k_base", "inferred")
    assert 0 < result.tokens_after < result.tokens_before
    assert result.ratio == pytest.approx(1 - result.tokens_after / result.tokens_before)
    data = result.as_dict()
    assert data["ratio"] == round(result.ratio, 4) and data["status"] == "ok"
    json.dumps(data)  # a report is plain JSON


def test_output_schema_snake_case_is_a_schema_position() -> None:
    raw = b'{"name": "t", "output_schema": {"title": "X", "type": "string", "description": "@OWNER@"}}'
    out, _ = ok(raw.replace(b"@OWNER@", OWNER.encode()))
    assert out == expect('{"name":"t","output_schema":{"type":"string","description":"@OWNER@"}}')


def test_openai_tools_mixed_with_a_non_function_entry() -> None:
    raw = doc('[{"type": "function", "function": {"name": "a", "description": "@LONG@"}}, '
              '{"type": "code_interpreter"}]')
    out, result = ok(raw)
    assert out == expect('[{"type":"function","function":{"name":"a","description":"@LONG@"}},'
                         '{"type":"code_interpreter"}]')
    assert (result.shape, result.tools) == ("openai-tools", 1)


# -- what changes, and where --------------------------------------------------------


def test_parameters_named_title_and_description_survive() -> None:
    raw = doc("""{"tools": [{"name": "create_issue", "inputSchema": {
      "type": "object",
      "properties": {
        "title": {"type": "string", "title": "Title", "description": "Issue title"},
        "description": {"type": "string", "title": "Body", "description": "@OWNER@"},
        "examples": {"type": "array", "items": {"type": "string", "title": "E"}},
        "$comment": {"type": "string"}
      },
      "required": ["title", "description"]
    }}]}""")
    out, _ = ok(raw)
    assert out == expect(
        '{"tools":[{"name":"create_issue","inputSchema":{"type":"object","properties":{'
        '"title":{"type":"string","description":"Issue title"},'
        '"description":{"type":"string","description":"@OWNER@"},'
        '"examples":{"type":"array","items":{"type":"string"}},'
        '"$comment":{"type":"string"}},"required":["title","description"]}}]}')


def test_ref_into_defs_with_titles() -> None:
    raw = doc("""{"tools": [{"name": "ship", "inputSchema": {
      "type": "object",
      "properties": {"home": {"$ref": "#/$defs/Address", "title": "Home"},
                     "work": {"$ref": "#/definitions/title"}},
      "$defs": {"Address": {"title": "Address", "type": "object",
                            "properties": {"city": {"title": "City", "type": "string"}}}},
      "definitions": {"title": {"title": "A def called title", "type": "string",
                                "description": "@OWNER@"}}
    }}]}""")
    out, result = ok(raw)
    assert out == expect(
        '{"tools":[{"name":"ship","inputSchema":{"type":"object","properties":{'
        '"home":{"$ref":"#/$defs/Address"},"work":{"$ref":"#/definitions/title"}},'
        '"$defs":{"Address":{"type":"object","properties":{"city":{"type":"string"}}}},'
        '"definitions":{"title":{"type":"string","description":"@OWNER@"}}}}]}')
    assert result.annotations_dropped == 4


def test_enum_values_with_slashes_and_parentheses_untouched() -> None:
    raw = doc("""{"tools": [{"name": "t", "description": "@LONG@", "inputSchema": {"type": "object",
      "properties": {"model": {"type": "string",
        "enum": ["gpt-4o (2024-08-06)", "a/b/c", "https://x.example/y?z=1", "  two  spaces ",
                 "Must be. Not a sentence.", {"title": "t", "description": "  d  "}, null, 1.50]}}}}]}""")
    out, _ = ok(raw)
    assert out == expect(
        '{"tools":[{"name":"t","description":"@LONG@","inputSchema":{"type":"object",'
        '"properties":{"model":{"type":"string","enum":["gpt-4o (2024-08-06)","a/b/c",'
        '"https://x.example/y?z=1","  two  spaces ","Must be. Not a sentence.",'
        '{"title":"t","description":"  d  "},null,1.50]}}}}]}')


@pytest.mark.parametrize("keyword", ["default", "const", "enum", "required", "dependentRequired"])
def test_data_positions_are_not_walked(keyword: str) -> None:
    value = ('{"description": "%s", "title": "T", "examples": [1], "properties": {"a": {"title": "x"}}}'
             % LONG)
    if keyword in ("enum", "required"):
        value = f"[{value}]"
    raw = doc('{"tools": [{"name": "t", "inputSchema": {"type": "object", "title": "drop me", '
              '"%s": %s}}]}' % (keyword, value))
    out, _ = ok(raw)
    kept = json.dumps(json.loads(value), separators=(",", ":"), ensure_ascii=False)
    assert out == ('{"tools":[{"name":"t","inputSchema":{"type":"object","%s":%s}}]}'
                   % (keyword, kept)).encode()


def test_examples_are_data_when_annotations_are_kept() -> None:
    raw = doc('{"tools": [{"name": "t", "description": "@LONG@", "inputSchema": {"title": "T", '
              '"examples": [{"description": "  spaced  ", "title": "x"}], "example": {"title": "y"}}}]}')
    out, result = ok(raw, Options(drop_annotations=False))
    assert out == expect('{"tools":[{"name":"t","description":"@LONG@","inputSchema":{"title":"T",'
                         '"examples":[{"description":"  spaced  ","title":"x"}],"example":{"title":"y"}}}]}')
    assert result.annotations_dropped == 0


def test_annotation_keys_dropped_in_every_subschema_position() -> None:
    sub = '{"title": "t", "$comment": "c", "example": 1, "examples": [1], "$schema": "s", "type": "string"}'
    keys = ["items", "additionalItems", "additionalProperties", "contains", "unevaluatedItems",
            "unevaluatedProperties", "propertyNames", "not", "if", "then", "else", "contentSchema"]
    lists = ["anyOf", "oneOf", "allOf", "prefixItems", "items"]
    maps = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"]
    parts = [f'"{k}": {sub}' for k in keys[1:]]
    parts += [f'"{k}": [{sub}, {sub}]' for k in lists]
    parts += [f'"{k}": {{"title": {sub}}}' for k in maps]
    raw = ('{"tools": [{"name": "t", "description": "%s", "inputSchema": {%s}}]}'
           % (LONG, ", ".join(parts))).encode()
    out, result = ok(raw)
    sub_out = '{"type":"string"}'
    parts_out = [f'"{k}":{sub_out}' for k in keys[1:]]
    parts_out += [f'"{k}":[{sub_out},{sub_out}]' for k in lists]
    parts_out += [f'"{k}":{{"title":{sub_out}}}' for k in maps]
    assert out == ('{"tools":[{"name":"t","description":"%s","inputSchema":{%s}}]}'
                   % (LONG_OUT, ",".join(parts_out))).encode()
    assert result.annotations_dropped == 5 * (len(keys) - 1 + 2 * len(lists) + len(maps))


def test_unknown_keywords_and_extensions_are_left_alone() -> None:
    raw = doc('{"tools": [{"name": "t", "description": "@LONG@", "inputSchema": {'
              '"x-ui": {"title": "t", "description": "  a  b  "}, "dependencies": {"a": ["b", "title"]},'
              '"description": {"not": "a string"}}}]}')
    out, _ = ok(raw)
    assert out == expect('{"tools":[{"name":"t","description":"@LONG@","inputSchema":{'
                         '"x-ui":{"title":"t","description":"  a  b  "},"dependencies":{"a":["b","title"]},'
                         '"description":{"not":"a string"}}}]}')


def test_tool_level_fields_untouched() -> None:
    raw = doc("""{"tools": [{"title": "Search", "name": "s", "description": "@LONG@",
      "annotations": {"title": "A", "examples": [1], "description": "  spaced  "},
      "_meta": {"$schema": "m", "title": "M"}, "icons": [{"src": "a.png", "title": "i"}],
      "examples": ["tool-level examples are not a schema"]}]}""")
    out, _ = ok(raw)
    assert out == expect('{"tools":[{"title":"Search","name":"s","description":"@LONG@",'
                         '"annotations":{"title":"A","examples":[1],"description":"  spaced  "},'
                         '"_meta":{"$schema":"m","title":"M"},"icons":[{"src":"a.png","title":"i"}],'
                         '"examples":["tool-level examples are not a schema"]}]}')


def test_key_order_preserved() -> None:
    raw = doc("""{"tools": [{"inputSchema": {"required": ["zeta"], "properties": {
        "zeta": {"type": "string", "minLength": 1, "description": "z"},
        "alpha": {"maxLength": 3, "type": "string"}}, "type": "object"},
      "description": "@LONG@", "name": "zz"}], "_z": 0, "_a": 1}""")
    out, _ = ok(raw)
    assert out == expect('{"tools":[{"inputSchema":{"required":["zeta"],"properties":{'
                         '"zeta":{"type":"string","minLength":1,"description":"z"},'
                         '"alpha":{"maxLength":3,"type":"string"}},"type":"object"},'
                         '"description":"@LONG@","name":"zz"}],"_z":0,"_a":1}')


NUMBERS = ["1.10", "1e3", "1E+2", "-0", "-0.0", "12345678901234567890123", "-98765432109876543210",
           "0.1e-5", "1e400", "9007199254740993", "18446744073709551616", "123456789012345678", "0"]


def test_number_literals_kept_as_written() -> None:
    listed = ", ".join(NUMBERS)
    raw = doc('{"tools": [{"name": "n", "description": "@LONG@", "inputSchema": {"type": "number", '
              '"minimum": 1.10, "maximum": 1e3, "multipleOf": 1E+2, "default": -0, '
              '"enum": [%s], "const": {"x": [%s]}}}], "version": 2.50}' % (listed, listed))
    out, _ = ok(raw)
    compact = ",".join(NUMBERS)
    assert out == expect('{"tools":[{"name":"n","description":"@LONG@","inputSchema":{"type":"number",'
                         '"minimum":1.10,"maximum":1e3,"multipleOf":1E+2,"default":-0,'
                         '"enum":[%s],"const":{"x":[%s]}}}],"version":2.50}' % (compact, compact))


def test_non_ascii_unescaped_and_no_html_escaping() -> None:
    raw = doc(r'''{"tools": [{"name": "caf\u00e9", "description": "@LONG@",
      "inputSchema": {"properties": {"q": {"description": "a < b && c > d \u65e5\u672c \ud83d\ude00 \/x",
      "enum": ["<script>&amp;</script>", "\u2028", "tab\there", "nul\u0000", "quote\"back\\slash"]}}}}]}''')
    out, _ = ok(raw)
    assert out == expect('{"tools":[{"name":"café","description":"@LONG@",'
                         '"inputSchema":{"properties":{"q":{"description":"a < b && c > d 日本 😀 /x",'
                         '"enum":["<script>&amp;</script>","\u2028","tab\\there","nul\\u0000",'
                         '"quote\\"back\\\\slash"]}}}}]}')
    out.decode("utf-8")  # strictly valid UTF-8


def test_short_descriptions_only_folded_and_kept_whole() -> None:
    short = "Must be   set.\n\nThe output\tis shown as a friendly table."
    raw = json.dumps({"tools": [{"name": "t", "description": short}]}, indent=2).encode()
    out, _ = ok(raw)
    assert out == b'{"tools":[{"name":"t","description":"Must be set.\\n\\nThe output is shown as a friendly table."}]}'


def test_options_change_thresholds() -> None:
    raw = doc('{"tools": [{"name": "t", "description": "@LONG@"}]}')
    out, _ = ok(raw, Options(short_bytes=1000))
    assert json.loads(out)["tools"][0]["description"] == LONG
    out, _ = ok(raw, Options(lead_bytes=20))
    assert json.loads(out)["tools"][0]["description"] == "Searches the… Do not use this tool for pull requests."
    assert Options().key() != Options(lead_bytes=20).key() != Options(drop_annotations=False).key()


def test_options_key_differs_for_every_option_that_changes_the_output() -> None:
    variants = [Options(), Options(short_bytes=1000), Options(lead_bytes=20), Options(drop_annotations=False),
                Options(short_bytes=1000, lead_bytes=20, drop_annotations=False),
                Options(count_tokens=False)]  # (it skips the "not fewer tokens" passthrough)
    assert len({o.key() for o in variants}) == len(variants)
    assert Options().key() == "s160-l80-a1"  # (the key of every manifest written so far)


def test_count_tokens_off_leaves_counts_unknown() -> None:
    _, result = ok(doc(SHAPES["mcp-tools"][0]), Options(count_tokens=False))
    assert (result.tokens_before, result.tokens_after, result.ratio) == (None, None, 0.0)


def test_bom_is_accepted() -> None:
    raw = b"\xef\xbb\xbf" + doc('{"tools": [{"name": "t", "description": "@LONG@"}]}')
    out, _ = ok(raw)
    assert out == expect('{"tools":[{"name":"t","description":"@LONG@"}]}')


def test_input_is_not_mutated_and_compress_is_deterministic() -> None:
    raw = bytearray(doc(SHAPES["single-tool"][0]))
    first, _ = compress(bytes(raw))
    assert compress(bytes(raw))[0] == first and bytes(raw) == doc(SHAPES["single-tool"][0])


# -- fail-open ----------------------------------------------------------------------

TOOL = '{"name": "t", "description": "%s"}' % LONG
PASSTHROUGH = {
    "malformed": (('{"tools": [%s' % TOOL).encode(), "invalid JSON"),
    "trailing comma": (('{"tools": [%s,]}' % TOOL).encode(), "invalid JSON"),
    "second value": (('{"tools": [%s]} {}' % TOOL).encode(), "second top-level value"),
    "second value after newline": (('{"tools": [%s]}\n[]' % TOOL).encode(), "second top-level value"),
    "not utf-8": (('{"tools": [%s]}' % TOOL).encode().replace(b"issues", b"issu\xe9s"), "not UTF-8"),
    "utf-16": (('{"tools": [%s]}' % TOOL).encode("utf-16"), "not UTF-8"),
    "empty": (b"", "empty"),
    "blank": (b" \n\t ", "empty"),
    "unknown shape": (b'{"foo": 1,   "bar": [1, 2]}', "unknown shape"),
    "a bare string": (b'  "just a string"  ', "unknown shape"),
    "empty array": (b"[  ]", "unknown shape"),
    "array without tools": (b'[{"foo": 1}, 2, "x"]', "unknown shape"),
    "result without jsonrpc": (('{"result": {"tools": [%s]}}' % TOOL).encode(), "unknown shape"),
    "duplicate keys": (('{"tools": [%s], "tools": []}' % TOOL).encode(), "duplicate key 'tools'"),
    "nested duplicate keys": (('{"tools": [{"name": "a", "name": "b", "description": "%s"}]}' % LONG).encode(),
                              "duplicate key 'name'"),
    "NaN": (('{"tools": [%s], "x": NaN}' % TOOL).encode(), "NaN"),
    "Infinity": (('{"tools": [%s], "x": Infinity}' % TOOL).encode(), "Infinity"),
    "-Infinity": (('{"tools": [%s], "x": -Infinity}' % TOOL).encode(), "Infinity"),
    "lone surrogate": (('{"tools": [{"name": "t", "description": "%s \\ud800"}]}' % LONG).encode(),
                       "surrogate"),
    "lone surrogate in a short description": (b'{"tools": [{"name": "t", "description": "a\\ud800"}]}',
                                              "surrogate"),
    "lone low surrogate in a name": (('{"tools": [{"name": "\\udc00", "description": "%s"}]}' % LONG).encode(),
                                     "surrogate"),
    "not smaller": (b'{"tools":[{"name":"t","description":"Lists files.","inputSchema":{"type":"object"}}]}',
                    "not smaller"),
    "control character": (('{"tools": [{"name": "t\x01", "description": "%s"}]}' % LONG).encode(),
                          "invalid JSON"),
}


@pytest.mark.parametrize("case", list(PASSTHROUGH))
def test_fail_open_byte_for_byte(case: str) -> None:
    raw, reason = PASSTHROUGH[case]
    out, result = compress(raw)
    assert out == raw
    assert out is raw or bytes(out) == raw
    assert result.status == "passthrough"
    assert result.reason is not None and reason in result.reason, result.reason
    assert result.bytes_before == result.bytes_after == len(raw)
    assert result.ratio == 0.0


# The passthroughs whose input is itself bad (not UTF-8, not JSON, duplicate keys):
# a batch reports them as errors. The others are sound JSON left alone.
BROKEN = {"malformed", "trailing comma", "second value", "second value after newline", "not utf-8",
          "utf-16", "empty", "blank", "duplicate keys", "nested duplicate keys", "NaN", "Infinity",
          "-Infinity", "control character"}


@pytest.mark.parametrize("case", list(PASSTHROUGH))
def test_a_passthrough_is_broken_only_when_the_document_is_bad(case: str) -> None:
    _, result = compress(PASSTHROUGH[case][0])
    assert result.broken is (case in BROKEN)
    assert result.as_dict()["broken"] is (case in BROKEN)


def test_json_nested_too_deep_to_parse_is_not_broken() -> None:
    raw = b'{"tools": [{"name": "t", "description": "x", "inputSchema": {"default": ' + b"[" * 3000 + b"]" * 3000 + b"}}]}"
    out, result = compress(raw)
    assert out == raw and result.reason == "nesting too deep to parse" and result.broken is False


def test_a_description_left_as_it_was_is_not_counted_as_reduced() -> None:
    raw = doc('{"tools": [{"name": "t", "description": "@LONG@", "inputSchema": {"type": "object", '
              '"properties": {"a": {"type": "string", "description": "Short and folded."}}}}]}')
    _, result = ok(raw)
    assert result.descriptions_reduced == 1


@pytest.mark.parametrize("raw", [
    doc('{"tools": [{"description": "@LONG@"}, {"name": 3, "description": "@LONG@"}]}'),  # no str name
    doc('{"name": "pkg", "description": "@LONG@", "version": "1.0"}'),  # a package.json, not a tool
    doc('{"tools": [{"name": "a", "note": "@LONG@"}]}'),  # a name, but no description or schema
    doc('[{"name": "t", "description": "@LONG@", "inputSchema": {"type": "object"}}, {"foo": 1}]'),  # untyped other
])
def test_what_is_not_a_tool_passes_through_as_unknown(raw: bytes) -> None:
    out, result = compress(raw)
    assert out == raw and result.status == "passthrough"
    assert result.reason is not None and result.reason.startswith("unknown shape"), result.reason


F1 = "The output is shown as a friendly table in the terminal window."
F2 = "This is a friendly helper for people who like gardens and flowers."


def test_the_trace_names_each_change_by_its_pointer_in_key_order() -> None:
    spaced = LONG.replace("Searches the", "Searches   the")  # the lead folded, not cut
    params = {"type": "object", "title": "T", "description": LONG,
              "properties": {"a/~b": {"anyOf": [{"type": "string"},
                                                {"type": "integer", "description": spaced, "examples": [1]}]}},
              "allOf": [{"description": OWNER}], "not": {"description": LONG}}
    tool = {"type": "function", "function": {"name": "s", "description": OWNER, "parameters": params}}
    for document, base in [(tool, "/function"), ([{"type": "web_search"}, tool], "/1/function")]:
        trace: list[dict[str, object]] = []
        shape, _, _ = catalog.rewrite(json.loads(json.dumps(document)), trace=trace)
        assert [(c["path"], c["kind"], c.get("lead_cut")) for c in trace] == [
            (f"{base}/description", "description", True),
            (f"{base}/parameters/title", "annotation", None),
            (f"{base}/parameters/description", "description", False),
            (f"{base}/parameters/properties/a~1~0b/anyOf/1/examples", "annotation", None),
            (f"{base}/parameters/properties/a~1~0b/anyOf/1/description", "description", False),
            (f"{base}/parameters/allOf/0/description", "description", True),
            (f"{base}/parameters/not/description", "description", False),
        ], shape
        assert trace[2]["dropped"] == [F1, F2]


def test_a_schema_nested_deeper_than_the_limit_through_properties_passes_through() -> None:
    deep: dict[str, object] = {"type": "object"}
    for _ in range(catalog.MAX_DEPTH + 5):  # (under orjson's 255 levels)
        deep = {"type": "object", "properties": {"p": deep}}
    raw = json.dumps({"tools": [{"name": "t", "description": LONG, "inputSchema": deep}]}).encode()
    out, result = compress(raw)
    assert out == raw and result.reason == f"schema nested deeper than {catalog.MAX_DEPTH} levels"


def test_an_empty_tool_list_is_a_catalog_of_no_tools() -> None:
    out, result = ok(b'{"tools": []}')
    assert out == b'{"tools":[]}' and (result.shape, result.tools) == ("mcp-tools", 0)


def test_fewer_bytes_in_as_many_tokens_is_still_compressed() -> None:
    out, result = ok(b'{"tools":[{"name":"t","description":"Lists files. "}]}')
    assert out == b'{"tools":[{"name":"t","description":"Lists files."}]}'
    assert result.tokens_after == result.tokens_before


def test_ratio_stays_in_zero_to_one() -> None:
    more = CompressResult("ok", None, "mcp-tools", 1, 10, 9, tokens_before=10, tokens_after=12)
    assert more.ratio == 0.0
    assert CompressResult("ok", None, "mcp-tools", 1, 10, 9, tokens_before=10, tokens_after=4).ratio == 0.6


def test_passthrough_reasons_say_where() -> None:
    _, result = compress(b'{"tools": [\n  {"name": "t",\n   "description": }]}')
    assert result.reason == "invalid JSON at line 3 column 19: Expecting value"
    _, result = compress(b'{"tools":[]}  x')
    assert result.reason is not None and "line 1 column 15" in result.reason
    _, result = compress(b'\xff{}')
    assert result.reason == "not UTF-8 (byte 0)"


def test_passthrough_counts_tokens_when_it_is_text() -> None:
    _, result = compress(b'{"foo": "bar baz"}')
    assert result.tokens_before == result.tokens_after and result.tokens_before > 0
    _, result = compress(b'{"foo": "\xff"}')
    assert (result.tokens_before, result.tokens_after) == (None, None)


def test_already_compressed_passes_through_with_its_shape() -> None:
    out, _ = ok(doc(SHAPES["mcp-tools"][0]))
    again, result = compress(out)
    assert again == out
    assert (result.status, result.reason, result.shape, result.tools) == ("passthrough", "not smaller",
                                                                          "mcp-tools", 2)


# -- adversarial --------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    b'{"tools":[{"name":"t","description":"d","inputSchema":' + b'{"items":' * 100_000 + b"{}"
    + b"}" * 100_000 + b"}]}",
    b'{"tools":[{"name":"t","description":"d","inputSchema":{"default":' + b"[" * 100_000
    + b"]" * 100_000 + b"}}]}",
], ids=["array", "object", "schema", "default"])
def test_100k_deep_nesting_passes_through(raw: bytes) -> None:
    out, result = compress(raw)
    assert out == raw
    assert result.status == "passthrough" and "deep" in (result.reason or "")
    assert profile(raw) == {"shape": None, "tools": []}


@pytest.mark.parametrize("depth", [201, 260, 600])
def test_deep_schema_below_parser_limit_passes_through(depth: int) -> None:
    schema = b'{"title":"x","items":' * depth + b"{}" + b"}" * depth
    raw = b'{"tools": [{"name": "t", "description": "d", "inputSchema": ' + schema + b"}]}"
    out, result = compress(raw)
    assert out == raw and result.status == "passthrough"
    assert result.reason is not None and ("deep" in result.reason or "ecursion" in result.reason)


@pytest.mark.parametrize("depth", [300, 900])
def test_deep_data_passes_through(depth: int) -> None:
    out, result = compress(deep_default(depth))
    assert out == deep_default(depth) and result.status == "passthrough"
    assert result.reason is not None and "re-serialize" in result.reason


def deep_default(depth: int) -> bytes:
    return (b'{"tools": [{"name": "t", "description": "d", "inputSchema": {"type": "object", '
            b'"properties": {"p": {"type": "array", "default": ' + b"[" * depth + b"]" * depth + b"}}}}]}")


@pytest.mark.parametrize("depth", [300, 900])
def test_profile_of_deep_data_does_not_raise(depth: int) -> None:
    """A default value nested deeper than orjson's 255 levels is still a catalog to profile."""
    got = profile(deep_default(depth))
    assert got["shape"] == "mcp-tools" and got["tools"][0]["name"] == "t"


def test_profile_of_a_huge_number_literal() -> None:
    raw = b'{"tools": [{"name": "t", "inputSchema": {"type": "number", "maximum": 1e400, "default": -1e999}}]}'
    out, result = compress(raw)
    assert result.status == "ok" and b'"maximum":1e400,"default":-1e999' in out
    assert profile(raw) == profile(out)
    assert profile(raw) != profile(raw.replace(b"1e400", b"1e401"))  # not collapsed to infinity


@pytest.mark.parametrize(("a", "b"), [("18446744073709551616", "18446744073709551617"),
                                      ("1", "1.0"), ("0", "-0"), ("0.0", "-0.0"), ("100", "1e2"),
                                      ("1.10", "1.1"), ("123456789012345678901234567890",
                                                        "123456789012345678901234567891")])
def test_the_profile_tells_number_literals_apart(a: str, b: str) -> None:
    """A literal the compressor changed would show (read back through orjson, each pair
    compared equal: 2**64 + 1 a float, 1.0 as 1, 1.10 as 1.1)."""
    def made(literal: str) -> bytes:
        return (b'{"tools": [{"name": "t", "inputSchema": {"type": "object", "properties": '
                b'{"n": {"type": "number", "default": %s, "enum": [%s]}}}}]}'
                % (literal.encode(), literal.encode()))

    assert profile(made(a)) != profile(made(b))
    out, _ = compress(made(b))
    assert profile(out) == profile(made(b))


def test_the_profile_prints_a_big_integer_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b'{"tools": [{"name": "t", "inputSchema": {"type": "object", "properties": '
                     b'{"n": {"type": "integer", "default": 18446744073709551617}}}}]}')
    done = subprocess.run([sys.executable, "-m", "caveman_batch", "profile", str(path)],
                          capture_output=True, timeout=60)
    assert done.returncode == 0 and b'"default": 18446744073709551617' in done.stdout


def test_30mb_single_description_completes() -> None:
    paragraph = ("Returns the weather report for a city in a friendly table with wind, rain and sun hours "
                 "for each day of the week ahead, plus a short summary written for people who like "
                 "gardens. ") * 3 + "Cities must be named in full. "
    text = paragraph * (30_000_000 // len(paragraph))
    raw = json.dumps({"tools": [{"name": "weather", "description": text}]}).encode()
    assert len(raw) > 29_000_000
    started = time.process_time()  # CPU time: a sanity bound, not a speed goal (see benchmarks/)
    out, result = compress(raw)
    elapsed = time.process_time() - started
    assert result.status == "ok" and elapsed < 30, (result.status, elapsed)
    kept = json.loads(out)["tools"][0]["description"]
    lead = "Returns the weather report for a city in a friendly table with wind, rain and…"
    rules_kept = kept.count("Cities must be named in full.")
    assert kept.startswith(lead + " Cities must be named in full.")
    assert rules_kept == text.count("Cities must be named in full.")
    assert kept == lead + " " + " ".join(["Cities must be named in full."] * rules_kept)


@pytest.mark.parametrize("schema", [
    b'{"anyOf": {"title": "x", "type": "string"}}',
    b'{"not": [{"title": "x", "type": "string"}]}',
    b'{"prefixItems": {"description": "  a  b  "}}',
])
def test_profile_law_on_odd_subschema_containers(schema: bytes) -> None:
    raw = b'{"tools": [{"name": "t", "description": "d", "inputSchema": ' + schema + b"}]}"
    out, _ = compress(raw)
    assert profile(raw) == profile(out)


@pytest.mark.parametrize("schema", [b'{"required": ["\\udc00"]}', b'{"enum": ["\\ud800"]}',
                                    b'{"x-ext": {"\\ud800": 1}}'])
def test_profile_of_a_lone_surrogate_in_data(schema: bytes) -> None:
    raw = b'{"tools": [{"name": "t", "description": "d", "inputSchema": ' + schema + b"}]}"
    out, result = compress(raw)
    assert out == raw and result.status == "passthrough"
    got = profile(raw)
    assert got["shape"] == "mcp-tools" and got["tools"][0]["name"] == "t"


def test_the_profile_prints_an_integer_past_ints_digit_limit_as_it_is(tmp_path: Path) -> None:
    """An integer of over 4,300 digits (more than int() reads) made the whole value it was
    in one {"$json": "…"} string (an enum holding it: the enum as text); it is shown as
    the number it is, as any other integer, and told apart from one digit more."""
    big = "9" * 5000
    made = ('{"tools": [{"name": "t", "inputSchema": {"type": "object", "properties": '
            '{"n": {"type": "integer", "default": %s, "enum": [1, -%s, "x"]}}}}]}')
    path = tmp_path / "big.json"
    path.write_text(made % (big, big))
    done = subprocess.run([sys.executable, "-m", "caveman_batch", "profile", str(path)],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"$json" not in done.stdout
    assert f'"default": {big}\n'.encode() in done.stdout
    assert f"-{big},\n".encode() in done.stdout
    assert profile((made % (big, big)).encode()) != profile((made % (big + "9", big)).encode())
    raw = (made % (big, big)).encode()
    assert profile(raw) == profile(compress(raw)[0])
