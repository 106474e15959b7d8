"""One ``httpx.Client`` per engine: auth headers, timeouts, read retries, body caps, hold-back (reference §5.2).

* Every attempt asks the credential for its bearer (a callable is asked each time) and sends
  ``Authorization: Bearer <token>``.
* Direct: ``X-Cortex-Actor: <caller>``, the caller learned once from ``GET v1/auth/whoami``; a 404 or 405 there
  means "absent" (no header, never asked again); a 401 or 403 anywhere clears what was learned.
* TinyHumans: a fresh ``Idempotency-Key`` header on each single-attempt POST; ``{success, data}`` unwrapped.
* Reads are tried 3 times, 250 ms then 500 ms apart, on ``EngineUnavailable`` only; writes are sent once.
* A success body is read up to 64 MiB (checked per chunk), an error body up to 64 KiB.
* A 429 carrying a numeric ``Retry-After`` holds every further request back for at most 10 s.

Every failure is turned into the contract's errors by ``errors.status_error``/``errors.transport_error`` and
nowhere else.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from memory_core.engines.cortexdb.auth import Credential, Endpoint
from memory_core.engines.cortexdb.errors import ERROR_BODY_CAP, status_error, transport_error
from memory_core.engines.cortexdb.wire import Wire
from memory_core.errors import EngineError, EngineUnavailable, MemoryCoreError, Unauthorized

__all__ = ["SUCCESS_BODY_CAP", "CortexClient", "Timing"]

SUCCESS_BODY_CAP: Final = 64 * 1024 * 1024
"""Most bytes of a success answer read (reference §5.2)."""
_LOG = logging.getLogger("memory_core.engines.cortexdb")
_ABSENT: Final = ""
"""The learned caller when whoami said there is none (404/405): send no actor header, never ask again."""


@dataclass(frozen=True)
class Timing:
    """Timeouts, retry waits and polling, in seconds (defaults: reference §5.2 and §5.5).

    Attributes:
        request_s / connect_s: httpx's request (read/write/pool) and connect timeouts.
        read_waits: The waits between the 3 attempts of a read.
        hold_max_s: Longest hold-back a ``Retry-After`` may impose.
        poll_s / poll_max_s: First and longest interval between visibility polls (TinyHumans doubles it).
        visible_s: How long a store waits for its last event to list before failing.
        ranked_s: How long a store waits (best effort) for recall to rank its last event.
    """

    request_s: float = 60.0
    connect_s: float = 10.0
    read_waits: tuple[float, ...] = (0.25, 0.5)
    hold_max_s: float = 10.0
    poll_s: float = 0.25
    poll_max_s: float = 0.25
    visible_s: float = 30.0
    ranked_s: float = 10.0


class CortexClient:
    """The engine's HTTP client for one wire.

    Args:
        endpoint: Where the server is.
        wire: Which wire it speaks.
        credential: The bearer credential.
        headers: Extra static headers (attribution such as ``x-sdk-name``).
        transport: An httpx transport to use instead of the network (``direct_double().transport``).
        timing: Timeouts and waits.
        clock / sleep: The monotonic clock and the sleep the hold-back and retries use.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        wire: Wire,
        credential: Credential,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        timing: Timing | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = endpoint
        self.wire = wire
        self.timing = timing or Timing()
        self._credential = credential
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._hold_until = 0.0
        self._caller: str | None = None
        base = {"x-sdk-name": "memory-core", **dict(headers or {})}
        self._client = httpx.Client(
            base_url=endpoint.base_url,
            headers=base,
            timeout=httpx.Timeout(self.timing.request_s, connect=self.timing.connect_s),
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"CortexClient({self.wire.id}, {self.endpoint.base_url!r})"

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._client.close()

    # public ------------------------------------------------------------------------------------------
    def read(self, method: str, route: str, *, params: Mapping[str, str] | None = None, body: Any = None) -> Any:
        """Send a read, retried on ``EngineUnavailable`` only; answer the (unwrapped) JSON body.

        Raises:
            MemoryCoreError: the mapped failure of the last attempt.
        """
        waits = self.timing.read_waits
        for attempt in range(len(waits) + 1):
            try:
                return self._send(method, route, params=params, body=body, idempotent=False)
            except EngineUnavailable:
                if attempt >= len(waits):
                    raise
                self._sleep(waits[attempt])
        raise AssertionError("unreachable")  # pragma: no cover

    def write(
        self,
        method: str,
        route: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        idempotency_header: bool = False,
    ) -> Any:
        """Send a write exactly once; answer the (unwrapped) JSON body.

        Args:
            method: The HTTP method.
            route: The path relative to the endpoint.
            params: The query parameters.
            body: The JSON body, or None.
            idempotency_header: On TinyHumans, send a fresh ``Idempotency-Key`` header.

        Raises:
            MemoryCoreError: the mapped failure.
        """
        return self._send(method, route, params=params, body=body, idempotent=idempotency_header)

    def caller(self) -> str:
        """The caller ``whoami`` names ('' when the server has none, or on TinyHumans)."""
        return self._actor()

    # one attempt -------------------------------------------------------------------------------------
    def _actor(self) -> str:
        if self.wire.whoami is None:
            return _ABSENT
        with self._lock:
            known = self._caller
        if known is not None:
            return known
        status, raw, token = self._exchange("GET", self.wire.whoami, params=None, body=None, headers={})
        if status in (404, 405):
            caller = _ABSENT
        elif status >= 300:
            raise status_error(status, raw, hosted=False, route=self.wire.whoami, secrets=(token,))
        else:
            data = self._decode(raw, self.wire.whoami)
            found = data.get("caller") if isinstance(data, dict) else None
            caller = found.strip() if isinstance(found, str) else _ABSENT
        with self._lock:
            self._caller = caller
        return caller

    def _send(self, method: str, route: str, *, params: Mapping[str, str] | None, body: Any, idempotent: bool) -> Any:
        actor = self._actor()
        return self._attempt(method, route, params=params, body=body, idempotent=idempotent, actor=actor)

    def _hold_back(self) -> None:
        with self._lock:
            wait = self._hold_until - self._clock()
        if wait > 0:
            self._sleep(min(wait, self.timing.hold_max_s))

    def _exchange(
        self, method: str, route: str, *, params: Mapping[str, str] | None, body: Any, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        """One HTTP exchange: (status, capped body, the bearer sent). Transport failures are mapped here."""
        token = self._credential.bearer()
        self._hold_back()
        headers = {**headers, "Authorization": f"Bearer {token}"}
        content = None
        if body is not None:
            content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        try:
            with self._client.stream(method, route, params=params, content=content, headers=headers) as response:
                status = response.status_code
                cap = SUCCESS_BODY_CAP if status < 300 else ERROR_BODY_CAP
                raw = self._read_capped(response, cap, route, status < 300)
                retry_after = response.headers.get("Retry-After")
        except MemoryCoreError:
            raise
        except Exception as exc:  # every httpx failure crosses the one boundary
            raise transport_error(exc, route=route, secrets=(token,)) from None
        _LOG.debug("%s %s -> %s", method, route, status)
        if status == 429 and retry_after is not None and retry_after.strip().isdigit():
            with self._lock:
                hold = min(float(retry_after.strip()), self.timing.hold_max_s)
                self._hold_until = max(self._hold_until, self._clock() + hold)
        return status, raw, token

    def _attempt(
        self,
        method: str,
        route: str,
        *,
        params: Mapping[str, str] | None,
        body: Any,
        idempotent: bool,
        actor: str,
    ) -> Any:
        headers: dict[str, str] = {}
        if actor:
            headers["X-Cortex-Actor"] = actor
        if idempotent and self.wire.hosted and method == "POST":
            headers["Idempotency-Key"] = uuid.uuid4().hex
        status, raw, token = self._exchange(method, route, params=params, body=body, headers=headers)
        if status >= 300:
            error = status_error(status, raw, hosted=self.wire.hosted, route=route, secrets=(token,))
            if isinstance(error, Unauthorized):
                with self._lock:
                    self._caller = None
            raise error
        return self._decode(raw, route)

    @staticmethod
    def _read_capped(response: httpx.Response, cap: int, route: str, success: bool) -> bytes:
        chunks: list[bytes] = []
        total = 0
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > cap:
                if success:
                    raise EngineError(f"{route} answered more than {cap} bytes")
                chunks.append(chunk[: max(0, cap - (total - len(chunk)))])
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def _decode(self, raw: bytes, route: str) -> Any:
        if not raw.strip():
            data: Any = {}
        else:
            try:
                data = json.loads(raw)
            except ValueError:
                raise EngineError(f"{route} answered a body that is not JSON") from None
        if not self.wire.hosted:
            return data
        if not isinstance(data, dict) or data.get("success") is not True:
            raise EngineError(f"{route} answered without a {{success: true, data}} envelope")
        return data.get("data")
