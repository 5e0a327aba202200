"""Type stub for the C extension caveman_batch._fastwalk (source: _fastwalk.c)."""

from collections.abc import Callable
from typing import Final

MAX_NESTING: Final[int]  # containers open at once; deeper documents return None (= catalog.MAX_DEPTH)

def rewrite(raw: bytes, path: tuple[str, ...], kinds: bytes | int, drop_annotations: bool,
            short_bytes: int, reducer: Callable[[str], str],
            spans: list[tuple[int, int, int, int]] | None = None, /
            ) -> tuple[bytes, int, int] | None:
    """(output, descriptions_reduced, annotations_dropped), or None to run the Python path.

    path: the keys from the root to the tools' container. kinds: one byte per element of
    the array there (0 data, 1 the element is a tool, 2 its "function" member is), or the
    int 1 or 2 when the value at path is a single tool. spans: a list to append each
    tool object's (start, end, out_start, out_end) to, in the input and the output.
    """

def skim(raw: bytes, max_depth: int, /) -> object | None:
    """The JSON document as Python objects down to depth max_depth (the root is 0), or None.

    Every dict or list deeper than that is checked and skipped, and comes back empty (of
    its type). Scalars are real values (an integer over int()'s digit limit is None).
    None for any document rewrite() refuses whatever the plan: not strict JSON or UTF-8,
    a BOM, duplicate keys, lone surrogates, more than MAX_NESTING containers open. (The
    document null is None too: no catalog either way.)
    """

def spans(raw: bytes, path: tuple[str, ...], kinds: bytes | int, /) -> list[tuple[int, int]] | None:
    """(start, end) of each tool object the plan (as for rewrite) names, in document order:
    the element, or its "function" member's value. None for any input rewrite() would
    refuse, or a plan the document does not follow."""

def search_fields(tool: dict[str, object], schema_keys: tuple[str, ...], name_maps: frozenset[str],
                  schema_list: frozenset[str], one_schema: frozenset[str], /
                  ) -> tuple[str, str, str] | None:
    """(name, description, params): toolsearch._search_fields(tool)'s strings, or None to
    run the Python path (a name not printable ASCII, a dict or list subclass, a key not
    a str). schema_keys: the tool's keys whose schemas are read, in order."""

def identities(paths: list[str], /) -> list[list[int] | None] | None:
    """fsio.identities(paths): [device, inode, size, mtime_ns, ctime_ns] of each path
    (os.stat, symlinks followed), None where it cannot be stat'ed; every stat with the GIL
    released. None to run the Python path (a time past what int64 nanoseconds hold)."""

def index_tools(raw: bytes, out: bytes, spans: list[tuple[int, int, int, int]],
                known: dict[str, tuple[str, dict[str, str]]], known_max: int,
                sha256: Callable[[bytes], object], schema_keys: tuple[str, ...],
                name_maps: frozenset[str], schema_list: frozenset[str],
                one_schema: frozenset[str], compact: bool = False, /
                ) -> list[tuple[str | None, str, int, int, str, dict[str, str] | None]] | None:
    """toolspans._located_tools(raw, out, spans): per (start, end, out_start, out_end),
    (name, sha256 hex, start, length, definition, fields); None for the name and fields of
    a tool whose search text Python must build (a name not printable ASCII or not a str,
    an enum number not an integer of up to 18 digits, duplicate keys, ...). None to run the
    Python path (a span that is not one). known: (name, fields) by sha256 hex, read and
    filled, emptied when it holds known_max; sha256: hashlib.sha256. compact: each
    definition is raw[start:end] re-serialized compact (catalog.serialize(parse(...)): a
    passthrough's tools), out is not read."""
