"""Dense vectors of a ToolIndex's tools, and their fusion with BM25 (issue 13, hybrid ranking).

One float32 vector per tool row, in the index's own SQLite file: a `tool_vectors` table keyed
by the same id as the `tools` and FTS rows, each vector beside the sha256 of the text it was
made from. The index's `meta` table names the embedder the vectors came from; vectors of
another embedder are dropped, never compared.

Vectors are computed once per tool: when a catalog is replaced, a tool whose search text is
unchanged takes its previous vector over by that digest, so a refresh embeds only new and
changed tools, and an unchanged catalog embeds none.

Fusion is a weighted sum, per tool, of its BM25 score over the query's best BM25 score and
its cosine with the query (`fuse_weighted`); `fuse_rrf` (reciprocal ranks) is kept beside it
because it is the usual baseline and the benchmark reports both. The weight was tuned on half
of the LiveMCPBench tasks (README, "Hybrid").
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .embedding import Embedder

VECTOR_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS tool_vectors ("
    "id INTEGER PRIMARY KEY, digest BLOB NOT NULL, vector BLOB NOT NULL)"
)
EMBEDDER_KEY: Final = "embedder"  # meta row: the name of the embedder of every stored vector

# Fusion: share of the (max-normalised) BM25 score in the fused score, the cosine has the
# rest. Chosen from 0.1-0.6 for the best recall@10 + MRR on the even-numbered LiveMCPBench
# queries; the odd ones are the held-out check (README, "Hybrid").
BM25_SHARE: Final = 0.3
# How deep each ranking goes into the fusion: a tool below both cut-offs cannot be in the top k.
FUSION_DEPTH: Final = 200
RRF_K: Final = 5
# A tool's text is cut here before embedding: a mean over more tokens barely moves, and a
# 50 KB description would otherwise cost as much as 300 median tools (LiveMCPBench: median 170
# characters; cutting at 600 or 2,000 changed no figure of the benchmark).
MAX_EMBED_CHARS: Final = 2000
# Scores are rounded before ranking so that ties (and so the order) cannot hinge on the last
# bits of a float sum, which a BLAS may add up in another order.
_DIGITS: Final = 9


def embed_text(fields: Mapping[str, str]) -> str:
    """What a tool's vector is made from: its name, description and parameter text."""
    text = f"{fields.get('name', '')}. {fields.get('description', '')} {fields.get('params', '')}"
    return text[:MAX_EMBED_CHARS]


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class ToolVectors:
    """The `tool_vectors` table of one ToolIndex connection, under one embedder.

    The ToolIndex calls it inside its own transactions; it never commits.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._matrix: tuple[list[int], list[str], npt.NDArray[np.float64]] | None = None
        self._data_version: int | None = None

    # writing (inside the index's transaction) -------------------------------------

    def adopt(self, db: sqlite3.Connection) -> None:
        """Drop vectors of another embedder, then embed every tool that has none."""
        row = db.execute("SELECT value FROM meta WHERE key=?", (EMBEDDER_KEY,)).fetchone()
        if row is None or row[0] != self.embedder.name:
            db.execute("DELETE FROM tool_vectors")
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                       (EMBEDDER_KEY, self.embedder.name))
        missing = db.execute(
            "SELECT t.id, f.name, f.description, f.params FROM tools t "
            "JOIN tools_fts f ON f.rowid = t.id "
            "WHERE t.id NOT IN (SELECT id FROM tool_vectors) ORDER BY t.id").fetchall()
        self._store(db, [(r[0], embed_text({"name": r[1], "description": r[2], "params": r[3]}))
                         for r in missing], {})

    def previous(self, db: sqlite3.Connection, server: str) -> dict[bytes, bytes]:
        """The server's stored vectors by text digest, read before its rows are replaced."""
        return dict(db.execute(
            "SELECT v.digest, v.vector FROM tool_vectors v JOIN tools t ON t.id = v.id "
            "WHERE t.server = ?", (server,)).fetchall())

    def fill(self, db: sqlite3.Connection, rows: Sequence[tuple[int, Mapping[str, str]]],
             reuse: Mapping[bytes, bytes]) -> None:
        """Vectors for freshly inserted (id, fields) rows: reused by digest, else embedded."""
        self._store(db, [(row_id, embed_text(fields)) for row_id, fields in rows], reuse)

    def _store(self, db: sqlite3.Connection, rows: Sequence[tuple[int, str]],
               reuse: Mapping[bytes, bytes]) -> None:
        digests = [text_digest(text) for _, text in rows]
        fresh = [i for i, digest in enumerate(digests) if digest not in reuse]
        made = self.embedder.encode([rows[i][1] for i in fresh]) if fresh else None
        computed = {i: made[n].astype("<f4").tobytes() for n, i in enumerate(fresh)}
        db.executemany("INSERT OR REPLACE INTO tool_vectors VALUES (?, ?, ?)",
                       [(row_id, digests[i], computed.get(i) or reuse[digests[i]])
                        for i, (row_id, _) in enumerate(rows)])
        self._matrix = None

    def forget(self) -> None:
        """The table changed under us (our own write or another connection's)."""
        self._matrix = None

    # reading ----------------------------------------------------------------------

    def rank(self, db: sqlite3.Connection, query: str, limit: int,
             servers: Collection[str] | None) -> list[tuple[int, float]]:
        """(id, cosine) of the `limit` tools nearest the query, nearest first."""
        import numpy as np

        ids, owners, matrix = self._loaded(db)
        if not ids:
            return []
        cosines = matrix @ self.embedder.encode([query])[0].astype(np.float64)
        if servers is not None:
            allowed = np.fromiter((owner in servers for owner in owners), bool, len(owners))
            cosines = np.where(allowed, cosines, -np.inf)
        cosines = np.round(cosines, _DIGITS)
        # rows are in (server, name, position) order, so a stable sort breaks ties by them
        # whatever order the tools were indexed in
        order = np.argsort(-cosines, kind="stable")[:limit]
        return [(ids[i], float(cosines[i])) for i in order if np.isfinite(cosines[i])]

    def _loaded(self, db: sqlite3.Connection) -> tuple[list[int], list[str], npt.NDArray[np.float64]]:
        import numpy as np

        # data_version moves when another connection commits (our own writes call forget)
        version = db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._matrix, self._data_version = None, version
        if self._matrix is None:
            rows = db.execute("SELECT v.id, t.server, v.vector FROM tool_vectors v "
                              "JOIN tools t ON t.id = v.id "
                              "ORDER BY t.server, t.name, t.position").fetchall()
            dim = self.embedder.dim
            matrix = np.zeros((len(rows), dim), dtype=np.float64)
            for n, (_, _, blob) in enumerate(rows):
                matrix[n] = np.frombuffer(blob, dtype="<f4", count=dim)
            self._matrix = ([r[0] for r in rows], [r[1] for r in rows], matrix)
        return self._matrix


# -- fusion ----------------------------------------------------------------------------


def fuse_weighted(bm25: Sequence[tuple[int, float]], dense: Sequence[tuple[int, float]],
                  bm25_share: float = BM25_SHARE) -> dict[int, float]:
    """id -> share * bm25 / best bm25 + (1 - share) * cosine, over both rankings' tools.

    A tool missing from one ranking scores 0 there (below its cut-off, or no term matched).
    """
    best = max((score for _, score in bm25), default=0.0)
    fused: dict[int, float] = {}
    for row_id, score in bm25:
        fused[row_id] = bm25_share * (score / best if best > 0 else 0.0)
    for row_id, cosine in dense:
        fused[row_id] = fused.get(row_id, 0.0) + (1.0 - bm25_share) * cosine
    return _rounded(fused)


def fuse_rrf(bm25: Sequence[tuple[int, float]], dense: Sequence[tuple[int, float]],
             k: int = RRF_K) -> dict[int, float]:
    """id -> the sum of 1 / (k + rank) over the two rankings (reciprocal-rank fusion)."""
    fused: dict[int, float] = {}
    for ranking in (bm25, dense):
        for rank, (row_id, _) in enumerate(ranking, start=1):
            fused[row_id] = fused.get(row_id, 0.0) + 1.0 / (k + rank)
    return _rounded(fused)


def _rounded(fused: dict[int, float]) -> dict[int, float]:
    # the caller orders by (-score, server, name, position): equal scores must be equal
    return {row_id: round(score, _DIGITS) for row_id, score in fused.items()}
