"""The distiller's values (pure): ``SourceItem`` in, ``Statement`` found, ``Belief`` kept.

A ``Belief`` is identified by ``key`` within its scope (a namespace and the item kind it was built from); its
hit id is ``belief_id(namespace, from_kind, key)``, so rebuilding gives the same ids. ``subject`` groups
beliefs about one thing: of those, only the newest is active, the others are kept as superseded. Confidence
grows with the number of distinct items a belief was derived from (``confidence_for``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any, Final

from memory_core.items import Conversation, Document, Learning, LearningKind
from memory_core.limits import BELIEF_TAG
from memory_core.meta import MemoryMeta, SourceRef
from memory_core.namespace import Namespace

__all__ = [
    "Belief",
    "BeliefStatus",
    "Category",
    "SourceItem",
    "Statement",
    "belief_id",
    "common_meta",
    "confidence_for",
    "shared_meta",
]

REPEAT_FACTOR: Final = 0.6
"""Each further piece of evidence keeps this share of the remaining doubt (memory-core's rule)."""
MAX_CONFIDENCE: Final = 0.99
"""Confidence never reaches certainty."""
_NEVER: Final = datetime.min.replace(tzinfo=UTC)


class Category(StrEnum):
    """What a statement is about (drives its kind, base confidence and how it merges)."""

    SELF = "self"
    PREFERENCE = "preference"
    PLAN = "plan"
    EVENT = "event"
    GROUP = "group"
    TITLE = "title"
    KEY_SENTENCE = "key_sentence"


class BeliefStatus(StrEnum):
    """``active`` beliefs are served; ``superseded`` ones are kept but not shown."""

    ACTIVE = "active"
    SUPERSEDED = "superseded"


@dataclass(frozen=True)
class SourceItem:
    """One stored item handed to the distiller.

    Attributes:
        seq: Its position in the engine's write order (later items have larger seqs).
        id: Its id (fingerprint).
        item: The item.
    """

    seq: int
    id: str
    item: Document | Conversation | Learning


@dataclass(frozen=True)
class Statement:
    """One thing an item says, ready to merge.

    Attributes:
        key: Identity of the belief it asserts, within its scope.
        subject: What it is about; a newer statement with the same subject and another key supersedes.
        text: The belief as it reads (third person, dates resolved).
        kind: The learning kind it becomes.
        category: See ``Category``.
        base_confidence: Confidence from one piece of evidence.
        terms: Content-word stems (for near-duplicate detection).
        anchors: The terms it is indexed by.
        speaker: Who said it (lowercased), '' for documents.
        evidence: The source item's id.
        seq: The source item's seq.
        observed_at: When it was said or observed.
        day: The day it refers to, when a date was resolved.
        meta: The source item's metadata.
    """

    key: str
    subject: str
    text: str
    kind: LearningKind
    category: Category
    base_confidence: float
    terms: frozenset[str]
    anchors: tuple[str, ...]
    speaker: str
    evidence: str
    seq: int
    observed_at: datetime | None
    day: date | None
    meta: MemoryMeta

    @property
    def free(self) -> bool:
        """True when nothing else shares its subject by construction (it may merge with near-duplicates)."""
        return self.subject == self.key


def confidence_for(base: float, evidence: int) -> float:
    """``1 - (1 - base) * 0.6^(n - 1)``, capped at 0.99 and rounded to 4 places."""
    if evidence <= 0:
        return 0.0
    value = 1.0 - (1.0 - base) * REPEAT_FACTOR ** (evidence - 1)
    return round(min(MAX_CONFIDENCE, value), 4)


def belief_id(namespace: Namespace, from_kind: str, key: str) -> str:
    """The belief's hit id: 40 hex of SHA-256 over ``belief``, the node, the source kind and the key."""
    raw = "\x00".join(("belief", str(namespace), from_kind, key))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:40]


_SHARED_FIELDS: Final = (
    "workspace",
    "folder",
    "file_path",
    "language",
    "repo",
    "commit",
    "url",
    "thread_id",
    "turns",
    "agent_id",
    "tool_call",
    "observed_actor",
)


def belief_meta(source: MemoryMeta, observed_at: datetime | None) -> MemoryMeta:
    """A belief's metadata from its first source: same node and fields, tagged ``belief``."""
    return source.model_copy(update={"tags": (BELIEF_TAG,), "derive": None, "observed_at": observed_at})


def common_meta(a: MemoryMeta, b: MemoryMeta) -> MemoryMeta:
    """What two evidence metas share: a field both hold with one value is kept, any other is dropped.

    ``observed_at`` is the later one; the source keeps its kind when both agree (else ``a``'s) and its id only
    when both agree; tags stay ``[belief]``.
    """
    update: dict[str, Any] = {}
    for name in _SHARED_FIELDS:
        if getattr(a, name) != getattr(b, name):
            update[name] = None
    if a.source != b.source:
        update["source"] = SourceRef(kind=a.source.kind)
    times = [t for t in (a.observed_at, b.observed_at) if t is not None]
    update["observed_at"] = max(times) if times else None
    return a.model_copy(update=update)


def shared_meta(evidence: Sequence[tuple[MemoryMeta, datetime | None]]) -> MemoryMeta:
    """The belief metadata of evidence ``(item meta, time said)`` in write order, in one pass.

    Equal to folding ``common_meta`` over ``belief_meta`` of each, left to right (one copy instead of two per
    item, for rebuilding a belief with many sources).

    Raises:
        ValueError: ``evidence`` is empty.
    """
    if not evidence:
        raise ValueError("no evidence")
    first = evidence[0][0]
    differ = {
        name for name in _SHARED_FIELDS for meta, _ in evidence[1:] if getattr(meta, name) != getattr(first, name)
    }
    update: dict[str, Any] = dict.fromkeys(differ)
    if any(meta.source != first.source for meta, _ in evidence[1:]):
        update["source"] = SourceRef(kind=first.source.kind)
    update.update(tags=(BELIEF_TAG,), derive=None, observed_at=_newest_time(*(at for _, at in evidence)))
    return first.model_copy(update=update)


def _newest_time(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class Belief:
    """What a build keeps: the statement that reads for it, plus how many items support it.

    The ids of the supporting items are not held in the value (a belief repeated ten thousand times would copy
    them on every merge): an engine keeps them one row each (``belief_evidence`` in SQLite) and appends
    ``added`` after a merge. ``support`` counts them.

    Attributes:
        key, subject, text, kind, category, base_confidence, terms, anchors, speaker, day: As the statement
            that supplies its text (``source``): the first of its evidence in write order.
        source: Id of the item whose statement supplies the text.
        first_seq: The seq of that item (creation order, for the near-duplicate window).
        last_seq: The largest seq among its evidence.
        observed_at: The latest ``observed_at`` among its evidence.
        meta: What its evidence shares (``common_meta``), tagged ``belief``.
        support: How many distinct items it was derived from (at least 1).
        status: Active or superseded.
        added: Evidence ids this value gained in the merge that produced it, in write order; ``()`` for a
            value read back from an engine. Not part of the stored state, nor of equality.
    """

    key: str
    subject: str
    text: str
    kind: LearningKind
    category: Category
    base_confidence: float
    terms: frozenset[str]
    anchors: tuple[str, ...]
    speaker: str
    day: date | None
    source: str
    first_seq: int
    last_seq: int
    observed_at: datetime | None
    meta: MemoryMeta
    support: int = 1
    status: BeliefStatus = BeliefStatus.ACTIVE
    added: tuple[str, ...] = field(default=(), compare=False)

    @property
    def confidence(self) -> float:
        """``confidence_for(base_confidence, support)``."""
        return confidence_for(self.base_confidence, self.support)

    @property
    def free(self) -> bool:
        """True when nothing else shares its subject by construction."""
        return self.subject == self.key

    @classmethod
    def from_statement(cls, st: Statement) -> Belief:
        """A new active belief holding one statement."""
        return cls(
            key=st.key,
            subject=st.subject,
            **_reading(st),
            last_seq=st.seq,
            observed_at=st.observed_at,
            meta=belief_meta(st.meta, st.observed_at),
            added=(st.evidence,),
        )

    def with_evidence(self, st: Statement) -> Belief:
        """This belief with one more supporting statement (its text and key stay); O(1) in its support."""
        return replace(
            self,
            support=self.support + 1,
            added=(*self.added, st.evidence),
            last_seq=max(self.last_seq, st.seq),
            observed_at=_newest_time(self.observed_at, st.observed_at),
            meta=common_meta(self.meta, belief_meta(st.meta, st.observed_at)),
        )

    def with_text_of(self, st: Statement) -> Belief:
        """This belief reading as ``st`` (after the item that supplied its text was removed); key and status stay."""
        return replace(self, **_reading(st))

    def newness(self) -> tuple[bool, datetime, int]:
        """Sort key for "newest": dated after undated, then observed time, then write order.

        An engine that picks the newest in SQL orders by ``observed_at IS NOT NULL, observed_at, last_seq``
        (then ``key``) to match.
        """
        return (self.observed_at is not None, self.observed_at or _NEVER, self.last_seq)

    def to_state(self) -> dict[str, Any]:
        """The JSON form an engine stores to rebuild this value (``from_state``); bounded in size."""
        return {
            "key": self.key,
            "subject": self.subject,
            "text": self.text,
            "kind": self.kind.value,
            "category": self.category.value,
            "base_confidence": self.base_confidence,
            "terms": sorted(self.terms),
            "anchors": list(self.anchors),
            "speaker": self.speaker,
            "day": self.day.isoformat() if self.day else None,
            "source": self.source,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "observed_at": self.observed_at.isoformat() if self.observed_at else None,
            "meta": self.meta.to_dict(),
            "support": self.support,
            "status": self.status.value,
        }

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> Belief:
        """The value ``to_state`` described (``added`` empty).

        A state written before ``source``/``support`` existed holds the whole ``evidence`` list instead; its
        first id is the source and its length the support.
        """
        legacy: list[str] = data.get("evidence") or []
        return cls(
            key=data["key"],
            subject=data["subject"],
            text=data["text"],
            kind=LearningKind(data["kind"]),
            category=Category(data["category"]),
            base_confidence=float(data["base_confidence"]),
            terms=frozenset(data["terms"]),
            anchors=tuple(data["anchors"]),
            speaker=data["speaker"],
            day=date.fromisoformat(data["day"]) if data.get("day") else None,
            source=str(data["source"] if "source" in data else legacy[0]),
            first_seq=int(data["first_seq"]),
            last_seq=int(data["last_seq"]),
            observed_at=datetime.fromisoformat(data["observed_at"]) if data.get("observed_at") else None,
            meta=MemoryMeta.model_validate(data["meta"]),
            support=int(data["support"] if "support" in data else len(legacy)),
            status=BeliefStatus(data["status"]),
        )


def _reading(st: Statement) -> dict[str, Any]:
    """The fields a belief takes from the statement whose words it reads as (its text, terms and source)."""
    return {
        "text": st.text,
        "kind": st.kind,
        "category": st.category,
        "base_confidence": st.base_confidence,
        "terms": st.terms,
        "anchors": st.anchors,
        "speaker": st.speaker,
        "day": st.day,
        "source": st.evidence,
        "first_seq": st.seq,
    }
