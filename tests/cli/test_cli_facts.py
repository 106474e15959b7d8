"""``memory-core facts list|set|forget`` and ``memory-core retention [--dry-run]`` (issue 20)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.facts.model import MAX_FACT_CHARS, MAX_KEY_CHARS
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import turn_item
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import MetaFilter
from memory_core.namespace import Reach
from memory_core.query import ListRequest
from tests._cli import invoke


@pytest.fixture
def facts_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "MEMORY_CORE_EMBEDDER": "hash", "MEMORY_CORE_LAYOUT_ROOT": "team:acme"}


def listed(env: dict[str, str]) -> list[dict[str, object]]:
    result = invoke(env, "facts", "list", "--json")
    assert result.exit_code == 0, result.output
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def test_set_list_and_forget(facts_env: dict[str, str]) -> None:
    assert invoke(facts_env, "facts", "set", "The UI theme is dark", "--key", "ui.theme").exit_code == 0
    out = invoke(facts_env, "facts", "set", "The UI theme is light", "-k", "ui.theme", "-i", "0.9", "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["superseded"]
    assert invoke(facts_env, "facts", "set", "Likes tea").exit_code == 0
    assert invoke(facts_env, "facts", "set", "likes TEA").stdout.startswith("already held")
    rows = listed(facts_env)
    assert [(r["text"], r.get("key"), r["importance"]) for r in rows] == [
        ("The UI theme is light", "ui.theme", 0.9),
        ("Likes tea", None, 0.5),
    ]
    assert "ui.theme = The UI theme is light" in invoke(facts_env, "facts", "list").stdout
    # every stored value of the key goes: the current one and the superseded "dark" (kept retracted until now)
    assert invoke(facts_env, "facts", "forget", "ui.theme").stdout.strip() == "forgot 2 facts"
    forgot = invoke(facts_env, "facts", "forget", "--id", str(rows[1]["id"]))
    assert forgot.stdout.strip() == "forgot 1 fact" and listed(facts_env) == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("x" * (MAX_FACT_CHARS + 1),), "text"),
        (("ok", "--key", " "), "key"),
        (("ok", "--key", "k" * (MAX_KEY_CHARS + 1)), "key"),
        (("ok", "--importance", "1.2"), "importance"),
        (("ok", "--importance", "lots"), "importance"),
        (("ok", "--importance", "nan"), "importance"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_stores_nothing(
    facts_env: dict[str, str], args: tuple[str, ...], field: str
) -> None:
    result = invoke(facts_env, "facts", "set", *args)
    assert result.exit_code == 2 and f"{field}:" in result.stderr
    assert not Path(facts_env["MEMORY_CORE_ENGINE"].removeprefix("sqlite:///")).exists()  # never even opened


def test_forget_needs_exactly_one_of_a_key_or_an_id(facts_env: dict[str, str]) -> None:
    assert invoke(facts_env, "facts", "forget").exit_code == 2
    assert invoke(facts_env, "facts", "forget", "k", "--id", "x").exit_code == 2


@pytest.mark.parametrize("given", ["zzz", "ID8", "IDUPPER"])
def test_forget_of_a_malformed_id_exits_2_naming_id_and_forgets_nothing(facts_env: dict[str, str], given: str) -> None:
    # a fact is an item: its id is 40 lowercase hex (items.is_memory_id), as `facts list` prints it
    assert invoke(facts_env, "facts", "set", "Likes tea").exit_code == 0
    held = str(listed(facts_env)[0]["id"])
    text = {"ID8": held[:8], "IDUPPER": held.upper()}.get(given, given)
    result = invoke(facts_env, "facts", "forget", "--id", text)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"--id: {text!r} is not a fact id") and "facts list" in result.stderr
    assert [r["id"] for r in listed(facts_env)] == [held]
    unknown = invoke(facts_env, "facts", "forget", "--id", "0" * 40)  # a whole id: forgetting nothing is no error
    assert unknown.exit_code == 0 and unknown.stdout.strip() == "forgot 0 facts"


def test_retention_dry_run_says_what_would_go_and_changes_nothing(facts_env: dict[str, str]) -> None:
    path = Path(facts_env["MEMORY_CORE_ENGINE"].removeprefix("sqlite:///"))
    layout = MemoryLayout("team:acme")
    now = datetime.now(UTC)
    with SQLiteEngine(path) as engine:
        for i, age in enumerate((120, 95, 10, 1)):
            turn = Turn(role=Role.USER, text=f"turn {i}")
            engine.store(turn_item(layout.conversations("a"), "a", "t", i, turn, at=now - timedelta(days=age)))
    invoke(facts_env, "facts", "set", "The UI theme is light", "--key", "ui.theme")
    dry = invoke(facts_env, "retention", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "4 turns scanned; would forget 2: 2 observed before" in dry.stdout
    assert "facts, other learnings, documents and beliefs are never pruned" in dry.stdout
    as_json = json.loads(invoke(facts_env, "retention", "--dry-run", "--json").stdout)
    assert (as_json["scanned"], as_json["too_old"], as_json["dry_run"]) == (4, 2, True)
    capped = invoke({**facts_env, "MEMORY_CORE_RETENTION_MAX_TURNS": "1"}, "retention", "--dry-run", "--json")
    assert (json.loads(capped.stdout)["over_count"], json.loads(capped.stdout)["kept"]) == (1, 1)
    done = invoke(facts_env, "retention")
    assert "forgot 2" in done.stdout
    assert "2 turns scanned; would forget 0" in invoke(facts_env, "retention", "--dry-run").stdout
    assert [r["text"] for r in listed(facts_env)] == ["The UI theme is light"]


def test_retention_dry_run_on_a_missing_database_exits_2(facts_env: dict[str, str]) -> None:
    assert invoke(facts_env, "retention", "--dry-run").exit_code == 2


def test_agent_lists_sets_and_forgets_the_facts_at_an_agents_node(facts_env: dict[str, str], tmp_path: Path) -> None:
    from memory_core.host.tools import scoped_tools
    from memory_core.mcp_server import McpTools

    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as engine:  # what an agent-scoped MCP server (memory-core mcp --agent bot) stores
        tools = McpTools(scoped_tools(engine, MemoryLayout("team:acme"), "bot"))
        tools.call("memory.learn", {"text": "The deploy window is Tuesday", "key": "ops.window"})
    assert listed(facts_env) == []  # the root's learnings hold none of them
    result = invoke(facts_env, "facts", "list", "--agent", "bot", "--json")
    assert result.exit_code == 0, result.output
    assert [(r["text"], r.get("key")) for r in json.loads(result.stdout)] == [
        ("The deploy window is Tuesday", "ops.window")
    ]
    assert "ops.window = The deploy window is Tuesday" in invoke(facts_env, "facts", "list", "-a", "bot").stdout
    assert "(no facts)" in invoke(facts_env, "facts", "list", "--agent", "other").stdout

    moved = invoke(facts_env, "facts", "set", "The deploy window is Friday", "-k", "ops.window", "--agent", "bot")
    assert moved.exit_code == 0, moved.output
    [row] = json.loads(invoke(facts_env, "facts", "list", "--agent", "bot", "--json").stdout)
    assert row["text"] == "The deploy window is Friday"
    with SQLiteEngine(path) as engine:
        node = Reach.exact(MemoryLayout("team:acme").conversations("bot"))
        [hit] = engine.list(ListRequest(filter=MetaFilter(reach=node), limit=10)).items
        assert hit.meta.agent_id == "bot"
    assert listed(facts_env) == []

    forgot = invoke(facts_env, "facts", "forget", "ops.window", "--agent", "bot")
    assert forgot.exit_code == 0 and forgot.stdout.strip() == "forgot 2 facts"
    assert json.loads(invoke(facts_env, "facts", "list", "--agent", "bot", "--json").stdout) == []


@pytest.mark.parametrize("agent", ["", "  ", "--bot"])
def test_a_blank_or_reserved_agent_exits_2_naming_it(facts_env: dict[str, str], agent: str) -> None:
    result = invoke(facts_env, "facts", "list", f"--agent={agent}")
    assert result.exit_code == 2, result.output
    assert "--agent" in result.stderr and "Traceback" not in result.output


def test_json_output_escapes_c1_and_bidi_controls_and_parses_to_the_stored_text(facts_env: dict[str, str]) -> None:
    text = "Prefers \u202eaet\u202c and \x9b31mred\x85 tea\x7f"
    assert invoke(facts_env, "facts", "set", text, "--key", "drink\u00e9").exit_code == 0
    result = invoke(facts_env, "facts", "list", "--json")
    assert result.exit_code == 0, result.output
    assert not any(c in result.stdout for c in "\u202e\u202c\x9b\x85\x7f")
    assert "\\u202e" in result.stdout and "\\u009b" in result.stdout
    assert "drink\u00e9" in result.stdout  # other text stays as it is (ensure_ascii=False)
    [row] = json.loads(result.stdout)
    assert row["text"] == text
    shown = invoke(facts_env, "facts", "list").stdout  # the text output neutralises them as before
    assert not any(c in shown for c in "\u202e\u202c\x9b\x85\x7f")


def test_a_negative_number_is_an_argument_and_text_starting_with_a_dash_follows_double_dash(
    facts_env: dict[str, str],
) -> None:
    assert invoke(facts_env, "facts", "set", "-40", "--key", "freezer.celsius").exit_code == 0
    assert invoke(facts_env, "facts", "set", "--", "-x marks the spot").exit_code == 0
    assert [r["text"] for r in listed(facts_env)] == ["-40", "-x marks the spot"]
    refused = invoke(facts_env, "facts", "set", "-x marks the spot")
    assert refused.exit_code == 2 and "No such option" in refused.stderr


def test_status_counts_only_live_items_in_the_scopes_table_as_in_its_items_line(facts_env: dict[str, str]) -> None:
    for key in ("ui.theme", "ui.font"):
        assert invoke(facts_env, "facts", "set", f"The {key} is plain", "--key", key).exit_code == 0
    assert invoke(facts_env, "facts", "set", "The ui.theme is light", "--key", "ui.theme").exit_code == 0
    status = json.loads(invoke(facts_env, "status", "--json").output)
    assert status["items"] == {"learning": 2} and status["engine_stats"]["items"] == 3  # one value superseded
    assert [(s["namespace"], s["items"]) for s in status["scopes"]] == [("team:acme", 2)]  # was 3: the held rows
    assert status["engine_stats"]["embedding_wait"] == 2  # the superseded value waits for no model either
    text = invoke(facts_env, "status").output
    assert "items   2 (learning 2)" in text and "2 waiting for embedding" in text
    assert re.search(r"team:acme\s*│\s*learning\s*│\s*2\s*│", text), text
