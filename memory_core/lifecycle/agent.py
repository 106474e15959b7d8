"""``AgentMemory``: the memory calls a host makes at fixed points of one agent's turns (seed 000, reference §4.3).

| call | writes | reads |
| --- | --- | --- |
| ``start_session`` | — | the resumed thread's latest turns, then the standard sections |
| ``pre_turn`` | the user turn, ``accepted``, concurrently with the read | the standard sections for its text |
| ``post_turn`` | the reply with its tool calls, ``accepted`` | — |
| ``recall_for_compaction`` | — | an answered summary of the thread, then the standard sections |
| ``recall(query)`` | — | the pre-turn read without logging |
| ``learn(text, key?, importance?)`` | a fact at the layout's learnings node (``facts.store``) | its key's value |
| ``run_background(job)`` | the job's | — |

The live turn (``pre_turn``, ``post_turn``) never waits for indexing, never runs a model (its sections are all
fetch sections) and leaves no work running when it returns: every task it submits (the turn log, each section
read) has finished by then, and slow steps come back as ``BackgroundJob`` values. The only threads that stay
are idle ones: the shared read pool's (``memory_core.recall.pool``, created once per process) or the host's
executor's. ``pre_turn`` never fails on an engine error; a failed log is reported in ``TurnContext.log_error``.

Inputs are checked before anything is written: integers must be integers (``True`` is not a turn index),
timestamps must carry a timezone (the contract's ``DateTime<Utc>`` is RFC 3339 with ``Z`` or an offset,
reference §1.4; a naive ``datetime.now()`` would otherwise be shifted silently), and a wrong type is an
``InvalidRequest`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from datetime import datetime
from functools import partial
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, PlainSerializer

from memory_core._model import ContractModel, format_timestamp, utc
from memory_core.consolidation import ConsolidateRequest, Consolidation, WriteOptions
from memory_core.engine import MemoryEngine, check_engine
from memory_core.errors import InvalidRequest, MemoryCoreError
from memory_core.facts.store import FactReceipt, FactStore
from memory_core.items import NUL_FREE, Conversation, Document, Learning, Role, ToolCallRef, Turn, parse_item
from memory_core.lifecycle.agent_ids import move_sanitised_history_logged
from memory_core.lifecycle.brain import prefixed
from memory_core.lifecycle.caps import TurnCaps
from memory_core.lifecycle.jobs import BackgroundJob, BuildBeliefs, IngestBrain, JobReport
from memory_core.lifecycle.layout import MemoryLayout, check_agent_id
from memory_core.lifecycle.policy import (
    PACK_TITLE,
    CoreScope,
    RecallPolicy,
    compaction_gist,
    standard_sections,
    summary_section,
    thread_section,
)
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.limits import MAX_TEXT_CHARS
from memory_core.meta import U32, ItemKind, MemoryMeta, ObservedActor, SourceKind, SourceRef, TurnRange
from memory_core.namespace import Namespace, Reach
from memory_core.query import NonBlank, StoreReceipt
from memory_core.recall import build_pack
from memory_core.recall.pool import Started, shared_pool
from memory_core.recall.types import ContextPack, HolisticRecall, ScopeSection, ThreadWindow
from memory_core.safety.engine import stored_ids

__all__ = [
    "AgentMemory",
    "Compaction",
    "PostTurn",
    "PostTurnReport",
    "PreTurn",
    "StartSession",
    "TurnContext",
    "turn_item",
]

_LogResult = tuple[StoreReceipt | None, str | None]


def _aware_utc(value: datetime) -> datetime:
    if value.utcoffset() is None:
        raise ValueError("timestamp has no timezone: add Z or an offset (RFC 3339, e.g. 2024-05-01T09:30:00Z)")
    return utc(value)  # a time past the calendar's edge in UTC is refused, naming the field


AwareTimestamp = Annotated[datetime, AfterValidator(_aware_utc), PlainSerializer(format_timestamp, return_type=str)]
"""A timestamp with a timezone, kept in UTC; naive input is refused (reference §1.4 ``DateTime<Utc>``)."""


ThreadId = Annotated[NonBlank, NUL_FREE]
"""A thread id: non-blank and NUL-free (it is stored in ``meta.thread_id``; ``meta.NUL_FREE``)."""


# requests and results ------------------------------------------------------------------------------------
class StartSession(ContractModel):
    """``{thread_id?, focus?}``: a session starts or resumes; a blank thread id is refused."""

    thread_id: ThreadId | None = None
    focus: str | None = None


class PreTurn(ContractModel):
    """``{thread_id, turn_index, user_text, in_prompt_from, at?, observed_actor?}``: a user message arrives.

    Attributes:
        thread_id: The conversation thread (non-blank).
        turn_index: Zero-based index of this turn in the thread; stable across retries. A ``u32`` (the
            reference's type): past ``U32_MAX`` is ``InvalidRequest`` naming it, before anything is stored.
        user_text: The message (non-blank).
        in_prompt_from: The first turn of this thread still in the prompt; packs leave out the thread's turns
            at or after it (0: the whole thread is in the prompt); a ``u32`` too.
        at: When the message was sent, with a timezone (stored in UTC); dated bullets are led by it.
        observed_actor: Who said it, when not the owner.
    """

    thread_id: ThreadId
    turn_index: U32
    user_text: Annotated[NonBlank, NUL_FREE] = Field(max_length=MAX_TEXT_CHARS)
    in_prompt_from: U32 = 0
    at: AwareTimestamp | None = None
    observed_actor: ObservedActor | None = None


class PostTurn(ContractModel):
    """``{thread_id, turn_index, assistant_text, tool_calls, at?}``: the model replied."""

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"tool_calls"})

    thread_id: ThreadId
    turn_index: U32
    assistant_text: Annotated[NonBlank, NUL_FREE] = Field(max_length=MAX_TEXT_CHARS)
    tool_calls: tuple[ToolCallRef, ...] = ()
    at: AwareTimestamp | None = None


class Compaction(ContractModel):
    """``{thread_id, dropped, focus?}``: the host is dropping ``dropped`` turns from the prompt."""

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"dropped"})

    thread_id: ThreadId
    dropped: tuple[Turn, ...] = ()
    focus: str | None = None


class TurnContext(ContractModel):
    """``{pack, logged?, log_error?}``: what ``pre_turn`` read, and how logging the turn went."""

    pack: ContextPack
    logged: StoreReceipt | None = None
    log_error: str | None = None


class PostTurnReport(ContractModel):
    """``{receipt, jobs}``: the logged reply and the background jobs the host should queue."""

    receipt: StoreReceipt
    jobs: tuple[BackgroundJob, ...] = ()


# the turn item (pure) -----------------------------------------------------------------------------------
def turn_item(
    node: Namespace,
    agent_id: str,
    thread_id: str,
    turn_index: int,
    turn: Turn,
    *,
    at: datetime | None = None,
    observed_actor: ObservedActor | None = None,
) -> Conversation:
    """The one-turn conversation a logged turn is stored as (reference §4.3 "Turn item").

    ``namespace = node``, ``thread_id``, ``turns = {i, i}``, ``agent_id``, ``source = {conversation,
    thread_id}``, ``observed_at = at`` and ``observed_actor``. The time and actor are left out of the
    fingerprint, so a retried turn with the same input is a replay.

    Raises:
        InvalidRequest: a blank turn text or a malformed field.
    """
    meta = MemoryMeta(
        namespace=node,
        thread_id=thread_id,
        turns=TurnRange(first=turn_index, last=turn_index),
        agent_id=agent_id,
        source=SourceRef(kind=SourceKind.CONVERSATION, id=thread_id),
        observed_at=at,
        observed_actor=observed_actor,
    )
    return Conversation(turns=(turn,), meta=meta)


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, MemoryCoreError) else f"{type(exc).__name__}: {exc}"


# AgentMemory ------------------------------------------------------------------------------------------
class AgentMemory:
    """One agent's memory in a layout: ``AgentMemory(engine, layout, agent_id)``.

    Cheap to copy; ``with_policy`` and ``with_core`` return new objects. The policy starts as
    ``RecallPolicy.from_settings()`` (the contract's defaults, with ``MEMORY_CORE_BUDGET_TOKENS`` and
    ``MEMORY_CORE_BUILD_BELIEFS_EVERY`` applied).

    Args:
        engine: Any ``MemoryEngine`` (safe to call from several threads at once).
        layout: The layout; the agent's node is ``layout.conversations(agent_id)``. For an id that is not a
            segment id, what older versions stored at its contract-sanitised node moves there on opening
            (``lifecycle.agent_ids``; issue 11 rule 7).
        agent_id: The agent (non-blank).
        executor: A host-owned thread-based executor for the turn log and the pack's reads; None logs on the
            shared pool of ``recall.pool`` and reads as ``recall.gather`` says (an engine's one read of the
            fetch sections on the calling thread, other reads on the shared pool). Work (the log, a read) it has
            not started by the time the caller needs the result is taken back and run in the caller
            (``recall.pool.Started``), so a call made from inside a one-worker executor never waits on itself,
            and a shut-down executor's work runs in the caller.

    Raises:
        InvalidRequest: an engine that is not a ``MemoryEngine`` (``field="engine"``), a layout that is not a
            ``MemoryLayout``, an agent id that is not a string or is blank, or a process-based executor (the
            engine cannot be sent to another process).
        ConfigError: a malformed ``MEMORY_CORE_`` setting.
    """

    __slots__ = ("agent_id", "caps", "core", "engine", "executor", "layout", "node", "policy")

    def __init__(
        self,
        engine: MemoryEngine,
        layout: MemoryLayout,
        agent_id: str,
        *,
        executor: Executor | None = None,
    ) -> None:
        self.engine = check_engine(engine)
        if not isinstance(layout, MemoryLayout):
            raise InvalidRequest(f"expected a MemoryLayout, got {type(layout).__name__}", field="layout")
        self.agent_id = check_agent_id(agent_id)
        if isinstance(executor, ProcessPoolExecutor):
            raise InvalidRequest("the log and reads run on threads; a process pool cannot share the engine", "executor")
        self.layout = layout
        self.node = self.layout.conversations(self.agent_id)
        if self.node != layout.contract_conversations(self.agent_id):  # an id that is not a segment id
            move_sanitised_history_logged(self.engine, layout, self.agent_id)
        self.policy = RecallPolicy.from_settings()
        self.caps = TurnCaps.from_settings()
        self.core: tuple[CoreScope, ...] = ()
        self.executor = executor

    def __repr__(self) -> str:
        return f"AgentMemory(agent_id={self.agent_id!r}, node={str(self.node)!r})"

    def _copy(self, policy: RecallPolicy | None = None, core: tuple[CoreScope, ...] | None = None) -> AgentMemory:
        clone = AgentMemory(self.engine, self.layout, self.agent_id, executor=self.executor)
        clone.policy = self.policy if policy is None else policy
        clone.core = self.core if core is None else core
        clone.caps = self.caps
        return clone

    # builders ------------------------------------------------------------------------------------------
    def with_policy(self, policy: RecallPolicy | Mapping[str, Any]) -> AgentMemory:
        """A copy using ``policy``.

        Raises:
            InvalidRequest: a malformed policy.
        """
        return self._copy(policy=RecallPolicy.coerce(policy, "policy"))

    def with_core(self, scopes: Sequence[CoreScope | Mapping[str, Any]]) -> AgentMemory:
        """A copy reading ``scopes`` as core sections (an empty list clears them).

        Raises:
            InvalidRequest: a scope that is not a strict ancestor of the layout root, a blank heading, or a
                node named twice (named ``core.<i>…``).
        """
        checked: list[CoreScope] = []
        seen: set[Namespace] = set()
        for i, raw in enumerate(scopes):
            try:
                scope = CoreScope.coerce(raw, f"core.{i}")
            except InvalidRequest as exc:
                raise prefixed(exc, f"core.{i}") from None
            if not self.layout.admits_core(scope.at):
                raise InvalidRequest(
                    f"{scope.at} is not a strict ancestor of the layout root {self.layout.root}", field=f"core.{i}.at"
                )
            if scope.at in seen:
                raise InvalidRequest(f"{scope.at} is named twice", field=f"core.{i}.at")
            seen.add(scope.at)
            checked.append(scope)
        return self._copy(core=tuple(checked))

    # the live turn -------------------------------------------------------------------------------------
    def pre_turn(self, turn: PreTurn | Mapping[str, Any] | str) -> TurnContext:
        """Log the user turn (``accepted``) while reading the standard sections ranked for its text.

        The pack leaves out this turn (``exclude_ids``) and the thread's turns at or after ``in_prompt_from``.
        Memory keeps the first ``MEMORY_CORE_USER_TEXT_CAP`` (4,000) characters of the text and a truncation marker
        (``lifecycle.caps``, seed 004), and the pack is ranked for those characters, so the call's cost is bounded
        whatever the text's size. Both the log and the read finish before this returns. The log runs on the host's
        executor (or a per-call thread) while the reads run; if it has not started when the reads are done (a busy
        executor, perhaps the one running this call), it is cancelled there and run here, so waiting never
        deadlocks.

        Returns:
            ``TurnContext{pack, logged?, log_error?}``; a failed log is reported, never raised.

        Raises:
            InvalidRequest: a blank thread id or text, or another malformed field.
        """
        req = PreTurn.coerce(turn, "turn")
        item = turn_item(
            self.node,
            self.agent_id,
            req.thread_id,
            req.turn_index,
            Turn(role=Role.USER, text=self.caps.user(req.user_text)),
            at=req.at,
            observed_actor=req.observed_actor,
        )
        recall = self._recall_request(
            req.user_text,  # capped there: the pack ranks for what memory keeps of the turn
            self._standard(),
            exclude_ids=stored_ids(self.engine, item),  # a scrubbing engine stores it under another id
            exclude_thread=ThreadWindow(thread_id=req.thread_id, from_turn=req.in_prompt_from),
        )
        logging = Started(partial(self._log, item), self.executor if self.executor is not None else shared_pool())
        try:
            pack = build_pack(self.engine, recall, executor=self.executor)
        finally:
            logged, log_error = logging.result()  # run here if the executor has not started it
        return TurnContext(pack=pack, logged=logged, log_error=log_error)

    def post_turn(self, turn: PostTurn | Mapping[str, Any] | str) -> PostTurnReport:
        """Log the reply with its tool calls (``accepted``) and say which belief builds are due.

        Memory keeps the first ``MEMORY_CORE_ASSISTANT_TEXT_CAP`` (8,000) characters of the reply and a truncation
        marker (``lifecycle.caps``, seed 004).

        Returns:
            ``PostTurnReport{receipt, jobs}``: ``jobs = [history_build()]`` when ``build_beliefs_every = n > 0``,
            ``(turn_index + 1) % n == 0`` and the engine does not declare ``automatic``; else none.

        Raises:
            InvalidRequest: a blank thread id or text, or another malformed field.
            MemoryCoreError: the engine's error (unlike ``pre_turn``, these propagate).
        """
        req = PostTurn.coerce(turn, "turn")
        item = turn_item(
            self.node,
            self.agent_id,
            req.thread_id,
            req.turn_index,
            Turn(role=Role.ASSISTANT, text=self.caps.assistant(req.assistant_text), tool_calls=req.tool_calls),
            at=req.at,
        )
        receipt = self.engine.store_with(item, WriteOptions.accepted())
        due = self.policy.builds_after(req.turn_index) and not self._automatic()
        jobs: tuple[BuildBeliefs, ...] = (self.history_build(),) if due else ()
        return PostTurnReport(receipt=receipt, jobs=jobs)

    # other reads ---------------------------------------------------------------------------------------
    def start_session(self, session: StartSession | Mapping[str, Any] | str | None = None) -> ContextPack:
        """The pack for a starting or resumed session.

        With a thread, a leading Latest section "Earlier in this thread" (limit ``max(history_limit, 1)``);
        then the standard sections, ranked for ``focus`` or, without one, newest first.

        Raises:
            InvalidRequest: a blank thread id.
        """
        req = StartSession() if session is None else StartSession.coerce(session, "session")
        sections = self._standard()
        if req.thread_id is not None:
            sections = (thread_section(self.layout, self.agent_id, req.thread_id, self.policy), *sections)
        return build_pack(self.engine, self._recall_request(req.focus, sections), executor=self.executor)

    def recall_for_compaction(self, compaction: Compaction | Mapping[str, Any] | str) -> ContextPack:
        """The pack that replaces turns the host drops from the prompt.

        First an answered summary "Earlier in this conversation" of the thread (falling back to fetch), then
        the standard sections ranked for ``focus``, else for the dropped turns' gist (``compaction_gist``).

        Raises:
            InvalidRequest: a blank thread id or a malformed turn.
        """
        req = Compaction.coerce(compaction, "compaction")
        summary = summary_section(self.layout, self.agent_id, req.thread_id, self.policy, len(req.dropped))
        query = req.focus if req.focus and req.focus.strip() else compaction_gist(req.dropped)
        recall = self._recall_request(query, (summary, *self._standard()))
        return build_pack(self.engine, recall, executor=self.executor)

    def recall(self, query: str | None = None) -> ContextPack:
        """The pre-turn read without logging: the standard sections ranked for ``query`` (blank: newest first).

        Raises:
            InvalidRequest: ``field="query"``: a query that is neither a string nor None.
        """
        if query is not None and not isinstance(query, str):
            raise InvalidRequest(f"expected a string or None, got {type(query).__name__}", field="query")
        return build_pack(self.engine, self._recall_request(query, self._standard()), executor=self.executor)

    # facts (seed 004; issue 20) ------------------------------------------------------------------------
    def learn(
        self, text: str, key: str | None = None, importance: float | None = None, *, at: datetime | None = None
    ) -> FactReceipt:
        """Store a fact at the layout's learnings node, where every agent's Learnings section reads it.

        With a ``key`` it becomes the key's current value and older statements are superseded; the latest
        statement (``at``, default now) wins whatever order writes arrive in. Without one, the same text is
        stored once (content hash). See ``memory_core.facts.store``.

        Raises:
            InvalidRequest: text blank or over 2,000 characters, a blank or over-128-character key, importance not a
                number in ``[0, 1]``, or a naive ``at`` (each names its field); nothing is stored.
        """
        if at is not None and (not isinstance(at, datetime) or at.utcoffset() is None):
            raise InvalidRequest("a time with a timezone is required", field="at")
        return self.facts().learn(text, key, importance, at=at)

    def facts(self) -> FactStore:
        """The facts at the layout's learnings node (list, current value, forget)."""
        return FactStore(self.engine, self.layout.learnings())

    # background ----------------------------------------------------------------------------------------
    def run_background(self, job: BuildBeliefs | IngestBrain | Mapping[str, Any] | str) -> JobReport:
        """Run a job now, in the caller's thread, with ``BackgroundRunner``.

        Raises:
            InvalidRequest: a malformed job.
            MemoryCoreError: an engine error other than ``Unsupported`` on a build.
        """
        return BackgroundRunner(self.engine, self.layout).run(job)

    def history_build(self) -> BuildBeliefs:
        """The build for this agent's conversations: ``exact(node)``, ``[conversation]``."""
        request = ConsolidateRequest(reach=Reach.exact(self.node), kinds=(ItemKind.CONVERSATION,))
        return BuildBeliefs(request=request)

    # core scopes ---------------------------------------------------------------------------------------
    def promote(
        self, scope: CoreScope | Namespace | str, item: Learning | Document | Conversation | Mapping[str, Any]
    ) -> StoreReceipt:
        """Store a learning or document at a configured core node (namespace forced; plain ``store``).

        Raises:
            InvalidRequest: an unconfigured node, a conversation, a kind the scope does not read, or a
                malformed item.
        """
        core = self._configured(scope)
        parsed = parse_item(dict(item) if isinstance(item, Mapping) else item, field="item")
        if isinstance(parsed, Conversation):
            raise InvalidRequest("a conversation cannot be promoted to a core scope", field="item")
        if not core.admits_kind(parsed.item_kind):
            raise InvalidRequest(f"core scope {core.at} does not read {parsed.item_kind.value}", field="item")
        return self.engine.store(parsed.with_meta(parsed.item_meta.at(core.at)))

    def core_build(self, scope: CoreScope | Namespace | str) -> BuildBeliefs:
        """The build for one configured core node: ``exact(at)``, all kinds.

        Raises:
            InvalidRequest: an unconfigured node.
        """
        return BuildBeliefs(request=ConsolidateRequest(reach=Reach.exact(self._configured(scope).at)))

    # helpers -------------------------------------------------------------------------------------------
    def _standard(self) -> tuple[ScopeSection, ...]:
        return standard_sections(self.layout, self.agent_id, self.policy, self.core)

    def _recall_request(
        self,
        query: str | None,
        sections: tuple[ScopeSection, ...],
        *,
        exclude_ids: tuple[str, ...] = (),
        exclude_thread: ThreadWindow | None = None,
    ) -> HolisticRecall:
        return HolisticRecall(
            query=query[: self.caps.user_text] if query and query.strip() else None,
            sections=sections,
            budget_tokens=self.policy.budget_tokens,
            title=PACK_TITLE,
            exclude_ids=exclude_ids,
            exclude_thread=exclude_thread,
            min_relevance=self.policy.min_relevance,
        )

    def _automatic(self) -> bool:
        return self.engine.descriptor().consolidation is Consolidation.AUTOMATIC

    def _configured(self, scope: CoreScope | Namespace | str) -> CoreScope:
        at = scope.at if isinstance(scope, CoreScope) else scope
        try:
            ns = at if isinstance(at, Namespace) else Namespace.parse(at)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.reason, field="scope") from None
        for core in self.core:
            if core.at == ns:
                return core
        raise InvalidRequest(f"{ns} is not a configured core scope", field="scope")

    def _log(self, item: Conversation) -> _LogResult:
        try:
            return self.engine.store_with(item, WriteOptions.accepted()), None
        except Exception as exc:  # pre_turn never fails on an engine error (seed 000): report it instead
            return None, _describe(exc)
