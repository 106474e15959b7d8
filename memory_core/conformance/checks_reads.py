"""Checks 5-6 of the contract reference §2: explore and get agree with ``list``."""

from __future__ import annotations

from collections import Counter

from memory_core.conformance.context import CheckContext, show_ids
from memory_core.errors import InvalidRequest
from memory_core.explore import ExploreRequest, Facet
from memory_core.query import GetRequest

__all__ = ["explore", "get"]


def explore(c: CheckContext) -> str:
    """Facet counts over the run's workspace agree with a listing.

    * The kind facet: ``facet == kind``, not truncated, ``total`` = the listing's count, per-kind counts equal
      the listing's, buckets sorted by count descending; narrowing by each bucket lists exactly its count.
    * The workspace facet: one bucket, the run's workspace, counting every item, ``missing = 0``.
    * ``limit = 0`` is ``InvalidRequest``.
    """
    flt = c.run.filter()
    listed = c.list_all(flt)
    by_kind = Counter(hit.kind.value for hit in listed)

    page = c.call(c.engine.explore, ExploreRequest(facet=Facet.KIND, filter=flt, limit=10))
    c.ensure(page.facet is Facet.KIND, f"asked for the kind facet, got {page.facet.value}")
    c.ensure(not page.truncated, f"{len(listed)} items truncated the scan")
    c.ensure(page.total == len(listed), f"explore saw {page.total} items, list {len(listed)}")
    counted = {b.value: b.count for b in page.buckets}
    c.ensure(counted == dict(by_kind), f"explore counted {counted} per kind, list {dict(by_kind)}")
    counts = [b.count for b in page.buckets]
    c.ensure(counts == sorted(counts, reverse=True), f"buckets are not largest first: {counts}")
    for bucket in page.buckets:
        try:
            narrowed = Facet.KIND.narrow(flt, bucket.value)
        except InvalidRequest as exc:
            c.fail(f"the kind bucket {bucket.value!r} does not narrow: {exc}")
        n = len(c.list_all(narrowed))
        c.ensure(n == bucket.count, f"the {bucket.value!r} bucket counts {bucket.count} but narrows to {n} items")

    page = c.call(c.engine.explore, ExploreRequest(facet=Facet.WORKSPACE, filter=flt, limit=10))
    buckets = [(b.value, b.count) for b in page.buckets]
    c.ensure(
        buckets == [(c.run.workspace, len(listed))] and page.missing == 0,
        f"the workspace facet gave {buckets} (missing {page.missing}), expected [({c.run.workspace!r}, "
        f"{len(listed)})] (missing 0)",
    )
    c.refuses("an explore with limit 0", c.engine.explore, {"facet": "kind", "limit": 0})
    return f"{len(listed)} items, {len(by_kind)} kinds"


def get(c: CheckContext) -> str:
    """Reading the run's ids in reverse order, an unknown id at position 1, answers the known ids in that order.

    Each hit's kind, metadata and text equal its listing; an empty id list is ``InvalidRequest``.
    """
    listed = c.list_all(c.run.filter())
    c.ensure(bool(listed), "the run has nothing to read back")
    by_id = {hit.id: hit for hit in listed}
    ids = [hit.id for hit in reversed(listed)]
    ids.insert(min(1, len(ids)), f"{c.run.marker}-missing")
    hits = c.call(c.engine.get, GetRequest(ids=tuple(ids)))
    wanted = [i for i in ids if i in by_id]
    got = [hit.id for hit in hits]
    c.ensure(got == wanted, f"asked for {show_ids(wanted)} (and one unknown id), got {show_ids(got)}")
    for hit in hits:
        same = by_id[hit.id]
        c.ensure(
            (hit.kind, hit.meta, hit.text) == (same.kind, same.meta, same.text),
            f"{hit.id} reads back differently from its listing",
        )
    c.refuses("a get of no ids", c.engine.get, {"ids": []})
    return f"{len(hits)} ids in order"
