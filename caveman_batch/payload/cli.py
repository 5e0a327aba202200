"""`caveman-batch payload …`: compress a tool output to a view, retrieve its original."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from .. import fsio
from ..errors import BudgetError, UsageError
from ..sources import DEFAULT_MAX_BYTES, read_source
from ..store import open_store
from ..storeurl import minting_store_url, store_url

if TYPE_CHECKING:
    from .model import PayloadResult

# The cuts are imported by the commands that use them, not by every `caveman-batch` start.

payload_app = typer.Typer(
    help="Reversible, content-aware compression of large tool outputs.",
    no_args_is_help=True,
)

StoreOpt = Annotated[str | None, typer.Option("--store", metavar="URL",
                                              help="Store URL (default as for `recover`).")]


@payload_app.command()
def compress(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="The tool output, or - for stdin.")],
    tool: Annotated[str | None, typer.Option("--tool", help="Tool that produced it (bash, grep, read…).")] = None,
    command: Annotated[str | None, typer.Option("--command", help="The command line that produced it.")] = None,
    path: Annotated[str | None, typer.Option("--path", help="The file it came from, if any.")] = None,
    max_chars: Annotated[int, typer.Option("--max-chars", metavar="N", help="Most chars in the view.")] = 20_000,
    max_lines: Annotated[int | None, typer.Option("--max-lines", metavar="N", help="Most lines in the view.")] = None,
    max_line_chars: Annotated[int | None, typer.Option("--max-line-chars", metavar="N", help="Widest line.")] = None,
    store: StoreOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON envelope on stdout.")] = False,
    max_bytes: Annotated[int, typer.Option("--max-bytes", metavar="N", min=1, help="Input size cap.")] = DEFAULT_MAX_BYTES,
) -> None:
    """Print a view of the output that fits the budget; the original goes to the store first."""
    from .core import reduce
    from .model import Budget, Hint

    try:
        budget = Budget(max_chars, max_lines, max_line_chars)
    except BudgetError as exc:  # (named by Budget's field: here by the option)
        raise UsageError(f"--{exc.field.replace('_', '-')} {exc.got}: must be at least "
                         f"{exc.least} (a view must hold its footer)") from None
    url = minting_store_url(store)
    label, raw = read_source(source, max_bytes)
    with open_store(url) as s:
        result = reduce(raw, Hint(tool, command, path), budget, s)
    if as_json:
        _write(json.dumps({"source": label, "content": result.content, **result.as_dict()},
                          ensure_ascii=False) + "\n")
        return
    _write(result.content if result.content.endswith("\n") or not result.content else result.content + "\n")
    sys.stderr.write(_report(label, result) + "\n")


def _report(label: str, r: PayloadResult) -> str:
    s = r.stats
    parts = [(f"{label}: {r.strategy} cut, {s.lines_before:,} -> {s.lines_after:,} lines, "
              f"{s.chars_before:,} -> {s.chars_after:,} chars"), r.note]
    if r.handle:
        parts.append(f"handle {r.handle}")
    return "; ".join(parts + list(r.warnings))


def _write(text: str) -> None:
    # lone surrogates from the input go out escaped rather than failing the command
    fsio.write_stdout(text.encode("utf-8", "backslashreplace"))


@payload_app.command()
def retrieve(
    handle: Annotated[str, typer.Argument(help="ccr_<hex> from a view's last line.")],
    lines: Annotated[str | None, typer.Option("--lines", metavar="A:B",
                                              help="Only lines A..B (1-based, inclusive), byte-exact.")] = None,
    store: StoreOpt = None,
) -> None:
    """Print the original bytes behind a handle (verified), or a range of its lines."""
    from .. import ccr
    from .retrieve import parse_lines
    from .retrieve import retrieve as retrieve_original

    ccr.parse_handle(handle)  # a malformed handle never reaches the store
    if lines is not None:
        parse_lines(lines)
    with open_store(store_url(store), readonly=True) as s:
        data = retrieve_original(s, handle, lines)
    fsio.write_stdout(data)
