"""Merging new statements into a scope's beliefs (pure).

``merge(statements, existing, held)`` applies statements one at a time, in write order (``seq``), to the
beliefs they touch, and returns every belief it created or changed, in its new state. ``lookup(statements)``
names the existing beliefs it may touch, so an engine loads only those and a build's cost follows the new
items, not the scope's size or a subject's history.

For each statement:

1. A belief with the same ``key`` gains it as evidence (confidence rises, ``confidence_for``), unless that item
   already supports it.
2. Else, a *free* statement (one whose subject is its own key: events, plans, key sentences) joins a
   near-duplicate (``near_duplicate``) among the ``ANCHOR_WINDOW`` most recently created beliefs holding one of
   its anchors; the best overlap wins, ties by key. The window keeps a lookup's size independent of how many
   beliefs a scope holds.
3. Else it starts a new belief.

Then the newest belief of that subject (``Belief.newness``, then key) is active and the others are superseded
(kept, not served). A belief's newness only grows as it gains evidence, so the newest is always either the
subject's active belief or the one that just changed: only those two are compared, and an engine loads a
subject's active belief, never its superseded history. Because statements apply in ``seq`` order and the
lookup covers every belief a statement could touch, building a scope in several increments gives the same
beliefs as building it once.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from .model import Belief, BeliefStatus, Statement

__all__ = ["ANCHOR_WINDOW", "MIN_SHARED_TERMS", "NEAR_DUPLICATE", "Lookup", "lookup", "merge", "near_duplicate"]

NEAR_DUPLICATE: Final = 0.6
"""Least Jaccard overlap of content terms for two free statements to be one belief (memory-core's rule)."""
MIN_SHARED_TERMS: Final = 4
"""Least number of content terms two near-duplicates share: below it one added word is too much of the text
(``I met Anna yesterday`` / ``I met Anna's brother yesterday`` share three, a date word among them), so short
statements merge only by key (memory-core's rule)."""
ANCHOR_WINDOW: Final = 12
"""Beliefs per anchor a statement is compared with: the most recently created (by ``(first_seq, key)``)."""


@dataclass(frozen=True)
class Lookup:
    """Which existing beliefs a batch may touch.

    Those with one of ``keys`` (any status), the *active* belief of each of ``subjects``, and per anchor the
    newest ``ANCHOR_WINDOW`` free beliefs (by ``(first_seq, key)``).
    """

    keys: frozenset[str]
    subjects: frozenset[str]
    anchors: frozenset[str]


def lookup(statements: Iterable[Statement]) -> Lookup:
    """The keys, subjects and anchors of ``statements`` (an engine loads the beliefs ``Lookup`` describes)."""
    keys: set[str] = set()
    subjects: set[str] = set()
    anchor_set: set[str] = set()
    for st in statements:
        keys.add(st.key)
        subjects.add(st.subject)
        if st.free:
            anchor_set.update(st.anchors)
    return Lookup(frozenset(keys), frozenset(subjects), frozenset(anchor_set))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def near_duplicate(belief: Belief, st: Statement) -> float | None:
    """How well free statement ``st`` matches free ``belief`` as a near-duplicate, or None when it does not.

    Same speaker and category, the same resolved day when both have one, and content terms where one set
    *contains* the other, sharing at least ``MIN_SHARED_TERMS`` terms with Jaccard overlap at least
    ``NEAR_DUPLICATE``. A statement that only adds words (``a sweet rescue dog``) restates the belief; one that
    swaps a word (``the Elk trail`` / ``the Fox trail``, ``a rescue dog`` / ``a rescue cat``) says something
    else, however much else it shares. Returns the overlap (higher is better).
    """
    if not (belief.free and st.free) or belief.speaker != st.speaker or belief.category != st.category:
        return None
    if belief.day is not None and st.day is not None and belief.day != st.day:
        return None
    a, b = belief.terms, st.terms
    if not (a <= b or b <= a) or len(a & b) < MIN_SHARED_TERMS:
        return None
    score = _jaccard(a, b)
    return score if score >= NEAR_DUPLICATE else None


class _Scope:
    """The beliefs of one scope while a merge runs: by key, the active one per subject, and by anchor."""

    def __init__(self, existing: Iterable[Belief], held: Iterable[tuple[str, str]]) -> None:
        self.by_key: dict[str, Belief] = {}
        self.active: dict[str, str] = {}
        self.by_anchor: dict[str, list[tuple[int, str]]] = {}
        self.held: set[tuple[str, str]] = set(held)
        self.changed: set[str] = set()
        for belief in existing:
            if belief.added:
                belief = replace(belief, added=())  # evidence gained by an earlier merge is already recorded
            self._index(belief)
            if belief.status is BeliefStatus.ACTIVE:
                current = self.active.get(belief.subject)
                if current is None or _order(belief) > _order(self.by_key[current]):
                    self.active[belief.subject] = belief.key

    def _index(self, belief: Belief) -> None:
        known = belief.key in self.by_key
        self.by_key[belief.key] = belief
        if belief.free and not known:
            for anchor in belief.anchors:
                insort(self.by_anchor.setdefault(anchor, []), (belief.first_seq, belief.key))

    def put(self, belief: Belief) -> None:
        if self.by_key.get(belief.key) != belief:
            self.changed.add(belief.key)
        self._index(belief)

    def near_duplicate(self, st: Statement) -> Belief | None:
        best: tuple[float, str] | None = None
        candidates = {key for a in st.anchors for _, key in self.by_anchor.get(a, [])[-ANCHOR_WINDOW:]}
        for key in sorted(candidates):
            score = near_duplicate(self.by_key[key], st)
            if score is not None and (best is None or (-score, key) < (-best[0], best[1])):
                best = (score, key)
        return self.by_key[best[1]] if best is not None else None

    def settle(self, belief: Belief) -> None:
        """``belief`` just gained evidence or was created: make the newer of it and its subject's active one active."""
        current_key = self.active.get(belief.subject)
        if current_key is not None and current_key != belief.key:
            current = self.by_key[current_key]
            if _order(current) > _order(belief):
                self._set(belief, BeliefStatus.SUPERSEDED)
                return
            self._set(current, BeliefStatus.SUPERSEDED)
        self.active[belief.subject] = belief.key
        self._set(belief, BeliefStatus.ACTIVE)

    def _set(self, belief: Belief, status: BeliefStatus) -> None:
        if belief.status is not status:
            self.put(replace(belief, status=status))


def _order(belief: Belief) -> tuple[tuple[bool, object, int], str]:
    return (belief.newness(), belief.key)


def merge(
    statements: Sequence[Statement], existing: Iterable[Belief], held: Collection[tuple[str, str]] = ()
) -> list[Belief]:
    """Apply ``statements`` to ``existing`` beliefs; return the beliefs created or changed, sorted by key.

    Each returned belief's ``added`` names the evidence it gained here (what an engine appends).

    Args:
        statements: New statements (any order; they are applied by ``seq``, then their order in the list).
        existing: The scope's beliefs that ``lookup(statements)`` describes (more is harmless, fewer is not: in
            particular the active belief of every subject named).
        held: ``(belief key, item id)`` pairs already recorded as evidence among the statements' items, so a
            statement merged before is not counted twice (empty when the items are new).
    """
    scope = _Scope(existing, held)
    ordered = sorted(enumerate(statements), key=lambda pair: (pair[1].seq, pair[0]))
    for _, st in ordered:
        target = scope.by_key.get(st.key)
        if target is None and st.free:
            target = scope.near_duplicate(st)
        if target is None:
            belief = Belief.from_statement(st)
        elif (target.key, st.evidence) in scope.held:
            continue
        else:
            belief = target.with_evidence(st)
        scope.held.add((belief.key, st.evidence))
        scope.put(belief)
        scope.settle(scope.by_key[belief.key])
    return [scope.by_key[k] for k in sorted(scope.changed)]
