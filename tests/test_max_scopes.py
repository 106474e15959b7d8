"""``FetchRequest.max_scopes`` (reference §1.3): at most N scopes, those the query names first, then the newest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core import Document, FetchMode, FetchRequest, MemoryEngine, MemoryMeta, MetaFilter, Namespace, Reach
from memory_core.engines.reference import ReferenceEngine, choose_scopes, names_scope
from memory_core.engines.sqlite import SQLiteEngine

NAMES = ["alpha", "beta", "gamma", "delta", "release-notes"]
FLT = MetaFilter(reach=Reach.subtree("ws:x"))


def _scope(name: str) -> str:
    return f"ws:x/source:files/project:{name}"


@pytest.fixture(params=["reference", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryEngine]:
    made: MemoryEngine = ReferenceEngine() if request.param == "reference" else SQLiteEngine(tmp_path / "m.db")
    for name in NAMES:  # written in this order: release-notes is the newest scope
        made.store_many([Document.of(f"shared words {name} {j}", MemoryMeta(namespace=_scope(name))) for j in range(2)])
    yield made
    made.close()


def _scopes(engine: MemoryEngine, query: str, n: int | None, mode: FetchMode = FetchMode.HYBRID) -> set[str]:
    hits = engine.fetch(FetchRequest(query=query, mode=mode, filter=FLT, limit=100, max_scopes=n)).hits
    return {h.meta.namespace.segments[-1][1] for h in hits}


def test_the_newest_scopes_are_read_when_the_query_names_none(engine: MemoryEngine) -> None:
    assert _scopes(engine, "shared words", None) == set(NAMES)
    assert _scopes(engine, "shared words", 1) == {"release-notes"}
    assert _scopes(engine, "shared words", 2) == {"release-notes", "delta"}
    assert _scopes(engine, "shared words", 9) == set(NAMES)


def test_scopes_the_query_names_come_first(engine: MemoryEngine) -> None:
    assert _scopes(engine, "words about alpha", 1) == {"alpha"}
    assert _scopes(engine, "alpha and beta words", 1) == {"beta"}  # both named: the newer one
    assert _scopes(engine, "alpha words", 2) == {"alpha", "release-notes"}
    assert _scopes(engine, "the release notes words", 1) == {"release-notes"}  # every word of the id


@pytest.mark.parametrize("mode", FetchMode.all())
def test_both_engines_keep_the_same_hits(tmp_path: Path, mode: FetchMode) -> None:
    ref, sql = ReferenceEngine(), SQLiteEngine(tmp_path / "m.db")
    for name in NAMES:
        docs = [Document.of(f"shared words {name} {j}", MemoryMeta(namespace=_scope(name))) for j in range(2)]
        ref.store_many(docs)
        sql.store_many(docs)
    for query in ("shared words", "words about gamma", "release notes"):
        for n in (1, 2, 3):
            req = FetchRequest(query=query, mode=mode, filter=FLT, limit=100, max_scopes=n)
            assert {h.id for h in ref.fetch(req).hits} == {h.id for h in sql.fetch(req).hits}, (query, n)
    sql.close()


def test_segments_at_or_above_the_reach_name_nothing() -> None:
    below = Namespace.parse("ws:x")
    ns = Namespace.parse("ws:x/source:files/project:peps")
    assert names_scope({"peps"}, ns, below) and names_scope({"files"}, ns, below)
    assert not names_scope({"ws", "x"}, ns, below)
    last = {ns: 1, Namespace.parse("ws:x/source:files/project:other"): 2}
    assert choose_scopes("what do the peps say", last, Reach.subtree(below), 1) == {ns}
    assert choose_scopes("anything", last, Reach.subtree(below), 5) == set(last)
