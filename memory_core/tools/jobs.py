"""``ToolWrite``: a queued ``learn`` or ``forget`` as a background job (reference §6.4, seed 001's tool outbox).

When the engine does not answer, ``ToolWrites`` submits the request as this job: the job flow keeps it durable
(the broker, or the host's outbox while the broker is down), a worker applies it (``apply_tool_write``), retries
it on a transient error and dead-letters it with its reason when it cannot run. The learning it carries is
already scrubbed.

Requests for one place stay in the order they were made: each job names the job queued before it for the same
place (``after``), and a worker holds it back until that one has finished (run or dead-lettered), for at most
``ORDER_HOLD_S`` after it was made (a predecessor lost that long no longer holds its successors).

Redelivery is a no-op: the flow drops a twin of a finished job by its id, and applying one twice changes
nothing (a learning has a content id, so a second store is ``replayed``; forgetting forgotten ids forgets 0).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal, Self

from pydantic import Field, model_validator

from memory_core._model import ContractModel, Timestamp
from memory_core.consolidation import WriteOptions
from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.facts.store import FactReceipt, FactStore, is_fact_item
from memory_core.items import Learning
from memory_core.namespace import Namespace, Reach
from memory_core.query import ForgetReport, ForgetTarget, NonBlank, StoreReceipt

__all__ = [
    "MAX_FORGET_IDS",
    "ORDER_HOLD_S",
    "ORDER_RETRY_S",
    "ToolWrite",
    "apply_tool_write",
    "forget_ids",
    "store_learning",
]

ORDER_HOLD_S: Final = 600.0
"""Seconds after it was made that a job waits for the job queued before it for the same place."""
ORDER_RETRY_S: Final = 1.0
"""Seconds a worker defers a job whose predecessor has not finished yet."""
MAX_FORGET_IDS: Final = 200
"""Ids one forget names at most (the ``memory_forget`` tool's bound, reference §4.7)."""


class ToolWrite(ContractModel):
    """``{job: "tool_write", op, place, learning?, ids?, reach?, after?, made_at}``.

    Attributes:
        op: ``learn`` (store ``learning``) or ``forget`` (forget ``ids`` readable under ``reach``).
        place: The namespace the tools write at (the order is kept per place).
        learning: The learning to store, scrubbed (``learn`` only).
        ids: The ids to forget, 1..=``MAX_FORGET_IDS`` (``forget`` only).
        reach: The tools' reach: a forget touches only ids under it (None: no reach).
        after: The id of the job queued before this one for the same place, if it may not have finished.
        made_at: When the request was made (UTC).

    Raises:
        InvalidRequest: a learn without a learning or with ids, a forget without ids or with a learning, a
            learning not at ``place`` (each names the field).
    """

    job: Literal["tool_write"] = "tool_write"
    op: Literal["learn", "forget"]
    place: Namespace
    learning: Learning | None = None
    ids: tuple[NonBlank, ...] = Field(default=(), max_length=MAX_FORGET_IDS)
    reach: Reach | None = None
    after: NonBlank | None = None
    made_at: Timestamp

    __omit_defaults__ = frozenset({"ids"})

    @model_validator(mode="after")
    def _one_request(self) -> Self:
        if self.op == "learn":
            if self.learning is None:
                raise InvalidRequest("a learn carries its learning", field="learning")
            if self.ids:
                raise InvalidRequest("a learn names no ids", field="ids")
            if self.learning.meta.namespace != self.place:
                raise InvalidRequest("it must be stored at the job's place", field="learning")
        else:
            if not self.ids:
                raise InvalidRequest("a forget names 1 or more ids", field="ids")
            if self.learning is not None:
                raise InvalidRequest("a forget carries no learning", field="learning")
        return self

    def name(self) -> str:
        """``tool_write``."""
        return self.job

    def describe(self) -> str:
        """Flower's summary: ``tool_write learn agent:writer`` (never the text)."""
        what = "" if self.op == "learn" else f" {len(self.ids)} id{'s' if len(self.ids) != 1 else ''}"
        return f"tool_write {self.op}{what} {self.place}"

    def holds_for(self, now: datetime) -> bool:
        """True when this job must still wait for ``after`` to finish (it names one, made < ``ORDER_HOLD_S`` ago)."""
        return self.after is not None and (now - self.made_at).total_seconds() < ORDER_HOLD_S


def forget_ids(engine: MemoryEngine, ids: list[str], reach: Reach | None) -> ForgetReport:
    """Forget ``ids`` the reach admits (``forget_within``), or any of them when there is no reach."""
    if reach is not None:
        return engine.forget_within(ids, reach)
    return engine.forget(ForgetTarget(ids=tuple(ids)))


def store_learning(engine: MemoryEngine, item: Learning) -> StoreReceipt | FactReceipt:
    """Store a learning ``visible`` (a recall right after ranks it); a fact by the facts' rules (``facts.store``).

    A keyed fact upserts its key, the statement time deciding whenever it is delivered; an unkeyed one is stored
    once per content.

    Raises:
        InvalidRequest: the engine refuses it.
        EngineUnavailable: the engine does not answer.
    """
    if is_fact_item(item):
        return FactStore(engine, item.meta.namespace, options=WriteOptions.visible()).apply(item)
    return engine.store_with(item, WriteOptions.visible())


def apply_tool_write(engine: MemoryEngine, job: ToolWrite) -> dict[str, Any]:
    """Apply one queued request: store its learning (``visible``) or forget its ids; the job's result.

    Applying it again changes nothing (``replayed: true``; ``forgotten: 0``).

    Returns:
        ``{job, op, place, id, replayed}`` for a learn; ``{job, op, place, forgotten}`` for a forget.

    Raises:
        InvalidRequest: the engine refuses it (dead-lettered by the job flow).
        EngineUnavailable: the engine does not answer (retried by the job flow).
    """
    out: dict[str, Any] = {"job": job.job, "op": job.op, "place": str(job.place)}
    if job.learning is not None:
        receipt = store_learning(engine, job.learning)
        return {**out, "id": receipt.id, "replayed": receipt.replayed}
    report = forget_ids(engine, list(job.ids), job.reach)
    return {**out, "forgotten": report.forgotten}
