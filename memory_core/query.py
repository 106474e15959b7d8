"""Requests and responses of the read and forget operations (contract reference §1.3, §1.8, §1.9).

Every request validates on construction (a blank query, a zero limit, an empty forget target, an oversize id
list) and raises ``InvalidRequest`` naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Final, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, model_validator

from memory_core._model import ContractModel, StrictBool, StrictInt, utc
from memory_core.errors import InvalidRequest
from memory_core.items import Conversation, Document, Learning, StoreItem
from memory_core.limits import MAX_FORGET_IDS, MAX_GET_IDS, MAX_PAGE_LIMIT
from memory_core.memory_log import MemoryStatus, Tier
from memory_core.meta import ItemKind, MemoryMeta, MetaFilter, USize
from memory_core.namespace import Reach

__all__ = [
    "Citation",
    "EraseReport",
    "EraseRequest",
    "ExportPage",
    "Exported",
    "FetchMode",
    "FetchPage",
    "FetchRequest",
    "ForgetReport",
    "ForgetTarget",
    "GetRequest",
    "Hit",
    "Limit",
    "ListPage",
    "ListRequest",
    "NonBlank",
    "RecallAnswer",
    "RecallRequest",
    "STORED_METAS",
    "StoreReceipt",
    "TimeHint",
    "id_fault",
    "stored_meta",
]


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


NonBlank = Annotated[str, AfterValidator(_non_blank)]
"""A string that is not empty or whitespace only."""

Limit = Annotated[StrictInt, Field(gt=0, le=MAX_PAGE_LIMIT)]
"""A page size: 1..=MAX_PAGE_LIMIT, an int (``"7"``, ``True`` and ``7.0`` are refused)."""


class FetchMode(StrEnum):
    """Ranked retrieval modes, in ``FetchMode.ALL`` order."""

    KEYWORD = "keyword"
    VECTOR = "vector"
    HYBRID = "hybrid"

    @classmethod
    def all(cls) -> tuple[FetchMode, ...]:
        """Every mode, in contract order."""
        return (cls.KEYWORD, cls.VECTOR, cls.HYBRID)


class Hit(ContractModel):
    """``{id, kind, text, meta, score, confidence?, derived_from?}``: one item as a read returns it.

    ``text`` is the item's ``render_text()``; ``confidence`` is set only for learnings; listings score 0.
    ``derived_from`` (a memory-core extension, left out of JSON when empty) names the stored items a belief
    hit was built from, so a reader can follow a belief to its evidence. ``status`` and ``tier`` (seed 002) are
    set only by engines that keep a log, and left out of JSON otherwise.
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"derived_from"})

    id: str
    kind: ItemKind
    text: str
    meta: MemoryMeta
    score: float = 0.0
    confidence: float | None = None
    derived_from: tuple[str, ...] = ()
    status: MemoryStatus | None = None
    tier: Tier | None = None

    @classmethod
    def of(
        cls,
        item: Document | Conversation | Learning,
        score: float = 0.0,
        item_id: str | None = None,
        state: tuple[MemoryStatus, Tier] | None = None,
    ) -> Hit:
        """The hit for a stored item (trusted data: built without re-validation).

        ``state``: its status and tier, set as ``model_copy(update=...)`` would set them (an engine that keeps a log
        builds its hits annotated rather than building and copying each).
        """
        fields: dict[str, Any] = {
            "id": item_id or item.id,
            "kind": item.item_kind,
            "text": item.render_text(),
            "meta": item.item_meta,
            "score": score,
            "confidence": item.confidence_value(),
        }
        if state is not None:
            fields["status"], fields["tier"] = state
        return cls.trusted(**fields)

    @classmethod
    def of_belief(
        cls,
        belief_id: str,
        text: str,
        meta_json: str,
        confidence: float,
        derived_from: Sequence[str],
        score: float = 0.0,
    ) -> Hit:
        """The hit for a stored belief row (trusted data: ``meta_json`` is the stored ``MemoryMeta`` JSON).

        Args:
            belief_id: The belief's public id.
            text: Its statement.
            meta_json: Its metadata as stored (JSON text).
            confidence: Its confidence, 0..1.
            derived_from: The ids of the items it was built from (``derived_from``).
            score: Its score in the ranking that returns it.
        """
        return cls.trusted(
            id=belief_id,
            kind=ItemKind.LEARNING,
            text=text,
            meta=stored_meta(meta_json),
            score=score,
            confidence=confidence,
            derived_from=tuple(derived_from),
        )


STORED_METAS: Final = 4096
"""Stored metadata JSON texts ``stored_meta`` keeps parsed (*memory-core*, issue 12: the beliefs of one scope and
thread share a few hundred distinct metas: 248 for 2,576 beliefs on the demo's data)."""


@lru_cache(maxsize=STORED_METAS)
def stored_meta(meta_json: str) -> MemoryMeta:
    """``MemoryMeta`` parsed from its stored JSON text, kept per process (frozen: one instance is shared).

    Raises:
        InvalidRequest: the text is not a valid ``MemoryMeta``.
    """
    return MemoryMeta.model_validate_json(meta_json)


class TimeHint(ContractModel):
    """``{from, to, zone?}``: days a question refers to. Ranking only, never a filter (reference §1.3).

    Hits observed on a hinted day (in ``zone``, default UTC) move first, order kept inside each group.
    """

    from_: date = Field(alias="from")
    to: date
    zone: str | None = None

    @model_validator(mode="after")
    def _valid(self) -> Self:
        if self.from_ > self.to:
            raise InvalidRequest("from must be <= to", field="from")
        if self.zone is not None:
            try:
                ZoneInfo(self.zone)
            except (ZoneInfoNotFoundError, ValueError):
                raise InvalidRequest(f"unknown time zone {self.zone!r}", field="zone") from None
        return self

    def covers(self, at: datetime) -> bool:
        """True when ``at``'s local day (in ``zone``) lies within ``[from, to]``."""
        local = utc(at).astimezone(ZoneInfo(self.zone or "UTC"))
        return self.from_ <= local.date() <= self.to

    def rank(self, hits: Sequence[Hit]) -> list[Hit]:
        """Stable partition: hits observed on a hinted day first; undated hits stay with the rest."""
        inside = [h for h in hits if h.meta.observed_at is not None and self.covers(h.meta.observed_at)]
        chosen = {id(h) for h in inside}
        return inside + [h for h in hits if id(h) not in chosen]


class RecallRequest(ContractModel):
    """``{question, filter, limit, instructions?, refers_to?, tiers?}``: ask for a synthesised answer.

    ``tiers`` (seed 002) names the tiers read; empty (the default, left out of JSON) reads every tier but
    ``archive``. Only engines declaring ``tiers`` take a non-empty one.
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"tiers"})

    question: NonBlank
    filter: MetaFilter = Field(default_factory=MetaFilter)
    limit: Limit = 10
    instructions: str | None = None
    refers_to: TimeHint | None = None
    tiers: tuple[Tier, ...] = ()


class Citation(ContractModel):
    """``{id, kind, snippet, meta, score?}``: an item an answer drew on."""

    id: str
    kind: ItemKind
    snippet: str
    meta: MemoryMeta
    score: float | None = None


class RecallAnswer(ContractModel):
    """``{answer, citations, model?}``. Every citation resolves through ``list``."""

    answer: str
    citations: tuple[Citation, ...] = ()
    model: str | None = None


class FetchRequest(ContractModel):
    """``{query, mode, filter, limit, cursor?, beliefs?, refers_to?, max_scopes?, exclude_agent_id?}``: a ranking.

    ``beliefs`` asks for up to N beliefs from the same reads (first page only; left out of JSON when 0).
    ``max_scopes`` reads at most N scopes: those the query names first, then the most recently written.
    ``exclude_agent_id`` (*memory-core*, issue 12: a pack's Team section) leaves out the items whose
    ``meta.agent_id`` is that agent before ranking and before the scopes are chosen, so its own turns neither
    take the page nor a scope (an engine whose wire has no such filter drops them before the page); None (the
    default, left out of JSON) excludes nobody. Beliefs are not narrowed.
    ``tiers`` (seed 002) names the tiers read; empty (the default, left out of JSON) reads every tier but
    ``archive``. Only engines declaring ``tiers`` take a non-empty one.
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"beliefs", "tiers"})

    query: NonBlank
    mode: FetchMode = FetchMode.HYBRID
    filter: MetaFilter = Field(default_factory=MetaFilter)
    limit: Limit = 10
    cursor: str | None = None
    beliefs: StrictInt = Field(default=0, ge=0, le=MAX_PAGE_LIMIT)
    refers_to: TimeHint | None = None
    max_scopes: USize | None = Field(default=None, gt=0)
    tiers: tuple[Tier, ...] = ()
    exclude_agent_id: NonBlank | None = None


class FetchPage(ContractModel):
    """``{hits, next_cursor?, beliefs}``."""

    hits: tuple[Hit, ...] = ()
    next_cursor: str | None = None
    beliefs: tuple[Hit, ...] = ()


class ListRequest(ContractModel):
    """``{filter, limit, cursor?}``: page through items in engine order; every score is 0."""

    filter: MetaFilter = Field(default_factory=MetaFilter)
    limit: Limit = 50
    cursor: str | None = None


class ListPage(ContractModel):
    """``{items, next_cursor?}``; ``next_cursor`` is absent at the end."""

    items: tuple[Hit, ...] = ()
    next_cursor: str | None = None


def id_fault(i: int, item_id: object) -> str | None:
    """Why ``item_id``, the ``i``-th id given, is not one: not a string, blank, or holding NUL; None when it is.

    The one rule for ids given to ``get`` and ``forget`` (``Ids``, ``engine.MemoryEngine``, ``tools.writes``). NUL
    (U+0000) is refused as in every stored string (``meta.NUL_FREE``): PostgreSQL cannot bind it.
    """
    if not isinstance(item_id, str):
        return f"id {i} is not a string"
    if not item_id.strip():
        return f"id {i} is blank"
    if "\x00" in item_id:
        return f"id {i} holds a NUL character (U+0000)"
    return None


def _ids(value: tuple[str, ...]) -> tuple[str, ...]:
    for i, item_id in enumerate(value):
        if (fault := id_fault(i, item_id)) is not None:
            raise ValueError(fault)
    return value


Ids = Annotated[tuple[str, ...], AfterValidator(_ids)]


class ForgetTarget(ContractModel):
    """``{"ids": […]}`` or ``{"filter": {…}}``: what to forget.

    No ids, or an empty filter (which would mean everything), is refused; a filter holding only a ``reach`` is
    valid and means "everything in reach".
    """

    ids: Ids | None = Field(default=None, max_length=MAX_FORGET_IDS)
    filter: MetaFilter | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.ids is None) == (self.filter is None):
            raise InvalidRequest("a forget target is exactly one of ids or filter", field="ids")
        if self.ids is not None and not self.ids:
            raise InvalidRequest("must not be empty", field="ids")
        if self.filter is not None and self.filter.is_empty():
            raise InvalidRequest("an empty filter would forget everything; set at least one field", field="filter")
        return self

    @classmethod
    def by_ids(cls, ids: Sequence[str]) -> ForgetTarget:
        """Forget these ids (unscoped)."""
        return cls(ids=tuple(ids))

    @classmethod
    def by_filter(cls, filter: MetaFilter) -> ForgetTarget:
        """Forget everything the filter matches."""
        return cls(filter=filter)


class ForgetReport(ContractModel):
    """``{forgotten}``: items actually removed."""

    forgotten: USize = 0


class GetRequest(ContractModel):
    """``{ids, reach?}``: 1..=200 ids; unknown and out-of-reach ids are left out of the answer."""

    ids: Ids = Field(min_length=1, max_length=MAX_GET_IDS)
    reach: Reach | None = None


class StoreReceipt(ContractModel):
    """``{id, replayed}``: ``replayed`` means the engine already held the item and wrote nothing."""

    id: str
    replayed: StrictBool = False


class Exported(ContractModel):
    """``{id, item}``: one item handed back whole."""

    id: str
    item: StoreItem


class ExportPage(ContractModel):
    """``{items, incomplete, next_cursor?}``; ``incomplete`` names items held only in part."""

    items: tuple[Exported, ...] = ()
    incomplete: tuple[str, ...] = ()
    next_cursor: str | None = None


class EraseRequest(ContractModel):
    """``{reach, kinds, whole_tree}``: delete ``at`` (and below with ``descendants``) for good.

    ``inherit`` is ignored. The root with descendants and no kinds is refused unless ``whole_tree`` is set.
    """

    reach: Reach
    kinds: tuple[ItemKind, ...] = ()
    whole_tree: StrictBool = False

    @model_validator(mode="after")
    def _interlock(self) -> Self:
        if self.reach.at.is_root and self.reach.descendants and not self.kinds and not self.whole_tree:
            raise InvalidRequest("erasing the whole tree needs whole_tree = true", field="whole_tree")
        if len(set(self.kinds)) != len(self.kinds):
            raise InvalidRequest("names a kind twice", field="kinds")
        return self

    def admitted_kinds(self) -> tuple[ItemKind, ...]:
        """The kinds to erase (all when empty)."""
        return self.kinds or ItemKind.all()


class EraseReport(ContractModel):
    """``{erased_scopes, receipts}``."""

    erased_scopes: USize = 0
    receipts: tuple[str, ...] = ()
