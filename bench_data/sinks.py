"""The three outputs of the generator: a registry tree, a JSONL stream and a JSON array file.

Each sink counts the bytes it wrote, so --target-mb can stop on whichever is the primary one.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

INDEX_NAME = "INDEX.tsv"  # not *.json, so the pipeline never reads it as a catalog
QUIRK_DIR = "_quirks"
# The special JSONL lines (and array items) go before these servers: early, so that a parse error
# or a size cap is met mid-stream with good documents on both sides.
MALFORMED_AT = 2
OVERSIZE_AT = 3
UNKNOWN_ITEM = b'{"foo": 1}'
_ARRAY_HEAD = b'{"servers": [\n'
_ARRAY_TAIL = b"\n]}\n"


@dataclass(frozen=True)
class Server:
    """One emitted server: where it goes in the tree, and its bytes in each form."""

    path: str
    shape: str
    tools: int
    tree: bytes
    line: bytes


class Sink:
    """One output that counts what it wrote."""

    size: int = 0  # bytes written so far
    count: int = 0  # files, lines or items written so far

    def server(self, server: Server) -> None:
        raise NotImplementedError

    def cost(self, server: Server) -> int:
        """Bytes this sink would write for server."""
        return len(server.line) + 1

    def wants(self, server: Server, target: int) -> bool:
        # Stop on whichever side of the target is closer: the error stays under half a server.
        after = self.size + self.cost(server)
        return self.size < target and after - target <= target - self.size

    def close(self) -> dict[str, Any]:
        raise NotImplementedError


class TreeSink(Sink):
    """OUT/<vendor>/<product>.json or OUT/<vendor>/<product>/tools.json, OUT/_quirks/*, and
    OUT/INDEX.tsv (path, kind, shape, tools, bytes, note: one row per file)."""

    def __init__(self, root: Path) -> None:
        _prepare_dir(root)
        self.root = root
        self.made: dict[Path, None] = {}
        self.index = ["path\tkind\tshape\ttools\tbytes\tnote"]

    def cost(self, server: Server) -> int:
        return len(server.tree)

    def server(self, server: Server) -> None:
        self._write(server.path, server.tree)
        self.index.append(f"{server.path}\tvalid\t{server.shape}\t{server.tools}"
                          f"\t{len(server.tree)}\t")

    def quirk(self, name: str, data: bytes, note: str) -> None:
        path = f"{QUIRK_DIR}/{name}"
        self._write(path, data)
        self.index.append(f"{path}\tquirk\t-\t-\t{len(data)}\t{note}")

    def _write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        if path.parent not in self.made:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.made[path.parent] = None
        path.write_bytes(data)
        self.size += len(data)
        self.count += 1

    def close(self) -> dict[str, Any]:
        (self.root / INDEX_NAME).write_text("\n".join(self.index) + "\n", encoding="utf-8")
        return {"path": str(self.root), "files": self.count, "bytes": self.size}


def _prepare_dir(root: Path) -> None:
    # Regenerating over an earlier registry replaces it, so no stale file survives; any other
    # non-empty directory is refused rather than deleted.
    if root.exists() and any(root.iterdir()):
        if not (root / INDEX_NAME).is_file():
            raise FileExistsError(f"{root} is not empty and holds no {INDEX_NAME}; refusing")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)


class _StreamSink(Sink):
    """A single file written in order, with special entries slotted in before given servers."""

    def __init__(self, path: Path, special: dict[int, bytes | None]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.out: IO[bytes] = path.open("wb", buffering=1 << 20)
        self.special = special
        self.servers = 0

    def server(self, server: Server) -> None:
        self._special(self.servers)
        self._entry(self._bytes(server))
        self.servers += 1

    def _special(self, position: int) -> None:
        data = self.special.pop(position, None)
        if data is not None:
            self._entry(data, position)

    def _flush_special(self) -> None:
        for position in sorted(self.special):  # a registry too small to reach their positions
            self._special(position)

    def _bytes(self, server: Server) -> bytes:
        return server.line

    def _entry(self, data: bytes, special: int | None = None) -> None:
        raise NotImplementedError


class JsonlSink(_StreamSink):
    """One compact catalog per line; one malformed line, and the oversize catalog if any."""

    def __init__(self, path: Path, malformed: bytes, oversize: bytes | None) -> None:
        super().__init__(path, {MALFORMED_AT: malformed, OVERSIZE_AT: oversize})
        self.bad_line = 0

    def _entry(self, data: bytes, special: int | None = None) -> None:
        if special == MALFORMED_AT:
            self.bad_line = self.count + 1
        self.out.write(data + b"\n")
        self.size += len(data) + 1
        self.count += 1

    def close(self) -> dict[str, Any]:
        self._flush_special()
        self.out.close()
        return {"path": str(self.path), "lines": self.count, "bytes": self.size,
                "malformed_line": self.bad_line}


class ArraySink(_StreamSink):
    """{"servers": [item, ...]}, one compact item per line. An item is the server's catalog
    document; objects keyed "tools" or "functions" get a leading "name" (the server slug), the
    others (JSON-RPC responses, bare arrays, single tools) go in unchanged. One item is the
    unknown shape {"foo": 1}, one the oversize catalog (named "quirks-oversize") if any."""

    def __init__(self, path: Path, oversize: bytes | None) -> None:
        big = _named(oversize, "quirks-oversize") if oversize else None
        super().__init__(path, {MALFORMED_AT: UNKNOWN_ITEM, OVERSIZE_AT: big})
        self.out.write(_ARRAY_HEAD)
        self.size = len(_ARRAY_HEAD)

    def cost(self, server: Server) -> int:
        return len(server.line) + 2

    def _bytes(self, server: Server) -> bytes:
        slug = server.path.removesuffix("/tools.json").removesuffix(".json").replace("/", "-")
        return _named(server.line, slug)

    def _entry(self, data: bytes, special: int | None = None) -> None:
        chunk = (b",\n" if self.count else b"") + data
        self.out.write(chunk)
        self.size += len(chunk)
        self.count += 1

    def close(self) -> dict[str, Any]:
        self._flush_special()
        self.out.write(_ARRAY_TAIL)
        self.out.close()
        self.size += len(_ARRAY_TAIL)
        return {"path": str(self.path), "items": self.count, "bytes": self.size}


def _named(line: bytes, slug: str) -> bytes:
    if line.startswith((b'{"tools":', b'{"functions":')):
        return b'{"name":' + json.dumps(slug).encode() + b"," + line[1:]
    return line
