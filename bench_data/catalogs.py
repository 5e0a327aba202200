"""Synthetic servers: their tools, the document shape they are published in, and their bytes.

A server is generated once as a Template: its catalog rendered to bytes that still hold markers
for the server's name (@@NAME@@, @@SLUG@@, @@TP@@ for a tool-name prefix, @@VAR@@ for one varying
sentence). Emitting a server fills the markers with bytes.replace, so a pool of templates can be
re-emitted under thousands of names at disk speed (the 500 MB benchmark inputs need that).

Shapes (the "shape" of a Template):
    mcp               {"tools": [{name, description, inputSchema, ...}]}
    jsonrpc           {"jsonrpc": "2.0", "id": ..., "result": {"tools": [...], ...}}
    openai_functions  {"functions": [{name, description, parameters}]}
    openai_tools      [{"type": "function", "function": {name, description, parameters}}]
    anthropic         {"tools": [{name, description, input_schema}]}
    anthropic_list    [{name, description, input_schema}]
    single_tool       one MCP tool object
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from bench_data import words
from bench_data.prose import NAME_MARK, SLUG_MARK, VARIANT_MARK, Prose, article
from bench_data.schemas import FLAVOURS, Schema, SchemaCtx, build_input, build_output, camel, snake

PREFIX_MARK = "@@TP@@"

SHAPES: tuple[str, ...] = ("mcp", "jsonrpc", "openai_functions", "openai_tools", "anthropic",
                           "anthropic_list", "single_tool")
_SHAPE_WEIGHTS = (56, 12, 9, 9, 6, 4, 4)
_FORMATS = (("indent2", 58), ("compact", 20), ("spaced", 8), ("indent4", 8), ("indent1", 6))
_STYLES = (("terse", 40), ("rich", 32), ("agentic", 14), ("docstring", 14))
_NAMING = (("snake", 60), ("camel", 14), ("kebab", 5), ("dotted", 6), ("prefixed", 15))
_FLAVOUR_WEIGHTS = (35, 20, 20, 15, 10)
_EXTRA_PARAMS = (0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6, 8, 11)
_NUM_PLACEHOLDER = re.compile(rb'"@@NUM\(([-+.0-9eE]+)\)@@"')

FLAGSHIP_TOOLS = 112  # about the size of the GitHub MCP server (~35k o200k tokens)


def _weighted(rng: random.Random, table: tuple[tuple[str, int], ...]) -> str:
    names, weights = zip(*table, strict=True)
    return str(rng.choices(names, weights)[0])


@dataclass(frozen=True)
class Spec:
    """The per-server choices that real servers make once (SDK, style, shape)."""

    domain: words.Domain
    product: str
    vendor: str
    shape: str
    layout: str
    fmt: str
    ascii_only: bool
    key_order: str
    flavour: str
    style: str
    localized: bool
    naming: str
    n_tools: int
    annotations: str
    meta: bool
    outputs: bool
    tool_titles: bool
    annotate: bool


def make_spec(rng: random.Random, index: int, flagship: bool) -> Spec:
    domain = words.DOMAINS[0] if flagship else rng.choice(words.DOMAINS)
    # The first servers take each shape in turn, so even a tiny registry covers every shape.
    shape = SHAPES[index] if index < len(SHAPES) else rng.choices(SHAPES, _SHAPE_WEIGHTS)[0]
    flavour = rng.choices(FLAVOURS, _FLAVOUR_WEIGHTS)[0]
    if shape != "mcp" and shape != "jsonrpc" and flavour == "lossy":
        flavour = "plain"
    return Spec(
        domain=domain, product=rng.choice(domain.products), vendor=rng.choice(words.VENDORS),
        shape=shape, layout="nested" if rng.random() < 0.3 else "flat",
        fmt=_weighted(rng, _FORMATS),
        ascii_only=rng.random() < 0.5,
        key_order=rng.choices(("natural", "sorted"), (75, 25))[0],
        flavour=flavour, style="agentic" if flagship else _weighted(rng, _STYLES),
        localized=rng.random() < 0.12, naming=_weighted(rng, _NAMING),
        n_tools=FLAGSHIP_TOOLS if flagship else (1 if shape == "single_tool" else _tool_count(rng)),
        annotations=rng.choices(("none", "hints", "null", "title"), (50, 30, 10, 10))[0],
        meta=rng.random() < 0.1, outputs=rng.random() < 0.15, tool_titles=rng.random() < 0.1,
        annotate=rng.random() < 0.3)


def _tool_count(rng: random.Random) -> int:
    # Heavy-tailed: median about 6, a long tail up to 120, like real registries.
    return max(1, min(120, round(rng.lognormvariate(math.log(6), 1.0))))


@dataclass(frozen=True)
class Template:
    """One server rendered with markers; emit() fills them."""

    spec: Spec
    tools: int
    tree: bytes  # the file as published (shape and formatting of the server)
    line: bytes  # the same catalog, compact, for JSONL and array outputs


def build_template(rng: random.Random, index: int, flagship: bool = False,
                   overrides: dict[str, Any] | None = None) -> Template:
    """Generate server number index; overrides pin Spec fields (fixtures need a known shape,
    the committed samples a small size)."""
    spec, tools, doc = build_document(rng, index, flagship, overrides)
    return Template(spec, len(tools), render(doc, spec.fmt, spec.ascii_only, spec.key_order),
                    render(doc, "compact", False, spec.key_order))


def build_document(rng: random.Random, index: int, flagship: bool = False,
                   overrides: dict[str, Any] | None = None
                   ) -> tuple[Spec, list[dict[str, Any]], object]:
    """The server's spec, its MCP-shaped tools and its document, before serialisation."""
    spec = make_spec(rng, index, flagship)
    overrides = dict(overrides or {})
    if "max_tools" in overrides:
        overrides["n_tools"] = min(spec.n_tools, overrides.pop("max_tools"))
    spec = dataclasses.replace(spec, **overrides)
    tools = [_mcp_tool(t) for t in _build_tools(rng, spec)]
    return spec, tools, _wrap(spec, tools, rng)


def render(doc: object, fmt: str, ascii_only: bool, key_order: str) -> bytes:
    """Serialise deterministically, then turn number placeholders into raw literals."""
    indent = {"indent2": 2, "indent4": 4, "indent1": 1}.get(fmt)
    seps = (",", ":") if fmt == "compact" else ((", ", ": ") if fmt == "spaced" else None)
    text = json.dumps(doc, indent=indent, separators=seps, ensure_ascii=ascii_only,
                      sort_keys=key_order == "sorted")
    return _NUM_PLACEHOLDER.sub(rb"\1", text.encode("utf-8"))


# Tools ---------------------------------------------------------------------------------------

def _build_tools(rng: random.Random, spec: Spec) -> list[dict[str, Any]]:
    pairs = _pick_pairs(rng, spec)
    names = [_tool_name(spec, verb, res) for verb, res in pairs]
    prose = Prose(rng, spec.style, spec.localized)
    tools = [_tool(rng, spec, prose, verb, res, name, names) for (verb, res), name in
             zip(pairs, names, strict=True)]
    tools[0]["description"] = _with_variant(tools[0]["description"])
    return tools


def _with_variant(text: str) -> str:
    # Before any trailing line break, so docstring-style text keeps its shape.
    body = text.rstrip()
    return f"{body} {VARIANT_MARK}{text[len(body):]}"


def _pick_pairs(rng: random.Random, spec: Spec) -> list[tuple[str, tuple[str, str]]]:
    # Weighted sampling without replacement (key = u ** (1/w)); sorting floats is deterministic.
    resources = spec.domain.resources
    keyed = []
    for r_index, res in enumerate(resources):
        for verb in words.VERBS:
            weight = (4.0 if verb in words.READ_VERBS else 1.0) / (1 + r_index)
            weight *= 3.0 if verb in ("list", "get", "create", "update", "delete") else 1.0
            keyed.append((rng.random() ** (1.0 / weight), verb, res))
    keyed.sort(key=lambda item: item[0], reverse=True)
    return [(verb, res) for _, verb, res in keyed[: spec.n_tools]]


def _tool_name(spec: Spec, verb: str, res: tuple[str, str]) -> str:
    noun = snake(res[1] if verb in ("list", "search", "count", "export") else res[0])
    base = f"{verb}_{noun}"
    if spec.naming == "camel":
        return camel(base)
    if spec.naming == "kebab":
        return base.replace("_", "-")
    if spec.naming == "dotted":
        return f"{noun}.{verb}"
    if spec.naming == "prefixed":
        return PREFIX_MARK + base
    return base


def tool_slots(rng: random.Random, spec: Spec, verb: str, res: tuple[str, str],
           others: list[str]) -> dict[str, object]:
    domain = spec.domain
    res2 = rng.choice(domain.resources)
    fields = rng.sample(domain.fields, 3)
    third, gerund, _past = words.VERBS[verb]
    lo = rng.choice((1, 2, 5, 10))
    return {
        "verb": verb, "Verb": third, "verb_lower": third.lower(), "Verbing": gerund,
        "res": res[0], "ress": res[1], "a_res": article(res[0]),
        "a_parent": article(domain.parent[0]), "Res": res[0][:1].upper() + res[0][1:],
        "res2": res2[0], "ress2": res2[1],
        "parent": domain.parent[0], "parents": domain.parent[1],
        "Parent": domain.parent[0][:1].upper() + domain.parent[0][1:],
        "prod": NAME_MARK, "slug": SLUG_MARK, "f1": fields[0], "f2": fields[1], "f3": fields[2],
        "p1": "id", "p2": "name", "P1": "Id", "other": rng.choice(others),
        "n": rng.choice((10, 25, 50, 100, 250, 1000)), "lo": lo, "hi": lo * rng.choice((10, 100)),
        "ver": f"{rng.randint(1, 4)}.{rng.randint(0, 12)}.{rng.randint(0, 9)}",
        "dv": rng.choice(("false", "true", "30", "\"auto\"", "the current user", "UTC")),
    }


def _tool(rng: random.Random, spec: Spec, prose: Prose, verb: str, res: tuple[str, str],
          name: str, names: list[str]) -> dict[str, Any]:
    slots = tool_slots(rng, spec, verb, res, names)
    ctx = SchemaCtx(rng=rng, prose=prose, flavour=spec.flavour, camel=spec.naming == "camel",
                    slots=slots, fields=tuple(snake(f) for f in spec.domain.fields),
                    annotate=spec.annotate)
    schema = build_input(ctx, verb, name, rng.choice(_EXTRA_PARAMS))
    params = list(schema.get("properties", {}))
    if params:
        slots["p1"] = params[0]
        slots["P1"] = params[0][:1].upper() + params[0][1:]
        slots["p2"] = params[-1]
    docs = [(p, _short(schema["properties"][p])) for p in params]
    tool = {"name": name, "description": prose.tool(slots, docs), "input": schema}
    return _extras(rng, spec, ctx, verb, tool, slots)


def _short(prop: Schema) -> str:
    return str(prop.get("description", "See the schema."))


def _extras(rng: random.Random, spec: Spec, ctx: SchemaCtx, verb: str, tool: dict[str, Any],
            slots: dict[str, object]) -> dict[str, Any]:
    if spec.tool_titles:
        tool["title"] = f"{slots['Verb']} {slots['res']}"
    if spec.outputs and rng.random() < 0.6:
        tool["output"] = build_output(ctx, verb, tool["name"])
    tool["annotations"] = _annotations(rng, spec, verb, slots)
    if spec.meta and rng.random() < 0.5:
        tool["_meta"] = {"ui": {"resourceUri": f"ui://{SLUG_MARK}/{snake(str(slots['res']))}",
                                "visibility": ["model", "app"]}}
    if rng.random() < 0.02:
        tool["icons"] = [{"src": f"https://cdn.example.com/{SLUG_MARK}/icon.png",
                          "mimeType": "image/png", "sizes": ["48x48"]}]
    return tool


def _annotations(rng: random.Random, spec: Spec, verb: str, slots: dict[str, object]) -> object:
    if spec.annotations == "none":
        return ...  # absent
    if spec.annotations == "null":
        return None  # Python SDK dumps write "annotations": null
    title = f"{slots['Verb']} {slots['ress']}"
    if spec.annotations == "title":
        return {"title": title}
    read_only = verb in words.READ_VERBS
    return {"title": title, "readOnlyHint": read_only,
            "destructiveHint": verb in ("delete", "archive", "move"),
            "idempotentHint": read_only or rng.random() < 0.3, "openWorldHint": True}


# Shapes --------------------------------------------------------------------------------------

def _mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool["name"]}
    if "title" in tool:
        out["title"] = tool["title"]
    out["description"] = tool["description"]
    out["inputSchema"] = tool["input"]
    if "output" in tool:
        out["outputSchema"] = tool["output"]
    if tool["annotations"] is not ...:
        out["annotations"] = tool["annotations"]
    for key in ("_meta", "icons"):
        if key in tool:
            out[key] = tool[key]
    return out


def _wrap(spec: Spec, mcp: list[dict[str, Any]], rng: random.Random) -> object:
    """Publish MCP-shaped tools in the server's shape."""
    if spec.shape == "mcp":
        return {"tools": mcp}
    if spec.shape == "jsonrpc":
        return _jsonrpc(mcp, rng)
    if spec.shape == "single_tool":
        return mcp[0]
    if spec.shape in ("openai_functions", "openai_tools"):
        return _openai(spec, mcp, rng)
    anthropic = [{"name": t["name"], "description": t["description"],
                  "input_schema": t["inputSchema"]} for t in mcp]
    if rng.random() < 0.5:
        anthropic[-1]["cache_control"] = {"type": "ephemeral"}
    return {"tools": anthropic} if spec.shape == "anthropic" else anthropic


def _jsonrpc(mcp: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
    result: dict[str, Any] = {"tools": mcp}
    if rng.random() < 0.3:
        result["nextCursor"] = "eyJwYWdlIjoyfQ"
    if rng.random() < 0.2:
        result["_meta"] = {"progressToken": rng.randint(1, 99)}
    return {"jsonrpc": "2.0", "id": rng.choice((1, 2, 7, "tools-1")), "result": result}


def _openai(spec: Spec, tools: list[dict[str, Any]], rng: random.Random) -> object:
    strict = rng.random() < 0.3
    functions = []
    for t in tools:
        fn: dict[str, Any] = {"name": t["name"], "description": t["description"],
                              "parameters": t["inputSchema"]}
        if strict:
            fn["strict"] = True
        functions.append(fn)
    if spec.shape == "openai_functions":
        return {"functions": functions}
    return [{"type": "function", "function": fn} for fn in functions]


# Emission ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Names:
    """What varies between emissions of one template."""

    vendor: str
    product: str  # product word plus a numeric suffix when the slug was taken
    variant: str  # the sentence that replaces @@VAR@@

    @property
    def slug(self) -> str:
        return f"{self.vendor}-{self.product}"

    @property
    def display(self) -> str:
        return f"{self.vendor.title()} {self.product.title()}"

    @property
    def prefix(self) -> str:
        return f"{self.vendor}_{self.product.replace('-', '')}_"


def relpath(template: Template, names: Names) -> str:
    if template.spec.layout == "nested":
        return f"{names.vendor}/{names.product}/tools.json"
    return f"{names.vendor}/{names.product}.json"


def fill_markers(data: bytes, names: Names) -> bytes:
    # The variant sentence holds @@NAME@@ itself, so it goes in first.
    out = data.replace(VARIANT_MARK.encode(), names.variant.encode())
    out = out.replace(NAME_MARK.encode(), names.display.encode())
    out = out.replace(SLUG_MARK.encode(), names.slug.encode())
    return out.replace(PREFIX_MARK.encode(), names.prefix.encode())
