"""What an engine is and offers (``EngineDescriptor``), and how it is doing (``EngineHealth``)."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import ConfigDict

from memory_core._model import ContractModel, StrictBool
from memory_core.consolidation import Consolidation
from memory_core.errors import Unsupported
from memory_core.query import FetchMode

__all__ = ["EngineDescriptor", "EngineHealth", "HealthState"]


class EngineDescriptor(ContractModel):
    """What an engine is and offers (contract reference §1.11).

    JSON: ``{id, label, description, hosted, needs_endpoint, needs_key, default_endpoint?, fetch_modes,
    consolidation, log?, tiers?}``.

    ``log`` and ``tiers`` are the optional capabilities of memory as a log (seed 002; ``memory_core.memory_log``):
    ``log`` offers ``current_lsn``, ``log``, ``as_of``, ``retract``, ``rollback``, ``history`` and ``move``;
    ``tiers`` honours a read's ``tiers`` filter. Both default to false and are left out of JSON while false, so
    an engine that declares neither writes the JSON older clients read, and older JSON reads as before.

    Unlike requests, a descriptor reads keys it does not know (a capability added after this version) as a
    capability not offered, so a newer engine's descriptor stays readable here as this one's stays readable by
    older versions while it declares nothing new.
    """

    model_config = ContractModel.model_config | ConfigDict(extra="ignore")
    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"log", "tiers"})

    id: str
    label: str
    description: str = ""
    hosted: StrictBool = False
    needs_endpoint: StrictBool = False
    needs_key: StrictBool = False
    default_endpoint: str | None = None
    fetch_modes: tuple[FetchMode, ...] = ()
    consolidation: Consolidation = Consolidation.NONE
    log: StrictBool = False
    tiers: StrictBool = False

    def supports(self, mode: FetchMode) -> bool:
        """True when ``mode`` is declared."""
        return mode in self.fetch_modes

    def ensure_mode(self, mode: FetchMode) -> None:
        """Raise ``Unsupported`` unless ``mode`` is declared.

        Raises:
            Unsupported: "engine `X` does not offer M fetch".
        """
        if mode not in self.fetch_modes:
            raise Unsupported(f"engine `{self.id}` does not offer {mode.value} fetch")

    def ensure_log(self, what: str) -> None:
        """Raise ``Unsupported`` unless the engine keeps a log.

        Raises:
            Unsupported: "engine `X` keeps no log (no <what>)".
        """
        if not self.log:
            raise Unsupported(f"engine `{self.id}` keeps no log (no {what})")

    def ensure_tiers(self) -> None:
        """Raise ``Unsupported`` unless the engine honours a ``tiers`` filter.

        Raises:
            Unsupported: "engine `X` does not filter by tier".
        """
        if not self.tiers:
            raise Unsupported(f"engine `{self.id}` does not filter by tier")

    def preferred_mode(self) -> FetchMode | None:
        """``hybrid`` when declared, else the first declared mode, else None."""
        if FetchMode.HYBRID in self.fetch_modes:
            return FetchMode.HYBRID
        return self.fetch_modes[0] if self.fetch_modes else None


class HealthState(StrEnum):
    """``ok``, ``degraded`` or ``down``."""

    OK = "ok"
    DEGRADED = "degraded"
    DOWN = "down"


class EngineHealth(ContractModel):
    """``{state, reason?}``; an engine is serving unless it is ``down``."""

    state: HealthState = HealthState.OK
    reason: str | None = None

    @property
    def is_serving(self) -> bool:
        """True unless ``down``."""
        return self.state is not HealthState.DOWN

    @classmethod
    def ok(cls) -> EngineHealth:
        """A healthy engine."""
        return cls()

    @classmethod
    def down(cls, reason: str) -> EngineHealth:
        """An engine that cannot serve, and why."""
        return cls(state=HealthState.DOWN, reason=reason)
