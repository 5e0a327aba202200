"""JSON documents: a shape skeleton with counts.

Arrays keep their first items, every item that looks like an error and the items
whose shape differs from the first (outliers); objects keep their first keys and
any error-looking key. Everything left out is counted: "(4,997 more items)",
"(12 more keys)", "(+1,234 chars)". Widths shrink until the skeleton fits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from itertools import compress, count, islice, repeat
from operator import contains, eq, is_, is_not, itemgetter, not_
from typing import Any, Final

import orjson

from ..model import Hint, Limits
from ..view import fits

_ERROR_KEYS: Final = frozenset({"error", "errors", "exception", "fault", "failure", "err"})
_ERROR_VALUES: Final = frozenset({"error", "failed", "failure", "fatal", "critical"})
_WIDTHS: Final = ((12, 40, 400, 10), (5, 20, 200, 8), (3, 12, 120, 6), (2, 8, 80, 5), (1, 5, 60, 4), (1, 3, 40, 3),
                  (0, 2, 30, 2), (0, 1, 20, 2))


_EMPTY: Final[tuple[object, ...]] = (None, False, [], {}, "")
_STATUS_KEYS: Final = frozenset({"status", "level", "state"})


def _is_error(value: Any, depth: int = 0) -> bool:
    if not isinstance(value, dict) or depth > 2:
        return False
    for k, v in value.items():
        if k.lower() in _ERROR_KEYS and v not in _EMPTY:
            return True
        if k.lower() in _STATUS_KEYS and str(v).lower() in _ERROR_VALUES:
            return True
        if isinstance(v, dict) and _is_error(v, depth + 1):
            return True
        if isinstance(v, list) and any(_is_error(x, depth + 1) for x in v if type(x) is dict):
            return True  # an error in a list inside the item (`steps[].error`)
    return False


def _shape(value: Any) -> object:
    return tuple(sorted(value)) if isinstance(value, dict) else type(value).__name__


_LAYOUTS: Final = 8  # key sets checked a column at a time; items of rarer ones one by one


def _notable_items(arr: list[Any]) -> tuple[list[int], list[int]]:
    """The error items of a (non-empty) array, and the first 64 items shaped unlike the first.

    Same rules as `_is_error` and `_shape` item by item, but run as C-level passes over
    the whole array: a large array is nearly always rows of one key set."""
    n = len(arr)
    first, kind = arr[0], type(arr[0])
    if kind is dict and all(map(is_, map(type, arr), repeat(dict))):
        uniform = _uniform(arr)
        if uniform is not None:  # one key set, so one shape: no outliers
            found: set[int] = set()
            _check_layout(*uniform, range(n), 0, found)
            return sorted(found), []
        same = list(map(eq, map(dict.keys, arr), repeat(first.keys())))  # same key set = same shape
        return _errors_among(arr, 0, same), list(islice(compress(count(), map(not_, same)), 64))
    dicts = list(compress(count(), map(is_, map(type, arr), repeat(dict))))
    errors = [dicts[j] for j in _errors_among([arr[i] for i in dicts], 0)]
    shape = _shape(first)
    candidates: Iterable[int] = (range(n) if kind is dict  # any other type has another shape
                                 else compress(count(), map(is_not, map(type, arr), repeat(kind))))
    return errors, list(islice((i for i in candidates if _shape(arr[i]) != shape), 64))


def _errors_among(items: list[dict[str, Any]], depth: int, same: list[bool] | None = None,
                  layouts: int = _LAYOUTS) -> list[int]:
    """The indexes of the dicts in `items` that `_is_error(item, depth)` holds for.

    `same` says which items have the first item's key set: those are checked a key
    (a column of values) at a time; the others by the same rule, a key set at a time
    while `layouts` lasts, then item by item."""
    if depth > 2 or not items:
        return []
    n = len(items)
    found: set[int] = set()
    if same is None:
        uniform = _uniform(items)
        if uniform is not None:
            _check_layout(*uniform, range(n), depth, found)
            return sorted(found)
        same = list(map(eq, map(dict.keys, items), repeat(items[0].keys())))
    rows, where = (items, range(n)) if all(same) else _take(items, list(compress(count(), same)))
    _check_columns(rows, where, depth, found)
    if len(where) < n:
        rest = list(compress(count(), map(not_, same)))
        if layouts > 1:
            found.update(rest[j] for j in _errors_among([items[i] for i in rest], depth, None, layouts - 1))
        else:
            found.update(i for i in rest if _is_error(items[i], depth))
    return sorted(found)


def _take(items: list[Any], where: list[int]) -> tuple[list[Any], list[int]]:
    return [items[i] for i in where], where


def _uniform(items: list[dict[str, Any]]) -> tuple[tuple[str, ...], list[Sequence[Any]]] | None:
    """(the first dict's keys, the column of values of each) when every dict has exactly
    those keys (same size, and none missing when the values are taken out), else None."""
    first = items[0]
    if not all(map(eq, map(len, items), repeat(len(first)))):
        return None
    layout = tuple(first)
    try:
        return layout, _columns(layout, items)
    except KeyError:
        return None


def _columns(layout: tuple[str, ...], items: list[dict[str, Any]]) -> list[Sequence[Any]]:
    """The column of values of each key of `layout` (KeyError if an item lacks one)."""
    if not layout:
        return []
    values = list(map(itemgetter(*layout), items))
    return list(zip(*values)) if len(layout) > 1 else [values]


def _check_columns(rows: list[dict[str, Any]], where: Sequence[int], depth: int, found: set[int]) -> None:
    """`_is_error` over rows sharing one key set, a column at a time; hits go to `found`."""
    layout = tuple(rows[0])
    _check_layout(layout, _columns(layout, rows), where, depth, found)


def _check_layout(layout: tuple[str, ...], columns: list[Sequence[Any]], where: Sequence[int], depth: int,
                  found: set[int]) -> None:
    """`_is_error` over rows given as columns (one per key of `layout`); hits go to `found`."""
    for key, column in zip(layout, columns):
        low = key.lower()
        if low in _ERROR_KEYS:
            found.update(compress(where, map(not_, map(contains, repeat(_EMPTY), column))))
        elif low in _STATUS_KEYS:
            found.update(compress(where, _error_values(column)))
        types = set(map(type, column))
        if dict in types:
            nested = list(compress(count(), map(is_, map(type, column), repeat(dict))))
            hits = _errors_among([column[j] for j in nested], depth + 1)
            found.update(where[nested[j]] for j in hits)
        if list in types and depth < 2:
            _check_lists(column, where, depth, found)


def _check_lists(column: Sequence[Any], where: Sequence[int], depth: int, found: set[int]) -> None:
    """The rows whose value in this column is a list holding an error dict: the dicts of
    every list are checked together, each mapped back to its row."""
    items: list[dict[str, Any]] = []
    owners: list[int] = []
    for j in compress(count(), map(is_, map(type, column), repeat(list))):
        dicts = [x for x in column[j] if type(x) is dict]
        items += dicts
        owners += [j] * len(dicts)
    found.update(where[owners[k]] for k in _errors_among(items, depth + 1))


def _error_values(column: Sequence[Any]) -> Iterable[bool]:
    """Whether each value reads as an error status; the distinct values are judged once."""
    try:
        distinct = set(column)
    except TypeError:  # a list or an object among them: judge each
        return map(_ERROR_VALUES.__contains__, map(str.lower, map(str, column)))
    bad = {v for v in distinct if str(v).lower() in _ERROR_VALUES}
    return map(bad.__contains__, column) if bad else ()


class _Skeleton:
    def __init__(self, items: int, keys: int, chars: int, depth: int,
                 notable: dict[int, list[list[int]]]) -> None:
        self.items, self.keys, self.chars, self.depth = items, keys, chars, depth
        self.notable = notable  # id(array) -> its error and outlier items, shared by widths
        self.boosted = False  # rendering an error's value past the depth limit

    def render(self, value: Any, indent: str, level: int) -> list[str]:
        if isinstance(value, dict):
            return self._object(value, indent, level)
        if isinstance(value, list):
            return self._array(value, indent, level)
        return [indent + self._scalar(value)]

    def _scalar(self, value: Any) -> str:
        text = _dumps(value)
        if len(text) <= self.chars:
            return text
        if not isinstance(value, str):  # a number of many digits: no quote, its digits counted
            return f"{text[:self.chars]}… (+{len(text) - self.chars:,} digits)"
        # the longest start of the string whose JSON fits (an escape is never cut in two),
        # and how many of the string's own characters are left out
        keep = max(self.chars - 2, 0)
        while keep and (over := len(_dumps(value[:keep])) - self.chars) > 0:
            keep -= max(1, over // 6)
        if keep and "\ud800" <= value[keep - 1] <= "\udbff":
            keep -= 1  # (half a pair read as two code points: never split)
        return f"{_dumps(value[:keep])[:-1]}…\" (+{len(value) - keep:,} chars)"

    def _object(self, obj: dict[str, Any], indent: str, level: int) -> list[str]:
        if not obj:
            return [indent + "{}"]
        if level >= self.depth:
            return [indent + f"{{…}} ({len(obj):,} keys)"]
        keys = list(obj)
        shown = keys[: self.keys] + [k for k in keys[self.keys:] if self._holds_error(k, obj[k])]
        out = [indent + "{"]
        for k in shown:
            body = self._value(k, obj[k], indent + "  ", level + 1)
            out.append(f"{indent}  {_dumps(k)}: {body[0].lstrip()}")
            out.extend(body[1:])
        if len(keys) > len(shown):
            out.append(f"{indent}  ({len(keys) - len(shown):,} more keys)")
        return out + [indent + "}"]

    def _value(self, key: str, value: Any, indent: str, level: int) -> list[str]:
        """A key's value; an error's own keys (code, message) one level past the depth limit."""
        if key.lower() not in _ERROR_KEYS or level < self.depth or self.boosted:
            return self.render(value, indent, level)
        self.depth, self.boosted = self.depth + 1, True
        try:
            return self.render(value, indent, level)
        finally:
            self.depth, self.boosted = self.depth - 1, False

    def _holds_error(self, key: str, value: Any) -> bool:
        """Whether a key past the shown ones must be shown anyway: it names an error, or its
        value is or holds one (an array's error items are found once and remembered)."""
        if key.lower() in _ERROR_KEYS:
            return True
        if isinstance(value, dict):
            return _is_error(value)
        return isinstance(value, list) and bool(value) and bool(self._notable(value)[0])

    def _array(self, arr: list[Any], indent: str, level: int) -> list[str]:
        if not arr:
            return [indent + "[]"]
        if level >= self.depth:
            return [indent + f"[…] ({len(arr):,} items)"]
        chosen = self._chosen(arr)
        out = [indent + "["]
        last = -1
        for i in chosen:
            if i > last + 1:
                out.append(f"{indent}  ({i - last - 1:,} more items)")
            if i >= self.items:
                out.append(f"{indent}  (item {i:,}:)")
            out.extend(self.render(arr[i], indent + "  ", level + 1))
            last = i
        if last < len(arr) - 1:
            out.append(f"{indent}  ({len(arr) - last - 1:,} more items)")
        return out + [indent + "]"]

    def _chosen(self, arr: list[Any]) -> list[int]:
        chosen = list(range(min(self.items, len(arr))))
        errors, outliers = self._notable(arr)
        extra = [i for i in errors if i >= len(chosen)]
        extra += [i for i in outliers if i >= len(chosen)][: max(self.items, 1)]
        return sorted(set(chosen + extra[: 5 * max(self.items, 1)]))

    def _notable(self, arr: list[Any]) -> tuple[list[int], list[int]]:
        """Error items and items shaped unlike the first, found once per array."""
        found = self.notable.get(id(arr))
        if found is None:
            found = self.notable[id(arr)] = list(_notable_items(arr))
        return found[0], found[1]


_DIGITS: Final = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER: Final = b"0" * 19  # 19 digits in a row: maybe an integer past 64 bits


_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _dumps(value: Any) -> str:
    """JSON text of a scalar or key, as in the view: a number as written, non-ASCII as it
    is, a lone surrogate (a \\ud800 escape, which json.loads reads as it is) escaped again:
    no text of the view may hold one (no UTF-8 can)."""
    if isinstance(value, _Number):
        return value.text
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}",
                               json.dumps(value, ensure_ascii=False))


class _Number(float):
    """A float (or NaN, Infinity, -0) as its JSON text wrote it: the view shows that text,
    never the float re-serialized (1e400 was shown as Infinity, 1E5 as 100000.0, 0.10 as
    0.1, and the digits counted of that); a float to everything else."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> _Number:
        number = float.__new__(cls, text)
        number.text = text
        return number


def _int(text: str) -> int | _Number:
    return _Number(text) if text == "-0" else int(text)  # (int("-0") is 0)


def _loads(text: str) -> Any:
    """What `json.loads(text)` gives, each float, constant and -0 as a _Number (its text as
    written); parsed by orjson (faster) when it is sure to give the same: a text with no
    digit followed by "." or an exponent, no -0 and no 19 digits in a row (orjson reads
    integers past 64 bits as floats; it refuses NaN, Infinity and lone surrogates: then
    json.loads runs)."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return _exact(text)
    if _LONG_NUMBER not in raw.translate(_DIGITS) and _FLOATISH.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return _exact(text, raw)


def _exact(text: str, raw: bytes | None = None) -> Any:
    """json.loads, each float and constant a _Number, and -0 too where the text may hold
    one (each integer then goes through _int: a call per integer, so only then)."""
    if raw is None or _NEGATIVE_ZERO.search(raw) is not None:
        return json.loads(text, parse_float=_Number, parse_constant=_Number, parse_int=_int)
    return json.loads(text, parse_float=_Number, parse_constant=_Number)


#: what a float literal or -0 holds (in a string too: then the slower exact parse runs)
_FLOATISH: Final = re.compile(rb"[0-9][.eE]|-0(?![0-9])")
_NEGATIVE_ZERO: Final = re.compile(rb"-0(?![0-9.eE])")


class JsonCut:
    name = "json"

    def detect(self, text: str, hint: Hint) -> bool:
        head = text.lstrip()[:1]
        return head in ("{", "[") and text.rstrip()[-1:] in ("}", "]")

    def cut(self, text: str, limits: Limits) -> str | None:
        try:
            value = _loads(text)
        except (ValueError, RecursionError):  # (nested too deep to parse: another cut's)
            return None
        notable: dict[int, list[list[int]]] = {}
        for items, keys, chars, depth in _WIDTHS:
            view = "\n".join(_Skeleton(items, keys, chars, depth, notable).render(value, "", 0))
            if fits(view, limits):
                return view
        return None


CUT = JsonCut()
