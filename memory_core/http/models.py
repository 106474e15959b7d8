"""The HTTP API's own bodies, where the contract takes plain arguments or only a server has something to say.

That is ``recall(query)``, the §6.4 ``memory.learn``/``memory.forget`` tools, a queued job and health.

The lifecycle routes take and return the contract's models unchanged (``PreTurn`` → ``TurnContext`` …).
"""

from __future__ import annotations

from typing import ClassVar, Literal

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
    "LearnResult",
    "Liveness",
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

    A learning at the token's root, recording the token's agent as ``meta.agent_id``; a fact with a ``key``
    replaces the key's current value (``facts.store``). The fact rules (2,000 characters, a key of 1..=128
    characters, importance in ``[0, 1]``) are checked by ``ToolWrites`` before anything is stored or queued,
    answering ``InvalidRequest`` naming ``learning.<field>``.
    """

    text: NonBlank = Field(max_length=MAX_TEXT_CHARS)
    kind: LearningKind = LearningKind.FACT
    confidence: StrictFloat = Field(default=0.8, ge=0.0, le=1.0, allow_inf_nan=False)
    key: str | None = None
    importance: StrictFloat | None = Field(default=None, allow_inf_nan=False)


class ForgetBody(ContractModel):
    """``{ids: 1..=100}`` (reference §6.4 ``memory.forget``): only ids under the token's root are forgotten."""

    ids: tuple[NonBlank, ...] = Field(min_length=1, max_length=MAX_FORGET_IDS)


class LearnResult(ContractModel):
    """``{id, replayed, state?, message?, job_id?}``: what ``learn`` did (``tools.writes.ToolWrites``).

    Saved at once (the engine answered): ``{id, replayed}``, as ``StoreReceipt``. Queued (the engine did not
    answer; reference §6.4): ``state: "queued"``, ``message: "queued; not yet saved"`` and ``job_id``, a handle of
    the token's root (``GET /v1/jobs/{job_id}``); ``id`` is the id the learning will have, ``replayed`` false.
    """

    id: str
    replayed: bool = False
    state: Literal["queued"] | None = None
    message: str | None = None
    job_id: str | None = None


class ForgetResult(ContractModel):
    """``{forgotten, skipped, state?, message?, job_id?}``: items removed, and ids not removed under the root.

    ``skipped`` counts the ids given (once each) that were not removed: unknown, or outside the token's root.
    Queued (the engine did not answer): ``{forgotten: 0, skipped: 0, state: "queued", message: "queued; not yet
    removed", job_id}``; the job forgets, when it runs, only what is under the root then.
    """

    forgotten: int = 0
    skipped: int = 0
    state: Literal["queued"] | None = None
    message: str | None = None
    job_id: str | None = None


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
    """``{id, state, follow_ups, error?, message?}``: a job's Celery state.

    ``id`` and ``follow_ups`` are handles (``http.jobs``). ``PENDING``: queued, parked in the outbox, or its result
    expired (``result_expires_s``). A ``FAILURE`` carries ``error``, the failure's category (``InvalidRequest``,
    ``EngineUnavailable``, ``GaveUp``, ``WrongEngine``, else ``EngineError``), and ``message``, a fixed sentence
    for it (``errors.public_job_error``); the worker's own text, which may name the engine's address, stays in
    the server's log and the dead letters.
    """

    id: str
    state: str
    follow_ups: tuple[str, ...] = ()
    error: str | None = None
    message: str | None = None


class Liveness(ContractModel):
    """``{status}``: ``GET /health`` without a token: ``"ok"`` (the engine serves) or ``"unavailable"``.

    Nothing else: no engine id, address or error text reaches a caller that shows no token.
    """

    status: str


class Health(ContractModel):
    """``{engine, health}``: ``GET /health`` with a valid token: the engine's id and health state.

    ``health.reason`` is never sent (it may name the engine's address); the server logs it.
    """

    engine: str
    health: EngineHealth
