"""Attribution: who said what an event records (Direct, the ``observed_actor`` setting).

Rules (the TinyMemory reference ``cortex/engine/attribution.rs``, after CortexDB 0.10.5's write API):

* an assistant turn is observed from its agent (``agent:<agent_id>``); an item naming
  ``meta.observed_actor`` from that actor; anything else is the owner's own and carries neither field;
* an attributed event's ``subject`` is the memory's owner (``scope_owner``, else the caller ``whoami`` names);
* both are sent as ``{id, type}``, and the event's idempotency key is derived again over the attributed body;
* an actor id that is not ``type:id``, or looks like a phone number, is never sent;
* a write CortexDB refuses for it (401/403, or 400/413/422) is sent again without the fields, so attribution
  never loses a write; a permission refusal turns attribution off for the engine's life (the credential lacks
  ``scope.write.on_behalf_of``), a validation refusal only for that write.

Off, nothing on the wire changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from memory_core.engines.cortexdb.envelope import idempotency_key

__all__ = ["Attribution", "actor_of", "attribute", "strip"]

_LOG = logging.getLogger("memory_core.engines.cortexdb")


class Attribution:
    """Whether attribution is on, and whether CortexDB refused it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._refused = False
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """On, and not refused yet."""
        with self._lock:
            return self.enabled and not self._refused

    def refuse(self, reason: str) -> None:
        """Turn attribution off after CortexDB refused it as a permission."""
        with self._lock:
            first = not self._refused
            self._refused = True
        if first:
            _LOG.warning("cortexdb refused attribution; writing without observed_actor from now on: %s", reason)


def _looks_like_phone(text: str) -> bool:
    return all(c.isdigit() or c in "+-(). " for c in text) and sum(c.isdigit() for c in text) >= 7


def _actor_id(raw: str) -> str | None:
    value = raw.strip()
    kind, sep, rest = value.partition(":")
    if not sep or not kind or not rest or any(c.isspace() for c in value) or _looks_like_phone(rest):
        return None
    return value


def actor_of(envelope: Mapping[str, Any]) -> str | None:
    """Who an event (by its envelope) is observed from, when someone other than the owner; pure."""
    raw = envelope.get("meta")
    meta: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    turn = envelope.get("turn")
    if isinstance(turn, dict):
        agent = meta.get("agent_id")
        if turn.get("role") == "assistant" and isinstance(agent, str) and agent.strip():
            return _actor_id(f"agent:{agent.strip()}")
        return None
    named = meta.get("observed_actor")
    if isinstance(named, dict) and isinstance(named.get("id"), str):
        return _actor_id(named["id"])
    return None


def _typed(actor: str) -> dict[str, str]:
    return {"id": actor, "type": actor.partition(":")[0]}


def attribute(body: Mapping[str, Any], actor: str, subject: str | None) -> dict[str, Any]:
    """``body`` with ``observed_actor`` (and ``subject``) added and its idempotency key derived anew; pure."""
    out = {k: v for k, v in body.items() if k != "idempotency_key"}
    out["observed_actor"] = _typed(actor)
    if subject:
        out["subject"] = _typed(subject)
    out["idempotency_key"] = idempotency_key(out)
    return out


def strip(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without what ``attribute`` added, keyed as it was; pure."""
    out = {k: v for k, v in body.items() if k not in ("idempotency_key", "observed_actor", "subject")}
    out["idempotency_key"] = idempotency_key(out)
    return out
