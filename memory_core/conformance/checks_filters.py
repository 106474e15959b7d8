"""Checks 9-10 of the contract reference §2: fetch_filters and unsupported_modes."""

from __future__ import annotations

from memory_core.conformance.context import CheckContext, show_ids
from memory_core.conformance.fixtures import probes
from memory_core.errors import Unsupported
from memory_core.query import FetchMode, FetchRequest

__all__ = ["fetch_filters", "unsupported_modes"]

_FETCH_LIMIT = 50
"""Hits asked of every probe fetch (reference §2, fetch_filters)."""


def fetch_filters(c: CheckContext) -> str:
    """Each metadata field filters exactly its probe, in every declared fetch mode, and ``list`` agrees.

    One probe per field is stored in the probe workspace; for each probe and each declared mode, a fetch for
    the marker (limit 50) with the probe's filter returns exactly that probe, and so does ``list`` with the
    same filter. Finally a fetch filtered only by the probe workspace returns every probe, in every mode.
    """
    run_probes = probes(c.run)
    ids = [c.call(c.engine.store, probe.item).id for probe in run_probes]
    modes = c.call(c.engine.descriptor).fetch_modes
    for probe, probe_id in zip(run_probes, ids, strict=True):
        for mode in modes:
            request = FetchRequest(query=c.run.marker, mode=mode, filter=probe.filter, limit=_FETCH_LIMIT)
            found = sorted({hit.id for hit in c.call(c.engine.fetch, request).hits})
            c.ensure(
                found == [probe_id],
                f"a {mode.value} fetch filtered by {probe.field} returned {show_ids(found)}, expected only {probe_id}",
            )
        listed = sorted(set(c.ids(probe.filter)))
        c.ensure(
            listed == [probe_id],
            f"list filtered by {probe.field} returned {show_ids(listed)}, expected only {probe_id}",
        )
    for mode in modes:
        request = FetchRequest(query=c.run.marker, mode=mode, filter=c.run.probe_filter(), limit=_FETCH_LIMIT)
        found_all = {hit.id for hit in c.call(c.engine.fetch, request).hits}
        missed = [p.field for p, i in zip(run_probes, ids, strict=True) if i not in found_all]
        c.ensure(not missed, f"a {mode.value} fetch filtered by the probe workspace missed the probes {missed}")
    return f"{len(run_probes)} fields × {len(modes)} modes"


def unsupported_modes(c: CheckContext) -> str:
    """Every fetch mode the descriptor does not declare fails ``Unsupported``."""
    declared = c.call(c.engine.descriptor).fetch_modes
    undeclared = [mode for mode in FetchMode.all() if mode not in declared]
    for mode in undeclared:
        request = FetchRequest(query=c.run.marker, mode=mode, filter=c.run.filter(), limit=5)
        c.refuses(f"an undeclared {mode.value} fetch", c.engine.fetch, request, (Unsupported,))
    return f"refused {', '.join(m.value for m in undeclared)}" if undeclared else "every mode declared"
