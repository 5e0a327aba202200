"""Dense vectors of a ToolIndex's search texts, and their fusion with BM25 (issue 13, hybrid).

One float32 vector per search text, in the index's own SQLite file: a `tool_vectors` table
keyed like the FTS rows (the `texts` id; tools with the same text share it). The index's
`meta` table names the embedder the vectors came from; vectors of another embedder are
dropped, never compared.

Vectors are computed once per text: a text new to the index is embedded when it is added,
unless the same change deleted a text with the same digest (a catalog replaced by itself, or
a tool moved), whose vector it takes over. An unchanged catalog embeds nothing.

Fusion is a weighted sum, per text, of its BM25 score over the query's best BM25 score and
its cosine with the query (`fuse_weighted`); `fuse_rrf` (reciprocal ranks) is kept beside it
because it is the usual baseline, and the tests report both. The weight was tuned on half of
the LiveMCPBench queries (README, "Hybrid ranking").
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .embedding import Embedder

VECTOR_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS tool_vectors (id INTEGER PRIMARY KEY, vector BLOB NOT NULL)"
)
EMBEDDER_KEY: Final = "embedder"  # meta row: the name of the embedder of every stored vector

# Fusion: share of the (max-normalised) BM25 score in the fused score, the cosine has the
# rest. Chosen from 0.1-0.6 for the best recall@10 + MRR on the even-numbered LiveMCPBench
# queries; the odd ones are the held-out check (README, "Hybrid ranking").
BM25_SHARE: Final = 0.3
# How deep each ranking goes into the fusion (ties at the cut are all kept, so the cut does
# not depend on the order texts were indexed in).
FUSION_DEPTH: Final = 200
RRF_K: Final = 60  # the usual constant; tied best (with 10) of 1-60 on the tuning half
# A text is cut here before embedding: a mean over more tokens barely moves, and a 50 KB
# description would otherwise cost as much as 300 median tools (LiveMCPBench: median 170
# characters; cutting at 600 or 2,000 changed no figure of the benchmark).
MAX_EMBED_CHARS: Final = 2000
# Scores are rounded before ranking so that ties (and so the order) cannot hinge on the last
# bits of a float sum, which a BLAS may add up in another order.
_DIGITS: Final = 9


def embed_text(fields: Mapping[str, str]) -> str:
    """What a text's vector is made from: the tool's name, description and parameter text."""
    text = f"{fields.get('name', '')}. {fields.get('description', '')} {fields.get('params', '')}"
    return text[:MAX_EMBED_CHARS]


def top(ranking: Sequence[tuple[int, float]], depth: int) -> list[tuple[int, float]]:
    """The `depth` best (id, score), and every one tied with the last of them."""
    if len(ranking) <= depth:
        return list(ranking)
    scores = [round(score, _DIGITS) for _, score in ranking]
    cut = heapq.nlargest(depth, scores)[-1]
    return [pair for pair, score in zip(ranking, scores) if score >= cut]


class ToolVectors:
    """The `tool_vectors` table of one ToolIndex connection, under one embedder.

    The ToolIndex calls it inside its own transactions; it never commits.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._matrix: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None
        self._data_version: int | None = None
        # the connection's data_version when every text last had a vector (None: not
        # known): while no other connection has committed since, the texts a change adds
        # are the only ones without one
        self._complete_at: int | None = None

    # writing (inside the index's transaction) -------------------------------------

    def adopted(self, db: sqlite3.Connection) -> bool:
        """Whether every text has a vector of this embedder (then `adopt` has nothing to
        do); if so, noted as of this snapshot (see `fill`)."""
        row = db.execute("SELECT value FROM meta WHERE key=?", (EMBEDDER_KEY,)).fetchone()
        complete = row is not None and row[0] == self.embedder.name and db.execute(
            "SELECT 1 FROM texts WHERE id NOT IN (SELECT id FROM tool_vectors) LIMIT 1"
        ).fetchone() is None
        if complete:
            self._complete_at = _data_version(db)
        return complete

    def adopt(self, db: sqlite3.Connection, made: Mapping[bytes, bytes] | None = None) -> None:
        """Drop vectors of another embedder, then embed every text that has none (those
        `made` has, by digest, are taken from there: see `missing`)."""
        if not self._ours(db):
            db.execute("DELETE FROM tool_vectors")
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                       (EMBEDDER_KEY, self.embedder.name))
        self.fill(db, made or {})

    def _ours(self, db: sqlite3.Connection) -> bool:
        row = db.execute("SELECT value FROM meta WHERE key=?", (EMBEDDER_KEY,)).fetchone()
        return row is not None and row[0] == self.embedder.name

    def missing(self, db: sqlite3.Connection) -> list[tuple[int, bytes, str, str, str]]:
        """The texts `adopt` would embed, as of this snapshot (every one if the index's
        vectors are another embedder's): embedded (`embedded`) before the open's write
        transaction, not inside it, so that a build need not wait for the model (13 s for
        37k texts: past the writer's wait for the lock, and the build failed)."""
        ours = self._ours(db)
        return db.execute(
            "SELECT x.id, x.digest, f.name, f.description, f.params FROM texts x "
            "JOIN tools_fts f ON f.rowid = x.id"
            + (" WHERE x.id NOT IN (SELECT id FROM tool_vectors)" if ours else "")
            + " ORDER BY x.id").fetchall()

    def embedded(self, rows: Sequence[tuple[int, bytes, str, str, str]]) -> dict[bytes, bytes]:
        """The vectors of these texts (as `missing` gives them), by digest."""
        if not rows:
            return {}
        made = self.embedder.encode(
            [embed_text({"name": r[2], "description": r[3], "params": r[4]}) for r in rows])
        return {row[1]: made[n].astype("<f4").tobytes() for n, row in enumerate(rows)}

    def of_server(self, db: sqlite3.Connection, server: str) -> dict[bytes, bytes]:
        """The vectors of a server's texts by text digest, read before they are deleted."""
        return dict(db.execute(
            "SELECT x.digest, v.vector FROM tools t JOIN texts x ON x.id = t.text_id "
            "JOIN tool_vectors v ON v.id = t.text_id WHERE t.server = ?", (server,)).fetchall())

    def fill(self, db: sqlite3.Connection, reuse: Mapping[bytes, bytes],
             added: Sequence[tuple[int, bytes, tuple[str, str, str]]] | None = None) -> None:
        """A vector for every text that has none: taken over by digest, else embedded.

        `added`: the texts (id, digest, (name, description, params)) the caller's change
        added, if it knows them: when every other text had a vector (no other connection
        has committed since this one last saw to it), those are read from there, not from
        the index (reading them back from the FTS table cost 0.8 s of a hybrid build of
        the 50 MB bench registry)."""
        version = _data_version(db)
        if added is not None and version == self._complete_at:
            missing = [(id_, digest, *fields) for id_, digest, fields in added]
        else:
            missing = db.execute(
                "SELECT x.id, x.digest, f.name, f.description, f.params FROM texts x "
                "JOIN tools_fts f ON f.rowid = x.id "
                "WHERE x.id NOT IN (SELECT id FROM tool_vectors) ORDER BY x.id").fetchall()
        # (no text to embed: the model is not even loaded)
        made = self.embedded([row for row in missing if row[1] not in reuse])
        db.executemany("INSERT INTO tool_vectors VALUES (?, ?)",
                       [(row[0], made.get(row[1]) or reuse[row[1]]) for row in missing])
        self._matrix = None
        self._complete_at = version

    def rolled_back(self) -> None:
        """The caller's change was rolled back: its `fill` may have given vectors to texts
        of others, which have none again."""
        self._complete_at = None

    def forget(self) -> None:
        """The table changed under us (our own write or another connection's)."""
        self._matrix = None

    # reading ----------------------------------------------------------------------

    def rank(self, db: sqlite3.Connection, query: str, depth: int,
             allowed: set[int] | None) -> list[tuple[int, float]]:
        """(text id, cosine) of the `depth` texts nearest the query, and those tied with the
        last of them (in no order: the fusion ranks them)."""
        import numpy as np

        ids, matrix = self._loaded(db)
        wanted = self.embedder.encode([query])[0].astype(np.float64) if len(ids) else None
        if wanted is None or not wanted.any():  # (no token to embed: near to nothing)
            return []
        cosines = np.round(matrix @ wanted, _DIGITS)
        if allowed is not None:
            cosines[~np.isin(ids, np.fromiter(allowed, np.int64, len(allowed)))] = -np.inf
        kept = np.isfinite(cosines)
        if kept.sum() > depth:  # the depth-th best, and every one tied with it
            kept &= cosines >= np.partition(cosines, -depth)[-depth]
        chosen = np.nonzero(kept)[0]
        return [(int(ids[i]), float(cosines[i])) for i in chosen]

    def _loaded(self, db: sqlite3.Connection) -> tuple[npt.NDArray[np.int64],
                                                        npt.NDArray[np.float64]]:
        import numpy as np

        # data_version moves when another connection commits (our own writes call forget)
        version = _data_version(db)
        if version != self._data_version:
            self._matrix, self._data_version = None, version
        if self._matrix is None:
            rows = db.execute("SELECT id, vector FROM tool_vectors ORDER BY id").fetchall()
            dim = self.embedder.dim
            matrix = np.zeros((len(rows), dim), dtype=np.float64)
            for n, (id_, blob) in enumerate(rows):
                if not isinstance(blob, bytes) or len(blob) != 4 * dim:  # (a damaged file)
                    raise sqlite3.DatabaseError(f"the vector of text {id_} is not {dim} "
                                                f"float32 values")
                matrix[n] = np.frombuffer(blob, dtype="<f4", count=dim)
            self._matrix = (np.array([row[0] for row in rows], dtype=np.int64), matrix)
        return self._matrix


def _data_version(db: sqlite3.Connection) -> int:
    """Moves when another connection commits to the file (never for this one's own)."""
    return int(db.execute("PRAGMA data_version").fetchone()[0])


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
    """id -> the sum of 1 / (k + rank) over the two rankings (reciprocal-rank fusion); a
    ranking's order is its scores', whatever the order of the list."""
    fused: dict[int, float] = {}
    for ranking in (bm25, dense):
        ordered = sorted(ranking, key=lambda pair: (-round(pair[1], _DIGITS), pair[0]))
        for rank, (row_id, _) in enumerate(ordered, start=1):
            fused[row_id] = fused.get(row_id, 0.0) + 1.0 / (k + rank)
    return _rounded(fused)


def _rounded(fused: dict[int, float]) -> dict[int, float]:
    # the caller orders by (-score, server, name, position): equal scores must be equal
    return {row_id: round(score, _DIGITS) for row_id, score in fused.items()}
