"""The PostgreSQL form of ``MetaFilter``/``Reach`` selects exactly what ``MetaFilter.matches`` admits, and every
reach is served by an index on the namespace column."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from pgkit import create_database, drop_database, require_postgres, url_for
from test_sqlite_filters import _filters, _items, _reaches

from memory_core import Document, ItemKind, Learning, ListRequest, MetaFilter, Reach
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.postgres.filters import compile_filter
from memory_core.engines.postgres.schema import SCHEMA

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def loaded() -> Iterator[tuple[PostgresEngine, list[Document | Learning], str]]:
    require_postgres()
    name = create_database()
    items = _items()
    try:
        with PostgresEngine(url_for(name)) as engine:
            for start in range(0, len(items), 100):
                engine.store_many(items[start : start + 100])
            yield engine, items, url_for(name)
    finally:
        drop_database(name)


def _listed(engine: PostgresEngine, flt: MetaFilter) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = engine.list(ListRequest(filter=flt, limit=7, cursor=cursor))
        ids.extend(h.id for h in page.items)
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


@pytest.mark.parametrize("flt", list(_filters()), ids=lambda f: f.to_json()[:80])
def test_sql_filter_selects_what_matches_admits(
    loaded: tuple[PostgresEngine, list[Document | Learning], str], flt: MetaFilter
) -> None:
    engine, items, _ = loaded
    expected = [i.id for i in items if flt.matches(i.item_kind, i.item_meta)]
    assert _listed(engine, flt) == expected


@pytest.mark.parametrize("kinds", [(), (ItemKind.LEARNING,)], ids=["any", "learning"])
@pytest.mark.parametrize("reach", _reaches("team:t/agent:a"), ids=["ancestors", "exact", "subtree", "both"])
def test_every_reach_is_an_index_lookup(
    loaded: tuple[PostgresEngine, list[Document | Learning], str], reach: Reach, kinds: tuple[ItemKind, ...]
) -> None:
    _, _, url = loaded
    where = compile_filter(MetaFilter(reach=reach, kinds=kinds), "i")
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")  # what a large table gets: no plan may need a full scan
        plan = "\n".join(
            str(r[0])
            for r in conn.execute(f"EXPLAIN SELECT i.seq FROM {SCHEMA}.items i WHERE {where.sql}", where.params)
        )
    assert "Seq Scan" not in plan, plan
