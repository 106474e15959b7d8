"""Candidates and their signals from PostgreSQL, in one statement per ranked read (``fusion`` scores them).

Document frequencies of the query's words (the reference tokenizer, ``scoring.tokenize``) come from
``Frequencies``, a per-process cache refreshed every ``DF_TTL_S`` (one small statement for the words it lacks:
counts on the ``tsv`` GIN index, capped at ``DF_CAP`` rows per word). Then one ``WITH`` statement:

1. (the frequencies decide which words are informative, so the statement names them as a constant and the
   planner picks the GIN index for them);
2. ``lex``: the rows the filter admits holding one of the query's *informative* words (document frequency at
   most ``COMMON_SHARE`` of the rows, or ``COMMON_MIN``; all words when none is), found on the GIN index, the
   best ``pool`` by ``bm25`` (its IDFs passed as constants); and, when those are fewer than the pool,
   ``com``: rows holding common words, newest first, so a query of common words still has hits (as on
   SQLite, where they rank below any informative match);
3. ``vec`` (vector mode, and hybrid mode when the lexical pool cannot fill the page): the best ``pool`` rows by
   embedding distance: pgvector's HNSW index, or ``cube``'s GiST index (distance computed in C), or a cosine
   scan of the reach in SQL;
4. for the union, what ``fusion.Signals`` needs: the query words each row holds (its lexemes intersected with
   the query's), its length, its embedding, ``pg_trgm``'s ``word_similarity`` when installed, its time,
   confidence and hint flag.

The IDF-weighted lexical score (BM25 with term frequency 1) and the cosine are computed here in Python over the
candidates only. Every part filters by the request's reach and filter in SQL (``filters.compile_filter``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from memory_core.engines.sqlite.search import COMMON_MIN, COMMON_SHARE, hint_window, query_words
from memory_core.query import FetchMode, TimeHint
from memory_core.scoring import embed

from .filters import Where
from .fusion import Signals

__all__ = ["AVG_WORDS", "DF_CAP", "DF_TTL_S", "Features", "Frequencies", "bm25", "candidates", "pool_size"]

DF_CAP: Final = 5_000
"""Most rows counted for one query word's document frequency; a word held by more is common (``COMMON_SHARE``
of a large table), its IDF near 0 anyway."""
AVG_WORDS: Final = 40.0
"""Typical distinct words of an item, for BM25's length normalisation (a LoCoMo turn holds ~20-60)."""
DF_TTL_S: Final = 300.0
"""Seconds a cached document frequency is used before it is counted again (frequencies drift slowly)."""
_DF_ENTRIES: Final = 50_000
"""Words cached per table; the cache is emptied when it grows past this."""
_K1: Final = 1.2
_B: Final = 0.75


@dataclass(frozen=True)
class Features:
    """What a database offers ranking (``health()`` reports it).

    Attributes:
        trigram: ``pg_trgm`` is installed.
        vectors: How vector candidates are found: ``pgvector``, ``cube`` or ``scan`` (``schema.ensure_vectors``).
    """

    trigram: bool
    vectors: str


class Frequencies:
    """A per-process cache of document frequencies per table, ``word → (df, counted at)``, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._df: dict[tuple[str, str], tuple[float, float]] = {}
        self._total: dict[str, tuple[float, float]] = {}

    def get(self, conn: Any, table: str, key: str, words: Sequence[str]) -> tuple[dict[str, float], float]:
        """``(df per word, rows in the table)``, counting (one statement) what is missing or stale."""
        now = time.monotonic()
        with self._lock:
            known = {w: v[0] for w in words if (v := self._df.get((table, w))) and now - v[1] < DF_TTL_S}
            total = self._total.get(table)
        missing = [w for w in words if w not in known]
        if missing or total is None or now - total[1] >= DF_TTL_S:
            rows = conn.execute(
                f"SELECT word, (SELECT count(*) FROM (SELECT 1 FROM {table} x WHERE x.tsv @@ "
                f"to_tsquery('simple', quote_literal(word)) LIMIT {DF_CAP}) c), "
                f"(SELECT coalesce(max({key}), 0) FROM {table}) FROM unnest(%s::text[]) AS word "
                f"UNION ALL SELECT NULL, 0, (SELECT coalesce(max({key}), 0) FROM {table})",
                (missing,),
            ).fetchall()
            counted = max((float(n or 0) for _, _, n in rows), default=0.0)
            total = (max(counted, 1.0), now)
            with self._lock:
                if len(self._df) > _DF_ENTRIES:
                    self._df.clear()
                for word, df, _ in rows:
                    if word is not None:
                        self._df[(table, str(word))] = (float(df), now)
                        known[str(word)] = float(df)
                self._total[table] = total
        return known, total[0]


def pool_size(want: int) -> int:
    """Candidates each source contributes for a page of ``want`` hits (the fusion re-orders them)."""
    return max(50, 3 * want)


def _idf(df: float, total: float) -> float:
    n = min(df, total)
    return math.log(1 + (total - n + 0.5) / (n + 0.5))


def bm25(held: Sequence[str], df: dict[str, float], total: float, length: int) -> float:
    """IDF-weighted match of the query words a row holds, length-normalised (BM25 with term frequency 1; pure).

    Args:
        held: The query words the row holds.
        df: Each query word's document frequency.
        total: Rows in the table.
        length: The row's distinct words.
    """
    norm = 1 + _K1 * (1 - _B + _B * length / AVG_WORDS)
    score = 0.0
    for word in held:
        score += _idf(df.get(word, 0.0), total) * (_K1 + 1) / norm
    return score


def _tsquery(words: Sequence[str]) -> str:
    """The OR of ``words`` as ``to_tsquery`` text; every word is letters and digits, so quoting is enough."""
    return " | ".join(f"'{w}'" for w in words)


def _vector_source(table: str, key: str, cond: str, pool: int, vectors: str) -> str:
    if vectors == "pgvector":
        order = "i.pvec <#> %s::real[]::vector"
    elif vectors == "cube":
        order = "i.cvec <-> cube(%s::float8[])"
    else:
        order = "(SELECT coalesce(sum(a * b), 0) FROM unnest(i.vec, %s::real[]) AS t(a, b)) DESC"
    return f"vec AS (SELECT i.{key} AS k FROM {table} i WHERE {cond} ORDER BY {order}, i.{key} LIMIT {pool})"


def candidates(
    conn: Any,
    *,
    table: str,
    key: str,
    where: Where,
    query: str,
    mode: FetchMode,
    want: int,
    features: Features,
    frequencies: Frequencies,
    refers_to: TimeHint | None = None,
    extra: str = "",
    extra_params: Sequence[Any] = (),
) -> list[Signals]:
    """The candidates of one ranked read, with their signals (see the module docstring).

    Args:
        conn: An open connection (the caller's transaction).
        table: ``memory_core.items`` or ``memory_core.beliefs``, aliased ``i``.
        key: The row key column (``seq``, ``bid``).
        where: The compiled filter over alias ``i``.
        query: The query text.
        mode: The fetch mode (vector candidates only for vector and hybrid).
        want: Hits wanted (the page, plus one to know whether more exist).
        features: What the database offers.
        frequencies: The process's document-frequency cache.
        refers_to: A time hint: rows observed inside it are flagged ``hinted``.
        extra: More SQL ANDed to the filter (a snapshot bound), with ``extra_params``.
        extra_params: Its parameters.
    """
    words = query_words(query)
    qvec = np.asarray(embed(query), dtype=np.float64)
    pool = pool_size(want)
    cond = where.sql + (f" AND {extra}" if extra else "")
    cond_params = [*where.params, *extra_params]
    df, total = frequencies.get(conn, table, key, words) if words else ({}, 1.0)
    common = max(COMMON_MIN, min(COMMON_SHARE * total, DF_CAP - 1))
    rare = [w for w in words if df.get(w, 0.0) <= common] or words
    ctes: list[str] = []
    params: list[Any] = []
    parts: list[str] = []
    if words:
        weight = " + ".join("CASE WHEN i.tsv @@ to_tsquery('simple', %s) THEN %s ELSE 0 END" for _ in rare)
        ctes.append(  # ordered by ``bm25`` itself: the IDFs are constants of this statement
            f"lex AS (SELECT i.{key} AS k FROM {table} i WHERE i.tsv @@ to_tsquery('simple', %s) AND {cond} "
            f"ORDER BY ({weight}) / (1 + {_K1} * ({1 - _B} + {_B} * length(i.tsv) / {AVG_WORDS})) DESC, "
            f"i.{key} LIMIT {pool})"
        )
        params.extend([_tsquery(rare), *cond_params])
        for word in rare:
            params.extend([f"'{word}'", _idf(df.get(word, 0.0), total)])
        ctes.append(  # only when informative words leave the pool short: a common word matches most rows
            f"com AS (SELECT i.{key} AS k FROM {table} i WHERE (SELECT count(*) FROM lex) < {pool} "
            f"AND i.tsv @@ to_tsquery('simple', %s) AND {cond} ORDER BY i.{key} DESC LIMIT {pool})"
        )
        params.extend([_tsquery(words), *cond_params])
        parts += ["SELECT k FROM lex", "SELECT k FROM com"]
    if mode is not FetchMode.KEYWORD:
        # hybrid: vector-only candidates score at most VECTOR_SHARE, below any informative match, so they are
        # looked for only when the lexical pool cannot fill the page (the scan is the reach's size)
        short = "" if mode is FetchMode.VECTOR or not words else f"(SELECT count(*) FROM lex) < {want} AND "
        ctes.append(_vector_source(table, key, short + cond, pool, features.vectors))
        params.extend([*cond_params, [float(v) for v in qvec]])
        parts.append("SELECT k FROM vec")
    if not parts:
        return []
    trigram = "word_similarity(%s, i.words)" if features.trigram and words else "0::float8"
    hint_sql, hint_params = "false", []
    if refers_to is not None:
        start, end = hint_window(refers_to)
        hint_sql, hint_params = "(i.observed_at >= %s AND i.observed_at < %s)", [start, end]
    when = "i.stored_at" if table.endswith(".items") else "i.updated_at"
    select = (
        f"SELECT i.{key}, ARRAY(SELECT x FROM unnest(tsvector_to_array(i.tsv)) AS x WHERE x = ANY(%s::text[])), "
        f"length(i.tsv), i.vec, {trigram}, coalesce(i.observed_at, {when}), coalesce(i.confidence, 0.5), "
        f"{hint_sql} FROM {table} i WHERE i.{key} IN ({' UNION '.join(parts)})"
    )
    select_params: list[Any] = [words]
    if features.trigram and words:
        select_params.append(" ".join(words))
    select_params.extend(hint_params)
    rows = conn.execute("WITH " + ", ".join(ctes) + " " + select, [*params, *select_params]).fetchall()
    return _signals(rows, df, total, qvec)


def _signals(
    rows: Sequence[Sequence[Any]], df: dict[str, float], total: float, qvec: np.ndarray[Any, Any]
) -> list[Signals]:
    if not rows:
        return []
    vecs = np.asarray([r[3] for r in rows], dtype=np.float64)
    cosines = vecs @ qvec if len(qvec) == vecs.shape[1] else np.zeros(len(rows))
    out: list[Signals] = []
    for r, cosine in zip(rows, cosines, strict=True):
        held = list(r[1] or [])
        out.append(
            Signals(
                key=int(r[0]),
                lexical=bm25(held, df, total, int(r[2] or 0)),
                matched=bool(held),
                cosine=float(cosine),
                trigram=float(r[4] or 0.0),
                when_us=int(r[5]),
                confidence=float(r[6]),
                hinted=bool(r[7]),
            )
        )
    return out
