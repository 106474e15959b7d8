"""``ToolWrites``: ``learn`` and ``forget`` that never fail the caller (reference §6.4; seed 001).

With an engine that answers, ``learn`` stores at once and returns once the learning ranks (``visible``: a recall
right after sees it, on SQLite too, where ``accepted`` would leave the indexing to the background) and
``forget`` removes at once. When the engine does not answer (any error but a bad request), the request, already
scrubbed, is submitted as a ``ToolWrite`` job (``tools.jobs``) and acknowledged "queued; not yet saved" /
"queued; not yet removed". The job flow keeps it durable: on the broker, or in the host's outbox
(``workers.queue.Outbox``) while the broker is down; a worker applies it, retries it, and dead-letters it with its
reason when it cannot run. There is no second outbox.

Requests for one place are applied in the order they were made: while a queued request of the place has not
finished, later ones are queued behind it (each job names the one before it, and a worker holds it until that
one has finished). A ``forget`` of a learning still queued is queued behind it, so the learning never stays.
The order is kept for the requests of one ``ToolWrites`` (one process; a host serves a place from one).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol, cast

from memory_core.engine import MemoryEngine, check_engine
from memory_core.errors import InvalidRequest
from memory_core.facts.model import check_text
from memory_core.facts.store import fact_item, scrubbed_fact
from memory_core.items import Learning, LearningKind, validate_item
from memory_core.query import id_fault
from memory_core.safety.detector import Policy
from memory_core.safety.host import scrubbing_enabled
from memory_core.safety.items import scrub_item
from memory_core.tools.jobs import MAX_FORGET_IDS, ToolWrite, forget_ids, store_learning
from memory_core.tools.memory_tools import ToolScope, tool_meta

__all__ = ["QUEUED_REMOVE", "QUEUED_SAVE", "Ack", "JobSink", "ToolWrites"]

QUEUED_SAVE: Final = "queued; not yet saved"
QUEUED_REMOVE: Final = "queued; not yet removed"


class JobSink(Protocol):
    """Where queued requests go: the job flow (``workers.queue.QueueSink`` over a ``JobQueue``)."""

    def submit(self, job: ToolWrite) -> str:
        """Submit ``job`` durably (published, or parked in the outbox); its job id.

        Raises:
            InvalidRequest: a malformed job.
            EngineUnavailable: it could not be kept anywhere.
        """
        ...

    def finished(self, job_id: str) -> bool:
        """True when the job has finished (applied or dead-lettered); False when it may still run.

        Raises:
            Exception: the flow's store cannot say (the caller takes it as "may still run").
        """
        ...


@dataclass(frozen=True)
class Ack:
    """What a ``learn`` or ``forget`` did.

    Attributes:
        state: ``saved`` / ``removed`` (done now) or ``queued`` (a job, applied later).
        message: The words a model is given (``"queued; not yet saved"``).
        id: The learning's id (``learn``).
        forgotten: Items removed now (``forget`` done at once).
        job_id: The job a queued request travels as.
        replayed: A ``learn`` saved now was already stored (same content, or an older statement of its key).
    """

    state: Literal["saved", "removed", "queued"]
    message: str
    id: str | None = None
    forgotten: int = 0
    job_id: str | None = None
    replayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``id`` and ``job_id`` left out when None)."""
        out: dict[str, Any] = {"state": self.state, "message": self.message, "forgotten": self.forgotten}
        out["replayed"] = self.replayed
        if self.id is not None:
            out["id"] = self.id
        if self.job_id is not None:
            out["job_id"] = self.job_id
        return out


class ToolWrites:
    """Durable ``learn``/``forget`` for the tools placed by ``scope``.

    Args:
        engine: Any engine (a ``ScrubbingEngine`` or not: what is stored or queued is scrubbed here).
        jobs: Where queued requests go (the job flow).
        scope: Where learnings are written (``place``), which ids a forget may touch (``reach``), and the agent
            learnings record (``agent_id``).
        policy: The scrub policy.
        scrub: Scrub what is stored and queued; None: the ``MEMORY_CORE_SCRUB`` setting (on by default).
        clock: ``observed_at`` of learnings and ``made_at`` of jobs (default: now, UTC).

    Raises:
        InvalidRequest: ``engine`` is not a ``MemoryEngine``.

    Thread-safe: requests of one place are decided and submitted one at a time. ``as_agent`` gives the same
    writes recording another agent, sharing this object's order (one place, one queue of requests).
    """

    def __init__(
        self,
        engine: MemoryEngine,
        jobs: JobSink,
        scope: ToolScope | None = None,
        *,
        policy: Policy | None = None,
        scrub: bool | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.engine = check_engine(engine)
        self.jobs = jobs
        self.scope = scope or ToolScope()
        self.policy = policy
        self.scrub = scrubbing_enabled() if scrub is None else scrub
        self._clock = clock or (lambda: datetime.now(UTC))
        self._order = _Order()

    def as_agent(self, agent_id: str | None) -> ToolWrites:
        """The same writes recording ``agent_id`` as ``meta.agent_id``, in the same order as this object's.

        Raises:
            InvalidRequest: ``field="agent_id"``: not a string or blank.
        """
        if agent_id is not None and (not isinstance(agent_id, str) or not agent_id.strip()):
            raise InvalidRequest("must be a non-blank string", field="agent_id")
        other = copy.copy(self)
        other.scope = replace(self.scope, agent_id=agent_id)
        return other  # shares ``_order``: requests of the place stay in the order they were made

    # requests ------------------------------------------------------------------------------------------
    def learn(
        self,
        text: str,
        *,
        kind: LearningKind | str = LearningKind.FACT,
        confidence: float = 0.8,
        evidence: str | None = None,
        tags: Sequence[str] = (),
        key: str | None = None,
        importance: float | None = None,
        field: str = "",
    ) -> Ack:
        """Store a learning at the scope's place, now or, when the engine does not answer, as a job.

        A ``fact`` (the default kind) is a fact (``facts.store``): with a ``key`` it replaces the key's value, and
        the time it was stated (this call's clock) decides, so a late delivery never overwrites a newer value;
        without one it is stored once per text. A ``key`` or ``importance`` on another kind is refused.
        ``field`` prefixes the names errors give (``"learning."``: the name ``MemoryTools`` and the HTTP API use).

        Raises:
            InvalidRequest: a blank text or one over 2,000 characters, an unknown kind, a confidence outside 0..=1,
                a bad tag, a blank or over-128-character key, an importance not in ``[0, 1]``.
            EngineUnavailable: the engine failed AND the job could not be kept (broker and outbox both down).
        """
        check_text(text, f"{field}text")
        now = self._clock()
        try:
            learning_kind = LearningKind(kind)
        except ValueError:
            raise InvalidRequest(f"{kind!r} is not a learning kind", field=f"{field}kind") from None
        if learning_kind is LearningKind.FACT:
            fact = fact_item(
                text,
                self.scope.place,
                key=key,
                importance=importance,
                at=now,
                confidence=confidence,
                tags=tags,
                evidence=evidence,
                field=field,
                agent_id=self.scope.agent_id,
            )
            validate_item(fact, field="learning")
            return self._learn(scrubbed_fact(fact, self.policy) if self.scrub else fact, now)
        for name, value in (("key", key), ("importance", importance)):
            if value is not None:
                raise InvalidRequest("only a fact takes a key or importance", field=f"{field}{name}")
        meta = tool_meta(self.scope, list(tags), now)
        raw = Learning(text=text, kind=learning_kind, confidence=confidence, evidence=evidence, meta=meta)
        validate_item(raw, field="learning")  # a bad request is refused before anything is stored or queued
        return self._learn(cast(Learning, scrub_item(raw, self.policy)) if self.scrub else raw, now)  # kind kept

    def _learn(self, item: Learning, now: datetime) -> Ack:
        with self._order.lock:
            if not self._waiting():
                try:
                    receipt = store_learning(self.engine, item)
                except InvalidRequest:
                    raise
                except Exception:  # the engine did not answer: queue it (never fail the caller)
                    pass
                else:
                    return Ack("saved", "saved", id=receipt.id, replayed=receipt.replayed)
            job_id = self._submit(ToolWrite(op="learn", place=self.scope.place, learning=item, made_at=now))
        return Ack("queued", QUEUED_SAVE, id=item.id, job_id=job_id)

    def forget(self, ids: Sequence[str]) -> Ack:
        """Forget ``ids`` readable under the scope's reach, now or, when the engine does not answer, as a job.

        Raises:
            InvalidRequest: no ids, a blank one or one holding NUL (``query.id_fault``), more than ``MAX_FORGET_IDS``.
            EngineUnavailable: the engine failed AND the job could not be kept.
        """
        if isinstance(ids, str) or not ids:
            raise InvalidRequest("give 1 or more ids", field="ids")
        wanted = list(dict.fromkeys(ids))
        for i, item_id in enumerate(wanted):  # refused before anything is forgotten or queued
            if (fault := id_fault(i, item_id)) is not None:
                raise InvalidRequest(fault, field="ids")
        if len(wanted) > MAX_FORGET_IDS:
            raise InvalidRequest(f"give at most {MAX_FORGET_IDS} ids, got {len(wanted)}", field="ids")
        with self._order.lock:
            if not self._waiting():
                try:
                    report = forget_ids(self.engine, wanted, self.scope.reach)
                except InvalidRequest:
                    raise
                except Exception:
                    pass
                else:
                    return Ack("removed", "removed", forgotten=report.forgotten)
            job = ToolWrite(
                op="forget", place=self.scope.place, ids=tuple(wanted), reach=self.scope.reach, made_at=self._clock()
            )
            job_id = self._submit(job)
        return Ack("queued", QUEUED_REMOVE, job_id=job_id)

    @property
    def waiting(self) -> bool:
        """True when a request of this place is queued and may not have finished (new ones queue behind it)."""
        with self._order.lock:
            return self._waiting()

    # helpers -------------------------------------------------------------------------------------------
    def _waiting(self) -> bool:
        order = self._order
        if order.last is None:
            return False
        try:
            finished = self.jobs.finished(order.last)
        except Exception:  # the flow's store cannot say: keep the order
            return True
        if finished:
            order.last = None
        return not finished

    def _submit(self, job: ToolWrite) -> str:
        order = self._order
        if order.last is not None:
            job = job.model_copy(update={"after": order.last})
        order.last = self.jobs.submit(job)
        return order.last


class _Order:
    """The order of one place's requests: a lock, and the last job queued until it is seen finished."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: str | None = None
