"""The HTTP API's own bodies, where the contract takes plain arguments or only a server has something to say.

That is ``recall(query)``, the §6.4 ``memory.learn``/``memory.forget`` tools, a queued job and health.

The lifecycle routes take and return the contract's models unchanged (``PreTurn`` → ``TurnContext`` …).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, StrictFloat

from memory_core._model import ContractModel
from memory_core.descriptor import EngineHealth
from memory_core.items import LearningKind
from memory_core.lifecycle.agent import PostTurnReport
from memory_core.limits import MAX_TEXT_CHARS
from memory_core.query import NonBlank

__all__ = [
    "MAX_FORGET_IDS",
    "ForgetBody",
    "ForgetResult",
    "Health",
    "JobAccepted",
    "JobStatus",
    "LearnBody",
    "PostTurnResult",
    "RecallBody",
]

MAX_FORGET_IDS = 100
"""Ids one forget names at most (reference §6.4: ``memory.forget {ids: 1..=100}``)."""


class RecallBody(ContractModel):
    """``{query?}``: ``AgentMemory.recall(query)``; blank or absent means newest first."""

    query: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)


class LearnBody(ContractModel):
    """``{text, kind?=fact, confidence?=0.8, key?, importance?}`` (reference §6.4 ``memory.learn``; seed 004).

    A learning at the token's root; a fact with a ``key`` replaces the key's current value (``facts.store``).
    The fact rules (2,000 characters, a key of 1..=128 characters, importance in ``[0, 1]``) are checked by
    ``MemoryTools``, which answers ``InvalidRequest`` naming ``learning.<field>``.
    """

    text: NonBlank = Field(max_length=MAX_TEXT_CHARS)
    kind: LearningKind = LearningKind.FACT
    confidence: StrictFloat = Field(default=0.8, ge=0.0, le=1.0, allow_inf_nan=False)
    key: str | None = None
    importance: StrictFloat | None = Field(default=None, allow_inf_nan=False)


class ForgetBody(ContractModel):
    """``{ids: 1..=100}`` (reference §6.4 ``memory.forget``): only ids under the token's root are forgotten."""

    ids: tuple[NonBlank, ...] = Field(min_length=1, max_length=MAX_FORGET_IDS)


class ForgetResult(ContractModel):
    """``{forgotten, skipped}``: items removed, and ids not found under the token's root (unknown or elsewhere)."""

    forgotten: int = 0
    skipped: int = 0


class PostTurnResult(PostTurnReport):
    """``PostTurnReport`` plus ``job_ids``: the server queued the report's jobs (``workers.queue.JobQueue``)."""

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset()

    job_ids: tuple[str, ...] = ()


class JobAccepted(ContractModel):
    """``{job_id, state}``: a job handed to the queue; ``state`` is ``published``, ``coalesced`` or ``parked``.

    ``job_id`` is a handle bound to the token's root (``<celery task id>.<tag>``, ``http.jobs``).
    """

    job_id: str
    state: str


class JobStatus(ContractModel):
    """``{id, state, follow_ups, error?}``: a job's Celery state; ``id`` and ``follow_ups`` are handles (``http.jobs``).

    ``PENDING``: queued, parked in the outbox, or its result expired (``result_expires_s``).
    """

    id: str
    state: str
    follow_ups: tuple[str, ...] = ()
    error: str | None = None


class Health(ContractModel):
    """``{engine, health}``: the engine's id and its own health."""

    engine: str
    health: EngineHealth
