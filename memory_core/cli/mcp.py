"""``memory-core mcp``: the MCP server (``memory_core.mcp_server``) on stdio, or streamable HTTP with ``--http``.

The five ``memory.*`` tools run through ``MemoryTools`` for one scope fixed here: ``--root`` (default
``MEMORY_CORE_LAYOUT_ROOT``) and, optionally, ``--agent`` (learnings then land at the agent's node). Reads and
forgets admit that root's subtree only; the client cannot widen it. With ``--queue-writes``, ``memory.learn`` and
``memory.forget`` never fail the caller: when the engine does not answer they become ``tool_write`` jobs on the
host's job queue (``workers.queue.open_tool_writes``; the broker, or the outbox while it is down) and answer "queued".

Over HTTP (``/mcp`` at ``--host``:``--port``) a bearer token is read from ``MEMORY_CORE_MCP_TOKEN`` (never from
the command line, where other users see it); without one, only a loopback address is served. On stdio nothing
but the protocol is written to standard output.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._celery import use_options
from memory_core.cli._common import (
    EngineOption,
    RootOption,
    check_agent_id,
    engine_session,
    err_console,
    fail,
    layout_for,
)
from memory_core.cli.serve import is_loopback

__all__ = ["MIN_TOKEN_CHARS", "mcp"]

MIN_TOKEN_CHARS = 16
"""The shortest ``MEMORY_CORE_MCP_TOKEN`` accepted."""
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""A bearer token's characters (RFC 6750 §2.1 ``b64token``; the HTTP API's token files use the same rule)."""


@app.command()
def mcp(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP at /mcp instead of stdio.")] = False,
    host: Annotated[str, typer.Option(metavar="ADDRESS", help="Address to listen on (--http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on (--http).")] = 8765,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent", "-a", metavar="ID", help="Learnings land at this agent's node.", callback=check_agent_id
        ),
    ] = None,
    queue_writes: Annotated[
        bool,
        typer.Option(
            "--queue-writes",
            help="When the engine does not answer, queue learn/forget as jobs for the workers (needs the broker "
            "settings; the outbox holds them while it is down).",
        ),
    ] = False,
    engine: EngineOption = None,
    root: RootOption = None,
) -> None:
    """Serve the memory.* MCP tools (recall, fetch, list, learn, forget) for one fixed scope."""
    from memory_core.host.tools import scoped_tools
    from memory_core.mcp_server import McpTools  # the mcp extra, imported only by this command
    from memory_core.mcp_server.server import build_server, http_app, run_stdio

    use_options(engine, None)
    token = os.environ.get("MEMORY_CORE_MCP_TOKEN") or None
    if http:
        if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
            raise fail(f"MEMORY_CORE_MCP_TOKEN is shorter than {MIN_TOKEN_CHARS} characters")
        if token is not None and _B64TOKEN.fullmatch(token.strip()) is None:
            raise fail("MEMORY_CORE_MCP_TOKEN: only A-Z a-z 0-9 - . _ ~ + / (then =) can travel in a bearer header")
        if token is None and not is_loopback(host):
            raise fail(f"set MEMORY_CORE_MCP_TOKEN to serve MCP on {host}: without a token only loopback is served")
    layout = layout_for(root)
    with engine_session(None) as memory_engine:
        tools = scoped_tools(memory_engine, layout, agent)
        writes = None
        if queue_writes:
            from memory_core.cli._jobs import open_queue
            from workers.queue import open_tool_writes

            writes = open_tool_writes(memory_engine, open_queue(), tools.scope)
        server = build_server(McpTools(tools, writes))
        if not http:
            run_stdio(server)
            return
        import uvicorn

        how = "bearer token" if token else "no token, loopback only"
        err_console.print(f"serving MCP on http://{host}:{port}/mcp for {layout.root} ({how})", soft_wrap=True)
        asgi = http_app(server, token.strip() if token else None)
        uvicorn.Server(uvicorn.Config(asgi, host=host, port=port, log_level="info", lifespan="on")).run()
