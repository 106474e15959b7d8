"""``ReferenceEngine``: the in-memory engine that calibrates the contract (contract reference §3).

It is both the executable spec and a shipped test double: every other engine must pass the conformance suite
the way this one does. State is per instance and guarded by a lock, so one instance is safe across threads.

URL: ``reference://`` (on-demand consolidation) or ``reference://?consolidation=none|on_demand|scheduled|automatic``.

* Items live in insertion order, keyed by fingerprint; storing a held fingerprint is a replay.
* Ranking follows ``memory_core.scoring``: filter, score ``render_text()``, keep hits, sort by score
  descending with ties in insertion order; a ``refers_to`` hint moves hinted days first.
* Cursors are decimal offsets.
* ``max_scopes = N`` (reference §1.3) ranks only the items of at most N scopes, a scope being a namespace holding
  items the filter admits: first those the query names, then the most recently written (``choose_scopes``, the
  rule the SQLite engine shares).
* ``consolidate`` distils one fact per admitted document or conversation ("the first sentence"), tagged
  ``consolidated``, at the source's node; consolidating twice replays. Its beliefs are ordinary learnings, so
  ``beliefs()`` keeps the default (none).
* Memory as a log (seed 002, ``docs/log-model.md``): every change is a ``LogRecord`` (LSN = position in the log,
  from 1) and the materialised state (status, tier per id) is always ``memory_log.fold`` of the log. A learning's
  ``evidence``, when it names a stored item, is what it was built on (its provenance). ``fetch`` and ``recall``
  serve only live memories in the standard tiers (a ``tiers`` filter reads others, ``archive`` included);
  ``list`` serves live memories of every tier; ``get``, ``export`` and ``history`` show every held memory with
  its status. ``as_of(lsn)`` is a read-only ``ReferenceEngine`` over the fold at ``lsn`` and the content still
  held, so a forgotten text never comes back.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from operator import itemgetter
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

from memory_core.consolidation import ConsolidateReceipt, ConsolidateRequest, ConsolidateStatus, Consolidation
from memory_core.control import has_control_token, is_control_text
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.engine import AnyItem, MemoryEngine, Receipts
from memory_core.errors import ConfigError, InvalidRequest, Unsupported
from memory_core.items import Conversation, Document, Learning, LearningKind
from memory_core.limits import BELIEF_TAG, CONSOLIDATED_TAG
from memory_core.memory_log import (
    STANDARD_TIERS,
    Held,
    LogChange,
    LogPage,
    LogRecord,
    MemoryStatus,
    RecordOp,
    Tier,
    compensation,
    fold,
    settled,
)
from memory_core.meta import MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.query import (
    Citation,
    EraseReport,
    EraseRequest,
    Exported,
    ExportPage,
    FetchMode,
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
    TimeHint,
)
from memory_core.scoring import cosine, embed, keyword_score, mode_score, tokenize

__all__ = ["ReferenceEngine", "choose_scopes", "first_sentence", "names_scope", "scope_order"]

_STATEMENT_MAX = 240
"""Longest distilled statement, in characters (reference §3)."""
_BELIEF_CONFIDENCE = 0.5
"""Confidence of a distilled fact (reference §3)."""
_WS = re.compile(r"\s+")
_T = TypeVar("_T")
_SENTENCE_END = re.compile(r"[.!?]")
_CURSOR = re.compile(r"[0-9]{1,18}")
"""A cursor: the start index as ASCII decimal digits (18 bound any offset and keep ``int`` well inside its limit)."""


def first_sentence(text: str) -> str:
    """The reference distiller's statement for ``text`` (reference §3); '' when nothing is left.

    Prose lines (headings only when there is no prose), leading ``#`` stripped, whitespace collapsed, cut after
    the first ``.``/``!``/``?``, at most 240 characters.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    prose = [line for line in lines if not line.startswith("#")]
    chosen = prose or lines
    joined = _WS.sub(" ", " ".join(line.lstrip("#") for line in chosen)).strip()
    match = _SENTENCE_END.search(joined)
    if match:
        joined = joined[: match.end()]
    return joined[:_STATEMENT_MAX].strip()


def names_scope(query_words: set[str], ns: Namespace, below: Namespace) -> bool:
    """True when the query names ``ns``: every word of one of its segment ids below ``below`` is a query word.

    ``query_words`` are ``scoring.tokenize(query)``; segments at or above ``below`` (the read's reach) are shared
    by every scope it admits, so they name none in particular.
    """
    for words in _segment_words(ns, below):
        if all(w in query_words for w in words):
            return True
    return False


@lru_cache(maxsize=16384)
def _segment_words(ns: Namespace, below: Namespace) -> tuple[tuple[str, ...], ...]:
    """The words (``tokenize``) of each segment id of ``ns`` below ``below`` that has any, in order.

    Kept per process: a pack's scope choices ask it of every scope, every pack.
    """
    segments = ns.segments[below.depth :] if ns.is_within(below) else ns.segments
    return tuple(words for _, segment_id in segments if (words := tuple(tokenize(segment_id))))


def choose_scopes(query: str, last_write: Mapping[Namespace, int], reach: Reach, max_scopes: int) -> set[Namespace]:
    """The at most ``max_scopes`` scopes a ``max_scopes`` read ranks (reference §1.3); pure.

    Args:
        query: The fetch query.
        last_write: Each scope holding admitted items (a namespace) → when it was last written (any increasing
            clock: the SQLite engine's write time in µs, the reference engine's insertion position).
        reach: The read's reach (its ``at`` bounds which segments can be named).
        max_scopes: N > 0.

    Returns:
        The scopes the query names first, then the most recently written, ties by namespace; every scope when
        there are at most N.
    """
    if len(last_write) <= max_scopes:
        return set(last_write)
    return set(scope_order(query, last_write, reach)[:max_scopes])


def scope_order(query: str, last_write: Mapping[Namespace, int], reach: Reach) -> list[Namespace]:
    """Every scope of ``last_write`` in the order ``choose_scopes`` keeps them (it keeps the first N); pure.

    The scopes the query names (``names_scope``) first, then the most recently written, ties by namespace.
    """
    words = set(tokenize(query))
    below = reach.at
    keyed = [((not names_scope(words, ns, below), -at, str(ns)), ns) for ns, at in last_write.items()]
    keyed.sort(key=itemgetter(0))  # the keys are distinct (str(ns) is), so the order is the keys' alone
    return [ns for _, ns in keyed]


def _scoped(rows: Iterable[tuple[str, AnyItem]], query: str, flt: MetaFilter, max_scopes: int) -> list[str]:
    """Ids of the ``rows`` (in write order) inside the scopes ``choose_scopes`` keeps."""
    listed = list(rows)
    last: dict[Namespace, int] = {}
    for position, (_, item) in enumerate(listed):
        last[item.item_meta.namespace] = position
    kept = choose_scopes(query, last, flt.effective_reach(), max_scopes)
    return [item_id for item_id, item in listed if item.item_meta.namespace in kept]


def _offset(cursor: str | None) -> int:
    """The start index a cursor names; only the ASCII decimals ``_page`` mints are cursors.

    Raises:
        InvalidRequest: anything else (``str.isdigit`` would pass ``"²"`` and ``"١"``, and ``int`` reads the latter).
    """
    if cursor is None:
        return 0
    if not _CURSOR.fullmatch(cursor):
        raise InvalidRequest(f"unknown cursor {cursor[:40]!r}", field="cursor")
    return int(cursor)


def _page(rows: list[_T], cursor: str | None, limit: int) -> tuple[list[_T], str | None]:
    start = _offset(cursor)
    chunk = rows[start : start + limit]
    end = start + len(chunk)
    return chunk, (str(end) if end < len(rows) else None)


class ReferenceEngine(MemoryEngine):
    """In-memory calibration engine; see the module docstring.

    Args:
        consolidation: What the descriptor declares (``on_demand`` by default).
    """

    def __init__(self, consolidation: Consolidation | str = Consolidation.ON_DEMAND) -> None:
        self._consolidation = Consolidation(consolidation)
        self._items: dict[str, AnyItem] = {}
        self._vectors: dict[str, list[float]] = {}
        self._lock = threading.RLock()
        self._state: dict[str, Held] = {}
        self._records: list[LogRecord] = []
        self._txn = 0
        self._view_at: int | None = None
        self._batch: list[int | None] | None = None

    @classmethod
    def from_url(cls, url: str) -> ReferenceEngine:
        """Build from ``reference://[?consolidation=…]``.

        Raises:
            ConfigError: an unknown query parameter or consolidation mode.
        """
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        unknown = set(query) - {"consolidation"}
        if unknown:
            raise ConfigError(f"reference:// takes only ?consolidation=, not {sorted(unknown)}")
        mode = query.get("consolidation", [Consolidation.ON_DEMAND.value])[-1]
        try:
            return cls(Consolidation(mode))
        except ValueError:
            known = ", ".join(c.value for c in Consolidation)
            raise ConfigError(f"unknown consolidation {mode!r} (known: {known})") from None

    def with_consolidation(self, consolidation: Consolidation | str) -> ReferenceEngine:
        """Declare another consolidation mode (returns self)."""
        self._consolidation = Consolidation(consolidation)
        return self

    # test helpers --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._items)

    def is_empty(self) -> bool:
        """True when nothing is held (lets tests check the conformance suite cleaned up)."""
        return not self._items

    def snapshot(self) -> list[AnyItem]:
        """Every held item, in insertion order."""
        with self._lock:
            return list(self._items.values())

    def clear(self) -> None:
        """Forget everything, the log included."""
        self._writable()
        with self._lock:
            self._items.clear()
            self._vectors.clear()
            self._state.clear()
            self._records.clear()
            self._txn = 0

    def materialised(self) -> dict[str, Held]:
        """The materialised state (id → status and tier), which must always equal ``fold`` of the log."""
        with self._lock:
            return dict(self._state)

    # the log -------------------------------------------------------------------------------------------
    def _writable(self) -> None:
        if self._view_at is not None:
            raise Unsupported(f"a view as of LSN {self._view_at} is read-only")

    def _begin(self) -> int:
        self._txn += 1
        return self._txn

    def _write_txn(self) -> int:
        """The transaction a store writes in: the batch's (begun on its first write) inside ``store_many``."""
        if self._batch is None:
            return self._begin()
        txn = self._batch[0]
        if txn is None:
            txn = self._batch[0] = self._begin()
        return txn

    def _append(self, txn: int, op: RecordOp, item_id: str, held: Held | None, reason: str | None) -> LogRecord:
        """Write one record and apply it to the materialised state (the caller holds the lock)."""
        rec = LogRecord(
            lsn=len(self._records) + 1,
            txn=txn,
            op=op,
            id=item_id,
            status=held.status if held else None,
            tier=held.tier if held else None,
            reason=reason,
        )
        self._records.append(rec)
        if held is None:
            self._state.pop(item_id, None)
            self._items.pop(item_id, None)
            self._vectors.pop(item_id, None)
        else:
            self._state[item_id] = held
        return rec

    def _derived(self, roots: set[str]) -> list[str]:
        """Held ids built on ``roots``, transitively, in insertion order (``roots`` themselves left out)."""
        reached = set(roots)
        grew = True
        while grew:
            grew = False
            for item_id, item in self._items.items():
                if item_id not in reached and reached.intersection(_sources(item)):
                    reached.add(item_id)
                    grew = True
        return [i for i in self._items if i in reached and i not in roots]

    def _tombstone(self, doomed: list[str], reason: str) -> None:
        """Remove ``doomed`` and what was built only on them, each leaving a tombstone; one transaction."""
        gone = set(doomed)
        grew = True
        while grew:
            grew = False
            for item_id, item in self._items.items():
                sources = [s for s in _sources(item) if s in self._items]
                if item_id not in gone and sources and gone.issuperset(sources):
                    gone.add(item_id)
                    grew = True
        if not gone:
            return
        txn = self._begin()
        for item_id in [i for i in self._items if i in gone]:
            self._append(txn, RecordOp.TOMBSTONE, item_id, None, reason)

    def _current_lsn(self) -> int:
        with self._lock:
            return len(self._records)

    def _log(self, since: int, limit: int) -> LogPage:
        with self._lock:
            chunk = self._records[since : since + limit]
            more = since + limit < len(self._records)
        return LogPage(records=tuple(chunk), next_since=chunk[-1].lsn if more and chunk else None)

    def _history(self, item_id: str) -> tuple[LogRecord, ...]:
        with self._lock:
            return tuple(r for r in self._records if r.id == item_id)

    def _as_of(self, lsn: int) -> ReferenceEngine:
        with self._lock:
            end = settled(self._records, lsn)
            state = fold(self._records, end)
            view = ReferenceEngine(self._consolidation)
            view._items = {i: self._items[i] for i in state if i in self._items}
            view._state = {i: held for i, held in state.items() if i in view._items}
            view._records = self._records[:end]
            view._txn = max((r.txn for r in view._records), default=0)
        view._view_at = lsn
        return view

    def _retract(self, ids: tuple[str, ...], reason: str) -> LogChange:
        self._writable()
        with self._lock:
            targets = [
                i
                for i in dict.fromkeys(ids)
                if i in self._state and self._state[i].status is not MemoryStatus.RETRACTED
            ]
            if not targets:
                return LogChange()
            txn = self._begin()
            records = [
                self._append(txn, RecordOp.RETRACT, i, Held(MemoryStatus.RETRACTED, self._state[i].tier), reason)
                for i in targets
            ]
            for item_id in self._derived(set(targets)):
                held = self._state[item_id]
                if held.status is MemoryStatus.LIVE:
                    why = f"built on retracted memory ({reason})"
                    records.append(self._append(txn, RecordOp.STALE, item_id, Held(MemoryStatus.STALE, held.tier), why))
            return LogChange(txn=txn, records=tuple(records))

    def _rollback(self, to_lsn: int, reason: str) -> LogChange:
        self._writable()
        with self._lock:
            end = settled(self._records, to_lsn)
            past = fold(self._records, end)
            forgotten = {r.id for r in self._records[end:] if r.op is RecordOp.TOMBSTONE}
            ops, unrecoverable = compensation(past, dict(self._state), forgotten)
            note = None
            if unrecoverable:
                note = (
                    f"{len(unrecoverable)} memories held at LSN {to_lsn} were forgotten since and cannot come "
                    "back: the log keeps only their tombstones"
                )
            if not ops:
                return LogChange(unrecoverable=tuple(unrecoverable), note=note)
            txn = self._begin()
            why = f"rollback to LSN {to_lsn}: {reason}"
            records = tuple(self._append(txn, op, item_id, held, why) for op, item_id, held in ops)
            return LogChange(txn=txn, records=records, unrecoverable=tuple(unrecoverable), note=note)

    def _move(self, ids: tuple[str, ...], tier: Tier, reason: str) -> LogChange:
        self._writable()
        with self._lock:
            targets = [i for i in dict.fromkeys(ids) if i in self._state and self._state[i].tier is not tier]
            if not targets:
                return LogChange()
            txn = self._begin()
            records = tuple(
                self._append(txn, RecordOp.MOVE, i, Held(self._state[i].status, tier), reason) for i in targets
            )
            return LogChange(txn=txn, records=records)

    # identity ------------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        """``reference``, all three fetch modes, the declared consolidation, a log and tiers (seed 002)."""
        label = "Reference (in-memory)" if self._view_at is None else f"Reference (as of LSN {self._view_at})"
        return EngineDescriptor(
            id="reference",
            label=label,
            description="In-memory calibration engine of the contract; state lives in the process.",
            fetch_modes=FetchMode.all(),
            consolidation=self._consolidation,
            log=True,
            tiers=True,
        )

    def health(self) -> EngineHealth:
        """Always ok."""
        return EngineHealth.ok()

    # writes --------------------------------------------------------------------------------------------
    def _store(self, item: AnyItem) -> StoreReceipt:
        """Store, replay, or (for a held memory that is stale or retracted) restore: seed 002 "Memories"."""
        self._writable()
        item_id = item.id
        with self._lock:
            held = self._state.get(item_id)
            if held is not None and held.status is MemoryStatus.LIVE:
                return StoreReceipt(id=item_id, replayed=True)
            txn = self._write_txn()
            if held is not None:
                self._append(txn, RecordOp.RESTORE, item_id, Held(MemoryStatus.LIVE, held.tier), "stored again")
            else:
                self._items[item_id] = item
                self._append(txn, RecordOp.PUT, item_id, Held(MemoryStatus.LIVE, _tier_of(item)), None)
            return StoreReceipt(id=item_id, replayed=False)

    def _store_many(self, items: list[AnyItem] | tuple[AnyItem, ...]) -> Receipts:  # type: ignore[override]
        """Store a batch as one transaction: its records become visible together (seed 002, "The log")."""
        with self._lock:
            self._batch = [None]
            try:
                return [self._store(item) for item in items]
            finally:
                self._batch = None

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        self._writable()
        with self._lock:
            if target.ids is not None:
                doomed = [i for i in dict.fromkeys(target.ids) if i in self._items]
            else:
                flt = target.filter or MetaFilter()
                doomed = [i for i, item in self._items.items() if flt.matches(item.item_kind, item.item_meta)]
            self._tombstone(doomed, "forget")
            return ForgetReport(forgotten=len(doomed))

    def _erase(self, request: EraseRequest) -> EraseReport:
        reach = Reach(at=request.reach.at, inherit=False, descendants=request.reach.descendants)
        kinds = set(request.admitted_kinds())
        self._writable()
        with self._lock:
            doomed = [
                (i, item)
                for i, item in self._items.items()
                if item.item_kind in kinds and reach.admits(item.item_meta.namespace)
            ]
            scopes = sorted({(str(item.item_meta.namespace), item.item_kind.value) for _, item in doomed})
            self._tombstone([item_id for item_id, _ in doomed], "erase")
        return EraseReport(erased_scopes=len(scopes), receipts=tuple(f"{ns}#{kind}" for ns, kind in scopes))

    # reads ---------------------------------------------------------------------------------------------
    def _matching(
        self, flt: MetaFilter, tiers: Iterable[Tier] | None = None, every_status: bool = False
    ) -> Iterator[tuple[str, AnyItem]]:
        """Held items ``flt`` admits: live ones (any status with ``every_status``) in ``tiers`` (None: any tier)."""
        wanted = None if tiers is None else set(tiers)
        with self._lock:
            rows = [(i, item, self._state[i]) for i, item in self._items.items()]
        for item_id, item, held in rows:
            if not every_status and held.status is not MemoryStatus.LIVE:
                continue
            if wanted is not None and held.tier not in wanted:
                continue
            if flt.matches(item.item_kind, item.item_meta):
                yield item_id, item

    def _hit(self, item: AnyItem, score: float, item_id: str) -> Hit:
        """The hit for a held item, with its status and tier."""
        held = self._state.get(item_id)
        hit = Hit.of(item, score, item_id)
        if held is None:
            return hit
        return hit.model_copy(update={"status": held.status, "tier": held.tier})

    def _vector(self, item_id: str, item: AnyItem) -> list[float]:
        vec = self._vectors.get(item_id)
        if vec is None:
            vec = embed(item.render_text())
            self._vectors[item_id] = vec
        return vec

    def ranked(
        self,
        query: str,
        mode: FetchMode,
        flt: MetaFilter,
        hint: TimeHint | None = None,
        max_scopes: int | None = None,
        tiers: tuple[Tier, ...] = (),
        exclude_agent_id: str | None = None,
    ) -> list[Hit]:
        """Every live hit for ``query`` in ``mode`` under ``flt``, best first (ties in insertion order).

        With ``max_scopes``, only the items of the scopes ``choose_scopes`` keeps are ranked; ``tiers`` names the
        tiers read (empty: every tier but archive); items of ``exclude_agent_id`` are left out first.
        """
        q_words = set(tokenize(query))
        q_vec = embed(query)
        rows = list(self._matching(flt, tiers or STANDARD_TIERS))
        if exclude_agent_id is not None:
            rows = [(item_id, item) for item_id, item in rows if item.meta.agent_id != exclude_agent_id]
        if max_scopes is not None:
            kept = set(_scoped(rows, query, flt, max_scopes))
            rows = [(item_id, item) for item_id, item in rows if item_id in kept]
        scored: list[tuple[float, int, Hit]] = []
        for order, (item_id, item) in enumerate(rows):
            text = item.render_text()
            lexical = keyword_score(q_words, set(tokenize(text))) if mode is not FetchMode.VECTOR else 0.0
            semantic = cosine(q_vec, self._vector(item_id, item)) if mode is not FetchMode.KEYWORD else 0.0
            score = mode_score(mode, lexical, semantic)
            if score is not None:
                scored.append((score, order, self._hit(item, score, item_id)))
        scored.sort(key=lambda row: (-row[0], row[1]))
        hits = [hit for _, _, hit in scored]
        return hint.rank(hits) if hint is not None else hits

    def _fetch(self, request: FetchRequest) -> FetchPage:
        hits = self.ranked(
            request.query,
            request.mode,
            request.filter,
            request.refers_to,
            request.max_scopes,
            request.tiers,
            request.exclude_agent_id,
        )
        chunk, next_cursor = _page(hits, request.cursor, request.limit)
        return FetchPage(hits=tuple(chunk), next_cursor=next_cursor)

    def _recall(self, request: RecallRequest) -> RecallAnswer:
        hits = self.ranked(request.question, FetchMode.HYBRID, request.filter, request.refers_to, tiers=request.tiers)[
            : request.limit
        ]
        citations = tuple(Citation(id=h.id, kind=h.kind, snippet=h.text, meta=h.meta, score=h.score) for h in hits)
        if not hits:
            answer = "Nothing stored answers this question."
        else:
            answer = f"From {len(hits)} stored items: " + " | ".join(h.text for h in hits)
        return RecallAnswer(answer=answer, citations=citations, model="reference")

    def _list(self, request: ListRequest) -> ListPage:
        rows = [self._hit(item, 0.0, item_id) for item_id, item in self._matching(request.filter)]
        chunk, next_cursor = _page(rows, request.cursor, request.limit)
        return ListPage(items=tuple(chunk), next_cursor=next_cursor)

    def _get(self, request: GetRequest) -> list[Hit]:
        """Every held memory named, whatever its status (shown on the hit), in the order asked."""
        flt = MetaFilter(reach=request.reach)
        with self._lock:
            found = {
                item_id: self._hit(item, 0.0, item_id)
                for item_id, item in self._matching(flt, every_status=True)
                if item_id in set(request.ids)
            }
        return [found[i] for i in dict.fromkeys(request.ids) if i in found]

    def _export(self, request: ListRequest) -> ExportPage:
        rows = [Exported(id=item_id, item=item) for item_id, item in self._matching(request.filter, every_status=True)]
        chunk, next_cursor = _page(rows, request.cursor, request.limit)
        return ExportPage(items=tuple(chunk), next_cursor=next_cursor)

    # consolidation -------------------------------------------------------------------------------------
    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        mode = self._consolidation
        if mode is Consolidation.NONE:
            raise Unsupported("engine `reference` does not consolidate")
        if mode is Consolidation.SCHEDULED:
            return ConsolidateReceipt.scheduled()
        self._writable()
        kinds = request.admitted_kinds()
        beliefs: list[Learning] = []
        with self._lock:
            for item_id, item in list(self._items.items()):
                if self._state[item_id].status is not MemoryStatus.LIVE:
                    continue  # a retracted or stale source builds nothing
                if item.item_kind not in kinds or isinstance(item, Learning):
                    continue
                if not request.reach.admits(item.item_meta.namespace):
                    continue
                source = item.text if isinstance(item, Document) else _first_user(item)
                statement = first_sentence(source or "")
                if not statement or is_control_text(statement) or has_control_token(source or ""):
                    continue  # control text is never a belief (issue 11 rule 8)
                meta = item.item_meta
                belief = Learning(
                    text=statement,
                    kind=LearningKind.FACT,
                    confidence=_BELIEF_CONFIDENCE,
                    evidence=item_id,
                    meta=meta.model_copy(update={"tags": (*meta.tags, CONSOLIDATED_TAG)}),
                )
                beliefs.append(belief)
            txn: int | None = None
            for belief in beliefs:
                held = self._state.get(belief.id)
                if held is not None and held.status is MemoryStatus.LIVE:
                    continue
                txn = txn or self._begin()
                if held is not None:  # a rebuild deriving the same belief restores it (seed 002)
                    self._append(txn, RecordOp.RESTORE, belief.id, Held(MemoryStatus.LIVE, held.tier), "rebuilt")
                else:
                    self._items[belief.id] = belief
                    self._append(txn, RecordOp.PUT, belief.id, Held(MemoryStatus.LIVE, Tier.LONG), "built")
        nodes: set[Namespace] = {b.meta.namespace for b in beliefs}
        return ConsolidateReceipt(
            status=ConsolidateStatus.COMPLETED, scopes=len(nodes) * len(kinds), built=len(beliefs)
        )


def _sources(item: AnyItem) -> tuple[str, ...]:
    """What ``item`` was built on: a learning's ``evidence`` (an item id when it names a stored item)."""
    if isinstance(item, Learning) and item.evidence:
        return (item.evidence,)
    return ()


def _tier_of(item: AnyItem) -> Tier:
    """A new memory's tier: built beliefs (tagged ``consolidated`` or ``belief``) are long, the rest short."""
    tags = item.item_meta.tags
    return Tier.LONG if isinstance(item, Learning) and (CONSOLIDATED_TAG in tags or BELIEF_TAG in tags) else Tier.SHORT


def _first_user(item: AnyItem) -> str | None:
    return item.first_user_text() if isinstance(item, Conversation) else None
