"""Labelled queries for `eval search` from LiveMCPBench's annotations (read at run time).

Each of its tasks (raw/all_annotations.json) becomes one query: the task's question, and
the tools its annotators used ("Annotator Metadata" -> "Tools", one "N. name" a line).
A name that none of the corpus' catalogs holds (5 of 256 mentions: the benchmark's own
or renamed tools) is left out; a task left with no tool is left out too.

Two more query sets from the same annotations, which no weight was tuned on, check that the
ranking holds for queries of other shapes (`step_queries`):
- "step": one short query per step ("Metadata" -> "Steps", one "N. text" a line), its tool
  the step's own, in the tasks whose annotators listed as many tools as steps (39 of 95:
  then the i-th tool is the i-th step's); the single-intent kind of query a model writes
  when it looks for one tool at a time;
- "steps": a task's steps joined into one query, its tools the task's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_NUMBERED = re.compile(r"^\s*\d+\s*[.)]\s*")


def catalog_tool_names(corpus: Path) -> set[str]:
    names = set()
    for path in sorted((corpus / "catalogs").glob("*.json")):
        for tool in json.loads(path.read_bytes()).get("tools", []):
            names.add(tool["name"])
    return names


def queries(corpus: Path) -> list[dict[str, Any]]:
    """[{"query", "tools"}] for every task whose tools the catalogs hold."""
    known = catalog_tool_names(corpus)
    tasks = json.loads((corpus / "raw" / "all_annotations.json").read_bytes())
    out = []
    for task in tasks:
        listed = task.get("Annotator Metadata", {}).get("Tools", "")
        names = [_NUMBERED.sub("", line).strip() for line in listed.splitlines()]
        tools = list(dict.fromkeys(n for n in names if n in known))
        if tools:
            out.append({"query": task["Question"], "tools": tools})
    return out


def _numbered(text: str) -> list[str]:
    return [_NUMBERED.sub("", line).strip() for line in text.splitlines() if line.strip()]


def step_queries(corpus: Path, kind: str) -> list[dict[str, Any]]:
    """[{"query", "tools"}]: "step" (one a step, with its own tool) or "steps" (one a task)."""
    known = catalog_tool_names(corpus)
    tasks = json.loads((corpus / "raw" / "all_annotations.json").read_bytes())
    out = []
    for task in tasks:
        meta = task.get("Annotator Metadata", {})
        steps, names = _numbered(meta.get("Steps", "")), _numbered(meta.get("Tools", ""))
        if kind == "steps":
            tools = list(dict.fromkeys(n for n in names if n in known))
            if tools and steps:
                out.append({"query": " ".join(steps), "tools": tools})
        elif kind == "step":
            if len(steps) == len(names):
                out.extend({"query": step, "tools": [name]} for step, name in zip(steps, names)
                           if name in known and len(step.split()) >= 2)
        else:
            raise ValueError(f"no query set {kind!r}: 'step' or 'steps'")
    return out


def write_queries(corpus: Path, target: Path, kind: str = "task") -> Path:
    """The query set `kind` ("task", the default; "step"; "steps") as QUERIES.jsonl."""
    rows = queries(corpus) if kind == "task" else step_queries(corpus, kind)
    target.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in rows),
                      encoding="utf-8")
    return target
