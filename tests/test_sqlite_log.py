"""Memory as a log in the SQLite engine (seed 002, issue 19; ``docs/log-model.md``).

The materialised state must always be ``memory_log.fold`` of the log, the past views must read what the fold at
their LSN says, and the rules of what changes hold for items and built beliefs alike.
"""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path

import pytest
from _sqlite_files import downgrade_to_v1

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
    Reach,
    RecallRequest,
)
from memory_core.engines.sqlite import SQLiteEngine, beliefs_store, log, log_checkpoint, schema
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.items import Role, Turn
from memory_core.memory_log import MemoryStatus, RecordOp, Tier, fold
from memory_core.namespace import Namespace


def _turn(text: str, thread: str = "t1") -> Conversation:
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=MemoryMeta(thread_id=thread))


def _beliefs(engine: SQLiteEngine, query: str = "Ana Porto") -> list[str]:
    return [b.text for b in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query=query))]


def _fold_matches(engine: SQLiteEngine) -> None:
    records = engine._db.run(log.records)
    assert fold(records) == engine._db.run(log.materialised)
    assert [r.lsn for r in records] == list(range(1, len(records) + 1))


@pytest.fixture
def engine(tmp_path: Path) -> SQLiteEngine:
    return SQLiteEngine(tmp_path / "memory.db")


def test_the_issue_scenario_retract_stale_as_of_rollback(engine: SQLiteEngine) -> None:
    """A fact stated, a belief built, the source retracted: the belief goes stale, the past still shows it,
    and a rollback restores both (issue 19 "Must show")."""
    turn = engine.store(_turn("My sister Ana lives in Porto.")).id
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    [belief] = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Ana Porto"))
    assert belief.derived_from == (turn,)
    before = engine.current_lsn()

    change = engine.retract([turn], "the user misspoke")
    assert change.ids(RecordOp.RETRACT) == [turn] and change.ids(RecordOp.STALE) == [belief.id]
    assert {r.txn for r in change.records} == {change.txn}
    assert _beliefs(engine) == []
    assert turn not in {h.id for h in engine.fetch(FetchRequest(query="Ana Porto")).hits}
    [shown] = engine.get(GetRequest(ids=(turn,)))
    assert (shown.status, shown.tier) == (MemoryStatus.RETRACTED, Tier.SHORT)

    past = engine.as_of(before)
    assert _beliefs(past) == [belief.text]
    assert turn in {c.id for c in past.recall(RecallRequest(question="Where does Ana live?")).citations}
    assert past.fetch(FetchRequest(query="Ana Porto", beliefs=3)).beliefs[0].id == belief.id
    with pytest.raises(Unsupported):
        past.retract([turn], "a view is read-only")

    engine.rollback(before, "it was right after all")
    assert _beliefs(engine) == [belief.text]
    assert [r.op for r in engine.history(turn)] == [RecordOp.PUT, RecordOp.RETRACT, RecordOp.RESTORE]
    assert [r.op for r in engine.history(belief.id)] == [RecordOp.PUT, RecordOp.STALE, RecordOp.RESTORE]
    _fold_matches(engine)


def test_state_is_the_fold_of_the_log_at_every_lsn(engine: SQLiteEngine) -> None:
    """A mixed workload: the materialised state is the fold, and every past view reads the fold at its LSN."""
    doc = engine.store(Document.of("Refunds take five business days.", MemoryMeta())).id
    built = engine.store(Learning(text="Refunds are slow.", kind=LearningKind.FACT, evidence=doc, meta=MemoryMeta()))
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

    records = engine._db.run(log.records)
    every = tuple(dict.fromkeys(r.id for r in records))
    content = {h.id for h in engine.get(GetRequest(ids=every))}  # items whose text the file still holds
    assert built.id in content and more[0].id not in content
    for lsn in range(engine.current_lsn() + 1):
        state = fold(records, lsn)
        view = engine.as_of(lsn)
        shown = {h.id: (h.status, h.tier) for h in view.get(GetRequest(ids=every))}
        assert shown == {i: (h.status, h.tier) for i, h in state.items() if i in content}, lsn
        listed = {h.id for h in view.list(ListRequest(limit=100)).items}
        assert listed == {i for i in shown if state[i].status is MemoryStatus.LIVE}, lsn


def test_a_store_many_is_one_transaction_and_a_replay_writes_nothing(engine: SQLiteEngine) -> None:
    engine.store_many([Document.of(f"note {n}", MemoryMeta()) for n in range(3)])
    records = engine.log(0, 10).records
    assert [r.op for r in records] == [RecordOp.PUT] * 3 and {r.txn for r in records} == {records[0].lsn}
    engine.store(Document.of("note 1", MemoryMeta()))
    assert engine.current_lsn() == 3
    assert engine.log(1, 1).next_since == 2 and engine.log(2, 5).next_since is None


def test_storing_a_retracted_memory_again_restores_it(engine: SQLiteEngine) -> None:
    item = Document.of("The office opens at nine.", MemoryMeta())
    engine.store(item)
    engine.retract([item.id], "wrong hours")
    receipt = engine.store(item)
    assert not receipt.replayed
    assert [r.op for r in engine.history(item.id)] == [RecordOp.PUT, RecordOp.RETRACT, RecordOp.RESTORE]
    assert item.id in {h.id for h in engine.fetch(FetchRequest(query="office opens nine")).hits}


def test_a_rebuild_from_new_live_evidence_restores_a_stale_belief(engine: SQLiteEngine) -> None:
    first = engine.store(_turn("My sister Ana lives in Porto.")).id
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    engine.retract([first], "misspoke")
    assert _beliefs(engine) == []
    engine.store(_turn("My sister Ana lives in Porto.", "t2"))
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    [belief] = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Ana Porto"))
    assert [r.op for r in engine.history(belief.id)] == [RecordOp.PUT, RecordOp.STALE, RecordOp.RESTORE]
    _fold_matches(engine)


def test_a_retracted_source_builds_nothing(engine: SQLiteEngine) -> None:
    turn = engine.store(_turn("My sister Ana lives in Porto.")).id
    engine.retract([turn], "misspoke")
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    assert _beliefs(engine) == []


def test_staleness_is_transitive_and_a_forget_leaves_tombstones_only(engine: SQLiteEngine) -> None:
    doc = engine.store(Document.of("The secret code is 4711.", MemoryMeta())).id
    mid = engine.store(Learning(text="A code exists.", kind=LearningKind.FACT, evidence=doc, meta=MemoryMeta())).id
    top = engine.store(Learning(text="Codes matter.", kind=LearningKind.FACT, evidence=mid, meta=MemoryMeta())).id
    mark = engine.current_lsn()
    change = engine.retract([doc], "wrong")
    assert change.ids(RecordOp.STALE) == [mid, top]
    engine.rollback(mark, "undo")
    assert engine.forget({"ids": [doc]}).forgotten == 1
    assert engine.get(GetRequest(ids=(doc, mid, top))) == []  # built only on it: removed with it
    for item_id in (doc, mid, top):
        assert engine.history(item_id)[-1].op is RecordOp.TOMBSTONE
    assert "4711" not in engine.log(0, 1000).to_json()
    assert engine.as_of(mark).get(GetRequest(ids=(doc,))) == []
    undo = engine.rollback(mark, "bring it back")
    assert set(undo.unrecoverable) == {doc, mid, top} and undo.note
    _fold_matches(engine)


def test_archive_leaves_the_standard_read_and_tiers_read_it(engine: SQLiteEngine) -> None:
    item = engine.store(Document.of("Old travel plans for Rome.", MemoryMeta())).id
    belief = engine.store(Learning(text="Likes Rome.", kind=LearningKind.FACT, meta=MemoryMeta(tags=("belief",)))).id
    assert [h.tier for h in engine.get(GetRequest(ids=(item, belief)))] == [Tier.SHORT, Tier.LONG]
    engine.move([item], Tier.ARCHIVE, "retention")
    assert item not in {h.id for h in engine.fetch(FetchRequest(query="travel Rome")).hits}
    archived = engine.fetch(FetchRequest(query="travel Rome", tiers=(Tier.ARCHIVE,))).hits
    assert [h.id for h in archived] == [item]
    assert item in {h.id for h in engine.recall(RecallRequest(question="Rome", tiers=(Tier.ARCHIVE,))).citations}
    assert item in {h.id for h in engine.list(ListRequest()).items}
    assert engine.move([item], Tier.ARCHIVE, "again").txn is None


def test_bad_log_arguments_are_refused_naming_the_field(engine: SQLiteEngine) -> None:
    engine.store(Document.of("x", MemoryMeta()))
    for call, field in (
        (lambda: engine.as_of(5), "lsn"),
        (lambda: engine.rollback(-1, "why"), "to_lsn"),
        (lambda: engine.retract([], "why"), "ids"),
        (lambda: engine.move(["a"], "attic", "why"), "tier"),
    ):
        with pytest.raises(InvalidRequest) as err:
            call()
        assert err.value.field == field
    assert engine.current_lsn() == 1


def test_a_file_written_before_the_log_gets_a_put_per_memory(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as engine:
        engine.store_many([_turn("My sister Ana lives in Porto."), Document.of("Refunds.", MemoryMeta())])
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        ids = {h.id for h in engine.export(ListRequest()).items}
    downgrade_to_v1(path)
    with SQLiteEngine(path) as engine:
        records = engine.log(0, 100).records
        assert {r.op for r in records} == {RecordOp.PUT} and {r.txn for r in records} == {1}
        assert ids < {r.id for r in records} and len(records) == len(ids) + 1  # the belief too
        _fold_matches(engine)
    conn = sqlite3.connect(path)
    assert int(conn.execute("PRAGMA user_version").fetchone()[0]) == schema.SCHEMA_VERSION
    conn.close()


def test_a_view_inside_a_transaction_reads_the_state_before_it(engine: SQLiteEngine) -> None:
    a, b = engine.store_many([Document.of("alpha", MemoryMeta()), Document.of("beta", MemoryMeta())])
    view = engine.as_of(1)  # inside the batch's transaction (LSNs 1-2)
    assert view.current_lsn() == 0 and view.list(ListRequest()).items == ()
    assert {h.id for h in engine.as_of(2).list(ListRequest()).items} == {a.id, b.id}


def test_belief_in_another_namespace_keeps_its_tier(engine: SQLiteEngine) -> None:
    ns = Namespace.agent("ann")
    turn = engine.store(
        Conversation(turns=(Turn(role=Role.USER, text="I moved to Lisbon."),), meta=MemoryMeta(namespace=ns))
    )
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    puts = [r for r in engine.log(0, 100).records if r.op is RecordOp.PUT and r.id != turn.id]
    assert (
        puts
        and {r.tier for r in puts} == {Tier.LONG}
        and {r.reason for r in puts} == {"built from agent:ann#conversation up to LSN 1"}
    )


@pytest.mark.parametrize("step", [log_checkpoint.COMPACT_STEP, 1])
def test_compacting_the_log_keeps_every_answer_after_the_checkpoint(
    engine: SQLiteEngine, step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19 item 7: records folded into a checkpoint change no ``as_of`` answer at or after it; compacting
    in steps (issue 12: one bounded background transaction each, never splitting a log transaction) gives the
    same checkpoint."""
    monkeypatch.setattr(log_checkpoint, "COMPACT_STEP", step)
    docs = [engine.store(Document.of(f"note number {n}", MemoryMeta())).id for n in range(6)]
    engine.retract(docs[:2], "wrong")
    engine.move([docs[2]], Tier.ARCHIVE, "old")
    engine.forget({"ids": [docs[3]]})
    engine.rollback(7, "undo the retraction")  # inside the retraction's transaction: the state before it
    engine.store(Document.of("note number 9", MemoryMeta()))
    engine.retract([docs[4]], "wrong too")

    def answers(lsn: int) -> tuple[object, ...]:
        view = engine.as_of(lsn)
        got = tuple((h.id, h.status, h.tier) for h in view.get(GetRequest(ids=tuple(docs))))
        return got, tuple(h.id for h in view.list(ListRequest(limit=50)).items), view.current_lsn()

    last = engine.current_lsn()
    cut = 9
    before = {lsn: answers(lsn) for lsn in range(cut, last + 1)}
    txns = {r.txn for r in engine.log(0, 100).records if r.lsn <= cut}
    assert engine.compact_log(cut) > 0
    steps = engine._db.stats.holds["compact"]
    assert steps.count == (1 if step > cut else len(txns)) + 1  # and the last finds nothing more
    assert {lsn: answers(lsn) for lsn in range(cut, last + 1)} == before
    assert engine.log(0, 100).records[0].lsn == cut + 1
    with pytest.raises(InvalidRequest) as err:
        engine.as_of(cut - 1)
    assert err.value.field == "lsn"
    with pytest.raises(InvalidRequest):
        engine.rollback(cut - 1, "too far back")
    base = engine._db.run(log_checkpoint.checkpoint)
    assert fold(engine._db.run(log.records), base=base) == engine._db.run(log.materialised)
    assert engine.compact_log(cut) == 0
    engine.rollback(cut, "back to the checkpoint")
    assert answers(engine.current_lsn())[0] == before[cut][0]


def test_a_build_publishes_its_beliefs_in_one_commit_and_a_stopped_one_none(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19 item 7: a build's new beliefs become visible together, at a commit naming its inputs' LSN."""
    engine.store_many([_turn(f"My sister number {n} lives in Porto.", f"t{n}") for n in range(4)])
    inputs = engine.current_lsn()
    monkeypatch.setattr(beliefs_store, "MERGE_BATCH", 1)  # one item per merge: several build transactions
    monkeypatch.setattr(beliefs_store, "LOCK_BUDGET_S", 0.0)

    def crash(*_: object, **__: object) -> int:
        raise RuntimeError("the worker died before its commit")

    monkeypatch.setattr(beliefs_store, "commit_build", crash)
    with pytest.raises(RuntimeError):
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    assert _beliefs(engine, "sister Porto") == []  # built, not committed: nothing visible
    assert engine.current_lsn() == inputs  # and nothing logged
    _fold_matches(engine)

    monkeypatch.undo()
    engine.store(_turn("My brother Rui lives in Braga.", "t9"))
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))  # the next build publishes both builds' beliefs
    puts = [r for r in engine.log(inputs + 1, 100).records if r.op is RecordOp.PUT]
    assert len(puts) >= 5 and len({r.txn for r in puts}) == 1
    assert {r.reason for r in puts} == {f"built from root#conversation up to LSN {inputs + 1}"}
    assert len(_beliefs(engine, "sister brother Porto Braga")) >= 5
    _fold_matches(engine)


def test_a_builds_changes_to_published_beliefs_wait_for_its_commit(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19 item 7: new evidence, a restore and a new belief of one build show together or not at all."""
    ana, rui = engine.store_many(
        [_turn("My sister Ana lives in Porto.", "a"), _turn("My brother Rui lives in Braga.", "b")]
    )
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    [rui_belief] = [b.id for b in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Rui")) if "Rui" in b.text]
    engine.retract([rui.id], "misheard")  # Rui's belief goes stale; stating it again restores it (rule 4)
    engine.store_many(
        [
            _turn("My sister Ana lives in Porto.", "c"),  # new evidence for a published belief
            _turn("My brother Rui lives in Braga.", "d"),  # a stale belief built again
            *(_turn(f"My cousin number {n} lives in Faro.", f"e{n}") for n in range(3)),  # new beliefs
        ]
    )

    def reads() -> tuple[object, ...]:
        lsns = range(1, engine.current_lsn() + 1)
        return (
            engine.current_lsn(),
            [
                (b.id, b.text, b.confidence, b.derived_from)
                for b in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=50))
            ],
            [
                (h.id, h.confidence, h.derived_from)
                for h in engine.fetch(FetchRequest(query="Ana Rui cousin", beliefs=10)).beliefs
            ],
            engine._db.run(log.materialised),  # every memory's status and tier, beliefs' included
            {
                n: [(b.id, b.derived_from) for b in engine.as_of(n).beliefs(BeliefsRequest(reach=Reach.subtree()))]
                for n in lsns
            },
        )

    before = reads()
    monkeypatch.setattr(beliefs_store, "MERGE_BATCH", 1)  # one item per build transaction
    monkeypatch.setattr(beliefs_store, "build_scope", partial(beliefs_store.build_scope, budget_s=0.0, gap_s=0.0))
    real = beliefs_store._write_round
    windows: list[int] = []

    def dies_in_the_third_window(*args: object, **kwargs: object) -> object:
        windows.append(1)
        if len(windows) == 3:
            raise RuntimeError("the worker died mid-build")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(beliefs_store, "_write_round", dies_in_the_third_window)
    with pytest.raises(RuntimeError):
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    staged = engine._db.run(lambda c: c.execute("SELECT count(*) FROM belief_staged").fetchone()[0])
    assert staged == 2  # Ana's new evidence and Rui's rebuild were written in the two windows that committed
    assert reads() == before  # and nothing of them shows
    _fold_matches(engine)

    monkeypatch.setattr(beliefs_store, "_write_round", real)
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))  # the next build completes the stopped one's work
    after = reads()
    assert engine._db.run(lambda c: c.execute("SELECT count(*) FROM belief_staged").fetchone()[0]) == 0
    new = engine.log(before[0], 100).records
    assert {r.txn for r in new} == {new[0].txn}  # one log transaction: the build's commit
    assert sorted(r.op.value for r in new) == ["put"] * 3 + ["restore"]
    [ana_belief] = [
        b for b in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Ana Porto")) if "Ana" in b.text
    ]
    assert len(ana_belief.derived_from) == 2 and ana.id in ana_belief.derived_from
    assert {after[3][r.id].status for r in new} == {MemoryStatus.LIVE}
    assert before[3][rui_belief].status is MemoryStatus.STALE
    # a past LSN serves the beliefs it served (their content is today's: ``as_of`` reads past status, not text)
    assert {n: {b for b, _ in after[4][n]} for n in before[4]} == {n: {b for b, _ in before[4][n]} for n in before[4]}
    _fold_matches(engine)


def test_a_forget_drops_the_staged_change_it_touches_and_the_next_build_commits_the_rest(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped build's staged change built on a forgotten turn never shows; its other staged changes do."""
    engine.store_many([_turn("My sister Ana lives in Porto.", "a"), _turn("My brother Rui lives in Braga.", "b")])
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    again_ana, again_rui = engine.store_many(
        [_turn("My sister Ana lives in Porto.", "c"), _turn("My brother Rui lives in Braga.", "d")]
    )
    monkeypatch.setattr(beliefs_store, "MERGE_BATCH", 1)
    monkeypatch.setattr(beliefs_store, "build_scope", partial(beliefs_store.build_scope, budget_s=0.0, gap_s=0.0))
    monkeypatch.setattr(beliefs_store, "commit_build", lambda *a, **k: 1 // 0)  # dies before its commit
    with pytest.raises(ZeroDivisionError):
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    staged = "SELECT count(*) FROM belief_staged"
    assert engine._db.run(lambda c: c.execute(staged).fetchone()[0]) == 2
    engine.forget({"ids": [again_ana.id]})
    assert engine._db.run(lambda c: c.execute(staged).fetchone()[0]) == 1  # Ana's change was built on it
    monkeypatch.undo()
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))  # nothing new: it finds the work left behind
    assert engine._db.run(lambda c: c.execute(staged).fetchone()[0]) == 0
    evidence = {b.text: b.derived_from for b in engine.beliefs(BeliefsRequest(reach=Reach.subtree()))}
    assert again_ana.id not in evidence["The user's sister Ana lives in Porto."]
    assert again_rui.id in evidence["The user's brother Rui lives in Braga."]
    _fold_matches(engine)
