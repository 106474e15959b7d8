"""The lexical stage: one tokenizer (stems, stop-words), turns indexed with their neighbours, the FTS migration."""

from __future__ import annotations

from pathlib import Path

from _sqlite_files import downgrade_to_v1

from memory_core import Conversation, Document, FetchRequest, MemoryMeta, Namespace, Role, Turn
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.query import FetchMode
from memory_core.retrieval.terms import index_text, query_terms, terms
from memory_core.retrieval.window import window_text

AT = Namespace.agent("ann")


def turn(i: int, text: str, thread: str = "s1", role: Role = Role.USER) -> Conversation:
    meta = MemoryMeta(namespace=AT, thread_id=thread, turns={"first": i, "last": i})
    return Conversation(turns=(Turn(role=role, text=text),), meta=meta)


def keyword(engine: SQLiteEngine, query: str) -> list[str]:
    return [h.id for h in engine.fetch(FetchRequest(query=query, mode=FetchMode.KEYWORD, limit=20)).hits]


def test_terms_stem_drop_stop_words_and_keep_a_possessive_head() -> None:
    assert terms("Caroline's paintings: she painted them, didn't she?") == ["carolin", "paint", "paint"]
    assert terms("I went to the LGBTQ support group in 2023") == ["lgbtq", "support", "group", "2023"]
    assert query_terms("What did Melanie paint? Melanie painted!") == ["melani", "paint"]
    assert index_text("the and of") == ""


def test_window_text_strips_roles_and_puts_the_turn_first() -> None:
    assert window_text("user: Sunsets at the lake", ["assistant: Lovely photos"]) == "sunset lake love photo"


def test_a_turn_matches_on_its_neighbours_words_and_returns_its_own_id(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        ask = turn(0, "What did you do on Friday?")
        answer = turn(1, "I went hiking with my kids!")
        after = turn(2, "That sounds lovely.")
        other = turn(3, "Friday again", thread="s2")
        engine.store_many([ask, answer, after, other])
        hits = keyword(engine, "hiking")
        assert set(hits) == {ask.id, answer.id, after.id}  # the turn and the two whose windows hold it
        assert answer.id in keyword(engine, "friday")  # the previous turn's word
        assert other.id not in keyword(engine, "hiking")  # another thread is not a neighbour
        engine.forget({"ids": [answer.id]})
        assert keyword(engine, "hiking") == []  # forgotten text leaves its neighbours' windows
        assert after.id in keyword(engine, "friday")  # the window closed over the gap


def test_a_turn_stored_accepted_joins_the_window_when_indexed(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        first = turn(0, "We adopted a puppy")
        engine.store(first)
        engine.store_with(turn(1, "Her name is Biscuit"), {"wait": "accepted"})
        engine.drain_pending()
        assert first.id in keyword(engine, "biscuit")  # re-indexed with its new next turn


def test_a_version_1_file_is_indexed_by_terms_and_windows_after_migrating(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteEngine(path) as engine:
        engine.store_many([turn(0, "My sister paints landscapes"), turn(1, "Mostly mountains")])
        engine.store(Document.of("Refunds take five days", MemoryMeta(namespace=AT)))
    downgrade_to_v1(path)
    with SQLiteEngine(path) as engine:
        assert len(keyword(engine, "painting")) == 2  # stemmed, and the next turn holds it in its window
        assert len(keyword(engine, "refund")) == 1
        assert keyword(engine, "the") == []


def test_stemming_is_safe_on_many_threads_at_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from memory_core.retrieval.terms import stem

    words = [f"{w}{i}ings" for i in range(4000) for w in ("paint", "walk", "connect")]
    expected = [f"{w[:-4]}" for w in words]  # "paint7ings" → "paint7" (Porter2 strips "ings")
    stem.cache_clear()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(stem, words))
    assert got == expected
