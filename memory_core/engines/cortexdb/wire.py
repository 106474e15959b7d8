"""The two wires: CortexDB Direct and the TinyHumans hosted backend (contract reference §5.1, §5.3).

| logical route | Direct | TinyHumans |
| --- | --- | --- |
| append one event | ``POST v1/experience`` | ``POST memory/experience`` |
| append a batch | ``POST v1/experience/bulk`` | (none: one request per event) |
| list a scope | ``GET v1/events`` | ``GET memory/events`` |
| recall pack | ``POST v1/recall`` | ``POST memory/recall`` |
| forget | ``POST v1/forget`` | ``POST memory/forget`` |
| answer | ``POST v1/answer`` | ``POST memory/answer`` |
| list scopes | ``GET v1/scopes/list`` | ``GET memory/scopes`` |
| health | ``GET v1/admin/health`` | ``GET memory/scopes?prefix=tmh%3Aprobe&limit=1`` |
| build beliefs | ``POST v1/beliefs/build`` | never |
| list beliefs | ``GET v1/beliefs`` | none |
| erase | ``POST v1/erasures`` | ``POST memory/v1/erasures``, ``DELETE memory`` (whole tree) |
| whoami | ``GET v1/auth/whoami`` | none |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["DIRECT", "HOSTED", "MANAGED_DIRECT", "WIRES", "Wire"]

MANAGED_DIRECT: Final = "https://api-v1.cortexdb.ai/"
"""The managed CortexDB endpoint (consolidation is ``automatic`` there, ``on_demand`` elsewhere)."""


@dataclass(frozen=True)
class Wire:
    """One wire's identity and routes (paths relative to the endpoint).

    Attributes:
        id: The engine id, ``cortexdb`` or ``tinyhumans``.
        hosted: True for TinyHumans (``{success, data}`` envelopes, ``errorCode``, Idempotency-Key headers).
        default_endpoint: The endpoint used when the URL names none.
        bulk / build / beliefs / whoami: None where the wire has no such route.
    """

    id: str
    label: str
    hosted: bool
    default_endpoint: str
    experience: str
    events: str
    recall: str
    forget: str
    answer: str
    scopes: str
    health: str
    health_params: tuple[tuple[str, str], ...]
    erasures: str
    bulk: str | None = None
    build: str | None = None
    beliefs: str | None = None
    whoami: str | None = None
    whole_tree: str | None = None


DIRECT: Final = Wire(
    id="cortexdb",
    label="CortexDB (Direct)",
    hosted=False,
    default_endpoint=MANAGED_DIRECT,
    experience="v1/experience",
    events="v1/events",
    recall="v1/recall",
    forget="v1/forget",
    answer="v1/answer",
    scopes="v1/scopes/list",
    health="v1/admin/health",
    health_params=(),
    erasures="v1/erasures",
    bulk="v1/experience/bulk",
    build="v1/beliefs/build",
    beliefs="v1/beliefs",
    whoami="v1/auth/whoami",
)
HOSTED: Final = Wire(
    id="tinyhumans",
    label="TinyHumans (hosted CortexDB)",
    hosted=True,
    default_endpoint="https://api.tinyhumans.ai/",
    experience="memory/experience",
    events="memory/events",
    recall="memory/recall",
    forget="memory/forget",
    answer="memory/answer",
    scopes="memory/scopes",
    health="memory/scopes",
    health_params=(("prefix", "tmh:probe"), ("limit", "1")),
    erasures="memory/v1/erasures",
    whole_tree="memory",
)
WIRES: Final = {"cortexdb": DIRECT, "tinyhumans": HOSTED}
"""Each wire by engine id (``list_engines()`` of reference §5.1)."""
