"""``MemoryTools``: the seven model-facing tools, confined to a ``ToolScope`` (reference §4.7).

| module | what |
| --- | --- |
| ``memory_tools`` | ``MemoryTools`` (builders, ``specs``, ``call``) and ``ToolScope`` |
| ``schemas`` | the tools' closed JSON schemas, ``ToolSpec`` |
| ``jsonschema`` | the schema subset they use, checked against a call's arguments |
| ``render`` | hits and citations as tool results render them |
| ``writes`` | ``ToolWrites``: ``learn``/``forget`` that never fail the caller (queued when the engine is away) |
| ``outbox`` | ``ToolOutbox``: the durable private outbox they wait in |
"""

from memory_core.tools.memory_tools import FORBIDDEN_KEYS, MemoryTools, ToolScope
from memory_core.tools.outbox import ToolOutbox
from memory_core.tools.schemas import MAX_LIMIT, READ_TOOLS, WRITE_TOOLS, ToolSpec
from memory_core.tools.writes import Ack, Delivery, ToolWrites

__all__ = [
    "FORBIDDEN_KEYS",
    "MAX_LIMIT",
    "READ_TOOLS",
    "WRITE_TOOLS",
    "Ack",
    "Delivery",
    "MemoryTools",
    "ToolOutbox",
    "ToolScope",
    "ToolSpec",
    "ToolWrites",
]
