"""The HTTP API (``memory-core serve``): the lifecycle, learn/forget, ingest jobs, job status, health, metrics.

An ASGI app (Starlette, served by uvicorn) over one engine. Every route but ``/health`` needs a bearer token, and
each token is bound to one layout root (and optionally a set of agents), so a token holder can never read or
write another tenant's root. Bodies are the contract's models (``memory_core.lifecycle.agent.PreTurn`` …), and
the OpenAPI document (``/openapi.json``) is generated from them. See ``docs/http-api.md``.

Needs the ``http`` extra (``pip install 'memory-core[http]'``).
"""

from __future__ import annotations

from memory_core.http.app import create_app
from memory_core.http.auth import TokenScope, TokenTable

__all__ = ["TokenScope", "TokenTable", "create_app"]
