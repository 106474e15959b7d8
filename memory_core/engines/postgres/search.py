"""Candidates and their signals from PostgreSQL, in one statement per ranked read (``fusion`` scores them).

One ``WITH`` statement per fetch:

1. ``words``: the query's distinct words (the reference tokenizer, ``scoring.tokenize``) with their document
   frequency, counted on the ``tsv`` GIN index and capped at ``DF_CAP`` rows per word, and an IDF from it;
2. ``lex``: the rows the filter admits that hold a query word (``tsv @@`` the OR of the words, GIN), the
   best ``pool`` by the IDF-weighted sum of the words they hold, length-normalised (BM25 with term frequency 1);
3. ``vec`` (vector and hybrid modes): the best ``pool`` rows by the cosine of the stored embeddings: pgvector's
   HNSW index (inner product of unit vectors) when installed, else an exact scan of the reach in SQL;
4. the union, with every signal ``fusion.Signals`` needs, including ``pg_trgm``'s ``word_similarity`` of the
   query to the candidate's words when the extension is there.

Every part filters by the request's reach and filter in SQL (``filters.compile_filter``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from memory_core.engines.sqlite.search import hint_window, query_words
from memory_core.query import FetchMode, TimeHint
from memory_core.scoring import embed

from .filters import Where
from .fusion import Signals

__all__ = ["DF_CAP", "AVG_WORDS", "Features", "candidates", "pool_size"]

DF_CAP: Final = 20_000
"""Most rows counted for one query word's document frequency (a word that common has an IDF near 0 anyway)."""
AVG_WORDS: Final = 40.0
"""Typical distinct words of an item, for BM25's length normalisation (a LoCoMo turn holds ~20-60)."""
_K1: Final = 1.2
_B: Final = 0.75


@dataclass(frozen=True)
class Features:
    """What a database offers ranking: ``pg_trgm`` and pgvector (``health()`` reports them)."""

    trigram: bool
    pgvector: bool


def pool_size(want: int) -> int:
    """Candidates each source contributes for a page of ``want`` hits (the fusion re-orders them)."""
    return max(50, 3 * want)


def _tsquery(words: Sequence[str]) -> str:
    """The OR of ``words`` as ``to_tsquery`` text; every word is letters and digits, so quoting is enough."""
    return " | ".join(f"'{w}'" for w in words)


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
    qvec = [float(v) for v in embed(query)]
    pool = pool_size(want)
    cond = where.sql + (f" AND {extra}" if extra else "")
    params: list[Any] = []
    parts: list[str] = []
    with_sql = [
        f"n AS (SELECT greatest(coalesce(max({key}), 0), 1)::float8 AS total FROM {table})",
        "w AS (SELECT to_tsquery('simple', quote_literal(word)) AS q, "
        f"(SELECT count(*) FROM (SELECT 1 FROM {table} x WHERE x.tsv @@ to_tsquery('simple', quote_literal(word)) "
        f"LIMIT {DF_CAP}) c)::float8 AS df FROM unnest(%s::text[]) AS word)",
        "wi AS (SELECT q, ln(1 + (greatest(n.total, w.df) - w.df + 0.5) / (w.df + 0.5)) AS idf FROM w, n)",
    ]
    params.append(words)
    lex_expr = (
        "(SELECT coalesce(sum(wi.idf), 0) FROM wi WHERE i.tsv @@ wi.q) * "
        f"{(_K1 + 1):.3f} / (1 + {_K1} * ({1 - _B} + {_B} * length(i.tsv) / {AVG_WORDS}))"
    )
    if words:
        with_sql.append(
            f"lex AS (SELECT i.{key} AS k FROM {table} i WHERE i.tsv @@ to_tsquery('simple', %s) AND {cond} "
            f"ORDER BY {lex_expr} DESC, i.{key} LIMIT {pool})"
        )
        params.extend([_tsquery(words), *where.params, *extra_params])
        parts.append("SELECT k FROM lex")
    if features.pgvector and table.endswith(".items"):
        cos_expr = "(-(i.pvec <#> %s::real[]::vector))"
    else:
        cos_expr = "(SELECT coalesce(sum(a * b), 0) FROM unnest(i.vec, %s::real[]) AS t(a, b))"
    if mode is not FetchMode.KEYWORD:
        order_by = "i.pvec <#> %s::real[]::vector" if "pvec" in cos_expr else f"{cos_expr} DESC"
        with_sql.append(
            f"vec AS (SELECT i.{key} AS k FROM {table} i WHERE {cond} ORDER BY {order_by}, i.{key} LIMIT {pool})"
        )
        params.extend([*where.params, *extra_params, qvec])
        parts.append("SELECT k FROM vec")
    if not parts:
        return []
    trigram = "word_similarity(%s, i.words)" if features.trigram and words else "0::float8"
    hint_sql, hint_params = "false", []
    if refers_to is not None:
        start, end = hint_window(refers_to)
        hint_sql, hint_params = "(i.observed_at >= %s AND i.observed_at < %s)", [start, end]
    when = (
        "coalesce(i.observed_at, i.stored_at)" if table.endswith(".items") else "coalesce(i.observed_at, i.updated_at)"
    )
    match_sql = "i.tsv @@ to_tsquery('simple', %s)" if words else "false"
    select = (
        f"SELECT i.{key}, {lex_expr if words else '0::float8'}, {match_sql}, {cos_expr}, {trigram}, {when}, "
        f"coalesce(i.confidence, 0.5), {hint_sql} FROM {table} i WHERE i.{key} IN ({' UNION '.join(parts)})"
    )
    sql = "WITH " + ", ".join(with_sql) + " " + select
    select_params: list[Any] = []
    if words:
        select_params.append(_tsquery(words))
    select_params.append(qvec)
    if features.trigram and words:
        select_params.append(" ".join(words))
    select_params.extend(hint_params)
    rows = conn.execute(sql, [*params, *select_params]).fetchall()
    return [
        Signals(
            key=int(r[0]),
            lexical=float(r[1] or 0.0),
            matched=bool(r[2]),
            cosine=float(r[3] or 0.0),
            trigram=float(r[4] or 0.0),
            when_us=int(r[5]),
            confidence=float(r[6]),
            hinted=bool(r[7]),
        )
        for r in rows
    ]
