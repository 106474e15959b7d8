"""MCP tool errors through the official SDK's client (in-memory transport): an invalid argument, an unknown tool,
an engine that is down and an unexpected failure each come back as a tool error (``isError``) whose one line
names the field when there is one and carries no internals: no engine address, no driver text, no traceback
(``memory_core.public_errors``); the detail goes to the server's log."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.memory import create_connected_server_and_client_session

from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineError, EngineUnavailable
from memory_core.host.tools import scoped_tools
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.mcp_server import McpTools
from memory_core.mcp_server.server import build_server
from memory_core.query import ListPage, ListRequest, StoreReceipt

LAYOUT = MemoryLayout("team:a")
ADDRESS = "postgresql://mc:***@db.internal:5432/memory"
SECRET_PATH = "/srv/memory/driver.py"


class Broken(ReferenceEngine):
    """An engine whose reads fail as ``failure`` says (None: they work) and whose stores always work."""

    def __init__(self) -> None:
        super().__init__()
        self.failure: BaseException | None = None

    def _list(self, request: ListRequest) -> ListPage:
        if self.failure is not None:
            raise self.failure
        return super()._list(request)

    def _store(self, item: AnyItem) -> StoreReceipt:
        if self.failure is not None:
            raise self.failure
        return super()._store(item)

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        return self._store(item)


def _calls(engine: Broken, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[Any]:
    server = build_server(McpTools(scoped_tools(engine, LAYOUT)))

    async def script() -> list[Any]:
        async with create_connected_server_and_client_session(server) as session:
            return [await session.call_tool(name, args) for name, args in calls]

    return anyio.run(script)


def _text(result: Any) -> str:
    assert result.isError, result
    [content] = result.content
    return str(content.text)


def _no_internals(text: str) -> None:
    for leak in ("postgresql://", "db.internal", "5432", SECRET_PATH, "Traceback", 'File "'):
        assert leak not in text, text


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("memory.list", {"limit": -1}, "limit"),
        ("memory.list", {"limit": 101}, "limit"),
        ("memory.recall", {"question": "q", "limit": "ten"}, "limit"),
        ("memory.learn", {"text": "x", "importance": 2}, "importance"),
        ("memory.learn", {"text": "x", "tags": ["ops"]}, "arguments"),
        ("memory.forget", {"ids": []}, "ids"),
        ("memory.nope", {}, "name"),
    ],
)
def test_an_invalid_argument_or_unknown_tool_is_a_tool_error_naming_the_field(
    name: str, args: dict[str, Any], field: str
) -> None:
    engine = Broken()
    [result] = _calls(engine, [(name, args)])
    text = _text(result)
    assert text.startswith(f"invalid request: {field}") or f": {field}: " in text, text
    _no_internals(text)
    assert engine.list(ListRequest(limit=10)).items == ()  # nothing stored


def test_an_unknown_tool_names_it_and_lists_the_tools() -> None:
    [result] = _calls(Broken(), [("memory.nope", {})])
    assert _text(result) == (
        "invalid request: name: unknown tool 'memory.nope' "
        "(tools: memory.recall, memory.fetch, memory.list, memory.learn, memory.forget)"
    )


@pytest.mark.parametrize("name", ["memory.list", "memory.learn"])
def test_an_engine_that_is_down_is_a_generic_tool_error_and_the_detail_is_logged(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Broken()
    engine.failure = EngineUnavailable(f"{ADDRESS}: connection refused")
    args = {"text": "Mara moved to Porto."} if name == "memory.learn" else {}
    with caplog.at_level(logging.WARNING, logger="memory_core.mcp_server.server"):
        [result] = _calls(engine, [(name, args)])
    assert _text(result) == "unavailable: the engine is unavailable; retry later"
    assert ADDRESS in caplog.text  # the operator still sees why
    engine.failure = None
    [after] = _calls(engine, [("memory.list", {})])
    assert not after.isError  # the same server answers once the engine is back


@pytest.mark.parametrize(
    "failure",
    [EngineError(f"{ADDRESS}: relation items does not exist"), RuntimeError(f"boom in {SECRET_PATH} line 9")],
)
def test_an_engine_failure_or_a_bug_is_a_generic_tool_error(
    failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Broken()
    engine.failure = failure
    with caplog.at_level(logging.ERROR, logger="memory_core.mcp_server.server"):
        [result] = _calls(engine, [("memory.list", {})])
    text = _text(result)
    assert text == "internal error (see the server's log)"
    _no_internals(text)
    assert str(failure) in caplog.text


PLUGIN = f'''
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable


class Down(ReferenceEngine):
    def _fail(self, *args, **kwargs):
        raise EngineUnavailable("{ADDRESS}: connection refused")

    _list = _store = _store_with = _fail


def down(url):
    return Down()
'''


@pytest.mark.slow
def test_over_stdio_the_three_refusals_read_as_tool_errors_without_internals(tmp_path: Path) -> None:
    """``memory-core mcp`` as a client starts it: a bad argument, an unknown tool and an engine that went down."""
    (tmp_path / "mc_mcp_down.py").write_text(PLUGIN)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    env = {
        **base,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "MEMORY_CORE_ENGINE": "down://x",
        "MEMORY_CORE_ENGINE_PLUGINS": "down=mc_mcp_down:down",
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_LAYOUT_ROOT": "team:a",
    }
    params = StdioServerParameters(command=sys.executable, args=["-m", "memory_core", "mcp"], env=env)
    calls = [("memory.list", {"limit": -1}), ("memory.nope", {}), ("memory.list", {}), ("memory.learn", {"text": "x"})]

    async def script() -> list[Any]:
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return [await session.call_tool(name, args) for name, args in calls]

    invalid, unknown, *down = anyio.run(script)
    assert _text(invalid) == "invalid request: limit: must be >= 1"
    assert _text(unknown).startswith("invalid request: name: unknown tool 'memory.nope'")
    for result in down:
        assert _text(result) == "unavailable: the engine is unavailable; retry later"
    for result in (invalid, unknown, *down):
        _no_internals(_text(result))
    assert f"{ADDRESS}: connection refused" in (tmp_path / "stderr.log").read_text()  # the operator's log
