"""Input and output schemas for synthetic tools.

A server has one schema flavour, as real servers do because one SDK wrote all their schemas:

    plain     hand-written: type/properties/required, descriptions, some enums and bounds
    zod       like plain plus "$schema" and "additionalProperties": false (TypeScript SDKs)
    pydantic  a "title" on every property and on the schema, Optional as anyOf [X, null] with a
              null default, models under "$defs" reached by "$ref" (Python SDKs)
    uni       scientific-tool style: const/enum "operation" selectors, many defaults and bounds
    lossy     registry-converted: only type and description per parameter, no required

Number literals that json.dumps cannot write as-is (1.10, 1e3, -0) are written as placeholders
that catalogs.render turns into raw literals, so the compressor sees them exactly as written.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench_data import words
from bench_data.prose import SLUG_MARK, Prose

Schema = dict[str, Any]

FLAVOURS: tuple[str, ...] = ("plain", "zod", "pydantic", "uni", "lossy")
DRAFT07 = "http://json-schema.org/draft-07/schema#"


def num(literal: str) -> str:
    """A number literal kept exactly as written (see catalogs.render)."""
    return f"@@NUM({literal})@@"


@dataclass
class Param:
    name: str
    schema: Schema
    required: bool = False
    model: tuple[str, Schema] | None = None  # a $defs entry this parameter points to


@dataclass
class SchemaCtx:
    """What a parameter builder may know about the tool it is building for."""

    rng: random.Random
    prose: Prose
    flavour: str
    camel: bool
    slots: Mapping[str, object]
    fields: tuple[str, ...]
    annotate: bool  # whether this server sprinkles examples/$comment into schemas
    defs: dict[str, Schema] = field(default_factory=dict)

    def desc(self, base: str, rules: list[str]) -> str:
        return self.prose.param(base.format_map(self.slots), self.slots, rules)


def snake(text: str) -> str:
    return "_".join(text.lower().replace("-", " ").split())


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# Parameter builders. Each returns a Param; "why" comments mark the cases the compressor must get
# right (names that look like annotation keys, values that look like schemas).

def p_id(c: SchemaCtx) -> Param:
    res = snake(str(c.slots["res"]))
    schema: Schema = {"type": c.rng.choice(("string", "string", "integer")),
                      "description": c.desc("Identifier of the {res}.", ["Required."])}
    if schema["type"] == "string" and c.rng.random() < 0.3:
        schema["pattern"] = "^[A-Za-z0-9_-]{4,64}$"
    if schema["type"] == "integer":
        schema["minimum"] = 1
    return Param(f"{res}_id", schema, required=True)


def p_parent(c: SchemaCtx) -> Param:
    parent = snake(str(c.slots["parent"]))
    base = c.rng.choice(("Name or ID of the {parent}.", "The {parent} that owns the {res}.",
                         "{Parent} slug, as shown in its URL."))
    return Param(parent, {"type": "string", "description": c.desc(base, ["Case-sensitive."])},
                 required=True)


def p_query(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string",
                      "description": c.desc("Free-text search query.",
                                            ["Must not be empty.", "Supports quoted phrases."])}
    if c.rng.random() < 0.3:
        schema["minLength"] = 1
    return Param("query", schema, required=c.rng.random() < 0.7)


def p_limit(c: SchemaCtx) -> Param:
    top = c.rng.choice((50, 100, 100, 200, 500))
    dflt = c.rng.choice((10, 20, 25, 30))
    schema: Schema = {"type": "integer", "minimum": 1, "maximum": top, "default": dflt,
                      "description": c.desc("Maximum number of {ress} to return.",
                                            [f"Defaults to {dflt}.", f"At most {top}."])}
    return Param("limit", schema)


def p_page(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "integer", "minimum": 1, "default": 1,
                      "description": c.desc("Page number, starting at 1.", ["Defaults to 1."])}
    return Param("page", schema)


def p_cursor(c: SchemaCtx) -> Param:
    desc = c.desc("Opaque pagination cursor from a previous response.", ["Omit on the first call."])
    return Param("cursor", {"type": "string", "description": desc})


def p_sort(c: SchemaCtx) -> Param:
    keys = [snake(f) for f in c.fields[:4]]
    schema: Schema = {"type": "string", "enum": keys, "default": keys[0],
                      "description": c.desc("Field to sort by.", [f"Defaults to {keys[0]}."])}
    return Param("sort", schema)


def p_order(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "enum": list(words.SORT_ORDERS), "default": "desc",
                      "description": c.desc("Sort direction.", ["One of asc or desc."])}
    return Param("order", schema)


def p_since(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "format": "date-time",
                      "description": c.desc("Only return {ress} changed after this time.",
                                            ["ISO 8601 timestamp, e.g. 2024-01-31T08:00:00Z."])}
    return Param("since", schema)


def p_state(c: SchemaCtx) -> Param:
    states = list(words.STATES[: c.rng.randint(2, len(words.STATES))])
    schema: Schema = {"type": "string", "enum": states, "default": states[0],
                      "description": c.desc("Filter by state.", [f"Default: {states[0]}."])}
    return Param("state", schema)


def p_title(c: SchemaCtx) -> Param:
    # A parameter literally named "title": a name-map key, not an annotation to drop.
    schema: Schema = {"type": "string", "maxLength": 256,
                      "description": c.desc("Title of the {res}.", ["At most 256 characters."])}
    return Param("title", schema, required=c.rng.random() < 0.6)


def p_description(c: SchemaCtx) -> Param:
    # A parameter literally named "description", whose own description must still be found.
    schema: Schema = {"type": "string",
                      "description": c.desc("Longer description of the {res}; Markdown works.",
                                            ["May be empty."])}
    return Param("description", schema)


def p_tags(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "array", "items": {"type": "string", "minLength": 1},
                      "uniqueItems": True, "maxItems": 20,
                      "description": c.desc("Labels to attach.", ["Up to 20 unique labels."])}
    return Param(c.rng.choice(("tags", "labels")), schema)


def p_metadata(c: SchemaCtx) -> Param:
    # The default is data holding a "description" key: it must never be walked as a schema.
    schema: Schema = {"type": "object", "additionalProperties": {"type": "string"},
                      "default": {"description": "", "source": "agent", "title": None},
                      "description": c.desc("Free-form key/value metadata.",
                                            ["Keys must be unique."])}
    return Param("metadata", schema)


def p_dry_run(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "boolean", "default": False,
                      "description": c.desc("Validate the request without applying it.",
                                            ["Defaults to false."])}
    return Param("dry_run", schema)


def p_timeout(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "number", "minimum": 0, "default": num("1e3"),
                      "description": c.desc("Timeout in milliseconds.", ["Default 1e3 ms."])}
    return Param("timeout_ms", schema)


def p_threshold(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "number", "minimum": num("-0"), "maximum": num("10.0"),
                      "default": num("1.10"), "multipleOf": num("0.01"),
                      "description": c.desc("Minimum relevance score.",
                                            ["Must be between 0 and 10.", "Defaults to 1.10."])}
    return Param(c.rng.choice(("threshold", "min_score")), schema)


def p_offset(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "number", "default": num("-0"),
                      "description": c.desc("Offset applied to every value, in hours.", [])}
    return Param("offset_hours", schema)


def p_path(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "pattern": "^/",
                      "description": c.desc(f"Absolute path, e.g. /srv/{SLUG_MARK}/reports/q3.csv.",
                                            ["Must be absolute."])}
    return Param("path", schema, required=c.rng.random() < 0.5)


def p_content_type(c: SchemaCtx) -> Param:
    # Enum values with slashes and plus signs: data, not paths or sentence ends.
    schema: Schema = {"type": "string", "enum": list(words.MIME_TYPES), "default": "text/plain",
                      "description": c.desc("MIME type of the content.", ["Default text/plain."])}
    return Param("content_type", schema)


def p_aggregate(c: SchemaCtx) -> Param:
    # Enum values with parentheses.
    schema: Schema = {"type": "string", "enum": list(words.AGGREGATES),
                      "description": c.desc("Aggregate to compute per group.",
                                            ["Use (none) to skip aggregation."])}
    return Param("aggregate", schema)


def p_language(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "enum": list(words.LANGUAGES), "default": "en",
                      "description": c.desc("Language of the response.", ["BCP 47 tag."])}
    return Param("language", schema)


def p_region(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "enum": list(words.REGIONS),
                      "description": c.desc("Data region.", ["Cannot be changed later."])}
    return Param("region", schema)


def p_url(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "format": "uri",
                      "description": c.desc("Public URL of the {res}.",
                                            ["Must start with https://."])}
    return Param("url", schema, required=c.rng.random() < 0.5)


def p_email(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "format": "email",
                      "description": c.desc("Email address to notify.", [])}
    return Param("notify_email", schema)


def p_location(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "object", "description": c.desc("A point on the map.", []),
                      "properties": {
                          "latitude": {"type": "number", "minimum": -90, "maximum": 90},
                          "longitude": {"type": "number", "minimum": -180, "maximum": 180}},
                      "required": ["latitude", "longitude"]}
    return Param("location", schema)


def p_fields(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "array", "items": {"type": "string",
                                                 "enum": [snake(f) for f in c.fields]},
                      "description": c.desc("Fields to include in the response.",
                                            ["Leave empty for all fields."])}
    return Param("fields", schema)


def p_operation(c: SchemaCtx) -> Param:
    # Scientific-tool style selector: a const (or single-value enum) naming the operation.
    op = f"{c.slots['verb']}_{snake(str(c.slots['res']))}"
    schema: Schema = {"type": "string", "description": c.desc("Operation to perform.", [])}
    schema.update({"const": op} if c.rng.random() < 0.5 else {"enum": [op]})
    return Param("operation", schema, required=True)


def p_format(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "enum": ["json", "markdown", "csv"], "default": "json",
                      "description": c.desc("Output format.", ["Defaults to json."])}
    return Param(c.rng.choice(("format", "output_format")), schema)


def p_flag(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "boolean", "default": False,
                      "description": c.desc("Include archived {ress}.", ["Off by default."])}
    return Param("include_archived", schema)


def p_target(c: SchemaCtx) -> Param:
    schema: Schema = {"oneOf": [{"type": "string", "pattern": "^[a-z][a-z0-9-]*$"},
                                {"type": "integer", "minimum": 1}],
                      "description": c.desc("The {res} to act on, by slug or by number.",
                                            ["Exactly one form is accepted."])}
    return Param("target", schema)


def p_color(c: SchemaCtx) -> Param:
    schema: Schema = {"type": "string", "pattern": "^#[0-9A-Fa-f]{6}$", "default": "#1A2B3C",
                      "description": c.desc("Accent color.", ["Hex format like #RRGGBB."])}
    return Param("color", schema)


def p_filter(c: SchemaCtx) -> Param:
    model: Schema = {"type": "object", "properties": {
        "field": {"type": "string", "enum": [snake(f) for f in c.fields[:5]]},
        "op": {"type": "string", "enum": ["eq", "ne", "gt", "lt", "in", "contains"],
               "default": "eq"},
        "value": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}},
        "required": ["field", "value"],
        "description": c.desc("One condition on a field of the {res}.", [])}
    schema: Schema = {"type": "array", "items": {"$ref": "#/$defs/Filter"}, "maxItems": 10,
                      "description": c.desc("Conditions, all of which must match.",
                                            ["At most 10 conditions."])}
    return Param("filters", schema, model=("Filter", model))


def p_batch(c: SchemaCtx) -> Param:
    item: Schema = {"type": "object", "properties": {
        "id": {"type": "string"},
        "action": {"type": "string", "enum": ["add", "remove", "replace"]},
        "payload": {"type": "object", "additionalProperties": True,
                    "description": "Fields to write; see the {res} schema.".format_map(c.slots)}},
        "required": ["id", "action"]}
    schema: Schema = {"type": "array", "items": item, "minItems": 1, "maxItems": 100,
                      "description": c.desc("Changes to apply in order.",
                                            ["Between 1 and 100 changes per call."])}
    return Param("changes", schema, required=True)


def p_options(c: SchemaCtx) -> Param:
    retry: Schema = {"type": "object", "properties": {
        "attempts": {"type": "integer", "minimum": 0, "maximum": 5, "default": 2},
        "backoff": {"type": "string", "enum": ["none", "linear", "exponential"],
                    "default": "exponential"}},
        "description": "Retry policy for transient failures."}
    schema: Schema = {"type": "object", "properties": {
        "notify": {"type": "boolean", "default": True, "description": "Send notifications."},
        "retry": retry,
        "headers": {"type": "object", "additionalProperties": {"type": "string"}}},
        "additionalProperties": False,
        "description": c.desc("Advanced options.", ["Unknown keys are rejected."])}
    return Param("options", schema)


def p_field_value(c: SchemaCtx) -> Param:
    name = snake(c.rng.choice(c.fields))
    kind = c.rng.choice(("string", "string", "integer", "number", "boolean"))
    schema: Schema = {"type": kind, "description": c.desc(f"New {name.replace('_', ' ')}.", [])}
    if kind == "integer":
        schema.update(minimum=0)
    return Param(name, schema)


Builder = Callable[[SchemaCtx], Param]

# Which parameters tools of each verb group tend to take, before common extras.
_BY_VERB: dict[str, tuple[Builder, ...]] = {
    "read_one": (p_id, p_fields, p_format, p_language),
    "read_many": (p_limit, p_page, p_cursor, p_sort, p_order, p_since, p_state, p_filter, p_query,
                  p_flag, p_aggregate, p_fields),
    "write": (p_title, p_description, p_tags, p_metadata, p_dry_run, p_field_value, p_field_value,
              p_color, p_url, p_email, p_batch, p_content_type),
    "other": (p_path, p_timeout, p_threshold, p_offset, p_region, p_location, p_target,
              p_options, p_content_type, p_dry_run),
}


def _groups(verb: str) -> tuple[str, ...]:
    if verb in ("get", "preview", "download"):
        return ("read_one",)
    if verb in ("list", "search", "count", "summarize", "export", "compare"):
        return ("read_many",)
    if verb in ("create", "update", "assign", "tag", "rename", "schedule", "upload", "import"):
        return ("write", "other")
    return ("other", "write")


def build_input(c: SchemaCtx, verb: str, tool: str, n_extra: int) -> Schema:
    """The input schema of one tool, in the server's flavour."""
    return assemble(c, _core_params(c, verb) + _extra_params(c, verb, n_extra), tool)


def assemble(c: SchemaCtx, params: list[Param], tool: str) -> Schema:
    """An object schema over params (first of each name wins), in the server's flavour."""
    params = _dedupe(params)
    if c.flavour == "lossy":
        return _lossy(params)
    props = {_name(c, p.name): _decorate(c, p) for p in params}
    schema: Schema = {"type": "object", "properties": props}
    required = [_name(c, p.name) for p in params if p.required]
    if required:
        schema["required"] = required
    return _finish(c, schema, params, tool)


def _core_params(c: SchemaCtx, verb: str) -> list[Param]:
    core = [p_operation(c)] if c.flavour == "uni" else []
    if c.rng.random() < 0.45:
        core.append(p_parent(c))
    if verb in ("search",):
        core.append(p_query(c))
    elif verb not in ("list", "create", "count", "import", "upload"):
        core.append(p_id(c))
    return core


def _extra_params(c: SchemaCtx, verb: str, n_extra: int) -> list[Param]:
    pool: list[Builder] = []
    for group in _groups(verb):
        pool.extend(_BY_VERB[group])
    return [c.rng.choice(pool)(c) for _ in range(n_extra)]


def _dedupe(params: list[Param]) -> list[Param]:
    seen: dict[str, Param] = {}
    for p in params:
        seen.setdefault(p.name, p)
    return list(seen.values())


def _name(c: SchemaCtx, name: str) -> str:
    return camel(name) if c.camel else name


def _lossy(params: list[Param]) -> Schema:
    # What a registry converter leaves: a type and a description, nothing else.
    props = {}
    for p in params:
        kind = p.schema.get("type", "string")
        props[p.name] = {"type": kind, "description": p.schema.get("description", "")}
    return {"type": "object", "properties": props}


def _decorate(c: SchemaCtx, p: Param) -> Schema:
    schema = dict(p.schema)
    if "enum" in schema and c.prose.style in ("rich", "agentic") and c.rng.random() < 0.25:
        schema["description"] = schema.get("description", "") + _enum_guide(c, schema["enum"])
    if c.annotate and c.rng.random() < 0.15:
        schema["examples"] = [_example(schema)]
    if c.annotate and c.rng.random() < 0.04:
        schema["$comment"] = "Kept for clients older than v2."
    if c.flavour != "pydantic":
        return schema
    schema["title"] = p.name.replace("_", " ").title()
    if "enum" in schema and c.rng.random() < 0.4:
        return _enum_model(c, p.name, schema)
    if not p.required and "default" not in schema:
        return _optional(schema)
    return schema


def _enum_guide(c: SchemaCtx, values: list[object]) -> str:
    # Long parameter descriptions in real catalogs are mostly per-value lists like this one.
    lines = [f"- `{v}`: {c.rng.choice(words.ENUM_GLOSS).format_map(c.slots)}" for v in values]
    return "\nValues:\n" + "\n".join(lines)


def _example(schema: Schema) -> object:
    if "enum" in schema:
        return schema["enum"][-1]
    return {"integer": 5, "number": 0.5, "boolean": True, "array": [], "object": {}}.get(
        str(schema.get("type")), "example-value")


def _optional(schema: Schema) -> Schema:
    # Python SDKs spell Optional[X] = None as anyOf [X, null] with a null default.
    outer_keys = ("description", "title", "examples", "$comment")
    inner = {k: v for k, v in schema.items() if k not in outer_keys}
    out: Schema = {"anyOf": [inner, {"type": "null"}], "default": None}
    out.update({k: schema[k] for k in outer_keys if k in schema})
    return out


def _enum_model(c: SchemaCtx, name: str, schema: Schema) -> Schema:
    model_name = camel(name)[:1].upper() + camel(name)[1:]
    c.defs[model_name] = {"enum": schema["enum"], "title": model_name, "type": "string"}
    out: Schema = {"$ref": f"#/$defs/{model_name}"}
    out.update({k: schema[k] for k in ("default", "description", "title") if k in schema})
    return out


def _finish(c: SchemaCtx, schema: Schema, params: list[Param], tool: str) -> Schema:
    models = [p.model for p in params if p.model]
    defs_key = "definitions" if c.flavour == "zod" else "$defs"
    for model_name, model in models:
        if c.flavour == "pydantic":
            model = {**model, "title": model_name}
        c.defs[model_name] = model
    if c.flavour in ("plain", "uni") and c.defs and c.rng.random() < 0.5:
        _inline_refs(schema, c.defs)
    elif c.defs:
        if defs_key != "$defs":
            _retarget_refs(schema, defs_key)
        schema[defs_key] = dict(c.defs)
    c.defs.clear()
    return _envelope(c, schema, tool)


def _envelope(c: SchemaCtx, schema: Schema, tool: str) -> Schema:
    if c.flavour == "pydantic":
        schema["title"] = f"{tool}Arguments"
    if c.flavour == "zod":
        schema["additionalProperties"] = False
        schema["$schema"] = DRAFT07
    elif c.rng.random() < 0.15:
        schema["additionalProperties"] = False
    return schema


def _walk_refs(node: object, fix: Callable[[Schema], None]) -> None:
    if isinstance(node, dict):
        if "$ref" in node:
            fix(node)
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples"):
                _walk_refs(value, fix)
    elif isinstance(node, list):
        for value in node:
            _walk_refs(value, fix)


def _inline_refs(schema: Schema, defs: Mapping[str, Schema]) -> None:
    def fix(node: Schema) -> None:
        target = defs[node.pop("$ref").rsplit("/", 1)[1]]
        node.update({k: v for k, v in target.items() if k not in node})
    _walk_refs(schema, fix)


def _retarget_refs(schema: Schema, defs_key: str) -> None:
    def fix(node: Schema) -> None:
        node["$ref"] = node["$ref"].replace("#/$defs/", f"#/{defs_key}/")
    _walk_refs(schema, fix)


def build_output(c: SchemaCtx, verb: str, tool: str) -> Schema:
    """An outputSchema: a record for single-item tools, a wrapped list otherwise."""
    names = c.rng.sample(words.OUTPUT_FIELDS, c.rng.randint(2, 5))
    record: Schema = {"type": "object",
                      "properties": {n: _output_field(c, n) for n in names},
                      "required": names[:1]}
    if verb in ("list", "search", "export"):
        record = {"type": "object", "properties": {
            "result": {"type": "array", "items": record}}, "required": ["result"]}
    if c.flavour == "pydantic":
        record["title"] = f"{tool}Output"
    return record


def _output_field(c: SchemaCtx, name: str) -> Schema:
    kinds = {"count": "integer", "score": "number", "items": "array"}
    schema: Schema = {"type": kinds.get(name, "string")}
    if name == "updated_at":
        schema["format"] = "date-time"
    if c.flavour == "pydantic":
        schema["title"] = name.replace("_", " ").title()
    return schema
