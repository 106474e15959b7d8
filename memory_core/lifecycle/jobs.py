"""``BackgroundJob``: the slow work a lifecycle call hands back as a plain JSON value (seed 000, reference §4.6).

| job | JSON |
| --- | --- |
| ``BuildBeliefs`` | ``{"job":"build_beliefs","request":{"reach":{…},"kinds":["conversation"]}}`` |
| ``IngestBrain`` | ``{"job":"ingest_brain","documents":[{"source":"notion","title":"…","text":"…","meta":{…}}]}`` |

``JobOutcome`` is tagged ``"outcome"``: ``done``, ``started``, ``scheduled`` or ``skipped`` with a reason. No
lifecycle call leaves work running after it returns: slow work comes back as these values, which the host
queues. A job is self-contained: a ``BuildBeliefs`` request carries its reach (absolute namespaces), and an
``IngestBrain`` made by ``Brain.ingest_job`` names its layout ``root``, so a worker with another configured
root runs it as the host meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError, model_validator

from memory_core._model import ContractModel, invalid_from
from memory_core.consolidation import ConsolidateReceipt, ConsolidateRequest
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import MAX_LAYOUT_ROOT_DEPTH
from memory_core.namespace import Namespace
from memory_core.query import NonBlank, StoreReceipt

__all__ = [
    "BackgroundJob",
    "BuildBeliefs",
    "IngestBrain",
    "JobOutcome",
    "JobReport",
    "OutcomeKind",
    "parse_job",
    "parse_tagged",
]


class BuildBeliefs(ContractModel):
    """Build beliefs for the scopes a ``ConsolidateRequest`` admits."""

    job: Literal["build_beliefs"] = "build_beliefs"
    request: ConsolidateRequest

    def name(self) -> str:
        """``build_beliefs``."""
        return self.job

    def describe(self) -> str:
        """Flower's summary: ``build_beliefs agent:alice [conversation]``, ``source:notion/** +ancestors`` …."""
        reach = self.request.reach
        at = str(reach.at) + ("/**" if reach.descendants else "") + (" +ancestors" if reach.inherit else "")
        kinds = ", ".join(k.value for k in self.request.kinds) or "all kinds"
        return f"build_beliefs {at} [{kinds}]"


def _layout_root(root: Namespace) -> Namespace:
    if root.depth > MAX_LAYOUT_ROOT_DEPTH:
        raise ValueError(f"layout root depth {root.depth} exceeds {MAX_LAYOUT_ROOT_DEPTH}")
    return root


LayoutRoot = Annotated[Namespace, AfterValidator(_layout_root)]
"""A namespace that can be a ``MemoryLayout`` root: at most ``MAX_LAYOUT_ROOT_DEPTH`` (7) deep (reference §4.4)."""


class IngestBrain(ContractModel):
    """Store documents in the brain (``Brain.ingest_many``).

    Two *memory-core* extensions, each left out of JSON when unset (so the contract's form is unchanged):

    * ``collection`` places the documents in ``brain_collection(source, collection)`` instead of the source's
      node; a blank one is refused (``field="collection"``).
    * ``root`` is the layout root the documents belong under (``root/source:<id>``). ``Brain.ingest_job`` sets
      it to its layout's root; unset, ``BackgroundRunner`` uses its own layout (the worker's configured root).
      Without it a job made by a host at ``team:watch`` would be stored at whatever root the worker has.
    """

    job: Literal["ingest_brain"] = "ingest_brain"
    documents: tuple[BrainDocument, ...] = Field(min_length=1)
    collection: NonBlank | None = None
    root: LayoutRoot | None = None

    def name(self) -> str:
        """``ingest_brain``."""
        return self.job

    def describe(self) -> str:
        """Flower's summary: ``ingest_brain 3 documents (notion)``."""
        n = len(self.documents)
        sources = ", ".join(sorted({d.source.id for d in self.documents}))
        return f"ingest_brain {n} document{'s' if n != 1 else ''} ({sources})"

    def placed_at(self, root: Namespace | str | None) -> IngestBrain:
        """A copy whose documents go under the layout root ``root`` (None: the runner's own layout).

        Raises:
            InvalidRequest: ``field="root"``: a malformed namespace or one deeper than 7.
        """
        return IngestBrain.model_validate({**self.__dict__, "root": root})


BackgroundJob = Annotated[BuildBeliefs | IngestBrain, Field(discriminator="job")]
"""Any background job, tagged by ``"job"``."""

_JOB_ADAPTER: TypeAdapter[BuildBeliefs | IngestBrain] = TypeAdapter(BackgroundJob)
_Job = TypeVar("_Job")


def parse_job(value: Any) -> BuildBeliefs | IngestBrain:
    """Accept a job, a JSON object or JSON text and return the job.

    Raises:
        InvalidRequest: not a job, an unknown ``job`` tag, or a malformed field (named).
    """
    if isinstance(value, BuildBeliefs | IngestBrain):
        return value
    return parse_tagged(_JOB_ADAPTER, value, frozenset({"build_beliefs", "ingest_brain"}))


def parse_tagged(adapter: TypeAdapter[_Job], value: Any, tags: frozenset[str]) -> _Job:
    """A job of any union tagged by ``"job"`` (its ``tags``), from a JSON object or JSON text.

    Raises:
        InvalidRequest: not a job object, an unknown ``job`` tag, or a malformed field (named; else ``job``).
    """
    try:
        if isinstance(value, str | bytes | bytearray):
            return adapter.validate_json(value)
        if isinstance(value, Mapping):
            return adapter.validate_python(dict(value))
    except ValidationError as exc:
        error = invalid_from(exc, union_tags=tags)
        raise (error if error.field else InvalidRequest(error.message, field="job")) from None
    raise InvalidRequest(f"expected a job object, got {type(value).__name__}", field="job")


class OutcomeKind(StrEnum):
    """What running a job did."""

    DONE = "done"
    STARTED = "started"
    SCHEDULED = "scheduled"
    SKIPPED = "skipped"


class JobOutcome(ContractModel):
    """``{"outcome": "done"}`` … ``{"outcome": "skipped", "reason": "…"}``."""

    outcome: OutcomeKind
    reason: str | None = None

    @model_validator(mode="after")
    def _reason(self) -> Self:
        if (self.outcome is OutcomeKind.SKIPPED) != (self.reason is not None):
            raise InvalidRequest("a reason goes with skipped, and only with skipped", field="reason")
        return self

    @classmethod
    def done(cls) -> JobOutcome:
        """The job ran to completion."""
        return cls(outcome=OutcomeKind.DONE)

    @classmethod
    def skipped(cls, reason: str) -> JobOutcome:
        """The engine does not offer what the job asks (``Unsupported``); not an error."""
        return cls(outcome=OutcomeKind.SKIPPED, reason=reason)


class JobReport(ContractModel):
    """``{job, outcome, consolidation?, stored?, follow_ups?}`` (empty fields left out)."""

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"stored", "follow_ups"})

    job: BackgroundJob
    outcome: JobOutcome
    consolidation: ConsolidateReceipt | None = None
    stored: tuple[StoreReceipt, ...] = ()
    follow_ups: tuple[BackgroundJob, ...] = ()
