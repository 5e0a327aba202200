"""`reduce`: route a large tool output to the first cut that fits, store the original.

Order of events matters for reversibility: the view is built, the original is
committed to the store, and only then is a footer naming its handle written. A
store that fails means a view with no handle, never a handle nobody can resolve.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Final

from .. import ccr
from ..errors import CavemanError
from ..store import Store
from .model import MIN_CHARS, Budget, Cut, Hint, Limits, PayloadResult, Stats
from .registry import cuts
from .view import count_lines, fits, plain, shared

TEXT_TYPE: Final = "text/plain; charset=utf-8"
BINARY_TYPE: Final = "application/octet-stream"
#: the strategy of bytes that are not UTF-8 yet fit the budget: their text, shown whole
DECODED: Final = "decoded"
_HANDLE_ROOM: Final = len(ccr.HANDLE_PREFIX) + 64
_NAME_ROOM: Final = 24


DEFAULT_BUDGET: Final = Budget()


def reduce(data: str | bytes, hint: Hint | None = None, budget: Budget = DEFAULT_BUDGET,
           store: Store | None = None) -> PayloadResult:
    """A view of `data` within `budget`; the original goes to `store` first."""
    text, raw, ctype = _decode(data)
    hint = hint or Hint()
    whole = Limits(budget.max_chars, budget.max_lines, budget.max_line_chars)
    with shared(text) as doc:  # split once: the line count here, the lines for the cuts
        before = (len(text), doc.line_count(split=not _json_like(text)))
        # bytes that are not UTF-8: their text is not the original, so the view names the
        # stored original however small they are (never "unchanged")
        lossy = isinstance(data, bytes) and ctype == BINARY_TYPE
        # bytes no line of which means anything, even within the budget: their size and type
        # (a short run of bytes is judged by its magic bytes alone: a tenth of a few bytes
        # proves nothing; a 109-byte PNG was shown decoded, NULs and all)
        kind = binary_kind(raw, guess=len(text) > MIN_CHARS) if lossy else None
        if not lossy and fits(text, whole):
            return PayloadResult(text, "none", "fits the budget; unchanged",
                                 Stats(*before[:1], len(text), before[1], before[1], "nothing"))
        warnings: list[str] = []
        if kind is not None:
            name, body = "binary", f"[binary: {len(raw):,} bytes, {kind}]"
        elif lossy and fits(text, _footer_room(whole, before)):
            # shown whole, each byte that is not UTF-8 as U+FFFD: the footer (which may make
            # the view longer than the input) says where the exact bytes are
            name, body = DECODED, text
        else:
            limits = _body_limits(whole, text, before)
            read = plain(text)  # colours stripped: the cuts see what a terminal shows
            if read is not text and fits(read, limits):
                # its colour codes alone made it too long: shown whole without them (no cut
                # is shorter than the text it cuts, so each failed, and the view claimed
                # "nothing fits the budget")
                name, body = STRIPPED, read
            else:
                with shared(read) if read is not text else nullcontext():
                    name, body, warnings = _first_fit(read, hint, limits)
    handle, note = _commit(store, raw, ctype, warnings)
    after = (len(body), count_lines(body))
    view = body + "\n" + footer(before, after, name, handle)
    omitted = f"{before[1] - min(after[1], before[1]):,} of {before[1]:,} lines"
    stats = Stats(before[0], len(view), before[1], count_lines(view), omitted)
    return PayloadResult(view, name, note, stats, handle, tuple(warnings))


STRIPPED: Final = "stripped"  # the strategy of a text shown whole, its colour codes stripped


def _json_like(text: str) -> bool:
    """Likely a JSON document: parsed by its cut, not split into lines (then only counted)."""
    return text[:1] in ("{", "[") or text.lstrip()[:1] in ("{", "[")


def _decode(data: str | bytes) -> tuple[str, bytes, str]:
    """(view text, original bytes to store, content type)."""
    if isinstance(data, str):
        try:
            return data, data.encode("utf-8"), TEXT_TYPE
        except UnicodeEncodeError:  # lone surrogates: keep them byte-exact anyway
            return data, data.encode("utf-8", "surrogatepass"), BINARY_TYPE
    try:
        return data.decode("utf-8"), data, TEXT_TYPE
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), data, BINARY_TYPE


# (offset, magic bytes, type): the formats a tool output most often turns out to be
_MAGIC: Final = ((0, b"\x7fELF", "ELF"), (0, b"\x89PNG\r\n\x1a\n", "PNG"), (0, b"\x1f\x8b", "gzip"),
                 (0, b"PK\x03\x04", "zip"), (0, b"PK\x05\x06", "zip"), (0, b"%PDF-", "PDF"),
                 (0, b"\xff\xd8\xff", "JPEG"), (0, b"GIF8", "GIF"), (0, b"BZh", "bzip2"),
                 (0, b"\xfd7zXZ\x00", "xz"), (0, b"\x28\xb5\x2f\xfd", "zstd"), (0, b"7z\xbc\xaf\x27\x1c", "7z"),
                 (0, b"\xcf\xfa\xed\xfe", "Mach-O"), (0, b"\xca\xfe\xba\xbe", "Mach-O/Java class"),
                 (0, b"MZ", "PE"), (0, b"\x00asm", "WebAssembly"), (0, b"SQLite format 3\x00", "SQLite"),
                 (257, b"ustar", "tar"), (8, b"WEBP", "WebP"))
#: magic bytes short or plain enough to start a text: they name a type only for bytes that look binary
_WEAK: Final = frozenset({"PE", "bzip2", "GIF"})
_SNIFF: Final = 8_192
#: control bytes no text holds (tab, newlines, form feed, backspace and escape are text's)
_CONTROL: Final = bytes(sorted(set(range(32)) - {8, 9, 10, 11, 12, 13, 27})) + b"\x7f"


def binary_kind(raw: bytes, guess: bool = True) -> str | None:
    """The type of bytes that are not UTF-8 text, by their magic bytes, else (`guess`) "data"
    when they look binary; None for text that merely holds a few bad bytes."""
    for at, magic, kind in _MAGIC:
        if raw.startswith(magic, at) and (kind not in _WEAK or _looks_binary(raw[:_SNIFF])):
            return kind
    return "data" if guess and _looks_binary(raw[:_SNIFF]) else None


def _looks_binary(head: bytes) -> bool:
    """More than a tenth of the bytes are control bytes or not UTF-8 (counted in C): a log
    with a stray NUL or a few bad bytes stays text, as its lines still mean something."""
    control = len(head) - len(head.translate(None, _CONTROL))
    return (control + head.decode("utf-8", "replace").count("\ufffd")) * 10 > len(head)


def footer(before: tuple[int, int], after: tuple[int, int], name: str, handle: str | None) -> str:
    where = (f"full output: caveman-batch payload retrieve {handle}" if handle
             else "original not stored")
    return (f"[caveman-batch: {before[1]:,} lines, {before[0]:,} chars cut to {after[1]:,} lines, "
            f"{after[0]:,} chars ({name[:_NAME_ROOM]} cut); {where}]")


def _body_limits(whole: Limits, text: str, before: tuple[int, int]) -> Limits:
    """The budget left for the body once the footer (at its longest) has its room.

    The output may never be larger than the input either, so a short input that is
    over budget only by its line count or line width shrinks the char budget too."""
    return _footer_room(Limits(min(whole.chars, len(text)), whole.lines, whole.line_chars),
                        before)


def _footer_room(limits: Limits, before: tuple[int, int]) -> Limits:
    """`limits` less the room of the footer (at its longest) and its line."""
    room = len(footer(before, before, "x" * _NAME_ROOM, "h" * _HANDLE_ROOM)) + 1
    lines = None if limits.lines is None else limits.lines - 1
    return Limits(max(limits.chars - room, 0), lines, limits.line_chars)


def _first_fit(text: str, hint: Hint, limits: Limits) -> tuple[str, str, list[str]]:
    warnings: list[str] = []
    for cut in cuts(hint, warnings):
        body = _try(cut, text, hint, limits, warnings)
        if body is not None:
            return cut.name, body, warnings
    return "empty", "[… the whole output omitted: nothing fits the budget …]", warnings


def _try(cut: Cut, text: str, hint: Hint, limits: Limits, warnings: list[str]) -> str | None:
    """A cut's view if it claims the text and keeps the budget; a failing cut is skipped."""
    try:
        if not cut.detect(text, hint):
            return None
        body: object = cut.cut(text, limits)
    except (Exception, SystemExit) as exc:  # an outside cut must never break a reduce
        warnings.append(f"cut {getattr(cut, 'name', cut)!r} failed and was skipped: {exc!r}")
        return None
    if body is None:
        return None
    if not isinstance(body, str):  # (an outside cut's, whatever its annotation says)
        warnings.append(f"cut {getattr(cut, 'name', cut)!r} returned {type(body).__name__}, "
                        f"not text, and was skipped")
        return None
    if len(body) >= len(text):
        return None
    if not fits(body, limits):  # the budget law holds whatever a cut returns
        warnings.append(f"cut {getattr(cut, 'name', cut)!r} ignored its limits "
                        f"({len(body):,} chars, {count_lines(body):,} lines) and was skipped")
        return None
    return body


def _commit(store: Store | None, raw: bytes, ctype: str, warnings: list[str]) -> tuple[str | None, str]:
    if store is None:
        return None, "no store given: the original is not kept"
    try:
        return ccr.store_original(store, raw, ctype), "original stored"
    except (CavemanError, OSError) as exc:
        warnings.append(f"store failed: {exc}")
        return None, f"store failed, the original is not kept: {exc}"
