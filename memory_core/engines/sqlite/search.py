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
stored as float32 blobs (``index.ItemIndex`` keeps a process-local copy).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from typing import Final
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from memory_core.query import FetchMode, TimeHint
from memory_core.scoring import VECTOR_THRESHOLD, embed, tokenize

from .rows import to_us

__all__ = [
    "CONFIDENCE_WEIGHT",
    "RECENCY_HALF_LIFE_DAYS",
    "RECENCY_WEIGHT",
    "Candidates",
    "align",
    "fts_matches",
    "fts_query",
    "hint_window",
    "order",
    "score",
]

RECENCY_WEIGHT: Final = 0.10
"""Share of the score recency can move (memory-core's calibration)."""
CONFIDENCE_WEIGHT: Final = 0.05
"""Share of the score confidence can move."""
RECENCY_HALF_LIFE_DAYS: Final = 30.0
"""Age at which recency halves, days."""
COMMON_SHARE: Final = 0.05
"""A query word held by more than this share of the rows is matched but not BM25-scored."""
COMMON_MIN: Final = 500
"""…and by more than this many rows (small tables score every word)."""
COMMON_ONLY: Final = 1e-6
"""Relevance of a row matched by common words only (a hit, ranked below any informative match)."""
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
        matches: tuple[IntArray, FloatArray],
    ) -> Candidates:
        """Candidates from parallel arrays plus the FTS5 matches (``fts_matches``)."""
        lex, matched = align(keys, *matches)
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


def fts_matches(conn: sqlite3.Connection, table: str, query: str, total: int) -> tuple[IntArray, FloatArray]:
    """Rows of FTS5 ``table`` matching a word of ``query``: keys ascending and their relevance (higher is better).

    ``total`` is about how many rows the table holds. Relevance is ``-bm25()`` over the query's informative
    words. A word held by more than ``COMMON_SHARE`` of the rows (and ``COMMON_MIN`` rows) still makes a row a
    match, but is left out of BM25, where its weight is near zero anyway: scoring it for most of the table is
    what would make a read cost grow with the table.
    """
    words = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TERMS]
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0))
    if not words:
        return empty
    marks = ", ".join("?" for _ in words)
    df = {
        str(t): int(d) for t, d in conn.execute(f"SELECT term, doc FROM {table}_vocab WHERE term IN ({marks})", words)
    }
    cutoff = max(COMMON_MIN, COMMON_SHARE * total)
    rare = [w for w in words if 0 < df.get(w, 0) <= cutoff]
    common = [w for w in words if df.get(w, 0) > cutoff]
    parts: list[tuple[IntArray, FloatArray]] = []
    if rare:
        expr = " OR ".join(f'"{w}"' for w in rare)
        row = conn.execute(
            f"WITH m AS MATERIALIZED (SELECT rowid AS r, -bm25({table}) AS s FROM {table} WHERE {table} MATCH ?) "
            "SELECT group_concat(r), group_concat(s) FROM m",
            (expr,),
        ).fetchone()
        if row[0]:
            parts.append((_ints(row[0]), np.asarray(str(row[1]).split(","), dtype=np.float64)))
    if common:
        expr = " OR ".join(f'"{w}"' for w in common)
        row = conn.execute(f"SELECT group_concat(rowid) FROM {table} WHERE {table} MATCH ?", (expr,)).fetchone()
        if row[0]:
            keys = _ints(row[0])
            if parts:
                keys = np.setdiff1d(keys, parts[0][0], assume_unique=True)
            parts.append((keys, np.full(len(keys), COMMON_ONLY)))
    if not parts:
        return empty
    k = np.concatenate([p[0] for p in parts])
    v = np.concatenate([p[1] for p in parts])
    order_ = np.argsort(k, kind="stable")
    return k[order_], v[order_]


def _ints(csv: str) -> IntArray:
    return np.asarray(csv.split(","), dtype=np.int64)


def align(keys: IntArray, match_keys: IntArray, match_values: FloatArray) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """The match values of ``keys`` (0 where unmatched) and which keys matched; both key arrays ascending."""
    if len(match_keys) == 0 or len(keys) == 0:
        return np.zeros(len(keys)), np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(match_keys, keys), len(match_keys) - 1)
    matched = match_keys[pos] == keys
    return np.where(matched, match_values[pos], 0.0), matched
