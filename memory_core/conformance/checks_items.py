"""Checks 1-4 of the contract reference §2: health, round_trip, export, replay.

Each check takes a ``CheckContext``, raises ``CheckFailed``/``EngineFailed`` on a failure or ``CheckSkipped``
when the engine does not offer an optional feature, and returns a short detail for the report.
"""

from __future__ import annotations

from datetime import datetime

from memory_core._model import format_timestamp
from memory_core.conformance.context import CheckContext, show_ids
from memory_core.conformance.fixtures import edge_time_items, round_trip_items
from memory_core.conformance.report import CheckSkipped

__all__ = ["export", "health", "replay", "round_trip"]


def health(c: CheckContext) -> str:
    """The engine reports itself serving (``health().is_serving``)."""
    report = c.call(c.engine.health)
    c.ensure(report.is_serving, f"the engine reports {report.state.value}: {report.reason or 'no reason given'}")
    return report.state.value


def round_trip(c: CheckContext) -> str:
    """One item of each kind, every optional field set, stores and lists back unchanged.

    For each: a first store is not a replay; it lists exactly once under its receipt id with the same kind,
    metadata, confidence and ``text == render_text()``; a kind-filtered listing returns only that kind. Then a
    conversation at each of ``fixtures.EDGE_TIMES`` (year 1, year 999, the microsecond before the epoch, past
    32-bit Unix time, the last microsecond of year 9999) lists back with the same ``observed_at``: every time the
    contract accepts reads back (issue 11 rule 1).
    """
    for item in round_trip_items(c.run):
        kind = item.item_kind.value
        receipt = c.call(c.engine.store, item)
        c.ensure(not receipt.replayed, f"a first store of a {kind} reported a replay")
        listed = c.list_all(c.run.filter(kinds=(item.item_kind,)))
        found = [hit for hit in listed if hit.id == receipt.id]
        c.ensure(len(found) == 1, f"a stored {kind} listed {len(found)} times under its receipt id {receipt.id}")
        hit = found[0]
        c.ensure(hit.kind is item.item_kind, f"stored a {kind}, listed a {hit.kind.value}")
        c.ensure(
            hit.meta == item.item_meta,
            f"{kind} metadata changed: stored {item.item_meta.to_json()}, listed {hit.meta.to_json()}",
        )
        c.ensure(
            hit.confidence == item.confidence_value(),
            f"{kind} confidence changed: stored {item.confidence_value()}, listed {hit.confidence}",
        )
        c.ensure(
            hit.text == item.render_text(), f"{kind} text changed: stored {item.render_text()!r}, listed {hit.text!r}"
        )
        others = sorted({h.kind.value for h in listed if h.kind is not item.item_kind})
        c.ensure(not others, f"a listing filtered to {kind} returned {others}")
    edges = edge_time_items(c.run)
    receipts = [c.call(c.engine.store, item) for item in edges]
    listed_at = {hit.id: hit.meta.observed_at for hit in c.list_all(c.run.filter())}
    for item, receipt in zip(edges, receipts, strict=True):
        at = item.item_meta.observed_at
        c.ensure(receipt.id in listed_at, f"a conversation observed at {_shown(at)} did not list back")
        c.ensure(
            listed_at[receipt.id] == at,
            f"observed_at changed: stored {_shown(at)}, listed {_shown(listed_at[receipt.id])}",
        )
    return f"3 kinds, {len(edges)} edge times"


def _shown(at: datetime | None) -> str:
    return "none" if at is None else format_timestamp(at)


def export(c: CheckContext) -> str:
    """Engines that export hand every item back whole under its fingerprint; re-storing it is a replay.

    The round-trip items are stored again and exported two per page: ``incomplete`` is empty, each item is
    exported exactly once under ``id == fingerprint`` and equal to what was stored, and storing the exported
    item again is a replay with the same id. ``Unsupported`` on the first page skips the check.

    Raises:
        CheckSkipped: the engine does not export.
    """
    items = round_trip_items(c.run)
    for item in items:
        c.call(c.engine.store, item)
    exported = c.export_all(c.run.filter())
    if exported is None:
        raise CheckSkipped("the engine does not export")
    for item in items:
        kind = item.item_kind.value
        found = [e for e in exported if e.id == item.id]
        c.ensure(len(found) == 1, f"a stored {kind} was exported {len(found)} times under its id {item.id}")
        c.ensure(
            found[0].item == item,
            f"an exported {kind} differs from the stored one: stored {item.to_json()}, "
            f"exported {found[0].item.to_json()}",
        )
        again = c.call(c.engine.store, found[0].item)
        c.ensure(
            again.replayed and again.id == item.id,
            f"storing an exported {kind} again answered {again.to_json()}, not a replay of {item.id}",
        )
    wrong = [e.id for e in exported if e.id != e.item.id]
    c.ensure(not wrong, f"exported ids are not their item's fingerprint: {show_ids(wrong)}")
    return f"{len(exported)} exported"


def replay(c: CheckContext) -> str:
    """Storing the same document twice is a replay: ``replayed = True``, the same id, and one copy listed."""
    item = c.run.document("replay")
    first = c.call(c.engine.store, item)
    second = c.call(c.engine.store, item)
    c.ensure(second.replayed, "an identical second store was not reported as a replay")
    c.ensure(first.id == second.id, f"a replay changed the id from {first.id} to {second.id}")
    copies = c.ids(c.run.filter()).count(first.id)
    c.ensure(copies == 1, f"an identical second store left {copies} copies")
    return "replayed"
