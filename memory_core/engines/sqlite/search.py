"""Ranked retrieval over the SQLite file: FTS5 BM25, stored vectors, hybrid, recency, confidence, time hint.

Hit rules follow the reference engine (contract reference §3), so every engine agrees on *what* a mode
returns; the order is this engine's own:

| mode | a hit when | relevance |
| --- | --- | --- |
| keyword | FTS5 matches a query word (lexical overlap) | BM25, divided by the best BM25 of the query |
| vector | cosine of the stored embeddings ≥ ``VECTOR_THRESHOLD`` | cosine |
| hybrid | either of the above | (keyword + cosine) / 2 |

``score = relevance × (0.85 + 0.10 × recency + 0.05 × confidence)``, where ``recency = 0.5 ^ (age / 30 days)``
from ``observed_at`` (else the store time) and ``confidence`` is a learning's (0.5 for other kinds): relevance
decides, recency and confidence break near-ties (seed 004: full-text relevance, similarity, importance and
recency combined). Ties keep write order. A ``refers_to`` hint then moves hits observed on a hinted day
first, order kept inside each group (``TimeHint.rank``, reference §1.3).

Vectors are the reference embedding (``memory_core.scoring.embed``), computed once when an item is indexed and
stored as float32 blobs; ``VectorCache`` keeps a process-local copy, appended as rows are indexed (a row's
vector never changes, and seqs are never reused).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from typing import Final
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from memory_core.query import FetchMode, TimeHint
from memory_core.scoring import EMBED_DIM, VECTOR_THRESHOLD, embed, tokenize

from .filters import Where
from .rows import to_us

__all__ = [
    "CONFIDENCE_WEIGHT",
    "RECENCY_HALF_LIFE_DAYS",
    "RECENCY_WEIGHT",
    "Candidates",
    "VectorCache",
    "fts_query",
    "hint_window",
    "item_candidates",
    "order",
    "score",
]

RECENCY_WEIGHT: Final = 0.10
"""Share of the score recency can move (memory-core's calibration)."""
CONFIDENCE_WEIGHT: Final = 0.05
"""Share of the score confidence can move."""
RECENCY_HALF_LIFE_DAYS: Final = 30.0
"""Age at which recency halves, days."""
MAX_QUERY_TERMS: Final = 64
"""Distinct query words sent to FTS5."""
_US_PER_DAY: Final = 86_400_000_000
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def fts_query(query: str) -> str | None:
    """The FTS5 MATCH expression for ``query``: its distinct words, each quoted, OR-ed (None: no words)."""
    words = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TERMS]
    if not words:
        return None
    return " OR ".join(f'"{w}"' for w in words)


def hint_window(hint: TimeHint) -> tuple[int, int]:
    """``[start, end)`` in µs since the epoch covering the hint's days in its zone (``TimeHint.covers``)."""
    zone = ZoneInfo(hint.zone or "UTC")
    start = datetime.combine(hint.from_, dtime(0), tzinfo=zone).astimezone(UTC)
    end = datetime.combine(hint.to + timedelta(days=1), dtime(0), tzinfo=zone).astimezone(UTC)
    return to_us(start), to_us(end)


@dataclass
class Candidates:
    """Rows that passed the filter, with what ranking needs (parallel arrays).

    Attributes:
        keys: Row keys (``items.seq`` or ``beliefs.bid``), ascending.
        when_us: ``observed_at``, else the write time, µs.
        confidence: A learning's confidence, 0.5 for other kinds.
        vectors: Embeddings, one row per key (only when the mode needs them).
        lexical: BM25 relevance (``-bm25()``, higher is better; 0 when not matched).
        matched: Whether FTS5 matched the row.
    """

    keys: IntArray
    when_us: IntArray
    confidence: FloatArray
    vectors: npt.NDArray[np.float32] | None
    lexical: FloatArray
    matched: npt.NDArray[np.bool_]

    @classmethod
    def build(
        cls,
        keys: IntArray,
        when_us: IntArray,
        confidence: FloatArray,
        vectors: npt.NDArray[np.float32] | None,
        lexical: dict[int, float],
    ) -> Candidates:
        """Candidates from parallel arrays plus the FTS5 matches as ``{key: -bm25}``."""
        lex = np.fromiter((lexical.get(int(k), 0.0) for k in keys), dtype=np.float64, count=len(keys))
        matched = np.fromiter((int(k) in lexical for k in keys), dtype=bool, count=len(keys))
        return cls(keys, when_us, confidence, vectors, np.maximum(lex, 0.0), matched)


def score(cands: Candidates, query: str, mode: FetchMode, now_us: int | None = None) -> tuple[IntArray, FloatArray]:
    """Hit keys and their scores (see the module table); keys ascending, not yet ordered by score."""
    n = len(cands.keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    lex = cands.lexical
    best = float(lex.max()) if lex.size else 0.0
    matched = cands.matched
    kw = lex / best if best > 0 else matched.astype(np.float64)
    if mode is FetchMode.KEYWORD:
        rel, hit = kw, matched
    else:
        assert cands.vectors is not None
        q = np.asarray(embed(query), dtype=np.float32)
        cos = (cands.vectors @ q).astype(np.float64)
        if mode is FetchMode.VECTOR:
            rel, hit = cos, cos >= VECTOR_THRESHOLD
        else:
            rel, hit = (kw + cos) / 2.0, matched | (cos >= VECTOR_THRESHOLD)
    now = now_us if now_us is not None else time.time_ns() // 1000
    age_days = np.maximum(now - cands.when_us, 0) / _US_PER_DAY
    recency = np.power(0.5, age_days / RECENCY_HALF_LIFE_DAYS)
    weight = (
        (1.0 - RECENCY_WEIGHT - CONFIDENCE_WEIGHT) + RECENCY_WEIGHT * recency + CONFIDENCE_WEIGHT * cands.confidence
    )
    scores = rel * weight
    return cands.keys[hit], scores[hit]


def order(
    keys: IntArray, scores: FloatArray, want: int, hinted: npt.NDArray[np.bool_] | None = None
) -> list[tuple[int, float]]:
    """The best ``want`` ``(key, score)`` pairs: score descending, ties by key; hinted ones first when given."""
    groups = [np.ones(len(keys), dtype=bool)] if hinted is None else [hinted, ~hinted]
    out: list[tuple[int, float]] = []
    for mask in groups:
        if len(out) >= want:
            break
        k, s = keys[mask], scores[mask]
        take = want - len(out)
        if len(k) > take * 4 and take < len(k):
            part = np.argpartition(-s, take - 1)[:take]
            cut = s[part].min()
            keep = s >= cut
            k, s = k[keep], s[keep]
        idx = np.lexsort((k, -s))[:take]
        out.extend((int(k[i]), float(s[i])) for i in idx)
    return out


class VectorCache:
    """A process-local copy of the items' vectors and ranking columns, keyed by ``seq``.

    Rows are appended in seq order up to the lowest still-pending seq, so every indexed row at or below the
    loaded bound is present. Deleted rows stay (harmless: ranking only asks for seqs that passed the filter).
    A changed ``meta.instance`` (the file was replaced) empties it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instance: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.upto = 0
        self.seqs: IntArray = np.zeros(0, dtype=np.int64)
        self.vectors: npt.NDArray[np.float32] = np.zeros((0, EMBED_DIM), dtype=np.float32)
        self.when_us: IntArray = np.zeros(0, dtype=np.int64)
        self.confidence: FloatArray = np.zeros(0)

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Load rows indexed since the last refresh (call inside the read's snapshot)."""
        instance = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
        bound_row = conn.execute(
            "SELECT coalesce((SELECT min(seq) - 1 FROM pending), (SELECT max(seq) FROM items), 0)"
        ).fetchone()
        bound = int(bound_row[0] or 0)
        with self._lock:
            if instance is None or instance[0] != self._instance:
                self._reset()
                self._instance = instance[0] if instance else None
            if bound <= self.upto:
                return
            rows = conn.execute(
                "SELECT seq, vec, coalesce(observed_at, stored_at), coalesce(confidence, 0.5) FROM items "
                "WHERE seq > ? AND seq <= ? AND vec IS NOT NULL ORDER BY seq",
                (self.upto, bound),
            ).fetchall()
            if rows:
                seqs = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), EMBED_DIM)
                self.seqs = np.concatenate([self.seqs, seqs])
                self.vectors = np.concatenate([self.vectors, vecs])
                self.when_us = np.concatenate(
                    [self.when_us, np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))]
                )
                self.confidence = np.concatenate(
                    [self.confidence, np.fromiter((r[3] for r in rows), dtype=np.float64, count=len(rows))]
                )
            self.upto = bound

    def take(self, keys: IntArray, conn: sqlite3.Connection) -> tuple[npt.NDArray[np.float32], IntArray, FloatArray]:
        """Vectors, times and confidences of ``keys`` (indexed rows); rows past the loaded bound come from ``conn``."""
        with self._lock:
            seqs, vecs, when, conf = self.seqs, self.vectors, self.when_us, self.confidence
        if len(seqs) == 0:
            pos = np.zeros(len(keys), dtype=np.int64)
            found = np.zeros(len(keys), dtype=bool)
        else:
            pos = np.minimum(np.searchsorted(seqs, keys), len(seqs) - 1)
            found = seqs[pos] == keys
        if found.all():
            return vecs[pos], when[pos], conf[pos]
        out_v = np.zeros((len(keys), EMBED_DIM), dtype=np.float32)
        out_w = np.zeros(len(keys), dtype=np.int64)
        out_c = np.full(len(keys), 0.5)
        out_v[found], out_w[found], out_c[found] = vecs[pos[found]], when[pos[found]], conf[pos[found]]
        missing = [int(k) for k in keys[~found]]
        extra: dict[int, tuple[bytes, int, float]] = {}
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            for seq, vec, at, c in conn.execute(
                f"SELECT seq, vec, coalesce(observed_at, stored_at), coalesce(confidence, 0.5) FROM items "
                f"WHERE seq IN ({marks}) AND vec IS NOT NULL",
                chunk,
            ):
                extra[int(seq)] = (vec, int(at), float(c))
        for i in np.flatnonzero(~found):
            row = extra.get(int(keys[i]))
            if row is not None:
                out_v[i] = np.frombuffer(row[0], dtype="<f4")
                out_w[i], out_c[i] = row[1], row[2]
        return out_v, out_w, out_c


def item_candidates(
    conn: sqlite3.Connection, cache: VectorCache, where: Where, query: str, mode: FetchMode
) -> Candidates:
    """The filtered items with their ranking data (the cache must be refreshed in this snapshot)."""
    match = fts_query(query) if mode is not FetchMode.VECTOR else None
    lexical: dict[int, float] = {}
    if match is not None:
        for seq, rank in conn.execute(
            "SELECT i.seq, bm25(items_fts) FROM items_fts JOIN items i ON i.seq = items_fts.rowid "
            f"WHERE items_fts MATCH ? AND {where.sql}",
            (match, *where.params),
        ):
            lexical[int(seq)] = -float(rank)
    if mode is FetchMode.KEYWORD:
        keys = np.fromiter(sorted(lexical), dtype=np.int64, count=len(lexical))
        _, when, conf = cache.take(keys, conn)
        return Candidates.build(keys, when, conf, None, lexical)
    seqs = [r[0] for r in conn.execute(f"SELECT i.seq FROM items i WHERE {where.sql}", where.params)]
    keys = np.sort(np.fromiter(seqs, dtype=np.int64, count=len(seqs)))
    vectors, when, conf = cache.take(keys, conn)
    return Candidates.build(keys, when, conf, vectors, lexical)
