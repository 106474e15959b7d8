"""What a PostgreSQL read serves under the log (``docs/log-model.md`` rule 7), now or as of an LSN.

Reads serve only ``live`` memories, and by default only the ``short``, ``mid`` and ``long`` tiers (a request's
``tiers`` names others); ``list`` serves live memories of every tier; ``get`` shows every held memory with its
status and tier. Each rule is a SQL predicate over the read's alias ``i`` that the read ANDs to its filter
(``filters.Where``), so every part of a ranked read (keyword, vector, the candidates' signals) applies it. Now,
the materialised columns say it; as of an LSN (``log_ops.Past``), the memories changed since take their state
then, and every other memory is as it is now. Content forgotten since is not in the database, so no past view
shows it. Pure: values in, SQL text and parameters (or annotated hits) out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memory_core.memory_log import STANDARD_TIERS, MemoryStatus, Tier
from memory_core.query import Hit

from .log_ops import Past

__all__ = ["annotate", "listed", "served", "served_beliefs", "shown_ids"]

Predicate = tuple[str, list[Any]]


def _tiers(tiers: Sequence[Tier]) -> list[str]:
    return [t.value for t in (tiers or STANDARD_TIERS)]


def served(tiers: Sequence[Tier], past: Past | None) -> Predicate:
    """The items a ranked read serves: live, in the request's tiers (empty: every tier but archive)."""
    wanted = _tiers(tiers)
    now = "i.status = 'live' AND i.tier = ANY(%s::text[])"
    if past is None or not past.then:
        return now, [wanted]
    then = [
        i for i, h in past.then.items() if h is not None and h.status is MemoryStatus.LIVE and h.tier.value in wanted
    ]
    return f"({now} AND NOT i.id = ANY(%s::text[])) OR i.id = ANY(%s::text[])", [wanted, list(past.then), then]


def listed(past: Past | None, *, every_status: bool) -> Predicate:
    """The items a listing admits: live ones (``list``) or every held one (``export``)."""
    if past is None:
        return ("true", []) if every_status else ("i.status = 'live'", [])
    if every_status:
        return "NOT i.id = ANY(%s::text[])", [[i for i, h in past.then.items() if h is None]]
    return (
        "(i.status = 'live' AND NOT i.id = ANY(%s::text[])) OR i.id = ANY(%s::text[])",
        [past.ids(served=False), past.ids(served=True)],
    )


def served_beliefs(past: Past | None) -> Predicate:
    """The built beliefs a read serves (``beliefs.rank`` adds their build status, ``active``): live ones."""
    if past is None or not past.then:
        return "i.log_status = 'live'", []
    return (
        "(i.log_status = 'live' AND NOT i.id = ANY(%s::text[])) OR i.id = ANY(%s::text[])",
        [past.ids(served=False), past.ids(served=True)],
    )


def shown_ids(ids: Sequence[str], past: Past | None) -> list[str]:
    """``ids`` without those not held at the view's LSN (all of them now)."""
    if past is None:
        return list(ids)
    return [i for i in ids if i not in past.then or past.then[i] is not None]


def annotate(hits: Sequence[Hit], state: Mapping[str, tuple[str, str]], past: Past | None) -> list[Hit]:
    """``hits`` with each item's status and tier (now, or at the view's LSN).

    Args:
        hits: The hits, in the read's order.
        state: ``id → (status, tier)`` as stored now (the materialised columns), read with the hits' rows.
        past: The view's state at its LSN (None: now).
    """
    out: list[Hit] = []
    for h in hits:
        if h.id not in state:
            out.append(h)
            continue
        status, tier = MemoryStatus(state[h.id][0]), Tier(state[h.id][1])
        then = past.then.get(h.id) if past is not None else None
        if then is not None:
            status, tier = then.status, then.tier
        out.append(h.model_copy(update={"status": status, "tier": tier}))
    return out
