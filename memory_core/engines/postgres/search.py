"""Candidates and their signals from PostgreSQL, in one statement per ranked read (``fusion`` scores them).

One ``WITH`` statement per ranked read:

1. ``w``: the query's distinct words (the reference tokenizer, ``scoring.tokenize``) with their document
   frequency, counted on the ``tsv`` GIN index and capped at ``DF_CAP`` rows per word;
2. ``lex``: the rows the filter admits holding one of the query's *informative* words (document frequency at
   most ``COMMON_SHARE`` of the rows, or ``COMMON_MIN``; all words when none is), found on the GIN index, the
   best ``pool`` by ``ts_rank_cd``; and ``com``: rows holding only common words, newest first, so a query of
   common words still has hits (as on SQLite, where such rows rank below any informative match);
3. ``vec`` (vector and hybrid modes): the best ``pool`` rows by embedding distance: pgvector's HNSW index, or
   ``cube``'s GiST index (distance computed in C), or a cosine scan of the reach in SQL;
4. for the union, what ``fusion.Signals`` needs: the query words each row holds (its lexemes intersected with
   the query's), its length, its embedding, ``pg_trgm``'s ``word_similarity`` when installed, its time,
   confidence and hint flag, plus the words' document frequencies and the row count.

The IDF-weighted lexical score (BM25 with term frequency 1) and the cosine are computed here in Python over the
candidates only. Every part filters by the request's reach and filter in SQL (``filters.compile_filter``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from memory_core.engines.sqlite.search import COMMON_MIN, COMMON_SHARE, hint_window, query_words
from memory_core.query import FetchMode, TimeHint
from memory_core.scoring import embed

from .filters import Where
from .fusion import Signals

__all__ = ["AVG_WORDS", "DF_CAP", "Features", "bm25", "candidates", "pool_size"]

DF_CAP: Final = 20_000
"""Most rows counted for one query word's document frequency (a word that common has an IDF near 0 anyway)."""
AVG_WORDS: Final = 40.0
"""Typical distinct words of an item, for BM25's length normalisation (a LoCoMo turn holds ~20-60)."""
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


def pool_size(want: int) -> int:
    """Candidates each source contributes for a page of ``want`` hits (the fusion re-orders them)."""
    return max(50, 3 * want)


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
        n = min(df.get(word, 0.0), total)
        score += math.log(1 + (total - n + 0.5) / (n + 0.5)) * (_K1 + 1) / norm
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
        refers_to: A time hint: rows observed inside it are flagged ``hinted``.
        extra: More SQL ANDed to the filter (a snapshot bound), with ``extra_params``.
        extra_params: Its parameters.
    """
    words = query_words(query)
    qvec = np.asarray(embed(query), dtype=np.float64)
    pool = pool_size(want)
    cond = where.sql + (f" AND {extra}" if extra else "")
    cond_params = [*where.params, *extra_params]
    ctes = [
        f"n AS (SELECT greatest(coalesce(max({key}), 0), 1)::float8 AS total FROM {table})",
        f"w AS MATERIALIZED (SELECT word, (SELECT count(*) FROM (SELECT 1 FROM {table} x WHERE x.tsv @@ "
        f"to_tsquery('simple', quote_literal(word)) LIMIT {DF_CAP}) c)::float8 AS df "
        "FROM unnest(%s::text[]) AS word)",
    ]
    params: list[Any] = [words]
    parts: list[str] = []
    if words:
        common = f"greatest({COMMON_SHARE} * n.total, {COMMON_MIN})"
        ctes.append(
            "rq AS MATERIALIZED (SELECT coalesce(to_tsquery('simple', string_agg(quote_literal(w.word), ' | ') "
            f"FILTER (WHERE w.df <= {common})), to_tsquery('simple', %s)) AS q FROM w, n)"
        )
        params.append(_tsquery(words))
        ctes.append(
            f"lex AS (SELECT i.{key} AS k FROM {table} i WHERE i.tsv @@ (SELECT q FROM rq) AND {cond} "
            f"ORDER BY ts_rank_cd(i.tsv, (SELECT q FROM rq), 1) DESC, i.{key} LIMIT {pool})"
        )
        params.extend(cond_params)
        ctes.append(
            f"com AS (SELECT i.{key} AS k FROM {table} i WHERE i.tsv @@ to_tsquery('simple', %s) AND {cond} "
            f"ORDER BY i.{key} DESC LIMIT {pool})"
        )
        params.extend([_tsquery(words), *cond_params])
        parts += ["SELECT k FROM lex", "SELECT k FROM com"]
    if mode is not FetchMode.KEYWORD:
        ctes.append(_vector_source(table, key, cond, pool, features.vectors))
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
        f"{hint_sql}, (SELECT array_agg(df ORDER BY word) FROM w), (SELECT total FROM n) "
        f"FROM {table} i WHERE i.{key} IN ({' UNION '.join(parts)})"
    )
    select_params: list[Any] = [words]
    if features.trigram and words:
        select_params.append(" ".join(words))
    select_params.extend(hint_params)
    rows = conn.execute("WITH " + ", ".join(ctes) + " " + select, [*params, *select_params]).fetchall()
    return _signals(rows, sorted(words), qvec)


def _signals(rows: Sequence[Sequence[Any]], words: Sequence[str], qvec: np.ndarray[Any, Any]) -> list[Signals]:
    if not rows:
        return []
    df = dict(zip(words, [float(v) for v in (rows[0][8] or [])], strict=False))
    total = float(rows[0][9] or 1.0)
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
