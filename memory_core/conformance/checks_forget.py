"""Checks 13-15 and 18 of the contract reference §2: empty_forget, forget_by_id, forget_by_filter, cleanup."""

from __future__ import annotations

from memory_core.conformance.context import CheckContext
from memory_core.conformance.report import EngineFailed
from memory_core.query import ForgetTarget

__all__ = ["cleanup", "empty_forget", "forget_by_filter", "forget_by_id"]


def _count(c: CheckContext) -> int:
    """Items the run holds: its workspace and its probes' workspace."""
    return len(c.ids(c.run.filter())) + len(c.ids(c.run.probe_filter()))


def empty_forget(c: CheckContext) -> str:
    """``{"ids": []}`` and ``{"filter": {}}`` are both ``InvalidRequest``, and the run's item count is unchanged."""
    before = _count(c)
    c.refuses("a forget of no ids", c.engine.forget, {"ids": []})
    c.refuses("a forget by the empty filter", c.engine.forget, {"filter": {}})
    after = _count(c)
    c.ensure(before == after, f"a refused forget changed the run's item count from {before} to {after}")
    return f"{before} items kept"


def forget_by_id(c: CheckContext) -> str:
    """A stored document forgotten by id: ``forgotten == 1``, gone, others untouched; again ``forgotten == 0``."""
    keep = len(c.ids(c.run.filter()))
    item_id = c.call(c.engine.store, c.run.document("forget by id")).id
    report = c.call(c.engine.forget, ForgetTarget(ids=(item_id,)))
    c.ensure(report.forgotten == 1, f"forgetting one id reported {report.forgotten} forgotten")
    listed = c.ids(c.run.filter())
    c.ensure(item_id not in listed, f"{item_id} still lists after it was forgotten")
    c.ensure(len(listed) == keep, f"forgetting one id changed the other items: {keep} became {len(listed)}")
    again = c.call(c.engine.forget, ForgetTarget(ids=(item_id,)))
    c.ensure(again.forgotten == 0, f"forgetting a gone id reported {again.forgotten} forgotten")
    return "1 then 0"


def forget_by_filter(c: CheckContext) -> str:
    """Two documents tagged ``<m>-drop`` forgotten by ``tags_any`` + workspace: 2 forgotten, none left, others kept."""
    keep = len(c.ids(c.run.filter()))
    tag = f"{c.run.marker}-drop"
    for label in ("drop one", "drop two"):
        c.call(c.engine.store, c.run.document(label, c.run.meta(tags=(tag,))))
    flt = c.run.filter(tags_any=(tag,))
    report = c.call(c.engine.forget, ForgetTarget(filter=flt))
    c.ensure(report.forgotten == 2, f"forgetting two tagged items reported {report.forgotten} forgotten")
    left = c.ids(flt)
    c.ensure(not left, f"{len(left)} tagged items survived their forget")
    after = len(c.ids(c.run.filter()))
    c.ensure(after == keep, f"a filtered forget touched other items: {keep} became {after}")
    return "2 forgotten"


def cleanup(c: CheckContext) -> str:
    """Forget by the workspace filter and by the probe filter; nothing may survive either.

    Runs after every run, passed or failed. Both forgets are attempted even when the first fails, so a
    half-broken engine keeps as little of the run as it can.
    """
    errors: list[EngineFailed] = []
    forgotten = 0
    for flt in (c.run.filter(), c.run.probe_filter()):
        try:
            forgotten += c.call(c.engine.forget, ForgetTarget(filter=flt)).forgotten
        except EngineFailed as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
    for label, flt in (("workspace", c.run.filter()), ("probe workspace", c.run.probe_filter())):
        left = c.ids(flt)
        c.ensure(not left, f"{len(left)} items survived a forget by the {label} filter")
    return f"{forgotten} forgotten"
