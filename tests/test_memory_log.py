"""Memory as a log (seed 002) on the reference engine, the executable spec: records, fold, retract, rollback."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from memory_core import (
    ConsolidateReceipt,
    ConsolidateRequest,
    Document,
    FetchPage,
    FetchRequest,
    ForgetReport,
    ForgetTarget,
    GetRequest,
    Hit,
    InvalidRequest,
    Learning,
    LearningKind,
    ListPage,
    ListRequest,
    MemoryMeta,
    Reach,
    RecallAnswer,
    RecallRequest,
    StoreReceipt,
    Unsupported,
)
from memory_core.conformance import FAULT_CHECKS, CheckStatus, run, run_faults
from memory_core.conformance.faults import LOG_FAULTS
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.engine import AnyItem, MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.lifecycle import LEARNINGS_HEADING, AgentMemory, MemoryLayout
from memory_core.memory_log import Held, LogRecord, MemoryStatus, RecordOp, Tier, compensation, fold, settled

TODAYS_DESCRIPTORS = (
    '{"id":"reference","label":"Reference (in-memory)","description":"In-memory calibration engine of the contract;'
    ' state lives in the process.","hosted":false,"needs_endpoint":false,"needs_key":false,'
    '"fetch_modes":["keyword","vector","hybrid"],"consolidation":"on_demand"}',
    '{"id":"x","label":"X","description":"","hosted":true,"needs_endpoint":true,"needs_key":true,'
    '"default_endpoint":"https://x","fetch_modes":["keyword"],"consolidation":"scheduled"}',
)
"""Descriptor JSON as memory-core wrote it before the log capabilities existed."""
BUILD = ConsolidateRequest(reach=Reach.subtree())


class NoLogEngine(ReferenceEngine):
    """The reference engine declaring neither capability: every log call must be refused before any hook runs."""

    def descriptor(self) -> EngineDescriptor:
        return super().descriptor().model_copy(update={"log": False, "tiers": False})


def doc(text: str) -> Document:
    return Document.of(text, MemoryMeta())


def statuses(engine: ReferenceEngine, *ids: str) -> list[MemoryStatus | None]:
    by_id = {hit.id: hit.status for hit in engine.get(GetRequest(ids=ids))}
    return [by_id.get(i) for i in ids]


def served(engine: ReferenceEngine, query: str, **extra: object) -> list[str]:
    return [hit.id for hit in engine.fetch(FetchRequest.model_validate({"query": query, "limit": 50, **extra})).hits]


def belief_of(engine: ReferenceEngine, source: str) -> str:
    beliefs = [h.id for h in engine.list(ListRequest(limit=200)).items if h.kind.value == "learning"]
    built = [b for b in beliefs if any(r.id == b for r in engine.history(b))]
    for item_id in built:
        item = next(i for i in engine.snapshot() if i.id == item_id)
        if isinstance(item, Learning) and item.evidence == source:
            return item_id
    raise AssertionError(f"no belief built on {source}")


# descriptor ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", TODAYS_DESCRIPTORS)
def test_todays_descriptor_json_reads_and_writes_back_unchanged(text: str) -> None:
    descriptor = EngineDescriptor.model_validate_json(text)
    assert not descriptor.log and not descriptor.tiers
    assert json.loads(descriptor.to_json()) == json.loads(text)


def test_a_capability_this_version_does_not_know_reads_as_not_offered() -> None:
    data = {**json.loads(TODAYS_DESCRIPTORS[1]), "log": True, "vectors_v9": True}
    descriptor = EngineDescriptor.model_validate(data)
    assert descriptor.log and "vectors_v9" not in descriptor.to_json()
    with pytest.raises(InvalidRequest) as err:
        EngineDescriptor.model_validate({**data, "log": "yes"})
    assert err.value.field == "log"


def test_the_reference_engine_declares_the_log_and_tiers_in_its_json() -> None:
    data = json.loads(ReferenceEngine().descriptor().to_json())
    assert data["log"] is True and data["tiers"] is True
    assert EngineDescriptor.model_validate(data) == ReferenceEngine().descriptor()


def test_an_engine_without_the_capability_refuses_every_log_call_as_unsupported() -> None:
    engine = NoLogEngine()
    item_id = engine.store(doc("a plain note")).id
    calls = [
        engine.current_lsn,
        lambda: engine.log(0, 10),
        lambda: engine.as_of(0),
        lambda: engine.retract([item_id], "wrong"),
        lambda: engine.rollback(0, "undo"),
        lambda: engine.history(item_id),
        lambda: engine.move([item_id], "archive", "old"),
        lambda: engine.fetch({"query": "plain", "tiers": ["archive"]}),
        lambda: engine.recall({"question": "plain", "tiers": ["archive"]}),
    ]
    for call in calls:
        with pytest.raises(Unsupported):
            call()
    assert statuses(engine, item_id) == [MemoryStatus.LIVE]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda e, i: e.log(-1, 10), "since"),
        (lambda e, i: e.log(0, 0), "limit"),
        (lambda e, i: e.log(0, 1001), "limit"),
        (lambda e, i: e.as_of(99), "lsn"),
        (lambda e, i: e.as_of(True), "lsn"),
        (lambda e, i: e.retract([], "wrong"), "ids"),
        (lambda e, i: e.retract([i], "  "), "reason"),
        (lambda e, i: e.rollback(99, "undo"), "to_lsn"),
        (lambda e, i: e.rollback(0, ""), "reason"),
        (lambda e, i: e.history(" "), "id"),
        (lambda e, i: e.move([i], "attic", "old"), "tier"),
    ],
)
def test_bad_log_requests_name_the_field_and_change_nothing(call: object, field: str) -> None:
    engine = ReferenceEngine()
    item_id = engine.store(doc("a plain note")).id
    before = engine.log(0, 100)
    with pytest.raises(InvalidRequest) as err:
        call(engine, item_id)  # type: ignore[operator]
    assert err.value.field == field
    assert engine.log(0, 100) == before


# records and the fold --------------------------------------------------------------------------------------
def test_every_change_is_a_numbered_record_and_history_shows_one_memory() -> None:
    engine = ReferenceEngine()
    assert engine.current_lsn() == 0
    first = engine.store(doc("alpha note")).id
    second = engine.store(doc("beta note")).id
    assert engine.store(doc("alpha note")).replayed and engine.current_lsn() == 2
    page = engine.log(0, 1)
    assert [(r.lsn, r.op, r.id) for r in page.records] == [(1, RecordOp.PUT, first)]
    rest = engine.log(page.next_since or 0, 10)
    assert [(r.lsn, r.id) for r in rest.records] == [(2, second)] and rest.next_since is None
    assert rest.records[0].txn > page.records[0].txn
    engine.retract([first], "wrong")
    assert [(r.op, r.status) for r in engine.history(first)] == [
        (RecordOp.PUT, MemoryStatus.LIVE),
        (RecordOp.RETRACT, MemoryStatus.RETRACTED),
    ]
    assert engine.history("never-seen") == ()


def test_a_batch_is_one_transaction_and_a_batch_of_replays_writes_none() -> None:
    engine = ReferenceEngine()
    engine.store_many([doc("one"), doc("two"), doc("one")])
    assert [(r.lsn, r.txn) for r in engine.log(0, 10).records] == [(1, 1), (2, 1)]
    engine.store_many([doc("one"), doc("two")])
    assert engine.current_lsn() == 2
    engine.store(doc("three"))
    assert engine.log(2, 10).records[0].txn == 2


def test_the_materialised_state_is_always_the_fold_of_the_log() -> None:
    engine = ReferenceEngine()
    a = engine.store(doc("Alice moved to Lyon. She likes trains.")).id
    b = engine.store(doc("Bob works at the bakery.")).id
    engine.consolidate(BUILD)
    mark = engine.current_lsn()
    engine.retract([a], "wrong city")
    engine.move([b], Tier.ARCHIVE, "old")
    engine.forget(ForgetTarget(ids=(b,)))
    engine.rollback(mark, "undo")
    engine.store(doc("Bob works at the bakery."))
    records = engine.log(0, 1000).records
    assert fold(records) == engine.materialised()
    assert [r.lsn for r in records] == list(range(1, len(records) + 1))
    for lsn in range(len(records) + 1):
        view = engine.as_of(lsn)
        assert view.materialised() == {i: h for i, h in fold(records, lsn).items() if i in view.materialised()}


# retract, stale, restore, rollback ---------------------------------------------------------------------------
def test_retract_marks_the_memory_and_everything_built_on_it_stale_in_one_transaction() -> None:
    engine = ReferenceEngine()
    source = engine.store(doc("The user lives in Lyon.")).id
    engine.consolidate(BUILD)
    belief = belief_of(engine, source)
    note = engine.store(Learning(text="Plan trips from Lyon.", kind=LearningKind.FACT, evidence=belief)).id
    change = engine.retract([source], "the user never lived in Lyon")
    assert change.ids(RecordOp.RETRACT) == [source] and change.ids(RecordOp.STALE) == [belief, note]
    assert {r.txn for r in change.records} == {change.txn}
    assert statuses(engine, source, belief, note) == [MemoryStatus.RETRACTED, MemoryStatus.STALE, MemoryStatus.STALE]
    assert served(engine, "Lyon") == []
    assert [h.id for h in engine.list().items] == []
    assert "Nothing stored" in engine.recall(RecallRequest(question="Lyon")).answer
    assert engine.retract([source], "again").txn is None


def test_a_rebuild_deriving_the_same_belief_restores_it() -> None:
    engine = ReferenceEngine()
    source = engine.store(doc("The user lives in Lyon.")).id
    engine.consolidate(BUILD)
    belief = belief_of(engine, source)
    engine.retract([source], "unsure")
    engine.consolidate(BUILD)
    assert statuses(engine, belief) == [MemoryStatus.STALE]  # a retracted source builds nothing
    assert not engine.store(doc("The user lives in Lyon.")).replayed  # stated again: restored
    engine.consolidate(BUILD)
    assert statuses(engine, source, belief) == [MemoryStatus.LIVE, MemoryStatus.LIVE]
    assert engine.history(belief)[-1].op is RecordOp.RESTORE
    assert len(engine.snapshot()) == 2


def test_rollback_of_a_retraction_brings_both_back_and_is_itself_rolled_back_the_same_way() -> None:
    engine = ReferenceEngine()
    source = engine.store(doc("The user lives in Lyon.")).id
    engine.consolidate(BUILD)
    belief = belief_of(engine, source)
    before = engine.current_lsn()
    engine.retract([source], "unsure")
    retracted = engine.current_lsn()
    change = engine.rollback(before, "it was right")
    assert sorted(change.ids(RecordOp.RESTORE)) == sorted([source, belief]) and not change.unrecoverable
    assert statuses(engine, source, belief) == [MemoryStatus.LIVE, MemoryStatus.LIVE]
    assert sorted(served(engine, "Lyon")) == sorted([source, belief])
    engine.rollback(retracted, "no, it was wrong")
    assert statuses(engine, source, belief) == [MemoryStatus.RETRACTED, MemoryStatus.STALE]
    assert engine.rollback(engine.current_lsn(), "nothing").txn is None


def test_an_lsn_inside_a_transaction_reads_and_rolls_back_as_the_state_before_it() -> None:
    engine = ReferenceEngine()
    source = engine.store(doc("The user lives in Lyon.")).id
    engine.consolidate(BUILD)
    belief = belief_of(engine, source)
    change = engine.retract([source], "wrong")
    inside = change.records[0].lsn  # the retraction, before the belief's stale record of the same transaction
    assert fold(engine.log(0, 100).records, inside) == fold(engine.log(0, 100).records, inside - 1)
    assert sorted(served(engine.as_of(inside), "Lyon")) == sorted([source, belief])
    engine.rollback(inside, "undo half a transaction")
    assert statuses(engine, source, belief) == [MemoryStatus.LIVE, MemoryStatus.LIVE]


def test_a_rollback_retracts_what_was_written_after_its_target_keeping_the_content() -> None:
    engine = ReferenceEngine()
    engine.store(doc("kept note"))
    mark = engine.current_lsn()
    later = engine.store(doc("later note")).id
    assert engine.rollback(mark, "undo").ids(RecordOp.RETRACT) == [later]
    assert served(engine, "later") == [] and statuses(engine, later) == [MemoryStatus.RETRACTED]


# forget and erase ------------------------------------------------------------------------------------------
def test_forget_leaves_a_tombstone_without_text_that_no_read_or_rollback_brings_back() -> None:
    engine = ReferenceEngine()
    secret = "my card number is 4111"
    source = engine.store(doc(f"{secret}.")).id
    engine.consolidate(BUILD)
    belief = belief_of(engine, source)
    before = engine.current_lsn()
    assert engine.forget(ForgetTarget(ids=(source,))).forgotten == 1
    tombs = [r for r in engine.log(before, 100).records if r.op is RecordOp.TOMBSTONE]
    assert [r.id for r in tombs] == [source, belief]  # the belief built only on it goes too
    assert secret not in engine.log(0, 100).to_json()
    view = engine.as_of(before)
    assert view.get(GetRequest(ids=(source, belief))) == [] and served(view, "card") == []
    change = engine.rollback(before, "undo the forget")
    assert sorted(change.unrecoverable) == sorted([source, belief])
    assert change.note is not None and "cannot come back" in change.note
    assert engine.get(GetRequest(ids=(source,))) == [] and engine.is_empty()


def test_erase_leaves_tombstones_too() -> None:
    engine = ReferenceEngine()
    item_id = engine.store(doc("erase me")).id
    engine.erase({"reach": {"at": "root"}, "kinds": ["document"]})
    assert engine.history(item_id)[-1].op is RecordOp.TOMBSTONE and engine.is_empty()
    assert engine.history(item_id)[-1].status is None


# as_of -----------------------------------------------------------------------------------------------------
def test_as_of_is_a_read_only_view_of_the_past() -> None:
    engine = ReferenceEngine()
    old = engine.store(doc("old fact")).id
    mark = engine.current_lsn()
    new = engine.store(doc("new fact")).id
    engine.retract([old], "wrong")
    view = engine.as_of(mark)
    assert served(view, "fact") == [old] and view.current_lsn() == mark
    assert [h.id for h in view.list().items] == [old]
    assert view.get(GetRequest(ids=(old, new)))[0].status is MemoryStatus.LIVE
    assert view.recall(RecallRequest(question="fact")).citations[0].id == old
    assert view.beliefs({"reach": {"at": "root"}, "limit": 5}) == []
    with pytest.raises(Unsupported):
        view.store(doc("a write into the past"))
    with pytest.raises(Unsupported):
        view.retract([old], "no")
    assert engine.as_of(0).list().items == ()


# tiers -----------------------------------------------------------------------------------------------------
def test_new_memories_are_short_built_beliefs_long_and_archive_is_read_only_on_request() -> None:
    engine = ReferenceEngine()
    source = engine.store(doc("The user lives in Lyon.")).id
    engine.consolidate(BUILD)
    belief = belief_of(engine, source)
    tiers = {h.id: h.tier for h in engine.get(GetRequest(ids=(source, belief)))}
    assert tiers == {source: Tier.SHORT, belief: Tier.LONG}
    engine.move([source], "archive", "policy")
    assert served(engine, "Lyon") == [belief]
    assert served(engine, "Lyon", tiers=["archive"]) == [source]
    assert [c.id for c in engine.recall({"question": "Lyon", "tiers": ["archive"]}).citations] == [source]
    assert source in [h.id for h in engine.list().items]
    assert engine.materialised()[source] == Held(MemoryStatus.LIVE, Tier.ARCHIVE)


def test_log_records_carry_no_text_field() -> None:
    assert "text" not in LogRecord.model_fields and "body" not in LogRecord.model_fields


# the "Must show" ---------------------------------------------------------------------------------
def test_scenario_a_retracted_source_turn_takes_its_belief_and_rollback_restores_it() -> None:
    engine = ReferenceEngine()
    turn = engine.store(
        {
            "type": "conversation",
            "turns": [{"role": "user", "text": "My sister Ana lives in Porto. Remember that."}],
            "meta": {},
        }
    ).id
    engine.consolidate(BUILD)
    belief = belief_of(engine, turn)
    assert belief in served(engine, "Ana Porto")
    before = engine.current_lsn()
    engine.retract([turn], "the user misspoke")
    assert statuses(engine, turn, belief) == [MemoryStatus.RETRACTED, MemoryStatus.STALE]
    assert served(engine, "Ana Porto") == []
    past = engine.as_of(before)
    assert belief in [c.id for c in past.recall(RecallRequest(question="Where does Ana live?")).citations]
    engine.rollback(before, "it was right after all")
    assert belief in served(engine, "Ana Porto")
    assert [r.op for r in engine.history(belief)] == [RecordOp.PUT, RecordOp.STALE, RecordOp.RESTORE]


# conformance -----------------------------------------------------------------------------------------------
def test_the_log_checks_skip_and_the_log_faults_are_left_out_for_an_engine_without_the_log() -> None:
    report = run(NoLogEngine())
    assert report.passed, report.render()
    skipped = {r.name for r in report.results if r.status is CheckStatus.SKIPPED}
    assert {"log", "retract", "as_of", "tombstone", "tiers"} <= skipped
    assert run_faults(NoLogEngine, tuple(LOG_FAULTS)) == []
    caught = run_faults(ReferenceEngine, tuple(LOG_FAULTS))
    assert [(r.fault, r.caught_by) for r in caught] == [(f, FAULT_CHECKS[f]) for f in LOG_FAULTS]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_histories_keep_state_equal_to_the_fold_and_serve_only_live_memories(seed: int) -> None:
    rng = random.Random(seed)
    engine = ReferenceEngine()
    texts = [f"Fact {n} about topic{n % 3}." for n in range(8)]
    for _ in range(60):
        held = list(engine.materialised())
        op = rng.choice(["store", "store", "build", "retract", "rollback", "move", "forget"])
        if op == "store":
            engine.store(doc(rng.choice(texts)))
        elif op == "build":
            engine.consolidate(BUILD)
        elif op == "rollback":
            engine.rollback(rng.randint(0, engine.current_lsn()), "random undo")
        elif held and op == "retract":
            engine.retract(rng.sample(held, 1), "random retraction")
        elif held and op == "move":
            engine.move(rng.sample(held, 1), rng.choice(list(Tier)), "random move")
        elif held and op == "forget":
            engine.forget(ForgetTarget(ids=(rng.choice(held),)))
        records = engine.log(0, 1000).records
        assert fold(records) == engine.materialised()
        live = {i for i, h in engine.materialised().items() if h.status is MemoryStatus.LIVE and h.tier != Tier.ARCHIVE}
        assert set(served(engine, "fact topic0 topic1 topic2")) <= live
        state = engine.materialised()
        for item in engine.snapshot():  # nothing live stands on a memory that no longer holds
            source = item.evidence if isinstance(item, Learning) else None
            if state[item.id].status is MemoryStatus.LIVE and source in state:
                assert state[source].status is MemoryStatus.LIVE, (item.id, source)
    for lsn in range(0, engine.current_lsn() + 1, 7):
        view = engine.as_of(lsn)
        assert view.materialised().items() <= fold(engine.log(0, 1000).records, lsn).items()


def test_the_standard_pack_serves_only_live_memories_outside_the_archive() -> None:
    root = "team:acme/project:support"
    engine = ReferenceEngine()
    facts = ["Releases ship on Fridays.", "Releases ship on Mondays.", "Releases ship on Sundays."]
    ids = [engine.store(Learning(text=t, meta=MemoryMeta().at(root))).id for t in facts]
    engine.retract([ids[1]], "wrong day")
    engine.move([ids[2]], Tier.ARCHIVE, "old policy")
    memory = AgentMemory(engine, MemoryLayout(root), "writer")
    pack = memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "When do releases ship?"}).pack
    learned = [h.text for s in pack.sections if s.heading == LEARNINGS_HEADING for h in s.hits]
    assert learned == [facts[0]]


# the pure parts --------------------------------------------------------------------------------------------
def _rec(lsn: int, txn: int, op: RecordOp, item_id: str, tier: Tier | None = None) -> LogRecord:
    status = {RecordOp.PUT: MemoryStatus.LIVE, RecordOp.RETRACT: MemoryStatus.RETRACTED}.get(op)
    return LogRecord(lsn=lsn, txn=txn, op=op, id=item_id, status=status, tier=tier)


def test_settled_rounds_an_lsn_inside_a_transaction_down_to_the_one_before() -> None:
    log = [_rec(1, 1, RecordOp.PUT, "a"), _rec(2, 2, RecordOp.PUT, "b"), _rec(3, 2, RecordOp.PUT, "c")]
    assert [settled(log, n) for n in range(5)] == [0, 1, 1, 3, 3]
    assert list(fold(log, 2)) == ["a"] and list(fold(log)) == ["a", "b", "c"]


def test_fold_ignores_records_for_memories_it_does_not_hold_and_a_tombstone_ends_one() -> None:
    log = [
        _rec(1, 1, RecordOp.RETRACT, "ghost"),
        _rec(2, 2, RecordOp.PUT, "a", Tier.LONG),
        _rec(3, 3, RecordOp.MOVE, "a", Tier.ARCHIVE),
        _rec(4, 4, RecordOp.TOMBSTONE, "a"),
        _rec(5, 5, RecordOp.PUT, "a"),
    ]
    assert fold(log, 3) == {"a": Held(MemoryStatus.LIVE, Tier.ARCHIVE)}
    assert fold(log) == {"a": Held(MemoryStatus.LIVE, Tier.SHORT)}


def test_compensation_restores_moves_and_retracts_and_names_only_forgotten_memories_unrecoverable() -> None:
    live, stale = MemoryStatus.LIVE, MemoryStatus.STALE
    past = {"a": Held(live, Tier.SHORT), "b": Held(live, Tier.LONG), "gone": Held(live, Tier.SHORT)}
    now = {"a": Held(MemoryStatus.RETRACTED, Tier.ARCHIVE), "b": Held(stale, Tier.LONG), "new": Held(live, Tier.SHORT)}
    ops, unrecoverable = compensation(past, now, forgotten={"gone"})
    assert [(op, i) for op, i, _ in ops] == [
        (RecordOp.MOVE, "a"),
        (RecordOp.RESTORE, "a"),
        (RecordOp.RESTORE, "b"),
        (RecordOp.RETRACT, "new"),
    ]
    assert unrecoverable == ["gone"]
    assert compensation(past, past, set()) == ([], [])


class _Forwarding(MemoryEngine):
    """A wrapper (like ``ScrubbingEngine``) that copies the inner descriptor and forwards what it lacks."""

    def __init__(self, inner: MemoryEngine) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def descriptor(self) -> EngineDescriptor:
        return self.inner.descriptor()

    def health(self) -> EngineHealth:
        return self.inner.health()

    def _recall(self, request: RecallRequest) -> RecallAnswer:
        return self.inner.recall(request)

    def _fetch(self, request: FetchRequest) -> FetchPage:
        return self.inner.fetch(request)

    def _store(self, item: AnyItem) -> StoreReceipt:
        return self.inner.store(item)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        return self.inner.forget(target)

    def _list(self, request: ListRequest) -> ListPage:
        return self.inner.list(request)

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        return self.inner.consolidate(request)

    def _get(self, request: GetRequest) -> list[Hit]:
        return self.inner.get(request)


def test_a_wrapper_forwarding_what_it_lacks_forwards_the_log_and_conforms() -> None:
    wrapper = _Forwarding(ReferenceEngine())
    report = run(wrapper)
    assert report.passed, report.render()
    assert report.result("retract").status is CheckStatus.PASSED
    item_id = wrapper.store(doc("through the wrapper")).id
    assert [r.op for r in wrapper.history(item_id)] == [RecordOp.PUT]
    with pytest.raises(InvalidRequest):  # the wrapper's public method still validates
        wrapper.retract([], "no ids")
