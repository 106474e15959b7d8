"""The MCP server over ``McpTools`` with the official ``mcp`` SDK: stdio, or streamable HTTP.

Tool calls run on a worker thread (the engine is synchronous). A refused call is an MCP tool error
(``isError``) of one line: the library's error when the caller's request is at fault (``invalid request: limit:
…``, naming the argument), else a fixed message (``unavailable: the engine is unavailable; retry later``,
``internal error (see the server's log)``) with the detail in the server's log (``public_errors``): no engine
address, driver text or traceback reaches the client. Over HTTP a
bearer token (``MEMORY_CORE_MCP_TOKEN``) is required when set, compared in constant time; ``memory-core mcp``
refuses a non-loopback address without one, and without one the SDK's DNS-rebinding protection admits only
loopback ``Host`` and ``Origin`` headers (a web page that rebinds its name to 127.0.0.1 is refused). Request bodies
are bounded (``MAX_BODY_BYTES``, 413 past it).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

import memory_core
from memory_core.errors import EngineUnavailable, Unsupported
from memory_core.mcp_server.tools import McpTools
from memory_core.public_errors import is_callers, public_text

__all__ = ["LOOPBACK_ONLY", "MAX_BODY_BYTES", "build_server", "http_app", "run_stdio", "tool_error"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
"""The largest MCP request body over HTTP, bytes (the SDK answers 413 past it)."""
LOOPBACK_ONLY = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
)
"""What a server without a token admits: loopback ``Host`` and ``Origin`` headers only (MCP transports spec,
"Security Warning": validate ``Origin`` against DNS rebinding)."""


def build_server(tools: McpTools) -> Server[Any, Any]:
    """The MCP server listing ``tools`` and answering their calls."""
    server: Server[Any, Any] = Server("memory-core", version=memory_core.__version__)

    @server.list_tools()  # type: ignore[no-untyped-call,untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(
                name=t.name,
                description=t.description,
                inputSchema=t.input_schema,
                annotations=types.ToolAnnotations(**t.hints),
            )
            for t in tools.list()
        ]

    # McpTools and MemoryTools check the arguments (one refusal path: the library's InvalidRequest naming the field)
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any] | types.CallToolResult:
        try:
            result: dict[str, Any] = await anyio.to_thread.run_sync(tools.call, name, arguments)
        except Exception as exc:  # the SDK would send str(exc): an engine's address, a bug's text
            return tool_error(exc)
        return result

    return server


def tool_error(exc: Exception) -> types.CallToolResult:
    """The MCP tool error (``isError``) a failed call answers: one line, ``public_errors.public_text``.

    A caller's error (``invalid request: limit: must be at most 100``) is sent as it is; any other is sent as a
    fixed message and logged here with its detail (a warning for an engine that is down or an operation it does
    not offer, an error with the traceback for anything else: as the HTTP API logs a 503/501 and a 500).
    """
    if not is_callers(exc):
        if isinstance(exc, (EngineUnavailable, Unsupported)):
            log.warning("tool call failed: %s", exc)
        else:
            log.error("tool call failed: %s", exc, exc_info=exc)
    return types.CallToolResult(content=[types.TextContent(type="text", text=public_text(exc))], isError=True)


async def _serve_stdio(server: Server[Any, Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def run_stdio(server: Server[Any, Any]) -> None:
    """Serve on standard input and output until the client closes them."""
    anyio.run(_serve_stdio, server)


class _BearerGate:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>`` matches (digests, constant-time compare)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.digest = hashlib.sha256(token.encode("utf-8")).digest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
            presented = hashlib.sha256(token.strip().encode("utf-8")).digest()
            if scheme.lower() != "bearer" or not hmac.compare_digest(presented, self.digest):
                body = {"error": "Unauthorized", "message": "a bearer token is required (MEMORY_CORE_MCP_TOKEN)"}
                response = JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(server: Server[Any, Any], token: str | None = None) -> Any:
    """An ASGI app serving ``server`` over streamable HTTP at ``/mcp``.

    Behind a bearer token when given, else to loopback ``Host``/``Origin`` headers only (``LOOPBACK_ONLY``);
    bodies at most ``MAX_BODY_BYTES``.
    """
    manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=LOOPBACK_ONLY if token is None else None,
        max_request_body_size=MAX_BODY_BYTES,
    )

    class Endpoint:  # an ASGI app (not a request handler), so Starlette hands it the raw scope
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)
    return app if token is None else _BearerGate(app, token)
