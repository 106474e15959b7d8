"""``CortexEngine``: the ``MemoryEngine`` over CortexDB's wire, Direct or TinyHumans (contract reference §5).

Flows (reference §5.5):

* **store** (``store``, ``store_many``, ``store_with``): items grouped by scope; replays detected by one ``tm:i:``
  label lookup per scope (skipped on the hot path: a Direct single-event ``accepted`` store, where the body's
  idempotency key makes a repeat a replay); only missing events are written (bulk on Direct, one request per
  event on TinyHumans), Direct with ``?wait=indexed`` unless ``accepted``; then, unless ``accepted``, a wait for
  the last event of each scope to list (fatal after ``Timing.visible_s``) and for recall to rank it (best effort).
* **list / export / explore**: the admitted scopes' listings (narrowed by one lookup label), decoded, filtered
  client-side by the whole ``MetaFilter``, oldest first per scope; cursors are ``l`` + hex JSON.
* **fetch / recall**: one granular pack per admitted scope, decoded and filtered, merged rank by rank (the most
  specific node first), scored ``1 / (1 + rank)``; recall answers from the pack with the most admitted events and
  rebuilds a pack that 404s (packs drop after a forget), at most 3 rounds. Fetch cursors are ``f`` + hex JSON.
* **get**: label lookups; **forget**: ids (unscoped, every scope) or a filter, removed by ``memory_ids`` in
  batches of 100; **erase**: ``confirm_all`` per kind scope, deepest first.
* **consolidate**: Direct posts ``{scope}`` to ``v1/beliefs/build`` once per admitted scope (never retried);
  TinyHumans is ``scheduled`` and sends nothing. **beliefs**: Direct reads them back as learnings tagged ``belief``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import httpx

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
from memory_core.control import is_control_text
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.engine import AnyItem, Hits, MemoryEngine, Receipts
from memory_core.engines.cortexdb.auth import BearerSource, Credential, parse_endpoint
from memory_core.engines.cortexdb.client import CortexClient, Timing
from memory_core.engines.cortexdb.envelope import (
    Decoded,
    EventBody,
    admits,
    decode_events,
    encode_item,
    event_index,
    idempotency_key,
    read_envelope,
)
from memory_core.engines.cortexdb.layout import (
    MAX_QUERY_LABELS,
    check_root,
    lookup_label,
    narrowing_labels,
    parse_scope,
    scope_for,
    scope_prefix,
)
from memory_core.engines.cortexdb.wire import DIRECT, HOSTED, MANAGED_DIRECT, Wire
from memory_core.engines.reference import choose_scopes
from memory_core.errors import (
    ConfigError,
    EngineError,
    EngineUnavailable,
    InvalidRequest,
    MemoryCoreError,
    NotFound,
    Unsupported,
)
from memory_core.items import Learning, LearningKind
from memory_core.limits import BELIEF_TAG
from memory_core.meta import ItemKind, MemoryMeta, MetaFilter
from memory_core.namespace import ROOT, Namespace, Reach
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
)

__all__ = ["SCHEMES", "CortexEngine"]

SCHEMES: Final = {
    "cortexdb+https": (DIRECT, "https"),
    "cortexdb+http": (DIRECT, "http"),
    "tinyhumans+https": (HOSTED, "https"),
    "tinyhumans+http": (HOSTED, "http"),
}
"""URL schemes → (wire, endpoint scheme); ``+http`` is for loopback servers (a credentialed http:// elsewhere is
refused)."""
_LIST_LIMIT: Final = 200
_SCOPES_LIMIT: Final = 1000
_MAX_PACK_EVENTS: Final = 1000
_FORGET_BATCH: Final = 100
_BULK_BATCH: Final = 100
_PACK_ROUNDS: Final = 3
_QUERY_CHARS: Final = 256
_NOTHING: Final = "Nothing stored answers this question."
_STANCES: Final = frozenset({"supported", "contested"})
_PACKS_AT_ONCE: Final = 4
"""Recall packs built concurrently (reference §5.5, Fetch and Recall)."""
_SNAPSHOTS: Final = 16
"""Listings kept for their next pages (a listing's later pages read the rows its first page read)."""


def _chunks(values: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _position(cursor: str | None, tag: str) -> tuple[int, str | None]:
    """The offset and snapshot a cursor names: ``tag`` + hex of ``{"o": offset, "s": snapshot?}``.

    Raises:
        InvalidRequest: anything this engine did not mint (named ``cursor``).
    """
    if cursor is None:
        return 0, None
    try:
        if not cursor.startswith(tag):
            raise ValueError
        data = json.loads(bytes.fromhex(cursor[1:]))
        offset, snapshot = data["o"], data.get("s")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError
        if snapshot is not None and not isinstance(snapshot, str):
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InvalidRequest(f"unknown cursor {cursor[:40]!r}", field="cursor") from None
    return offset, snapshot


def _cursor(tag: str, offset: int, snapshot: str | None = None) -> str:
    data: dict[str, Any] = {"o": offset} if snapshot is None else {"o": offset, "s": snapshot}
    return tag + json.dumps(data, separators=(",", ":")).encode().hex()


class CortexEngine(MemoryEngine):
    """A ``MemoryEngine`` over CortexDB Direct or the TinyHumans hosted backend.

    Args:
        wire: ``DIRECT`` or ``HOSTED`` (``memory_core.engines.cortexdb.wire``).
        credential: The bearer: a string, or a callable asked on every attempt.
        endpoint: The server (default: the wire's managed endpoint).
        headers: Extra static headers.
        consolidation: Direct only: override the declared mode (default ``automatic`` at the managed endpoint,
            ``on_demand`` elsewhere). TinyHumans is always ``scheduled``.
        scope_root: The v3 layout's root (``org:42``); None keeps the legacy ``app:tinymemory`` layout.
        transport: An httpx transport instead of the network (a double's ``transport``).
        timing: Timeouts, retry waits and polling.
        clock / sleep: The monotonic clock and sleep used for hold-back, retries and polling.

    Raises:
        ConfigError: a missing or blank credential, an unusable endpoint, a credentialed ``http://`` endpoint
            that is not loopback, a consolidation override on TinyHumans, or a malformed ``scope_root``.
    """

    def __init__(
        self,
        wire: Wire,
        credential: str | BearerSource | None,
        *,
        endpoint: str | None = None,
        headers: Mapping[str, str] | None = None,
        consolidation: Consolidation | str | None = None,
        scope_root: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timing: Timing | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.wire = wire
        try:
            self._root = None if scope_root is None else check_root(scope_root)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        where = parse_endpoint(endpoint or wire.default_endpoint)
        if wire.hosted:
            if consolidation is not None and Consolidation(consolidation) is not Consolidation.SCHEDULED:
                raise ConfigError("tinyhumans consolidation is scheduled by the backend; it takes no override")
            self._consolidation = Consolidation.SCHEDULED
        elif consolidation is not None:
            try:
                self._consolidation = Consolidation(consolidation)
            except ValueError:
                known = ", ".join(c.value for c in Consolidation)
                raise ConfigError(f"unknown consolidation {consolidation!r} (known: {known})") from None
        else:
            managed = where.base_url == MANAGED_DIRECT
            self._consolidation = Consolidation.AUTOMATIC if managed else Consolidation.ON_DEMAND
        self._client = CortexClient(
            where, wire, Credential(credential), headers=headers, transport=transport, timing=timing, clock=clock,
            sleep=sleep,
        )  # fmt: skip
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._snapshots: OrderedDict[str, list[Decoded]] = OrderedDict()
        self._writes = 0
        self._written: dict[Namespace, int] = {}

    @classmethod
    def from_url(cls, url: str) -> CortexEngine:
        """Open ``cortexdb+https://host[:port][/base][?consolidation=…&scope_root=…]`` or ``tinyhumans+https://host``.

        The credential comes from the settings: ``MEMORY_CORE_CORTEXDB_KEY`` (Direct) or
        ``MEMORY_CORE_TINYHUMANS_TOKEN`` (TinyHumans). ``+http`` schemes serve loopback servers such as
        ``memory-core cortex-double``.

        Raises:
            ConfigError: an unknown scheme or query parameter, a missing credential, an unusable endpoint.
        """
        from memory_core.settings import get_settings

        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES:
            raise ConfigError(f"unknown CortexDB scheme {scheme!r} (known: {', '.join(sorted(SCHEMES))})")
        wire, inner = SCHEMES[scheme]
        query = parse_qs(parts.query)
        unknown = set(query) - {"consolidation", "scope_root"}
        if unknown:
            raise ConfigError(f"{scheme}:// takes only ?consolidation= and ?scope_root=, not {sorted(unknown)}")
        consolidation = query["consolidation"][-1] if "consolidation" in query else None
        root = query["scope_root"][-1] if "scope_root" in query else None
        settings = get_settings()
        secret = settings.cortexdb_key if wire is DIRECT else settings.tinyhumans_token
        name = "MEMORY_CORE_CORTEXDB_KEY" if wire is DIRECT else "MEMORY_CORE_TINYHUMANS_TOKEN"
        if secret is None or not secret.get_secret_value().strip():
            raise ConfigError(f"{scheme}:// needs a credential: set {name}")
        endpoint = f"{inner}://{parts.netloc}{parts.path}" if parts.netloc else None
        return cls(wire, secret.get_secret_value(), endpoint=endpoint, consolidation=consolidation, scope_root=root)

    def __repr__(self) -> str:
        return f"CortexEngine({self.wire.id}, {self._client.endpoint.base_url!r})"

    def close(self) -> None:
        """Close the HTTP client (idempotent)."""
        self._client.close()

    @property
    def timing(self) -> Timing:
        """The timeouts and waits in use."""
        return self._client.timing

    # identity ----------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        """The wire's descriptor: hybrid fetch only; Direct ``automatic``/``on_demand``, TinyHumans ``scheduled``."""
        return EngineDescriptor(
            id=self.wire.id,
            label=self.wire.label,
            description="Long-term memory on CortexDB over HTTP; items are events, namespaces are scopes.",
            hosted=self.wire.hosted,
            needs_endpoint=False,
            needs_key=True,
            default_endpoint=self.wire.default_endpoint.rstrip("/"),
            fetch_modes=(FetchMode.HYBRID,),
            consolidation=self._consolidation,
        )

    def health(self) -> EngineHealth:
        """``ok`` when the health route answers, else ``down`` with the mapped error."""
        try:
            self._client.read("GET", self.wire.health, params=dict(self.wire.health_params) or None)
        except MemoryCoreError as exc:
            return EngineHealth.down(str(exc))
        return EngineHealth.ok()

    # scopes and listings -----------------------------------------------------------------------------
    def _all_scopes(self) -> list[tuple[str, Namespace, ItemKind]]:
        params = {"prefix": scope_prefix(self._root), "limit": str(_SCOPES_LIMIT)}
        try:
            data = self._client.read("GET", self.wire.scopes, params=params)
        except NotFound:
            return []
        raw = (data.get("items") if "items" in data else data.get("scopes")) if isinstance(data, dict) else None
        out: list[tuple[str, Namespace, ItemKind]] = []
        for entry in raw or []:
            path = entry.get("path") if isinstance(entry, dict) else entry
            parsed = parse_scope(path, self._root) if isinstance(path, str) else None
            if parsed is not None and path is not None:
                out.append((path, parsed[0], parsed[1]))
        return sorted(set(out), key=lambda row: row[0])

    def _held(self, reach: Reach, kinds: Sequence[ItemKind]) -> list[tuple[str, Namespace, ItemKind]]:
        return [row for row in self._all_scopes() if (not kinds or row[2] in kinds) and reach.admits(row[1])]

    def _events(self, scope: str, labels: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Every event of ``scope`` carrying any of ``labels`` (all when none), as listed (newest first)."""
        groups: list[Sequence[str]] = list(_chunks(list(labels), MAX_QUERY_LABELS)) if labels else [()]
        out: list[dict[str, Any]] = []
        for group in groups:
            cursor: str | None = None
            while True:
                params = {"scope": scope, "limit": str(_LIST_LIMIT)}
                if group:
                    params["labels"] = ",".join(group)
                if cursor is not None:
                    params["cursor"] = cursor
                data = self._client.read("GET", self.wire.events, params=params)
                items = data.get("items") if isinstance(data, dict) else None
                out.extend(e for e in items or [] if isinstance(e, dict))
                if not data.get("has_more"):
                    break
                following = data.get("next_cursor")
                if not isinstance(following, str) or not following or following == cursor:
                    raise EngineError(f"{self.wire.events}: a listing cursor did not advance")
                cursor = following
        return out

    def _decoded(self, scope: str, labels: Sequence[str] = ()) -> list[Decoded]:
        """The whole items of ``scope`` among its events carrying ``labels``, oldest first."""
        events = self._events(scope, labels)
        events.reverse()
        return decode_events(events)

    def _stored(self, flt: MetaFilter) -> list[Decoded]:
        """Every stored item ``flt`` admits: per admitted scope (by path), oldest first."""
        labels = narrowing_labels(flt)
        out: list[Decoded] = []
        for scope, namespace, kind in self._held(flt.effective_reach(), flt.kinds):
            for found in self._decoded(scope, labels):
                item = found.item
                if item.item_kind is kind and item.item_meta.namespace == namespace:
                    if admits(flt, found):
                        out.append(found)
        return out

    def _rows(self, flt: MetaFilter, cursor: str | None) -> tuple[list[Decoded], int, str]:
        """The rows a listing pages through, its start, and its snapshot id.

        A first page reads the server and keeps the rows under a fresh snapshot id its cursors carry, so later
        pages neither re-read every scope nor shift when items are written meanwhile; a snapshot this process
        no longer holds (another process, or evicted) is read afresh.
        """
        start, snapshot = _position(cursor, "l")
        with self._lock:
            rows = self._snapshots.get(snapshot) if snapshot is not None else None
        if rows is None:
            rows = self._stored(flt)
            snapshot = uuid.uuid4().hex[:16]
            with self._lock:
                self._snapshots[snapshot] = rows
                while len(self._snapshots) > _SNAPSHOTS:
                    self._snapshots.popitem(last=False)
        assert snapshot is not None
        return rows, start, snapshot

    def _list(self, request: ListRequest) -> ListPage:
        rows, start, snapshot = self._rows(request.filter, request.cursor)
        chunk = rows[start : start + request.limit]
        end = start + len(chunk)
        hits = tuple(Hit.of(found.item, 0.0, found.id) for found in chunk)
        return ListPage(items=hits, next_cursor=_cursor("l", end, snapshot) if end < len(rows) else None)

    def _export(self, request: ListRequest) -> ExportPage:
        rows, start, snapshot = self._rows(request.filter, request.cursor)
        chunk = rows[start : start + request.limit]
        end = start + len(chunk)
        items = tuple(Exported(id=found.id, item=found.item) for found in chunk if not found.private)
        incomplete = tuple(found.id for found in chunk if found.private)  # local paths stayed on the machine
        return ExportPage(
            items=items, incomplete=incomplete, next_cursor=_cursor("l", end, snapshot) if end < len(rows) else None
        )

    def _lookup(self, scopes: Iterable[str], ids: Sequence[str]) -> dict[str, list[Decoded]]:
        """Per scope, the whole items among ``ids`` found there by ``tm:i:`` label lookups."""
        labels = [lookup_label("i", item_id) for item_id in dict.fromkeys(ids)]
        wanted = set(ids)
        return {scope: [d for d in self._decoded(scope, labels) if d.id in wanted] for scope in scopes}

    def _get(self, request: GetRequest) -> Hits:
        reach = request.reach if request.reach is not None else Reach.subtree(ROOT)
        found: dict[str, Hit] = {}
        for scope, namespace, kind in self._held(reach, ()):
            for d in self._lookup([scope], request.ids)[scope]:
                if d.item.item_kind is kind and d.item.item_meta.namespace == namespace:
                    found.setdefault(d.id, Hit.of(d.item, 0.0, d.id))
        return [found[i] for i in dict.fromkeys(request.ids) if i in found]

    # writes ------------------------------------------------------------------------------------------
    def _store(self, item: AnyItem) -> StoreReceipt:
        return self._write([item], accepted=False)[0]

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        return self._write([item], accepted=options.wait is WaitFor.ACCEPTED)[0]

    def _store_many(self, items: Sequence[AnyItem]) -> Receipts:
        return self._write(items, accepted=False)

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> Receipts:
        return self._write(items, accepted=options.wait is WaitFor.ACCEPTED)

    def _present(self, scope: str, ids: Sequence[str]) -> dict[str, set[int]]:
        """Per item id, the event indexes (turns) already stored in ``scope``."""
        labels = [lookup_label("i", item_id) for item_id in ids]
        wanted = set(ids)
        out: dict[str, set[int]] = {}
        for event in self._events(scope, labels):
            envelope = read_envelope((event.get("context") or {}).get("labels") or [])
            if envelope is None or envelope["id"] not in wanted:
                continue
            out.setdefault(envelope["id"], set()).add(event_index(envelope))
        return out

    def _write(self, items: Sequence[AnyItem], accepted: bool) -> Receipts:
        unique: dict[str, AnyItem] = {}
        for item in items:
            unique.setdefault(item.id, item)
        plans: dict[str, list[EventBody]] = {item_id: encode_item(item) for item_id, item in unique.items()}
        by_scope: dict[str, list[str]] = {}
        for item_id, item in unique.items():
            by_scope.setdefault(scope_for(item.item_meta.namespace, item.item_kind, self._root), []).append(item_id)
        hot = accepted and not self.wire.hosted and len(unique) == 1 and all(len(p) == 1 for p in plans.values())
        present: dict[str, set[int]] = {}
        if not hot:
            for scope, ids in by_scope.items():
                present.update(self._present(scope, ids))
        replayed: dict[str, bool] = {}
        last: dict[str, tuple[str, str, str]] = {}
        for scope, ids in by_scope.items():
            bodies: list[tuple[str, dict[str, Any]]] = []
            for item_id in ids:
                held = present.get(item_id, set())
                missing = [e for e in plans[item_id] if e.index not in held]
                replayed[item_id] = not missing
                for event in missing:
                    body = {"scope": scope, **event.body}
                    bodies.append((item_id, {**body, "idempotency_key": idempotency_key(body)}))
            if not bodies:
                continue
            answers = self._append(bodies, accepted)
            again: dict[str, list[bool]] = {}
            for (item_id, body), answer in zip(bodies, answers, strict=True):
                event_id = answer.get("event_id") if isinstance(answer, dict) else None
                if not isinstance(event_id, str) or not event_id:
                    raise EngineError(f"{self.wire.experience}: an append answered no event_id")
                again.setdefault(item_id, []).append(answer.get("replayed_from_idempotency") is True)
                last[scope] = (item_id, event_id, body["content"]["text"])
            with self._lock:
                self._writes += 1
                for item_id in ids:
                    self._written[unique[item_id].item_meta.namespace] = self._writes
            for item_id, flags in again.items():
                replayed[item_id] = all(flags)
        if not accepted:
            for scope, (item_id, event_id, text) in last.items():
                self._wait_visible(scope, item_id, event_id)
                self._wait_ranked(scope, event_id, text)
        receipts: Receipts = []
        first_seen: set[str] = set()
        for item in items:
            repeat = item.id in first_seen
            first_seen.add(item.id)
            receipts.append(StoreReceipt(id=item.id, replayed=repeat or replayed[item.id]))
        return receipts

    def _append(self, bodies: Sequence[tuple[str, dict[str, Any]]], accepted: bool) -> list[Any]:
        """Write ``bodies`` once each, in order; answer one ``{event_id}`` per body."""
        params = None if accepted else {"wait": "indexed"}
        if self.wire.hosted or self.wire.bulk is None:
            return [
                self._client.write("POST", self.wire.experience, body=body, idempotency_header=True)
                for _, body in bodies
            ]
        if len(bodies) == 1:
            return [self._client.write("POST", self.wire.experience, params=params, body=bodies[0][1])]
        out: list[Any] = []
        for start in range(0, len(bodies), _BULK_BATCH):
            chunk = [body for _, body in bodies[start : start + _BULK_BATCH]]
            data = self._client.write(
                "POST", self.wire.bulk, params=params, body={"items": chunk, "ordering": "strict_temporal"}
            )
            results = data.get("results") if isinstance(data, dict) else None
            if not isinstance(results, list) or len(results) != len(chunk):
                raise EngineError(f"{self.wire.bulk}: the answer does not carry one result per item")
            out.extend(results)
        return out

    def _wait_visible(self, scope: str, item_id: str, event_id: str) -> None:
        """Poll the listing until ``event_id`` lists (reference §5.5 step 4).

        Raises:
            EngineUnavailable: it did not list within ``Timing.visible_s``.
        """
        timing = self._client.timing
        deadline = self._clock() + timing.visible_s
        interval = timing.poll_s
        label = lookup_label("i", item_id)
        while True:
            if any(e.get("id") == event_id for e in self._events(scope, [label])):
                return
            if self._clock() >= deadline:
                raise EngineUnavailable(f"stored event {event_id} did not list within {timing.visible_s:g} s")
            self._sleep(interval)
            if self.wire.hosted:
                interval = min(interval * 2, timing.poll_max_s)

    def _wait_ranked(self, scope: str, event_id: str, text: str) -> None:
        """Poll recall until it ranks ``event_id`` (best effort, ``Timing.ranked_s``; reference §5.5 step 5)."""
        timing = self._client.timing
        deadline = self._clock() + timing.ranked_s
        query = text[:_QUERY_CHARS].strip() or "*"
        while True:
            try:
                pack = self._pack(scope, query, 10)
            except MemoryCoreError:
                return
            if any(e.get("id") == event_id for e in pack[1]):
                return
            if self._clock() >= deadline:
                return
            self._sleep(timing.poll_s)

    # forget and erase --------------------------------------------------------------------------------
    def _forget_events(self, targets: Mapping[str, Mapping[str, Sequence[str]]]) -> int:
        """Remove, per scope, the events of each item; answer how many items lost events."""
        gone: set[str] = set()
        for scope, per_item in targets.items():
            events = list(dict.fromkeys(e for ids in per_item.values() for e in ids))
            for batch in _chunks(events, _FORGET_BATCH):
                body = {
                    "scope": scope,
                    "layers": ["events"],
                    "selector": {"memory_ids": list(batch)},
                    "audit_note": "tinymemory: forget",
                }
                self._client.write("POST", self.wire.forget, body=body, idempotency_header=True)
            gone.update(item_id for item_id, ids in per_item.items() if ids)
        return len(gone)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        targets: dict[str, dict[str, list[str]]] = {}
        if target.ids is not None:
            wanted = set(target.ids)
            labels = [lookup_label("i", item_id) for item_id in dict.fromkeys(target.ids)]
            for scope, _, _ in self._all_scopes():
                for event in self._events(scope, labels):
                    envelope = read_envelope((event.get("context") or {}).get("labels") or [])
                    if envelope is not None and envelope["id"] in wanted and isinstance(event.get("id"), str):
                        ids = targets.setdefault(scope, {}).setdefault(envelope["id"], [])
                        if event["id"] not in ids:
                            ids.append(event["id"])
        else:
            for found in self._stored(target.filter or MetaFilter()):
                targets.setdefault(found.scope, {})[found.id] = found.event_ids
        return ForgetReport(forgotten=self._forget_events(targets))

    def _erase(self, request: EraseRequest) -> EraseReport:
        reach = Reach(at=request.reach.at, inherit=False, descendants=request.reach.descendants)
        kinds = request.admitted_kinds()
        doomed = [row for row in self._held(reach, kinds)]
        doomed.sort(key=lambda row: (-row[1].depth, row[0]))
        every_kind = set(kinds) == set(ItemKind.all())
        if self.wire.whole_tree is not None and request.whole_tree and reach.at.is_root and every_kind:
            self._client.write("DELETE", self.wire.whole_tree)
        else:
            for scope, _, _ in doomed:
                body = {"scope": scope, "confirm_all": True}
                self._client.write("POST", self.wire.erasures, body=body, idempotency_header=True)
        receipts = tuple(f"{namespace}#{kind.value}" for _, namespace, kind in doomed)
        return EraseReport(erased_scopes=len(doomed), receipts=receipts)

    # ranked reads ------------------------------------------------------------------------------------
    def _pack(
        self, scope: str, query: str, events: int, labels: Sequence[str] = (), beliefs: int = 0
    ) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        """One granular recall pack: (pack_id, ranked events, beliefs)."""
        limits = {"events": events}
        if beliefs:
            limits = {"events": 0, "facts": 0, "episodes": 0, "understanding": 0, "beliefs": beliefs}
        body: dict[str, Any] = {"scope": scope, "query": query, "budgets": {"per_layer_limits": limits}}
        if labels:
            body["filters"] = {"metadata": {"labels": list(labels)}}
        body["view"] = "granular"
        data = self._client.read("POST", self.wire.recall, body=body)
        layers = data.get("layers") if isinstance(data, dict) else None
        layers = layers if isinstance(layers, dict) else {}
        pack_id = data.get("pack_id") if isinstance(data, dict) else None
        ranked = [e for e in layers.get("events") or [] if isinstance(e, dict)]
        held = [b for b in layers.get("beliefs") or [] if isinstance(b, dict)]
        return (pack_id if isinstance(pack_id, str) else ""), ranked, held

    def _ranked(
        self, query: str, flt: MetaFilter, events: int, max_scopes: int | None = None
    ) -> list[tuple[str, Namespace, str, list[Decoded]]]:
        """Per admitted scope: (scope, namespace, pack id, the admitted items in rank order); 4 packs at a time.

        With ``max_scopes``, only the namespaces ``choose_scopes`` keeps are read: those the query names, then
        the most recently written (as far as this engine has written them; others rank after, by name).
        """
        labels = narrowing_labels(flt)

        def one(row: tuple[str, Namespace, ItemKind]) -> tuple[str, Namespace, str, list[Decoded]]:
            scope, namespace, kind = row
            pack_id, ranked, _ = self._pack(scope, query, events, labels)
            order: list[str] = []
            for event in ranked:
                envelope = read_envelope((event.get("context") or {}).get("labels") or [])
                if envelope is not None and envelope["id"] not in order:
                    order.append(envelope["id"])
            whole = {d.id: d for d in decode_events(ranked)}
            partial = [item_id for item_id in order if item_id not in whole]
            if partial:
                whole.update({d.id: d for d in self._lookup([scope], partial)[scope]})
            admitted = [
                whole[item_id]
                for item_id in order
                if item_id in whole
                and whole[item_id].item.item_kind is kind
                and whole[item_id].item.item_meta.namespace == namespace
                and admits(flt, whole[item_id])
            ]
            return scope, namespace, pack_id, admitted

        rows = self._held(flt.effective_reach(), flt.kinds)
        if max_scopes is not None:
            with self._lock:
                last = {row[1]: self._written.get(row[1], 0) for row in rows}
            kept = choose_scopes(query, last, flt.effective_reach(), max_scopes)
            rows = [row for row in rows if row[1] in kept]
        if len(rows) <= 1:
            return [one(row) for row in rows]
        with ThreadPoolExecutor(max_workers=min(_PACKS_AT_ONCE, len(rows)), thread_name_prefix="cortex-pack") as pool:
            return list(pool.map(one, rows))

    @staticmethod
    def _merge(packs: Sequence[tuple[str, Namespace, str, list[Decoded]]]) -> list[Hit]:
        """Rank by rank across packs, the most specific node first; score ``1 / (1 + rank)``."""
        ordered = sorted(packs, key=lambda p: (-p[1].depth, p[0]))
        hits: list[Hit] = []
        seen: set[str] = set()
        for rank in range(max((len(p[3]) for p in ordered), default=0)):
            for pack in ordered:
                if rank < len(pack[3]) and pack[3][rank].id not in seen:
                    seen.add(pack[3][rank].id)
                    hits.append(Hit.of(pack[3][rank].item, 1.0 / (1 + rank), pack[3][rank].id))
        return hits

    def _fetch(self, request: FetchRequest) -> FetchPage:
        start, _ = _position(request.cursor, "f")
        end = start + request.limit
        events = min((end + 1) * 3, _MAX_PACK_EVENTS)
        hits = self._merge(self._ranked(request.query, request.filter, events, request.max_scopes))
        if request.exclude_agent_id is not None:  # the wire has no such filter: left out here, before the page
            hits = [h for h in hits if h.meta.agent_id != request.exclude_agent_id]
        if request.refers_to is not None:
            hits = request.refers_to.rank(hits)
        chunk = hits[start:end]
        beliefs: Hits = []
        if request.beliefs and request.cursor is None:
            wanted = BeliefsRequest(reach=request.filter.effective_reach(), query=request.query, limit=request.beliefs)
            beliefs = self._beliefs(wanted)
        following = _cursor("f", end) if end < len(hits) else None
        return FetchPage(hits=tuple(chunk), next_cursor=following, beliefs=tuple(beliefs))

    def _recall(self, request: RecallRequest) -> RecallAnswer:
        events = min(2 * request.limit, _MAX_PACK_EVENTS)
        for _ in range(_PACK_ROUNDS):
            packs = self._ranked(request.question, request.filter, events)
            best = max(packs, key=lambda p: (len(p[3]), p[1].depth), default=None)
            if best is None or not best[3]:
                return RecallAnswer(answer=_NOTHING, citations=(), model=None)
            body: dict[str, Any] = {
                "scope": best[0],
                "question": request.question,
                "use_pack_id": best[2],
                "cite_sources": True,
                "include_context": True,
            }
            if request.instructions is not None or not self.wire.hosted:
                body["answer_instructions"] = request.instructions
            try:
                data = self._client.write("POST", self.wire.answer, body=body, idempotency_header=True)
            except NotFound:
                continue  # the pack was dropped (a forget): rebuild
            answer = data.get("answer") if isinstance(data, dict) else None
            if not isinstance(answer, str):
                raise EngineError(f"{self.wire.answer}: the answer carries no answer text")
            diagnostics = data.get("diagnostics") if isinstance(data.get("diagnostics"), dict) else {}
            model = diagnostics.get("answer_model")
            hits = self._merge(packs)
            if request.refers_to is not None:
                hits = request.refers_to.rank(hits)
            citations = tuple(
                Citation(id=h.id, kind=h.kind, snippet=h.text, meta=h.meta, score=h.score)
                for h in hits[: request.limit]
            )
            return RecallAnswer(answer=answer, citations=citations, model=model if isinstance(model, str) else None)
        raise EngineUnavailable(f"{self.wire.answer}: the recall pack vanished {_PACK_ROUNDS} times in a row")

    # consolidation -----------------------------------------------------------------------------------
    def _scopes(self, request: ConsolidateRequest) -> list[BuildScope]:
        by_node: dict[Namespace, list[ItemKind]] = {}
        for _, namespace, kind in self._held(request.reach, request.admitted_kinds()):
            by_node.setdefault(namespace, []).append(kind)
        kinds = request.admitted_kinds()
        return [
            BuildScope(namespace=ns, kinds=tuple(k for k in kinds if k in held)) for ns, held in sorted(by_node.items())
        ]

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        if self._consolidation is Consolidation.NONE:
            raise Unsupported(f"engine `{self.wire.id}` is configured not to consolidate")
        if self._consolidation is Consolidation.SCHEDULED or self.wire.build is None:
            return ConsolidateReceipt.scheduled()
        scopes = self._held(request.reach, request.admitted_kinds())
        built = 0
        jobs: list[str] = []
        for scope, _, _ in scopes:
            data = self._client.write("POST", self.wire.build, body={"scope": scope})
            data = data if isinstance(data, dict) else {}
            handles = [str(data[k]) for k in ("job_id", "build_id", "id") if data.get(k) is not None]
            if handles:
                jobs.extend(handles)
            elif isinstance(data.get("built"), int):
                built += int(data["built"])
            else:
                raise EngineError(f"{self.wire.build}: the answer carries neither built nor a job handle")
        if jobs:
            return ConsolidateReceipt(status=ConsolidateStatus.STARTED, jobs=tuple(jobs), scopes=len(scopes))
        return ConsolidateReceipt(status=ConsolidateStatus.COMPLETED, scopes=len(scopes), built=built)

    def _beliefs(self, request: BeliefsRequest) -> Hits:
        if self.wire.beliefs is None:
            return []
        hits: dict[str, Hit] = {}
        for scope, namespace, _ in self._held(request.reach, ()):
            if request.query is not None:
                held = self._pack(scope, request.query, 0, beliefs=request.limit)[2]
            else:
                params = {"scope": scope, "limit": str(request.limit)}
                data = self._client.read("GET", self.wire.beliefs, params=params)
                raw = data.get("items") if isinstance(data, dict) else None
                held = [b for b in raw or [] if isinstance(b, dict)]
            for rank, belief in enumerate(held):
                hit = _belief_hit(belief, namespace)
                if hit is not None:
                    scored = hit.model_copy(update={"score": 1.0 / (1 + rank)})
                    hits.setdefault(hit.id, scored)
        return sorted(hits.values(), key=lambda h: -h.score)[: request.limit]


def _belief_hit(belief: Mapping[str, Any], namespace: Namespace) -> Hit | None:
    """A supported or contested belief as a learning hit tagged ``belief`` (reference §5.3, reading beliefs).

    ``None`` (not served) when its text, or any part of its claim, is control text (``memory_core.control``):
    the server builds beliefs without that rule, and control text never becomes a belief (docs/limits.md).
    """
    claim = belief.get("claim")
    if belief.get("stance") not in _STANCES or not isinstance(claim, dict):
        return None
    words = [str(claim.get(k, "")).strip() for k in ("subject", "predicate", "object")]
    words[1] = words[1].replace("_", " ")
    text = " ".join(w for w in words if w)
    if not text or any(is_control_text(part) for part in (text, *words)):
        return None
    raw = belief.get("confidence", 0.5)
    confidence = min(1.0, max(0.0, float(raw))) if isinstance(raw, int | float) else 0.5
    meta = MemoryMeta(namespace=namespace, tags=(BELIEF_TAG,))
    learning = Learning(text=text, kind=LearningKind.FACT, confidence=confidence, meta=meta)
    return Hit.of(learning)
