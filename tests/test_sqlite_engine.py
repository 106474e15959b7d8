"""SQLite engine storage and ranking behaviour beyond the conformance suite."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from memory_core import (
    Conversation,
    Document,
    EngineError,
    EraseRequest,
    FetchMode,
    FetchRequest,
    InvalidRequest,
    Learning,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    Reach,
    Role,
    TimeHint,
    Turn,
    WriteOptions,
    scoring,
)
from memory_core.engines import open_engine
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite import search as search_module
from memory_core.retrieval.terms import term_set


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "memory.db") as e:
        yield e


def doc(text: str, **meta: object) -> Document:
    return Document.of(text, MemoryMeta(**meta))


CORPUS = [
    "Refunds take five business days to reach the card.",
    "The cafeteria serves lunch from noon until two.",
    "Priya prefers tea over coffee in the morning.",
    "Deploys run every Tuesday after the standup.",
    "Refund requests need an order number.",
    "zzz qqq",
    "The refund window is thirty days.",
    "Kubernetes pods restart when the liveness probe fails.",
]


def test_open_engine_selects_sqlite_by_url(tmp_path: Path) -> None:
    with open_engine(f"sqlite:///{tmp_path}/a/b/memory.db") as e:
        assert isinstance(e, SQLiteEngine)
        assert e.descriptor().id == "sqlite"
        assert (tmp_path / "a" / "b" / "memory.db").exists()


@pytest.mark.parametrize(
    "query", ["refund", "refunds card", "lunch noon", "tea coffee morning", "probe", "nothing here"]
)
def test_hit_sets_agree_with_the_reference_engine(engine: SQLiteEngine, query: str) -> None:
    """Vector hits are the reference's; a keyword match also counts a word's other forms (``refund`` finds
    ``Refunds``: the engine matches stems, ``retrieval.terms``), so keyword and hybrid hits hold the reference's
    and exactly the texts sharing a stem with the query."""
    reference = ReferenceEngine()
    for text in CORPUS:
        engine.store(doc(text))
        reference.store(doc(text))
    stems = term_set(query)
    sharing = {doc(t).id for t in CORPUS if term_set(t) & stems}
    for mode in FetchMode.all():
        ours = {h.id for h in engine.fetch(FetchRequest(query=query, mode=mode, limit=100)).hits}
        theirs = {h.id for h in reference.fetch(FetchRequest(query=query, mode=mode, limit=100)).hits}
        if mode is FetchMode.VECTOR:
            assert ours == theirs
        else:
            assert ours >= theirs and sharing <= ours, mode
            if mode is FetchMode.KEYWORD:
                assert ours == sharing


def test_accepted_store_lists_at_once_and_ranks_from_the_next_read(engine: SQLiteEngine) -> None:
    item = doc("the quarterly report is due on friday")
    receipt = engine.store_with(item, WriteOptions.accepted())
    assert receipt.id == item.id and not receipt.replayed
    assert engine.stats()["pending"] == 1
    assert [h.id for h in engine.list().items] == [item.id]
    hits = engine.fetch(FetchRequest(query="quarterly report", mode=FetchMode.KEYWORD)).hits
    assert [h.id for h in hits] == [item.id]
    assert engine.stats()["pending"] == 0


def test_a_visible_store_indexes_itself_and_the_pending_queue(engine: SQLiteEngine) -> None:
    engine.store_many_with([doc(f"pending note {i}") for i in range(3)], WriteOptions.accepted())
    engine.store(doc("visible note"))
    assert engine.stats()["pending"] == 0


def test_item_vectors_are_stored_once_not_recomputed_per_read(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.store_many([doc(text) for text in CORPUS])
    calls: list[str] = []
    real = scoring.embed

    def counting(text: str) -> list[float]:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(search_module, "embed", counting)
    search_module.query_vector.cache_clear()
    for _ in range(3):
        engine.fetch(FetchRequest(query="refund window", mode=FetchMode.HYBRID, limit=3))
    assert calls == ["refund window"]  # no item's vector; the query's once per process (``query_vector``)
    search_module.query_vector.cache_clear()


def test_store_many_is_one_transaction(engine: SQLiteEngine) -> None:
    items = [doc(f"batch item {i}") for i in range(3)]
    conn = sqlite3.connect(engine.path)
    fail = "BEGIN SELECT RAISE(ABORT, 'boom'); END"
    conn.execute(f"CREATE TRIGGER boom BEFORE INSERT ON items WHEN NEW.id = '{items[2].id}' {fail}")
    conn.commit()
    with pytest.raises(EngineError):
        engine.store_many(items)
    assert engine.list().items == ()
    conn.execute("DROP TRIGGER boom")
    conn.commit()
    conn.close()
    receipts = engine.store_many([items[0], items[1], items[0]])
    assert [r.replayed for r in receipts] == [False, False, True]


def test_restamping_observed_at_is_a_replay(engine: SQLiteEngine) -> None:
    first = doc("same text", observed_at=datetime(2024, 1, 1, tzinfo=UTC))
    again = doc("same text", observed_at=datetime(2024, 2, 1, tzinfo=UTC))
    assert not engine.store(first).replayed
    assert engine.store(again).replayed
    assert engine.export(ListRequest()).items[0].item == first


def test_list_cursor_is_stable_under_concurrent_writes(engine: SQLiteEngine) -> None:
    first = [doc(f"first {i}") for i in range(4)]
    engine.store_many(first)
    page = engine.list(ListRequest(limit=2))
    later = [doc(f"later {i}") for i in range(3)]
    engine.store_many(later)
    engine.forget({"ids": [first[0].id]})
    seen = [h.id for h in page.items]
    cursor = page.next_cursor
    while cursor is not None:
        page = engine.list(ListRequest(limit=2, cursor=cursor))
        seen.extend(h.id for h in page.items)
        cursor = page.next_cursor
    assert seen == [i.id for i in first + later]


def test_fetch_pages_a_ranking_frozen_at_the_first_page(engine: SQLiteEngine) -> None:
    engine.store_many([doc(f"alpha note {i}") for i in range(4)])
    req = FetchRequest(query="alpha", mode=FetchMode.KEYWORD, limit=2)
    page = engine.fetch(req)
    engine.store(doc("alpha alpha alpha newest"))
    rest = engine.fetch(req.model_copy(update={"cursor": page.next_cursor}))
    ids = [h.id for h in page.hits + rest.hits]
    assert len(ids) == len(set(ids)) == 4 and rest.next_cursor is None


@pytest.mark.parametrize("cursor", ["bogus", "l123", "fe30"])
def test_an_unknown_cursor_is_invalid(engine: SQLiteEngine, cursor: str) -> None:
    with pytest.raises(InvalidRequest, match="cursor"):
        engine.fetch(FetchRequest(query="x", cursor=cursor))
    with pytest.raises(InvalidRequest, match="cursor"):
        engine.list(ListRequest(cursor=cursor))


def _forged(tag: str, body: str) -> str:
    return tag + base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("tag", "body"),
    [
        ("f", '{"o":0,"s":1000000000000000000000000000000}'),  # past SQLite's 64-bit INTEGER
        ("f", '{"o":-5,"s":10}'),
        ("f", '{"o":true,"s":10}'),
        ("f", '{"o":0,"s":9223372036854775808}'),  # 2**63
        ("l", '{"a":1000000000000000000000000000000}'),
        ("l", '{"a":-1}'),
        ("l", '{"a":true}'),
        ("l", '{"a":1.5}'),
        ("l", "[" * 100_000 + "]" * 100_000),
    ],
)
def test_a_tampered_cursor_is_invalid_and_loses_nothing(engine: SQLiteEngine, tag: str, body: str) -> None:
    kept = [doc(f"alpha kept {i}") for i in range(3)]
    engine.store_many(kept)
    with pytest.raises(InvalidRequest) as caught:
        if tag == "f":
            engine.fetch(FetchRequest(query="alpha", cursor=_forged(tag, body)))
        else:
            engine.list(ListRequest(cursor=_forged(tag, body)))
    assert caught.value.field == "cursor"
    assert [h.id for h in engine.list(ListRequest()).items] == [i.id for i in kept]
    assert len(engine.fetch(FetchRequest(query="alpha")).hits) == 3


def test_cursor_values_up_to_sqlites_largest_integer_are_read(engine: SQLiteEngine) -> None:
    engine.store_many([doc(f"alpha kept {i}") for i in range(3)])
    top = 2**63 - 1
    assert engine.list(ListRequest(cursor=_forged("l", f'{{"a":{top}}}'))).items == ()
    assert engine.fetch(FetchRequest(query="alpha", cursor=_forged("f", f'{{"o":{top},"s":{top}}}'))).hits == ()
    assert len(engine.fetch(FetchRequest(query="alpha", cursor=_forged("f", f'{{"o":0,"s":{top}}}'))).hits) == 3


def test_confidence_and_recency_order_equally_relevant_items(engine: SQLiteEngine) -> None:
    now = datetime.now(UTC)
    low = Learning(text="standup moved to ten", confidence=0.3, meta=MemoryMeta(workspace="a"))
    high = Learning(text="standup moved to ten", confidence=0.9, meta=MemoryMeta(workspace="b"))
    engine.store_many([low, high])
    assert [h.id for h in engine.fetch(FetchRequest(query="standup")).hits] == [high.id, low.id]
    old = doc("office closes early", observed_at=now - timedelta(days=400), workspace="a")
    new = doc("office closes early", observed_at=now - timedelta(days=1), workspace="b")
    engine.store_many([old, new])
    assert [h.id for h in engine.fetch(FetchRequest(query="office closes")).hits] == [new.id, old.id]


def test_refers_to_moves_hinted_days_first(engine: SQLiteEngine) -> None:
    on_day = doc("we talked about the budget", observed_at=datetime(2023, 5, 7, 23, 30, tzinfo=UTC))
    better = doc("budget budget budget review", observed_at=datetime(2023, 6, 1, tzinfo=UTC))
    undated = doc("the budget was discussed at length")
    engine.store_many([on_day, better, undated])
    plain = [h.id for h in engine.fetch(FetchRequest(query="budget", mode=FetchMode.KEYWORD)).hits]
    assert plain[0] == better.id
    hint = TimeHint.model_validate({"from": date(2023, 5, 8), "to": date(2023, 5, 8), "zone": "Europe/Berlin"})
    hinted = [h.id for h in engine.fetch(FetchRequest(query="budget", mode=FetchMode.KEYWORD, refers_to=hint)).hits]
    assert hinted == [on_day.id] + [i for i in plain if i != on_day.id]


def test_erased_items_stored_again_are_new(engine: SQLiteEngine) -> None:
    item = doc("to be erased", namespace="agent:x")
    engine.store(item)
    report = engine.erase(EraseRequest(reach=Reach.subtree("agent:x")))
    assert report.erased_scopes == 1 and report.receipts == ("agent:x#document",)
    assert not engine.store(item).replayed


def test_conversation_text_and_tool_calls_round_trip_through_export(engine: SQLiteEngine) -> None:
    item = Conversation(
        turns=(Turn(role=Role.USER, text="hi", at=datetime(2024, 1, 1, 12, 0, 0, 250000, tzinfo=UTC)),),
        meta=MemoryMeta(thread_id="t", namespace="agent:a"),
    )
    engine.store(item)
    exported = engine.export(ListRequest()).items[0]
    assert exported.item == item and exported.id == item.fingerprint()
    assert engine.store(exported.item).replayed


def test_two_engines_on_one_file_see_each_others_writes(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as a, SQLiteEngine(tmp_path / "m.db") as b:
        a.store(doc("written by a about rockets"))
        assert [h.text for h in b.fetch(FetchRequest(query="rockets")).hits] == ["written by a about rockets"]
        b.forget({"filter": MetaFilter(reach=Reach.subtree())})
        assert a.fetch(FetchRequest(query="rockets")).hits == ()


def test_a_read_never_waits_for_another_writer_to_index_accepted_rows(tmp_path: Path) -> None:
    """A live-turn fetch folds pending rows in only when the write lock is free; it never waits for it."""
    import sqlite3

    from memory_core import Document, FetchRequest, MemoryMeta, WriteOptions
    from memory_core.engines.sqlite import SQLiteEngine

    path = tmp_path / "m.db"
    engine = SQLiteEngine(path)
    engine.store(Document.of("indexed walrus note", MemoryMeta(workspace="w")))
    engine.store_with(Document.of("pending walrus note", MemoryMeta(workspace="w")), WriteOptions.accepted())
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's long build holds the write lock
    try:
        held = engine.fetch(FetchRequest(query="walrus", limit=10))
        assert [h.text for h in held.hits] == ["indexed walrus note"]
        assert engine.stats()["pending"] == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
    freed = engine.fetch(FetchRequest(query="walrus", limit=10))
    assert sorted(h.text for h in freed.hits) == ["indexed walrus note", "pending walrus note"]
    assert engine.stats()["pending"] == 0
    engine.close()


def test_a_build_indexes_what_live_turns_stored_accepted(tmp_path: Path) -> None:
    from memory_core import Document, MemoryMeta, Reach, WriteOptions
    from memory_core.engines.sqlite import SQLiteEngine

    engine = SQLiteEngine(tmp_path / "m.db")
    engine.store_with(Document.of("a turn stored accepted", MemoryMeta(namespace="agent:a")), WriteOptions.accepted())
    assert engine.stats()["pending"] == 1
    engine.consolidate({"reach": Reach.exact("agent:a").to_dict()})
    assert engine.stats()["pending"] == 0
    engine.close()


def test_every_read_of_one_pack_sees_a_reply_post_turn_just_stored_accepted(tmp_path: Path) -> None:
    """The pack's sections read on several threads; only the thread that folded the pending rows in used to see
    the reply, so "This agent's history" missed it in about half the packs (newcomer run)."""
    from memory_core.lifecycle.agent import AgentMemory
    from memory_core.lifecycle.layout import MemoryLayout

    missed = 0
    for n in range(20):
        with SQLiteEngine(tmp_path / f"pack{n}.db") as engine:
            memory = AgentMemory(engine, MemoryLayout(), "bob")
            memory.post_turn({"thread_id": "t1", "turn_index": 0, "assistant_text": "Zebras sleep standing up."})
            pack = memory.recall("zebras")
            history = [s for s in pack.sections if s.heading == "This agent's history"]
            missed += not (history and any("Zebras" in h.text for h in history[0].hits))
    assert missed == 0
