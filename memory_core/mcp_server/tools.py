"""The five MCP tools of reference §6.4, each one ``MemoryTools`` call under one fixed scope.

| MCP tool | arguments | ``MemoryTools`` call |
| --- | --- | --- |
| ``memory.recall`` | ``{question, filter?, limit?}`` | ``memory_recall`` |
| ``memory.fetch`` | ``{query, mode?, filter?, limit?, cursor?}`` | ``memory_fetch`` |
| ``memory.list`` | ``{filter?, limit?, cursor?}`` | ``memory_list`` |
| ``memory.learn`` | ``{text, kind?=fact, confidence?=0.8, key?, importance?}`` | ``memory_store {learning}`` |
| ``memory.forget`` | ``{ids: 1..=100}`` | ``memory_forget {ids}`` |

Limits are capped at ``MCP_MAX_LIMIT`` (100, the reference's ``MEMORY_MAX_LIMIT``): a larger one is refused, and
one over ``MemoryTools``' own page size is served as a page of that size (``next_cursor`` continues). The scope
is the server's, fixed when it starts (``host.tools.scoped_tools``): a client cannot name a namespace or reach
(``MemoryTools`` refuses the keys at any depth, and every schema is closed), so it cannot widen what it reads or
writes.

Given a ``ToolWrites`` at the same scope (``memory-core mcp --queue-writes``), ``memory.learn`` and
``memory.forget`` go through it instead, after the same argument checks: with an engine that answers they act at
once, as above; when it does not, the request becomes a ``tool_write`` job and the result says so (``state:
"queued"``, ``message: "queued; not yet saved"``/``"queued; not yet removed"``, ``job_id``; reference §6.4).
Without one, a learn or forget while the engine is down is a tool error, as any other call.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from memory_core.errors import InvalidRequest
from memory_core.items import LearningKind
from memory_core.tools import MAX_LIMIT, MemoryTools, ToolWrites
from memory_core.tools.jsonschema import check
from memory_core.tools.writes import Ack

__all__ = ["MCP_MAX_LIMIT", "McpTool", "McpTools", "learn_argument_error"]

MCP_MAX_LIMIT: Final = 100
"""The largest ``limit`` or id count an MCP call may give (reference §6.4 ``MEMORY_MAX_LIMIT``)."""


@dataclass(frozen=True)
class McpTool:
    """One MCP tool: its name, description, closed input schema and behaviour hints (MCP ``ToolAnnotations``)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True
    hints: dict[str, bool] = field(init=False)

    def __post_init__(self) -> None:
        hints = {"readOnlyHint": self.read_only, "destructiveHint": self.destructive, "idempotentHint": self.idempotent}
        object.__setattr__(self, "hints", hints)


def _limit(schema: dict[str, Any]) -> None:
    props = schema.get("properties", {})
    if "limit" in props:
        props["limit"] = {
            "type": "integer",
            "minimum": 1,
            "maximum": MCP_MAX_LIMIT,
            "description": f"How many results, 1-{MCP_MAX_LIMIT} (at most {MAX_LIMIT} a page; default 10).",
        }


def _subset(schema: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    out["properties"] = {k: v for k, v in out["properties"].items() if k in keep}
    out["required"] = [k for k in out.get("required", []) if k in keep]
    out["additionalProperties"] = False
    _limit(out)
    return out


_LEARN: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "minLength": 1, "pattern": r"\S", "description": "What to remember."},
        "kind": {"type": "string", "enum": [k.value for k in LearningKind], "description": "Default fact."},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1, "description": "0-1 (default 0.8)."},
        "key": {
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "description": "A fact's stable key (ui.theme): replaces the key's current value.",
        },
        "importance": {"type": "number", "minimum": 0, "maximum": 1, "description": "A fact's importance, 0-1."},
    },
    "required": ["text"],
    "additionalProperties": False,
}
_FORGET: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "ids": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "pattern": r"\S"},
            "minItems": 1,
            "maxItems": MCP_MAX_LIMIT,
            "description": f"Item ids, 1-{MCP_MAX_LIMIT}.",
        }
    },
    "required": ["ids"],
    "additionalProperties": False,
}


_HOST_KEYS: Final = frozenset({"namespace", "reach"})
"""Keys left for ``MemoryTools`` to refuse with its own reason (where memory lives is the host's to say)."""


class McpTools:
    """The MCP tools over ``tools`` (whose scope the caller fixed; see ``scoped_tools``).

    Args:
        tools: The ``MemoryTools`` to serve; every call goes through them.
        writes: ``learn`` and ``forget`` that never fail the caller, at ``tools``' scope; None: through ``tools``.

    Raises:
        InvalidRequest: ``field="writes"``: ``writes`` at another scope than ``tools`` (it could widen it).
    """

    def __init__(self, tools: MemoryTools, writes: ToolWrites | None = None) -> None:
        if writes is not None and writes.scope != tools.scope:
            raise InvalidRequest("the durable writes must have the tools' scope", field="writes")
        self.tools = tools
        self.writes = writes
        specs = {s.name: s for s in tools.specs()}
        listed: list[McpTool] = [
            McpTool(
                "memory.recall",
                "Answer a question from memory, with citations.",
                _subset(specs["memory_recall"].parameters, ("question", "filter", "limit")),
            )
        ]
        if "memory_fetch" in specs:
            listed.append(
                McpTool(
                    "memory.fetch",
                    "Search memory; ranked hits.",
                    _subset(specs["memory_fetch"].parameters, ("query", "mode", "filter", "limit", "cursor")),
                )
            )
        listed.append(
            McpTool(
                "memory.list",
                "List memory items, newest first, page by page.",
                _subset(specs["memory_list"].parameters, ("filter", "limit", "cursor")),
            )
        )
        if "memory_store" in specs:
            listed.append(McpTool("memory.learn", "Remember a fact.", _LEARN, read_only=False, idempotent=False))
            listed.append(McpTool("memory.forget", "Forget items by id.", _FORGET, read_only=False, destructive=True))
        self._listed = {t.name: t for t in listed}

    def list(self) -> list[McpTool]:
        """The tools, reads first."""
        return list(self._listed.values())

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Run one MCP tool call through ``MemoryTools``; a JSON-ready result.

        Raises:
            InvalidRequest: an unknown tool (``field="name"``), arguments that are no object or hold a key the
                tool's schema does not list (``field="arguments"``: the SDK is told not to validate, so this is
                where the closed schema holds), a limit or id count over ``MCP_MAX_LIMIT``, or what
                ``MemoryTools`` refuses (a ``namespace``/``reach`` key inside a filter, a malformed value).
            MemoryCoreError: what the engine raises.
        """
        tool = self._listed.get(name) if isinstance(name, str) else None
        if tool is None:
            shown = repr(name)[:80]
            raise InvalidRequest(f"unknown tool {shown} (tools: {', '.join(self._listed)})", field="name")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise InvalidRequest(f"expected an object, got {type(arguments).__name__}", field="arguments")
        args = dict(arguments or {})
        listed = tool.input_schema["properties"]
        unknown = sorted(str(k)[:40] for k in args if k not in listed and k not in _HOST_KEYS)
        if unknown:  # the schema is closed: no key reaches MemoryTools unless the MCP tool lists it
            raise InvalidRequest(f"unknown keys {unknown} for {name}", field="arguments")
        limit = args.get("limit")
        if isinstance(limit, int) and not isinstance(limit, bool):
            if limit > MCP_MAX_LIMIT:
                raise InvalidRequest(f"must be at most {MCP_MAX_LIMIT}", field="limit")
            args["limit"] = min(limit, MAX_LIMIT)
        if name == "memory.learn":
            learning = {"text": args.pop("text", None), "learning_kind": args.pop("kind", None)}
            learning["confidence"] = args.pop("confidence", None)
            for fact_field in ("key", "importance"):  # a fact's only (seed 004); absent stays absent
                if (value := args.pop(fact_field, None)) is not None:
                    learning[fact_field] = value
            try:
                if self.writes is not None:
                    return self._learn({k: v for k, v in learning.items() if v is not None}, args)
                return self.tools.call("memory_store", {"learning": learning, **args})
            except InvalidRequest as exc:  # name the argument the client gave, not MemoryTools' nesting of it
                raise learn_argument_error(exc) from None
        if name == "memory.forget":
            ids = args.get("ids")
            if isinstance(ids, list) and len(ids) > MCP_MAX_LIMIT:
                raise InvalidRequest(f"at most {MCP_MAX_LIMIT} ids", field="ids")
            if self.writes is not None:
                return self._forget(args)
            return self.tools.call("memory_forget", args)
        return self.tools.call("memory_" + name.removeprefix("memory."), args)

    def _checked(self, tool: str, args: dict[str, Any]) -> None:
        """Hold ``args`` to ``MemoryTools``' schema of ``tool`` (the refusals a call through them would give)."""
        spec = next(s for s in self.tools.specs() if s.name == tool)
        check(args, spec.parameters)

    def _learn(self, learning: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
        assert self.writes is not None
        self._checked("memory_store", {"learning": learning, **rest})
        ack = self.writes.learn(
            learning["text"],
            kind=learning.get("learning_kind", LearningKind.FACT.value),
            confidence=float(learning.get("confidence", 0.8)),
            key=learning.get("key"),
            importance=learning.get("importance"),
            field="learning.",
        )
        return {"id": ack.id, "replayed": ack.replayed, **_queued(ack)}

    def _forget(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self.writes is not None
        self._checked("memory_forget", args)
        ids: list[str] = args.get("ids") or []
        ack = self.writes.forget(ids)  # no ids: refused there, naming ``ids``
        if ack.state == "queued":
            return {"forgotten": 0, "skipped": 0, **_queued(ack)}
        return {"forgotten": ack.forgotten, "skipped": max(len(set(ids)) - ack.forgotten, 0)}


_LEARN_ARGUMENTS: Final = {"learning.learning_kind": "kind"}
"""``memory_store``'s field names that ``memory.learn`` gives another name (the rest drop ``learning.``)."""


def learn_argument_error(exc: InvalidRequest) -> InvalidRequest:
    """``exc`` naming ``memory.learn``'s argument rather than ``memory_store``'s field; pure.

    ``learning.importance`` → ``importance``, ``learning.learning_kind`` → ``kind``; any other field unchanged.
    """
    field = exc.field
    if field is None or not field.startswith("learning."):
        return exc
    renamed = _LEARN_ARGUMENTS.get(field) or field.removeprefix("learning.")
    return InvalidRequest(exc.reason, field=renamed)


def _queued(ack: Ack) -> dict[str, Any]:
    """``{state, message, job_id}`` of a queued request; ``{}`` for one done at once."""
    return {"state": ack.state, "message": ack.message, "job_id": ack.job_id} if ack.state == "queued" else {}
