"""AgentMemory, RecallPolicy and the standard sections (seed 000, reference §4.3)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from _lifecycle_doubles import Recording, Rendezvous, stored

from memory_core.consolidation import Consolidation, WaitFor
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineError, EngineUnavailable, InvalidRequest
from memory_core.items import Conversation, Document, Learning, Role, ToolCallRef, Turn
from memory_core.lifecycle import (
    BRAIN_HEADING,
    BRAIN_SCOPES_PER_TURN,
    CONVERSATION_SCOPES_PER_TURN,
    HISTORY_HEADING,
    LEARNINGS_HEADING,
    SUMMARY_HEADING,
    TEAM_HEADING,
    THREAD_HEADING,
    AgentMemory,
    Brain,
    BrainDocument,
    BuildBeliefs,
    CoreScope,
    MemoryLayout,
    OutcomeKind,
    PostTurn,
    PreTurn,
    RecallPolicy,
    standard_sections,
)
from memory_core.lifecycle.policy import (
    COMPACTION_INSTRUCTIONS,
    COMPACTION_QUESTION,
    compaction_gist,
    summary_section,
)
from memory_core.limits import CONSOLIDATED_TAG
from memory_core.meta import ItemKind, MemoryMeta, ObservedActor, SourceKind, SourceRef, TurnRange
from memory_core.namespace import Namespace, Reach
from memory_core.query import RecallRequest
from memory_core.recall.types import AnswerQuery, FetchQuery

ROOT = "team:acme/project:support"
AT = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)


@pytest.fixture
def layout() -> MemoryLayout:
    return MemoryLayout(ROOT)


@pytest.fixture
def engine() -> Recording:
    return Recording()


def headings(pack) -> list[str]:
    return [s.heading for s in pack.sections]


def texts(pack, heading: str) -> list[str]:
    for section in pack.sections:
        if section.heading == heading:
            return [h.text for h in section.hits]
    return []


# RecallPolicy and standard sections ---------------------------------------------------------------------
def test_recall_policy_defaults_follow_reference_4_3():
    policy = RecallPolicy()
    assert (policy.budget_tokens, policy.learnings_limit, policy.brain_limit) == (1200, 8, 6)
    assert (policy.history_limit, policy.team_limit, policy.build_beliefs_every) == (6, 3, 10)
    assert BRAIN_SCOPES_PER_TURN == 4
    # the one deviation: §4.3 has no relevance floor; memory-core's default is 0.5 (DEFAULT_MIN_RELEVANCE)
    assert policy.min_relevance == 0.5 and RecallPolicy.from_settings().min_relevance == 0.5


def test_recall_policy_refuses_a_negative_limit_naming_the_field():
    with pytest.raises(InvalidRequest) as err:
        RecallPolicy(team_limit=-1)
    assert err.value.field == "team_limit"


def test_standard_sections_in_priority_order_with_their_filters(layout):
    core = CoreScope.new("team:acme", "Company")
    sections = standard_sections(layout, "writer", RecallPolicy(), [core])
    assert [s.heading for s in sections] == [
        LEARNINGS_HEADING,
        "Company",
        BRAIN_HEADING,
        HISTORY_HEADING,
        TEAM_HEADING,
    ]
    learnings, company, brain, history, team = sections
    assert all(isinstance(s.query, FetchQuery) and s.query.query is None for s in sections)
    assert learnings.filter.reach == Reach.subtree(ROOT) and learnings.filter.kinds == (ItemKind.LEARNING,)
    assert learnings.limit == 8
    assert company.filter.reach == Reach.exact("team:acme")
    assert company.filter.kinds == (ItemKind.LEARNING, ItemKind.DOCUMENT) and company.limit == 6
    assert brain.filter.reach == Reach.subtree(ROOT) and brain.filter.kinds == (ItemKind.DOCUMENT,)
    assert brain.max_scopes == 4 and brain.limit == 6
    assert history.filter.reach == Reach.subtree(f"{ROOT}/agent:writer")
    assert history.filter.kinds == (ItemKind.CONVERSATION,) and history.exclude_agent_id is None
    assert team.filter.reach == Reach.subtree(ROOT) and team.filter.kinds == (ItemKind.CONVERSATION,)
    assert team.exclude_agent_id == "writer" and team.limit == 3


def test_a_zero_limit_leaves_its_section_out(layout):
    policy = RecallPolicy(learnings_limit=0, team_limit=0)
    core = CoreScope.new("team:acme", "Company").with_limit(0)
    sections = standard_sections(layout, "writer", policy, [core])
    assert [s.heading for s in sections] == [BRAIN_HEADING, HISTORY_HEADING]


def test_compaction_gist_cuts_each_turn_then_the_whole():
    turns = [Turn(role=Role.USER, text="a  b\n c"), Turn(role=Role.ASSISTANT, text="x" * 500)]
    assert compaction_gist(turns) == "a b c " + "x" * 300
    many = [Turn(role=Role.USER, text=f"{i:02d}" + "y" * 60) for i in range(20)]
    gist = compaction_gist(many)
    assert gist is not None and len(gist) == 600  # 20 turns of max(600 // 20, 40) = 40 chars, joined, cut
    assert gist.startswith("00" + "y" * 38 + " 01")
    assert compaction_gist([]) is None


@pytest.mark.parametrize(("history", "dropped", "limit"), [(6, 0, 6), (0, 0, 1), (6, 30, 24), (2, 10, 10)])
def test_summary_section_limit_is_clamped(layout, history, dropped, limit):
    section = summary_section(layout, "writer", "t1", RecallPolicy(history_limit=history), dropped)
    assert section.limit == limit
    assert isinstance(section.query, AnswerQuery) and section.query.fallback_to_fetch
    assert section.query.question == COMPACTION_QUESTION and section.query.instructions == COMPACTION_INSTRUCTIONS
    assert section.filter.thread_id == "t1" and section.filter.kinds == (ItemKind.CONVERSATION,)


# construction and builders ------------------------------------------------------------------------------
def test_a_blank_agent_id_is_refused(engine, layout):
    with pytest.raises(InvalidRequest) as err:
        AgentMemory(engine, layout, "  ")
    assert err.value.field == "agent_id"


@pytest.mark.parametrize("agent_id", [5, None, b"writer", ["writer"]])
def test_an_agent_id_that_is_not_a_string_says_so_not_blank(engine, layout, agent_id):
    """``AgentMemory(engine, layout, 5)`` said "agent id is blank" (newcomer run): the cause is the type."""
    expected = f"agent_id: must be a string, got {type(agent_id).__name__}"
    for build in (
        lambda: AgentMemory(engine, layout, agent_id),
        lambda: layout.conversations(agent_id),
        lambda: standard_sections(layout, agent_id),
    ):
        with pytest.raises(InvalidRequest) as err:
            build()
        assert err.value.field == "agent_id"
        assert str(err.value) == f"invalid request: {expected}"
    with pytest.raises(InvalidRequest, match="agent id is blank"):
        standard_sections(layout, " ")


@pytest.mark.parametrize("bad", [None, "reference://", 5, object()])
def test_an_engine_that_is_not_a_memory_engine_is_refused_up_front(layout, bad):
    """``AgentMemory(None, layout, "a")`` was accepted; its packs then skipped every section with
    "'NoneType' object has no attribute …" (newcomer run)."""
    with pytest.raises(InvalidRequest) as err:
        AgentMemory(bad, layout, "writer")
    assert err.value.field == "engine"
    assert f"expected a MemoryEngine, got {type(bad).__name__}" in err.value.reason
    assert ("open_engine" in err.value.reason) == isinstance(bad, str)


def test_open_engine_says_a_url_that_is_not_a_string_is_not_a_string():
    from memory_core.engines import open_engine
    from memory_core.errors import ConfigError

    for bad, name in ((5, "int"), (None, "NoneType"), (b"reference://", "bytes")):
        with pytest.raises(ConfigError) as err:
            open_engine(bad)
        assert err.value.message == f"engine URL must be a string, got {name}"
    for blank in ("", "  "):
        with pytest.raises(ConfigError, match="engine URL is blank"):
            open_engine(blank)


@pytest.mark.parametrize(
    ("root", "reason"),
    [
        (5, "expected a Namespace or a namespace string, got int"),
        (None, "expected a Namespace or a namespace string, got NoneType"),
        ("team", "segment 'team' is not kind:id"),
    ],
)
def test_a_bad_layout_root_names_the_root(root, reason):
    with pytest.raises(InvalidRequest) as err:
        MemoryLayout(root)
    assert err.value.field == "root"
    assert err.value.reason == reason


def test_the_agent_node_is_the_layouts_conversations_node(engine, layout):
    assert AgentMemory(engine, layout, "writer").node == Namespace.parse(f"{ROOT}/agent:writer")


def test_with_core_requires_a_strict_ancestor_of_the_root(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    for bad in (ROOT, "team:other", f"{ROOT}/agent:writer"):
        with pytest.raises(InvalidRequest) as err:
            memory.with_core([CoreScope.new(bad, "Core")])
        assert err.value.field == "core.0.at"
    with pytest.raises(InvalidRequest) as err:
        memory.with_core([CoreScope.new("team:acme", "A"), CoreScope.new("team:acme", "B")])
    assert err.value.field == "core.1.at"
    with pytest.raises(InvalidRequest) as err:
        memory.with_core([{"at": "team:acme", "heading": " "}])
    assert err.value.field == "core.0.heading"


def test_with_core_and_with_policy_return_copies_and_an_empty_list_clears(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    cored = memory.with_core([CoreScope.new("team:acme", "Company")])
    assert memory.core == () and len(cored.core) == 1
    assert cored.with_core([]).core == ()
    tuned = cored.with_policy({"team_limit": 0})
    assert tuned.policy.team_limit == 0 and memory.policy.team_limit == 3 and tuned.core == cored.core


# pre_turn -----------------------------------------------------------------------------------------------
def test_pre_turn_logs_the_exact_turn_item(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    actor = ObservedActor(id="user:42", name="Ana")
    ctx = memory.pre_turn(
        PreTurn(thread_id="t1", turn_index=4, user_text="Ship it on Friday", at=AT, observed_actor=actor)
    )
    (item,) = stored(engine.inner)
    assert isinstance(item, Conversation)
    assert item.turns == (Turn(role=Role.USER, text="Ship it on Friday"),)
    assert item.meta == MemoryMeta(
        namespace=Namespace.parse(f"{ROOT}/agent:writer"),
        thread_id="t1",
        turns=TurnRange(first=4, last=4),
        agent_id="writer",
        source=SourceRef(kind=SourceKind.CONVERSATION, id="t1"),
        observed_at=AT,
        observed_actor=actor,
    )
    assert ctx.logged is not None and ctx.logged.id == item.id and ctx.log_error is None


def test_pre_turn_accepts_a_dict_and_json_text(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    first = memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "hello there"})
    again = memory.pre_turn(json.dumps({"thread_id": "t1", "turn_index": 0, "user_text": "hello there"}))
    assert first.logged is not None and again.logged is not None
    assert again.logged.id == first.logged.id and again.logged.replayed


@pytest.mark.parametrize(
    ("turn", "field"),
    [
        ({"thread_id": " ", "turn_index": 0, "user_text": "hi"}, "thread_id"),
        ({"thread_id": "t1", "turn_index": 0, "user_text": "\n"}, "user_text"),
        ({"thread_id": "t1", "turn_index": -1, "user_text": "hi"}, "turn_index"),
        ({"thread_id": "t1", "turn_index": 0, "user_text": "hi", "in_prompt_from": -2}, "in_prompt_from"),
    ],
)
def test_pre_turn_refuses_bad_input_and_stores_nothing(engine, layout, turn, field):
    with pytest.raises(InvalidRequest) as err:
        AgentMemory(engine, layout, "writer").pre_turn(turn)
    assert err.value.field == field
    assert engine.calls == []


def test_pre_turn_whose_log_fails_still_returns_the_pack(engine, layout):
    engine.inner.store(Learning(text="Releases ship on Fridays.", meta=MemoryMeta().at(ROOT)))
    engine.fail_when("store_with", EngineUnavailable("database is locked"))
    ctx = AgentMemory(engine, layout, "writer").pre_turn(
        {"thread_id": "t1", "turn_index": 0, "user_text": "When do releases ship?"}
    )
    assert ctx.logged is None
    assert ctx.log_error == "unavailable: database is locked"
    assert texts(ctx.pack, LEARNINGS_HEADING) == ["Releases ship on Fridays."]


def test_pre_turn_reports_a_foreign_exception_from_the_log(engine, layout):
    engine.fail_when("store_with", OSError("disk full"))
    ctx = AgentMemory(engine, layout, "writer").pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "hi"})
    assert ctx.log_error == "OSError: disk full" and ctx.logged is None


def test_a_failing_section_is_skipped_and_the_pack_returned(engine, layout):
    engine.inner.store(Learning(text="Releases ship on Fridays.", meta=MemoryMeta().at(ROOT)))
    Brain(engine.inner, layout).ingest(BrainDocument.new("notion", "Releases are cut from main on Fridays."))
    engine.fail_when("fetch", EngineError("index offline"), lambda req: req.filter.kinds == (ItemKind.DOCUMENT,))
    ctx = AgentMemory(engine, layout, "writer").pre_turn(
        {"thread_id": "t1", "turn_index": 0, "user_text": "When are releases cut?"}
    )
    assert [(s.heading, s.reason) for s in ctx.pack.skipped if s.heading == BRAIN_HEADING] == [
        (BRAIN_HEADING, "engine error: index offline")
    ]
    assert texts(ctx.pack, LEARNINGS_HEADING) == ["Releases ship on Fridays."]
    assert ctx.logged is not None


def test_pre_turn_reads_standard_sections_ranked_for_the_user_text(engine, layout):
    AgentMemory(engine, layout, "writer").pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "refund timeline"})
    fetches = engine.of("fetch")
    assert {c.arg.query for c in fetches} == {"refund timeline"}
    assert len(fetches) == 4  # learnings, brain, history, team
    by_kind = {c.arg.filter.kinds: c.arg.max_scopes for c in fetches}  # the reads run concurrently
    assert by_kind == {
        (ItemKind.LEARNING,): None,
        (ItemKind.DOCUMENT,): BRAIN_SCOPES_PER_TURN,
        (ItemKind.CONVERSATION,): CONVERSATION_SCOPES_PER_TURN,  # history and team
    }


def test_team_conversations_exclude_the_agents_own_turns(layout):
    engine = ReferenceEngine()
    writer = AgentMemory(engine, layout, "writer").with_policy({"history_limit": 0})
    critic = AgentMemory(engine, layout, "critic")
    writer.pre_turn({"thread_id": "w1", "turn_index": 0, "user_text": "the launch plan needs a date"})
    critic.pre_turn({"thread_id": "c1", "turn_index": 0, "user_text": "the launch plan looks risky"})
    ctx = writer.pre_turn({"thread_id": "w2", "turn_index": 0, "user_text": "launch plan status"})
    assert texts(ctx.pack, TEAM_HEADING) == ["user: the launch plan looks risky"]
    assert "needs a date" not in ctx.pack.markdown
    ctx = critic.pre_turn({"thread_id": "c2", "turn_index": 0, "user_text": "launch plan status"})
    assert texts(ctx.pack, HISTORY_HEADING) == ["user: the launch plan looks risky"]
    team = texts(ctx.pack, TEAM_HEADING)
    assert sorted(team) == ["user: launch plan status", "user: the launch plan needs a date"]


# post_turn ----------------------------------------------------------------------------------------------
def test_post_turn_logs_the_reply_with_its_tool_calls(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    report = memory.post_turn(
        PostTurn(
            thread_id="t1",
            turn_index=1,
            assistant_text="Booked.",
            tool_calls=(ToolCallRef(name="calendar", id="c-1"),),
            at=AT,
        )
    )
    (item,) = stored(engine.inner)
    assert isinstance(item, Conversation) and item.id == report.receipt.id
    assert item.turns == (
        Turn(role=Role.ASSISTANT, text="Booked.", tool_calls=(ToolCallRef(name="calendar", id="c-1"),)),
    )
    assert item.meta.turns == TurnRange(first=1, last=1) and item.meta.observed_at == AT
    assert item.meta.observed_actor is None and item.meta.agent_id == "writer"
    (call,) = engine.of("store_with")
    assert call.options is not None and call.options.wait is WaitFor.ACCEPTED


def test_post_turn_propagates_engine_errors(engine, layout):
    engine.fail_when("store_with", EngineUnavailable("down"))
    with pytest.raises(EngineUnavailable):
        AgentMemory(engine, layout, "writer").post_turn({"thread_id": "t1", "turn_index": 1, "assistant_text": "ok"})


def _jobs_by_turn(memory: AgentMemory, turns: int) -> dict[int, int]:
    return {
        i: len(memory.post_turn({"thread_id": "t", "turn_index": i, "assistant_text": f"reply {i}"}).jobs)
        for i in range(turns)
    }


def test_post_turn_returns_a_history_build_every_n_turns(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    counts = _jobs_by_turn(memory, 30)
    assert [i for i, n in counts.items() if n] == [9, 19, 29]
    report = memory.post_turn({"thread_id": "t", "turn_index": 9, "assistant_text": "again"})
    assert report.jobs == (memory.history_build(),)
    (job,) = report.jobs
    assert isinstance(job, BuildBeliefs)
    assert job.request.reach == Reach.exact(memory.node) and job.request.kinds == (ItemKind.CONVERSATION,)
    every3 = memory.with_policy(RecallPolicy(build_beliefs_every=3))
    assert [i for i, n in _jobs_by_turn(every3, 7).items() if n] == [2, 5]
    assert engine.of("consolidate") == []  # returned, never run


@pytest.mark.parametrize("every", [None, 0])
def test_post_turn_never_returns_a_build_when_disabled(engine, layout, every):
    memory = AgentMemory(engine, layout, "writer").with_policy({"build_beliefs_every": every})
    assert not any(_jobs_by_turn(memory, 21).values())


def test_post_turn_returns_no_build_under_automatic_consolidation(layout):
    memory = AgentMemory(ReferenceEngine(Consolidation.AUTOMATIC), layout, "writer")
    assert not any(_jobs_by_turn(memory, 20).values())
    assert memory.history_build().request.reach == Reach.exact(memory.node)


# other reads --------------------------------------------------------------------------------------------
def test_start_session_leads_with_the_thread_and_reads_latest_without_focus(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    for i, text in enumerate(["first question", "first answer", "second question"]):
        memory.pre_turn({"thread_id": "t1", "turn_index": i, "user_text": text, "in_prompt_from": i})
    memory.pre_turn({"thread_id": "t2", "turn_index": 0, "user_text": "other thread"})
    engine.reset()
    pack = memory.start_session({"thread_id": "t1"})
    assert headings(pack)[0] == THREAD_HEADING
    assert texts(pack, THREAD_HEADING) == ["user: second question", "user: first answer", "user: first question"]
    assert engine.of("fetch") == [] and engine.of("recall") == []
    assert engine.of("store_with") == []
    with pytest.raises(InvalidRequest) as err:
        memory.start_session({"thread_id": ""})
    assert err.value.field == "thread_id"


def test_start_session_with_a_focus_ranks_for_it(engine, layout):
    AgentMemory(engine, layout, "writer").start_session({"focus": "billing migration"})
    assert {c.arg.query for c in engine.of("fetch")} == {"billing migration"}
    assert len(engine.of("fetch")) == 4


def test_recall_for_compaction_answers_then_reads_for_the_gist(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "we chose Postgres for billing"})
    engine.reset()
    dropped = [{"role": "user", "text": "we chose   Postgres for billing"}]
    pack = memory.recall_for_compaction({"thread_id": "t1", "dropped": dropped})
    assert headings(pack)[0] == SUMMARY_HEADING and pack.sections[0].answer
    (recall,) = engine.of("recall")
    assert isinstance(recall.arg, RecallRequest)
    assert recall.arg.question == COMPACTION_QUESTION and recall.arg.limit == 6
    assert recall.arg.filter.thread_id == "t1"
    assert {c.arg.query for c in engine.of("fetch")} == {"we chose Postgres for billing"}


def test_recall_for_compaction_falls_back_to_fetch_and_prefers_the_focus(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "we chose Postgres for billing"})
    engine.fail_when("recall", EngineUnavailable("model down"))
    pack = memory.recall_for_compaction({"thread_id": "t1", "dropped": [], "focus": "database choice"})
    assert texts(pack, SUMMARY_HEADING) == ["user: we chose Postgres for billing"]
    queries = [c.arg.query for c in engine.of("fetch")]
    assert COMPACTION_QUESTION in queries and "database choice" in queries


def test_recall_logs_nothing_and_a_blank_query_reads_latest(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    memory.recall("refunds")
    assert engine.of("store_with") == [] and len(engine.of("fetch")) == 4
    engine.reset()
    memory.recall("   ")
    assert engine.of("fetch") == [] and engine.of("list") and engine.of("store_with") == []


def test_run_background_runs_the_job_and_beliefs_reach_learnings(layout):
    engine = ReferenceEngine()
    memory = AgentMemory(engine, layout, "writer").with_policy({"build_beliefs_every": 1})
    memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "The staging database is Postgres 16."})
    report = memory.post_turn({"thread_id": "t1", "turn_index": 1, "assistant_text": "Noted."})
    (job,) = report.jobs
    result = memory.run_background(job.to_json())
    assert result.outcome.outcome is OutcomeKind.DONE and result.consolidation is not None
    assert result.consolidation.built == 1  # the reference distils a conversation's first user turn
    ctx = memory.pre_turn({"thread_id": "t2", "turn_index": 0, "user_text": "Which staging database?"})
    (belief, *_) = texts(ctx.pack, LEARNINGS_HEADING)
    assert belief == "The staging database is Postgres 16."
    beliefs = [i for i in engine.snapshot() if isinstance(i, Learning)]
    assert beliefs and all(CONSOLIDATED_TAG in b.meta.tags for b in beliefs)


# core scopes --------------------------------------------------------------------------------------------
def test_promote_stores_at_the_core_node_with_a_visible_store(engine, layout):
    memory = AgentMemory(engine, layout, "writer").with_core([CoreScope.new("team:acme", "Company")])
    learning = Learning(text="Support hours are 9 to 5 CET.", meta=MemoryMeta().at(f"{ROOT}/agent:writer"))
    assert learning.id  # a read id is cached on the item; promoting must still re-place it
    receipt = memory.promote("team:acme", learning)
    (item,) = stored(engine.inner)
    assert item.id == receipt.id and item.meta.namespace == Namespace.parse("team:acme")
    assert [c.op for c in engine.calls if c.op.startswith("store")] == ["store"]
    ctx = memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "support hours"})
    assert texts(ctx.pack, "Company") == ["Support hours are 9 to 5 CET."]
    assert texts(ctx.pack, LEARNINGS_HEADING) == []  # the core node is above the root: not in the subtree


def test_promote_refuses_conversations_unconfigured_nodes_and_unread_kinds(engine, layout):
    memory = AgentMemory(engine, layout, "writer").with_core(
        [CoreScope.new("team:acme", "Company").with_kinds(ItemKind.LEARNING)]
    )
    turn = Conversation(turns=(Turn(role=Role.USER, text="hi"),))
    with pytest.raises(InvalidRequest) as err:
        memory.promote("team:acme", turn)
    assert err.value.field == "item"
    with pytest.raises(InvalidRequest) as err:
        memory.promote("team:acme", Document.of("a memo"))
    assert err.value.field == "item"
    with pytest.raises(InvalidRequest) as err:
        memory.promote("team:other", Learning(text="x"))
    assert err.value.field == "scope"
    assert engine.calls == []


def test_core_build_covers_the_exact_node_with_all_kinds(engine, layout):
    memory = AgentMemory(engine, layout, "writer").with_core([CoreScope.new("team:acme", "Company")])
    job = memory.core_build("team:acme")
    assert job.request.reach == Reach.exact("team:acme") and job.request.kinds == ()
    with pytest.raises(InvalidRequest):
        memory.core_build("team:zeta")


def test_no_core_scopes_give_the_same_pack_as_an_empty_core_list(layout):
    engine = ReferenceEngine()
    memory = AgentMemory(engine, layout, "writer")
    engine.store(Learning(text="Refunds take five days.", meta=MemoryMeta().at(ROOT)))
    assert memory.recall("refunds") == memory.with_core([]).recall("refunds")


def test_the_offline_example_shows_beliefs_reaching_learnings(capsys):
    from memory_core.examples.agent_loop import main

    main()
    out = capsys.readouterr().out
    before, after = out.split("background: running 4 queued job(s)")
    assert "## Learnings" not in before and "job queued" in before and "Learnings · " not in before
    assert "build_beliefs  done" in after
    learnings = after.split("## Learnings")[1].split("## Brain")[0]
    assert "- We are moving billing to Postgres 16 next sprint, can you plan it?" in learnings
    assert "- Billing runs on Postgres 16 in eu-west-1." in learnings
    marked = re.findall(r"^  Learnings · belief \(tagged consolidated\): (.*)$", after, re.MULTILINE)
    assert "Billing runs on Postgres 16 in eu-west-1." in marked
    assert f"\n{len(marked)} Learnings bullet(s) of the last pack came from the belief builds" in after


def test_the_offline_example_leaves_the_prompt_window_out(capsys):
    from memory_core.examples.agent_loop import main

    main()
    out = capsys.readouterr().out
    second = out.split("writer · w1 · turn 2:")[1].split("background: running")[0]
    history = second.split("## This agent's history")[1].split("##")[0]
    assert "user: We are moving billing to Postgres 16 next sprint" in history  # turn 0: out of the prompt
    assert "Planned: the billing migration" not in second  # turn 1: still in the prompt (in_prompt_from=1)
    assert "Who has to approve the migration plan?" not in second.split("# Memory")[1]  # the turn being logged


def test_a_host_executor_runs_the_log_and_the_reads(engine, layout):
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="host") as pool:
        memory = AgentMemory(engine, layout, "writer", executor=pool)
        ctx = memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "refund timeline"})
    assert ctx.logged is not None and ctx.log_error is None
    # on the host's one thread, or on the caller's when it came to a read the host had not started yet:
    # never on memory-core's own pool
    assert {c.thread for c in engine.calls} <= {"host_0", "MainThread"}
    assert len(engine.of("fetch")) == 4


# concurrency and host executors -------------------------------------------------------------------------
def test_pre_turn_logs_while_the_read_runs(layout):
    """The log and the read overlap: each sees the other start while it is still running."""
    engine = Rendezvous()
    ctx = AgentMemory(engine, layout, "writer").pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "refunds"})
    assert ctx.logged is not None and ctx.log_error is None
    assert engine.log_saw_read == [True]
    assert engine.read_saw_log and all(engine.read_saw_log)


def test_pre_turn_on_a_shut_down_host_executor_still_logs_the_turn(engine, layout):
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="host")
    pool.shutdown()
    ctx = AgentMemory(engine, layout, "writer", executor=pool).pre_turn(
        {"thread_id": "t1", "turn_index": 0, "user_text": "refund timeline"}
    )
    assert ctx.logged is not None and ctx.log_error is None
    (item,) = stored(engine.inner)
    assert item.id == ctx.logged.id
    assert len(engine.of("fetch")) == 4  # the reads ran too (in the caller)


def test_pre_turn_inside_the_one_worker_host_executor_it_was_given_does_not_deadlock(engine, layout):
    """The log queued behind the very call waiting for it is taken back and run in the caller."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="host")
    # one section: a single read runs inline, so this pins the log's half (the reads' half is recall.pool's)
    policy = {"brain_limit": 0, "history_limit": 0, "team_limit": 0}
    memory = AgentMemory(engine, layout, "writer", executor=pool).with_policy(policy)
    try:
        running = pool.submit(memory.pre_turn, {"thread_id": "t1", "turn_index": 0, "user_text": "refunds"})
        ctx = running.result(timeout=30)  # a guard against hanging, not a timing assertion
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # frees a deadlocked worker if the guard tripped
    assert ctx.logged is not None and ctx.log_error is None
    assert {c.thread for c in engine.of("store_with")} == {"host_0"}


def test_a_process_pool_is_refused_as_the_host_executor(engine, layout):
    with ProcessPoolExecutor(max_workers=1) as pool, pytest.raises(InvalidRequest) as err:
        AgentMemory(engine, layout, "writer", executor=pool)
    assert err.value.field == "executor"


# bad input ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "turn", "field"),
    [
        ("pre_turn", {"thread_id": "t1", "turn_index": True, "user_text": "hi"}, "turn_index"),
        ("pre_turn", {"thread_id": "t1", "turn_index": 1.0, "user_text": "hi"}, "turn_index"),
        ("pre_turn", {"thread_id": "t1", "turn_index": "1", "user_text": "hi"}, "turn_index"),
        (
            "pre_turn",
            {"thread_id": "t1", "turn_index": 0, "user_text": "hi", "in_prompt_from": False},
            "in_prompt_from",
        ),
        ("pre_turn", '{"thread_id": "t1", "turn_index": true, "user_text": "hi"}', "turn_index"),
        ("pre_turn", {"thread_id": "t1", "turn_index": 0, "user_text": "hi", "at": "2024-05-01T09:30:00"}, "at"),
        ("pre_turn", {"thread_id": "t1", "turn_index": 0, "user_text": "hi", "at": datetime(2024, 5, 1)}, "at"),
        ("post_turn", {"thread_id": "t1", "turn_index": True, "assistant_text": "ok"}, "turn_index"),
        ("post_turn", {"thread_id": "t1", "turn_index": 1, "assistant_text": "ok", "at": "2024-05-01 09:30"}, "at"),
    ],
)
def test_a_wrong_type_or_a_naive_time_is_refused_and_nothing_is_stored(engine, layout, call, turn, field):
    with pytest.raises(InvalidRequest) as err:
        getattr(AgentMemory(engine, layout, "writer"), call)(turn)
    assert err.value.field == field
    assert engine.calls == []


def test_a_time_with_an_offset_is_stored_in_utc(engine, layout):
    memory = AgentMemory(engine, layout, "writer")
    memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "hi", "at": "2024-05-01T11:30:00+02:00"})
    memory.post_turn(PostTurn(thread_id="t1", turn_index=1, assistant_text="ok", at=AT))
    assert [i.meta.observed_at for i in stored(engine.inner)] == [AT, AT]
    assert PreTurn(thread_id="t", turn_index=0, user_text="x", at=AT).to_dict()["at"] == "2024-05-01T09:30:00Z"


def test_recall_refuses_a_query_that_is_not_a_string(engine, layout):
    with pytest.raises(InvalidRequest) as err:
        AgentMemory(engine, layout, "writer").recall(5)  # type: ignore[arg-type]
    assert err.value.field == "query"
    assert engine.calls == []


@pytest.mark.parametrize("field", ["budget_tokens", "learnings_limit", "team_limit", "build_beliefs_every"])
def test_recall_policy_counts_are_strict_integers(field):
    for bad in (True, 2.0, "2"):
        with pytest.raises(InvalidRequest) as err:
            RecallPolicy.model_validate({field: bad})
        assert err.value.field == field
    with pytest.raises(InvalidRequest) as err:
        CoreScope.new("team:acme", "Company").with_limit(True)  # type: ignore[arg-type]
    assert err.value.field == "limit"


def test_standard_sections_refuse_a_blank_agent_id_even_without_a_history_section(layout):
    for agent in ("", "  "):
        with pytest.raises(InvalidRequest) as err:
            standard_sections(layout, agent, RecallPolicy(history_limit=0))
        assert err.value.field == "agent_id"


def test_promote_names_the_scope_for_a_malformed_node(engine, layout):
    memory = AgentMemory(engine, layout, "writer").with_core([CoreScope.new("team:acme", "Company")])
    with pytest.raises(InvalidRequest) as err:
        memory.promote("team acme", Learning(text="x"))
    assert err.value.field == "scope" and str(err.value).count("scope:") == 1
    assert engine.calls == []


# integers past the contract's u32 (reference lifecycle/types.rs, meta TurnRange) --------------------------
U32_PAST = 2**32


@pytest.mark.parametrize(
    ("call", "turn", "field"),
    [
        ("pre_turn", {"thread_id": "t1", "turn_index": 2**70, "user_text": "hi"}, "turn_index"),
        ("pre_turn", {"thread_id": "t1", "turn_index": U32_PAST, "user_text": "hi"}, "turn_index"),
        (
            "pre_turn",
            {"thread_id": "t1", "turn_index": 0, "user_text": "hi", "in_prompt_from": U32_PAST},
            "in_prompt_from",
        ),
        ("post_turn", {"thread_id": "t1", "turn_index": 2**70, "assistant_text": "ok"}, "turn_index"),
        ("post_turn", {"thread_id": "t1", "turn_index": U32_PAST, "assistant_text": "ok"}, "turn_index"),
    ],
)
def test_a_turn_index_past_u32_is_refused_before_the_sqlite_engine_sees_it(tmp_path, layout, call, turn, field):
    from memory_core.engines import open_engine
    from memory_core.query import ListRequest

    with open_engine(f"sqlite:///{tmp_path / 'm.db'}") as sqlite_engine:
        with pytest.raises(InvalidRequest) as err:
            getattr(AgentMemory(sqlite_engine, layout, "writer"), call)(turn)
        assert err.value.field == field
        assert sqlite_engine.list(ListRequest()).items == ()


def test_the_largest_u32_turn_index_is_logged_by_the_sqlite_engine(tmp_path, layout):
    from memory_core.engines import open_engine
    from memory_core.meta import U32_MAX

    with open_engine(f"sqlite:///{tmp_path / 'm.db'}") as sqlite_engine:
        memory = AgentMemory(sqlite_engine, layout, "writer")
        ctx = memory.pre_turn({"thread_id": "t1", "turn_index": U32_MAX, "user_text": "hi", "in_prompt_from": U32_MAX})
        assert ctx.log_error is None and ctx.logged is not None
        report = memory.post_turn({"thread_id": "t1", "turn_index": U32_MAX, "assistant_text": "ok"})
        assert not report.receipt.replayed


@pytest.mark.parametrize(
    ("data", "field"),
    [({"build_beliefs_every": U32_PAST}, "build_beliefs_every"), ({"budget_tokens": 2**63}, "budget_tokens")],
)
def test_recall_policy_bounds_its_counts_to_the_contract_types(data, field):
    with pytest.raises(InvalidRequest) as err:
        RecallPolicy.model_validate(data)
    assert err.value.field == field
