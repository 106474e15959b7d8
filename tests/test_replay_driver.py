"""Replaying through AgentMemory: one agent per LoCoMo speaker, pre_turn and post_turn per turn, jobs submitted."""

from __future__ import annotations

from memory_core import ItemKind, ListRequest, MetaFilter, Reach, Role
from memory_core.engines.reference import ReferenceEngine
from memory_core.lifecycle import BuildBeliefs, MemoryLayout
from memory_core.lifecycle.policy import RecallPolicy
from memory_core.replay import parse_jsonl, parse_locomo
from memory_core.replay.driver import Replayer, agent_id_for


def _locomo(turns: int) -> dict:
    session = [
        {"speaker": "Ann" if i % 2 == 0 else "Bo", "dia_id": f"D1:{i + 1}", "text": f"turn number {i + 1}"}
        for i in range(turns)
    ]
    return {"sample_id": "s", "conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": session}}


def test_each_locomo_turn_is_the_speakers_user_turn_and_the_listeners_reply() -> None:
    engine, jobs = ReferenceEngine(), []
    report = Replayer(engine, MemoryLayout(), jobs.append).replay(parse_locomo(_locomo(4)))
    assert report.turns == 4 and report.agents == ["ann", "bo"]
    items = engine.list(ListRequest(filter=MetaFilter(kinds=(ItemKind.CONVERSATION,)), limit=100)).items
    assert len(items) == 8  # each turn logged twice: user at the speaker, assistant at the listener
    ann = [h for h in items if h.meta.agent_id == "ann"]
    assert [h.text.split(":")[0] for h in ann] == ["user", "assistant", "user", "assistant"]
    assert all(h.meta.observed_at is not None for h in items)
    user_turns = [h for h in items if h.text.startswith("user:")]
    assert {h.meta.observed_actor.name for h in user_turns if h.meta.observed_actor} == {"Ann", "Bo"}
    assert sorted(set(report.refs.values())) == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert len(report.refs) == 8


def test_post_turn_jobs_are_submitted_and_each_agent_gets_a_final_history_build() -> None:
    engine, jobs = ReferenceEngine(), []
    policy = RecallPolicy(build_beliefs_every=2)
    report = Replayer(engine, MemoryLayout(), jobs.append, policy=policy).replay(parse_locomo(_locomo(8)))
    assert report.jobs == len(jobs)
    assert all(isinstance(j, BuildBeliefs) for j in jobs)
    # ann and bo each hear 4 replies (indices 0..3 at the listener): builds after the 2nd and 4th, plus a final one
    final = {j.request.reach.at for j in jobs[-2:]}
    assert final == {MemoryLayout().conversations("ann"), MemoryLayout().conversations("bo")}
    assert len(jobs) == 2 * 2 + 2


def test_chat_formats_use_one_agent_user_as_pre_turn_assistant_as_post_turn() -> None:
    engine = ReferenceEngine()
    lines = [
        '{"thread": "t", "role": "user", "content": "I live in Oslo"}',
        '{"thread": "t", "role": "assistant", "content": "Noted"}',
    ]
    report = Replayer(engine, MemoryLayout("team:x"), lambda j: None, agent_id="helper").replay(parse_jsonl(lines))
    listed = engine.list(ListRequest(filter=MetaFilter(reach=Reach.subtree("team:x")))).items
    assert [h.meta.turns.first for h in listed if h.meta.turns] == [0, 1]
    assert {h.meta.agent_id for h in listed} == {"helper"}
    assert report.agents == ["helper"] and report.refs == {}
    assert [Role.USER.value, Role.ASSISTANT.value] == [h.text.split(":")[0] for h in listed]


def test_replaying_twice_is_a_replay() -> None:
    engine = ReferenceEngine()
    conv = parse_locomo(_locomo(3))
    Replayer(engine, MemoryLayout(), lambda j: None).replay(conv)
    held = len(engine)
    Replayer(engine, MemoryLayout(), lambda j: None).replay(conv)
    assert len(engine) == held


def test_agent_ids_are_valid_segments() -> None:
    assert agent_id_for("Caroline") == "caroline"
    assert agent_id_for("Mary Ann") == "mary-ann"
    assert agent_id_for("Zoë!") != "zoë!"


def test_people_of_one_locomo_sample_never_hear_another_samples_turns() -> None:
    first = _locomo(2)
    second = {
        "sample_id": "t",
        "conversation": {
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Cy", "dia_id": "D1:1", "text": "hello from another conversation"},
                {"speaker": "Di", "dia_id": "D1:2", "text": "hi Cy"},
            ],
        },
    }
    engine = ReferenceEngine()
    report = Replayer(engine, MemoryLayout(), lambda j: None).replay(parse_locomo([first, second]))
    items = engine.list(ListRequest(limit=100)).items
    heard = {(h.meta.agent_id, h.text) for h in items}
    assert ("ann", "assistant: hello from another conversation") not in heard
    assert ("di", "assistant: hello from another conversation") in heard
    assert len(items) == 8 and sorted(report.agents) == ["ann", "bo", "cy", "di"]
