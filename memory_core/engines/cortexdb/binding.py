"""One engine per distinct configuration per process (contract reference §6.1, engine binding).

``open_engine("cortexdb+https://…")`` (every command, host and worker) comes here: the engine a URL and the
settings configure is built once per process and handed out again, so repeated opens reuse one
``httpx.Client`` (its connection pool, the actor learned from ``whoami``, a ``Retry-After`` hold-back, the root
registration) instead of building a new one each time.

The cache key (``fingerprint``) is what makes two configurations different, as the reference's binding keys
it: the engine id, the endpoint (normalised), a digest of the credential (the first 8 bytes of its SHA-256, as
hex; never the credential), and the layout and transport settings (``consolidation``, ``scope_root``,
``tenant_root``, ``retired_scope_root``, ``scope_owner``, ``observed_actor``, ``headers``). So a new key, another
endpoint or another root builds another engine; the same configuration never does.

A cached engine is shared: its ``close`` is a no-op (one caller closing must not break the others), and
``invalidate`` closes and drops them all. A forked child (a Celery prefork worker) never reuses its parent's
engines, whose sockets it shares: the cache starts empty in each process.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from memory_core.engines.cortexdb.auth import parse_endpoint
from memory_core.engines.cortexdb.engine import CortexEngine, url_options

__all__ = ["cached_engines", "fingerprint", "invalidate", "open_cached"]

_LOCK = threading.Lock()
_CACHE: dict[str, CortexEngine] = {}
_PID = os.getpid()


def _key_digest(credential: object) -> str:
    if isinstance(credential, str):
        return hashlib.sha256(credential.strip().encode("utf-8")).digest()[:8].hex()
    return f"source-{id(credential):x}"  # a callable: the same source object is the same credential


def fingerprint(options: Mapping[str, Any]) -> str:
    """The cache key of ``CortexEngine`` keyword arguments (``url_options``); holds no credential.

    Raises:
        ConfigError: an unusable endpoint.
    """
    wire = options["wire"]
    endpoint = parse_endpoint(options.get("endpoint") or wire.default_endpoint).base_url
    parts = {
        "engine": wire.id,
        "endpoint": endpoint,
        "key": _key_digest(options.get("credential")),
        "consolidation": str(options.get("consolidation")),
        "scope_root": options.get("scope_root"),
        "tenant_root": bool(options.get("tenant_root")),
        "retired_scope_root": options.get("retired_scope_root"),
        "scope_owner": options.get("scope_owner"),
        "observed_actor": bool(options.get("observed_actor")),
        "headers": sorted((options.get("headers") or {}).items()),
    }
    return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def open_cached(url: str) -> CortexEngine:
    """The process's engine for ``url`` and the current settings, built on first use.

    Raises:
        ConfigError: as ``CortexEngine.from_url``.
    """
    global _PID
    options = url_options(url)
    key = fingerprint(options)
    with _LOCK:
        if os.getpid() != _PID:  # a forked child: the parent's clients are not ours to use (or close)
            _CACHE.clear()
            _PID = os.getpid()
        engine = _CACHE.get(key)
        if engine is None:
            engine = CortexEngine(**options)
            engine.shared = True
            _CACHE[key] = engine
        return engine


def cached_engines() -> int:
    """How many engines this process holds."""
    with _LOCK:
        return len(_CACHE) if os.getpid() == _PID else 0


def invalidate() -> int:
    """Close and drop every cached engine (a changed key or configuration builds anew); answer how many."""
    with _LOCK:
        engines = list(_CACHE.values()) if os.getpid() == _PID else []
        _CACHE.clear()
    for engine in engines:
        engine.shared = False
        engine.close()
    return len(engines)
