"""Memory as a log in the PostgreSQL engine (seed 002, issue 19; ``docs/log-model.md``).

The same rules as the SQLite engine's (``tests/test_sqlite_log.py``): the materialised state is always
``memory_log.fold`` of the log, past views read what the fold at their LSN says, and on PostgreSQL, where many
processes write one database, the LSN order readers see is the commit order (no reader ever sees a gap).
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from functools import partial
from pathlib import Path

import psycopg
import pytest

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    Document,
    FetchRequest,
    GetRequest,
    Learning,
    LearningKind,
    ListRequest,
    MemoryMeta,
    Namespace,
    Reach,
    RecallRequest,
)
from memory_core.engines.postgres import PostgresEngine, log, schema
from memory_core.engines.postgres.migrate import copy_sqlite
from memory_core.engines.postgres.writes import insert, prepare
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.errors import EngineError, Unsupported
from memory_core.items import Role, Turn
from memory_core.memory_log import MemoryStatus, RecordOp, Tier, fold

pytestmark = pytest.mark.postgres


def _turn(text: str, thread: str = "t1") -> Conversation:
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=MemoryMeta(thread_id=thread))


def _beliefs(engine: PostgresEngine, query: str = "Ana Porto") -> list[str]:
    return [b.text for b in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query=query))]


def _fold_matches(engine: PostgresEngine) -> None:
    records = engine._run(log.records)
    assert fold(records) == engine._run(log.materialised)
    assert [r.lsn for r in records] == list(range(1, len(records) + 1))
    assert engine.current_lsn() == len(records)


def test_the_issue_scenario_retract_stale_as_of_rollback(pg_url: str) -> None:
    """A fact stated, a belief built, the source retracted: the belief goes stale, the past still shows it,
    and a rollback restores both (issue 19 "Must show")."""
    with PostgresEngine(pg_url) as engine:
        turn = engine.store(_turn("My sister Ana lives in Porto.")).id
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        [belief] = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Ana Porto"))
        assert belief.derived_from == (turn,)
        [built] = [r for r in engine.history(belief.id)]
        assert (built.op, built.tier, built.reason) == (
            RecordOp.PUT,
            Tier.LONG,
            "built from root#conversation up to LSN 1",
        )
        before = engine.current_lsn()

        change = engine.retract([turn], "the user misspoke")
        assert change.ids(RecordOp.RETRACT) == [turn] and change.ids(RecordOp.STALE) == [belief.id]
        assert {r.txn for r in change.records} == {change.txn} == {change.records[0].lsn}
        assert _beliefs(engine) == []
        assert turn not in {h.id for h in engine.fetch(FetchRequest(query="Ana Porto")).hits}
        [shown] = engine.get(GetRequest(ids=(turn,)))
        assert (shown.status, shown.tier) == (MemoryStatus.RETRACTED, Tier.SHORT)

        past = engine.as_of(before)
        assert _beliefs(past) == [belief.text]
        assert turn in {c.id for c in past.recall(RecallRequest(question="Where does Ana live?")).citations}
        assert past.fetch(FetchRequest(query="Ana Porto", beliefs=3)).beliefs[0].id == belief.id
        assert past.current_lsn() == before and past.log(0, 100).records[-1].lsn == before
        with pytest.raises(Unsupported):
            past.retract([turn], "a view is read-only")
        with pytest.raises(Unsupported):
            past.store(_turn("a view takes no writes"))

        engine.rollback(before, "it was right after all")
        assert _beliefs(engine) == [belief.text]
        assert [r.op for r in engine.history(turn)] == [RecordOp.PUT, RecordOp.RETRACT, RecordOp.RESTORE]
        assert [r.op for r in engine.history(belief.id)] == [RecordOp.PUT, RecordOp.STALE, RecordOp.RESTORE]
        _fold_matches(engine)


def test_state_is_the_fold_of_the_log_at_every_lsn(pg_url: str) -> None:
    """A mixed workload: the materialised state is the fold, and every past view reads the fold at its LSN."""
    with PostgresEngine(pg_url) as engine:
        doc = engine.store(Document.of("Refunds take five business days.", MemoryMeta())).id
        built = engine.store(
            Learning(text="Refunds are slow.", kind=LearningKind.FACT, evidence=doc, meta=MemoryMeta())
        )
        more = engine.store_many([_turn("My sister Ana lives in Porto."), _turn("I moved to Lisbon.", "t2")])
        engine.store_with(_turn("I adopted a dog named Max.", "t3"), {"wait": "accepted"})
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        engine.retract([doc], "wrong policy")
        engine.move([more[1].id], Tier.ARCHIVE, "retention")
        mark = engine.current_lsn()
        engine.rollback(2, "undo")
        engine.store(Document.of("Refunds take five business days.", MemoryMeta()))  # a restore
        engine.forget({"ids": [more[0].id]})
        engine.rollback(mark, "back again")
        _fold_matches(engine)

        records = engine._run(log.records)
        every = tuple(dict.fromkeys(r.id for r in records))
        content = {h.id for h in engine.get(GetRequest(ids=every))}  # items whose text the database still holds
        assert built.id in content and more[0].id not in content
        for lsn in range(engine.current_lsn() + 1):
            state = fold(records, lsn)
            view = engine.as_of(lsn)
            shown = {h.id: (h.status, h.tier) for h in view.get(GetRequest(ids=every))}
            assert shown == {i: (h.status, h.tier) for i, h in state.items() if i in content}, lsn
            listed = {h.id for h in view.list(ListRequest(limit=100)).items}
            assert listed == {i for i in shown if state[i].status is MemoryStatus.LIVE}, lsn


def test_a_store_many_is_one_transaction_and_a_replay_writes_nothing(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        engine.store_many([Document.of(f"note {n}", MemoryMeta()) for n in range(3)])
        records = engine.log(0, 10).records
        assert [r.op for r in records] == [RecordOp.PUT] * 3 and {r.txn for r in records} == {records[0].lsn}
        engine.store(Document.of("note 1", MemoryMeta()))
        assert engine.current_lsn() == 3
        assert engine.log(1, 1).next_since == 2 and engine.log(2, 5).next_since is None
        engine.store(Document.of("note 3", MemoryMeta()))
        assert [r.txn for r in engine.log(3, 5).records] == [4]  # the next transaction starts a new txn


def test_storing_a_retracted_memory_again_restores_it(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        item = Document.of("The office opens at nine.", MemoryMeta())
        engine.store(item)
        engine.retract([item.id], "wrong hours")
        assert item.id not in {h.id for h in engine.fetch(FetchRequest(query="office opens nine")).hits}
        receipt = engine.store(item)
        assert not receipt.replayed
        assert [r.op for r in engine.history(item.id)] == [RecordOp.PUT, RecordOp.RETRACT, RecordOp.RESTORE]
        assert item.id in {h.id for h in engine.fetch(FetchRequest(query="office opens nine")).hits}
        _fold_matches(engine)


def test_a_rebuild_from_new_live_evidence_restores_a_stale_belief(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        first = engine.store(_turn("My sister Ana lives in Porto.")).id
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        engine.retract([first], "misspoke")
        assert _beliefs(engine) == []
        engine.store(_turn("My sister Ana lives in Porto.", "t2"))
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        [belief] = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Ana Porto"))
        assert [r.op for r in engine.history(belief.id)] == [RecordOp.PUT, RecordOp.STALE, RecordOp.RESTORE]
        _fold_matches(engine)


def test_a_retracted_source_builds_nothing(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        turn = engine.store(_turn("My sister Ana lives in Porto.")).id
        engine.retract([turn], "misspoke")
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        assert _beliefs(engine) == []
        assert [r.op for r in engine.log(0, 10).records] == [RecordOp.PUT, RecordOp.RETRACT]


def test_forget_leaves_tombstones_for_the_item_what_was_built_on_it_and_its_belief(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        turn = engine.store(_turn("My sister Ana lives in Porto.")).id
        note = engine.store(Learning(text="Ana is in Porto.", kind=LearningKind.FACT, evidence=turn, meta=MemoryMeta()))
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        [belief] = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Ana Porto"))
        mark = engine.current_lsn()
        assert engine.forget({"ids": [turn]}).forgotten == 1
        after = engine.log(mark, 10).records
        assert [(r.op, r.id) for r in after] == [
            (RecordOp.TOMBSTONE, turn),
            (RecordOp.TOMBSTONE, note.id),
            (RecordOp.TOMBSTONE, belief.id),
        ]
        assert {r.txn for r in after} == {mark + 1}
        assert "Porto" not in engine.log(0, 100).to_json()
        assert not engine.get(GetRequest(ids=(turn, note.id))) and _beliefs(engine) == []
        assert not engine.as_of(mark).get(GetRequest(ids=(turn,)))
        change = engine.rollback(mark, "undo the forget")
        assert set(change.unrecoverable) == {turn, note.id, belief.id} and change.note
        _fold_matches(engine)


def test_archived_items_leave_the_standard_read_and_are_served_on_request(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        kept = engine.store(Document.of("kayak rental opens at nine", MemoryMeta())).id
        moved = engine.store(Document.of("kayak rental closes at five", MemoryMeta())).id
        engine.move([moved], Tier.ARCHIVE, "retention")
        standard = {h.id for h in engine.fetch(FetchRequest(query="kayak rental")).hits}
        archived = {h.id for h in engine.fetch(FetchRequest(query="kayak rental", tiers=(Tier.ARCHIVE,))).hits}
        assert (standard, archived) == ({kept}, {moved})
        assert {h.id for h in engine.list(ListRequest(limit=10)).items} == {kept, moved}
        assert engine.move([moved], Tier.ARCHIVE, "again").records == ()  # already there: nothing written


def test_the_migration_logs_every_held_memory_in_transaction_one(pg_url: str) -> None:
    """A database from before the log: its items get status, tier and provenance, and a ``put`` each."""
    step = next(i for i, m in enumerate(schema.MIGRATIONS) if "seed 002" in (m.__doc__ or ""))
    doc = Document.of("Refunds take five business days.", MemoryMeta())
    note = Learning(
        text="Refunds are slow.", kind=LearningKind.FACT, evidence=doc.id, meta=MemoryMeta(tags=("consolidated",))
    )
    with psycopg.connect(pg_url) as conn:
        conn.execute(f"CREATE SCHEMA {schema.SCHEMA}")
        for migration in schema.MIGRATIONS[:step]:
            migration(conn)
        conn.execute(f"INSERT INTO {schema.SCHEMA}.meta VALUES ('schema_version', %s)", (str(step),))
        for item, tags in ((doc, []), (note, ["consolidated"])):
            conn.execute(
                f"INSERT INTO {schema.SCHEMA}.items (id, kind, ns, source_kind, tags, stored_at, item, words, vec) "
                "VALUES (%s, %s, '', 'agent', %s, 1, %s, 'refunds', %s)",
                (item.id, item.item_kind.value, tags, item.model_dump_json(), [0.0] * 64),
            )
    with PostgresEngine(pg_url) as engine:
        records = engine.log(0, 10).records
        assert [(r.op, r.id, r.txn, r.tier) for r in records] == [
            (RecordOp.PUT, doc.id, 1, Tier.SHORT),
            (RecordOp.PUT, note.id, 1, Tier.LONG),
        ]
        assert engine._run(
            lambda c: c.execute(f"SELECT value FROM {schema.SCHEMA}.meta WHERE key = 'schema_version'").fetchone()
        ) == (str(schema.SCHEMA_VERSION),)
        change = engine.retract([doc.id], "wrong")  # provenance came from the note's evidence
        assert change.ids(RecordOp.STALE) == [note.id]
        _fold_matches(engine)


# concurrency ----------------------------------------------------------------------------------------------
WRITERS = 3
WRITES = 25


def _slow_store(conn: psycopg.Connection, item: Document) -> None:  # type: ignore[type-arg]
    """A store whose transaction goes on working after its record (as a build does) before it commits."""
    insert(conn, [prepare(item)], 1)
    time.sleep(0.02)


def writer(url: str, index: int) -> list[str]:
    """One process's writes: single stores, slow stores, batches and retractions, each its own transaction."""
    ids: list[str] = []
    meta = MemoryMeta(namespace=Namespace.parse(f"agent:w{index}"))  # scopes of their own: nothing else serialises them
    with PostgresEngine(url) as engine:
        for n in range(WRITES):
            if n % 3 == 1:
                slow = Document.of(f"w{index} slow {n}", meta)
                engine._run(partial(_slow_store, item=slow))
                ids.append(slow.id)
            elif n % 5 == 4:
                batch = [Document.of(f"w{index} batch {n} item {k}", meta) for k in range(3)]
                ids += [r.id for r in engine.store_many(batch)]
            else:
                ids.append(engine.store(Document.of(f"w{index} note {n}", meta)).id)
            if n % 7 == 6:
                engine.retract([ids[-2]], f"w{index} retracts")
    return ids


def test_concurrent_writers_commit_in_lsn_order_and_readers_never_see_a_gap(pg_url: str) -> None:
    """Writer processes race; a reader polling the log always sees LSNs ``1..n`` and the head at ``n``.

    A sequence would hand out LSNs at insert time and let a later LSN commit first: a reader would then see a
    gap. The head row's lock makes LSN order the commit order, so every snapshot sees a prefix of the log.
    """
    seen: list[tuple[int, int, int]] = []
    stop = threading.Event()

    def read() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    f"SELECT count(*), coalesce(max(lsn), 0), (SELECT lsn FROM {schema.SCHEMA}.log_head) "
                    f"FROM {schema.SCHEMA}.log"
                ).fetchone()
                assert row is not None
                seen.append((int(row[0]), int(row[1]), int(row[2])))

    PostgresEngine(pg_url).close()  # schema in place before the race
    reader = threading.Thread(target=read)
    reader.start()
    try:
        with multiprocessing.get_context("spawn").Pool(WRITERS) as pool:
            written = pool.starmap(writer, [(pg_url, i) for i in range(WRITERS)])
    finally:
        stop.set()
        reader.join()
    gaps = [s for s in seen if not s[0] == s[1] == s[2]]
    assert not gaps, gaps[:5]
    assert len({s[1] for s in seen}) > 1  # the reader saw the log grow
    with PostgresEngine(pg_url) as engine:
        records = engine._run(log.records)
        _fold_matches(engine)
        txns = [r.txn for r in records]
        assert txns == sorted(txns)  # transactions' records are contiguous and in LSN order
        assert all(r.txn <= r.lsn for r in records) and all(
            a.txn == b.txn or b.txn == b.lsn for a, b in zip(records, records[1:], strict=False)
        )
        ats = [r.at or 0 for r in records]
        assert ats == sorted(ats)
        puts = [r.id for r in records if r.op is RecordOp.PUT]
        assert sorted(puts) == sorted(i for ids in written for i in ids)


def test_a_failed_transaction_leaves_no_record_and_no_gap(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        engine.store(Document.of("first", MemoryMeta()))

        def fail(conn: psycopg.Connection) -> None:  # type: ignore[type-arg]
            insert(conn, [prepare(Document.of("never committed", MemoryMeta()))], 1)
            raise RuntimeError("the transaction fails after its records")

        with pytest.raises(Exception, match="fails after its records"):
            engine._run(fail)
        engine.store(Document.of("second", MemoryMeta()))
        assert [r.lsn for r in engine.log(0, 10).records] == [1, 2]
        _fold_matches(engine)


def test_migrate_from_sqlite_brings_each_memory_with_its_status_and_tier(tmp_path: Path, pg_url: str) -> None:
    """``memory-core migrate``: a retracted turn, a stale belief, an archived document and a belief a stopped
    build left unpublished arrive as SQLite holds them (the unpublished one published, as its next build would)."""
    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as lite:
        wrong = lite.store(_turn("My sister Ana lives in Porto.")).id
        dog = lite.store(_turn("I adopted a dog named Max.", "t2")).id
        archived = lite.store(Document.of("kayak rental closes at five", MemoryMeta())).id
        lite.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        [stale] = lite.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Ana Porto"))
        [pending] = lite.beliefs(BeliefsRequest(reach=Reach.subtree(), query="dog Max"))
        lite.retract([wrong], "misspoke")
        lite.move([archived], Tier.ARCHIVE, "retention")
    conn = sqlite3.connect(path)
    with conn:  # what a build that stopped before its commit leaves: a pending belief without a record
        conn.execute("UPDATE beliefs SET status = 'pending:active' WHERE id = ?", (pending.id,))
        conn.execute("DELETE FROM log WHERE id = ?", (pending.id,))
    conn.close()
    with PostgresEngine(pg_url) as engine:
        copy_sqlite(path, engine)
        shown = {h.id: (h.status, h.tier) for h in engine.get(GetRequest(ids=(wrong, dog, archived)))}
        assert shown == {
            wrong: (MemoryStatus.RETRACTED, Tier.SHORT),
            dog: (MemoryStatus.LIVE, Tier.SHORT),
            archived: (MemoryStatus.LIVE, Tier.ARCHIVE),
        }
        assert _beliefs(engine) == [] and _beliefs(engine, "dog Max") == [pending.text]
        assert [r.op for r in engine.history(stale.id)] == [RecordOp.PUT, RecordOp.STALE]
        assert archived not in {h.id for h in engine.fetch(FetchRequest(query="kayak rental")).hits}
        _, made_stale = engine.history(stale.id)
        engine.rollback(made_stale.lsn - 1, "the migration's puts")  # the status came as records
        assert _beliefs(engine) == [stale.text]
        _fold_matches(engine)


def test_a_build_that_fails_before_its_commit_changes_no_read(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 item 7 on PostgreSQL: a build is one transaction, so its changes to published beliefs, new
    beliefs and records show together at its commit or, when it fails, not at all."""
    from memory_core.engines.postgres import log_ops

    with PostgresEngine(pg_url) as engine:
        ana = engine.store(_turn("My sister Ana lives in Porto.", "a")).id
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        again = engine.store_many(
            [_turn("My sister Ana lives in Porto.", "b"), _turn("My cousin Eva lives in Faro.", "c")]
        )

        def reads() -> tuple[object, ...]:
            return (
                engine.current_lsn(),
                sorted((b.id, b.derived_from) for b in engine.beliefs(BeliefsRequest(reach=Reach.subtree()))),
                sorted(h.id for h in engine.fetch(FetchRequest(query="Ana Eva Porto Faro", beliefs=10)).beliefs),
            )

        before = reads()

        def dies(*_: object, **__: object) -> None:
            raise RuntimeError("the worker died before its commit")

        monkeypatch.setattr(log_ops, "commit_build", dies)
        with pytest.raises(EngineError, match="died before its commit"):
            engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        assert reads() == before
        monkeypatch.undo()
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        after = reads()
        new = engine.log(before[0], 100).records  # type: ignore[arg-type]
        assert [r.op for r in new] == [RecordOp.PUT] and after[0] == new[0].lsn
        grown = dict(after[1])  # type: ignore[arg-type]
        assert any(set(e) == {ana, again[0].id} for e in grown.values())
        _fold_matches(engine)
