"""Checks 11-12 of the contract reference §2: namespaces (every read honours its reach) and erase."""

from __future__ import annotations

from memory_core.conformance.context import CheckContext, show_ids
from memory_core.conformance.report import CheckSkipped, EngineFailed
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.explore import ExploreRequest, Facet
from memory_core.items import Learning, LearningKind
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import ROOT, Namespace, Reach
from memory_core.query import EraseRequest, FetchRequest, ForgetTarget, GetRequest

__all__ = ["erase", "namespaces"]

_NAMESPACES_TAG = "namespaces"
"""Tag isolating the namespaces check's items from the rest of the run."""
_ERASE_TAG = "erase"
"""Tag isolating the erase check's items from the rest of the run."""


def _learning(c: CheckContext, label: str, node: Namespace, tag: str) -> Learning:
    return Learning(
        text=f"{c.run.marker} {label}",
        kind=LearningKind.FACT,
        confidence=0.9,
        meta=c.run.meta(namespace=node, tags=(tag,)),
    )


def _ids_in(c: CheckContext, reach: Reach) -> set[str]:
    return set(c.ids(c.run.filter(tags_any=(_NAMESPACES_TAG,), reach=reach)))


def namespaces(c: CheckContext) -> str:
    """Items at the root, two sibling agents and a sub-agent: each read sees exactly what its reach admits.

    Four learnings tagged ``namespaces`` are stored in one batch at root, ``agent:<m>-a``, ``agent:<m>-b`` and
    ``agent:<m>-a/agent:scout``; a and b share their text, yet their ids differ. Listing per reach, ``get``
    under ``of(b)``, a fetch under ``of(a)``, the namespace facet, and a forget by ``exact(b)`` are checked
    against the table of reference §2 check 11. A sibling is never visible.
    """
    a, b, scout = c.run.node("a"), c.run.node("b"), c.run.node("a/agent:scout")
    items = [
        _learning(c, "root shared fact", ROOT, _NAMESPACES_TAG),
        _learning(c, "same shared fact", a, _NAMESPACES_TAG),
        _learning(c, "same shared fact", b, _NAMESPACES_TAG),
        _learning(c, "scout shared fact", scout, _NAMESPACES_TAG),
    ]
    receipts = c.call(c.engine.store_many, items)
    c.ensure(len(receipts) == 4, f"a batch of 4 answered {len(receipts)} receipts")
    id_root, id_a, id_b, id_scout = (r.id for r in receipts)
    c.ensure(id_a != id_b, "the same text at two sibling agents stored as one item")
    names = {id_root: "root", id_a: "a", id_b: "b", id_scout: "scout"}

    def named(ids: set[str] | list[str]) -> list[str]:
        return [names.get(i, i) for i in ids]

    cases = [
        ("of(a)", Reach.of(a), {id_root, id_a}),
        ("of(b)", Reach.of(b), {id_root, id_b}),
        ("of(scout)", Reach.of(scout), {id_root, id_a, id_scout}),
        ("of(root)", Reach.of(ROOT), {id_root}),
        ("exact(a)", Reach.exact(a), {id_a}),
        ("subtree(a)", Reach.subtree(a), {id_a, id_scout}),
    ]
    for label, reach, wanted in cases:
        got = _ids_in(c, reach)
        c.ensure(got == wanted, f"reach {label} listed {sorted(named(got))}, expected {sorted(named(wanted))}")

    hits = c.call(c.engine.get, GetRequest(ids=(id_root, id_a, id_b, id_scout), reach=Reach.of(b)))
    got_ids = [hit.id for hit in hits]
    c.ensure(got_ids == [id_root, id_b], f"get under of(b) returned {named(got_ids)}, expected [root, b]")

    modes = c.call(c.engine.descriptor).fetch_modes
    if modes:
        flt = c.run.filter(tags_any=(_NAMESPACES_TAG,), reach=Reach.of(a))
        request = FetchRequest(query=f"{c.run.marker} shared fact", mode=modes[0], filter=flt, limit=20)
        found = [hit.id for hit in c.call(c.engine.fetch, request).hits]
        c.ensure(set(found) <= {id_root, id_a}, f"a {modes[0].value} fetch under of(a) found {named(found)}")

    tagged = c.run.filter(tags_any=(_NAMESPACES_TAG,))
    page = c.call(c.engine.explore, ExploreRequest(facet=Facet.NAMESPACE, filter=tagged, limit=10))
    counted = sorted((bucket.value, bucket.count) for bucket in page.buckets)
    expected = sorted((str(node), 1) for node in (ROOT, a, b, scout))
    c.ensure(counted == expected, f"the namespace facet counted {counted}, expected {expected}")

    forget = ForgetTarget(filter=tagged.narrowed(reach=Reach.exact(b)))
    report = c.call(c.engine.forget, forget)
    c.ensure(report.forgotten == 1, f"forgetting by exact(b) reported {report.forgotten} forgotten, not 1")
    left = _ids_in(c, Reach.subtree(ROOT))
    c.ensure(
        left == {id_root, id_a, id_scout},
        f"after forgetting b, subtree(root) lists {sorted(named(left))}, expected [a, root, scout]",
    )
    return "6 reaches, get, fetch, facet, forget"


def erase(c: CheckContext) -> str:
    """Engines that erase remove a node and its subtree for good and leave a sibling alone.

    Learnings at ``agent:<m>-erased``, its child and the sibling ``agent:<m>-kept``: erasing the whole tree
    without ``whole_tree`` is refused (``InvalidRequest`` or ``Unsupported``); ``erase(subtree(node))`` leaves
    only the sibling's item; re-storing the erased items is not a replay, and all 3 list again.

    Raises:
        CheckSkipped: the engine does not erase.
    """
    node, child, sibling = c.run.node("erased"), c.run.node("erased/agent:child"), c.run.node("kept")
    at_node = _learning(c, "node erasable fact", node, _ERASE_TAG)
    at_child = _learning(c, "child erasable fact", child, _ERASE_TAG)
    at_sibling = _learning(c, "sibling erasable fact", sibling, _ERASE_TAG)
    for item in (at_node, at_child, at_sibling):
        c.call(c.engine.store, item)

    whole = {"reach": Reach.subtree(ROOT).to_dict()}
    c.refuses("erasing the whole tree without whole_tree", c.engine.erase, whole, (InvalidRequest, Unsupported))
    try:
        c.engine.erase(EraseRequest(reach=Reach.subtree(node)))
    except Unsupported:
        raise CheckSkipped("the engine does not erase") from None
    except Exception as exc:
        raise EngineFailed(c.check, exc) from exc

    flt: MetaFilter = c.run.filter(kinds=(ItemKind.LEARNING,), tags_any=(_ERASE_TAG,))
    left = c.ids(flt)
    c.ensure(
        left == [at_sibling.id],
        f"after erasing a node, {show_ids(left)} list; expected only the sibling {at_sibling.id}",
    )
    for item in (at_node, at_child):
        again = c.call(c.engine.store, item)
        c.ensure(not again.replayed, "storing an erased item again was a replay (nothing stored)")
    n = len(c.ids(flt))
    c.ensure(n == 3, f"the erased items stored anew should list again: {n} of 3 list")
    return "node and child erased, sibling kept"
