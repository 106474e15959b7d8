"""The MCP surface against a hostile client: arguments outside the closed schemas, limits of every wrong shape,
unknown tool names, concurrent calls, and the HTTP transport's bounds (body size; without a token, loopback
``Host``/``Origin`` only)."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.host.tools import scoped_tools
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.mcp_server import McpTools
from memory_core.mcp_server.server import MAX_BODY_BYTES, build_server, http_app
from memory_core.query import ListRequest

LAYOUT = MemoryLayout("team:a")


@pytest.fixture
def engine() -> ReferenceEngine:
    return ReferenceEngine()


@pytest.fixture
def tools(engine: ReferenceEngine) -> McpTools:
    return McpTools(scoped_tools(engine, LAYOUT))


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("memory.learn", {"text": "Mara moved.", "learning": {"text": "Injected."}}, "arguments"),
        ("memory.learn", {"text": "Mara moved.", "learning_kind": "fact"}, "arguments"),
        ("memory.learn", {"text": "Mara moved.", "tags": ["ops"]}, "arguments"),
        ("memory.list", {"limit": 5, "mode": "all"}, "arguments"),
        ("memory.recall", {"question": "q", "cursor": "x"}, "arguments"),
        ("memory.forget", {"ids": ["x"], "filter": {}}, "arguments"),
    ],
)
def test_a_key_the_tools_schema_does_not_list_is_refused_and_nothing_is_stored(
    tools: McpTools, engine: ReferenceEngine, name: str, args: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call(name, args)
    assert err.value.field == field
    assert engine.list(ListRequest(limit=10)).items == ()


@pytest.mark.parametrize("arguments", [["text"], "text", 7])
def test_arguments_that_are_no_object_are_refused(tools: McpTools, arguments: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory.list", arguments)
    assert err.value.field == "arguments"


@pytest.mark.parametrize(
    "limit", [-1, 0, -(2**63), 2**64, 10**30, 101, 100.0, 1e300, float("nan"), "10", True, [10], {"n": 1}]
)
@pytest.mark.parametrize("name", ["memory.list", "memory.fetch", "memory.recall"])
def test_a_limit_of_any_wrong_shape_or_size_is_refused_naming_it(tools: McpTools, name: str, limit: Any) -> None:
    args: dict[str, Any] = {"limit": limit}
    if name == "memory.fetch":
        args["query"] = "Porto"
    if name == "memory.recall":
        args["question"] = "Where?"
    with pytest.raises(InvalidRequest) as err:
        tools.call(name, args)
    assert err.value.field == "limit"


@pytest.mark.parametrize("name", ["memory.store", "Memory.List", "memory.list\x00", "", "memory_list", None, 7])
def test_an_unknown_tool_name_is_refused_naming_it(tools: McpTools, name: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call(name, {})
    assert err.value.field == "name"
    assert "\x00" not in str(err.value)  # shown escaped


def test_concurrent_calls_all_land_once(tmp_path: Path) -> None:
    engine = SQLiteEngine(tmp_path / "memory.db")
    try:
        tools = McpTools(scoped_tools(engine, LAYOUT))
        n = 24

        def one(i: int) -> str:
            if i % 3 == 2:
                tools.call("memory.list", {"limit": 100})
                tools.call("memory.recall", {"question": "Which fact?"})
            return str(tools.call("memory.learn", {"text": f"Fact number {i} about Mara."})["id"])

        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(one, range(n)))
        assert len(set(ids)) == n
        listed = tools.call("memory.list", {"limit": 50})["items"]
        assert sorted(i["id"] for i in listed) == sorted(ids)
        with ThreadPoolExecutor(8) as pool:
            gone = list(pool.map(lambda i: tools.call("memory.forget", {"ids": [i]})["forgotten"], ids + ids))
        assert sum(gone) == n  # each forgotten exactly once, however the calls raced
        assert tools.call("memory.list", {})["items"] == []
    finally:
        engine.close()


# the HTTP transport -------------------------------------------------------------------------------------------
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def post(app: Any, base: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async def go() -> httpx.Response:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url=base, timeout=30) as client:
                return await client.post("/mcp", content=body, headers=headers)

    return asyncio.run(go())


@pytest.fixture
def tokenless(engine: ReferenceEngine) -> Any:
    return http_app(build_server(McpTools(scoped_tools(engine, LAYOUT))), None)


def test_without_a_token_a_loopback_host_is_served(tokenless: Any) -> None:
    response = post(tokenless, "http://127.0.0.1:8765", json.dumps(INIT).encode(), HEADERS)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("base", "origin", "status"),
    [
        ("http://rebound.example:8765", None, 421),  # a page that rebound its name to 127.0.0.1
        ("http://127.0.0.1:8765", "http://rebound.example", 403),  # a page posting cross-origin
    ],
)
def test_without_a_token_a_foreign_host_or_origin_is_refused(
    tokenless: Any, base: str, origin: str | None, status: int
) -> None:
    headers = dict(HEADERS, **({"Origin": origin} if origin else {}))
    assert post(tokenless, base, json.dumps(INIT).encode(), headers).status_code == status


def test_a_body_over_the_limit_is_413(tokenless: Any) -> None:
    body = json.dumps({**INIT, "pad": "x" * (MAX_BODY_BYTES + 1)}).encode()
    assert post(tokenless, "http://127.0.0.1:8765", body, HEADERS).status_code == 413


@pytest.mark.parametrize(
    "token", ["t\u00f6ken-with-umlauts-0123456", "spaces inside the token 0123", "ctl\x01" + "x" * 20]
)
def test_mcp_over_http_refuses_a_token_no_header_can_carry_without_showing_it(tmp_path: Path, token: str) -> None:
    from typer.testing import CliRunner

    from memory_core.cli import load_commands
    from memory_core.settings import get_settings

    env = {
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_MCP_TOKEN": token,
    }
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(load_commands(), ["mcp", "--http", "--host", "0.0.0.0"], env=env)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2
    assert "MEMORY_CORE_MCP_TOKEN" in result.stderr and token not in result.output
