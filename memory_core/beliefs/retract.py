"""Provenance on forget (pure): rebuild the beliefs that lost evidence from the items that still support them.

When items are forgotten or erased, each belief derived from them is rebuilt from its *surviving* evidence,
re-read from the items themselves (the source of truth; a belief keeps no copy of its evidence):

* no survivor: the belief is deleted;
* the item that supplied its text is gone: it reads as the statement of its first surviving item (text,
  terms, anchors, day), so no word of the forgotten item stays in it;
* always: its support, confidence, newest seq and time, and shared metadata are those of the survivors.

Its key, and so its id, stay. A rebuilt belief equals what merging the survivors' statements in write order
gives (``merge``). Then each subject whose active belief was touched makes its newest member active again.
The cost follows the evidence of the beliefs touched, not the scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from memory_core.items import Conversation, Role

from .extract import extract, said_at
from .merge import near_duplicate
from .model import Belief, BeliefStatus, SourceItem, Statement, shared_meta

__all__ = ["rebuild", "retract", "statement_for"]


def statement_for(belief: Belief, statements: Sequence[Statement]) -> Statement | None:
    """Which of one item's statements supports ``belief``: its key, else its best near-duplicate.

    A belief rebuilt once may hold evidence that joined it under its former text, so failing both, the free
    statement of the same speaker and category sharing the most terms with it is taken (ties by key).
    """
    for st in statements:
        if st.key == belief.key:
            return st
    scored = [(score, st.key, st) for st in statements if (score := near_duplicate(belief, st)) is not None]
    if not scored and belief.free:
        scored = [
            (float(len(st.terms & belief.terms)), st.key, st)
            for st in statements
            if st.free and st.speaker == belief.speaker and st.category == belief.category and st.terms & belief.terms
        ]
    if not scored:
        return None
    return min(scored, key=lambda row: (-row[0], row[1]))[2]


def _said_at(belief: Belief, src: SourceItem) -> datetime | None:
    """When ``src`` said what supports ``belief`` (the time its statement carries)."""
    item = src.item
    if isinstance(item, Conversation):
        users = [t for t in item.turns if t.role is Role.USER]
        if len(users) == 1:
            return said_at(users[0], item.meta)
        st = statement_for(belief, extract([src]))
        return st.observed_at if st is not None else item.meta.observed_at
    return item.meta.observed_at


def rebuild(belief: Belief, survivors: Sequence[SourceItem]) -> Belief | None:
    """``belief`` as its surviving evidence supports it, or None when nothing does (module docstring).

    Args:
        belief: The belief as stored (before the removal).
        survivors: The items still recorded as its evidence (any order).
    """
    ordered = sorted(survivors, key=lambda s: s.seq)
    if not ordered:
        return None
    base = belief
    if belief.source not in {s.id for s in ordered}:
        found = next((st for src in ordered if (st := statement_for(belief, extract([src]))) is not None), None)
        if found is None:
            return None
        base = belief.with_text_of(found)
    meta = shared_meta([(src.item.meta, _said_at(belief, src)) for src in ordered])
    return replace(
        base, support=len(ordered), last_seq=ordered[-1].seq, observed_at=meta.observed_at, meta=meta, added=()
    )


def retract(
    affected: Sequence[Belief], survivors: Mapping[str, Sequence[SourceItem]], others: Iterable[Belief] = ()
) -> tuple[list[Belief], list[str]]:
    """Rebuild or delete the beliefs that lost evidence, and re-pick the active belief of their subjects.

    Args:
        affected: Beliefs that held at least one removed item, as stored.
        survivors: Per affected belief's key, the items still recorded as its evidence.
        others: For each subject whose active belief is among ``affected``, its newest member that is not
            (an engine finds it by subject, ordered as ``Belief.newness``); the other members stay superseded.

    Returns:
        ``(changed, deleted)``: the surviving beliefs whose state changed (sorted by key), and the deleted keys.
    """
    stored = {b.key: b for b in affected}
    kept: dict[str, Belief] = {}
    deleted: list[str] = []
    for belief in stored.values():
        rebuilt = rebuild(belief, survivors.get(belief.key, ()))
        if rebuilt is None:
            deleted.append(belief.key)
        else:
            kept[belief.key] = rebuilt
    out = {k: b for k, b in kept.items() if b != stored[k]}
    reopened = {b.subject for b in affected if b.status is BeliefStatus.ACTIVE}
    members: dict[str, list[Belief]] = {}
    for belief in [*kept.values(), *others]:
        if belief.subject in reopened:
            members.setdefault(belief.subject, []).append(belief)
    for group in members.values():
        newest = max(group, key=lambda b: (b.newness(), b.key))
        for belief in group:
            status = BeliefStatus.ACTIVE if belief is newest else BeliefStatus.SUPERSEDED
            if belief.status is not status:
                out[belief.key] = replace(belief, status=status)
    return sorted(out.values(), key=lambda b: b.key), sorted(deleted)
