"""Listings paged from the wire (cost follows ``limit``), and scopes' write and build times as the server says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from memory_core import Learning, MemoryMeta
from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.cortexdb import binding
from memory_core.engines.cortexdb.double import CortexDouble, DoubleServer, direct_double, double_engine, hosted_double
from memory_core.explore import ExploreRequest, Facet
from memory_core.items import Conversation, Role, Turn
from memory_core.meta import MetaFilter
from memory_core.namespace import ROOT, Namespace, Reach
from memory_core.query import ListRequest

STORED = 300


def _listings(double: CortexDouble) -> list[int]:
    """The ``limit`` of every listing request seen (copies counted, as the wire counts them)."""
    route = "memory/events" if double.hosted else "v1/events"
    return [int(s.param("limit") or 0) for s in double.requests("GET", route)]


@pytest.fixture(scope="module")
def filled() -> CortexDouble:
    double = direct_double()
    with double_engine(double) as engine:
        for start in range(0, STORED, 100):  # a batch holds at most 100 items
            engine.store_many([Learning(text=f"fact number {i}") for i in range(start, start + 100)])
    return double


def test_a_small_page_reads_one_small_listing_however_much_is_stored(filled: CortexDouble) -> None:
    with double_engine(filled) as engine:
        before = len(_listings(filled))
        page = engine.list(ListRequest(limit=5))
        asked = _listings(filled)[before:]
        assert len(page.items) == 5 and page.next_cursor is not None
        assert len(asked) == 1 and sum(asked) <= 4 * (5 + 1)  # 600 copies stored; 24 asked for
        before = len(_listings(filled))
        engine.export(ListRequest(limit=5))  # export still reads everything (its baseline, same run)
        assert sum(_listings(filled)[before:]) >= 2 * STORED


def test_paging_through_everything_yields_each_item_once(filled: CortexDouble) -> None:
    with double_engine(filled) as engine:
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            before = len(_listings(filled))
            page = engine.list(ListRequest(limit=7, cursor=cursor))
            assert len(_listings(filled)) - before <= 2  # each page: about one listing request
            seen.extend(hit.id for hit in page.items)
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert len(seen) == STORED and len(set(seen)) == STORED
        assert pages == -(-STORED // 7)


def test_explore_reads_only_what_its_scan_limit_covers(filled: CortexDouble) -> None:
    with double_engine(filled) as engine:
        before = len(_listings(filled))
        page = engine.explore(ExploreRequest(facet=Facet.KIND, scan_limit=10))
        assert page.truncated and page.total <= 10
        asked = _listings(filled)[before:]
        assert len(asked) == 1 and sum(asked) <= 4 * (10 + 1 + 1)  # 11 items asked for, not 600 copies


@pytest.mark.parametrize("wire", ["direct", "hosted"])
def test_conversations_page_whole_across_scopes_and_writes_between_pages_lose_nothing(wire: str) -> None:
    double = direct_double() if wire == "direct" else hosted_double()
    chats = [
        Conversation(
            turns=tuple(
                Turn(role=Role.USER if t % 2 == 0 else Role.ASSISTANT, text=f"chat {c} turn {t}") for t in range(3)
            ),
            meta=MemoryMeta().at("agent:a" if c % 2 else "agent:b"),
        )
        for c in range(6)
    ]
    facts = [Learning(text=f"note {i}", meta=MemoryMeta().at("agent:a")) for i in range(5)]
    with double_engine(double) as engine:
        engine.store_many([*chats, *facts])
        first = engine.list(ListRequest(limit=3))
        engine.store(Learning(text="written between two pages", meta=MemoryMeta().at("agent:a")))
        hits = list(first.items)
        cursor = first.next_cursor
        while cursor is not None:
            page = engine.list(ListRequest(limit=3, cursor=cursor))
            hits.extend(page.items)
            cursor = page.next_cursor
    ids = [hit.id for hit in hits]
    assert {c.id for c in chats} | {f.id for f in facts} <= set(ids)
    assert len(ids) == len(set(ids))
    whole = {hit.id: hit.text for hit in hits}
    for chat in chats:
        assert all(f"turn {t}" in whole[chat.id] for t in range(3))


def test_a_filtered_listing_pages_only_what_the_filter_admits() -> None:
    double = direct_double()
    wanted = [Learning(text=f"in thread {i}", meta=MemoryMeta(thread_id="t1")) for i in range(4)]
    with double_engine(double) as engine:
        engine.store_many([*wanted, *(Learning(text=f"other {i}") for i in range(40))])
        before = len(_listings(double))
        page = engine.list(ListRequest(filter=MetaFilter(thread_id="t1"), limit=10))
        assert sorted(h.id for h in page.items) == sorted(w.id for w in wanted) and page.next_cursor is None
        asked = double.requests("GET", "v1/events")[before:]
        assert len(asked) == 1 and asked[0].param("labels")  # narrowed on the server by the thread label


# scopes as the server says ---------------------------------------------------------------------------------
def test_scopes_carry_the_server_s_last_write_and_last_build() -> None:
    double = direct_double()
    whole = ConsolidateRequest(reach=Reach.subtree(ROOT))
    with double_engine(double) as engine:
        engine.store(Learning(text="Billing runs on Postgres.", meta=MemoryMeta().at("agent:a")))
        [scope] = engine.scopes(whole)
        assert scope.namespace == Namespace.parse("agent:a")
        assert scope.last_write is not None and abs(datetime.now(UTC) - scope.last_write) < timedelta(minutes=5)
        assert scope.last_build is None and scope.due
        engine.consolidate(whole)
        [built] = engine.scopes(whole)
        assert built.last_build is not None and built.last_build >= built.last_write
        assert not built.due
        engine.store(Learning(text="A later write.", meta=MemoryMeta().at("agent:a")))
        [again] = engine.scopes(whole)
        assert again.due and again.last_write > built.last_write


def test_the_status_command_shows_scopes_as_the_server_says(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from memory_core.cli import load_commands
    from memory_core.settings import get_settings

    double = direct_double()
    with DoubleServer(double) as server:
        url = "cortexdb+" + server.url
        monkeypatch.setenv("MEMORY_CORE_CORTEXDB_KEY", "any-key")
        monkeypatch.setenv("MEMORY_CORE_ENGINE", url)
        monkeypatch.setenv("MEMORY_CORE_VAR_DIR", str(tmp_path / "var"))
        get_settings.cache_clear()
        binding.invalidate()
        try:
            with double_engine(double, endpoint=server.url) as engine:
                engine.store(Learning(text="Status reads this.", meta=MemoryMeta().at("agent:a")))
                engine.consolidate(ConsolidateRequest(reach=Reach.subtree(ROOT)))
                engine.store(Learning(text="Never built.", meta=MemoryMeta().at("agent:b")))
            result = CliRunner().invoke(load_commands(), ["status", "--json"])
            assert result.exit_code == 0, result.output
            import json

            scopes = {s["namespace"]: s for s in json.loads(result.output)["scopes"]}
            assert scopes["agent:a"]["last_write"] and scopes["agent:a"]["last_build"]
            assert scopes["agent:b"]["last_write"] and scopes["agent:b"].get("last_build") is None
            text = CliRunner().invoke(load_commands(), ["status"]).output
            row_a = next(line for line in text.splitlines() if "agent:a" in line)
            assert "never" not in row_a  # written and built, as the server says
        finally:
            binding.invalidate()
