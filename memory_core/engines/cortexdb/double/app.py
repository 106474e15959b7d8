"""The doubles' request handling: one function from ``httpx.Request`` to ``httpx.Response`` per wire.

``CortexDouble.handle`` serves both the in-process transport (``double.transport``, an ``httpx.MockTransport``)
and the loopback server (``server.serve``), so both see exactly the same behaviour. Every request is recorded
in ``seen`` (method, path, query, headers but the bearer, body, status) before the knobs and routes answer it.

Direct answers plain JSON and ``{code, message}`` failures; the hosted double answers ``{success, data}``
envelopes and ``{success: false, error, errorCode}`` failures, insists on the ``type:id`` scope grammar (at most
31 segments), an ``Idempotency-Key`` on each experience write (a key with another body is 409, a claimed key not
yet answered is 409), one ``labels=`` parameter at most, and a strict answer schema; its 429s are express-style
plain text with ``RateLimit-*`` headers.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import httpx

from memory_core.engines.cortexdb.double.knobs import Knobs
from memory_core.engines.cortexdb.double.log import PACK_ID, CortexLog, KeyConflict, body_hash

__all__ = ["CortexDouble", "DoubleError", "Seen"]

_DIRECT_TYPES: Final = frozenset({"agent", "team", "user", "ws", "project", "source", "service", "app", "org"})
_SEGMENT = re.compile(r"[a-z][a-z0-9_]*:[A-Za-z0-9_.-]{1,128}")
_MODALITIES: Final = frozenset({"document", "observation", "conversation"})
_ROLES: Final = frozenset({"user", "assistant", "system", "tool"})
_RECALL_KEYS: Final = frozenset({"scope", "query", "budgets", "view", "include", "temporal", "filters"})
_ANSWER_KEYS: Final = frozenset(
    {"scope", "question", "use_pack_id", "cite_sources", "include_context", "answer_instructions"}
)
_MAX_LABELS: Final = 64
_MAX_EVENT_BYTES: Final = 1024 * 1024
_MAX_HOSTED_SEGMENTS: Final = 31


class DoubleError(Exception):
    """A refusal: the status, the machine code and the message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Seen:
    """One request as the double received it.

    Attributes:
        bearer: The bearer token sent ('' when none); kept out of ``to_json``.
    """

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: dict[str, str]
    body: Any
    bearer: str
    status: int = 0

    def param(self, name: str) -> str | None:
        """The first value of query parameter ``name``, or None."""
        return next((v for k, v in self.query if k == name), None)

    def to_json(self) -> dict[str, Any]:
        """The record without the bearer (what ``/_seen`` serves)."""
        return {
            "method": self.method,
            "path": self.path,
            "query": [list(pair) for pair in self.query],
            "headers": self.headers,
            "body": self.body,
            "status": self.status,
        }


@dataclass
class CortexDouble:
    """A CortexDB double for one wire over a ``CortexLog``.

    Attributes:
        wire: ``direct`` or ``hosted``.
        log: The event log (shareable between doubles).
        knobs: The fault knobs.
        seen: Every request received, in order.
        caller: The caller whoami names.
    """

    wire: Literal["direct", "hosted"]
    log: CortexLog = field(default_factory=CortexLog)
    knobs: Knobs = field(default_factory=Knobs)
    seen: list[Seen] = field(default_factory=list)
    caller: str = "user:local"
    _requests: int = 0
    _limited: int = 0
    _experiences: int = 0
    _claims: dict[str, tuple[str, dict[str, Any] | None]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def hosted(self) -> bool:
        """True for the TinyHumans double."""
        return self.wire == "hosted"

    @property
    def transport(self) -> httpx.MockTransport:
        """An httpx transport answering from this double, in process."""
        return httpx.MockTransport(self.handle)

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        """The requests seen, optionally only those of ``method`` and/or ``path``."""
        with self._lock:
            return [s for s in self.seen if (method is None or s.method == method) and (path in (None, s.path))]

    # entry -------------------------------------------------------------------------------------------
    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request (see the module docstring)."""
        path = request.url.path.strip("/")
        query = tuple(request.url.params.multi_items())
        auth = request.headers.get("authorization", "")
        bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() != "authorization"}
        raw = request.read()
        try:
            body: Any = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            index = len(self.seen)
            self.seen.append(Seen(request.method, path, query, headers, body, bearer))
        response = self._answer(request.method, path, query, headers, body, bearer, raw)
        with self._lock:
            old = self.seen[index]
            self.seen[index] = Seen(
                old.method, old.path, old.query, old.headers, old.body, old.bearer, response.status_code
            )
        return response

    def _answer(
        self,
        method: str,
        path: str,
        query: tuple[tuple[str, str], ...],
        headers: dict[str, str],
        body: Any,
        bearer: str,
        raw: bytes,
    ) -> httpx.Response:
        knobs = self.knobs
        with self._lock:
            self._requests += 1
            limited = (
                knobs.rate_limit_after is not None
                and self._requests > knobs.rate_limit_after
                and self._limited < knobs.rate_limit_count
            )
            if limited:
                self._limited += 1
        if limited:
            return self._too_many()
        armed = not knobs.arm_after_write or self.log.writes > 0
        try:
            if knobs.fail_all and armed:
                raise DoubleError(503, "UNAVAILABLE", "the double is failing every request")
            if not bearer:
                raise DoubleError(401, "UNAUTHORIZED", "no bearer token")
            if knobs.accept_token is not None and bearer != knobs.accept_token:
                raise DoubleError(401, "UNAUTHORIZED", "the bearer token is not accepted")
            if not isinstance(body, dict | None):
                raise DoubleError(400, "BAD_JSON", "the body is not a JSON object")
            params = self._params(query)
            if self.hosted:
                data, status = self._hosted(method, path, params, headers, body or {}, armed)
                return httpx.Response(status, json={"success": True, "data": data})
            if path != "v1/auth/whoami" and knobs.whoami and headers.get("x-cortex-actor") != self.caller:
                raise DoubleError(401, "ACTOR_MISMATCH", "the token's actor does not match X-Cortex-Actor")
            data, status = self._direct(method, path, params, body or {}, armed)
            return httpx.Response(status, json=data)
        except DoubleError as exc:
            if self.hosted:
                payload: dict[str, Any] = {"success": False, "error": exc.message, "errorCode": exc.code}
            else:
                payload = {"code": exc.code, "message": exc.message}
            return httpx.Response(exc.status, json=payload)

    def _too_many(self) -> httpx.Response:
        after = self.knobs.rate_limit_retry_after
        headers = {} if after is None else {"Retry-After": str(after)}
        if self.hosted:  # express-rate-limit: plain text and RateLimit-* headers
            headers |= {"RateLimit-Limit": "300", "RateLimit-Remaining": "0", "RateLimit-Reset": str(after or 60)}
            return httpx.Response(429, text="Too many requests, please try again later.", headers=headers)
        return httpx.Response(429, json={"code": "RATE_LIMITED", "message": "slow down"}, headers=headers)

    def _params(self, query: tuple[tuple[str, str], ...]) -> dict[str, str]:
        if self.hosted and sum(1 for k, _ in query if k == "labels") > 1:
            raise DoubleError(400, "INVALID_QUERY", "labels= given more than once")
        out: dict[str, str] = {}
        for key, value in query:
            out.setdefault(key, value)  # unknown parameters are ignored by the routes
        return out

    # checks ------------------------------------------------------------------------------------------
    def _scope(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise DoubleError(422, "INVALID_SCOPE", "scope is required")
        segments = value.split("/")
        if not all(_SEGMENT.fullmatch(s) for s in segments):
            raise DoubleError(422, "INVALID_SCOPE", f"scope {value[:80]!r} is not type:id segments")
        if self.hosted and len(segments) > _MAX_HOSTED_SEGMENTS:
            raise DoubleError(422, "INVALID_SCOPE", f"a scope holds at most {_MAX_HOSTED_SEGMENTS} segments")
        if not self.hosted:
            unknown = sorted({s.split(":")[0] for s in segments} - _DIRECT_TYPES)
            if unknown:
                raise DoubleError(422, "UNREGISTERED_SCOPE_TYPE", f"unregistered scope types {unknown}")
        return value

    def _experience_body(self, item: Any) -> dict[str, Any]:
        if not isinstance(item, dict):
            raise DoubleError(422, "INVALID_EVENT", "an event is a JSON object")
        self._scope(item.get("scope"))
        if item.get("modality") not in _MODALITIES:
            raise DoubleError(422, "INVALID_EVENT", "modality must be document, observation or conversation")
        content = item.get("content")
        if not isinstance(content, dict) or content.get("kind") != "message" or content.get("role") not in _ROLES:
            raise DoubleError(422, "INVALID_EVENT", "content must be {kind: message, role, text}")
        if not isinstance(content.get("text"), str):
            raise DoubleError(422, "INVALID_EVENT", "content.text must be a string")
        context = item.get("context") or {}
        labels = context.get("labels") or []
        if not isinstance(labels, list) or not all(isinstance(x, str) and 0 < len(x) <= 512 for x in labels):
            raise DoubleError(422, "INVALID_EVENT", "labels must be non-blank strings")
        if len(labels) > _MAX_LABELS:
            raise DoubleError(422, "TOO_MANY_LABELS", f"an event holds at most {_MAX_LABELS} labels")
        if len(json.dumps(item).encode()) > _MAX_EVENT_BYTES:
            raise DoubleError(413, "EVENT_TOO_LARGE", "an event is at most 1 MiB")
        if not self.hosted and not isinstance(item.get("idempotency_key"), str):
            raise DoubleError(422, "INVALID_EVENT", "idempotency_key is required")
        return item

    def _count_experience(self) -> None:
        with self._lock:
            self._experiences += 1
            nth = self._experiences
        if self.knobs.fail_nth_experience is not None and nth == self.knobs.fail_nth_experience:
            raise DoubleError(500, "INTERNAL", f"experience request {nth} failed (fail_nth_experience)")

    def _apply_then_fail(self) -> None:
        with self._lock:
            if self.knobs.apply_then_fail <= 0:
                return
            self.knobs.apply_then_fail -= 1
        raise DoubleError(500, "INTERNAL", "the write was applied, then the answer failed (apply_then_fail)")

    def _append(self, item: dict[str, Any], key: str | None) -> dict[str, Any]:
        try:
            event_id, replayed = self.log.append(item, key, self.knobs.hide_listing_for)
        except KeyConflict:
            raise DoubleError(409, "IDEMPOTENCY_CONFLICT", "the idempotency key was used with another body") from None
        out: dict[str, Any] = {"event_id": event_id}
        if replayed:
            out["replayed_from_idempotency"] = True
        return out

    @staticmethod
    def _limit(params: dict[str, str], default: int, most: int) -> int:
        raw = params.get("limit", str(default))
        if not raw.isdigit() or not 0 < int(raw) <= most:
            raise DoubleError(400, "INVALID_QUERY", f"limit must be 1..={most}")
        return int(raw)

    def _list_events(self, params: dict[str, str]) -> dict[str, Any]:
        scope = self._scope(params.get("scope"))
        limit = self._limit(params, 50, 1000)
        cursor = params.get("cursor")
        if cursor is not None and not re.fullmatch(r"c[0-9]{1,9}", cursor):
            raise DoubleError(400, "INVALID_CURSOR", "unknown cursor")
        offset = int(cursor[1:]) if cursor else 0
        labels = {x for x in params.get("labels", "").split(",") if x}
        if len(labels) > 50:
            raise DoubleError(400, "INVALID_QUERY", "at most 50 labels")
        items, more = self.log.listing(scope, labels, offset, limit)
        return {"items": items, "has_more": more, "next_cursor": f"c{offset + limit}" if more else None}

    def _recall(self, body: dict[str, Any], armed: bool) -> dict[str, Any]:
        if self.knobs.recall_down and armed:
            raise DoubleError(503, "RECALL_DOWN", "recall is down")
        extra = sorted(set(body) - _RECALL_KEYS)
        if extra:
            raise DoubleError(422, "INVALID_RECALL", f"unknown recall fields {extra}")
        if body.get("view") != "granular" and not self.hosted:
            raise DoubleError(422, "INVALID_RECALL", "view must be granular")
        scope = self._scope(body.get("scope"))
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise DoubleError(422, "INVALID_RECALL", "query is required")
        budgets = (body.get("budgets") or {}).get("per_layer_limits") or {}
        labels = set((((body.get("filters") or {}).get("metadata") or {}).get("labels")) or [])
        events, beliefs = int(budgets.get("events", 10)), int(budgets.get("beliefs", 0))
        return self.log.recall(scope, query, events, beliefs, labels)

    def _answer_route(self, body: dict[str, Any], armed: bool) -> dict[str, Any]:
        if self.knobs.recall_down and armed:
            raise DoubleError(503, "RECALL_DOWN", "recall is down")
        if self.hosted:
            extra = sorted(set(body) - _ANSWER_KEYS)
            if extra or ("answer_instructions" in body and not isinstance(body["answer_instructions"], str)):
                raise DoubleError(422, "INVALID_ANSWER", f"strict schema: unknown fields {extra} or null instructions")
        scope = self._scope(body.get("scope"))
        pack = self.log.pack(scope)
        if body.get("use_pack_id") != PACK_ID or pack is None:
            raise DoubleError(404, "PACK_NOT_FOUND", "no such pack")
        lines = [f"[{e.role}] {e.text}" for e in pack]
        answer = "\n".join(lines) if lines else "Nothing in memory answers this."
        return {"answer": answer, "citations": [e.id for e in pack], "diagnostics": {"answer_model": "cortex-double"}}

    def _forget(self, body: dict[str, Any]) -> dict[str, Any]:
        scope = self._scope(body.get("scope"))
        if "confirm_all" in body:
            raise DoubleError(422, "INVALID_FORGET", "confirm_all is refused here; erase the scope instead")
        ids = (body.get("selector") or {}).get("memory_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise DoubleError(422, "EMPTY_SELECTOR", "forget needs selector.memory_ids (an empty one means all)")
        if len(ids) > 100:
            raise DoubleError(422, "INVALID_FORGET", "at most 100 memory_ids")
        return {"forgotten": self.log.forget(scope, ids)}

    def _erase(self, body: dict[str, Any]) -> dict[str, Any]:
        scope = self._scope(body.get("scope"))
        if body.get("confirm_all") is not True:
            raise DoubleError(422, "INVALID_ERASURE", "an erasure needs confirm_all: true")
        erased = self.log.erase(scope)
        return {"erasure_id": f"era_{self._requests:06d}", "scope": scope, "erased": erased}

    def _claim(self, headers: dict[str, str], body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        key = headers.get("idempotency-key", "").strip()
        if not key:
            raise DoubleError(400, "IDEMPOTENCY_KEY_REQUIRED", "an Idempotency-Key header is required")
        digest = body_hash(body)
        with self._lock:
            held = self._claims.get(key)
            if held is None:
                self._claims[key] = (digest, None)
                return key, None
        if held[0] != digest:
            raise DoubleError(409, "IDEMPOTENCY_KEY_REUSED", "the Idempotency-Key was used with another body")
        if held[1] is None:
            raise DoubleError(409, "IDEMPOTENCY_KEY_IN_FLIGHT", "the Idempotency-Key is claimed and unanswered")
        return key, held[1]

    def _registration_route(
        self, method: str, path: str, params: dict[str, str], body: dict[str, Any]
    ) -> tuple[Any, int]:
        """``POST v1/scopes``, ``GET v1/scopes?path=``, ``PUT v1/scopes/members?path=`` (reference §5.3)."""
        if (method, path) == ("POST", "v1/scopes"):
            return self._register(body)
        if (method, path) == ("GET", "v1/scopes"):
            record = self.log.registration(self._scope(params.get("path")))
        elif (method, path) == ("PUT", "v1/scopes/members"):
            members = body.get("members")
            if not isinstance(members, list):
                raise DoubleError(422, "INVALID_BODY", "members must be a list")
            record = self.log.set_members(self._scope(params.get("path")), members)
        else:
            raise DoubleError(404, "NOT_FOUND", f"no route {method} /{path}")
        if record is None:
            raise DoubleError(404, "NOT_FOUND", "no such registered scope")
        return record, 200

    def _register(self, body: dict[str, Any]) -> tuple[Any, int]:
        """``POST v1/scopes {path, members}``: register a scope once; again is ``409 SCOPE_REGISTRATION_EXISTS``."""
        path = self._scope(body.get("path"))
        members = body.get("members", [])
        if not isinstance(members, list):
            raise DoubleError(422, "INVALID_BODY", "members must be a list")
        if self.knobs.fail_registration is not None:
            status = int(self.knobs.fail_registration)
            raise DoubleError(status, "REGISTRATION_FAILED", "the registration failed (fail_registration)")
        if not self.log.register({"path": path, "members": members}):
            raise DoubleError(409, "SCOPE_REGISTRATION_EXISTS", f"scope {path!r} is registered already")
        return {"path": path, "members": members}, 201

    def _check_attribution(self, items: Any) -> None:
        """``deny_attribution``: a write naming another actor or a subject is refused whole."""
        if not self.knobs.deny_attribution or not isinstance(items, list):
            return
        for item in items:
            if not isinstance(item, dict):
                continue
            actor = item.get("observed_actor")
            if item.get("subject") is not None or (isinstance(actor, dict) and actor.get("id") != self.caller):
                raise DoubleError(403, "POLICY_DENIED", "attribution needs scope.write.on_behalf_of")

    def _rerooted(self, params: dict[str, str], body: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
        """Hosted ``tenant``: the scopes (and the listing prefix) sent, re-rooted below the tenant."""
        tenant = self.knobs.tenant
        if not tenant:
            return params, body
        params = dict(params)
        for key in ("scope", "prefix"):
            if params.get(key):
                params[key] = f"{tenant}/{params[key]}"
        params.setdefault("prefix", f"{tenant}/")  # an unprefixed listing covers the whole tenant
        if isinstance(body.get("scope"), str) and body["scope"]:
            body = {**body, "scope": f"{tenant}/{body['scope']}"}
        return params, body

    # routes ------------------------------------------------------------------------------------------
    def _direct(
        self, method: str, path: str, params: dict[str, str], body: dict[str, Any], armed: bool
    ) -> tuple[Any, int]:
        route = (method, path)
        if route == ("GET", "v1/auth/whoami"):
            if not self.knobs.whoami:
                raise DoubleError(404, "NOT_FOUND", "no whoami here")
            return {"caller": self.caller}, 200
        if route == ("GET", "v1/admin/health"):
            return {"status": "ok"}, 200
        if path in ("v1/scopes", "v1/scopes/members"):
            return self._registration_route(method, path, params, body)
        if route == ("POST", "v1/experience"):
            self._check_attribution([body])
            self._count_experience()
            out = self._append(self._experience_body(body), body.get("idempotency_key"))
            self._apply_then_fail()
            return out, 202
        if route == ("POST", "v1/experience/bulk"):
            items = body.get("items")
            if not isinstance(items, list) or not items or body.get("ordering") != "strict_temporal":
                raise DoubleError(422, "INVALID_BULK", "bulk needs items and ordering strict_temporal")
            checked = [self._experience_body(item) for item in items]
            self._check_attribution(checked)
            self._count_experience()
            results = [self._append(item, item.get("idempotency_key")) for item in checked]
            self._apply_then_fail()
            return {"results": results}, 202
        if route == ("GET", "v1/events"):
            return self._list_events(params), 200
        if route == ("POST", "v1/recall"):
            return self._recall(body, armed), 200
        if route == ("POST", "v1/answer"):
            return self._answer_route(body, armed), 200
        if route == ("POST", "v1/forget"):
            return self._forget(body), 200
        if route == ("GET", "v1/scopes/list"):
            limit = self._limit(params, 1000, 1000)
            return {"items": [{"path": p} for p in self.log.scopes(params.get("prefix", ""))[:limit]]}, 200
        if route == ("POST", "v1/erasures"):
            return self._erase(body), 200
        if route == ("POST", "v1/beliefs/build"):
            if set(body) != {"scope"}:
                raise DoubleError(422, "INVALID_BUILD", "a build body is exactly {scope}")
            counts = self.log.build(self._scope(body["scope"]))
            if self.knobs.build_as_job:
                return {"job_id": f"job_{self._requests:06d}", "status": "queued"}, 202
            return counts, 200
        if route == ("GET", "v1/beliefs"):
            scope = self._scope(params.get("scope"))
            return {"items": self.log.held_beliefs(scope, self._limit(params, 50, 1000))}, 200
        raise DoubleError(404, "NOT_FOUND", f"no route {method} /{path}")

    def _hosted(
        self, method: str, path: str, params: dict[str, str], headers: dict[str, str], body: dict[str, Any], armed: bool
    ) -> tuple[Any, int]:
        route = (method, path)
        params, body = self._rerooted(params, body)
        if route in {("POST", "memory/experience"), ("POST", "memory/forget"), ("POST", "memory/v1/erasures")}:
            key, replay = self._claim(headers, body)
            if replay is not None:
                return replay, 200
            with self._lock:
                claim_fails = self.knobs.claim_then_fail > 0
                if claim_fails:
                    self.knobs.claim_then_fail -= 1
            if claim_fails:
                raise DoubleError(500, "INTERNAL", "the key was claimed, then the write failed (claim_then_fail)")
            try:
                if path == "memory/experience":
                    self._count_experience()
                    out = self._append(self._experience_body(body), None)
                    self._apply_then_fail()
                elif path == "memory/forget":
                    out = self._forget(body)
                else:
                    out = self._erase(body)
            except DoubleError as exc:
                if exc.status < 500 or "apply_then_fail" not in exc.message:
                    with self._lock:
                        self._claims.pop(key, None)
                raise
            with self._lock:
                self._claims[key] = (self._claims[key][0], out)
            return out, 200
        if route == ("GET", "memory/events"):
            return self._list_events(params), 200
        if route == ("POST", "memory/recall"):
            return self._recall(body, armed), 200
        if route == ("POST", "memory/answer"):
            return self._answer_route(body, armed), 200
        if route == ("GET", "memory/scopes"):
            limit = self._limit(params, 1000, 1000)
            return {"scopes": self.log.scopes(params.get("prefix", ""))[:limit]}, 200
        if route == ("DELETE", "memory"):
            return {"erased": self.log.erase(None)}, 200
        raise DoubleError(404, "NOT_FOUND", f"no route {method} /{path}")
