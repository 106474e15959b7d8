"""ToolWrites: learn/forget never fail the caller; queued requests are scrubbed, ordered, cancelled, retried and
dead-lettered with their reason."""

from __future__ import annotations

import json
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from memory_core import Learning, ListRequest, MemoryMeta
from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.facts.model import content_hash, read_tags, user_tags
from memory_core.namespace import Reach
from memory_core.query import ForgetReport, ForgetTarget, StoreReceipt
from memory_core.tools import ToolScope
from memory_core.tools.outbox import MAX_ENTRIES, ToolOutbox
from memory_core.tools.writes import QUEUED_REMOVE, QUEUED_SAVE, Delivery, ToolWrites

AWS = "AKIAIOSFODNN7EXAMPLE"


class Flaky(ReferenceEngine):
    """An engine that can stop answering; records the texts it stored, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.up = True
        self.stored: list[str] = []

    def _check(self) -> None:
        if not self.up:
            raise EngineUnavailable("connection refused")

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        self._check()
        self.stored.append(item.render_text())
        return super()._store_with(item, options)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        self._check()
        return super()._forget(target)

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        self._check()
        return super()._forget_within(ids, reach)


@pytest.fixture
def engine() -> Flaky:
    return Flaky()


@pytest.fixture
def outbox(tmp_path: Path) -> ToolOutbox:
    return ToolOutbox(tmp_path / "var" / "tool_writes.db")


@pytest.fixture
def writes(engine: Flaky, outbox: ToolOutbox) -> ToolWrites:
    return ToolWrites(engine, outbox, ToolScope.at("agent:writer"))


def _texts(engine: ReferenceEngine) -> list[str]:
    return sorted(h.text for h in engine.list(ListRequest(limit=100)).items)


def test_with_an_engine_that_answers_learn_is_saved_at_once_and_scrubbed(writes: ToolWrites, engine: Flaky) -> None:
    ack = writes.learn(f"the deploy key is {AWS}", tags=["ops"])
    assert (ack.state, ack.message) == ("saved", "saved")
    (hit,) = engine.list(ListRequest(limit=10)).items
    assert hit.id == ack.id and hit.text == "the deploy key is [REDACTED]"
    assert str(hit.meta.namespace) == "agent:writer" and user_tags(hit.meta.tags) == ("ops",)
    # a fact's content hash is of the scrubbed text, never of the secret (issue 20)
    assert read_tags(hit.meta.tags).content_hash == content_hash("the deploy key is [REDACTED]")


def test_when_the_engine_does_not_answer_learn_is_queued_scrubbed_and_delivered_later(
    writes: ToolWrites, engine: Flaky, outbox: ToolOutbox
) -> None:
    engine.up = False
    ack = writes.learn(f"the deploy key is {AWS}")
    assert (ack.state, ack.message) == ("queued", QUEUED_SAVE)
    assert AWS.encode() not in outbox.path.read_bytes() and b"[REDACTED]" in outbox.path.read_bytes()
    assert writes.deliver().retried == 1 and _texts(engine) == []
    engine.up = True
    assert writes.deliver().delivered == 1
    assert _texts(engine) == ["the deploy key is [REDACTED]"] and outbox.pending() == []
    assert engine.list(ListRequest(limit=10)).items[0].id == ack.id


def test_requests_for_one_place_are_applied_in_the_order_they_were_made(writes: ToolWrites, engine: Flaky) -> None:
    engine.up = False
    writes.learn("first")
    engine.up = True
    assert writes.learn("second").state == "queued"  # the engine answers, but "first" is still waiting
    assert writes.forget(["nothing-by-this-id"]).state == "queued"
    assert writes.deliver().delivered == 3
    assert engine.stored == ["first", "second"]


def test_a_queued_forget_of_a_queued_learning_cancels_it(writes: ToolWrites, engine: Flaky, outbox: ToolOutbox) -> None:
    engine.up = False
    keep, drop = writes.learn("keep me"), writes.learn("drop me")
    ack = writes.forget([str(drop.id)])
    assert (ack.state, ack.forgotten) == ("cancelled", 1)
    assert [json.loads(e.payload)["text"] for e in outbox.pending()] == ["keep me"]
    engine.up = True
    writes.deliver()
    assert engine.stored == ["keep me"] and keep.id is not None


def test_forget_is_queued_when_the_engine_is_down_and_only_touches_what_the_reach_reads(
    writes: ToolWrites, engine: Flaky
) -> None:
    mine = writes.learn("mine").id
    other = engine.store(Learning(text="theirs", meta=MemoryMeta.model_validate({"namespace": "agent:editor"}))).id
    engine.up = False
    ack = writes.forget([str(mine), other])
    assert (ack.state, ack.message) == ("queued", QUEUED_REMOVE)
    engine.up = True
    assert writes.deliver().delivered == 1
    assert _texts(engine) == ["theirs"]
    assert writes.forget([other]).forgotten == 0  # out of reach: never removed


def test_a_request_that_keeps_failing_is_dead_lettered_with_its_reason_and_other_places_go_on(
    engine: Flaky, outbox: ToolOutbox
) -> None:
    writer = ToolWrites(engine, outbox, ToolScope.at("agent:writer"), max_attempts=3)
    editor = ToolWrites(engine, outbox, ToolScope.at("agent:editor"), max_attempts=3)
    engine.up = False
    writer.learn("stuck")
    writer.learn("behind it")
    editor.learn("the editor's")
    assert [writer.deliver().retried for _ in range(2)] == [2, 2]  # one per place: a place waits behind its first
    engine.up = True
    # the editor's is delivered while the writer's first fails a third time: then it is given up on
    calls = {"n": 0}
    original = engine._store_with

    def fail_stuck(item: AnyItem, options: WriteOptions) -> StoreReceipt:
        if item.render_text() == "stuck":
            calls["n"] += 1
            raise EngineUnavailable("still refused")
        return original(item, options)

    engine._store_with = fail_stuck  # type: ignore[method-assign]
    report = writer.deliver()
    assert (report.delivered, report.dead) == (2, 1) and calls["n"] == 1
    (letter,) = outbox.dead()
    assert letter.attempts == 3 and "gave up after 3 attempts" in letter.reason and "still refused" in letter.reason
    assert sorted(engine.stored) == ["behind it", "the editor's"]


def test_a_payload_that_can_never_be_applied_is_dead_lettered_at_once(writes: ToolWrites, outbox: ToolOutbox) -> None:
    outbox.put(writes.partition, "learn", '{"type": "learning", "text": ""}', "x")
    assert writes.deliver().dead == 1
    assert outbox.dead()[0].reason.startswith("refused: ")


def test_bad_requests_are_refused_and_nothing_is_queued(writes: ToolWrites, engine: Flaky, outbox: ToolOutbox) -> None:
    engine.up = False
    for call in (
        lambda: writes.learn("   "),
        lambda: writes.learn("x", kind="rumour"),
        lambda: writes.learn("x", confidence=1.5),
        lambda: writes.forget([]),
        lambda: writes.forget([" "]),
    ):
        with pytest.raises(InvalidRequest):
            call()
    assert outbox.pending() == []


def test_a_full_outbox_refuses_more_and_the_file_is_owner_only(writes: ToolWrites, outbox: ToolOutbox) -> None:
    for i in range(MAX_ENTRIES):
        outbox.put(writes.partition, "forget", json.dumps({"ids": [f"id{i}"], "reach": None}))
    with pytest.raises(InvalidRequest) as err:
        outbox.put(writes.partition, "forget", json.dumps({"ids": ["one-more"], "reach": None}))
    assert err.value.field == "outbox"
    outbox.put("agent:other", "forget", json.dumps({"ids": ["x"], "reach": None}))  # another place has room
    assert stat.S_IMODE(outbox.path.stat().st_mode) == 0o600


def test_the_default_outbox_lives_under_the_var_dir(tmp_path: Path) -> None:
    from memory_core.settings import Settings
    from memory_core.tools.outbox import open_tool_outbox

    box = open_tool_outbox(Settings(_env_file=None, var_dir=tmp_path / "v"))
    assert box.path == tmp_path / "v" / "tool_writes.db" and box.pending() == []


def test_one_deliverer_at_a_time(writes: ToolWrites, engine: Flaky, outbox: ToolOutbox) -> None:
    engine.up = False
    writes.learn("waiting")
    engine.up = True
    with outbox.delivering() as mine:
        assert mine
        assert writes.deliver() == Delivery()  # another deliverer holds it: nothing applied, nothing counted
    assert writes.deliver().delivered == 1
