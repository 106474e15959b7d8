"""``FaultyEngine``: a wrapper that injects one realistic misbehaviour, so the suite can be tested itself.

A suite that asserted nothing would pass every engine; each fault below must instead be caught by the check
the contract reference §2 names for it (``FAULT_CHECKS``). Every fault imitates a bug an engine could really
ship, described on its ``Fault`` member.

The wrapper forwards every call to ``inner`` through its public (validating) methods. Faults that skip
validation (``AcceptEmptyForget``, ``ClaimEveryMode``, ``ConsolidateUnvalidated``) override the public method,
since ``MemoryEngine`` validates there. The wrapper offers the core contract only: ``export`` and ``erase`` keep
the base's ``Unsupported``, so those two optional checks skip under every fault, as for any engine that does
not offer them. (Were ``export`` forwarded, ``NeverReplay`` would be caught by ``export`` — re-storing an
exported item must replay — before the ``replay`` check the contract names.)
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from memory_core.consolidation import (
    BeliefsRequest,
    BuildScope,
    ConsolidateReceipt,
    ConsolidateRequest,
    ConsolidateStatus,
    Consolidation,
    WaitFor,
    WriteOptions,
)
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.engine import AnyItem, MemoryEngine
from memory_core.engines.reference import first_sentence
from memory_core.errors import InvalidRequest
from memory_core.explore import Bucket, ExplorePage, ExploreRequest
from memory_core.items import Learning, LearningKind
from memory_core.limits import BELIEF_TAG, LISTING_PAGE_SIZE
from memory_core.memory_log import LogChange, LogPage, LogRecord, Tier
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Reach
from memory_core.query import (
    FetchPage,
    FetchRequest,
    ForgetReport,
    ForgetTarget,
    GetRequest,
    Hit,
    ListPage,
    ListRequest,
    RecallAnswer,
    RecallRequest,
    StoreReceipt,
)
from memory_core.scoring import keyword_score, tokenize

__all__ = ["FAULT_CHECKS", "LOG_FAULTS", "Fault", "FaultyEngine", "applicable"]


class Fault(StrEnum):
    """23 faults, each a realistic engine bug.

    17 of the contract reference §2, one of issue 11 rule 1 and five of memory as a log (seed 002).
    """

    IGNORE_FETCH_FILTER = "IgnoreFetchFilter"
    """``fetch`` honours the reach (its index is partitioned by namespace) but ignores every metadata field."""
    NEVER_REPLAY = "NeverReplay"
    """Every store reports ``replayed = false``: an upsert that hides the duplicate but never says so."""
    ACCEPT_EMPTY_FORGET = "AcceptEmptyForget"
    """A malformed forget target (no ids, an empty filter) is treated as "nothing to forget" instead of refused."""
    CLAIM_EVERY_MODE = "ClaimEveryMode"
    """Declares one fetch mode but quietly serves every mode as that one instead of refusing ``Unsupported``."""
    CITE_UNKNOWN_IDS = "CiteUnknownIds"
    """``recall`` cites its index rows (a hash of the cited text) instead of item ids, so citations dangle."""
    DOWN = "Down"
    """``health`` reports ``down`` (the store does not answer its probe)."""
    UNDERCOUNT_EXPLORE = "UndercountExplore"
    """Every facet bucket counts one short: an off-by-one in the group count."""
    GET_UNORDERED = "GetUnordered"
    """``get`` answers in its own order (by id) rather than the order asked."""
    STORE_MANY_UNORDERED = "StoreManyUnordered"
    """``store_many`` answers receipts in the order its bulk insert finished (reversed), not item order."""
    LIST_IGNORES_REACH = "ListIgnoresReach"
    """``list`` drops the reach (a missing namespace clause): every node is listed, siblings included."""
    GET_IGNORES_REACH = "GetIgnoresReach"
    """``get`` reads ids whatever the reach, so an agent can read a sibling's items by id."""
    ACCEPTED_WRONG_ID = "AcceptedWrongId"
    """An ``accepted`` store answers its write-ahead ticket instead of the item's id."""
    CONSOLIDATE_OFF_PROMISE = "ConsolidateOffPromise"
    """Declares ``on_demand`` but only queues builds for a nightly run, answering ``scheduled``."""
    CONSOLIDATE_UNDECLARED = "ConsolidateUndeclared"
    """Declares ``none``, yet its consolidate endpoint accepts builds and answers ``started``."""
    CONSOLIDATE_UNVALIDATED = "ConsolidateUnvalidated"
    """``consolidate`` skips validation and silently de-duplicates a kind named twice instead of refusing."""
    BELIEFS_UNTAGGED = "BeliefsUntagged"
    """Derives beliefs at read time from the items in reach, but forgets the ``belief`` tag."""
    BELIEFS_OUT_OF_REACH = "BeliefsOutOfReach"
    """Derives tagged beliefs at read time, but reads the subtree of the reach's shared ancestor (a per-team
    cache), so beliefs from other nodes leak in."""
    TIMES_AS_UNIX_SECONDS = "TimesAsUnixSeconds"
    """Keeps ``observed_at`` as signed 32-bit Unix seconds (an ``int4`` column): microseconds are dropped and times
    outside 1901-12-13..2038-01-19 are clamped, so an accepted time reads back as another (issue 11 rule 1)."""
    LSN_NEVER_ADVANCES = "LsnNeverAdvances"
    """``current_lsn`` answers the high-water mark read when the connection opened, never the latest record."""
    GET_HIDES_STATUS = "GetHidesStatus"
    """``get`` reads the item table without joining the state, so a retracted or stale memory shows no status."""
    AS_OF_IGNORES_LSN = "AsOfIgnoresLsn"
    """``as_of`` opens its snapshot at the latest LSN whatever it is asked (the bound is dropped)."""
    ROLLBACK_HIDES_LOSS = "RollbackHidesLoss"
    """A rollback past a forget reports success and leaves out what it could not restore."""
    ARCHIVE_IN_STANDARD_READ = "ArchiveInStandardRead"
    """The standard fetch has no tier clause, so archived memories come back in every read."""


FAULT_CHECKS: Final[dict[Fault, str]] = {
    Fault.IGNORE_FETCH_FILTER: "fetch_filters",
    Fault.NEVER_REPLAY: "replay",
    Fault.ACCEPT_EMPTY_FORGET: "empty_forget",
    Fault.CLAIM_EVERY_MODE: "unsupported_modes",
    Fault.CITE_UNKNOWN_IDS: "recall",
    Fault.DOWN: "health",
    Fault.UNDERCOUNT_EXPLORE: "explore",
    Fault.GET_UNORDERED: "get",
    Fault.STORE_MANY_UNORDERED: "store_many",
    Fault.LIST_IGNORES_REACH: "namespaces",
    Fault.GET_IGNORES_REACH: "namespaces",
    Fault.ACCEPTED_WRONG_ID: "store_with",
    Fault.CONSOLIDATE_OFF_PROMISE: "consolidate",
    Fault.CONSOLIDATE_UNDECLARED: "consolidate",
    Fault.CONSOLIDATE_UNVALIDATED: "consolidate",
    Fault.BELIEFS_UNTAGGED: "consolidate",
    Fault.BELIEFS_OUT_OF_REACH: "consolidate",
    Fault.TIMES_AS_UNIX_SECONDS: "round_trip",
    Fault.LSN_NEVER_ADVANCES: "log",
    Fault.GET_HIDES_STATUS: "retract",
    Fault.AS_OF_IGNORES_LSN: "as_of",
    Fault.ROLLBACK_HIDES_LOSS: "tombstone",
    Fault.ARCHIVE_IN_STANDARD_READ: "tiers",
}
"""The check that must catch each fault (reference §2, "The suite tests itself"; the log faults, seed 002)."""

LOG_FAULTS: Final[frozenset[Fault]] = frozenset(
    {
        Fault.LSN_NEVER_ADVANCES,
        Fault.GET_HIDES_STATUS,
        Fault.AS_OF_IGNORES_LSN,
        Fault.ROLLBACK_HIDES_LOSS,
        Fault.ARCHIVE_IN_STANDARD_READ,
    }
)
"""The faults of the log capability: they can only be injected into an engine that declares ``log``."""


def applicable(fault: Fault, descriptor: EngineDescriptor) -> bool:
    """True when ``fault`` can be injected into an engine with ``descriptor``.

    A log fault needs ``log``; ``ArchiveInStandardRead`` also needs ``tiers`` and a fetch mode.
    """
    if fault is Fault.ARCHIVE_IN_STANDARD_READ:
        return descriptor.log and descriptor.tiers and bool(descriptor.fetch_modes)
    return descriptor.log or fault not in LOG_FAULTS


class FaultyEngine(MemoryEngine):
    """``inner`` with one ``fault`` injected; every other call is forwarded unchanged.

    Args:
        inner: The engine to wrap (owned: ``close`` closes it).
        fault: The misbehaviour to inject.

    Example:
        ``run(FaultyEngine(ReferenceEngine(), Fault.NEVER_REPLAY)).first_failure.name == "replay"``
    """

    def __init__(self, inner: MemoryEngine, fault: Fault | str) -> None:
        self.inner = inner
        self.fault = Fault(fault)
        self._tickets = itertools.count(1)
        self._opened_lsn: int | None = None

    # identity ------------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        """The inner descriptor, renamed, with what the fault declares (one mode, a consolidation mode)."""
        d = self.inner.descriptor()
        changes: dict[str, Any] = {"id": f"faulty-{d.id}", "label": f"{d.label} with fault {self.fault.value}"}
        if self.fault is Fault.CLAIM_EVERY_MODE:
            preferred = d.preferred_mode()
            changes["fetch_modes"] = (preferred,) if preferred is not None else ()
        elif self.fault is Fault.CONSOLIDATE_UNDECLARED:
            changes["consolidation"] = Consolidation.NONE
        elif self.fault is Fault.CONSOLIDATE_OFF_PROMISE:
            changes["consolidation"] = Consolidation.ON_DEMAND
        return d.model_copy(update=changes)

    def health(self) -> EngineHealth:
        """``down`` under ``Down``; else the inner health."""
        if self.fault is Fault.DOWN:
            return EngineHealth.down("the store does not answer its health probe")
        return self.inner.health()

    def close(self) -> None:
        """Close the inner engine."""
        self.inner.close()

    # public methods the validation-skipping faults replace ---------------------------------------------
    def fetch(self, request: FetchRequest | Mapping[str, Any]) -> FetchPage:
        """Under ``ClaimEveryMode``, serve any mode as the one declared instead of refusing ``Unsupported``."""
        if self.fault is not Fault.CLAIM_EVERY_MODE:
            return super().fetch(request)
        req = FetchRequest.coerce(request, "request")
        declared = self.descriptor().fetch_modes
        served = req.model_copy(update={"mode": declared[0]}) if declared else req
        return self.inner.fetch(served)

    def forget(self, target: ForgetTarget | Mapping[str, Any]) -> ForgetReport:
        """Under ``AcceptEmptyForget``, answer ``forgotten = 0`` for a malformed target instead of refusing it."""
        if self.fault is Fault.ACCEPT_EMPTY_FORGET:
            try:
                target = ForgetTarget.coerce(target, "target")
            except InvalidRequest:
                return ForgetReport(forgotten=0)
        return super().forget(target)

    def consolidate(self, request: ConsolidateRequest | Mapping[str, Any]) -> ConsolidateReceipt:
        """Under ``ConsolidateUnvalidated``, de-duplicate the kinds and build instead of refusing a repeat."""
        if self.fault is not Fault.CONSOLIDATE_UNVALIDATED:
            return super().consolidate(request)
        raw = _raw(request)
        raw["kinds"] = list(dict.fromkeys(raw.get("kinds") or []))
        return self.inner.consolidate(raw)

    # hooks ---------------------------------------------------------------------------------------------
    def _recall(self, request: RecallRequest) -> RecallAnswer:
        answer = self.inner.recall(request)
        if self.fault is not Fault.CITE_UNKNOWN_IDS:
            return answer
        rows = tuple(
            c.model_copy(update={"id": hashlib.sha1(c.snippet.encode("utf-8")).hexdigest()}) for c in answer.citations
        )
        return answer.model_copy(update={"citations": rows})

    def _fetch(self, request: FetchRequest) -> FetchPage:
        if self.fault is Fault.IGNORE_FETCH_FILTER:
            request = request.model_copy(update={"filter": MetaFilter(reach=request.filter.reach)})
        if self.fault is Fault.ARCHIVE_IN_STANDARD_READ and not request.tiers:
            request = request.model_copy(update={"tiers": tuple(Tier)})
        return self.inner.fetch(request)

    def _receipt(self, receipt: StoreReceipt) -> StoreReceipt:
        if self.fault is Fault.NEVER_REPLAY and receipt.replayed:
            return receipt.model_copy(update={"replayed": False})
        return receipt

    def _store(self, item: AnyItem) -> StoreReceipt:
        return self._receipt(self.inner.store(item))

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        receipt = self._receipt(self.inner.store_with(item, options))
        if self.fault is Fault.ACCEPTED_WRONG_ID and options.wait is WaitFor.ACCEPTED:
            return receipt.model_copy(update={"id": f"wal-{next(self._tickets)}"})
        return receipt

    def _store_many(self, items: Sequence[AnyItem]) -> list[StoreReceipt]:
        receipts = [self._receipt(r) for r in self.inner.store_many(items)]
        return receipts[::-1] if self.fault is Fault.STORE_MANY_UNORDERED else receipts

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> list[StoreReceipt]:
        receipts = [self._receipt(r) for r in self.inner.store_many_with(items, options)]
        return receipts[::-1] if self.fault is Fault.STORE_MANY_UNORDERED else receipts

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        return self.inner.forget(target)

    def _list(self, request: ListRequest) -> ListPage:
        if self.fault is Fault.LIST_IGNORES_REACH:
            request = request.model_copy(update={"filter": request.filter.model_copy(update={"reach": None})})
        page = self.inner.list(request)
        if self.fault is not Fault.TIMES_AS_UNIX_SECONDS:
            return page
        return page.model_copy(update={"items": tuple(_unix_seconds(hit) for hit in page.items)})

    def _explore(self, request: ExploreRequest) -> ExplorePage:
        page = self.inner.explore(request)
        if self.fault is not Fault.UNDERCOUNT_EXPLORE:
            return page
        short = tuple(Bucket(value=b.value, count=max(0, b.count - 1)) for b in page.buckets)
        return page.model_copy(update={"buckets": short})

    def _get(self, request: GetRequest) -> list[Hit]:
        if self.fault is Fault.GET_IGNORES_REACH:
            request = request.model_copy(update={"reach": None})
        hits = self.inner.get(request)
        if self.fault is Fault.GET_HIDES_STATUS:
            return [hit.model_copy(update={"status": None}) for hit in hits]
        if self.fault is Fault.TIMES_AS_UNIX_SECONDS:
            return [_unix_seconds(hit) for hit in hits]
        if self.fault is not Fault.GET_UNORDERED:
            return hits
        # its own order (by id) — but never the order asked, which a sort alone matches for some nonces
        own = sorted(hits, key=lambda h: h.id)
        return own[::-1] if [h.id for h in own] == [h.id for h in hits] else own

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        if self.fault is Fault.CONSOLIDATE_OFF_PROMISE:
            return ConsolidateReceipt.scheduled()
        if self.fault is Fault.CONSOLIDATE_UNDECLARED:
            return ConsolidateReceipt(
                status=ConsolidateStatus.STARTED,
                jobs=(f"build-{next(self._tickets)}",),
                scopes=len(request.admitted_kinds()),
            )
        return self.inner.consolidate(request)

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        if self.fault is Fault.BELIEFS_UNTAGGED:
            return self._read_time_beliefs(request, request.reach, tag=False)
        if self.fault is Fault.BELIEFS_OUT_OF_REACH:
            return self._read_time_beliefs(request, Reach.subtree(request.reach.at.shared_ancestor()), tag=True)
        return self.inner.beliefs(request)

    def _scopes(self, request: ConsolidateRequest) -> list[BuildScope]:
        return self.inner.scopes(request)

    # the log (forwarded; the log faults) ---------------------------------------------------------------
    def _current_lsn(self) -> int:
        lsn = self.inner.current_lsn()
        if self.fault is Fault.LSN_NEVER_ADVANCES:
            if self._opened_lsn is None:
                self._opened_lsn = lsn
            return self._opened_lsn
        return lsn

    def _log(self, since: int, limit: int) -> LogPage:
        return self.inner.log(since, limit)

    def _as_of(self, lsn: int) -> MemoryEngine:
        if self.fault is Fault.AS_OF_IGNORES_LSN:
            lsn = self.inner.current_lsn()
        return self.inner.as_of(lsn)

    def _retract(self, ids: tuple[str, ...], reason: str) -> LogChange:
        return self.inner.retract(ids, reason)

    def _rollback(self, to_lsn: int, reason: str) -> LogChange:
        change = self.inner.rollback(to_lsn, reason)
        if self.fault is Fault.ROLLBACK_HIDES_LOSS:
            return change.model_copy(update={"unrecoverable": (), "note": None})
        return change

    def _history(self, item_id: str) -> tuple[LogRecord, ...]:
        return self.inner.history(item_id)

    def _move(self, ids: tuple[str, ...], tier: Tier, reason: str) -> LogChange:
        return self.inner.move(ids, tier, reason)

    # the Beliefs* faults' belief source ----------------------------------------------------------------
    def _read_time_beliefs(self, request: BeliefsRequest, reach: Reach, *, tag: bool) -> list[Hit]:
        """Beliefs distilled at read time, ranked for the query.

        Each is the first sentence (the reference distiller's rule, reference §3) of a document or conversation
        in one listing page under ``reach``.
        """
        flt = MetaFilter(reach=reach, kinds=(ItemKind.DOCUMENT, ItemKind.CONVERSATION))
        page = self.inner.list(ListRequest(filter=flt, limit=LISTING_PAGE_SIZE))
        words = set(tokenize(request.query or ""))
        scored: list[tuple[float, Hit]] = []
        for source in page.items:
            statement = first_sentence(source.text)
            if not statement:
                continue
            tags = (*source.meta.tags, BELIEF_TAG) if tag else source.meta.tags
            belief = Learning(
                text=statement,
                kind=LearningKind.FACT,
                confidence=0.5,
                evidence=source.id,
                meta=source.meta.model_copy(update={"tags": tags}),
            )
            score = keyword_score(words, set(tokenize(statement)))
            scored.append((score, Hit.of(belief, score)))
        scored.sort(key=lambda row: -row[0])
        return [hit for _, hit in scored[: request.limit]]


_INT32_SECONDS: Final = (datetime(1901, 12, 13, 20, 45, 52, tzinfo=UTC), datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC))


def _unix_seconds(hit: Hit) -> Hit:
    """``hit`` as an engine keeping ``observed_at`` in a signed 32-bit seconds column would read it back."""
    at = hit.meta.observed_at
    if at is None:
        return hit
    low, high = _INT32_SECONDS
    kept = min(max(at.replace(microsecond=0), low), high)
    return hit.model_copy(update={"meta": hit.meta.model_copy(update={"observed_at": kept})})


def _raw(request: ConsolidateRequest | Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    if isinstance(request, ConsolidateRequest):
        return request.to_dict()
    if isinstance(request, str | bytes):
        loaded = json.loads(request)
        return dict(loaded) if isinstance(loaded, dict) else {"request": loaded}
    return dict(request)
