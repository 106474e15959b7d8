"""The ASGI app: one route table, one wrapper mapping every error, and the OpenAPI document built from both.

``ROUTES`` lists the authenticated routes; one wrapper authenticates, scopes, bounds and parses each request and
maps every error at one place (``errors.error_response``).

| route | body → result |
| --- | --- |
| ``POST /v1/start_session`` | ``StartSession`` → ``ContextPack`` |
| ``POST /v1/pre_turn`` | ``PreTurn`` → ``TurnContext`` (with ``prefetch``: plus ``earlier_lookup``, ``age_s``) |
| ``POST /v1/post_turn`` | ``PostTurn`` → ``PostTurnResult`` (the report, its jobs queued) |
| ``POST /v1/recall_for_compaction`` | ``Compaction`` → ``ContextPack`` |
| ``POST /v1/recall`` | ``RecallBody`` → ``ContextPack`` |
| ``POST /v1/learn`` | ``LearnBody`` → ``LearnResult`` (200; ``state: "queued"`` when the engine did not answer) |
| ``POST /v1/forget`` | ``ForgetBody`` → ``ForgetResult`` (200; likewise) |
| ``POST /v1/ingest`` | ``IngestBrain`` → ``JobAccepted`` (202) |
| ``GET /v1/jobs/{job_id}`` | → ``JobStatus`` |
| ``GET /health`` (token optional) | → ``Liveness`` without a token, ``Health`` with one (503 when the engine is down) |
| ``GET /metrics`` | Prometheus text |
| ``GET /openapi.json`` (no token) | the OpenAPI 3.1 document |

Query parameters ``root`` and ``agent`` (optional on every ``/v1`` route) must match the token's scope.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memory_core._model import ContractModel
from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest, MemoryCoreError, NotFound
from memory_core.host.prefetch import PrefetchedTurn
from memory_core.http.auth import TokenTable
from memory_core.http.body import DEFAULT_MAX_BODY_BYTES, check_content_type, parse_body, read_body
from memory_core.http.errors import error_response
from memory_core.http.jobs import JobHandles
from memory_core.http.metrics import CONTENT_TYPE, Metrics
from memory_core.http.models import (
    ForgetBody,
    ForgetResult,
    Health,
    JobAccepted,
    JobStatus,
    LearnBody,
    LearnResult,
    Liveness,
    PostTurnResult,
    RecallBody,
)
from memory_core.http.openapi import openapi_document
from memory_core.http.service import JobSink, JobStates, MemoryService, Scope, _open_monitor, _open_queue
from memory_core.lifecycle.agent import Compaction, PostTurn, PreTurn, StartSession
from memory_core.lifecycle.jobs import IngestBrain
from memory_core.recall.types import ContextPack

__all__ = ["ROUTES", "ApiRoute", "create_app"]

log = logging.getLogger(__name__)

Call = Callable[[MemoryService, Scope, Any, dict[str, str]], ContractModel]


@dataclass(frozen=True)
class ApiRoute:
    """One authenticated route: its path, body and result models, and the service call behind it."""

    path: str
    summary: str
    body: type[ContractModel] | None
    result: type[ContractModel]
    call: Call
    method: str = "POST"
    status: int = 200


ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "/v1/start_session",
        "The pack for a starting or resumed session.",
        StartSession,
        ContextPack,
        lambda s, scope, body, _: s.start_session(scope, body),
    ),
    ApiRoute(
        "/v1/pre_turn",
        "Log the user turn and return the pack for it (with --prefetch: the last completed pack, marked).",
        PreTurn,
        PrefetchedTurn,
        lambda s, scope, body, _: s.pre_turn(scope, body),
    ),
    ApiRoute(
        "/v1/post_turn",
        "Log the reply and queue the belief builds it makes due.",
        PostTurn,
        PostTurnResult,
        lambda s, scope, body, _: s.post_turn(scope, body),
    ),
    ApiRoute(
        "/v1/recall_for_compaction",
        "The pack replacing turns dropped from the prompt.",
        Compaction,
        ContextPack,
        lambda s, scope, body, _: s.recall_for_compaction(scope, body),
    ),
    ApiRoute(
        "/v1/recall",
        "The pre-turn pack for a query, nothing logged.",
        RecallBody,
        ContextPack,
        lambda s, scope, body, _: s.recall(scope, body.query),
    ),
    ApiRoute(
        "/v1/learn",
        "Store a learning at the token's root (queued when the engine does not answer).",
        LearnBody,
        LearnResult,
        lambda s, scope, body, _: s.learn(scope, body),
    ),
    ApiRoute(
        "/v1/forget",
        "Forget items by id, only under the token's root.",
        ForgetBody,
        ForgetResult,
        lambda s, scope, body, _: s.forget(scope, body),
    ),
    ApiRoute(
        "/v1/ingest",
        "Queue brain documents for the workers (an ingest_brain job at the token's root).",
        IngestBrain,
        JobAccepted,
        lambda s, scope, body, _: s.ingest(scope, body),
        status=202,
    ),
    ApiRoute(
        "/v1/jobs/{job_id}",
        "The state of a job this API issued to the token's root (404 for any other id, another root's included).",
        None,
        JobStatus,
        lambda s, scope, body, params: s.job(scope, params["job_id"]),
        method="GET",
    ),
)


def _param(request: Request, name: str) -> str | None:
    """The query parameter ``name``, or None.

    Raises:
        InvalidRequest: ``field=name``: given more than once (which one a proxy and this server read may differ).
    """
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise InvalidRequest("given more than once", field=name)
    return values[0] if values else None


def _json(model: ContractModel, status: int = 200) -> Response:
    return Response(model.to_json(), status_code=status, media_type="application/json")


def create_app(
    engine: MemoryEngine,
    tokens: TokenTable,
    *,
    max_body: int = DEFAULT_MAX_BODY_BYTES,
    queue: Callable[[], JobSink] = _open_queue,
    monitor: Callable[[], JobStates] = _open_monitor,
    prefetch: bool = False,
    prefetch_executor: Executor | None = None,
    job_key: str | None = None,
) -> Starlette:
    """The API over ``engine`` for the holders of ``tokens``.

    Args:
        engine: The engine every request uses (the caller owns it and closes it after the app stops).
        tokens: The accepted tokens and their scopes (``TokenTable.insecure_local`` for a loopback-only server).
        max_body: The largest request body, bytes (413 past it).
        queue: Makes the job queue on first use (tests pass a double).
        monitor: Makes the job monitor on first use.
        prefetch: Serve ``pre_turn`` from the prefetch cache (``MemoryService``; the answer then carries
            ``earlier_lookup`` and ``age_s``).
        prefetch_executor: The pool for its refreshes (default: one the service owns and closes).
        job_key: The key job handles are minted with (``http.jobs``; ``MEMORY_CORE_HTTP_JOB_KEY``); None: a
            random one for the app's life.

    Raises:
        InvalidRequest: ``field="max_body"``: not a positive integer.
        ConfigError: a ``job_key`` shorter than ``http.jobs.MIN_KEY_BYTES``.
    """
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body <= 0:
        raise InvalidRequest("must be a positive number of bytes", field="max_body")
    metrics = Metrics()
    service = MemoryService(
        engine,
        metrics,
        queue=queue,
        monitor=monitor,
        prefetch=prefetch,
        prefetch_executor=prefetch_executor,
        handles=JobHandles(job_key),
    )

    def endpoint(route: ApiRoute) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            started = time.perf_counter()
            response: Response
            try:
                token = tokens.authenticate(request.headers.get("authorization"), request.headers.get("host"))
                scope = Scope(token.layout_for(_param(request, "root")), token.agent_for(_param(request, "agent")))
                body = None
                if route.body is not None:
                    raw = await read_body(request, max_body)
                    check_content_type(request.headers.get("content-type"), raw)
                    body = parse_body(route.body, raw)
                params = {k: str(v) for k, v in request.path_params.items()}
                result = await anyio.to_thread.run_sync(route.call, service, scope, body, params)
                response = _json(result, route.status)
            except Exception as exc:  # the one boundary: every error becomes its status here
                response = error_response(exc)
            metrics.observe(route.path, route.method, response.status_code, time.perf_counter() - started)
            return response

        return handle

    async def health(request: Request) -> Response:
        """``{status}`` without a token; ``{engine, health: {state}}`` with a valid one (401 for a wrong one).

        The engine's ``health.reason`` (which may name its address) is logged, never sent.
        """
        authorization = request.headers.get("authorization")
        try:
            if authorization is not None:
                tokens.authenticate(authorization, request.headers.get("host"))
            result: Health = await anyio.to_thread.run_sync(service.health)
        except Exception as exc:
            return error_response(exc)
        status = 200 if result.health.is_serving else 503
        if result.health.reason is not None:
            log.warning("health: engine %s is %s: %s", result.engine, result.health.state, result.health.reason)
        if authorization is None:
            return _json(Liveness(status="ok" if status == 200 else "unavailable"), status)
        shown = result.model_copy(update={"health": result.health.model_copy(update={"reason": None})})
        return _json(shown, status)

    async def prometheus(request: Request) -> Response:
        try:
            tokens.authenticate(request.headers.get("authorization"), request.headers.get("host"))
        except MemoryCoreError as exc:
            return error_response(exc)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    document = openapi_document(ROUTES)

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        if status == 405:
            body = {"error": "InvalidRequest", "message": f"method {request.method} not allowed", "field": None}
            return JSONResponse(body, status_code=405)
        return error_response(NotFound(f"no route {request.url.path}"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            service.close()

    routes = [Route(r.path, endpoint(r), methods=[r.method]) for r in ROUTES]
    routes += [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: not_found})
    app.state.service = service
    app.state.metrics = metrics
    return app
