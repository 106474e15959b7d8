"""``ToolWrites``: ``learn`` and ``forget`` that never fail the caller (reference §6.4; seed 001).

With an engine that answers, ``learn`` stores at once with ``accepted`` durability (a recall right after sees
it) and ``forget`` removes at once. When the engine does not answer (any error but a bad request), the request,
already scrubbed, goes to the durable ``ToolOutbox`` and is acknowledged "queued; not yet saved" / "queued; not
yet removed"; ``deliver`` (run by a worker or a host's tick) applies it later, retrying, and dead-letters it with
its reason after ``max_attempts``. Requests for one place are applied in the order they were made: while one
waits, later ones queue behind it. A ``forget`` naming a learning still queued cancels it there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem, MemoryEngine, check_engine
from memory_core.errors import InvalidRequest
from memory_core.facts.model import check_text
from memory_core.facts.store import FactStore, fact_item, is_fact_item, scrubbed_fact
from memory_core.items import Learning, LearningKind, parse_item, validate_item
from memory_core.meta import MemoryMeta, SourceKind, SourceRef
from memory_core.namespace import Reach
from memory_core.query import ForgetReport, ForgetTarget
from memory_core.safety.detector import Policy
from memory_core.safety.host import scrubbing_enabled
from memory_core.safety.items import scrub_item
from memory_core.tools.memory_tools import ToolScope
from memory_core.tools.outbox import QueuedWrite, ToolOutbox

__all__ = ["MAX_ATTEMPTS", "Ack", "Delivery", "ToolWrites"]

MAX_ATTEMPTS: Final = 5
"""Failed deliveries after which a queued request is dead-lettered (the reference host's job retry bound)."""

QUEUED_SAVE: Final = "queued; not yet saved"
QUEUED_REMOVE: Final = "queued; not yet removed"


@dataclass(frozen=True)
class Ack:
    """What a ``learn`` or ``forget`` did.

    Attributes:
        state: ``saved`` / ``removed`` (done now), ``queued`` (in the outbox), ``cancelled`` (a forget that only
            cancelled queued learnings: nothing was ever saved).
        message: The words a model is given (``"queued; not yet saved"``).
        id: The learning's id (``learn``).
        forgotten: Items removed now (``forget`` done at once), queued learnings cancelled included.
    """

    state: Literal["saved", "removed", "queued", "cancelled"]
    message: str
    id: str | None = None
    forgotten: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``id`` left out when None)."""
        out: dict[str, Any] = {"state": self.state, "message": self.message, "forgotten": self.forgotten}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True)
class Delivery:
    """What one ``deliver`` pass did: requests applied, retried later, and dead-lettered."""

    delivered: int = 0
    retried: int = 0
    dead: int = 0


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


class ToolWrites:
    """Durable ``learn``/``forget`` for the tools placed by ``scope``.

    Args:
        engine: Any engine (a ``ScrubbingEngine`` or not: what is queued is scrubbed here).
        outbox: Where requests wait.
        scope: Where learnings are written (``place``) and which ids a forget may touch (``reach``).
        policy: The scrub policy.
        scrub: Scrub what is stored and queued; None: the ``MEMORY_CORE_SCRUB`` setting (on by default).
        max_attempts: Failed deliveries before a request is dead-lettered.
        clock: ``observed_at`` of learnings (default: now, UTC).

    Raises:
        InvalidRequest: ``engine`` is not a ``MemoryEngine``.
    """

    def __init__(
        self,
        engine: MemoryEngine,
        outbox: ToolOutbox,
        scope: ToolScope | None = None,
        *,
        policy: Policy | None = None,
        scrub: bool | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.engine = check_engine(engine)
        self.outbox = outbox
        self.scope = scope or ToolScope()
        self.policy = policy
        self.scrub = scrubbing_enabled() if scrub is None else scrub
        self.max_attempts = max_attempts
        self._clock = clock or (lambda: datetime.now(UTC))

    @property
    def partition(self) -> str:
        """The outbox partition of this scope: its place."""
        return str(self.scope.place)

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
    ) -> Ack:
        """Store a learning at the scope's place, now or, when the engine does not answer, later.

        A ``fact`` (the default kind) is a fact (``facts.store``): with a ``key`` it replaces the key's value, and
        the time it was stated (this call's clock) decides, so a late delivery never overwrites a newer value;
        without one it is stored once per text. A ``key`` or ``importance`` on another kind is refused.

        Raises:
            InvalidRequest: a blank text or one over 2,000 characters, an unknown kind, a confidence outside 0..=1,
                a blank or over-128-character key, an importance not in ``[0, 1]``, a full outbox.
            EngineUnavailable: the engine failed AND the outbox cannot be written.
        """
        check_text(text, "text")
        try:
            learning_kind = LearningKind(kind)
        except ValueError:
            raise InvalidRequest(f"{kind!r} is not a learning kind", field="kind") from None
        if learning_kind is LearningKind.FACT:
            fact = fact_item(
                text,
                self.scope.place,
                key=key,
                importance=importance,
                at=self._clock(),
                confidence=confidence,
                tags=tags,
                evidence=evidence,
            )
            validate_item(fact, field="learning")
            return self._learn(scrubbed_fact(fact, self.policy) if self.scrub else fact)
        for name, value in (("key", key), ("importance", importance)):
            if value is not None:
                raise InvalidRequest("only a fact takes a key or importance", field=name)
        meta = MemoryMeta.coerce(
            {
                "namespace": self.partition,
                "source": SourceRef(kind=SourceKind.AGENT).to_dict(),
                "tags": list(tags),
                "observed_at": self._clock(),
            },
            "tags",
        )
        raw = Learning(text=text, kind=learning_kind, confidence=confidence, evidence=evidence, meta=meta)
        validate_item(raw, field="learning")  # a bad request is refused before anything is stored or queued
        return self._learn(scrub_item(raw, self.policy) if self.scrub else raw)

    def _learn(self, item: AnyItem) -> Ack:
        if not self.outbox.waiting(self.partition):
            try:
                receipt_id = self._store(item)
            except InvalidRequest:
                raise
            except Exception:  # the engine did not answer: queue it (never fail the caller)
                pass
            else:
                return Ack("saved", "saved", id=receipt_id)
        self.outbox.put(self.partition, "learn", item.to_json(), item.id)
        return Ack("queued", QUEUED_SAVE, id=item.id)

    def _store(self, item: AnyItem) -> str:
        """Store a learning; a fact by the facts' rules (upsert by key, dedupe by content); its id."""
        if is_fact_item(item):
            return FactStore(self.engine, item.meta.namespace, options=WriteOptions.accepted()).apply(item).id
        return self.engine.store_with(item, WriteOptions.accepted()).id

    def forget(self, ids: Sequence[str]) -> Ack:
        """Forget ``ids`` readable under the scope's reach, now or later; queued learnings named are cancelled.

        Raises:
            InvalidRequest: no ids or a blank one, a full outbox.
            EngineUnavailable: the engine failed AND the outbox cannot be written.
        """
        if isinstance(ids, str) or not ids:
            raise InvalidRequest("give 1 or more ids", field="ids")
        wanted = list(dict.fromkeys(ids))
        if any(not isinstance(i, str) or not i.strip() for i in wanted):
            raise InvalidRequest("an id is blank", field="ids")
        cancelled = self.outbox.cancel_learnings(self.partition, set(wanted))
        rest = [i for i in wanted if i not in cancelled]
        if not rest:
            return Ack("cancelled", "removed before it was saved", forgotten=len(cancelled))
        if not self.outbox.waiting(self.partition):
            try:
                report = self._forget(rest, self.scope.reach)
            except InvalidRequest:
                raise
            except Exception:
                pass
            else:
                return Ack("removed", "removed", forgotten=report.forgotten + len(cancelled))
        payload = {"ids": rest, "reach": None if self.scope.reach is None else self.scope.reach.to_dict()}
        self.outbox.put(self.partition, "forget", json.dumps(payload))
        return Ack("queued", QUEUED_REMOVE, forgotten=len(cancelled))

    # delivery ------------------------------------------------------------------------------------------
    def deliver(self, limit: int = 100) -> Delivery:
        """Apply up to ``limit`` queued requests, each partition in order.

        A request that fails is retried on a later pass and its partition waits (order is kept); after
        ``max_attempts`` failures, or at once when it can never succeed (a bad request), it is dead-lettered with
        its reason and the partition moves on. One deliverer runs at a time: a pass started while another is
        delivering does nothing.
        """
        with self.outbox.delivering() as mine:
            return self._deliver(limit) if mine else Delivery()

    def _deliver(self, limit: int) -> Delivery:
        delivered = retried = dead = 0
        blocked: set[str] = set()
        for entry in self.outbox.pending()[:limit]:
            if entry.partition in blocked:
                continue
            try:
                self._apply(entry)
            except (InvalidRequest, ValueError) as exc:  # can never succeed: a bad payload
                self.outbox.bury(entry.seq, f"refused: {_reason(exc)}")
                dead += 1
            except Exception as exc:  # the engine did not answer: try again later, keep the order
                attempts = self.outbox.failed(entry.seq, _reason(exc))
                if attempts >= self.max_attempts:
                    self.outbox.bury(entry.seq, f"gave up after {attempts} attempts: {_reason(exc)}")
                    dead += 1
                else:
                    retried += 1
                    blocked.add(entry.partition)
            else:
                self.outbox.done(entry.seq)
                delivered += 1
        return Delivery(delivered, retried, dead)

    # helpers -------------------------------------------------------------------------------------------
    def _forget(self, ids: list[str], reach: Reach | None) -> ForgetReport:
        if reach is not None:
            return self.engine.forget_within(ids, reach)
        return self.engine.forget(ForgetTarget(ids=tuple(ids)))

    def _apply(self, entry: QueuedWrite) -> None:
        if entry.op == "learn":
            item = parse_item(entry.payload, field="payload")
            if isinstance(item, Learning):
                self._store(item)  # a fact's statement time decides, whenever it is delivered
            else:
                self.engine.store_with(item, WriteOptions.accepted())
            return
        data = json.loads(entry.payload)
        reach = None if data.get("reach") is None else Reach.coerce(data["reach"], "reach")
        self._forget([str(i) for i in data["ids"]], reach)
