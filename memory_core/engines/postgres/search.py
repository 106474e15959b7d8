"""Candidates and their signals from PostgreSQL, in one statement per ranked read (``fusion`` scores them).

The query's words are the table's: for items the project's terms (``retrieval.terms.query_terms``: stemmed,
stop-words dropped), matched against the windowed ``tsv`` (``schema`` v2); for beliefs the reference words.
Their document frequencies come from ``Frequencies``, a per-process cache refreshed every ``DF_TTL_S``: the
words it lacks are counted on the ``tsv`` GIN index (capped at ``DF_CAP`` rows per word) in the statement that
also reads the tables' row counts, one statement for the items and the beliefs of a fetch (``read``; with
``read_with``, other parts of a read's first statement ride along: ``Extra``). Then one ``WITH`` statement:

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
4. ``den`` (hybrid): the rows the pooled vector nominated (``pooled.PooledCache.nearest``, in the host) that
   the filter admits, so the caller learns which passed, with their signals;
5. for the union, what ``fusion.Signals`` needs: the query words each row holds (its lexemes intersected with
   the query's), its length, its embedding, ``pg_trgm``'s ``word_similarity`` when installed, its time,
   confidence and hint flag.

``statement`` builds it (a ``Candidates``: SQL, parameters and what turns its rows into signals), so a caller
can send it with another (``driver.pipelined``); ``candidates`` runs it alone. The lexical score (Okapi BM25,
``bm25``) and the cosine are computed here in Python over the candidates only. Every part filters by the
request's reach and filter in SQL (``filters.compile_filter``).
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

__all__ = [
    "AVG_WORDS",
    "DF_CAP",
    "DF_TTL_S",
    "Candidates",
    "Extra",
    "Features",
    "Frequencies",
    "bm25",
    "candidates",
    "pool_size",
    "statement",
]

DF_CAP: Final = 5_000
"""Most rows counted for one query word's document frequency; a word held by more is common (``COMMON_SHARE``
of a large table), its IDF near 0 anyway."""
AVG_WORDS: Final = 30.0
"""Typical words of an item, for BM25's length normalisation (a LoCoMo turn holds ~10-60)."""
DF_TTL_S: Final = 300.0
"""Seconds a cached document frequency is used before it is counted again (frequencies drift slowly)."""
DF_GROWTH: Final = 1.1
"""A cached count is recounted once the table holds this many times the rows it held when counted."""
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


@dataclass(frozen=True)
class Extra:
    """More columns for the statement that opens a ranked read (``Frequencies.read_with``), from a ``FROM`` item.

    The source is a sub-select returning exactly one row (aggregates without ``GROUP BY``), so joining it keeps
    the statement's one row.

    Attributes:
        columns: Select-list text naming the source's columns (``alias.*``).
        source: The ``FROM`` item, aliased.
        params: The source's parameters, in order.
        width: How many columns ``columns`` names.
    """

    columns: str
    source: str
    params: list[Any]
    width: int


class Frequencies:
    """A per-process cache of document frequencies per table, thread-safe.

    A word's count is reused while it is younger than ``DF_TTL_S`` and the table has grown by less than
    ``DF_GROWTH`` since it was counted (a store filling up, as a replay does, recounts as it grows). The row
    count (the newest key) is read on every call: one index lookup.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._df: dict[tuple[str, str], tuple[float, float, float]] = {}
        self._totals: dict[str, float] = {}

    def get(self, conn: Any, table: str, key: str, words: Sequence[str]) -> tuple[dict[str, float], float]:
        """``(df per word, rows in the table)`` (``read``, for one table)."""
        return self.read(conn, [(table, key, words)])[0]

    def read(self, conn: Any, wants: Sequence[tuple[str, str, Sequence[str]]]) -> list[tuple[dict[str, float], float]]:
        """Per ``(table, key column, words)``: ``(df per word, rows in the table)``, in one statement for all.

        The statement reads each table's row count (its newest key: one index lookup) and counts the words the
        cache lacks, or holds older than ``DF_TTL_S``, or counted before the table grew past ``DF_GROWTH`` times
        the rows this process last saw in it.
        """
        return self.read_with(conn, wants)[0]

    def read_with(
        self, conn: Any, wants: Sequence[tuple[str, str, Sequence[str]]], more: Sequence[Extra] = ()
    ) -> tuple[list[tuple[dict[str, float], float]], list[list[Any]]]:
        """``read``, with ``more``'s columns in the same statement (the pooled vectors' refresh, the scopes).

        Returns:
            ``read``'s answer and, per ``Extra``, its column values.
        """
        now = time.monotonic()
        parts: list[str] = []
        params: list[Any] = []
        known: list[dict[str, float]] = []
        missing: list[list[str]] = []
        with self._lock:
            for table, _key, words in wants:
                seen = self._totals.get(table, 0.0)
                held: dict[str, float] = {}
                for w in words:
                    v = self._df.get((table, w))
                    if v is not None and now - v[2] < DF_TTL_S and seen <= v[1] * DF_GROWTH:
                        held[w] = v[0]
                known.append(held)
                missing.append([w for w in dict.fromkeys(words) if w not in held])
        for (table, key, _), lacking in zip(wants, missing, strict=True):
            parts.append(f"(SELECT greatest(coalesce(max({key}), 0), 1)::float8 FROM {table})")
            if lacking:
                parts.append(
                    f"ARRAY(SELECT (SELECT count(*) FROM (SELECT 1 FROM {table} x WHERE x.tsv @@ "
                    f"to_tsquery('simple', quote_literal(word)) LIMIT {DF_CAP}) c)::float8 "
                    "FROM unnest(%s::text[]) WITH ORDINALITY AS u(word, o) ORDER BY o)"
                )
                params.append(lacking)
        parts.extend(extra.columns for extra in more)
        source = (" FROM " + ", ".join(extra.source for extra in more)) if more else ""
        params.extend(p for extra in more for p in extra.params)
        row = conn.execute("SELECT " + ", ".join(parts) + source, params).fetchone()
        values = list(row) if row else []
        width = sum(extra.width for extra in more)
        tails: list[list[Any]] = []
        at_extra = len(values) - width
        for extra in more:
            tails.append(values[at_extra : at_extra + extra.width])
            at_extra += extra.width
        values = values[: len(values) - width]
        out: list[tuple[dict[str, float], float]] = []
        at = 0
        with self._lock:
            if len(self._df) > _DF_ENTRIES:
                self._df.clear()
            for (table, _, _), held, lacking in zip(wants, known, missing, strict=True):
                total = float(values[at]) if at < len(values) else 1.0
                at += 1
                self._totals[table] = total
                if lacking:
                    counts = values[at] or []
                    at += 1
                    for word, df in zip(lacking, counts, strict=True):
                        self._df[(table, word)] = (float(df), total, now)
                        held[word] = float(df)
                out.append((held, total))
        return out, tails


def pool_size(want: int) -> int:
    """Candidates each source contributes for a page of ``want`` hits (the fusion re-orders them)."""
    return max(50, 3 * want)


def _idf(df: float, total: float) -> float:
    n = min(df, total)
    return math.log(1 + (total - n + 0.5) / (n + 0.5))


def bm25(held: dict[str, int], df: dict[str, float], total: float, length: int) -> float:
    """Okapi BM25 of a row for the query words it holds (pure; Robertson & Zaragoza 2009, eq. 3.6).

    Args:
        held: The query words the row holds, with how often (term frequency).
        df: Each query word's document frequency.
        total: Rows in the table.
        length: The row's words.
    """
    norm = _K1 * (1 - _B + _B * length / AVG_WORDS)
    return sum(_idf(df.get(w, 0.0), total) * tf * (_K1 + 1) / (tf + norm) for w, tf in held.items())


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


@dataclass(frozen=True)
class Candidates:
    """One ranked read's candidate statement, and what turns its rows into ``Signals`` (``signals``).

    Attributes:
        sql: The statement: per candidate the eight signal columns, then the caller's ``columns``.
        params: Its parameters.
        df: The query words' document frequencies.
        total: Rows in the table.
        qvec: The query's reference vector.
    """

    sql: str
    params: list[Any]
    df: dict[str, float]
    total: float
    qvec: np.ndarray[Any, Any]

    def signals(self, rows: Sequence[Sequence[Any]]) -> list[Signals]:
        """The candidates' signals from the statement's rows (pure)."""
        return _signals(rows, self.df, self.total, self.qvec)


def candidates(conn: Any, **kw: Any) -> list[Signals]:
    """Run ``statement`` (same arguments) and return the candidates' signals: one statement."""
    plan = statement(conn, **kw)
    return [] if plan is None else plan.signals(conn.execute(plan.sql, plan.params).fetchall())


def statement(
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
    terms: Sequence[str] | None = None,
    stats: tuple[dict[str, float], float] | None = None,
    nominated: Sequence[int] = (),
    columns: str = "",
) -> Candidates | None:
    """The statement of one ranked read's candidates (see the module docstring); None when it has none.

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
        terms: The query's words as the table's ``tsv`` holds them (items: ``retrieval.terms.query_terms``,
            stemmed, matched against the windowed ``wterms``); None: ``query_words`` (beliefs' plain words).
        stats: ``Frequencies.read``'s answer for this table and these words, when the caller read it already
            (one statement for the items and the beliefs of a fetch); None: read here.
        nominated: Keys the pooled vector nominated (``pooled.PooledCache.nearest``): those the filter admits
            join the candidates (``den``), so the caller learns which passed and their signals.
        columns: More select-list text over alias ``i`` (no parameters), after the signal columns.
    """
    plain = query_words(query)
    words = plain if terms is None else list(terms)
    length_of = "i.words" if terms is None else "i.wterms"
    qvec = np.asarray(embed(query), dtype=np.float64)
    pool = pool_size(want)
    cond = where.sql + (f" AND {extra}" if extra else "")
    cond_params = [*where.params, *extra_params]
    if stats is not None:
        df, total = stats
    else:
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
    if nominated:
        ctes.append(f"den AS (SELECT i.{key} AS k FROM {table} i WHERE i.{key} = ANY(%s::bigint[]) AND {cond})")
        params.extend([list(nominated), *cond_params])
        parts.append("SELECT k FROM den")
    if not parts:
        return None
    trigram = "word_similarity(%s, i.words)" if features.trigram and plain else "0::float8"
    hint_sql, hint_params = "false", []
    if refers_to is not None:
        start, end = hint_window(refers_to)
        hint_sql, hint_params = "(i.observed_at >= %s AND i.observed_at < %s)", [start, end]
    when = "i.stored_at" if table.endswith(".items") else "i.updated_at"
    select = (
        f"SELECT i.{key}, ARRAY(SELECT u.lexeme || ' ' || coalesce(array_length(u.positions, 1), 1) "
        "FROM unnest(i.tsv) AS u WHERE u.lexeme = ANY(%s::text[])), "
        f"coalesce(array_length(string_to_array({length_of}, ' '), 1), 0), i.vec, {trigram}, "
        f"coalesce(i.observed_at, {when}), coalesce(i.confidence, 0.5), {hint_sql}{', ' + columns if columns else ''} "
        f"FROM {table} i WHERE i.{key} IN ({' UNION '.join(parts)})"
    )
    select_params: list[Any] = [words]
    if features.trigram and plain:
        select_params.append(" ".join(plain))
    select_params.extend(hint_params)
    return Candidates("WITH " + ", ".join(ctes) + " " + select, [*params, *select_params], df, total, qvec)


def _signals(
    rows: Sequence[Sequence[Any]], df: dict[str, float], total: float, qvec: np.ndarray[Any, Any]
) -> list[Signals]:
    if not rows:
        return []
    vecs = np.asarray([r[3] for r in rows], dtype=np.float64)
    cosines = vecs @ qvec if len(qvec) == vecs.shape[1] else np.zeros(len(rows))
    out: list[Signals] = []
    for r, cosine in zip(rows, cosines, strict=True):
        held = {w: int(tf) for w, _, tf in (pair.rpartition(" ") for pair in (r[1] or []))}
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
