"""``memory-core mcp`` with the MCP SDK's own client, over stdio and over streamable HTTP: list the tools, learn a
fact, recall it, forget it; refusals come back as tool errors; the HTTP server wants its bearer token."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.settings import get_settings

TOKEN = "mcp-test-token-0123456789"
TOOLS = ["memory.recall", "memory.fetch", "memory.list", "memory.learn", "memory.forget"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    return {
        **base,
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_LAYOUT_ROOT": "team:a",
    }


def _payload(result: Any) -> dict[str, Any]:
    assert not result.isError, result.content
    if result.structuredContent is not None:
        return dict(result.structuredContent)
    return dict(json.loads(result.content[0].text))


async def _session_script(session: ClientSession) -> dict[str, Any]:
    await session.initialize()
    listed = await session.list_tools()
    learned = _payload(await session.call_tool("memory.learn", {"text": "Mara moved to Porto in March."}))
    recalled = _payload(await session.call_tool("memory.recall", {"question": "Where did Mara move?"}))
    listed_items = _payload(await session.call_tool("memory.list", {"limit": 100}))
    widened = await session.call_tool("memory.list", {"filter": {"reach": {"at": "root"}}})
    too_many = await session.call_tool("memory.list", {"limit": 101})
    hostile = [
        await session.call_tool("memory.nope", {}),
        await session.call_tool("memory.list", {"limit": -1}),
        await session.call_tool("memory.list", {"limit": 10**30}),
        await session.call_tool("memory.learn", {"text": "x", "learning": {"text": "Injected."}}),
    ]
    forgot = _payload(await session.call_tool("memory.forget", {"ids": [learned["id"]]}))
    after = _payload(await session.call_tool("memory.list", {}))
    return {
        "tools": [t.name for t in listed.tools],
        "learned": learned,
        "recalled": recalled,
        "listed": listed_items,
        "widened": widened,
        "too_many": too_many,
        "hostile": hostile,
        "forgot": forgot,
        "after": after,
    }


def _check(seen: dict[str, Any]) -> None:
    assert seen["tools"] == TOOLS
    item = seen["learned"]["id"]
    assert item in [c["id"] for c in seen["recalled"]["citations"]]
    assert [i["id"] for i in seen["listed"]["items"]] == [item]
    assert seen["widened"].isError and "set by the host" in seen["widened"].content[0].text
    assert (
        seen["too_many"].isError and seen["too_many"].content[0].text == "invalid request: limit: must be at most 100"
    )
    unknown, negative, huge, injected = seen["hostile"]
    assert all(r.isError for r in seen["hostile"])
    assert "unknown tool 'memory.nope'" in unknown.content[0].text
    assert "limit" in negative.content[0].text and "limit" in huge.content[0].text
    assert "arguments: unknown keys ['learning']" in injected.content[0].text
    assert seen["forgot"] == {"forgotten": 1, "skipped": 0}
    assert seen["after"]["items"] == []


@pytest.mark.slow
def test_an_sdk_client_over_stdio_learns_recalls_and_forgets(env: dict[str, str]) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "memory_core", "mcp"], env=env)

    async def script() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            return await _session_script(session)

    _check(asyncio.run(script()))


@pytest.mark.slow
def test_with_queue_writes_the_same_session_runs_over_the_hosts_job_queue(env: dict[str, str]) -> None:
    """``--queue-writes`` opens the host's job queue (here the server-less transport) and serves learn/forget
    through ``ToolWrites``: with the engine answering they act at once, as without it (the queued path:
    ``test_mcp_durable_writes.py``)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "memory_core", "mcp", "--queue-writes"], env=env)

    async def script() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            return await _session_script(session)

    _check(asyncio.run(script()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = _free_port()
    log = (tmp_path / "mcp.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_core", "mcp", "--http", "--port", str(port)],
        env={**env, "MEMORY_CORE_MCP_TOKEN": TOKEN},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while True:  # wait for the server to answer (start-up, not a measurement)
        if proc.poll() is not None:
            pytest.fail(f"mcp --http exited {proc.returncode}: {(tmp_path / 'mcp.log').read_text()}")
        try:
            httpx.post(url, timeout=2)
            break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("mcp --http did not answer within 60 s")
        time.sleep(0.2)
    try:
        yield url, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        assert TOKEN not in (tmp_path / "mcp.log").read_text()


@pytest.mark.slow
def test_an_sdk_client_over_http_learns_recalls_and_forgets(http_server: tuple[str, Any]) -> None:
    url, _ = http_server

    async def script() -> dict[str, Any]:
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client,
            streamable_http_client(url, http_client=client) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            return await _session_script(session)

    _check(asyncio.run(script()))


@pytest.mark.slow
@pytest.mark.parametrize("header", [None, "Bearer wrong-token-wrong-token", f"Basic {TOKEN}"])
def test_the_http_server_refuses_a_missing_or_wrong_token(http_server: tuple[str, Any], header: str | None) -> None:
    url, _ = http_server
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if header is not None:
        headers["Authorization"] = header
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx.post(url, json=body, headers=headers, timeout=10)
    assert response.status_code == 401
    assert TOKEN not in response.text


def test_mcp_over_http_off_loopback_needs_a_token(env: dict[str, str]) -> None:
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(load_commands(), ["mcp", "--http", "--host", "0.0.0.0"], env=env)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2
    assert "MEMORY_CORE_MCP_TOKEN" in result.stderr
