"""``MemoryTools``: the seven model-facing tools, confined to a ``ToolScope`` (reference §4.7).

| module | what |
| --- | --- |
| ``memory_tools`` | ``MemoryTools`` (builders, ``specs``, ``call``) and ``ToolScope`` |
| ``schemas`` | the tools' closed JSON schemas, ``ToolSpec`` |
| ``jsonschema`` | the schema subset they use, checked against a call's arguments |
| ``render`` | hits and citations as tool results render them |
| ``writes`` | ``ToolWrites``: ``learn``/``forget`` that never fail the caller (queued when the engine is away) |
| ``jobs`` | ``ToolWrite``: a queued request as a background job, and how a worker applies it |
"""

from memory_core.tools.jobs import ToolWrite
from memory_core.tools.memory_tools import FORBIDDEN_KEYS, MemoryTools, ToolScope
from memory_core.tools.schemas import MAX_LIMIT, READ_TOOLS, WRITE_TOOLS, ToolSpec
from memory_core.tools.writes import Ack, JobSink, ToolWrites

__all__ = [
    "FORBIDDEN_KEYS",
    "MAX_LIMIT",
    "READ_TOOLS",
    "WRITE_TOOLS",
    "Ack",
    "JobSink",
    "MemoryTools",
    "ToolScope",
    "ToolSpec",
    "ToolWrite",
    "ToolWrites",
]
