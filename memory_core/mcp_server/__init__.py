"""The MCP server (``memory-core mcp``): the five ``memory.*`` tools of reference §6.4 over ``MemoryTools``.

``tools`` maps each MCP tool onto a ``MemoryTools`` call (pure; limits capped at 100); ``server`` is the shell
over the official ``mcp`` SDK (stdio, or streamable HTTP). Needs the ``mcp`` extra. See ``docs/mcp.md``.
"""

from __future__ import annotations

from memory_core.mcp_server.tools import MCP_MAX_LIMIT, McpTool, McpTools

__all__ = ["MCP_MAX_LIMIT", "McpTool", "McpTools"]
