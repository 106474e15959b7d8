"""Write options, belief builds (``consolidate``) and belief reads (contract reference §1.10)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Self

from pydantic import model_validator

from memory_core._model import ContractModel, StrictInt, Timestamp
from memory_core.errors import InvalidRequest
from memory_core.meta import ItemKind
from memory_core.namespace import Namespace, Reach
from memory_core.query import Limit, NonBlank

__all__ = [
    "BeliefsRequest",
    "BuildScope",
    "ConsolidateReceipt",
    "ConsolidateRequest",
    "ConsolidateStatus",
    "Consolidation",
    "WaitFor",
    "WriteOptions",
]


class WaitFor(StrEnum):
    """How long a write waits: ``visible`` (listed and ranked on return) or ``accepted`` (durably accepted)."""

    ACCEPTED = "accepted"
    VISIBLE = "visible"


class WriteOptions(ContractModel):
    """``{wait}``; the default waits until the item is visible."""

    wait: WaitFor = WaitFor.VISIBLE

    @classmethod
    def coerce(cls, value: Any, field: str | None = None) -> WriteOptions:
        """As ``ContractModel.coerce``, and also a ``WaitFor`` or its name (``"accepted"``, ``"visible"``).

        Raises:
            InvalidRequest: anything else; the error names the field.
        """
        if isinstance(value, WaitFor) or value in ("accepted", "visible"):
            return _ACCEPTED if WaitFor(value) is WaitFor.ACCEPTED else _VISIBLE
        return super().coerce(value, field)

    @classmethod
    def accepted(cls) -> WriteOptions:
        """Return once the item is durably accepted, possibly before it ranks."""
        return _ACCEPTED

    @classmethod
    def visible(cls) -> WriteOptions:
        """Return once the item is listed and ranked."""
        return _VISIBLE


_ACCEPTED = WriteOptions(wait=WaitFor.ACCEPTED)
_VISIBLE = WriteOptions(wait=WaitFor.VISIBLE)


class Consolidation(StrEnum):
    """How an engine consolidates (``EngineDescriptor.consolidation``).

    ``none``: ``consolidate`` is ``Unsupported``. ``on_demand``: it starts or runs a build (``started`` or
    ``completed``). ``scheduled``: the engine builds on its own schedule and answers ``scheduled``.
    ``automatic``: it rebuilds after writes, and an explicit call still builds (``started`` or ``completed``).
    """

    NONE = "none"
    ON_DEMAND = "on_demand"
    SCHEDULED = "scheduled"
    AUTOMATIC = "automatic"


class ConsolidateRequest(ContractModel):
    """``{reach, kinds}``: build beliefs for the scopes in ``reach`` (``kinds`` empty = all; left out of JSON)."""

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"kinds"})

    reach: Reach
    kinds: tuple[ItemKind, ...] = ()

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        if len(set(self.kinds)) != len(self.kinds):
            raise InvalidRequest("names a kind twice", field="kinds")
        return self

    def admitted_kinds(self) -> tuple[ItemKind, ...]:
        """The kinds to build from (all when empty)."""
        return self.kinds or ItemKind.all()


class ConsolidateStatus(StrEnum):
    """What a consolidate call did."""

    STARTED = "started"
    SCHEDULED = "scheduled"
    COMPLETED = "completed"


class ConsolidateReceipt(ContractModel):
    """``{status, jobs, scopes, built?}``: what a consolidate call did.

    ``scopes`` counts nodes × kinds; ``built`` is the number of beliefs a completed build produced, when it
    reports them.
    """

    status: ConsolidateStatus
    jobs: tuple[str, ...] = ()
    scopes: StrictInt = 0
    built: StrictInt | None = None

    @classmethod
    def scheduled(cls) -> ConsolidateReceipt:
        """``{scheduled, [], 0}``."""
        return cls(status=ConsolidateStatus.SCHEDULED)


class BeliefsRequest(ContractModel):
    """``{reach, query?, limit}``: read built beliefs; ranked for ``query``, else most confident then newest.

    ``limit`` is a page size like every read's (1..=``MAX_PAGE_LIMIT``, ``query.Limit``).
    """

    reach: Reach
    query: NonBlank | None = None
    limit: Limit = 10


class BuildScope(ContractModel):
    """``{namespace, kinds, items?, last_write?, last_build?}``: one node a belief build can cover.

    ``MemoryEngine.scopes`` lists these so a worker can run one ``consolidate`` per scope (each its own unit,
    with its own lock) and beat can build only what was written since its last build.

    Attributes:
        namespace: The node.
        kinds: The admitted kinds held at that node.
        items: Items held there, when the engine knows.
        last_write: When the node was last written, when the engine tracks it.
        last_build: When beliefs were last built there, when the engine tracks it.
    """

    namespace: Namespace
    kinds: tuple[ItemKind, ...] = ()
    items: StrictInt | None = None
    last_write: Timestamp | None = None
    last_build: Timestamp | None = None

    @property
    def due(self) -> bool:
        """True when the node was written after its last build (or the engine does not track either)."""
        if self.last_write is None or self.last_build is None:
            return True
        return self.last_write > self.last_build

    def request(self) -> ConsolidateRequest:
        """The build for exactly this node and its kinds."""
        return ConsolidateRequest(reach=Reach.exact(self.namespace), kinds=self.kinds)
