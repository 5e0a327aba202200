"""Generate a seeded, deterministic synthetic registry of MCP servers.

    python -m bench_data.generate OUT_DIR [--seed N] [--servers N] [--target-mb X]
                                  [--oversize-kb N] [--max-tools N]
                                  [--jsonl FILE] [--array FILE]

OUT_DIR may be left out when --jsonl or --array is given. See bench_data/README.md for the layout,
the shapes, the quirks and the seeds. The same arguments give byte-identical output on any machine
(for a given CPython minor version: random.Random's algorithms are only stable within one).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_data.catalogs import SHAPES, Names, Template, build_template, fill_markers, relpath
from bench_data.quirks import MALFORMED_NOTE, QUIRKS, malformed_line, oversize_catalog, quirk_files
from bench_data.showcase import build_showcase
from bench_data.sinks import QUIRK_DIR, ArraySink, JsonlSink, Server, Sink, TreeSink
from bench_data.words import VARIANTS, VENDORS

DEFAULT_OVERSIZE = 3 * 1024 * 1024
FLAGSHIP_MIN_SERVERS = 24  # smaller registries (the samples) skip the GitHub-sized server
MB = 1_000_000


class Pool:
    """The emission sequence: the showcase server, each template once, then (with a target)
    re-emissions of the templates under new names."""

    def __init__(self, seed: int, servers: int, max_tools: int | None = None) -> None:
        flagship = servers >= FLAGSHIP_MIN_SERVERS and max_tools is None
        caps = {"max_tools": max_tools} if max_tools else None
        # Each template has its own stream, so server i never depends on how long the run is.
        self.templates = [build_template(random.Random(seed * 1_000_003 + i), i,
                                         flagship and i == 0, caps) for i in range(servers)]
        self.showcase = build_showcase(seed)
        self.rng = random.Random(seed * 1_000_003 - 1)
        self.taken: dict[str, int] = {}

    def servers(self, endless: bool) -> Iterator[Server]:
        for template in [self.showcase, *self.templates]:
            yield self._emit(template, template.spec.vendor)
        while endless and self.templates:
            template = self.templates[self.rng.randrange(len(self.templates))]
            yield self._emit(template, self.rng.choice(VENDORS))

    def _emit(self, template: Template, vendor: str) -> Server:
        names = Names(vendor, self._product(vendor, template.spec.product),
                      self.rng.choice(VARIANTS))
        return Server(relpath(template, names), template.spec.shape, template.tools,
                      fill_markers(template.tree, names), fill_markers(template.line, names))

    def _product(self, vendor: str, product: str) -> str:
        # Slugs stay unique: a taken vendor/product pair gets a numeric suffix.
        key = f"{vendor}-{product}"
        count = self.taken.get(key, 0)
        self.taken[key] = count + 1
        return product if count == 0 else f"{product}-{count + 1}"


def generate_registry(out_dir: Path | None, *, seed: int = 1234, servers: int = 60,
                      target_bytes: int | None = None, oversize_bytes: int = DEFAULT_OVERSIZE,
                      max_tools: int | None = None, jsonl: Path | None = None,
                      array: Path | None = None) -> dict[str, Any]:
    """Write a registry tree (and optionally its JSONL and array forms); return a summary.

    With target_bytes, servers is the size of the template pool and emission goes on (pooled
    servers under new names) until the primary output (the tree if written, else the JSONL,
    else the array; quirks included) is about target_bytes; it stops early if the pool alone
    is bigger. max_tools caps the tools per server and drops the GitHub-sized server: for the
    small committed samples.
    """
    if out_dir is None and jsonl is None and array is None:
        raise ValueError("nothing to write: give out_dir, jsonl or array")
    quirks = quirk_files(seed, oversize_bytes)
    oversize = oversize_catalog(seed, oversize_bytes, "compact") if oversize_bytes > 0 else None
    tree = TreeSink(out_dir) if out_dir is not None else None
    sinks: list[Sink] = [s for s in (
        tree,
        JsonlSink(jsonl, malformed_line(seed), oversize) if jsonl else None,
        ArraySink(array, oversize) if array else None) if s is not None]
    if tree is not None:
        for name, data in quirks.items():
            tree.quirk(name, data, QUIRKS[name])
    shapes, tools = _emit(Pool(seed, servers, max_tools), sinks, target_bytes)
    summary = _summary(seed, servers, shapes, tools, sinks)
    summary["quirks"] = {f"{QUIRK_DIR}/{n}": QUIRKS[n] for n in quirks} if tree else {}
    return summary


def _emit(pool: Pool, sinks: list[Sink], target: int | None) -> tuple[dict[str, int], int]:
    shapes = dict.fromkeys(SHAPES, 0)
    tools = 0
    for server in pool.servers(endless=target is not None):
        if target is not None and not sinks[0].wants(server, target):
            break
        for sink in sinks:
            sink.server(server)
        shapes[server.shape] += 1
        tools += server.tools
    return shapes, tools


def _summary(seed: int, pool: int, shapes: dict[str, int], tools: int,
             sinks: list[Sink]) -> dict[str, Any]:
    outputs = {type(s).__name__: s.close() for s in sinks}
    return {
        "seed": seed, "pool": pool, "servers": sum(shapes.values()), "tools": tools,
        "shapes": shapes,
        "tree": outputs.get("TreeSink"), "jsonl": outputs.get("JsonlSink"),
        "array": outputs.get("ArraySink"),
        "jsonl_malformed": MALFORMED_NOTE if "JsonlSink" in outputs else None,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench_data.generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", type=Path, help="registry directory to (re)create")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--servers", type=int, default=60,
                        help="servers generated from scratch (the pool, with --target-mb)")
    parser.add_argument("--target-mb", type=float, default=None,
                        help="keep emitting pooled servers until the output reaches X MB")
    parser.add_argument("--oversize-kb", type=int, default=DEFAULT_OVERSIZE // 1024,
                        help="size of _quirks/oversize.json (0: none)")
    parser.add_argument("--max-tools", type=int, default=None,
                        help="cap the tools per server (small samples)")
    parser.add_argument("--jsonl", type=Path, help="also write the catalogs as JSONL")
    parser.add_argument("--array", type=Path, help='also write {"servers": [...]} JSON')
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.out_dir is None and args.jsonl is None and args.array is None:
        _parser().error("give OUT_DIR, --jsonl or --array")
    target = None if args.target_mb is None else int(args.target_mb * MB)
    started = time.perf_counter()
    summary = generate_registry(args.out_dir, seed=args.seed, servers=args.servers,
                                target_bytes=target, oversize_bytes=args.oversize_kb * 1024,
                                max_tools=args.max_tools, jsonl=args.jsonl, array=args.array)
    elapsed = time.perf_counter() - started
    json.dump(summary, sys.stdout, indent=2)
    sys.stdout.write("\n")
    written = sum((summary[k] or {}).get("bytes", 0) for k in ("tree", "jsonl", "array"))
    print(f"wrote {written / MB:.1f} MB in {elapsed:.2f} s "
          f"({written / MB / max(elapsed, 1e-9):.1f} MB/s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
