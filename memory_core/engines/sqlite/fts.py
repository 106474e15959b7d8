"""FTS5 access for ranking: the query's words, BM25 for the rows near chosen ones, matching for chosen rows.

A query word the table holds in more than ``search.COMMON_SHARE`` of the rows a read ranks (and ``COMMON_MIN``
rows; see ``ranking``) is *common*: it still makes a row a match, but is left out of BM25, where its weight is
near zero anyway; scoring it for most of the table is what would make a read's cost grow with the table. The
others are *rare* and BM25-scored (``classify``; a common word's rows are counted only up to the cutoff).

FTS5's ``bm25()`` takes its statistics (row count, average length, rows per word) from the whole table,
whatever rowid range a statement reads, so BM25 for the rows a read needs can come from statements over rowid
ranges that cover them (``plan_ranges``), with the same values as the whole-table statement. A statement has
a fixed cost (``bm25()`` first counts each word's rows), so neighbouring rows share a range unless the rows
between them cost more, and the whole-table statement is used when it is cheaper: a read over most of the
table makes one statement, a read over one agent's turns a few short ones.

A word is quoted as one FTS5 phrase. An ASCII word is one FTS5 token (``unicode61`` keeps and case-folds ASCII
letters and digits), so the rows its phrase matches are exactly the rows holding it as a term; any other word
is looked up in ``<table>_vocab`` and dropped when FTS5 holds no such term, since the phrase FTS5 makes of it
could then differ from the word.

Items are indexed through their *terms* (``retrieval.terms``: stop-words dropped, Snowball stems), written to
``item_terms`` (``items_fts``'s external content) as a space-joined string, with a conversation turn's
neighbours in its thread (``retrieval.window``): ``add`` indexes a row and re-indexes its indexed neighbours,
whose windows now hold it; ``remove`` drops rows and re-indexes their neighbours without them, so forgotten
text leaves every window. ``item_terms.speaker`` keeps who said a turn (``observed_actor.name``), for the
speaker signal of ranking. Beliefs keep ``beliefs_fts`` over their plain text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np

from memory_core.retrieval.window import window_text

from .search import COMMON_MIN, COMMON_ONLY, COMMON_SHARE, BoolArray, FloatArray, IntArray, members, query_words

__all__ = [
    "BM25_SETUP_SHARE",
    "BM25_STATEMENT_ROWS",
    "MATCH_STATEMENT_ROWS",
    "QueryWords",
    "add",
    "backfill",
    "bm25_rows",
    "classify",
    "common_cutoff",
    "fts_matches",
    "matching",
    "neighbours",
    "plan_ranges",
    "remove",
]

BM25_STATEMENT_ROWS: Final = 100
"""A BM25 statement's fixed cost, in BM25-scored rows, plus ``BM25_SETUP_SHARE`` of the rare words' rows
(measured: ~2 µs a scored row; a statement 0.2 ms at 600 rare-word rows, 0.5 ms at 9k)."""
BM25_SETUP_SHARE: Final = 1 / 60
MATCH_STATEMENT_ROWS: Final = 2_000
"""A matching statement's fixed cost, in seqs spanned (~0.3 ms against ~0.15 µs a doclist entry; a span is an
upper bound on the entries read)."""
_EMPTY: Final = np.zeros(0, dtype=np.int64)


def common_cutoff(total: int) -> float:
    """Rows a word may be held by and still be BM25-scored, for a table of ``total`` rows."""
    return max(COMMON_MIN, COMMON_SHARE * total)


def _ints(csv: str | None) -> IntArray:
    if not csv:
        return _EMPTY
    out: IntArray = np.fromstring(csv, dtype=np.int64, sep=",")
    return out


def _expr(words: list[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


@dataclass(frozen=True)
class QueryWords:
    """The query's words as FTS5 holds them.

    Attributes:
        rare: Words held by at least one row and at most the cutoff, in query order.
        common: Words held by more than the cutoff, in query order.
        rare_rows: Rows holding each rare word, summed (at least the rows holding any).
    """

    rare: list[str]
    common: list[str]
    rare_rows: int

    @property
    def rare_expr(self) -> str:
        """MATCH expression OR-ing the rare words."""
        return _expr(self.rare)

    @property
    def common_expr(self) -> str:
        """MATCH expression OR-ing the common words."""
        return _expr(self.common)


def _doc_count(conn: sqlite3.Connection, table: str, word: str, limit: int) -> int:
    """Rows of ``table`` holding ``word``, counted up to ``limit`` for an ASCII word."""
    if word.isascii():
        return int(
            conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT ?)", (f'"{word}"', limit)
            ).fetchone()[0]
        )
    row = conn.execute(f"SELECT doc FROM {table}_vocab WHERE term = ?", (word,)).fetchone()
    return int(row[0]) if row else 0


def classify(
    conn: sqlite3.Connection,
    table: str,
    words: list[str],
    cutoff: float,
    counts: dict[tuple[str, str, int], int] | None = None,
) -> QueryWords:
    """Split ``words`` into rare and common for FTS5 ``table`` (words it does not hold are dropped).

    Cost: ``min(rows holding the word, cutoff + 1)`` doclist entries a word, none for a word ``counts`` holds.

    Args:
        conn: A connection inside the read's transaction.
        table: The FTS5 table.
        words: The query's words as the table holds them.
        cutoff: Rows a word may be held by and still be rare (``common_cutoff``).
        counts: Document counts already read in this transaction (``ReadMemo.doc_counts``), filled here.
    """
    rare: list[str] = []
    common: list[str] = []
    held = 0
    limit = int(cutoff) + 1
    for word in words:
        if counts is None:
            df = _doc_count(conn, table, word, limit)
        else:
            key = (table, word, limit)
            df = counts.get(key, -1)
            if df < 0:
                df = counts[key] = _doc_count(conn, table, word, limit)
        if df > cutoff:
            common.append(word)
        elif df > 0:
            rare.append(word)
            held += df
    return QueryWords(rare, common, held)


def plan_ranges(
    targets: IntArray, between: FloatArray, statement_cost: float, full_cost: float, per_target: float = 1.0
) -> list[tuple[int, int]] | None:
    """Rowid ranges covering ``targets`` at the least cost, or None when one whole-table statement is cheaper.

    Args:
        targets: Rowids to cover, ascending, at least one.
        between: ``between[i]``: the cost of reading the rows strictly between ``targets[i]`` and
            ``targets[i + 1]`` (length ``len(targets) - 1``).
        statement_cost: The fixed cost of one statement, in the same unit.
        full_cost: The cost of the whole-table statement.
        per_target: The cost of reading one target's own row.

    Returns:
        ``[(first, last), …]`` inclusive, ascending. Two neighbours share a range when the rows between them
        cost no more than a statement; each gap is decided on its own, which is optimal since costs add up.
    """
    split = np.flatnonzero(between > statement_cost)
    starts = np.concatenate([[0], split + 1])
    ends = np.concatenate([split, [len(targets) - 1]])
    cost = statement_cost * len(starts) + float(np.sum(between[between <= statement_cost]))
    cost += per_target * len(targets)
    if cost >= full_cost:
        return None
    return [(int(targets[s]), int(targets[e])) for s, e in zip(starts, ends, strict=True)]


def _floats(csv: str | None) -> FloatArray:
    if not csv:
        return np.zeros(0)
    out: FloatArray = np.fromstring(csv, dtype=np.float64, sep=",")
    return out


def _bm25(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> tuple[IntArray, FloatArray]:
    """Run a ``rowid AS r, -bm25() AS s`` statement; its rows as two arrays, by rowid.

    The rows come back as one text row rather than a tuple each (a read of 10k rows would otherwise allocate
    10k tuples, and drive the garbage collector); a BM25 value so keeps SQLite's 15 significant digits.
    """
    csv = conn.execute(
        f"WITH m AS MATERIALIZED ({sql}) SELECT group_concat(r), group_concat(s) FROM m", params
    ).fetchone()
    keys, values = _ints(csv[0]), _floats(csv[1])
    order_ = np.argsort(keys, kind="stable")
    return keys[order_], values[order_]


def bm25_rows(
    conn: sqlite3.Connection, table: str, words: QueryWords, near: IntArray | None, total: int
) -> tuple[IntArray, FloatArray]:
    """Rows holding a rare word, ascending, with ``-bm25()`` over the rare words.

    Args:
        conn: A connection inside the read's transaction.
        table: The FTS5 table.
        words: ``classify``'s result.
        near: Rowids (ascending) whose rows are needed: the result covers at least those of them holding a
            rare word (and maybe others: a range reads all its rows); None reads every row.
        total: About how many rows ``table`` holds (the share holding a rare word estimates a range's cost).
    """
    if not words.rare:
        return _EMPTY, np.zeros(0)
    sql = f"SELECT rowid AS r, -bm25({table}) AS s FROM {table} WHERE {table} MATCH ?"
    ranges = None
    if near is not None:
        if len(near) == 0:
            return _EMPTY, np.zeros(0)
        density = min(1.0, words.rare_rows / max(total, 1))
        between = ((near[1:] - near[:-1] - 1) * density).astype(np.float64)
        statement = BM25_STATEMENT_ROWS + BM25_SETUP_SHARE * words.rare_rows
        ranges = plan_ranges(near, between, statement, statement + words.rare_rows, density)
    if ranges is None:
        return _bm25(conn, sql, (words.rare_expr,))
    parts = [_bm25(conn, f"{sql} AND rowid >= ? AND rowid <= ?", (words.rare_expr, lo, hi)) for lo, hi in ranges]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def matching(conn: sqlite3.Connection, table: str, words: list[str], targets: IntArray, total: int) -> BoolArray:
    """Which of ``targets`` (ascending rowids) FTS5 matches to any of ``words``; ``total``: about the table's rows."""
    if len(targets) == 0 or not words:
        return np.zeros(len(targets), dtype=bool)
    between = (targets[1:] - targets[:-1] - 1).astype(np.float64)
    ranges = plan_ranges(targets, between, MATCH_STATEMENT_ROWS, MATCH_STATEMENT_ROWS + total)
    sql = f"SELECT group_concat(rowid) FROM {table} WHERE {table} MATCH ?"
    expr = _expr(words)
    if ranges is None:
        found = _ints(conn.execute(sql, (expr,)).fetchone()[0])
    else:
        found = np.concatenate(
            [
                _ints(conn.execute(f"{sql} AND rowid >= ? AND rowid <= ?", (expr, lo, hi)).fetchone()[0])
                for lo, hi in ranges
            ]
        )
    return members(targets, np.unique(found))


def fts_matches(
    conn: sqlite3.Connection,
    table: str,
    query: str,
    total: int,
    words: list[str] | None = None,
    counts: dict[tuple[str, str, int], int] | None = None,
) -> tuple[IntArray, FloatArray]:
    """Every row of FTS5 ``table`` matching a word of ``query``: keys ascending and their relevance.

    ``words`` are the query's words as the table holds them (default ``search.query_words(query)``, plain words,
    as ``beliefs_fts`` holds them; ``items_fts`` holds ``retrieval.terms.query_terms``).

    Relevance is ``-bm25()`` over the rare words, else ``COMMON_ONLY`` for a row held only by common words.
    ``total`` is about how many rows the table holds; ``counts`` are document counts already read for this
    index state (``classify``). Used where the whole table is read (beliefs); items go through ``ranking``,
    which reads only the rows a read needs.
    """
    held = classify(conn, table, query_words(query) if words is None else words, common_cutoff(total), counts)
    keys, values = bm25_rows(conn, table, held, None, total)
    if held.common:
        csv = conn.execute(
            f"SELECT group_concat(rowid) FROM {table} WHERE {table} MATCH ?", (held.common_expr,)
        ).fetchone()[0]
        only = np.setdiff1d(_ints(csv), keys)
        keys = np.concatenate([keys, only])
        values = np.concatenate([values, np.full(len(only), COMMON_ONLY)])
        order_ = np.argsort(keys, kind="stable")
        keys, values = keys[order_], values[order_]
    return keys, values


# indexing items ---------------------------------------------------------------------------------------------
_THREAD_SQL: Final = "SELECT ns, thread_id, turn_first, turn_last, kind FROM items WHERE seq = ?"
_PREV_SQL: Final = (
    "SELECT seq FROM items WHERE thread_id = ? AND turn_last < ? AND ns = ? AND kind = 'conversation' "
    "ORDER BY turn_last DESC, seq DESC LIMIT ?"
)
_NEXT_SQL: Final = (
    "SELECT seq FROM items WHERE thread_id = ? AND turn_last > ? AND ns = ? AND kind = 'conversation' "
    "ORDER BY turn_last, seq LIMIT ?"
)


def neighbours(conn: sqlite3.Connection, seq: int, exclude: Collection[int] = ()) -> list[int]:
    """The previous and the next turn of a conversation turn's thread (none for other items), not in ``exclude``.

    Same namespace and ``thread_id``; the previous ends before the turn starts, the next ends after it ends.
    """
    row = conn.execute(_THREAD_SQL, (seq,)).fetchone()
    if row is None or row[4] != "conversation" or row[1] is None or row[2] is None:
        return []
    ns, thread, first, last = row[0], row[1], int(row[2]), int(row[3])
    out: list[int] = []
    for sql, bound in ((_PREV_SQL, first), (_NEXT_SQL, last)):
        for (other,) in conn.execute(sql, (thread, bound, ns, len(exclude) + 1)):
            if int(other) not in exclude:
                out.append(int(other))
                break
    return out


def _text(conn: sqlite3.Connection, seq: int) -> str:
    row = conn.execute("SELECT text FROM bodies WHERE seq = ?", (seq,)).fetchone()
    return str(row[0]) if row else ""


def _speaker(conn: sqlite3.Connection, seq: int) -> str | None:
    """Who said a conversation turn: its ``observed_actor.name``, if any."""
    row = conn.execute("SELECT item FROM bodies WHERE seq = ?", (seq,)).fetchone()
    if row is None:
        return None
    actor = (json.loads(row[0]).get("meta") or {}).get("observed_actor") or {}
    name = actor.get("name") if isinstance(actor, dict) else None
    return str(name) if name else None


def _insert(conn: sqlite3.Connection, seq: int, exclude: Collection[int] = ()) -> None:
    near = neighbours(conn, seq, exclude)
    text = window_text(_text(conn, seq), [_text(conn, n) for n in near])
    conn.execute("INSERT INTO item_terms (seq, text, speaker) VALUES (?, ?, ?)", (seq, text, _speaker(conn, seq)))
    conn.execute("INSERT INTO items_fts (rowid, text) VALUES (?, ?)", (seq, text))


def _drop(conn: sqlite3.Connection, seq: int) -> bool:
    row = conn.execute("SELECT text FROM item_terms WHERE seq = ?", (seq,)).fetchone()
    if row is None:
        return False
    conn.execute("INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', ?, ?)", (seq, row[0]))
    conn.execute("DELETE FROM item_terms WHERE seq = ?", (seq,))
    return True


def add(conn: sqlite3.Connection, seq: int) -> None:
    """Index item ``seq`` (its row and body written) and re-index its indexed neighbours, whose windows hold it."""
    _insert(conn, seq)
    for other in neighbours(conn, seq):
        if _drop(conn, other):
            _insert(conn, other)


def remove(conn: sqlite3.Connection, seqs: Iterable[int]) -> None:
    """Drop the index rows of ``seqs`` and re-index their indexed neighbours without them.

    Call before the items' rows are deleted (their neighbours are found through them).
    """
    gone = set(seqs)
    near: set[int] = set()
    for seq in gone:
        near.update(neighbours(conn, seq, gone))
        _drop(conn, seq)
    for other in sorted(near - gone):
        if _drop(conn, other):
            _insert(conn, other, gone)


def backfill(conn: sqlite3.Connection) -> None:
    """Index every stored item that is not pending (a schema migration; ``item_terms`` empty)."""
    rows = conn.execute("SELECT seq FROM items WHERE seq NOT IN (SELECT seq FROM pending) ORDER BY seq").fetchall()
    for (seq,) in rows:
        _insert(conn, int(seq))
