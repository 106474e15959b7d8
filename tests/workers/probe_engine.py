"""A test engine plugin (``MEMORY_CORE_ENGINE_PLUGINS=probe=probe_engine:open_probe``), never used in production.

``probe:////abs/memory.db?redis=<url>&prefix=<p>`` is the SQLite engine at that path whose ``consolidate``
records ``{"event": "start"|"end", "ns", "pid", "t"}`` on the Redis list ``<p>:events`` and obeys two switches:

* ``<p>:freeze`` (taken with GETDEL by exactly one build): that build pushes its pid on ``<p>:frozen`` and
  blocks until its process is killed: a build deterministically "in the middle" for kill -9 tests;
* ``<p>:hold`` (while it exists): every build waits before building: a long build without sleeps;
* ``<p>:fail`` (a count, decremented by each build): while it was positive, the build raises
  ``EngineUnavailable`` (a locked or unreachable engine: the worker retries with backoff).

``<p>:freeze:<ns>`` and ``<p>:fail:<ns>`` do the same for builds of namespace ``<ns>`` only, so a build of
another scope still running from an earlier test (an ingest's follow-up) cannot take a test's switch.
"""

from __future__ import annotations

import json
import os
import time
from urllib.parse import parse_qs, urlsplit

import redis

from memory_core.consolidation import ConsolidateReceipt, ConsolidateRequest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.errors import EngineUnavailable


class ProbeEngine(SQLiteEngine):
    def __init__(self, path: str, redis_url: str, prefix: str) -> None:
        super().__init__(path)
        self._redis = redis.Redis.from_url(redis_url, socket_timeout=10)
        self._prefix = prefix

    def _event(self, event: str, request: ConsolidateRequest) -> None:
        record = {"event": event, "ns": str(request.reach.at), "pid": os.getpid(), "t": time.time()}
        self._redis.rpush(f"{self._prefix}:events", json.dumps(record))

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        self._event("start", request)
        ns = str(request.reach.at)
        if any(self._redis.getdel(f"{self._prefix}:freeze{k}") is not None for k in (f":{ns}", "")):
            self._redis.rpush(f"{self._prefix}:frozen", os.getpid())
            while True:  # until killed
                time.sleep(0.5)
        while self._redis.exists(f"{self._prefix}:hold"):
            time.sleep(0.02)
        if any(self._failing(f"{self._prefix}:fail{k}") for k in (f":{ns}", "")):
            self._event("unavailable", request)
            raise EngineUnavailable("probe: the engine is unavailable")
        receipt = super()._consolidate(request)
        self._event("end", request)
        return receipt

    def _failing(self, key: str) -> bool:
        return bool(self._redis.exists(key)) and int(self._redis.decr(key)) >= 0


def open_probe(url: str) -> ProbeEngine:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    return ProbeEngine(parts.path[1:], query["redis"][0], query["prefix"][0])
