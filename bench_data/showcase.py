"""One server that holds every trap at once, so even a tiny registry (the committed samples) has
each of them: every rule sentence and every tricky-punctuation sentence of bench_data.words,
lists, non-ASCII text, parameters named "title" and "description", a default object holding a
"description" key, enums with slashes and parentheses, const, oneOf, anyOf, $defs and
definitions with $ref, number literals 1.10 / 1e3 / -0, title/examples/$comment/$schema
annotations, tool-level title, annotations (and a null one), _meta, icons and outputSchema.

Random servers show these at realistic rates; this one shows them for sure.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from bench_data import schemas as s
from bench_data import words
from bench_data.catalogs import Spec, Template, make_spec, render, tool_slots
from bench_data.prose import SLUG_MARK, Prose, fill

SHOWCASE_VENDOR = "showcase"
_NAMES = ["create_issue", "search_issues", "get_issue"]


def build_showcase(seed: int) -> Template:
    rng = random.Random(seed * 31 + 5)  # its own stream: the showcase never shifts the servers
    spec = dataclasses.replace(
        make_spec(rng, 0, flagship=True), vendor=SHOWCASE_VENDOR, product="allfeatures",
        shape="mcp", layout="flat",
        fmt="indent2", key_order="natural", n_tools=len(_NAMES), meta=True, outputs=True)
    doc = {"tools": [_create(rng, spec), _search(rng, spec), _get(rng, spec)]}
    return Template(spec, len(_NAMES), render(doc, "indent2", False, "natural"),
                    render(doc, "compact", False, "natural"))


def _ctx(rng: random.Random, spec: Spec, verb: str, flavour: str, style: str) -> s.SchemaCtx:
    slots = tool_slots(rng, spec, verb, spec.domain.resources[0], _NAMES)
    return s.SchemaCtx(rng=rng, prose=Prose(rng, style, localized=False), flavour=flavour,
                       camel=False, slots=slots, fields=tuple(map(s.snake, spec.domain.fields)),
                       annotate=False)


def _text(ctx: s.SchemaCtx, schema: s.Schema, lead: str, groups: list[str],
          extra: tuple[str, ...]) -> str:
    """The lead, every rule sentence of the given groups, then the extra sentences."""
    props = list(schema["properties"])
    slots = {**ctx.slots, "p1": props[0], "P1": props[0].title(), "p2": props[-1]}
    sentences = [lead] + [t for g in groups for t in words.RULES[g]] + list(extra)
    return " ".join(fill(t, slots) for t in sentences)


def _create(rng: random.Random, spec: Spec) -> dict[str, Any]:
    ctx = _ctx(rng, spec, "create", "zod", "rich")
    builders = (s.p_title, s.p_description, s.p_metadata, s.p_tags, s.p_content_type,
                s.p_aggregate, s.p_filter, s.p_target, s.p_threshold, s.p_timeout)
    schema = s.assemble(ctx, [b(ctx) for b in builders], _NAMES[0])
    schema["properties"]["title"]["examples"] = ["Crash on start (v2.0.1)"]
    schema["properties"]["metadata"]["$comment"] = "Free-form; keys are not validated."
    lists = "\n\n" + words.LIST_BLOCKS[1] + "\n\n" + words.LIST_BLOCKS[0]
    text = _text(ctx, schema, words.LEADS_BY_VERB["create"][0],
                 ["obligation", "prohibition", "limit", "format"], words.TRICKY)
    return {"name": _NAMES[0], "title": "Create an issue",
            "description": text + fill(lists, ctx.slots), "inputSchema": schema,
            "outputSchema": s.build_output(ctx, "create", _NAMES[0]),
            "annotations": {"title": "Create an issue", "readOnlyHint": False,
                            "destructiveHint": False, "idempotentHint": False,
                            "openWorldHint": True},
            "_meta": {"ui": {"resourceUri": f"ui://{SLUG_MARK}/issue", "visibility": ["model"]}},
            "icons": [{"src": f"https://cdn.example.com/{SLUG_MARK}/issue.png",
                       "mimeType": "image/png"}]}


def _search(rng: random.Random, spec: Spec) -> dict[str, Any]:
    ctx = _ctx(rng, spec, "search", "plain", "agentic")
    builders = (s.p_operation, s.p_query, s.p_cursor, s.p_state, s.p_order, s.p_offset,
                s.p_language)
    schema = s.assemble(ctx, [b(ctx) for b in builders], _NAMES[1])
    operation = schema["properties"]["operation"]  # const for sure, not a one-value enum
    operation["const"] = operation.pop("enum", [None])[0] or operation["const"]
    text = _text(ctx, schema, words.LEADS_BY_VERB["search"][0],
                 ["default", "choice", "warning", "selection"], words.LOCALIZED)
    return {"name": _NAMES[1], "description": text, "inputSchema": schema,
            "annotations": None}


def _get(rng: random.Random, spec: Spec) -> dict[str, Any]:
    ctx = _ctx(rng, spec, "get", "pydantic", "docstring")
    schema = s.assemble(ctx, [b(ctx) for b in (s.p_id, s.p_fields, s.p_filter)], _NAMES[2])
    docs = [(name, str(prop.get("description", ""))) for name, prop in
            schema["properties"].items()]
    return {"name": _NAMES[2], "description": ctx.prose.tool(ctx.slots, docs),
            "inputSchema": schema, "outputSchema": s.build_output(ctx, "get", _NAMES[2]),
            "annotations": {"title": "Get an issue", "readOnlyHint": True}}
