"""Many processes on one database: hosts replaying turns, ingesters, builders; two tenants kept apart.

4 host processes each replay turns (a ranked read of their tenant with beliefs, then ``store_with(accepted)``),
2 ingest batches of documents, 2 build beliefs in a loop: no error surfaces, every written item is present,
every scope is covered by a build that ran after its last write, and no read of tenant ``team:a`` ever returns
an item or belief of ``team:b`` (or the other way round), from processes and from threads.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest

from memory_core import (
    ConsolidateRequest,
    Conversation,
    Document,
    FetchMode,
    FetchRequest,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    Namespace,
    Reach,
    Role,
    Turn,
    WriteOptions,
)
from memory_core.engines import open_engine
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.postgres.beliefs import scopes_to_build

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TENANTS = (Namespace.parse("team:a"), Namespace.parse("team:b"))
FACTS = (
    "I adopted a rescue dog named {n}.",
    "My favorite color is {n}.",
    "I moved to {n} for a new job.",
    "I volunteer at the {n} shelter every weekend.",
)
TURNS = 12
BATCHES = 4


def _outside(hits: Any, tenant: Namespace) -> int:
    return sum(1 for h in hits if not h.meta.namespace.is_within(tenant))


def host(url: str, index: int) -> dict[str, Any]:
    tenant = TENANTS[index % 2]
    ns = tenant.child("agent", f"h{index}")
    written: list[str] = []
    leaks = errors = 0
    with open_engine(url) as engine:
        for n in range(TURNS):
            try:
                page = engine.fetch(
                    FetchRequest(
                        query=f"what about shelter {n}",
                        mode=FetchMode.HYBRID,
                        filter=MetaFilter(reach=Reach.subtree(tenant)),
                        limit=5,
                        beliefs=3,
                    )
                )
                leaks += _outside(page.hits, tenant) + _outside(page.beliefs, tenant)
                text = FACTS[n % len(FACTS)].format(n=f"x{index}n{n}")
                turn = Conversation(
                    turns=(Turn(role=Role.USER, text=text),),
                    meta=MemoryMeta(namespace=ns, thread_id=f"t{index}", agent_id=f"h{index}"),
                )
                written.append(engine.store_with(turn, WriteOptions.accepted()).id)
            except Exception:
                errors += 1
    return {"written": written, "leaks": leaks, "errors": errors}


def ingester(url: str, index: int) -> dict[str, Any]:
    tenant = TENANTS[index % 2]
    written: list[str] = []
    errors = 0
    with open_engine(url) as engine:
        for b in range(BATCHES):
            docs = [
                Document.of(f"Shelter handbook {index}-{b}-{k}: volunteers walk dogs.", MemoryMeta(namespace=tenant))
                for k in range(10)
            ]
            try:
                written.extend(r.id for r in engine.store_many(docs))
            except Exception:
                errors += 1
    return {"written": written, "leaks": 0, "errors": errors}


def builder(url: str, stop: Any) -> dict[str, Any]:
    errors = builds = 0
    with open_engine(url) as engine:
        while True:
            last = stop.is_set()
            try:
                engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
                builds += 1
            except Exception:
                errors += 1
            if last:
                break
    return {"written": [], "leaks": 0, "errors": errors, "builds": builds}


def test_hosts_ingesters_and_builders_on_one_database(pg_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        stop = manager.Event()
        with ctx.Pool(8) as pool:
            builds = [pool.apply_async(builder, (pg_url, stop)) for _ in range(2)]
            writers = [pool.apply_async(host, (pg_url, i)) for i in range(4)]
            writers += [pool.apply_async(ingester, (pg_url, i)) for i in range(2)]
            results = [w.get(timeout=600) for w in writers]
            stop.set()
            results += [b.get(timeout=600) for b in builds]
    assert [r["errors"] for r in results] == [0] * 8
    assert sum(r["leaks"] for r in results) == 0
    written = {i for r in results for i in r["written"]}
    assert len(written) == 4 * TURNS + 2 * BATCHES * 10
    engine = open_engine(pg_url)
    assert isinstance(engine, PostgresEngine)
    with engine:
        listed = {h.id for h in engine.list(ListRequest(limit=200)).items}
        assert listed == written
        due = engine._run(lambda conn: scopes_to_build(conn, Reach.subtree(), ["document", "conversation"]))
        assert due and not [s for s in due if s[2]]  # every scope built after its last write
        for tenant in TENANTS:
            beliefs = engine.beliefs({"reach": Reach.subtree(tenant).to_dict(), "limit": 200})
            assert beliefs and _outside(beliefs, tenant) == 0


def test_two_tenants_written_from_threads_never_read_each_other(pg_url: str) -> None:
    with open_engine(pg_url) as engine:
        leaks: list[int] = []
        errors: list[BaseException] = []

        def work(index: int) -> None:
            tenant = TENANTS[index % 2]
            try:
                for n in range(10):
                    engine.store(Document.of(f"secret plan {index} {n} of the shelter", MemoryMeta(namespace=tenant)))
                    page = engine.fetch(
                        FetchRequest(
                            query="secret plan shelter", filter=MetaFilter(reach=Reach.subtree(tenant)), limit=50
                        )
                    )
                    leaks.append(_outside(page.hits, tenant))
                    assert page.hits
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and sum(leaks) == 0 and len(leaks) == 40
        for tenant in TENANTS:
            page = engine.list(ListRequest(filter=MetaFilter(reach=Reach.subtree(tenant)), limit=100))
            assert len(page.items) == 20 and _outside(page.items, tenant) == 0
