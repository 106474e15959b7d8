"""Ranked retrieval over the SQLite file: FTS5 BM25, stored vectors, hybrid, recency, confidence, time hint.

Hit rules follow the reference engine (contract reference §3), so every engine agrees on *what* a mode
returns; the order is this engine's own:

| mode | a hit when | relevance |
| --- | --- | --- |
| keyword | FTS5 matches a query word (lexical overlap) | ``kw = bm25 / (bm25 + BM25_HALF)`` |
| vector | cosine of the stored embeddings ≥ ``VECTOR_THRESHOLD`` | cosine |
| hybrid | either of the above | ``(1 - VECTOR_SHARE) × kw + VECTOR_SHARE × cosine`` |

``score = relevance × (0.85 + 0.10 × recency + 0.05 × confidence)``, where ``recency = 0.5 ^ (age / 30 days)``
from ``observed_at`` (else the store time) and ``confidence`` is a learning's (0.5 for other kinds): relevance
decides, recency and confidence break near-ties (seed 004: full-text relevance, similarity, importance and
recency combined). Ties keep write order. A ``refers_to`` hint then moves hits observed on a hinted day
first, order kept inside each group (``TimeHint.rank``, reference §1.3).

**Relevance is absolute, so scores compare across fetches of one query.** A pack reads several sections (its
learnings, the brain, the agent's history…), each its own fetch, and a relevance floor (``HolisticRecall``'s
``min_relevance``) compares their hits; a score that meant "share of this fetch's best" would put every
section's top hit near 1 however weakly it matches. So:

* ``bm25`` is FTS5's raw ``-bm25()``, whose statistics (rows, average length, rows per word) are the whole
  table's whatever rows a statement reads, so one query's BM25 values are comparable across filters. It is
  mapped into [0, 1) by the saturating ``bm25 / (bm25 + BM25_HALF)``: monotone (the order of a keyword fetch
  is BM25's), near-linear for the usual range of one informative word to a few (BM25 ~2-20 on a turn or a
  passage, so ratios of scores stay close to ratios of BM25), and bounded, so a score stays ≤ 1 and a long
  question's sum over many words cannot swamp recency.
* The reference embedding (``memory_core.scoring.embed``: 64 hashed character trigrams) says little about
  meaning: any text of a few sentences holds most trigrams, so its cosine with any query is high whatever the
  query (measured against LoCoMo questions: 0.61 on average for a 40 KB PEP, 0.54 for a brain passage, 0.52 for
  a conversation turn). In hybrid mode it is therefore only a tie-breaker, ``VECTOR_SHARE`` of relevance:
  it orders hits of equal lexical relevance (trigrams do catch ``paint``/``painting``), and a row that is a
  hit by cosine alone scores at most ``VECTOR_SHARE``, below a row that holds an informative query word
  (``kw`` of BM25 ≥ ~2.5 already passes it), instead of half the scale. Measured on LoCoMo (fetch@k over the
  turns, no brain), hybrid top-5/10/20 evidence recall went from 42.3/50.3/58.9% (BM25 over the fetch's best,
  plus cosine, halved) to 43.1/51.3/60.2%; a ``VECTOR_SHARE`` of 0.5 lost ~4 points, 0 about 1. Vector mode
  keeps the plain cosine: there it is the only signal, and its hits are the reference's.

The hit set of every mode is unchanged by these rules (only scores and order are this engine's), so hit sets
agree with the reference engine's and the conformance suite's.

BM25 is FTS5's ``bm25()`` over the query's informative words (see ``fts``: a word held by more than
``COMMON_SHARE`` of the rows still makes a row a match, relevance ``COMMON_ONLY``, but is not BM25-scored).

Vectors are the reference embedding, computed once when an item is indexed and stored as float32 blobs
(``index.ItemIndex`` keeps a process-local copy); the query's is computed once per read (``query_vector``) and
cosines are float32 dot products.

This module is the arithmetic (pure: arrays in, arrays out); ``ranking`` decides which rows it runs on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from functools import lru_cache
from typing import Final
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from memory_core.query import FetchMode, TimeHint
from memory_core.scoring import VECTOR_THRESHOLD, embed, tokenize

from .rows import to_us

__all__ = [
    "BM25_HALF",
    "COMMON_MIN",
    "COMMON_ONLY",
    "COMMON_SHARE",
    "CONFIDENCE_WEIGHT",
    "MAX_QUERY_TERMS",
    "RECENCY_HALF_LIFE_DAYS",
    "RECENCY_WEIGHT",
    "Candidates",
    "align",
    "fts_query",
    "hint_window",
    "keyword_relevance",
    "members",
    "order",
    "query_vector",
    "query_words",
    "relevance",
    "score",
    "score_all",
    "VECTOR_SHARE",
    "weights",
]

BM25_HALF: Final = 20.0
"""Raw BM25 at which keyword relevance is 0.5 (*memory-core*, measured on LoCoMo turns and PEP passages: one
informative word scores ~2-8, a turn holding a question's key words ~10-20; so relevance is near-linear below
~10 and saturates only for long, many-word matches)."""
VECTOR_SHARE: Final = 0.10
"""Share of hybrid relevance the cosine moves (*memory-core*: a tie-breaker, see the module docstring)."""
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
BoolArray = npt.NDArray[np.bool_]


def query_words(query: str) -> list[str]:
    """The query's distinct words in order, at most ``MAX_QUERY_TERMS`` (``scoring.tokenize``)."""
    return list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TERMS]


def fts_query(query: str) -> str | None:
    """The FTS5 MATCH expression for ``query``: its distinct words, each quoted, OR-ed (None: no words)."""
    words = query_words(query)
    if not words:
        return None
    return " OR ".join(f'"{w}"' for w in words)


@lru_cache(maxsize=256)
def query_vector(query: str) -> npt.NDArray[np.float32]:
    """The query's reference embedding as float32, read-only, kept per process for the 256 latest queries.

    A pack's sections (their lexical stages, dense nominations and beliefs) asked it ~6 times per ``pre_turn``.
    """
    out = np.asarray(embed(query), dtype=np.float32)
    out.flags.writeable = False
    return out


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
        cos: Cosine with the query (only when the mode needs it).
        lexical: BM25 relevance (``-bm25()``, higher is better; ``COMMON_ONLY`` for a common-words-only match;
            0 when not matched).
        matched: Whether FTS5 matched the row.
    """

    keys: IntArray
    when_us: IntArray
    confidence: FloatArray
    cos: FloatArray | None
    lexical: FloatArray
    matched: BoolArray

    @classmethod
    def build(
        cls,
        keys: IntArray,
        when_us: IntArray,
        confidence: FloatArray,
        cos: FloatArray | None,
        matches: tuple[IntArray, FloatArray],
    ) -> Candidates:
        """Candidates from parallel arrays plus the FTS5 matches (``fts.fts_matches``)."""
        lex, matched = align(keys, *matches)
        return cls(keys, when_us, confidence, cos, np.maximum(lex, 0.0), matched)


def weights(when_us: IntArray, confidence: FloatArray, now_us: int) -> FloatArray:
    """``0.85 + 0.10 × recency + 0.05 × confidence`` per row (in (0, 1]; see the module docstring)."""
    age_days = np.maximum(now_us - when_us, 0) / _US_PER_DAY
    recency = np.power(0.5, age_days / RECENCY_HALF_LIFE_DAYS)
    out: FloatArray = (
        (1.0 - RECENCY_WEIGHT - CONFIDENCE_WEIGHT) + RECENCY_WEIGHT * recency + CONFIDENCE_WEIGHT * confidence
    )
    return out


def keyword_relevance(lex: FloatArray) -> FloatArray:
    """Keyword relevance in [0, 1) from raw BM25 (``-bm25()``, ≥ 0): ``lex / (lex + BM25_HALF)``."""
    out: FloatArray = lex / (lex + BM25_HALF)
    return out


def relevance(kw: FloatArray, cos: FloatArray | None, mode: FetchMode) -> FloatArray:
    """Relevance from keyword relevance ``kw`` (``keyword_relevance``) and cosine, per the module table."""
    if mode is FetchMode.KEYWORD:
        return kw
    assert cos is not None
    if mode is FetchMode.VECTOR:
        return cos
    out: FloatArray = (1.0 - VECTOR_SHARE) * kw + VECTOR_SHARE * cos
    return out


def score_all(
    cands: Candidates,
    mode: FetchMode,
    now_us: int | None = None,
    weight: FloatArray | None = None,
) -> tuple[BoolArray, FloatArray]:
    """Which candidates are hits, and every candidate's score (see the module table).

    ``weight`` is ``weights(cands.when_us, cands.confidence, now_us)`` when the caller already has it. A score
    depends on its own row only (no normalisation over the candidates), so any subset scores the same.
    """
    matched = cands.matched
    kw = keyword_relevance(cands.lexical)
    if mode is FetchMode.KEYWORD:
        hit = matched
    else:
        assert cands.cos is not None
        near = cands.cos >= VECTOR_THRESHOLD
        hit = near if mode is FetchMode.VECTOR else matched | near
    if weight is None:
        now = now_us if now_us is not None else time.time_ns() // 1000
        weight = weights(cands.when_us, cands.confidence, now)
    scores: FloatArray = relevance(kw, cands.cos, mode) * weight
    return hit, scores


def score(cands: Candidates, mode: FetchMode, now_us: int | None = None) -> tuple[IntArray, FloatArray]:
    """Hit keys and their scores (see the module table); keys ascending, not yet ordered by score."""
    if len(cands.keys) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    hit, scores = score_all(cands, mode, now_us)
    return cands.keys[hit], scores[hit]


def order(keys: IntArray, scores: FloatArray, want: int, hinted: BoolArray | None = None) -> list[tuple[int, float]]:
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


def _lookup(keys: IntArray, held: IntArray) -> tuple[IntArray, BoolArray]:
    """For each key, its position in ``held`` (ascending, unique) and whether it is there.

    Binary-searches the shorter array in the longer one (two sorted arrays: either way gives the same answer).
    """
    found = np.zeros(len(keys), dtype=bool)
    at = np.zeros(len(keys), dtype=np.int64)
    if len(held) == 0 or len(keys) == 0:
        return at, found
    if len(held) < len(keys):
        pos = np.minimum(np.searchsorted(keys, held), len(keys) - 1)
        hit = keys[pos] == held
        found[pos[hit]] = True
        at[pos[hit]] = np.flatnonzero(hit)
        return at, found
    pos = np.minimum(np.searchsorted(held, keys), len(held) - 1)
    return pos, held[pos] == keys


def members(keys: IntArray, held: IntArray) -> BoolArray:
    """Which of ``keys`` (ascending, unique) are in ``held`` (ascending, unique)."""
    return _lookup(keys, held)[1]


def align(keys: IntArray, match_keys: IntArray, match_values: FloatArray) -> tuple[FloatArray, BoolArray]:
    """The match values of ``keys`` (0 where unmatched) and which keys matched; both key arrays ascending."""
    at, matched = _lookup(keys, match_keys)
    values = match_values[at] if len(match_values) else np.zeros(len(keys))
    return np.where(matched, values, 0.0), matched
