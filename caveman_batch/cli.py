"""The command line: parse options, call one library function, render its report.

Environment variables are read here and nowhere else. Errors are mapped to exit
codes in one place, `main`: 0 ok, 1 user error, 2 internal error.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import resource
import shutil
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from . import __version__, _accel, ccr, fsio, pipeline, single
from .catalog import DEFAULT_OPTIONS
from .errors import CavemanError, UsageError, VerificationFailed
from .fsio import write_target
from .payload.cli import payload_app
from .profile import dumps as profile_dumps
from .profile import profile as selection_profile
from .sources import DEFAULT_MAX_BYTES, read_source
from .store import Store, canonical_url, open_store, printable, split_store_url

# default_store_url and ALLOW_MEMORY_ENV are cli's public names too (tests and callers use them)
from .storeurl import ALLOW_MEMORY_ENV, default_store_url, minting_store_url, store_url  # noqa: F401

app = typer.Typer(
    name="caveman-batch",
    help="Compress LLM tool catalogs in bulk; keep every original, byte for byte, by handle.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", metavar="URL",
                 help="Store URL: lmdb:///path (default), sqlite:///path/ccr.db, postgresql://user@host/db, memory://. "
                      "Default: $CAVEMAN_CCR_STORE, else lmdb://$CAVEMAN_HOME/ccr.lmdb."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
EmbedOpt = Annotated[bool | None, typer.Option(
    "--embed/--no-embed",
    help="Hybrid tool search (BM25 + dense vectors, the embed extra): --embed requires it, "
         "--no-embed is BM25 alone. Default: hybrid if the extra is installed.")]


def _open(url: str | None, *, readonly: bool = True) -> Store:
    """The store, for commands that only read it (or, `readonly=False`, change only what it
    holds): a missing one is an error, not created; read-only, it is never written."""
    return open_store(store_url(url), create=False, readonly=readonly)


def _local_store(url: str) -> tuple[str, Path] | None:
    """(scheme, path resolved) of a store in a local file or folder; None for any other."""
    scheme, location = split_store_url(url)
    return (scheme, Path(location).resolve()) if scheme in ("lmdb", "sqlite") and location else None


def _refuse_store_file(target: Path | None, url: str | None, option: str = "-o") -> None:
    """UsageError if `target` is a file of the store at `url` (symlinks resolved): a
    recovered original written there would destroy the store it came from."""
    local = None if target is None else _local_store(store_url(url))
    if target is None or local is None:
        return
    scheme, base = local
    where = target.resolve()
    hit = where == base or where.is_relative_to(base) if scheme == "lmdb" else (
        where.parent == base.parent and where.name in
        {base.name + suffix for suffix in ("", "-wal", "-shm", "-journal")})
    if hit:
        raise UsageError(f"{option} {target} is a file of the store {printable(store_url(url))}: writing "
                         "there would destroy it; give another file")


def _same_local_store(a: str, b: str) -> bool:
    """Whether two URLs name one local store by different spellings (a symlink, `..`)."""
    one, other = _local_store(a), _local_store(b)
    return one is not None and one == other


def _echo(message: str = "") -> None:
    """A line on standard output, written whole or failed (fsio.write_stdout: unbuffered,
    the text layer ignores a write that took part of it); a reader that went away is
    fsio.ReaderGone (exit 0); a lone surrogate goes out as its escape."""
    fsio.write_stdout((message + "\n").encode("utf-8", "backslashreplace"))


def _echo_json(data: object) -> None:
    # a lone surrogate from the input goes out as its JSON escape (\udXXX), not an error
    _echo(json.dumps(data, indent=2, ensure_ascii=False))


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(w|d|h|m|s)")
_UNIT_S = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> float:
    """'30d', '12h', '1d12h', '90m', '45s', '2w' -> seconds."""
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION_RE.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise UsageError(f"invalid duration {text!r}: use e.g. 30d, 12h, 1d12h, 90m, 45s, 2w")
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not seconds <= _MAX_DURATION_S:  # (inf: a number too long for a float)
        raise UsageError(f"invalid duration {text!r}: longer than {_MAX_DURATION_S // _UNIT_S['w']:,}w "
                         "(no record is that old)")
    return seconds


# Longer than any record can have been stored (10,000 years): a cutoff before the epoch.
_MAX_DURATION_S: Final = 10_000 * 365 * 86_400


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


# A path, not typer's Path: Path("") is ".", and `-o ''` must not mean the current folder.
OutputOpt = Annotated[
    str | None, typer.Option("-o", "--output", metavar="FILE",
                             help="Write here instead of stdout (- is stdout; ./- a file named -): "
                                  "a file is replaced atomically (its mode kept, a new one 0600); "
                                  "a FIFO or device is written into.")]


def _output_path(text: str | None, option: str = "-o") -> Path | None:
    if text is None:
        return None
    if not text:
        raise UsageError(f"{option} needs a path, not an empty string")
    return Path(text)


def _file_path(text: str | None, option: str) -> Path | None:
    """A file a run writes and keeps (--manifest, --changes, --index): `-` is refused, not taken as
    a file named "-" (as it was) nor standard output, where the summary goes."""
    if text == "-":
        raise UsageError(f"{option} - : {option} takes a file, not standard output (where "
                         "the summary goes); write ./- for a file named -")
    return _output_path(text, option)


def _output_file(text: str | None) -> Path | None:
    """The file -o names, None for standard output: `-o -` is standard output, as for
    nearly every Unix tool (it wrote a file named "-"); `./-` names such a file."""
    return None if text == "-" else _output_path(text)


MaxBytesOpt = Annotated[
    int, typer.Option("--max-bytes", metavar="N", min=1,
                      help="Refuse a document larger than N bytes before reading it whole.")]


# -- catalog commands -----------------------------------------------------------


@app.command()
def shrink(
    source: Annotated[str, typer.Argument(metavar="[FILE|-]", help="A catalog file, or - for stdin.")] = "-",
    output: OutputOpt = None,
    store: StoreOpt = None,
    max_bytes: MaxBytesOpt = DEFAULT_MAX_BYTES,
) -> None:
    """Compress one catalog; commit its original to the store; report (JSON) on stderr."""
    target = _output_file(output)
    url = minting_store_url(store)
    _refuse_store_file(target, url)
    label, raw = read_source(source, max_bytes)
    outcome = single.shrink(raw, label, url)
    if target is None:
        fsio.write_stdout(outcome.output)
    else:
        write_target(target, outcome.output)
    sys.stderr.write(json.dumps(outcome.report, ensure_ascii=False) + "\n")


@app.command()
def lint(
    source: Annotated[str, typer.Argument(metavar="FILE", help="A catalog file, or - for stdin.")],
    as_json: JsonOpt = False,
    max_bytes: MaxBytesOpt = DEFAULT_MAX_BYTES,
) -> None:
    """Per tool: tokens before/after and what would be dropped (commits nothing)."""
    label, raw = read_source(source, max_bytes)
    report = single.lint(raw, label)
    if as_json:
        _echo_json(report)
        return
    if report["status"] != "ok":
        _echo(f"{label}: passes through unchanged: {report['reason']}")
        return
    _echo(f"{label}: {len(report['tools'])} tools, {_delta(report)} "
               f"({report['encoding']}, {report['basis']})")
    for tool in report["tools"]:
        _echo(f"  {_one_line(tool['name'])}: {_delta(tool)}")
        for change in tool["changes"]:
            _echo(f"    {_describe_change(change)}")


def _delta(d: dict[str, int]) -> str:
    before, after = d["tokens_before"], d["tokens_after"]
    saved = (1 - after / before) * 100 if before else 0.0
    return f"{before:,} -> {after:,} tokens (-{max(saved, 0.0):.1f}%)"


def _describe_change(change: dict[str, Any]) -> str:
    path = _one_line(change["path"])
    if change["kind"] == "annotation":
        return f"{path}: annotation dropped"
    dropped: list[str] = change.get("dropped") or []
    parts = [f"{len(dropped)} sentence(s) dropped"] if dropped else []
    if change.get("lead_cut"):
        parts.append("lead cut")
    if not parts:  # (nothing dropped nor cut: only its white space changed)
        parts.append("white space folded")
    lines = [f"{path}: " + ", ".join(parts)]
    lines += [f"      - {_one_line(s)}" for s in dropped]
    return "\n".join(lines)


@app.command()
def profile(
    source: Annotated[str, typer.Argument(metavar="FILE", help="A catalog file, or - for stdin.")],
    max_bytes: MaxBytesOpt = DEFAULT_MAX_BYTES,
) -> None:
    """The selection profile (names, types, enum, required, default, const) as JSON."""
    _, raw = read_source(source, max_bytes)
    # (an integer past int()'s 4,300 digits written as it is, as any other)
    _echo(profile_dumps(selection_profile(raw), indent=2, ensure_ascii=False))


@app.command()
def compress(
    sources: Annotated[list[str], typer.Argument(metavar="SRC...", help="Directories, *.json / *.jsonl files, registry arrays, or - (JSONL on stdin).")],
    out: Annotated[str, typer.Option("-o", "--out", metavar="OUT", help="Output folder (mirrors directory sources).")],
    store: StoreOpt = None,
    manifest: Annotated[str | None, typer.Option("--manifest", metavar="PATH", help="Manifest path. Default: OUT/manifest.jsonl.")] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Worker processes. Default: the cores this process may run on (with --index, one fewer, at least 1: the index's writer is a process too).")] = None,
    executor: Annotated[str, typer.Option("--executor", metavar="WHERE", help="Where documents are compressed: local (--workers processes here), dask (a Dask LocalCluster of --workers processes), or dask://HOST:PORT / tcp://HOST:PORT (an existing Dask scheduler's workers; --workers unused). Dask needs the dask extra.")] = "local",
    max_bytes: MaxBytesOpt = DEFAULT_MAX_BYTES,
    incremental: Annotated[bool, typer.Option("--incremental", help="Reuse outputs of unchanged documents.")] = False,
    checksum: Annotated[bool, typer.Option("--checksum", help="With --incremental: hash every source and output to tell them unchanged, never trusting file identity, size and times.")] = False,
    follow_symlinks: Annotated[bool, typer.Option("--follow-symlinks", help="Follow symlinks met while walking a folder (default: each is an error row; one named as SRC is always followed).")] = False,
    keep_removed: Annotated[bool, typer.Option("--keep-removed", help="Keep the outputs of documents no longer in SRC (by default they are deleted from OUT).")] = False,
    changes: Annotated[str | None, typer.Option("--changes", metavar="FILE", help="Write one JSON line per added, changed or removed document here (for deploy hooks).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 if any document is in error.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    index: Annotated[str | None, typer.Option("--index", metavar="PATH", help="Build or refresh a tool-search index here (SQLite); each tool's original is stored too.")] = None,
    embed: EmbedOpt = None,
) -> None:
    """Compress catalogs in bulk: originals committed first, outputs published atomically."""
    if checksum and not incremental:  # (an option that would do nothing: said, as proxy does)
        raise UsageError("--checksum goes with --incremental")
    if embed is not None and index is None:
        raise UsageError("--embed/--no-embed go with --index")
    index_path = _file_path(index, "--index")
    config = pipeline.Config(
        sources=sources, out=_output_path(out), store_url=minting_store_url(store),  # type: ignore[arg-type]
        manifest=_file_path(manifest, "--manifest"),
        workers=workers or default_workers(index_path is not None), executor=executor,
        max_bytes=max_bytes,
        incremental=incremental, checksum=checksum, options=DEFAULT_OPTIONS, index=index_path,
        follow_symlinks=follow_symlinks, keep_removed=keep_removed,
        changes=_file_path(changes, "--changes"), embed=embed,
    )
    show = not quiet and sys.stderr.isatty()
    summary = pipeline.run(config, progress=_progress_line if show else None)
    if show:
        sys.stderr.write("\n")
    report = summary.as_dict()
    report.update(out=str(config.out), manifest=str(config.manifest_path),
                  store=printable(config.store_url))
    if as_json:
        _echo_json(report)
    else:
        _echo(_summary_text(report))
    if strict and summary.error:
        raise UsageError(f"{summary.error} document(s) in error (--strict); see {config.manifest_path}")


def default_workers(indexing: bool) -> int:
    """--workers when not given: the cores this process may run on; with --index one fewer
    (at least 1), since the index's writer is a process of its own that keeps a core busy
    (on 2 cores, the 50 MB bench registry's indexed run took 6.0-6.1 s with 1 worker and
    6.8-7.3 s with 2; hybrid, 8.7-9.3 s and 9.3-10.2 s)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not Linux)
        cores = os.cpu_count() or 1
    return max(1, cores - 1) if indexing else max(1, cores)


def _progress_line(s: pipeline.Summary) -> None:
    rate = s.bytes_before / 1e6 / s.seconds if s.seconds else 0.0
    sys.stderr.write(f"\r{s.documents:,} docs | {s.bytes_before / 1e6:,.1f} MB | "
                     f"saved {s.ratio * 100:.1f}% tokens | {rate:,.1f} MB/s | "
                     f"{s.error:,} errors   ")
    sys.stderr.flush()


def _summary_text(r: dict[str, object]) -> str:
    return (f"{r['documents']:,} documents ({r['ok']:,} compressed, {r['passthrough']:,} passed "
            f"through, {r['error']:,} in error, {r['reused']:,} reused) in {r['seconds']}s\n"
            f"tokens {r['tokens_before']:,} -> {r['tokens_after']:,} "
            f"(-{float(r['ratio']) * 100:.1f}%, o200k_base, inferred)\n"  # type: ignore[arg-type]
            f"{_changes_text(r)}\n"
            f"out {r['out']}  manifest {r['manifest']}  store {r['store']}")


def _changes_text(r: dict[str, object]) -> str:
    """Since the previous manifest, by source document; what became of stale outputs."""
    text = (f"changes: {r['added']:,} added, {r['changed']:,} changed, {r['unchanged']:,} "
            f"unchanged, {r['removed']:,} removed, {r['error']:,} in error")
    if r.get("outputs_unread"):
        text += f"; {r['outputs_unread']:,} output(s) of sources that could not be read kept"
    if r["outputs_kept"]:
        text += f"; {r['outputs_kept']:,} output(s) of removed documents kept (--keep-removed)"
    if r["outputs_deleted"]:  # (with --keep-removed: those that gave way to a new output)
        text += f"; {r['outputs_deleted']:,} stale output(s) deleted"
    return text


# -- tool search ----------------------------------------------------------------

IndexOpt = Annotated[Path, typer.Option("--index", metavar="PATH",
                                        help="The tool-search index (built by compress --index).")]
eval_app = typer.Typer(name="eval", help="Measure retrieval quality.", no_args_is_help=True)
app.add_typer(eval_app)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What the tool should do, in words.")],
    index: IndexOpt,
    k: Annotated[int, typer.Option("-k", min=1, help="How many hits.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the hits as a JSON array.")] = False,
    embed: EmbedOpt = None,
) -> None:
    """The tools that best match QUERY, best first (BM25 over name, description, parameters; hybrid: see --embed)."""
    from . import toolsearch  # the search commands' own imports: not every command's start-up
    from .embedding import choose_embedder

    with toolsearch.ToolIndex.open(index, create=False, embedder=choose_embedder(embed)) as opened:
        hits = opened.search(query, k)
    if as_json:
        _echo_json([hit.as_dict() for hit in hits])
        return
    for hit in hits:
        _echo(f"{hit.score:8.3f}  {_one_line(f'{hit.server}/{hit.name}')}  {hit.handle or '-'}")


# control characters, line and paragraph separators, and the bidirectional controls (an
# override or isolate reorders how the rest of the line shows: "Trojan Source")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _one_line(text: str) -> str:
    """A name as one line of a listing: a control character (a line break, an escape, a
    bidirectional override) as its escape, so a catalog's tool name can neither forge nor
    hide lines of the output, nor reorder how the rest of its line shows (nor drive a
    terminal)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


@eval_app.command("search")
def eval_search(
    queries: Annotated[Path, typer.Argument(metavar="QUERIES.jsonl", help='One {"query": ..., "tools": [...]} a line.')],
    index: IndexOpt,
    compare_original: Annotated[bool, typer.Option("--compare-original", help="Also search compressed descriptions instead of the originals, and show the difference.")] = False,
    as_json: JsonOpt = False,
    embed: EmbedOpt = None,
) -> None:
    """recall@1/5/10 and MRR of the index on labelled queries."""
    from . import searcheval, toolsearch
    from .embedding import choose_embedder

    labelled = searcheval.read_queries(queries)
    with toolsearch.ToolIndex.open(index, create=False, embedder=choose_embedder(embed)) as opened:
        report = (searcheval.compare_original(opened, labelled) if compare_original
                  else searcheval.evaluate(opened, labelled))
    if as_json:
        _echo_json(report)
        return
    rows = ([("original", report["original"]), ("compressed", report["compressed"]),
             ("delta", report["delta"])] if compare_original else [("", report)])
    _echo(f"queries {report['queries']:,}")
    for label, figures in rows:
        cells = "  ".join(f"{key} {figures[key]:.4f}" for key in
                          ("recall@1", "recall@5", "recall@10", "mrr"))
        _echo(f"{label:<11}{cells}" if label else cells)


# -- store commands -----------------------------------------------------------


@app.command()
def recover(
    handle: Annotated[str | None, typer.Argument(help="ccr_<hex>, ccr://<hex> or hex (8+ digits).")] = None,
    handle_opt: Annotated[str | None, typer.Option("--handle", help="The handle (same as the argument).")] = None,
    output: OutputOpt = None,
    store: StoreOpt = None,
) -> None:
    """Print the original bytes behind a handle, verified against its sha256."""
    target = _output_file(output)
    _refuse_store_file(target, store)
    if handle is not None and handle_opt is not None and handle != handle_opt:
        raise UsageError(f"recover was given two handles ({handle} and --handle {handle_opt}): "
                         "give one")
    chosen = handle_opt if handle_opt is not None else handle
    if chosen is None:
        raise UsageError("recover needs a handle: caveman-batch recover --handle ccr_…")
    ccr.parse_handle(chosen)  # refuse a malformed handle before opening anything
    with _open(store) as s:
        original = ccr.recover(s, chosen)
    if target is None:
        fsio.write_stdout(original)
    else:
        write_target(target, original)


@app.command()
def stats(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Records and bytes in the store, counted from verified records only."""
    with _open(store) as s:
        report = ccr.audit(s).as_dict()
    report.pop("failures")
    if as_json:
        _echo_json(report)
        return
    _echo(f"store     {report['store']}")
    _echo(f"records   {report['records']:,} ({report['verified']:,} verified)")
    _echo(f"original  {_size(report['original_bytes'])}")  # type: ignore[arg-type]
    _echo(f"stored    {_size(report['stored_bytes'])} "  # type: ignore[arg-type]
               f"({float(report['stored_ratio']) * 100:.1f}% of original)")  # type: ignore[arg-type]
    for reason, count in report["excluded"].items():  # type: ignore[attr-defined]
        _echo(f"excluded  {count:,} {reason}")
    if report["foreign_keys"]:
        _echo(f"ignored   {report['foreign_keys']:,} keys that are not ours")


@app.command()
def verify(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Re-check every record (decompress + sha256); exit 1 if any fails."""
    with _open(store) as s:
        report = ccr.audit(s)
        problems = s.integrity_problems()
    if as_json:
        _echo_json({**report.as_dict(), **({"integrity": problems} if problems else {})})
    else:
        for failure in report.failures:
            _echo(f"FAILED {failure['handle']}: {failure['reason']}")
        for problem in problems:
            _echo(f"FAILED the store's own check: {problem}")
        _echo(f"verified {report.verified:,} of {report.records:,} records in {report.store}")
        if report.foreign_keys:
            _echo(f"ignored {report.foreign_keys:,} keys that are not ours")
    if report.verified != report.records:
        raise VerificationFailed(f"{report.records - report.verified} record(s) failed verification")
    if problems:
        raise VerificationFailed(f"{report.store} failed its own integrity check (records may be "
                                 f"hidden from every lookup): {problems[0]}")


@app.command()
def prune(
    not_seen_for: Annotated[str, typer.Option("--not-seen-for", metavar="DURATION",
                                              help="e.g. 30d, 12h, 1d12h, 90m.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would go; remove nothing.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop originals that no batch has touched for DURATION."""
    seconds = parse_duration(not_seen_for)
    with _open(store, readonly=dry_run) as s:
        removed = ccr.prune(s, seconds, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    if as_json:
        _echo_json({"dry_run": dry_run, "removed": [r.handle for r in removed],
                    "bytes": sum(r.original_length for r in removed)})
        return
    for r in removed:
        _echo(f"{verb} {r.handle} ({_size(r.original_length)}, last seen {_when(r.last_seen)})")
    _echo(f"{verb} {len(removed):,} record(s), {_size(sum(r.original_length for r in removed))}")


def _when(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@app.command()
def migrate(
    to: Annotated[str, typer.Option("--to", metavar="URL", help="Target store URL.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy every verified record to another store (e.g. sqlite:// to lmdb://)."""
    with _open(store) as source:
        if canonical_url(to) == source.url or _same_local_store(to, source.url):
            raise UsageError(f"--to names the source store itself ({source.url})")
        with open_store(to) as target:
            report = ccr.migrate(source, target)
    data = report.as_dict()
    data.pop("failures")
    data["target"] = to
    if as_json:
        _echo_json(data)
        return
    _echo(f"copied {report.verified:,} of {report.records:,} records to {to}")
    for reason, count in report.excluded.items():
        _echo(f"skipped {count:,} {reason}")


# -- proxy ----------------------------------------------------------------------


@app.command("proxy", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                        "allow_interspersed_args": False})
def proxy_command(
    ctx: typer.Context,
    store: StoreOpt = None,
    debug: Annotated[bool, typer.Option("--debug", help="One line per rewritten response on stderr. Also: CAVEMAN_SHRINK_DEBUG=1.")] = False,
    deferred: Annotated[bool, typer.Option("--deferred", help="List search_tools and call_tool instead of every tool; found tools join the list.")] = False,
    always: Annotated[list[str] | None, typer.Option("--always", metavar="NAME", help="With --deferred: a tool always listed (repeatable; NAME__tool with --servers).")] = None,
    servers: Annotated[Path | None, typer.Option("--servers", metavar="FILE", help='With --deferred: the servers of a {"mcpServers": {...}} file, behind one proxy.')] = None,
    embed: EmbedOpt = None,
    startup_timeout: Annotated[float | None, typer.Option(
        "--startup-timeout", metavar="SECONDS", min=0.001,
        help="With --deferred: how long the start waits for an upstream to list its tools "
             "(default 60, or 15 with --servers); a later one joins when it does.")] = None,
) -> None:
    """Run an MCP stdio server behind a proxy that compresses its list responses.

    Usage: caveman-batch proxy [--store URL] [--debug] -- UPSTREAM_COMMAND [ARGS...]
    or:    caveman-batch proxy --deferred [--always NAME]... [--embed|--no-embed]
                 [--startup-timeout SECONDS] (-- UPSTREAM... | --servers FILE)
    """
    debug = debug or os.environ.get("CAVEMAN_SHRINK_DEBUG", "").strip().lower() in {"1", "true", "yes"}
    if ctx.args and ctx.args[0].startswith("-") and shutil.which(ctx.args[0]) is None:
        # (click drops the `--`: a mistyped option of ours reads as the upstream's name,
        # and failed as "cannot start the upstream '--deffered'")
        raise UsageError(f"no such option of proxy: {ctx.args[0]!r} (the upstream command "
                         "comes after its options and --; see caveman-batch proxy --help)")
    store_url = minting_store_url(store)
    if not deferred:
        if always or servers is not None or embed is not None or startup_timeout is not None:
            raise UsageError("--always, --servers, --startup-timeout and --embed/--no-embed go "
                             "with --deferred")
        from . import proxy

        proxy.run(ctx.args, store_url, debug=debug)
        return
    from . import deferred as deferred_proxy
    from .upstreams import ServerSpec, read_servers

    if servers is not None and ctx.args:
        raise UsageError("give --servers FILE or an upstream command after --, not both")
    if servers is None and not ctx.args:
        raise UsageError("proxy --deferred needs -- UPSTREAM_COMMAND [ARGS...] or --servers FILE")
    specs = read_servers(servers) if servers is not None else [
        ServerSpec("upstream", tuple(ctx.args))]
    settings = deferred_proxy.Settings(always=tuple(always or ()), single=servers is None,
                                       debug=debug, startup_timeout=startup_timeout, embed=embed)
    raise typer.Exit(deferred_proxy.run(specs, store_url, settings))


app.add_typer(payload_app, name="payload")


# -- entry point ----------------------------------------------------------------


def _version_callback(value: bool) -> None:
    if value:
        built = [name for name, active in _accel.status().items() if active]
        _echo(f"caveman-batch {__version__} (C accelerators: {', '.join(built) or 'none'})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """caveman-batch: compress tool catalogs, keep every original by handle."""


def _fail(message: str, code: int) -> int:
    with contextlib.suppress(OSError, ValueError):  # (a standard error no one reads)
        sys.stderr.write(f"caveman-batch: error: {message}\n")
        sys.stderr.flush()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; map every error to its exit code here, once."""
    _hold_standard_streams()
    try:
        return _main(argv)
    finally:
        _settle_stderr()


def _hold_standard_streams() -> None:
    """A standard stream closed at start (`2>&-`, `>&-`) is held by /dev/null opened the
    other way round: it still acts closed (a read or write of it fails, EBADF), but no file
    opened later takes its number. Before, OUT's lock file became fd 2 of a run, and the
    index writer's pipe of answers its fd 2 (and 1, which it points at its stderr): what was
    written to "standard error" went into them. Standard error closed drops our messages (as
    a stream no one reads), where it made every command exit 1; standard output closed is
    the clean error of one that cannot take what is written (exit 2), not a traceback."""
    for fd, flags in ((0, os.O_WRONLY), (1, os.O_RDONLY), (2, os.O_RDONLY)):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        with contextlib.suppress(OSError):
            held = os.open(os.devnull, flags)
            if held != fd:  # (the lower ones are open: it is fd itself)
                os.dup2(held, fd)
                os.close(held)
            os.set_inheritable(fd, True)  # (a child's standard stream, as ours)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # (each write: EBADF)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")


def _settle_stderr() -> None:
    """Standard error flushed now; one that cannot take it (a pipe no one reads) is swapped
    for /dev/null: the interpreter's own flush at exit failed, and made a command that did
    its work exit 120 (a proxy whose warnings no one could read)."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            sys.stderr = open(os.devnull, "w")


def _main(argv: Sequence[str] | None) -> int:
    try:
        app(args=list(argv) if argv is not None else None, prog_name="caveman-batch")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return _CLICK_USAGE_TO_OURS.get(code, code)
    except CavemanError as exc:
        return _fail(str(exc), exc.exit_code)
    except (BrokenPipeError, fsio.ReaderGone):
        with contextlib.suppress(OSError):  # (what stdout still holds is dropped at exit)
            sys.stdout = open(os.devnull, "w")
        sys.stderr.close()  # the reader went away (| head): nothing to report
        return 0
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return _fail(_out_of_descriptors(exc), 2)
        if exc.filename is not None or exc.errno not in _STREAM_FULL:
            traceback.print_exc()
            return _fail("internal error (traceback above)", 2)
        # standard output that cannot take what was written (> /dev/full, a full disk):
        # said, and what it still holds dropped (its flush at exit would fail again)
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")
        why = "it is closed" if exc.errno == errno.EBADF else exc.strerror or exc
        return _fail(f"cannot write to standard output: {why}", 2)
    except Exception:  # a bug: say so, with the traceback, exit 2
        traceback.print_exc()
        return _fail("internal error (traceback above)", 2)
    return 0


def _out_of_descriptors(exc: OSError) -> str:
    """A run out of file descriptors (`ulimit -n` too low for a process pool, an index
    writer and the store): said so, with the limit, not as a bug's traceback."""
    where = f" ({exc.filename})" if exc.filename is not None else ""
    if exc.errno == errno.ENFILE:
        return f"the system ran out of open files{where}: {exc.strerror}; close some and run again"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (f"too many open files{where}: this process may open {soft:,} (ulimit -n); "
            "raise the limit (ulimit -n 1024) and run again")


# what writing to a full standard output raises (no file name: ours name theirs)
_STREAM_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG,
                                  errno.EBADF})  # (EBADF: one closed, `>&-`)

# typer reports bad options and arguments as exit 2; ours are user errors (1),
# and 2 stays reserved for internal errors (which reach `main` as exceptions).
_CLICK_USAGE_TO_OURS = {2: 1}

if __name__ == "__main__":
    raise SystemExit(main())
