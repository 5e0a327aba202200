"""What the pipeline's stages hand each other: the run's Config, its Summary, a file
source's _Tally of rows, a document's Result; and the names of what a run keeps in OUT."""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .. import __version__, ccr, converge
from ..catalog import DEFAULT_OPTIONS, Options

if TYPE_CHECKING:  # imported by a run with --index only (start-up of every other command)
    from .. import indexing

TMP_DIR: Final = ".caveman-tmp"
LOCK_FILE: Final = ".caveman-batch.lock"  # in OUT, held (flock) for the whole run


@dataclass(frozen=True)
class Config:
    sources: list[str]
    out: Path
    store_url: str
    manifest: Path | None = None
    workers: int = 1
    executor: str = "local"  # where documents are compressed (see executors)
    max_bytes: int = 32 << 20
    incremental: bool = False
    checksum: bool = False  # a rerun hashes every source and output (no stat cache)
    index: Path | None = None  # the tool-search index to build or refresh (see indexing)
    embed: bool | None = None  # its dense vectors: True required, False none, None if installed
    options: Options = DEFAULT_OPTIONS
    keep_removed: bool = False  # stale outputs (of documents no longer in SRC) stay in OUT
    changes: Path | None = None  # where to write what changed, one JSON line per document
    follow_symlinks: bool = False  # symlinks met while walking a folder (see inputs.discover)

    @property
    def manifest_path(self) -> Path:
        return self.manifest if self.manifest is not None else self.out / "manifest.jsonl"

    @property
    def streams_path(self) -> Path:
        """Beside the manifest, hidden: a fingerprint of each file source and its output."""
        return self.manifest_path.with_name(f".{self.manifest_path.stem}.streams.json")

    @property
    def stats_path(self) -> Path:
        """Beside it, what this machine saw of those files (see fsio.identity): the only
        file of OUT that differs between two runs of the same input."""
        return self.manifest_path.with_name(f".{self.manifest_path.stem}.stat.json")

    @functools.cached_property
    def run_key(self) -> str:
        return f"{__version__}/{self.options.key()}"


_MAX_ERRORS: Final = 100  # error rows a summary (and a source's fingerprint record) keeps


@dataclass
class Summary:
    documents: int = 0
    ok: int = 0
    passthrough: int = 0
    error: int = 0
    reused: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    seconds: float = 0.0
    errors: list[dict[str, Any]] = field(default_factory=list)
    # by source document, against the previous manifest (see converge)
    changes: converge.Changes = field(default_factory=converge.Changes)

    def add(self, row: dict[str, Any], reused: bool) -> None:
        self.documents += 1
        setattr(self, row["status"], getattr(self, row["status"]) + 1)
        self.reused += reused
        self.bytes_before += row["bytes_before"] or 0
        self.bytes_after += row["bytes_after"] or 0
        self.tokens_before += row["tokens_before"] or 0
        self.tokens_after += row["tokens_after"] or 0
        if row["status"] == "error" and len(self.errors) < _MAX_ERRORS:
            self.errors.append({"source": row["source"], "reason": row["reason"]})

    def add_reused(self, totals: dict[str, int], errors: list[dict[str, Any]]) -> None:
        """A source reused whole: the totals of its rows (see _Tally), none read again."""
        self._add_counts(_Tally.counts(totals))
        self._add_errors(errors)

    def add_reused_all(self, records: list[dict[str, Any]]) -> None:
        """add_reused for each of these fingerprint records, summed in one pass per count."""
        self._add_counts(map(sum, zip(*(_Tally.counts(r["totals"]) for r in records))))
        for record in records:
            self._add_errors(record["errors"])

    def _add_counts(self, counts: Iterable[int]) -> None:
        documents, ok, passthrough, error, bb, ba, tb, ta = counts
        self.documents += documents
        self.reused += documents
        self.ok += ok
        self.passthrough += passthrough
        self.error += error
        self.bytes_before += bb
        self.bytes_after += ba
        self.tokens_before += tb
        self.tokens_after += ta

    def _add_errors(self, errors: list[dict[str, Any]]) -> None:
        if errors:
            self.errors += errors[:max(0, _MAX_ERRORS - len(self.errors))]

    @property
    def ratio(self) -> float:
        if not self.tokens_before:
            return 0.0
        return max(0.0, 1 - self.tokens_after / self.tokens_before)

    def as_dict(self) -> dict[str, Any]:
        mb = self.bytes_before / 1e6
        return {
            "documents": self.documents, "ok": self.ok, "passthrough": self.passthrough,
            "error": self.error, "reused": self.reused, "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after, "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after, "ratio": round(self.ratio, 4),
            "encoding": "o200k_base", "basis": "inferred", "seconds": round(self.seconds, 3),
            "mb_per_s": round(mb / self.seconds, 2) if self.seconds else None,
            **self.changes.as_dict(), "errors": self.errors,
        }


class _Tally:
    """What a file source's manifest rows add up to, kept in its fingerprint record: a
    rerun that reuses the source whole adds these instead of parsing its rows. Constant
    size whatever the number of rows (a JSONL source may have millions)."""

    COUNTS: Final = ("documents", "ok", "passthrough", "error", "bytes_before", "bytes_after",
                     "tokens_before", "tokens_after")
    KEYS: Final = frozenset(COUNTS)
    counts: Final = operator.itemgetter(*COUNTS)

    __slots__ = ("errors", "totals")

    def __init__(self) -> None:
        self.totals = dict.fromkeys(self.COUNTS, 0)
        self.errors: list[dict[str, Any]] = []  # the first _MAX_ERRORS rows in error

    def add(self, row: dict[str, Any]) -> None:
        totals = self.totals
        totals["documents"] += 1
        totals[row["status"]] += 1
        for name in ("bytes_before", "bytes_after", "tokens_before", "tokens_after"):
            totals[name] += row[name] or 0
        if row["status"] == "error" and len(self.errors) < _MAX_ERRORS:
            self.errors.append({"source": row["source"], "reason": row["reason"]})


@dataclass(slots=True)
class Result:
    """What the parent knows of one document once its worker (or the cache) is done."""

    data: bytes | None  # output bytes; None: spooled, copy the spill, or nothing to write
    row: dict[str, Any]
    record: ccr.Prepared | None = None
    touch: str | None = None  # reused: the digest whose last-seen to refresh
    # reused from this document's own output file: its identity when it was read and hashed
    in_place: list[int] | None = None
    tools: indexing.WorkerTools = None  # with --index: what the index needs of its tools
    spooled: str | None = None  # the temp file its worker wrote the output bytes to

