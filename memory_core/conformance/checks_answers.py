"""Checks 16-17 of the contract reference §2: recall cites what ``list`` holds; consolidate keeps its promise."""

from __future__ import annotations

from memory_core.conformance.context import CheckContext
from memory_core.conformance.report import EngineFailed
from memory_core.consolidation import (
    BeliefsRequest,
    ConsolidateReceipt,
    ConsolidateRequest,
    ConsolidateStatus,
    Consolidation,
)
from memory_core.errors import Unsupported
from memory_core.limits import BELIEF_TAG
from memory_core.meta import ItemKind
from memory_core.namespace import Reach
from memory_core.query import RecallRequest

__all__ = ["PROMISES", "consolidate", "recall"]

_RECALL_LIMIT = 5
_BELIEFS_LIMIT = 10

PROMISES: dict[Consolidation, frozenset[ConsolidateStatus]] = {
    Consolidation.ON_DEMAND: frozenset({ConsolidateStatus.STARTED, ConsolidateStatus.COMPLETED}),
    Consolidation.AUTOMATIC: frozenset({ConsolidateStatus.STARTED, ConsolidateStatus.COMPLETED}),
    Consolidation.SCHEDULED: frozenset({ConsolidateStatus.SCHEDULED}),
}
"""The statuses a valid ``consolidate`` may answer under each declared mode; ``none`` must refuse
``Unsupported`` (reference §1.10 and §2 check 17)."""


def recall(c: CheckContext) -> str:
    """A recall for the marker over the run's workspace (limit 5) answers with 1..=5 citations that all list.

    The answer is non-blank, and each citation's id lists under the run's workspace with the same kind.
    """
    request = RecallRequest(question=c.run.marker, filter=c.run.filter(), limit=_RECALL_LIMIT)
    answer = c.call(c.engine.recall, request)
    c.ensure(bool(answer.answer.strip()), "the answer is blank")
    n = len(answer.citations)
    c.ensure(1 <= n <= _RECALL_LIMIT, f"an answer over matching items cited {n} items, not 1..={_RECALL_LIMIT}")
    kinds = {hit.id: hit.kind for hit in c.list_all(c.run.filter())}
    for citation in answer.citations:
        c.ensure(
            kinds.get(citation.id) is citation.kind,
            f"citation {citation.id} ({citation.kind.value}) does not resolve through list",
        )
    return f"{n} citations"


def consolidate(c: CheckContext) -> str:
    """A build answers as the descriptor promises, and every belief is a tagged learning within its reach.

    A document is stored at ``agent:<m>-beliefs``. Kinds ``[document, document]`` is ``InvalidRequest``. A
    valid request (``exact`` node, ``[document]``) answers per ``PROMISES``; declared ``none`` must refuse
    ``Unsupported``, and any other error is an engine failure. ``beliefs`` with limit 0 is ``InvalidRequest``;
    ``beliefs(exact node, limit 10, query)`` answers at most 10 learnings tagged ``belief`` that the reach admits.
    """
    node = c.run.node("beliefs")
    reach = Reach.exact(node)
    c.call(c.engine.store, c.run.document("consolidate. A fact to build on.", c.run.meta(namespace=node)))
    c.refuses(
        "a consolidate naming a kind twice",
        c.engine.consolidate,
        {"reach": reach.to_dict(), "kinds": ["document", "document"]},
    )
    declared = c.call(c.engine.descriptor).consolidation
    answered = _answer_as_promised(c, declared, ConsolidateRequest(reach=reach, kinds=(ItemKind.DOCUMENT,)))

    c.refuses("a beliefs read with limit 0", c.engine.beliefs, {"reach": reach.to_dict(), "limit": 0})
    request = BeliefsRequest(reach=reach, query="A fact to build on", limit=_BELIEFS_LIMIT)
    beliefs = c.call(c.engine.beliefs, request)
    c.ensure(len(beliefs) <= _BELIEFS_LIMIT, f"a beliefs read for {_BELIEFS_LIMIT} answered {len(beliefs)}")
    for hit in beliefs:
        c.ensure(hit.kind is ItemKind.LEARNING, f"belief {hit.id} is a {hit.kind.value}, not a learning")
        c.ensure(BELIEF_TAG in hit.meta.tags, f"belief {hit.id} is not tagged {BELIEF_TAG!r}: {list(hit.meta.tags)}")
        c.ensure(reach.admits(hit.meta.namespace), f"belief {hit.id} at {hit.meta.namespace} is outside {node}")
    return f"{declared.value}: {answered}; {len(beliefs)} beliefs"


def _answer_as_promised(c: CheckContext, declared: Consolidation, request: ConsolidateRequest) -> str:
    try:
        receipt: ConsolidateReceipt = c.engine.consolidate(request)
    except Unsupported as exc:
        if declared is Consolidation.NONE:
            return "unsupported"
        raise EngineFailed(c.check, exc) from exc
    except Exception as exc:
        if declared is Consolidation.NONE:
            c.fail(f"an engine declaring no consolidation raised {type(exc).__name__}: {exc}, not Unsupported")
        raise EngineFailed(c.check, exc) from exc
    if declared is Consolidation.NONE:
        c.fail(f"an engine declaring no consolidation answered {receipt.to_json()}")
    allowed = PROMISES[declared]
    c.ensure(
        receipt.status in allowed,
        f"an engine declaring {declared.value} answered {receipt.status.value}, "
        f"not {' or '.join(sorted(s.value for s in allowed))}",
    )
    return receipt.status.value
