"""``CortexEngine``: the ``MemoryEngine`` over CortexDB's wire, Direct or TinyHumans (contract reference §5).

Flows (reference §5.5):

* **store** (``store``, ``store_many``, ``store_with``): items grouped by scope; replays detected by one ``tm:i:``
  label lookup per scope (skipped on the hot path: a Direct single-event ``accepted`` store, where the body's
  idempotency key makes a repeat a replay); only missing events are written (bulk on Direct, one request per
  event on TinyHumans), Direct with ``?wait=indexed`` unless ``accepted``; then, unless ``accepted``, a wait for
  the last event of each scope to list (fatal after ``Timing.visible_s``) and for recall to rank it (best effort).
* **list / explore**: paged from the wire, newest first per admitted scope, reading only about what the page
  needs (``_list``); cursors are ``w`` + hex JSON. **export**: the admitted scopes read whole (narrowed by one
  lookup label), decoded, filtered client-side by the whole ``MetaFilter``, oldest first; cursors ``l`` + hex JSON.
* **scopes**: each node's last write and last build as the server reports them (``_scopes``).
* **layout settings** (``config``): ``scope_root``/``tenant_root`` choose where writes go, a retired root is
  read, forgotten and erased too; with ``scope_owner`` the root is registered before the first write;
  ``observed_actor`` attributes writes (``attribution``).
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
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
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
from memory_core.engines.cortexdb.attribution import Attribution, actor_of, attribute, strip
from memory_core.engines.cortexdb.auth import BearerSource, Credential, parse_endpoint
from memory_core.engines.cortexdb.client import CortexClient, Timing
from memory_core.engines.cortexdb.config import check_headers, check_layout, parse_flag
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
    lookup_label,
    narrowing_labels,
    parse_scope,
    scope_for,
    scope_prefix,
    strip_tenant,
)
from memory_core.engines.cortexdb.wire import DIRECT, HOSTED, MANAGED_DIRECT, Wire
from memory_core.engines.reference import choose_scopes
from memory_core.errors import (
    ConfigError,
    Conflict,
    EngineError,
    EngineUnavailable,
    InvalidRequest,
    MemoryCoreError,
    NotFound,
    Unauthorized,
    Unsupported,
)
from memory_core.explore import ExplorePage, ExploreRequest, tally
from memory_core.items import Learning, LearningKind
from memory_core.limits import BELIEF_TAG, LISTING_PAGE_SIZE
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
_URL_SETTINGS: Final = (
    "consolidation",
    "scope_root",
    "tenant_root",
    "retired_scope_root",
    "scope_owner",
    "observed_actor",
)
"""The ``EngineSettings`` an engine URL may carry as query parameters (reference §5.1)."""


def url_options(url: str) -> dict[str, Any]:
    """The ``CortexEngine`` keyword arguments an engine URL and the settings name.

    Raises:
        ConfigError: an unknown scheme or query setting, a setting given twice (named), a missing credential.
    """
    from memory_core.settings import get_settings

    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown CortexDB scheme {scheme!r} (known: {', '.join(sorted(SCHEMES))})")
    wire, inner = SCHEMES[scheme]
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = set(query) - set(_URL_SETTINGS)
    if unknown:
        raise ConfigError(f"{scheme}:// takes only {', '.join(_URL_SETTINGS)} as settings, not {sorted(unknown)}")
    twice = sorted(name for name, values in query.items() if len(values) > 1)
    if twice:
        raise ConfigError(f"{twice[0]} is configured {len(query[twice[0]])} times in the engine URL: give it once")
    given = {name: values[0] for name, values in query.items()}
    settings = get_settings()
    secret = settings.cortexdb_key if wire is DIRECT else settings.tinyhumans_token
    name = "MEMORY_CORE_CORTEXDB_KEY" if wire is DIRECT else "MEMORY_CORE_TINYHUMANS_TOKEN"
    if secret is None or not secret.get_secret_value().strip():
        raise ConfigError(f"{scheme}:// needs a credential: set {name}")
    options: dict[str, Any] = {
        "wire": wire,
        "credential": secret.get_secret_value(),
        "endpoint": f"{inner}://{parts.netloc}{parts.path}" if parts.netloc else None,
        "headers": dict(settings.cortexdb_headers),
    }
    for key in ("consolidation", "scope_root", "retired_scope_root", "scope_owner"):
        if key in given:
            options[key] = given[key]
    for key in ("tenant_root", "observed_actor"):
        if key in given:
            options[key] = parse_flag(key, given[key])
    return options


_REGISTER: Final = "v1/scopes"
_MEMBERS: Final = "v1/scopes/members"
_LOG = logging.getLogger("memory_core.engines.cortexdb")
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


def _walk_position(cursor: str | None) -> tuple[str | None, str | None, str | None]:
    """The scope, server cursor and last event a listing cursor (``w`` + hex JSON) names.

    Raises:
        InvalidRequest: anything ``_list`` did not mint (named ``cursor``).
    """
    if cursor is None:
        return None, None, None
    try:
        if not cursor.startswith("w"):
            raise ValueError
        data = json.loads(bytes.fromhex(cursor[1:]))
        scope, server, last = data["s"], data.get("c"), data.get("e")
        if not isinstance(scope, str) or not all(v is None or isinstance(v, str) for v in (server, last)):
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InvalidRequest(f"unknown cursor {cursor[:40]!r}", field="cursor") from None
    return scope, server, last


def _walk_cursor(scope: str, server_cursor: str | None, last_event: str) -> str:
    data = {"s": scope, "c": server_cursor, "e": last_event}
    return "w" + json.dumps(data, separators=(",", ":")).encode().hex()


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
        tenant_root: TinyHumans only: the v3 layout below the tenant's own root, which the backend pins (no
            root segment is sent; reference §5.4).
        retired_scope_root: An earlier v3 root (``user:42``) still read, forgotten and erased, never written,
            while its memory moves (``layout.py``); needs ``scope_root`` or ``tenant_root``.
        scope_owner: Direct only, with ``scope_root``: the actor (``user:42``) registered as the root's owner
            once, before the first write (``POST v1/scopes``).
        observed_actor: Direct only: attribute an assistant turn to its agent, and an item naming an
            ``observed_actor`` to that actor, on the wire (``attribution.py``).
        transport: An httpx transport instead of the network (a double's ``transport``).
        timing: Timeouts, retry waits and polling.
        clock / sleep: The monotonic clock and sleep used for hold-back, retries and polling.

    Raises:
        ConfigError: a missing or blank credential, an unusable endpoint, a credentialed ``http://`` endpoint
            that is not loopback, a consolidation override on TinyHumans, a reserved or malformed header, or a
            layout setting that is malformed, on the wrong wire or in conflict with another (each message
            names its setting).
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
        tenant_root: bool = False,
        retired_scope_root: str | None = None,
        scope_owner: str | None = None,
        observed_actor: bool = False,
        transport: httpx.BaseTransport | None = None,
        timing: Timing | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.wire = wire
        self._layout = check_layout(
            hosted=wire.hosted,
            scope_root=scope_root,
            tenant_root=tenant_root,
            retired_scope_root=retired_scope_root,
            scope_owner=scope_owner,
            observed_actor=observed_actor,
        )
        self._root = self._layout.root
        self._roots = self._layout.roots
        headers = check_headers(headers)
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
        self._registered = self._layout.owner is None  # nothing to register without an owner
        self._attribution = Attribution(observed_actor)
        self.shared = False

    @classmethod
    def from_url(cls, url: str) -> CortexEngine:
        """Open ``cortexdb+https://host[:port][/base][?setting=…]`` or ``tinyhumans+https://host[?setting=…]``.

        Query settings (reference §5.1 ``EngineSettings``, each at most once): ``consolidation``, ``scope_root``,
        ``tenant_root``, ``retired_scope_root``, ``scope_owner``, ``observed_actor``. The credential comes from
        the settings: ``MEMORY_CORE_CORTEXDB_KEY`` (Direct) or ``MEMORY_CORE_TINYHUMANS_TOKEN`` (TinyHumans);
        fixed headers from ``MEMORY_CORE_CORTEXDB_HEADERS`` (a JSON object). ``+http`` schemes serve loopback
        servers such as ``memory-core cortex-double``.

        Raises:
            ConfigError: an unknown scheme or query setting, one given twice, a missing credential, an unusable
                endpoint or setting (the message names it).
        """
        return cls(**url_options(url))

    def __repr__(self) -> str:
        return f"CortexEngine({self.wire.id}, {self._client.endpoint.base_url!r})"

    def close(self) -> None:
        """Close the HTTP client (idempotent); a no-op for an engine the process shares (``binding``)."""
        if not self.shared:
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
        """Every scope of this layout the server lists: ``(path as sent, namespace, kind)``, by path.

        One listing per root read (the root, then a retired root). A hosted listing's paths carry the tenant
        the backend pinned; the path kept is the one this engine sends (``scope_for``), which the backend
        re-roots again.
        """
        out: list[tuple[str, Namespace, ItemKind]] = []
        for root in self._roots:
            params = {"limit": str(_SCOPES_LIMIT)}
            prefix = scope_prefix(root)
            if prefix is not None:
                params["prefix"] = prefix
            try:
                data = self._client.read("GET", self.wire.scopes, params=params)
            except NotFound:
                continue
            raw = (data.get("items") if "items" in data else data.get("scopes")) if isinstance(data, dict) else None
            for entry in raw or []:
                path = entry.get("path") if isinstance(entry, dict) else entry
                if not isinstance(path, str):
                    continue
                parsed = parse_scope(strip_tenant(path, root) if self.wire.hosted else path, root)
                if parsed is not None:
                    out.append((scope_for(parsed[0], parsed[1], root), parsed[0], parsed[1]))
        return sorted(set(out), key=lambda row: row[0])

    def _writable(self, row: tuple[str, Namespace, ItemKind]) -> bool:
        """True for a scope below the write root (not a retired root's)."""
        return row[0] == scope_for(row[1], row[2], self._root)

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
                out.extend({**e, "scope": scope} for e in items or [] if isinstance(e, dict))  # as sent
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
        held: set[str] = set()  # an item in both a root and a retired root is one item
        for scope, namespace, kind in self._held(flt.effective_reach(), flt.kinds):
            for found in self._decoded(scope, labels):
                item = found.item
                if item.item_kind is kind and item.item_meta.namespace == namespace:
                    if admits(flt, found) and found.id not in held:
                        held.add(found.id)
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
        """A page of ``request.limit`` items, read from the server page by page (reference ``cortex/README.md``, List).

        The admitted scopes are walked by path; within a scope, the listing (narrowed by one lookup label) is
        read newest first with the wire's ``cursor``, asking for about as many events as the page still needs,
        and stops as soon as the page is full, so the cost follows ``limit``, not what is stored. An item is
        emitted once, at the event that starts it (turn 0, chunk 0, or its only event); an item of several
        events is read whole by its id label. The cursor (``w`` + hex JSON) holds the scope, the server cursor
        of the page being read and the last event taken; a resumed page skips up to that event (when it is
        still there) and the listing's repeated copies.
        """
        flt = request.filter
        scope_at, server_cursor, last_event = _walk_position(request.cursor)
        rows = self._held(flt.effective_reach(), flt.kinds)
        at = 0
        if scope_at is not None:
            at = next((i for i, row in enumerate(rows) if row[0] >= scope_at), len(rows))
            if at < len(rows) and rows[at][0] != scope_at:
                server_cursor, last_event = None, None  # that scope is gone: start the next afresh
        labels = narrowing_labels(flt)
        hits: list[Hit] = []
        while at < len(rows):
            scope, namespace, kind = rows[at]
            need = request.limit - len(hits)
            events, following = self._listing_page(scope, labels, server_cursor, min(_LIST_LIMIT, 4 * (need + 1)))
            ids = [str(e.get("id")) for e in events]
            if last_event is not None and last_event in ids:
                events = events[len(ids) - ids[::-1].index(last_event) :]
            taken: set[str] = {last_event} if last_event is not None else set()
            for index, event in enumerate(events):
                event_id = str(event.get("id"))
                if event_id in taken:
                    continue  # the listing's second copy
                taken.add(event_id)
                hit = self._starting(event, scope, namespace, kind, flt)
                if hit is None:
                    continue
                hits.append(hit)
                if len(hits) == request.limit:
                    rest = any(str(e.get("id")) not in taken for e in events[index + 1 :])
                    if rest or following is not None or at + 1 < len(rows):
                        return ListPage(items=tuple(hits), next_cursor=_walk_cursor(scope, server_cursor, event_id))
                    return ListPage(items=tuple(hits), next_cursor=None)
            last_event = ids[-1] if ids else None  # its second copy may open the next page
            if following is not None:
                server_cursor = following
                continue
            at, server_cursor, last_event = at + 1, None, None
        return ListPage(items=tuple(hits), next_cursor=None)

    def _explore(self, request: ExploreRequest) -> ExplorePage:
        """Tally at most ``scan_limit`` items, listed page by page: one more is read only to tell ``truncated``."""
        hits: list[Hit] = []
        cursor: str | None = None
        while len(hits) <= request.scan_limit:
            want = min(LISTING_PAGE_SIZE, request.scan_limit + 1 - len(hits))
            page = self.list(ListRequest(filter=request.filter, limit=want, cursor=cursor))
            hits.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        truncated = len(hits) > request.scan_limit
        return tally(request.facet, hits[: request.scan_limit], request.limit, truncated)

    def _listing_page(
        self, scope: str, labels: Sequence[str], cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One listing page of ``scope`` (newest first, copies included) and the cursor of the next, if any."""
        params = {"scope": scope, "limit": str(limit)}
        if labels:
            params["labels"] = ",".join(labels[:MAX_QUERY_LABELS])
        if cursor is not None:
            params["cursor"] = cursor
        data = self._client.read("GET", self.wire.events, params=params)
        data = data if isinstance(data, dict) else {}
        events = [{**e, "scope": scope} for e in data.get("items") or [] if isinstance(e, dict)]
        if not data.get("has_more"):
            return events, None
        following = data.get("next_cursor")
        if not isinstance(following, str) or not following or following == cursor:
            raise EngineError(f"{self.wire.events}: a listing cursor did not advance")
        return events, following

    def _starting(
        self, event: dict[str, Any], scope: str, namespace: Namespace, kind: ItemKind, flt: MetaFilter
    ) -> Hit | None:
        """The item ``event`` starts (its first part), whole and admitted by ``flt``, else None."""
        envelope = read_envelope((event.get("context") or {}).get("labels") or [])
        if envelope is None or event_index(envelope) != 0:
            return None
        parts = max(
            (p.get("count", 1) for p in (envelope.get("turn"), envelope.get("chunk")) if isinstance(p, dict)), default=1
        )
        found = decode_events([event]) if parts == 1 else self._lookup([scope], [envelope["id"]])[scope]
        for whole in found:
            item = whole.item
            if item.item_kind is not kind or item.item_meta.namespace != namespace or not admits(flt, whole):
                continue
            if scope != scope_for(namespace, kind, self._root):  # a retired root's: one item, read once
                if self._lookup([scope_for(namespace, kind, self._root)], [whole.id]).popitem()[1]:
                    return None
            return Hit.of(item, 0.0, whole.id)
        return None

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
            self._check_node(item.item_meta.namespace)
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
            self._register_root()
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

    def _check_node(self, namespace: Namespace) -> None:
        """Refuse a node that begins with a v3 root's own segments (``user:42/…`` below root ``user:42``).

        Its scope would read back two ways (reference ``cortex-layout.md``).

        Raises:
            InvalidRequest: naming ``namespace``.
        """
        path = str(namespace)
        for root in self._roots:
            if root and (path == root or path.startswith(f"{root}/")):
                raise InvalidRequest(f"node {path!r} begins with the scope root {root!r}", field="namespace")

    def _register_root(self) -> None:
        """Register the v3 root with ``scope_owner`` once, before the first write (Direct; reference §5.3).

        ``POST v1/scopes {path, members: [{actor, role: "owner"}]}``. A ``409`` (registered already) is not taken
        as ownership: the record is read (``GET v1/scopes?path=``) and, when the owner is not among its owners,
        the members are written back with it added (``PUT v1/scopes/members?path=``). Any other failure is
        logged and does not fail the write; the next write tries again (reference ``cortex-layout.md``).
        """
        with self._lock:
            if self._registered:
                return
        owner, root = self._layout.owner, self._root
        assert owner is not None and root
        mine = {"actor": owner, "role": "owner"}
        try:
            try:
                self._client.write("POST", _REGISTER, body={"path": root, "members": [mine]})
            except Conflict:
                record = self._client.read("GET", _REGISTER, params={"path": root})
                members = record.get("members") if isinstance(record, dict) else None
                members = [m for m in members or [] if isinstance(m, dict)]
                owners = {m.get("actor") for m in members if m.get("role") == "owner"}
                if owner not in owners:
                    others = [m for m in members if m.get("actor") != owner]
                    body = {"members": [*others, mine]}
                    self._client.write("PUT", _MEMBERS, params={"path": root}, body=body)
        except MemoryCoreError as exc:
            _LOG.warning("registering scope root %s for %s failed; the next write tries again: %s", root, owner, exc)
            return
        with self._lock:
            self._registered = True

    def _attributed(self, bodies: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]] | None:
        """``bodies`` with attribution (``attribution.py``), or None when it is off or names nobody."""
        if not self._attribution.active:
            return None
        subject = self._layout.owner or self._client.caller() or None
        out: list[tuple[str, dict[str, Any]]] = []
        changed = False
        for item_id, body in bodies:
            envelope = read_envelope(body["context"]["labels"]) or {}
            actor = actor_of(envelope)
            if actor is None:
                out.append((item_id, body))
            else:
                out.append((item_id, attribute(body, actor, subject)))
                changed = True
        return out if changed else None

    def _append(self, bodies: Sequence[tuple[str, dict[str, Any]]], accepted: bool) -> list[Any]:
        """Write ``bodies`` (attributed when on, plain again if CortexDB refuses that); one answer per body."""
        attributed = self._attributed(bodies)
        if attributed is None:
            return self._send_events(bodies, accepted)
        try:
            return self._send_events(attributed, accepted)
        except (Unauthorized, InvalidRequest) as exc:
            plain = [(item_id, strip(body)) for item_id, body in attributed]
            answers = self._send_events(plain, accepted)
            if isinstance(exc, Unauthorized):  # a permission the credential lacks: stop asking
                self._attribution.refuse(str(exc))
            return answers

    def _send_events(self, bodies: Sequence[tuple[str, dict[str, Any]]], accepted: bool) -> list[Any]:
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
        ranked = [{**e, "scope": scope} for e in layers.get("events") or [] if isinstance(e, dict)]
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
        """The nodes a build covers, with when each was last written and built, as the server says.

        Per held scope (4 at a time): the newest event of a one-page listing (``limit=2``: every event is
        listed twice) gives ``last_write`` from its ``created_at``, the server's time of appending; on Direct,
        the newest belief of ``GET v1/beliefs?limit=1`` gives ``last_build`` from its ``built_at``. A node's
        times are the latest of its kinds'. A server that reports neither leaves them unknown (None), so
        ``due`` stays true and nothing is skipped on a guess.
        """
        kinds = request.admitted_kinds()
        rows = self._held(request.reach, kinds)

        def marks(row: tuple[str, Namespace, ItemKind]) -> tuple[datetime | None, datetime | None]:
            scope = row[0]
            data = self._client.read("GET", self.wire.events, params={"scope": scope, "limit": "2"})
            items = data.get("items") if isinstance(data, dict) else None
            newest = items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else {}
            built: datetime | None = None
            if self.wire.beliefs is not None and self._writable(row):
                held = self._client.read("GET", self.wire.beliefs, params={"scope": scope, "limit": "1"})
                first = held.get("items") if isinstance(held, dict) else None
                if isinstance(first, list) and first and isinstance(first[0], dict):
                    built = _instant(first[0].get("built_at"))
            return _instant(newest.get("created_at")), built

        if len(rows) > 1:
            with ThreadPoolExecutor(
                max_workers=min(_PACKS_AT_ONCE, len(rows)), thread_name_prefix="cortex-scope"
            ) as pool:
                times = list(pool.map(marks, rows))
        else:
            times = [marks(row) for row in rows]
        by_node: dict[Namespace, tuple[list[ItemKind], list[datetime], list[datetime]]] = {}
        for (_, namespace, kind), (written, built) in zip(rows, times, strict=True):
            held_kinds, writes, builds = by_node.setdefault(namespace, ([], [], []))
            held_kinds.append(kind)
            writes.extend([written] if written is not None else [])
            builds.extend([built] if built is not None else [])
        return [
            BuildScope(
                namespace=ns,
                kinds=tuple(k for k in kinds if k in held),
                last_write=max(writes, default=None),
                last_build=max(builds, default=None),
            )
            for ns, (held, writes, builds) in sorted(by_node.items())
        ]

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        if self._consolidation is Consolidation.NONE:
            raise Unsupported(f"engine `{self.wire.id}` is configured not to consolidate")
        if self._consolidation is Consolidation.SCHEDULED or self.wire.build is None:
            return ConsolidateReceipt.scheduled()
        scopes = [row for row in self._held(request.reach, request.admitted_kinds()) if self._writable(row)]
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


def _instant(value: Any) -> datetime | None:
    """An RFC 3339 time a server answered, as an aware UTC datetime; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


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
