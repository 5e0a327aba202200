"""Labelled queries for `eval search` from LiveMCPBench's annotations (read at run time).

Each of its tasks (raw/all_annotations.json) becomes one query: the task's question, and
the tools its annotators used ("Annotator Metadata" -> "Tools", one "N. name" a line).
A name that none of the corpus' catalogs holds (5 of 256 mentions: the benchmark's own
or renamed tools) is left out; a task left with no tool is left out too.
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


def write_queries(corpus: Path, target: Path) -> Path:
    target.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries(corpus)),
                      encoding="utf-8")
    return target
