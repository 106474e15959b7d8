"""The SQLite engine's fast ranking returns exactly what scoring every candidate returns; its FTS5 range reads
give whole-table BM25 values; its per-process index follows other engines' (processes') writes."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memory_core import (
    Document,
    FetchMode,
    FetchRequest,
    ItemKind,
    Learning,
    MemoryMeta,
    MetaFilter,
    Reach,
    TimeHint,
    WriteOptions,
)
from memory_core.engines.sqlite import SQLiteEngine, fts, ranking
from memory_core.engines.sqlite import engine as engine_module
from memory_core.engines.sqlite.index import ItemIndex, item_keys
from memory_core.engines.sqlite.rows import vec_blob, vec_from_blob
from memory_core.engines.sqlite.search import Candidates, order, query_vector, score
from memory_core.engines.sqlite.writes import index_rows, pending_texts
from memory_core.query import Hit
from memory_core.retrieval.terms import query_terms
from memory_core.scoring import embed

NOW_US = 1_760_000_000_000_000
COMMON = ["pct", "ref", "sys", "net"]
"""Words in most rows (not stop-words: those are not indexed at all, ``retrieval.terms``)."""
WORDS = [f"w{i}" for i in range(120)] + ["alpha", "beta", "gamma", "delta"]


def _corpus(n: int, seed: int = 7) -> list[Document | Learning]:
    """``n`` items over ten interleaved agents and one agent written in a block (rows 600..749): common words in
    most rows, the rest Zipf-like."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    start = datetime(2025, 1, 1, tzinfo=UTC)
    out: list[Document | Learning] = []
    for i in range(n):
        words = rng.choices(WORDS, weights, k=rng.randint(2, 9))
        words += [w for w in COMMON if rng.random() < 0.8]
        rng.shuffle(words)
        meta = MemoryMeta(
            namespace="team:t/agent:block" if 600 <= i < 750 else f"team:t/agent:a{i % 10}",
            observed_at=start + timedelta(days=rng.randint(0, 400)) if i % 5 else None,
        )
        text = " ".join(words) + f" n{i}"
        out.append(Learning(text=text, confidence=rng.random(), meta=meta) if i % 7 == 0 else Document.of(text, meta))
    return out


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteEngine]:
    path = tmp_path_factory.mktemp("ranking") / "memory.db"
    with SQLiteEngine(path, synchronous="normal") as e:
        items = _corpus(1500)
        for i in range(0, len(items), 100):
            e.store_many(items[i : i + 100])
        e.forget({"ids": [it.id for it in items[::50]]})
        yield e


def _brute(engine: SQLiteEngine, req: FetchRequest, want: int) -> list[tuple[int, float]]:
    """Score every candidate with every FTS5 match (the plain algorithm), then take the best ``want``."""

    def read(conn: sqlite3.Connection) -> list[tuple[int, float]]:
        keys = item_keys(conn, req.filter, 10**12)
        marks = ", ".join("?" for _ in keys)
        got = {
            int(r[0]): r
            for r in conn.execute(
                "SELECT seq, vec, coalesce(observed_at, stored_at), coalesce(confidence, 0.5), observed_at "
                f"FROM items WHERE seq IN ({marks})",
                [int(k) for k in keys],
            )
        }
        vecs = np.array([vec_from_blob(got[int(k)][1]) for k in keys], dtype=np.float32).reshape(-1, 64)
        when = np.array([got[int(k)][2] for k in keys], dtype=np.int64)
        conf = np.array([got[int(k)][3] for k in keys], dtype=np.float64)
        total = int(conn.execute("SELECT count(*) FROM items WHERE vec IS NOT NULL").fetchone()[0])
        matches = fts.fts_matches(conn, "items_fts", req.query, total, query_terms(req.query))
        if req.mode is FetchMode.VECTOR:
            matches = (keys[:0], np.zeros(0))
        cos = None if req.mode is FetchMode.KEYWORD else (vecs @ query_vector(req.query)).astype(np.float64)
        hit_keys, scores = score(Candidates.build(keys, when, conf, cos, matches), req.mode, NOW_US)
        hinted = None
        if req.refers_to is not None:
            observed = [got[int(k)][4] for k in hit_keys]
            hinted = np.array([at is not None and HINT_START <= at < HINT_END for at in observed], dtype=bool)
        return order(hit_keys, scores, want, hinted)

    return engine._db.run(read)


HINT = TimeHint.model_validate({"from": date(2025, 3, 1), "to": date(2025, 4, 30), "zone": "UTC"})
HINT_START = int(datetime(2025, 3, 1, tzinfo=UTC).timestamp() * 1_000_000)
HINT_END = int(datetime(2025, 5, 1, tzinfo=UTC).timestamp() * 1_000_000)

QUERIES = [
    "alpha beta",  # rare words
    "pct ref sys",  # common words only: every keyword hit is a common-only match
    "w3 pct",  # a frequent word and a common one
    "gamma w110 net",
    "nothing matches zzz",
    "w1 w2 w3 w4 w5 w6 w7 w8",
]
FILTERS = [
    MetaFilter(),
    MetaFilter(reach=Reach.subtree("team:t/agent:a3")),  # one agent: every tenth row
    MetaFilter(reach=Reach.subtree("team:t/agent:block")),  # one agent written at once: BM25 over ranges
    MetaFilter(reach=Reach.subtree(), kinds=[ItemKind.LEARNING]),
    MetaFilter(reach=Reach.subtree(), observed_after=datetime(2025, 6, 1, tzinfo=UTC)),  # through SQL
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("flt", FILTERS, ids=["all", "one-agent", "block", "learnings", "sql-filter"])
def test_every_page_equals_the_full_ranking(
    big: SQLiteEngine, monkeypatch: pytest.MonkeyPatch, query: str, flt: MetaFilter
) -> None:
    monkeypatch.setattr(engine_module, "now_us", lambda: NOW_US)
    for mode in FetchMode.all():
        for limit, hint in ((7, None), (60, None), (25, HINT)):
            req = FetchRequest(query=query, mode=mode, filter=flt, limit=limit, refers_to=hint)
            expected = _brute(big, req, 10**6)
            ranked = [(h.id, h.score) for h in _walk(big, req, pages=4)]
            assert [s for _, s in ranked] == [s for _, s in expected[: len(ranked)]], (mode, limit)
            ids = _ids(big, [k for k, _ in expected[: len(ranked)]])
            assert [i for i, _ in ranked] == ids, (mode, limit)
            if len(ranked) < 4 * limit:
                assert len(ranked) == len(expected)  # the walk ended: every hit was returned


def _walk(engine: SQLiteEngine, req: FetchRequest, pages: int) -> list[Hit]:
    hits: list[Hit] = []
    cursor = None
    for _ in range(pages):
        page = engine.fetch(req.model_copy(update={"cursor": cursor}))
        hits.extend(page.hits)
        cursor = page.next_cursor
        if cursor is None:
            break
    return hits


def _ids(engine: SQLiteEngine, seqs: list[int]) -> list[str]:
    def read(conn: sqlite3.Connection) -> list[str]:
        return [str(conn.execute("SELECT id FROM items WHERE seq = ?", (s,)).fetchone()[0]) for s in seqs]

    return engine._db.run(read)


def test_common_words_are_read_only_for_rows_that_can_reach_the_top(
    big: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    real = fts.matching

    def counting(conn: sqlite3.Connection, table: str, words: list[str], targets: np.ndarray, total: int) -> object:
        sizes.append(len(targets))
        return real(conn, table, words, targets, total)

    monkeypatch.setattr(fts, "matching", counting)
    monkeypatch.setattr(engine_module, "RERANK_POOL", 1)  # the lexical stage alone, asked for `limit` hits
    big.fetch(FetchRequest(query="alpha pct", mode=FetchMode.HYBRID, limit=5))
    assert sizes == []  # rows holding "alpha" or near the query vector fill the top five whatever "pct" says
    big.fetch(FetchRequest(query="alpha pct", mode=FetchMode.HYBRID, limit=50))
    assert len(sizes) == 1 and 0 < sizes[0] < 100  # of ~1,470 candidates, those that could reach the top 50
    sizes.clear()
    big.fetch(FetchRequest(query="pct ref", mode=FetchMode.KEYWORD, limit=5))
    assert sizes and sizes[0] > 1000  # no rare word: every candidate's common-word match is its relevance


def test_bm25_over_ranges_equals_the_whole_table_statement(big: SQLiteEngine) -> None:
    def read(conn: sqlite3.Connection) -> None:
        total = int(conn.execute("SELECT count(*) FROM items WHERE vec IS NOT NULL").fetchone()[0])
        words = fts.classify(conn, "items_fts", ["alpha", "w5", "pct", "gamma"], fts.common_cutoff(total))
        assert words.rare == ["alpha", "w5", "gamma"] and words.common == ["pct"]
        all_keys, all_values = fts.bm25_rows(conn, "items_fts", words, None, total)
        held = item_keys(conn, MetaFilter(), 10**12)
        one_agent = item_keys(conn, MetaFilter(reach=Reach.subtree("team:t/agent:a3")), 10**12)
        for near in (held[(held > 300) & (held < 420)], held[held % 97 == 0], one_agent):
            keys, values = fts.bm25_rows(conn, "items_fts", words, near, total)
            assert len(keys) < len(all_keys) or near is one_agent  # a few short ranges read fewer rows
            assert np.isin(np.intersect1d(near, all_keys), keys).all()
            at_all = np.searchsorted(all_keys, keys)
            assert np.array_equal(all_keys[at_all], keys) and np.array_equal(all_values[at_all], values)

    big._db.run(read)


def test_plan_ranges_splits_where_a_gap_costs_more_than_a_statement() -> None:
    targets = np.array([1, 2, 3, 100, 101, 500], dtype=np.int64)
    between = np.array([0, 0, 96, 0, 398], dtype=np.float64)
    assert fts.plan_ranges(targets, between, 50, 10_000) == [(1, 3), (100, 101), (500, 500)]
    assert fts.plan_ranges(targets, between, 100, 10_000) == [(1, 101), (500, 500)]
    assert fts.plan_ranges(targets, between, 50, 150) is None  # the whole table is cheaper
    single = np.array([9], dtype=np.int64)
    assert fts.plan_ranges(single, np.zeros(0), 10, 1_000) == [(9, 9)]


def test_survivors_are_the_rows_whose_upper_bound_reaches_the_top() -> None:
    rare = np.array([True, False, False, False])
    lex = np.array([2.0, 0, 0, 0])
    cos = np.array([0.9, 0.5, 0.1, 0.05])
    one = np.ones(4)

    def keep(want: int, hinted: np.ndarray | None = None, mode: FetchMode = FetchMode.HYBRID) -> object:
        got = ranking.survivors(*ranking.bounds(rare, lex, cos, one, one, mode, True, hinted), want)
        return None if got is None else got.tolist()

    assert keep(2) == [True, True, False, False]  # a common word cannot lift rows 2 and 3 past row 1
    assert keep(3) is None  # only two sure rows: nothing can be dropped
    hinted = np.array([False, False, False, True])
    assert keep(2, hinted) == [True, True, False, True]  # a hinted match would rank first by group
    assert keep(1, mode=FetchMode.KEYWORD) == [True, False, False, False]  # a common-only match scores ~1e-7
    low, high = np.full(4, 0.85), np.full(4, 0.95)
    wide = ranking.survivors(*ranking.bounds(rare, lex, cos, low, high, FetchMode.VECTOR, False, None), 1)
    assert wide is not None and wide.tolist() == [True, False, False, False]  # 0.9 × 0.85 > 0.5 × 0.95


# the per-process index ------------------------------------------------------------------------------------
def test_a_delete_in_another_engine_drops_exactly_that_row(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as a, SQLiteEngine(tmp_path / "m.db") as b:
        items = [Document.of(f"rocket launch number {i}") for i in range(5)]
        a.store_many(items)
        req = FetchRequest(query="rocket launch", mode=FetchMode.KEYWORD, limit=10)
        assert len(a.fetch(req).hits) == 5  # a's index holds all five
        b.forget({"ids": [items[2].id]})
        assert {h.id for h in a.fetch(req).hits} == {i.id for n, i in enumerate(items) if n != 2}
        a.store(Document.of("rocket launch after the delete"))
        assert len(b.fetch(req).hits) == 5


def test_a_file_replaced_in_place_empties_the_index(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteEngine(tmp_path / "other.db") as other:
        other.store(Document.of("zebra crossing downtown"))
    with SQLiteEngine(path) as engine:
        engine.store(Document.of("giraffe feeding schedule"))
        req = FetchRequest(query="giraffe zebra", mode=FetchMode.VECTOR, limit=10)
        assert [h.text for h in engine.fetch(req).hits] == ["giraffe feeding schedule"]
        source, target = sqlite3.connect(tmp_path / "other.db"), sqlite3.connect(path)
        source.backup(target)  # same seqs, another file instance: every held row is stale
        source.close()
        target.close()
        assert [h.text for h in engine.fetch(req).hits] == ["zebra crossing downtown"]


def test_rows_indexed_above_a_pending_row_are_candidates(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        first, second = Document.of("pending tulip note"), Document.of("indexed tulip note")
        engine.store_many_with([first, second], WriteOptions.accepted())

        def index_second(conn: sqlite3.Connection) -> int:
            (_, _), (seq, text) = pending_texts(conn, 10)
            return index_rows(conn, [(seq, text, vec_blob(embed(text)))])

        assert engine._db.run(index_second, write=True) == 1
        index = ItemIndex()

        def candidates(conn: sqlite3.Connection) -> list[int]:
            index.refresh(conn)  # held rows stop below the pending one
            return [int(k) for k in index.candidates(conn, MetaFilter(), 10**12).keys]

        assert engine._db.run(candidates) == [2]
        engine.drain_pending()
        assert engine._db.run(candidates) == [1, 2]
