"""The seven tools' closed JSON schemas (reference §4.7); pure.

Every object schema has ``additionalProperties: false``. ``memory_fetch``'s ``mode`` lists exactly the engine's
fetch modes, so the schemas depend on the engine's descriptor and on whether the tools may write.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Final

from memory_core.explore import Facet
from memory_core.facts.model import MAX_FACT_CHARS, MAX_KEY_CHARS
from memory_core.items import LearningKind, Role
from memory_core.limits import MAX_GET_IDS
from memory_core.meta import ItemKind, SourceKind
from memory_core.query import FetchMode

__all__ = [
    "DEFAULT_LIMIT",
    "FILTER_FIELDS",
    "MAX_LIMIT",
    "READ_TOOLS",
    "WRITE_TOOLS",
    "ToolSpec",
    "tool_schemas",
]

MAX_LIMIT: Final = 50
"""Largest ``limit`` a tool call may ask for."""
DEFAULT_LIMIT: Final = 10
"""``limit`` when a call leaves it out."""
READ_TOOLS: Final = ("memory_recall", "memory_fetch", "memory_list", "memory_get", "memory_explore")
"""Read tools, in ``specs()`` order."""
WRITE_TOOLS: Final = ("memory_store", "memory_forget")
"""Write tools, listed after the read tools and only when the scope writes."""
FILTER_FIELDS: Final = (
    "kinds",
    "sources",
    "tags_any",
    "workspace",
    "folder",
    "file_path",
    "repo",
    "url",
    "thread_id",
    "agent_id",
    "observed_after",
    "observed_before",
)
"""The model-facing subset of ``MetaFilter`` (no ``reach``: the host fixes it)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """``{name, description, parameters}``: one tool as a model sees it (``parameters`` is a JSON Schema)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _obj(properties: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    schema.update(extra)
    return schema


def _text(description: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "pattern": r"\S", "description": description}


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _time(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "date-time", "description": description}


def _strings(description: str, values: list[str] | None = None) -> dict[str, Any]:
    items: dict[str, Any] = {"type": "string"} if values is None else {"type": "string", "enum": values}
    return {"type": "array", "items": items, "description": description}


FILTER: Final[dict[str, Any]] = _obj(
    {
        "kinds": _strings("Item kinds to admit (any of).", [k.value for k in ItemKind.all()]),
        "sources": _strings("Sources to admit (any of).", [s.value for s in SourceKind]),
        "tags_any": _strings("Admit items carrying at least one of these tags."),
        "workspace": _string("Workspace id."),
        "folder": _string("Folder path prefix."),
        "file_path": _string("File path prefix."),
        "repo": _string("Repository."),
        "url": _string("URL."),
        "thread_id": _string("Conversation thread id."),
        "agent_id": _string("Agent id."),
        "observed_after": _time("Observed at or after this RFC 3339 time."),
        "observed_before": _time("Observed before this RFC 3339 time."),
    }
)
"""The model-facing filter (``FILTER_FIELDS``)."""

LIMIT: Final[dict[str, Any]] = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_LIMIT,
    "description": f"How many results, 1-{MAX_LIMIT} (default {DEFAULT_LIMIT}).",
}
CURSOR: Final[dict[str, Any]] = _string("The next_cursor of the previous page.")
IDS: Final[dict[str, Any]] = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "pattern": r"\S"},
    "minItems": 1,
    "maxItems": MAX_GET_IDS,
    "description": f"Item ids, 1-{MAX_GET_IDS} (duplicates are read once).",
}

_LEARNING = _obj(
    {
        "text": {
            **_text("The fact, preference, procedure or correction, in one or two sentences."),
            "maxLength": MAX_FACT_CHARS,
        },
        "learning_kind": {
            "type": "string",
            "enum": [k.value for k in LearningKind],
            "description": "What sort of learning it is (default fact).",
        },
        "confidence": {"type": "number", "minimum": 0, "maximum": 1, "description": "0-1 (default 0.8)."},
        "evidence": _string("Where it was learned (a quote or a pointer)."),
        "key": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_KEY_CHARS,
            "pattern": r"\S",
            "description": "A stable key for a replaceable fact (e.g. ui.theme): the new value replaces the old one.",
        },
        "importance": {"type": "number", "minimum": 0, "maximum": 1, "description": "0-1 (default 0.5)."},
    },
    ("text",),
)
_DOCUMENT = _obj({"title": _string("Title."), "text": _text("The document's text.")}, ("text",))
_CONVERSATION = _obj(
    {
        "turns": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {"role": {"type": "string", "enum": [r.value for r in Role]}, "text": _text("What was said.")},
                ("role", "text"),
            ),
        }
    },
    ("turns",),
)


def tool_schemas(modes: tuple[FetchMode, ...], writes: bool) -> list[ToolSpec]:
    """The tools for an engine offering ``modes``: read tools, then the write tools when ``writes``.

    ``memory_fetch`` is left out when the engine has no fetch modes; its ``mode`` enum lists exactly ``modes``.
    Each call builds fresh schemas, so a caller may change what it is handed.
    """
    specs = [
        ToolSpec(
            "memory_recall",
            "Ask memory a question; returns a synthesised answer with citations.",
            _obj(
                {
                    "question": _text("The question."),
                    "filter": FILTER,
                    "limit": LIMIT,
                    "instructions": _string("How to shape the answer."),
                },
                ("question",),
            ),
        )
    ]
    if modes:
        specs.append(
            ToolSpec(
                "memory_fetch",
                "Search memory; returns ranked hits.",
                _obj(
                    {
                        "query": _text("What to search for."),
                        "mode": {
                            "type": "string",
                            "enum": [m.value for m in modes],
                            "description": "Retrieval mode (default hybrid when offered, else the first).",
                        },
                        "filter": FILTER,
                        "limit": LIMIT,
                        "cursor": CURSOR,
                    },
                    ("query",),
                ),
            )
        )
    specs += [
        ToolSpec(
            "memory_list",
            "Page through stored items, newest engine order first.",
            _obj({"filter": FILTER, "limit": LIMIT, "cursor": CURSOR}),
        ),
        ToolSpec(
            "memory_get",
            "Read items whole by id; ids not found are listed as missing.",
            _obj({"ids": IDS}, ("ids",)),
        ),
        ToolSpec(
            "memory_explore",
            "Count stored items by a facet (kind, source, tag, …).",
            _obj(
                {
                    "facet": {"type": "string", "enum": [f.value for f in Facet if f is not Facet.NAMESPACE]},
                    "filter": FILTER,
                    "limit": LIMIT,
                },
                ("facet",),
            ),
        ),
    ]
    if writes:
        specs += [
            ToolSpec(
                "memory_store",
                "Remember something: exactly one of a learning, a document or a conversation.",
                _obj(
                    {
                        "learning": _LEARNING,
                        "document": _DOCUMENT,
                        "conversation": _CONVERSATION,
                        "tags": _strings("Tags to file it under."),
                    },
                    oneOf=[{"required": ["learning"]}, {"required": ["document"]}, {"required": ["conversation"]}],
                ),
            ),
            ToolSpec(
                "memory_forget",
                "Forget items: exactly one of ids or a non-empty filter. Only items you can read are forgotten.",
                _obj(
                    {"ids": IDS, "filter": FILTER},
                    oneOf=[{"required": ["ids"]}, {"required": ["filter"]}],
                ),
            ),
        ]
    return [ToolSpec(s.name, s.description, copy.deepcopy(s.parameters)) for s in specs]
