"""Commit: a batch's originals, durably, in one transaction, before any output naming
them; the last-seen of reused originals refreshed; the batch's catalogs into the index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .. import ccr
from ..store import Store
from .incremental import ReusedRun, ReusedStream
from .model import Result

if TYPE_CHECKING:  # imported by a run with --index only (start-up of every other command)
    from .. import indexing

TOUCH_BATCH: Final = 4096
TOUCH_BYTES: Final = 8 << 20


def _commit(store: Store, results: list[Result | None]) -> None:
    """Originals first, durably, in one transaction (those of reused documents: _Touches)."""
    records = [r.record for r in results if r is not None and r.record is not None]
    if records:
        ccr.commit(store, records)


def _index(index: indexing.IndexBuilder, batch: list[Any], results: list[Result | None],
           store: Store) -> None:
    """The batch's catalogs into the search index, once their originals are committed (their
    tools' own originals are committed by the index builder, before it names them), told
    in input order: the order their server ids are given in (see indexing)."""
    for item, result in zip(batch, results):
        if isinstance(item, ReusedStream):
            index.keep_file(item.record["source"])
        elif isinstance(item, ReusedRun):
            for record in item.records:
                index.keep_file(record["source"])
        elif result is None:
            continue  # not a document
        elif result.tools is not None:
            index.add(item, result.row["sha256"], result.tools)
        elif result.touch is not None:  # reused: dispatch found the index current for it
            index.keep(item.source)
        else:
            index.reach(item.source)
    index.added(store)


class _Touches:
    """Originals of documents reused one by one, whose last-seen to refresh, a few thousand
    (or a few MiB of them) at a time: each flush asks the store whether it holds them and
    refreshes those it does in ONE write transaction (ccr.touch_held: a prune running
    meanwhile either keeps them or has removed them first), then commits again, from the
    document's bytes held until then, any it does not (pruned, another store), or (`verify`,
    for --checksum, which trusts no metadata) any that does not read back verified. All
    before the manifest is published: only its rows name handles (the outputs never do).
    One transaction per flush, not per batch: the refresh only protects from `prune`.
    (Originals of sources reused whole are refreshed as _load_previous finds them.)"""

    def __init__(self, store: Store, verify: bool = False) -> None:
        self.store, self.verify = store, verify
        self.pending: dict[str, bytes] = {}  # digest -> the original's bytes
        self.size = 0

    def add(self, batch: list[Any], results: list[Result | None]) -> None:
        for item, result in zip(batch, results):
            if result is not None and result.touch and result.touch not in self.pending:
                self.pending[result.touch] = item.raw
                self.size += len(item.raw)
        if len(self.pending) >= TOUCH_BATCH or self.size >= TOUCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        digests = list(self.pending)
        absent = set(ccr.touch_held(self.store, digests))
        if self.verify:
            absent |= ccr.unverified(self.store, [d for d in digests if d not in absent])
        records = [ccr.prepare(self.pending[d]) for d in digests if d in absent]
        if records:
            ccr.commit(self.store, records)  # merge_record: a tampered record is healed
        self.pending, self.size = {}, 0
