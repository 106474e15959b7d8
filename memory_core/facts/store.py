"""``FactStore``: facts at one namespace over any ``MemoryEngine`` (seed 004 "Facts"; issue 20).

* **Keyed** (``learn(text, key="ui.theme")``): the fact becomes the key's current value at that namespace and
  every other statement of the key is superseded. Each statement carries the time it was stated
  (``meta.observed_at`` and its ``fact-stated`` tag); the latest statement wins whatever order the writes arrive
  in: a statement older than the current value is superseded on arrival and never becomes current. Superseding is
  ``retract`` with the reason ``superseded by <id> (key <key>)`` on an engine keeping a log (the old value is
  kept, marked, and its history shows why), else ``forget`` (the engine keeps no history to hold it in).
* **Unkeyed**: deduplicated by content hash (``fact-hash``, case and whitespace folded) at that namespace: a fact
  already held is a replay, answered with the held id.

Writes are ``visible`` (``store``) unless the caller passes other ``WriteOptions`` (``ToolWrites``: ``accepted``,
seed 001). Validation happens before anything is read
or written (``model``): a bad request stores nothing. Two writers racing on one key may briefly both hold a
value; readers take the latest statement (``pack.current_facts``), and the next write of the key supersedes the
rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeGuard

from memory_core.consolidation import WriteOptions
from memory_core.engine import MemoryEngine, check_engine
from memory_core.errors import InvalidRequest
from memory_core.facts.model import (
    DEFAULT_IMPORTANCE,
    HASH_TAG,
    check_importance,
    check_key,
    check_stated,
    check_text,
    content_hash,
    fact_tags,
    key_tag,
    read_tags,
)
from memory_core.items import Learning, LearningKind
from memory_core.meta import ItemKind, MemoryMeta, MetaFilter, SourceKind, SourceRef
from memory_core.namespace import Namespace, Reach
from memory_core.query import ForgetTarget, Hit, ListRequest, StoreReceipt
from memory_core.safety.detector import Policy
from memory_core.safety.engine import ScrubbingEngine
from memory_core.safety.items import scrub_item

__all__ = ["FactReceipt", "FactStore", "fact_item", "is_fact_item", "rehashed", "scrubbed_fact", "stated_at"]

_PAGE: Final = 500
_MIN: Final = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class FactReceipt:
    """What one ``learn`` did.

    Attributes:
        id: The fact's id.
        replayed: The engine already held it (or, unkeyed, the same text) and wrote nothing.
        current: The fact is its key's current value (always True for an unkeyed fact).
        superseded: Ids of the statements it superseded.
        superseded_by: For a statement older than the current value, the current value's id.
    """

    id: str
    replayed: bool = False
    current: bool = True
    superseded: tuple[str, ...] = ()
    superseded_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (empty and None fields left out)."""
        out: dict[str, Any] = {"id": self.id, "replayed": self.replayed, "current": self.current}
        if self.superseded:
            out["superseded"] = list(self.superseded)
        if self.superseded_by is not None:
            out["superseded_by"] = self.superseded_by
        return out


def fact_item(
    text: object,
    place: Namespace,
    *,
    key: object = None,
    importance: object = None,
    at: datetime | None = None,
    confidence: float = 0.8,
    tags: Sequence[str] = (),
    evidence: str | None = None,
    source: SourceKind = SourceKind.AGENT,
    field: str = "",
    agent_id: str | None = None,
) -> Learning:
    """The learning a fact is stored as; pure. Every field is checked before anything else happens.

    Args:
        text: At most 2,000 characters, non-blank.
        place: The namespace it lives at.
        key: A stable key (1..=128 characters once stripped), or None.
        importance: A number in ``[0, 1]``; None: ``DEFAULT_IMPORTANCE``.
        at: When it was stated (aware); the caller's clock.
        confidence: The learning's confidence.
        tags: Tags the caller files it under (kept after the fact tags).
        evidence: Where it was learned.
        source: ``meta.source.kind``.
        field: A prefix for the names errors give (``"learning."``).
        agent_id: The agent that stated it (``meta.agent_id``, reference §6.4), or None.

    Raises:
        InvalidRequest: naming ``text``, ``key`` or ``importance`` (with ``field`` before it).
    """
    checked = check_text(text, f"{field}text")
    k = check_key(key, f"{field}key")
    imp = DEFAULT_IMPORTANCE if importance is None else check_importance(importance, f"{field}importance")
    all_tags = (*fact_tags(checked, k, imp, at), *dict.fromkeys(t for t in tags if t))
    meta = MemoryMeta(
        namespace=place,
        source=SourceRef(kind=source),
        tags=tuple(dict.fromkeys(all_tags)),
        observed_at=at,
        agent_id=agent_id,
    )
    return Learning(text=checked, kind=LearningKind.FACT, confidence=confidence, evidence=evidence, meta=meta)


def is_fact_item(item: object) -> TypeGuard[Learning]:
    """True for a learning carrying a fact's key or content-hash tag (what ``FactStore.apply`` upserts)."""
    if not isinstance(item, Learning):
        return False
    facts = read_tags(item.meta.tags)
    return facts.key is not None or facts.content_hash is not None


def rehashed(item: Learning) -> Learning:
    """``item`` with its ``fact-hash`` tag recomputed from its text (after a scrub changed the text); pure.

    The hash is then never a hash of text a scrub removed, and facts that scrub alike deduplicate.
    """
    tags = item.meta.tags
    if not any(t.startswith(HASH_TAG) for t in tags):
        return item
    fresh = tuple(HASH_TAG + content_hash(item.text) if t.startswith(HASH_TAG) else t for t in tags)
    return item if fresh == tags else item.with_meta(item.meta.with_(tags=fresh))


def scrubbed_fact(item: Learning, policy: Policy | None) -> Learning:
    """``item`` scrubbed (``safety.items.scrub_item``) with its content hash recomputed from the scrubbed text."""
    out = scrub_item(item, policy)
    assert isinstance(out, Learning)  # scrubbing keeps an item's kind
    return rehashed(out)


def stated_at(meta: MemoryMeta) -> datetime:
    """When a fact was stated: ``observed_at`` (undated: the earliest time, so any dated statement wins)."""
    return meta.observed_at if meta.observed_at is not None else _MIN


class FactStore:
    """Facts at ``place``.

    Args:
        engine: Any ``MemoryEngine`` (a scrubbing one scrubs what is stored).
        place: The namespace facts are written at and read from (exactly: not its children).
        clock: When a statement is made, for ``learn`` calls that give no time (default: now, UTC).
        options: The writes' durability; None: ``store`` (``visible``: the next read sees the fact).

    Raises:
        InvalidRequest: ``engine`` is not a ``MemoryEngine``.
    """

    def __init__(
        self,
        engine: MemoryEngine,
        place: Namespace,
        *,
        clock: Callable[[], datetime] | None = None,
        options: WriteOptions | None = None,
    ) -> None:
        self.engine = check_engine(engine)
        self.place = place
        self.options = options
        self._clock = clock or (lambda: datetime.now(UTC))

    # writes --------------------------------------------------------------------------------------------
    def learn(
        self,
        text: object,
        key: object = None,
        importance: object = None,
        *,
        at: datetime | None = None,
        tags: Sequence[str] = (),
        confidence: float = 0.8,
        source: SourceKind = SourceKind.AGENT,
        agent_id: str | None = None,
    ) -> FactReceipt:
        """Store a fact (see the module docstring for keys, dedupe and order).

        ``agent_id`` is the agent that stated it (``meta.agent_id``, reference §6.4), or None.

        Raises:
            InvalidRequest: a bad ``text``, ``key`` or ``importance``, or an ``at`` that is naive or more than
                ``MAX_STATED_SKEW`` ahead of the clock (named), before anything is read or stored.
            MemoryCoreError: the engine's error.
        """
        now = self._clock()
        item = fact_item(
            text,
            self.place,
            key=key,
            importance=importance,
            at=now if at is None else check_stated(at, now),
            confidence=confidence,
            tags=tags,
            source=source,
            agent_id=agent_id,
        )
        return self.apply(item)

    def apply(self, item: Learning) -> FactReceipt:
        """Write a built fact item: upsert by key, dedupe by content hash, else a plain store.

        ``ToolWrites`` calls this when it delivers a queued fact, so a late delivery follows the same rules.

        Raises:
            InvalidRequest: the item is not at ``place``.
        """
        if item.meta.namespace != self.place:
            raise InvalidRequest(f"a fact for {item.meta.namespace} given to the facts of {self.place}", "namespace")
        if isinstance(self.engine, ScrubbingEngine):  # hash what will be stored, never a secret it removes
            item = scrubbed_fact(item, self.engine.policy)
        item = rehashed(item)
        facts = read_tags(item.meta.tags)
        if facts.key is not None:
            return self._upsert(item, facts.key)
        if facts.content_hash is not None:
            held = self._held([HASH_TAG + facts.content_hash])
            if held:
                return FactReceipt(id=held[0].id, replayed=True)
        receipt = self._store(item)
        return FactReceipt(id=receipt.id, replayed=receipt.replayed)

    def forget(self, key: object) -> int:
        """Forget every stored statement of ``key`` here: the current value and every superseded or retracted one.

        A forget by filter (``ForgetTarget.filter``) removes what the filter matches whatever its log status, so
        a value a log engine kept as *retracted* (superseded) loses its text too and only the log's tombstones
        remain (``docs/log-model.md`` rule 6: forget is for privacy). Listing would see only live values.

        Returns:
            How many items were forgotten (every statement of the key, not only the current one).

        Raises:
            InvalidRequest: a blank or too long key.
        """
        k = check_key(key)
        if k is None:
            raise InvalidRequest("a key is required", field="key")
        flt = MetaFilter(reach=Reach.exact(self.place), kinds=(ItemKind.LEARNING,), tags_any=(key_tag(k),))
        return self.engine.forget(ForgetTarget(filter=flt)).forgotten

    # reads ---------------------------------------------------------------------------------------------
    def all(self) -> list[Hit]:
        """Every live fact here, keyed ones first by key, then unkeyed ones newest first."""
        hits = [h for h in self._listed(MetaFilter(reach=Reach.exact(self.place), kinds=(ItemKind.LEARNING,)))]
        facts = [h for h in hits if read_tags(h.meta.tags).is_fact]

        def order(hit: Hit) -> tuple[int, str, float]:
            key = read_tags(hit.meta.tags).key
            return (0 if key is not None else 1, key or "", -stated_at(hit.meta).timestamp())

        return sorted(facts, key=order)

    def current(self, key: object) -> Hit | None:
        """The key's current value here: its latest live statement (None: no value).

        Raises:
            InvalidRequest: a blank or too long key.
        """
        k = check_key(key)
        if k is None:
            raise InvalidRequest("a key is required", field="key")
        held = self._held([key_tag(k)])
        return max(held, key=lambda h: (stated_at(h.meta), h.id), default=None)

    # helpers -------------------------------------------------------------------------------------------
    def _store(self, item: Learning) -> StoreReceipt:
        return self.engine.store(item) if self.options is None else self.engine.store_with(item, self.options)

    def _listed(self, flt: MetaFilter) -> list[Hit]:
        out: list[Hit] = []
        cursor: str | None = None
        while True:
            page = self.engine.list(ListRequest(filter=flt, limit=_PAGE, cursor=cursor))
            out.extend(page.items)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    def _held(self, tags: list[str]) -> list[Hit]:
        flt = MetaFilter(reach=Reach.exact(self.place), kinds=(ItemKind.LEARNING,), tags_any=tuple(tags))
        return self._listed(flt)

    def _upsert(self, item: Learning, key: str) -> FactReceipt:
        mine = (stated_at(item.meta), item.id)
        held = [h for h in self._held([key_tag(key)]) if h.id != item.id]
        newest = max(held, key=lambda h: (stated_at(h.meta), h.id), default=None)
        if newest is not None and (stated_at(newest.meta), newest.id) > mine:  # stated before the current value
            reason = f"superseded by {newest.id} (key {key}): stated earlier, delivered later"
            if self.engine.descriptor().log:  # kept in history, marked
                receipt = self._store(item)
                self.engine.retract([receipt.id], reason)
            return FactReceipt(id=item.id, current=False, superseded_by=newest.id)
        receipt = self._store(item)
        older = tuple(h.id for h in held if h.id != receipt.id)
        if older:
            self._supersede(older, f"superseded by {receipt.id} (key {key})")
        return FactReceipt(id=receipt.id, replayed=receipt.replayed, superseded=older)

    def _supersede(self, ids: tuple[str, ...], reason: str) -> None:
        if self.engine.descriptor().log:
            self.engine.retract(ids, reason)
        else:
            self.engine.forget(ForgetTarget(ids=ids))
