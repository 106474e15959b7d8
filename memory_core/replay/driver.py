"""Drive a parsed conversation file through ``AgentMemory``: ``pre_turn`` and ``post_turn`` per turn.

Chat formats (JSONL, ChatGPT) have one agent: a ``user`` turn is a ``pre_turn``, an ``assistant`` turn a
``post_turn``. The agent is the assistant (``agent_id``, default ``assistant``) and the user is another person,
so a user turn carries ``observed_actor`` naming them (contract: "who said it, when that is not the owner"):
the name given (``user_name``), else the export's author name, else ``the user``. Beliefs name the person
from ``observed_actor``, so "I am planning a trip" becomes "The user is planning a trip", never "Assistant is
…" (the agent id is what they fall back on without one).

LoCoMo has two people and one agent per speaker: each turn is the speaker's ``pre_turn`` (their own message,
logged as a user turn at their agent's node, with ``observed_actor`` naming them) and, for every other
speaker, a ``post_turn`` (the message as heard by their agent). So each agent's history holds the whole
dialogue, and beliefs (distilled from user turns) hold what each person said of themself.

Turn indices count per (agent, thread), and every turn carries its file time (``at``). Jobs that ``post_turn``
returns go to ``submit`` (a ``JobQueue``, or a local runner); at the end one history build per agent is
submitted so the tail of the conversation is built too.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from memory_core.engine import MemoryEngine
from memory_core.lifecycle.agent import AgentMemory, PostTurn, PreTurn
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.policy import RecallPolicy
from memory_core.meta import ObservedActor
from memory_core.namespace import sanitize_segment_id
from memory_core.replay.formats import ConversationFile, ReplayTurn

__all__ = ["DEFAULT_USER", "ReplayReport", "Replayer", "Submit", "agent_id_for", "user_actor"]

Submit = Callable[[BuildBeliefs | IngestBrain], object]
"""Where jobs go: ``JobQueue.submit`` or a local runner; the return value is ignored."""


DEFAULT_USER = "the user"
"""Who a chat file's user turns come from when neither the caller nor the file names them."""


def agent_id_for(speaker: str) -> str:
    """The agent id for a speaker's name (``"Caroline"`` → ``"caroline"``), sanitised as a segment id."""
    return sanitize_segment_id(speaker.strip().lower().replace(" ", "-") or "speaker")


def user_actor(name: str) -> ObservedActor:
    """The ``observed_actor`` of a chat user's turns: ``{id: "user:<slug>", name}``.

    ``"the user"`` gives ``user:the-user``; the name is kept as given, so beliefs read ``The user …`` or
    ``Priya …``.
    """
    return ObservedActor(id=f"user:{agent_id_for(name)}", name=name.strip() or DEFAULT_USER)


@dataclass
class ReplayReport:
    """What a replay did.

    Attributes:
        turns: Turns replayed.
        refs: Stored item id → the file's turn id (LoCoMo ``dia_id``), for every logged turn that has one.
        jobs: Jobs handed to ``submit``.
        pre_turn_ms: Wall time of each ``pre_turn`` call, milliseconds.
        post_turn_ms: Wall time of each ``post_turn`` call, milliseconds.
        log_errors: ``pre_turn`` log errors (the pack was still returned each time).
        agents: Agent ids used, in order of first use.
    """

    turns: int = 0
    refs: dict[str, str] = field(default_factory=dict)
    jobs: int = 0
    pre_turn_ms: list[float] = field(default_factory=list)
    post_turn_ms: list[float] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)


class Replayer:
    """Replays conversation files through ``AgentMemory`` against one engine.

    Args:
        engine: The engine every agent writes to.
        layout: Where the agents live.
        submit: Receives every job ``post_turn`` returns (and the final history builds).
        policy: Recall policy for every agent (default ``RecallPolicy.from_settings()``).
        agent_id: The agent of chat formats (JSONL, ChatGPT): the assistant whose memory the turns fill.
        user_name: Who the user turns of chat formats come from; None: the file's author name when it has one
            (a ChatGPT ``author.name``), else ``DEFAULT_USER``.
        on_turn: Called after each turn with the running report (progress bars).
    """

    def __init__(
        self,
        engine: MemoryEngine,
        layout: MemoryLayout,
        submit: Submit,
        *,
        policy: RecallPolicy | None = None,
        agent_id: str = "assistant",
        user_name: str | None = None,
        on_turn: Callable[[ReplayReport], None] | None = None,
    ) -> None:
        self._engine = engine
        self._layout = layout
        self._submit = submit
        self._policy = policy or RecallPolicy.from_settings()
        self._chat_agent = agent_id
        self._user_name = user_name.strip() if user_name and user_name.strip() else None
        self._on_turn = on_turn
        self._agents: dict[str, AgentMemory] = {}
        self._next_index: dict[tuple[str, str], int] = defaultdict(int)

    def agent(self, agent_id: str) -> AgentMemory:
        """The ``AgentMemory`` for ``agent_id`` (one per agent, reused)."""
        memory = self._agents.get(agent_id)
        if memory is None:
            memory = AgentMemory(self._engine, self._layout, agent_id).with_policy(self._policy)
            self._agents[agent_id] = memory
        return memory

    def replay(self, conversations: ConversationFile) -> ReplayReport:
        """Replay every turn of ``conversations`` in order, then submit one history build per agent.

        Raises:
            InvalidRequest: a turn the lifecycle refuses (blank text); turns before it stay logged.
            MemoryCoreError: an engine error in ``post_turn`` (``pre_turn`` reports its own).
        """
        report = ReplayReport()
        people: dict[str | None, list[str]] = {}
        for turn in conversations.turns:
            agents = people.setdefault(turn.conversation, [])
            if agent_id_for(turn.speaker) not in agents:
                agents.append(agent_id_for(turn.speaker))
        for turn in conversations.turns:
            if conversations.format == "locomo":
                listeners = [a for a in people[turn.conversation] if a != agent_id_for(turn.speaker)]
                self._locomo_turn(turn, listeners, report)
            elif turn.role == "user":
                self._pre_turn(self._chat_agent, turn, self._chat_user(turn), report)
            else:
                self._post_turn(self._chat_agent, turn, report)
            report.turns += 1
            if self._on_turn is not None:
                self._on_turn(report)
        for agent_id in report.agents:
            self._submit(self.agent(agent_id).history_build())
            report.jobs += 1
        return report

    def _chat_user(self, turn: ReplayTurn) -> ObservedActor:
        named = turn.speaker if turn.speaker not in ("user", "assistant") else None
        return user_actor(self._user_name or named or DEFAULT_USER)

    def _locomo_turn(self, turn: ReplayTurn, listeners: Iterable[str], report: ReplayReport) -> None:
        speaker = agent_id_for(turn.speaker)
        actor = ObservedActor(id=f"user:{speaker}", name=turn.speaker)
        self._pre_turn(speaker, turn, actor, report)
        for listener in listeners:
            self._post_turn(listener, turn, report)

    def _index(self, agent_id: str, thread_id: str) -> int:
        key = (agent_id, thread_id)
        index = self._next_index[key]
        self._next_index[key] = index + 1
        return index

    def _note_agent(self, agent_id: str, report: ReplayReport) -> None:
        if agent_id not in report.agents:
            report.agents.append(agent_id)

    def _pre_turn(self, agent_id: str, turn: ReplayTurn, actor: ObservedActor | None, report: ReplayReport) -> None:
        self._note_agent(agent_id, report)
        request = PreTurn(
            thread_id=turn.thread_id,
            turn_index=self._index(agent_id, turn.thread_id),
            user_text=turn.text,
            at=turn.at,
            observed_actor=actor,
        )
        start = time.perf_counter()
        context = self.agent(agent_id).pre_turn(request)
        report.pre_turn_ms.append((time.perf_counter() - start) * 1000.0)
        if context.log_error is not None:
            report.log_errors.append(context.log_error)
        if context.logged is not None and turn.ref:
            report.refs[context.logged.id] = turn.ref

    def _post_turn(self, agent_id: str, turn: ReplayTurn, report: ReplayReport) -> None:
        self._note_agent(agent_id, report)
        request = PostTurn(
            thread_id=turn.thread_id,
            turn_index=self._index(agent_id, turn.thread_id),
            assistant_text=turn.text,
            at=turn.at,
        )
        start = time.perf_counter()
        result = self.agent(agent_id).post_turn(request)
        report.post_turn_ms.append((time.perf_counter() - start) * 1000.0)
        if turn.ref:
            report.refs[result.receipt.id] = turn.ref
        for job in result.jobs:
            self._submit(job)
            report.jobs += 1
