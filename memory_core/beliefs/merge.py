"""Merging new statements into a scope's beliefs (pure).

``merge(statements, existing)`` applies statements one at a time, in write order (``seq``), to the beliefs
they touch, and returns every belief it created or changed, in its new state. ``lookup(statements)`` names the
existing beliefs it may touch, so an engine loads only those (by key, subject and anchor) and a build's cost
follows the new items, not the scope's size.

For each statement:

1. A belief with the same ``key`` gains it as evidence (confidence rises, ``confidence_for``).
2. Else, a *free* statement (one whose subject is its own key: events, plans, key sentences) joins a
   near-duplicate: a free belief of the same speaker and category among the ``ANCHOR_WINDOW`` most recently
   created beliefs holding one of its anchors, whose content terms overlap by Jaccard ≥ ``NEAR_DUPLICATE`` and
   whose resolved day (if both have one) is the same. The best overlap wins, ties by key. The window keeps a
   lookup's size independent of how many beliefs a scope holds.
3. Else it starts a new belief.

Then, among the beliefs of that subject, the newest (by ``observed_at``, then write order) is active and the
others are superseded (kept, not served). Because statements apply in ``seq`` order and the lookup covers
every belief a statement could touch, building a scope in several increments gives the same beliefs as
building it once.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from .model import Belief, BeliefStatus, Statement

__all__ = ["ANCHOR_WINDOW", "NEAR_DUPLICATE", "Lookup", "lookup", "merge", "retract"]

NEAR_DUPLICATE: Final = 0.6
"""Least Jaccard overlap of content terms for two free statements to be one belief (memory-core's rule)."""
ANCHOR_WINDOW: Final = 12
"""Beliefs per anchor a statement is compared with: the most recently created (by ``(first_seq, key)``)."""


@dataclass(frozen=True)
class Lookup:
    """Which existing beliefs a batch may touch.

    Those with one of ``keys`` or ``subjects``, and per anchor the newest ``ANCHOR_WINDOW`` free beliefs (by
    ``(first_seq, key)``).
    """

    keys: frozenset[str]
    subjects: frozenset[str]
    anchors: frozenset[str]


def lookup(statements: Iterable[Statement]) -> Lookup:
    """The keys, subjects and anchors of ``statements`` (an engine loads beliefs matching any of them)."""
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


class _Scope:
    """The beliefs of one scope while a merge runs, indexed by key, subject and anchor."""

    def __init__(self, existing: Iterable[Belief]) -> None:
        self.by_key: dict[str, Belief] = {}
        self.by_subject: dict[str, set[str]] = {}
        self.by_anchor: dict[str, list[tuple[int, str]]] = {}
        self.changed: set[str] = set()
        for belief in existing:
            self._index(belief)

    def _index(self, belief: Belief) -> None:
        known = belief.key in self.by_key
        self.by_key[belief.key] = belief
        self.by_subject.setdefault(belief.subject, set()).add(belief.key)
        if belief.free and not known:
            for anchor in belief.anchors:
                insort(self.by_anchor.setdefault(anchor, []), (belief.first_seq, belief.key))

    def put(self, belief: Belief) -> None:
        if self.by_key.get(belief.key) != belief:
            self.changed.add(belief.key)
        self._index(belief)

    def remove(self, key: str) -> None:
        belief = self.by_key.pop(key)
        self.by_subject.get(belief.subject, set()).discard(key)
        for anchor in belief.anchors:
            entries = self.by_anchor.get(anchor, [])
            if (belief.first_seq, key) in entries:
                entries.remove((belief.first_seq, key))
        self.changed.discard(key)

    def near_duplicate(self, st: Statement) -> Belief | None:
        best: tuple[float, str] | None = None
        candidates = {key for a in st.anchors for _, key in self.by_anchor.get(a, [])[-ANCHOR_WINDOW:]}
        for key in sorted(candidates):
            belief = self.by_key[key]
            if belief.speaker != st.speaker or belief.category != st.category or not belief.free:
                continue
            if belief.day is not None and st.day is not None and belief.day != st.day:
                continue
            score = _jaccard(belief.terms, st.terms)
            if score >= NEAR_DUPLICATE and (best is None or (-score, key) < (-best[0], best[1])):
                best = (score, key)
        return self.by_key[best[1]] if best is not None else None

    def settle(self, subject: str) -> None:
        members = [self.by_key[k] for k in sorted(self.by_subject.get(subject, ()))]
        if not members:
            return
        newest = max(members, key=lambda b: (b.recency(), b.key))
        for belief in members:
            status = BeliefStatus.ACTIVE if belief is newest else BeliefStatus.SUPERSEDED
            if belief.status is not status:
                self.put(replace(belief, status=status))


def merge(statements: Sequence[Statement], existing: Iterable[Belief]) -> list[Belief]:
    """Apply ``statements`` to ``existing`` beliefs; return the beliefs created or changed, sorted by key.

    Args:
        statements: New statements (any order; they are applied by ``seq``, then their order in the list).
        existing: The scope's beliefs that ``lookup(statements)`` matches (more is harmless, fewer is not).
    """
    scope = _Scope(existing)
    ordered = sorted(enumerate(statements), key=lambda pair: (pair[1].seq, pair[0]))
    for _, st in ordered:
        target = scope.by_key.get(st.key)
        if target is None and st.free:
            target = scope.near_duplicate(st)
        if target is None:
            belief = Belief.from_statement(st)
        elif st.evidence in target.evidence:
            continue
        else:
            belief = target.with_evidence(st)
        scope.put(belief)
        scope.settle(belief.subject)
    return [scope.by_key[k] for k in sorted(scope.changed)]


def retract(
    affected: Sequence[Belief], removed: Collection[str], siblings: Iterable[Belief] = ()
) -> tuple[list[Belief], list[str]]:
    """Take removed items out of the beliefs derived from them (provenance on forget and erase).

    A belief left with no evidence is deleted; one with other evidence stays, its evidence shrunk and its
    confidence recomputed. If a deleted belief was the active one of its subject, the newest survivor among
    ``siblings`` (the subject's other beliefs) becomes active again.

    Args:
        affected: Beliefs holding at least one removed id.
        removed: The removed item ids.
        siblings: The other beliefs of the affected subjects.

    Returns:
        ``(changed, deleted)``: the surviving beliefs whose state changed (sorted by key), and the deleted keys.
    """
    gone = set(removed)
    scope = _Scope([*affected, *siblings])
    deleted: list[str] = []
    subjects: set[str] = set()
    for belief in affected:
        subjects.add(belief.subject)
        remaining = tuple(e for e in belief.evidence if e not in gone)
        if not remaining:
            scope.remove(belief.key)
            deleted.append(belief.key)
        elif remaining != belief.evidence:
            scope.put(replace(belief, evidence=remaining))
    for subject in sorted(subjects):
        scope.settle(subject)
    return [scope.by_key[k] for k in sorted(scope.changed)], sorted(deleted)
