"""``memory-core serve``: the HTTP API (``memory_core.http``) under uvicorn.

A token file is required (``--tokens``, or ``MEMORY_CORE_HTTP_TOKENS_FILE``): there is no default token. The
one exception is ``--insecure-local`` on a loopback address (127.0.0.1, ::1, localhost), which accepts every
request as the ``--root`` layout with no token. Anything else exits 2 before the engine is opened. Tokens are
read once, kept as digests, and never printed; the access log shows paths, never headers.

The engine is opened as every command opens it (``_common.engine_session``); the jobs post_turn and ingest
make go to the workers through ``workers.queue.JobQueue`` (``--broker``, else ``MEMORY_CORE_BROKER_URL``), and
the worker's engine URL must be the server's (a job for another engine is dead-lettered unrun). With
``--prefetch``, ``pre_turn`` answers from the prefetch cache (``memory_core.host.PrefetchMemory``, one per root).

Job ids are handed out as handles bound to the token's root (``memory_core.http.jobs``), minted with
``MEMORY_CORE_HTTP_JOB_KEY`` (read from the environment only, at least 32 bytes); unset, a random key lives as
long as the process, so handles from before a restart answer 404.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, use_options
from memory_core.cli._common import EngineOption, RootOption, console, engine_failure, engine_session, fail, layout_for
from memory_core.errors import MemoryCoreError

__all__ = ["is_loopback", "serve"]


def is_loopback(host: str) -> bool:
    """True when ``host`` is a loopback address or ``localhost`` (no name lookup); pure."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


@app.command()
def serve(
    host: Annotated[str, typer.Option(metavar="ADDRESS", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            metavar="FILE",
            envvar="MEMORY_CORE_HTTP_TOKENS_FILE",
            help="JSON list of {token, root, agents?, name?}; env MEMORY_CORE_HTTP_TOKENS_FILE.",
        ),
    ] = None,
    insecure_local: Annotated[
        bool,
        typer.Option("--insecure-local", help="No token, as --root, any agent: only on a loopback --host."),
    ] = False,
    max_body: Annotated[int, typer.Option(min=1, metavar="BYTES", help="Largest request body.")] = 1 << 20,
    prefetch: Annotated[
        bool, typer.Option("--prefetch", help="Answer pre_turn from the prefetch cache (the last completed pack).")
    ] = False,
    engine: EngineOption = None,
    broker: BrokerOption = None,
    root: RootOption = None,
) -> None:
    """Serve the HTTP API (lifecycle, learn/forget, ingest jobs, job status, health, metrics) with bearer tokens."""
    try:  # the http extra, imported only by this command
        import uvicorn

        from memory_core.http import TokenTable, create_app
        from memory_core.http.jobs import JobHandles
    except ImportError as exc:
        raise fail(f"serve needs the http extra (pip install 'memory-core[http]'): {exc}") from None

    use_options(engine, broker)
    if tokens is not None and insecure_local:
        raise fail("give --tokens or --insecure-local, not both")
    if tokens is None and not insecure_local:
        raise fail("no token file: give --tokens FILE (or MEMORY_CORE_HTTP_TOKENS_FILE); there is no default token")
    if insecure_local and not is_loopback(host):
        raise fail(f"--insecure-local serves without tokens, so only on a loopback --host (127.0.0.1), not {host}")
    if root is not None and tokens is not None:
        raise fail("--root is for --insecure-local; with --tokens each token names its root")
    job_key = os.environ.get("MEMORY_CORE_HTTP_JOB_KEY") or None
    try:
        table = TokenTable.insecure_local(layout_for(root)) if tokens is None else TokenTable.from_file(tokens)
        JobHandles(job_key)  # a short key exits 2 here, before the engine is opened
    except MemoryCoreError as exc:
        raise engine_failure(exc, opening=True) from None

    with engine_session(None) as memory_engine:
        api = create_app(memory_engine, table, max_body=max_body, prefetch=prefetch, job_key=job_key)
        how = "no token (--insecure-local)" if table.insecure else repr(table)
        console.print(f"serving the memory-core API on http://{host}:{port} ({how})", soft_wrap=True)
        uvicorn.Server(uvicorn.Config(api, host=host, port=port, log_level="info", lifespan="on")).run()
