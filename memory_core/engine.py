"""``MemoryEngine``: the base every engine implements.

The public methods validate every request (a model, a JSON object or JSON text) before any engine code runs,
then call a private hook. Engines override the hooks, never the public methods. Hooks not overridden carry
the contract's defaults (reference §1.2):

| hook | default |
| --- | --- |
| ``_store_with`` | ``_store`` |
| ``_store_many`` | ``_store`` each item in turn (an item repeated in the batch replays its first copy) |
| ``_store_many_with`` | ``_store_many`` |
| ``_forget_within`` | ``get`` the ids under the reach, then forget what came back |
| ``_list_preview`` | ``_list`` |
| ``_export``, ``_erase`` | ``Unsupported`` |
| ``_explore`` | count facets by listing (pages of 200, up to the scan limit) |
| ``_get`` | page ``list`` until every id is found; answer in request order |
| ``_consolidate`` | ``Unsupported`` |
| ``_beliefs`` | none |
| ``_scopes`` | the namespaces under the reach holding admitted kinds, by exploring; no write or build marks |
| ``_current_lsn``, ``_log``, ``_as_of``, ``_retract``, ``_rollback``, ``_history``, ``_move`` | none: ``Unsupported`` |

The log hooks (memory as a log, seed 002; ``memory_core.memory_log``) are optional: an engine offering them
declares ``log = true`` in its descriptor, and the public methods refuse with ``Unsupported`` otherwise, before
any hook runs. The base defines no log hook: they are looked up by name (``LOG_HOOKS``), so a wrapper that
forwards the attributes it lacks to the engine it wraps (and copies its descriptor) forwards the log too. A
``tiers`` filter on ``fetch``/``recall`` is refused the same way unless the engine declares ``tiers``.

Required hooks: ``descriptor``, ``health``, ``_recall``, ``_fetch``, ``_store``, ``_forget``, ``_list``.
Engines must be safe to call from several threads at once (holistic recall reads concurrently).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self, cast

from memory_core.consolidation import (
    BeliefsRequest,
    BuildScope,
    ConsolidateReceipt,
    ConsolidateRequest,
    WriteOptions,
)
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.explore import ExplorePage, ExploreRequest, Facet, tally
from memory_core.items import Conversation, Document, Learning, parse_item, validate_item
from memory_core.limits import LISTING_PAGE_SIZE, MAX_BUCKETS, MAX_GET_IDS, MAX_SCAN_LIMIT, MAX_STORE_MANY
from memory_core.memory_log import MAX_LOG_PAGE, LogChange, LogPage, LogRecord, Tier
from memory_core.meta import USIZE_MAX, ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.query import (
    EraseReport,
    EraseRequest,
    ExportPage,
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
    id_fault,
)

__all__ = ["LOG_HOOKS", "MAX_LSN", "AnyItem", "Hits", "MemoryEngine", "Receipts", "check_engine", "validate_many"]

LOG_HOOKS: Final = ("_current_lsn", "_log", "_as_of", "_retract", "_rollback", "_history", "_move")
"""The hooks of the log capability (seed 002), looked up by name; an engine offering the log defines them all."""

AnyItem = Document | Conversation | Learning
"""A concrete stored item."""
Hits = list[Hit]
"""A list of hits (an alias because ``MemoryEngine.list`` shadows the builtin inside the class)."""
Receipts = list[StoreReceipt]
"""A list of store receipts, in item order."""
Scopes = list[BuildScope]
"""A list of build scopes."""


MAX_LSN: Final = USIZE_MAX
"""Largest LSN: 2**63 - 1, what SQLite's ``INTEGER`` and PostgreSQL's ``bigint`` hold (a larger one cannot be bound)."""


def check_engine(engine: object, field: str = "engine") -> MemoryEngine:
    """``engine`` when it is a ``MemoryEngine`` (the base every engine derives from).

    The lifecycle objects (``AgentMemory``, ``Brain``, ``BackgroundRunner``) check it up front: anything else
    (None, a URL string) would be accepted and fail only later, as a pack whose sections were all skipped with
    "'NoneType' object has no attribute …".

    Raises:
        InvalidRequest: ``field``: not a ``MemoryEngine`` (a URL string: open it with ``open_engine`` first).
    """
    if not isinstance(engine, MemoryEngine):
        hint = "; open the URL with open_engine first" if isinstance(engine, str) else ""
        raise InvalidRequest(f"expected a MemoryEngine, got {type(engine).__name__}{hint}", field=field)
    return engine


def checked_item(item: Any, field: str = "item") -> AnyItem:
    """Parse and validate one item for storing.

    Raises:
        InvalidRequest: the item is malformed; the error names the field.
    """
    parsed = parse_item(item, field=field)
    validate_item(parsed, field=field)
    return parsed


def validate_many(items: Sequence[Any]) -> list[AnyItem]:
    """Check a ``store_many`` batch: 1..=MAX_STORE_MANY items, each valid (reference §1.2 ``validate_many``).

    Args:
        items: The batch, a sequence (a list or tuple: receipts come back in its order).

    Raises:
        InvalidRequest: not a sequence of items (None, a number, a string, a single item, a set), an empty or
            oversized batch, or the first invalid item (named ``items.<i>…``).
    """
    if not isinstance(items, Sequence) or isinstance(items, str | bytes | bytearray):
        shown = "an item" if isinstance(items, Mapping) else type(items).__name__
        raise InvalidRequest(f"expected a list of items, got {shown}", field="items")
    batch = list(items)
    if not batch:
        raise InvalidRequest("batch is empty", field="items")
    if len(batch) > MAX_STORE_MANY:
        raise InvalidRequest(f"batch of {len(batch)} exceeds {MAX_STORE_MANY}", field="items")
    return [checked_item(item, field=f"items.{i}") for i, item in enumerate(batch)]


def _checked_ids(ids: Any, field: str = "ids") -> tuple[str, ...]:
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise InvalidRequest("expected a list of ids", field=field)
    out = tuple(ids)
    if not out:
        raise InvalidRequest("must not be empty", field=field)
    for i, item_id in enumerate(out):
        if (fault := id_fault(i, item_id)) is not None:
            raise InvalidRequest(fault, field=field)
    return out


class MemoryEngine:
    """Base of every engine: validation in the public methods, behaviour in the hooks.

    Protocol for implementers: ``store`` returns only once the item is listed and ranked, and storing an
    identical item is a replay (same id, ``replayed = True``, one copy). ``list`` scores every hit 0 and pages
    with opaque cursors. Reads honour ``filter.reach``; forgetting by ids is unscoped.
    """

    # identity ------------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        """What this engine is and offers."""
        raise NotImplementedError(f"{type(self).__name__} must implement descriptor()")

    def health(self) -> EngineHealth:
        """Whether this engine can serve now."""
        raise NotImplementedError(f"{type(self).__name__} must implement health()")

    def close(self) -> None:
        """Release what the engine holds (connections, files). Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # public, validating --------------------------------------------------------------------------------
    def recall(self, request: RecallRequest | Mapping[str, Any]) -> RecallAnswer:
        """A synthesised answer with citations that resolve through ``list``.

        Raises:
            InvalidRequest: blank question, zero limit, bad time hint.
        """
        req = RecallRequest.coerce(request, "request")
        if req.tiers:
            self.descriptor().ensure_tiers()
        return self._recall(req)

    def fetch(self, request: FetchRequest | Mapping[str, Any]) -> FetchPage:
        """Ranked raw hits for a query.

        Raises:
            InvalidRequest: blank query, zero limit, zero ``max_scopes``, unknown cursor.
            Unsupported: a mode the descriptor does not declare.
        """
        req = FetchRequest.coerce(request, "request")
        self.descriptor().ensure_mode(req.mode)
        if req.tiers:
            self.descriptor().ensure_tiers()
        return self._fetch(req)

    def store(self, item: AnyItem | Mapping[str, Any]) -> StoreReceipt:
        """Store one item; returns once it is listed and ranked. An identical item is a replay.

        Raises:
            InvalidRequest: a blank or uri body, no turns, a blank turn or learning text, a bad confidence.
        """
        return self._store(checked_item(item))

    def store_with(
        self, item: AnyItem | Mapping[str, Any], options: WriteOptions | Mapping[str, Any] | None = None
    ) -> StoreReceipt:
        """Store with a wait policy: ``visible`` is ``store``; ``accepted`` may return once durably accepted.

        Raises:
            InvalidRequest: as ``store``.
        """
        opts = WriteOptions.visible() if options is None else WriteOptions.coerce(options, "options")
        return self._store_with(checked_item(item), opts)

    def store_many(self, items: Sequence[AnyItem | Mapping[str, Any]]) -> Receipts:
        """Store 1..=100 items; receipts in item order. On error, the earlier items stay stored.

        Raises:
            InvalidRequest: an empty or oversized batch, or any invalid item (nothing is stored then).
        """
        return self._store_many(validate_many(items))

    def store_many_with(
        self, items: Sequence[AnyItem | Mapping[str, Any]], options: WriteOptions | Mapping[str, Any] | None = None
    ) -> Receipts:
        """The batch form of ``store_with``.

        Raises:
            InvalidRequest: as ``store_many``.
        """
        opts = WriteOptions.visible() if options is None else WriteOptions.coerce(options, "options")
        return self._store_many_with(validate_many(items), opts)

    def forget(self, target: ForgetTarget | Mapping[str, Any]) -> ForgetReport:
        """Forget by ids (unscoped) or by a non-empty filter; counts only items actually removed.

        Raises:
            InvalidRequest: no ids, a blank id, or an empty filter.
        """
        return self._forget(ForgetTarget.coerce(target, "target"))

    def forget_within(self, ids: Sequence[str], reach: Reach | Mapping[str, Any]) -> ForgetReport:
        """Forget only the ids inside ``reach``, reading no node outside it.

        Raises:
            InvalidRequest: no ids or a blank id.
        """
        return self._forget_within(_checked_ids(ids), Reach.coerce(reach, "reach"))

    def list(self, request: ListRequest | Mapping[str, Any] | None = None) -> ListPage:
        """Page through items in engine order; every score is 0.

        Raises:
            InvalidRequest: zero limit or an unknown cursor.
        """
        return self._list(ListRequest() if request is None else ListRequest.coerce(request, "request"))

    def list_preview(self, request: ListRequest | Mapping[str, Any] | None = None) -> ListPage:
        """As ``list``, but a hit's text may be only the item's start."""
        return self._list_preview(ListRequest() if request is None else ListRequest.coerce(request, "request"))

    def export(self, request: ListRequest | Mapping[str, Any] | None = None) -> ExportPage:
        """Page like ``list`` but hand back each item whole.

        Raises:
            Unsupported: the engine does not export.
        """
        return self._export(ListRequest() if request is None else ListRequest.coerce(request, "request"))

    def erase(self, request: EraseRequest | Mapping[str, Any]) -> EraseReport:
        """Delete for good; an erased item stored again is a new item, never a replay.

        Raises:
            InvalidRequest: the root with descendants and no kinds, without ``whole_tree``.
            Unsupported: the engine does not erase (fall back to ``forget``).
        """
        return self._erase(EraseRequest.coerce(request, "request"))

    def explore(self, request: ExploreRequest | Mapping[str, Any]) -> ExplorePage:
        """Facet counts over what the filter admits.

        Raises:
            InvalidRequest: a limit outside 1..=500 or a scan limit outside 1..=50,000.
        """
        return self._explore(ExploreRequest.coerce(request, "request"))

    def get(self, request: GetRequest | Mapping[str, Any]) -> Hits:
        """Read items whole, in the order named; unknown and out-of-reach ids are left out.

        Raises:
            InvalidRequest: no ids, more than 200, or a blank id.
        """
        return self._get(GetRequest.coerce(request, "request"))

    def consolidate(self, request: ConsolidateRequest | Mapping[str, Any]) -> ConsolidateReceipt:
        """Ask for a belief build; returns once the job is taken (or, for a quick build, done).

        Raises:
            InvalidRequest: a kind named twice.
            Unsupported: the engine does not consolidate.
        """
        return self._consolidate(ConsolidateRequest.coerce(request, "request"))

    def beliefs(self, request: BeliefsRequest | Mapping[str, Any]) -> Hits:
        """Beliefs kept apart from stored items: learning hits tagged ``belief`` within the reach.

        Raises:
            InvalidRequest: a zero limit or a blank query.
        """
        return self._beliefs(BeliefsRequest.coerce(request, "request"))

    def scopes(self, request: ConsolidateRequest | Mapping[str, Any]) -> Scopes:
        """The nodes a build over ``request`` covers: each namespace the reach admits that holds admitted kinds.

        Engines that track writes and builds fill ``last_write``/``last_build`` so callers can build only
        what is due. Not part of the TinyMemory contract: a memory-core extension for per-scope workers.

        Raises:
            InvalidRequest: a kind named twice.
        """
        return self._scopes(ConsolidateRequest.coerce(request, "request"))

    # public, the log (optional; seed 002) ------------------------------------------------------------
    def current_lsn(self) -> int:
        """The LSN of the last record written (0 for an empty log).

        Raises:
            Unsupported: the engine keeps no log.
        """
        self.descriptor().ensure_log("current_lsn")
        return cast(int, self._log_hook("_current_lsn")())

    def log(self, since: int = 0, limit: int = 100) -> LogPage:
        """The records after LSN ``since``, at most ``limit`` (1..=1000), in LSN order.

        Raises:
            InvalidRequest: ``since`` negative or not an int; ``limit`` outside 1..=1000.
            Unsupported: the engine keeps no log.
        """
        since = _checked_lsn(since, "since")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG_PAGE:
            raise InvalidRequest(f"must be an integer in 1..={MAX_LOG_PAGE}", field="limit")
        self.descriptor().ensure_log("log")
        return cast(LogPage, self._log_hook("_log")(since, limit))

    def as_of(self, lsn: int) -> MemoryEngine:
        """A read-only view of the state at ``lsn``: the same ``fetch``, ``recall``, ``list``, ``get``, ``beliefs``.

        Content forgotten since is not in the view (a forget removes the text for good). Transactions are all or
        nothing: an ``lsn`` inside one reads as the state before it. The view's writes raise ``Unsupported``.

        Raises:
            InvalidRequest: ``lsn`` negative, not an int, or past ``current_lsn()``.
            Unsupported: the engine keeps no log.
        """
        lsn = _checked_lsn(lsn, "lsn")
        self.descriptor().ensure_log("as_of")
        last = cast(int, self._log_hook("_current_lsn")())
        if lsn > last:
            raise InvalidRequest(f"LSN {lsn} is past the last record {last}", field="lsn")
        return cast(MemoryEngine, self._log_hook("_as_of")(lsn))

    def retract(self, ids: Sequence[str], reason: str) -> LogChange:
        """Mark memories ``retracted`` (content kept) and all they derive, transitively, ``stale``; one transaction.

        Unknown, forgotten and already retracted ids are left alone.

        Raises:
            InvalidRequest: no ids, a blank id, or a blank reason.
            Unsupported: the engine keeps no log.
        """
        checked = _checked_ids(ids)
        why = _checked_reason(reason)
        self.descriptor().ensure_log("retract")
        return cast(LogChange, self._log_hook("_retract")(checked, why))

    def rollback(self, to_lsn: int, reason: str) -> LogChange:
        """Bring state back to what it was at ``to_lsn`` with compensating records, in one transaction.

        Nothing is erased: a rollback is itself rolled back the same way. Memories forgotten since cannot
        come back; they are named in ``unrecoverable`` and the change's ``note`` says so.

        Raises:
            InvalidRequest: ``to_lsn`` negative, not an int, or past ``current_lsn()``; a blank reason.
            Unsupported: the engine keeps no log.
        """
        lsn = _checked_lsn(to_lsn, "to_lsn")
        why = _checked_reason(reason)
        self.descriptor().ensure_log("rollback")
        last = cast(int, self._log_hook("_current_lsn")())
        if lsn > last:
            raise InvalidRequest(f"LSN {lsn} is past the last record {last}", field="to_lsn")
        return cast(LogChange, self._log_hook("_rollback")(lsn, why))

    def history(self, item_id: str) -> tuple[LogRecord, ...]:
        """Every record about ``item_id``, in LSN order (empty for an id the log never saw).

        Raises:
            InvalidRequest: a blank id.
            Unsupported: the engine keeps no log.
        """
        if not isinstance(item_id, str) or not item_id.strip():
            raise InvalidRequest("id is blank", field="id")
        self.descriptor().ensure_log("history")
        return cast(tuple[LogRecord, ...], self._log_hook("_history")(item_id))

    def move(self, ids: Sequence[str], tier: Tier | str, reason: str) -> LogChange:
        """Move memories to ``tier`` (status unchanged); one transaction. Ids already there are left alone.

        Raises:
            InvalidRequest: no ids, a blank id, an unknown tier, or a blank reason.
            Unsupported: the engine keeps no log.
        """
        checked = _checked_ids(ids)
        try:
            to = Tier(tier)
        except ValueError:
            raise InvalidRequest(f"unknown tier {tier!r}", field="tier") from None
        why = _checked_reason(reason)
        self.descriptor().ensure_log("move")
        return cast(LogChange, self._log_hook("_move")(checked, to, why))

    def _log_hook(self, name: str) -> Any:
        """The log hook ``name`` (one of ``LOG_HOOKS``), found by name.

        Raises:
            Unsupported: the engine declares ``log`` but has no such hook.
        """
        hook = getattr(self, name, None)
        if not callable(hook):
            raise Unsupported(f"engine `{self.descriptor().id}` keeps no log (it has no {name})")
        return hook

    # hooks: required -----------------------------------------------------------------------------------
    def _recall(self, request: RecallRequest) -> RecallAnswer:
        raise NotImplementedError(f"{type(self).__name__} must implement _recall")

    def _fetch(self, request: FetchRequest) -> FetchPage:
        raise NotImplementedError(f"{type(self).__name__} must implement _fetch")

    def _store(self, item: AnyItem) -> StoreReceipt:
        raise NotImplementedError(f"{type(self).__name__} must implement _store")

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        raise NotImplementedError(f"{type(self).__name__} must implement _forget")

    def _list(self, request: ListRequest) -> ListPage:
        raise NotImplementedError(f"{type(self).__name__} must implement _list")

    # hooks: defaults -----------------------------------------------------------------------------------
    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        return self._store(item)

    def _store_many(self, items: Sequence[AnyItem]) -> Receipts:
        return [self._store(item) for item in items]

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> Receipts:
        return self._store_many(items)

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        found: list[str] = []
        for start in range(0, len(ids), MAX_GET_IDS):
            chunk = tuple(ids[start : start + MAX_GET_IDS])
            found.extend(hit.id for hit in self.get(GetRequest(ids=chunk, reach=reach)))
        if not found:
            return ForgetReport(forgotten=0)
        return self._forget(ForgetTarget(ids=tuple(dict.fromkeys(found))))

    def _list_preview(self, request: ListRequest) -> ListPage:
        return self._list(request)

    def _export(self, request: ListRequest) -> ExportPage:
        raise Unsupported(f"engine `{self.descriptor().id}` does not export")

    def _erase(self, request: EraseRequest) -> EraseReport:
        raise Unsupported(f"engine `{self.descriptor().id}` does not erase")

    def _explore(self, request: ExploreRequest) -> ExplorePage:
        return explore_by_listing(self, request)

    def _get(self, request: GetRequest) -> Hits:
        return get_by_listing(self, request)

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        raise Unsupported(f"engine `{self.descriptor().id}` does not consolidate")

    def _beliefs(self, request: BeliefsRequest) -> Hits:
        return []

    def _scopes(self, request: ConsolidateRequest) -> Scopes:
        return scopes_by_exploring(self, request)


def _checked_lsn(value: object, field: str) -> int:
    """``value`` when it is an LSN: an int in ``0..=MAX_LSN`` (a signed 64-bit ``INTEGER``/``bigint`` column).

    Raises:
        InvalidRequest: ``field``: a bool, a non-int, negative, or past ``MAX_LSN`` (which no engine can bind).
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LSN:
        raise InvalidRequest(f"must be an LSN, an integer in 0..={MAX_LSN}", field=field)
    return value


def _checked_reason(value: object) -> str:
    """``value`` stripped: a non-blank, NUL-free reason (it is stored in the log; ``meta.NUL_FREE``)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest("say why: the reason is blank", field="reason")
    if "\x00" in value:
        raise InvalidRequest("holds a NUL character (U+0000)", field="reason")
    return value.strip()


def explore_by_listing(engine: MemoryEngine, request: ExploreRequest) -> ExplorePage:
    """The default ``explore``: page ``list`` at up to 200 per page until the scan limit, then tally."""
    hits: list[Hit] = []
    cursor: str | None = None
    truncated = False
    while True:
        page = engine.list(ListRequest(filter=request.filter, limit=LISTING_PAGE_SIZE, cursor=cursor))
        for hit in page.items:
            if len(hits) >= request.scan_limit:
                truncated = True
                break
            hits.append(hit)
        if truncated or page.next_cursor is None:
            break
        if len(hits) >= request.scan_limit:
            truncated = True
            break
        cursor = page.next_cursor
    return tally(request.facet, hits, request.limit, truncated)


def get_by_listing(engine: MemoryEngine, request: GetRequest) -> Hits:
    """The default ``get``: page ``list`` under the reach until every id is found; answer in request order."""
    wanted = set(request.ids)
    found: dict[str, Hit] = {}
    cursor: str | None = None
    flt = MetaFilter(reach=request.reach)
    while wanted - found.keys():
        page = engine.list(ListRequest(filter=flt, limit=LISTING_PAGE_SIZE, cursor=cursor))
        for hit in page.items:
            if hit.id in wanted:
                found[hit.id] = hit
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    out: Hits = []
    seen: set[str] = set()
    for item_id in request.ids:
        if item_id in found and item_id not in seen:
            out.append(found[item_id])
            seen.add(item_id)
    return out


def scopes_by_exploring(engine: MemoryEngine, request: ConsolidateRequest) -> Scopes:
    """The default ``scopes``: a namespace facet per admitted kind under the reach (no write or build marks).

    When a facet is cut (more than ``MAX_BUCKETS`` nodes, or more than ``MAX_SCAN_LIMIT`` items scanned), it
    falls back to listing every admitted item, so no scope is ever left out.
    """
    by_node: dict[Namespace, list[ItemKind]] = {}
    for kind in request.admitted_kinds():
        flt = MetaFilter(reach=request.reach, kinds=(kind,))
        page = engine.explore(
            ExploreRequest(facet=Facet.NAMESPACE, filter=flt, limit=MAX_BUCKETS, scan_limit=MAX_SCAN_LIMIT)
        )
        if page.truncated or page.more_buckets:
            return scopes_by_listing(engine, request)
        for bucket in page.buckets:
            by_node.setdefault(Namespace.parse(bucket.value), []).append(kind)
    return [BuildScope(namespace=ns, kinds=tuple(kinds)) for ns, kinds in sorted(by_node.items())]


def scopes_by_listing(engine: MemoryEngine, request: ConsolidateRequest) -> Scopes:
    """Every (namespace, kind) the reach holds, by paging ``list`` over all admitted items (complete, O(items))."""
    kinds = request.admitted_kinds()
    found: dict[Namespace, set[ItemKind]] = {}
    cursor: str | None = None
    flt = MetaFilter(reach=request.reach, kinds=kinds)
    while True:
        page = engine.list(ListRequest(filter=flt, limit=LISTING_PAGE_SIZE, cursor=cursor))
        for hit in page.items:
            found.setdefault(hit.meta.namespace, set()).add(hit.kind)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return [BuildScope(namespace=ns, kinds=tuple(k for k in kinds if k in held)) for ns, held in sorted(found.items())]
