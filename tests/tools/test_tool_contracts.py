"""The tools' JSON schemas are frozen by tests/fixtures/tool_contracts.json (regenerate: BLESS_TOOL_CONTRACTS=1)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memory_core.descriptor import EngineDescriptor
from memory_core.engines.reference import ReferenceEngine
from memory_core.query import FetchMode
from memory_core.tools import MemoryTools

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tool_contracts.json"


class NoModes(ReferenceEngine):
    def descriptor(self) -> EngineDescriptor:
        return super().descriptor().model_copy(update={"fetch_modes": ()})


class KeywordOnly(ReferenceEngine):
    def descriptor(self) -> EngineDescriptor:
        return super().descriptor().model_copy(update={"fetch_modes": (FetchMode.KEYWORD,)})


def _contracts() -> dict[str, Any]:
    tools = MemoryTools(ReferenceEngine())
    return {
        "tools": [s.to_dict() for s in tools.specs()],
        "read_only": [s.name for s in tools.read_only().specs()],
        "no_fetch_modes": [s.name for s in MemoryTools(NoModes()).specs()],
    }


def _objects(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            out.append((path, schema))
        for key, value in schema.items():
            out += _objects(value, f"{path}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            out += _objects(value, f"{path}.{i}")
    return out


def test_the_tool_contracts_match_the_fixture() -> None:
    contracts = _contracts()
    if os.environ.get("BLESS_TOOL_CONTRACTS") == "1":
        FIXTURE.write_text(json.dumps(contracts, indent=2, ensure_ascii=False) + "\n")
    assert json.loads(FIXTURE.read_text()) == contracts, "tool schemas changed: re-bless with BLESS_TOOL_CONTRACTS=1"


def test_reads_come_first_then_the_writes_and_read_only_drops_the_writes() -> None:
    contracts = _contracts()
    assert [t["name"] for t in contracts["tools"]] == [
        "memory_recall",
        "memory_fetch",
        "memory_list",
        "memory_get",
        "memory_explore",
        "memory_store",
        "memory_forget",
    ]
    assert contracts["read_only"] == [t["name"] for t in contracts["tools"]][:5]
    assert "memory_fetch" not in contracts["no_fetch_modes"]


def test_every_object_schema_is_closed() -> None:
    objects = [o for t in _contracts()["tools"] for o in _objects(t["parameters"], t["name"])]
    assert len(objects) >= 14
    assert [path for path, schema in objects if schema.get("additionalProperties") is not False] == []


def test_the_fetch_mode_enum_lists_exactly_the_engines_modes() -> None:
    spec = next(s for s in MemoryTools(KeywordOnly()).specs() if s.name == "memory_fetch")
    assert spec.parameters["properties"]["mode"]["enum"] == ["keyword"]


def test_no_schema_offers_a_namespace_or_a_reach() -> None:
    text = json.dumps(_contracts()["tools"])
    assert '"namespace"' not in text and '"reach"' not in text
