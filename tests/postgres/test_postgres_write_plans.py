"""A store's statements keep bounded plans as the store grows in one session (the window trigger's update).

A session that wrote while ``items`` was small must not keep a plan that reads every stored turn on each later
write: PL/pgSQL's cached generic plan of ``rewindow`` once did (``schema._v4``). The plans are read with
``auto_explain`` (its nested statements, sent to the client as notices) on the pool's only connection: the
number of rows each plan node produced, not wall time, is checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from memory_core import Namespace, WriteOptions
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.postgres.schema import SCHEMA
from memory_core.items import Conversation, Role, Turn
from memory_core.lifecycle.agent import turn_item
from memory_core.retrieval.embedder import HashEmbedder

pytestmark = pytest.mark.postgres

FILL = 1_500
"""Turns stored after the session's plans are warm: far more rows than any bounded plan node produces."""
BOUND = 50
"""Most rows a node of a one-turn store's plans may produce (a few neighbours and index pages' worth)."""


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    with PostgresEngine(f"{pg_url}?pool_min_size=1&pool_max_size=1", embedder=HashEmbedder()) as opened:
        yield opened


def _turn(thread: str, i: int) -> Conversation:
    return turn_item(Namespace.agent("a"), "a", thread, i, Turn(role=Role.USER, text=f"turn {i} about kayaks"))


def _plans(engine: PostgresEngine, item: Conversation) -> list[str]:
    """The plans (with actual row counts) of every statement, nested ones included, that storing ``item`` runs."""
    notices: list[str] = []
    run = engine._driver.run

    def explained(fn: Any, **kw: Any) -> Any:
        def spy(conn: psycopg.Connection[Any]) -> Any:
            try:
                conn.execute("LOAD 'auto_explain'")
            except psycopg.Error as exc:
                pytest.skip(f"auto_explain cannot be loaded here: {exc}")
            for setting in ("log_min_duration = 0", "log_analyze = on", "log_nested_statements = on"):
                conn.execute(f"SET LOCAL auto_explain.{setting}")
            conn.execute("SET LOCAL client_min_messages = log")
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            return fn(conn)

        return run(spy, **kw)

    engine._driver.run = explained  # type: ignore[method-assign]
    try:
        engine.store_with(item, WriteOptions.accepted())
    finally:
        engine._driver.run = run  # type: ignore[method-assign]
    return notices


def _window_of(engine: PostgresEngine, turn: int) -> str:
    sql = f"SELECT wterms FROM {SCHEMA}.items WHERE thread_id = 'warm' AND turn_first = %s"
    return str(engine._driver.run(lambda c: c.execute(sql, (turn,)).fetchone()[0], read=True))


def _most_rows(plan: str) -> int:
    """The most rows any node of ``plan`` (``auto_explain``'s text with ``log_analyze``) produced in a loop."""
    return max(int(n) for n in re.findall(r"actual time=[\d.]+\.\.[\d.]+ rows=(\d+)", plan))


def test_the_window_update_stays_bounded_after_the_store_grows_in_one_session(engine: PostgresEngine) -> None:
    for i in range(8):  # more than five calls: PL/pgSQL may now cache a generic plan, made while items is small
        engine.store_with(_turn("warm", i), WriteOptions.accepted())
    batch = [_turn("fill", i) for i in range(FILL)]
    for start in range(0, FILL, 100):
        engine.store_many(batch[start : start + 100])
    assert (
        engine._driver.run(lambda c: c.execute(f"SELECT count(*) FROM {SCHEMA}.items").fetchone()[0], read=True)
        == FILL + 8
    )
    before = _window_of(engine, 7)
    plans = _plans(engine, _turn("warm", 8))  # the turn after the warm thread's last: its neighbour is rewindowed
    windows = [p for p in plans if "SET wterms" in p]
    assert windows, plans  # the trigger's update ran and its plan was seen
    for plan in plans:  # the store's statement, the trigger's and the update: none reads the store's size
        assert _most_rows(plan) <= BOUND, plan
    assert _window_of(engine, 7) != before  # and it rewrote the neighbour's window
