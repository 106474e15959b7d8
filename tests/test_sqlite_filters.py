"""The SQL form of ``MetaFilter``/``Reach`` selects exactly what ``MetaFilter.matches`` admits."""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core import (
    Document,
    ItemKind,
    Learning,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    Namespace,
    Reach,
    SourceKind,
    SourceRef,
    ToolCallMeta,
    TurnRange,
)
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.filters import compile_filter

NODES = ["root", "team:t", "team:t/agent:a", "team:t/agent:a/agent:s", "team:t/agent:b", "team:t/service:x",
         "team:t/service:x/agent:c", "team:tt", "service:y"]  # fmt: skip


def _items() -> list[Document | Learning]:
    out: list[Document | Learning] = []
    folders = [None, "/m/src", "/m/src/app", "/m/srcx", "/", "", "m/src"]  # "" and a relative path: §1.6 edges
    for i, (node, folder) in enumerate(itertools.product(NODES, folders)):
        meta = MemoryMeta(
            namespace=Namespace.parse(node),
            workspace=f"w{i % 2}",
            folder=folder,
            file_path=f"/m/docs/{i}.md" if i % 3 == 0 else None,
            language="en" if i % 4 == 0 else None,
            thread_id=f"t{i % 3}",
            turns=TurnRange(first=i % 2, last=i % 2 + 1),
            agent_id="a" if i % 5 == 0 else None,
            tool_call=ToolCallMeta(name="search", id=str(i)) if i % 6 == 0 else None,
            source=SourceRef(kind=[SourceKind.FILE, SourceKind.AGENT, SourceKind.LINK][i % 3], id=f"s{i % 4}"),
            tags=tuple(t for t, on in (("x", i % 2 == 0), ("y", i % 3 == 0)) if on),
            observed_at=datetime(2000 + i % 4, 1, 1, tzinfo=UTC) if i % 7 else None,
        )
        text = f"item {i} about filters"
        out.append(Learning(text=text, meta=meta) if i % 2 else Document.of(text, meta))
    return out


def _reaches(node: str) -> tuple[Reach, ...]:
    """Ancestors (``of``), exact, subtree, and ancestors with the subtree, at ``node``."""
    at = Namespace.parse(node)
    return (Reach.of(node), Reach.exact(node), Reach.subtree(node), Reach(at=at, inherit=True, descendants=True))


KIND_SETS = ((ItemKind.LEARNING,), (ItemKind.DOCUMENT, ItemKind.LEARNING))


def _filters() -> Iterator[MetaFilter]:
    for node in NODES:
        for reach in _reaches(node):
            yield MetaFilter(reach=reach)
            for kinds in KIND_SETS:
                yield MetaFilter(reach=reach, kinds=kinds)
    yield MetaFilter()
    for prefix in ("/m/src", "/m/src/", "/", "", "/m/sr", "/m/src/app"):
        yield MetaFilter(folder=prefix)
    yield MetaFilter(file_path="/m/docs")
    yield MetaFilter(language="en", workspace="w0")
    yield MetaFilter(thread_id="t1", turns=TurnRange(first=1, last=2))
    yield MetaFilter(agent_id="a")
    yield MetaFilter(tool_call="search")
    yield MetaFilter(source_id="s2", sources=(SourceKind.FILE, SourceKind.LINK))
    yield MetaFilter(tags_any=("y", "zz"))
    yield MetaFilter(kinds=(ItemKind.LEARNING,), reach=Reach.subtree("team:t"))
    yield MetaFilter(observed_after=datetime(2001, 1, 1, tzinfo=UTC), observed_before=datetime(2003, 1, 1, tzinfo=UTC))
    yield MetaFilter(observed_before=datetime(2002, 1, 1, tzinfo=UTC))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SQLiteEngine, list[Document | Learning]]]:
    path: Path = tmp_path_factory.mktemp("filters") / "memory.db"
    items = _items()
    with SQLiteEngine(path) as engine:
        for start in range(0, len(items), 100):
            engine.store_many(items[start : start + 100])
        yield engine, items


def _listed(engine: SQLiteEngine, flt: MetaFilter) -> list[str]:
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
    loaded: tuple[SQLiteEngine, list[Document | Learning]], flt: MetaFilter
) -> None:
    engine, items = loaded
    expected = [i.id for i in items if flt.matches(i.item_kind, i.item_meta)]
    assert _listed(engine, flt) == expected


def test_sibling_and_service_sandbox_are_never_reached_from_a_subtree(
    loaded: tuple[SQLiteEngine, list[Document | Learning]],
) -> None:
    engine, _ = loaded
    nodes = {
        str(h.meta.namespace)
        for h in engine.list(ListRequest(filter=MetaFilter(reach=Reach.subtree("team:t")), limit=1000)).items
    }
    assert nodes == {"team:t", "team:t/agent:a", "team:t/agent:a/agent:s", "team:t/agent:b"}
    inside = MetaFilter(reach=Reach.subtree("team:t/service:x"))
    assert {str(h.meta.namespace) for h in engine.list(ListRequest(filter=inside, limit=1000)).items} == {
        "team:t/service:x",
        "team:t/service:x/agent:c",
    }


@pytest.mark.parametrize("kinds", [(), *KIND_SETS], ids=lambda k: "+".join(x.value for x in k) or "any")
@pytest.mark.parametrize("reach", _reaches("team:t/agent:a"), ids=["ancestors", "exact", "subtree", "both"])
def test_every_reach_is_an_index_lookup_on_the_namespace_with_or_without_kinds(
    loaded: tuple[SQLiteEngine, list[Document | Learning]], reach: Reach, kinds: tuple[ItemKind, ...]
) -> None:
    """Each part of the plan is a SEARCH constraining ``ns`` (equality or range), never a scan of a whole
    table or of every namespace of a kind (sqlite.org/eqp.html)."""
    engine, _ = loaded
    where = compile_filter(MetaFilter(reach=reach, kinds=kinds), "i")
    conn = sqlite3.connect(f"{engine.path.as_uri()}?mode=ro", uri=True)
    try:
        plan = [str(r[-1]) for r in conn.execute(f"EXPLAIN QUERY PLAN SELECT i.seq FROM items i WHERE {where.sql}",
                                                  where.params)]  # fmt: skip
    finally:
        conn.close()
    lookups = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert lookups, plan
    for step in lookups:
        assert step.startswith("SEARCH i USING"), plan
        assert re.search(r"\bns[=><]\?", step), plan
