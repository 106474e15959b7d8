"""The embedding job on PostgreSQL, through the workers' handlers as on SQLite (issue 14 §3).

``stats()`` carries SQLite's keys, ``embedding_wait`` among them, so a build submits ``embed_items``, beat sees
what waits, and ``memory-core status`` shows the count; the scopes table counts live items only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.facts.store import FactStore
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Namespace, Reach
from memory_core.retrieval.embedder import HashEmbedder
from memory_core.settings import Settings, get_settings
from tests._embedding_doubles import REPLY, Counting, Submitted
from workers.coordination import SqliteCoordination
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Delivery, Runtime, Verdict, execute
from workers.handlers import EmbedItems

pytestmark = pytest.mark.postgres

LAYOUT = MemoryLayout()


@pytest.fixture
def model() -> Counting:
    return Counting()


@pytest.fixture
def engine(pg_url: str, model: Counting) -> Iterator[PostgresEngine]:
    with PostgresEngine(pg_url, embedder=model) as opened:
        yield opened


@pytest.fixture
def queue() -> Submitted:
    return Submitted()


@pytest.fixture
def rt(tmp_path: Path, engine: PostgresEngine, queue: Submitted) -> Runtime:
    return Runtime(
        Settings(_env_file=None, build_min_interval_s=0),
        engine=engine,
        coordination=SqliteCoordination(tmp_path / "c.db", "t", 60, 60),
        letters=SqliteDeadLetters(tmp_path / "c.db", 100),
        queue=queue,  # type: ignore[arg-type]
    )


def turns(engine: PostgresEngine, n: int) -> None:
    """``n`` live turns (each logs the user's text, then the reply: two items stored ``accepted``)."""
    mem = AgentMemory(engine, LAYOUT, "alice")
    for i in range(n):
        mem.pre_turn({"thread_id": "t", "turn_index": i, "user_text": f"I planted {i} olive trees in Lisbon."})
        mem.post_turn({"thread_id": "t", "turn_index": i, "assistant_text": REPLY})


def invoke(env: dict[str, str], *args: str) -> str:
    """``memory-core ARGS`` run in process with ``env``; its output (exit code 0 asserted)."""
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(load_commands(), list(args), env=env)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    return result.output


def test_stats_has_the_keys_of_the_sqlite_engine(engine: PostgresEngine, tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db", embedder=HashEmbedder()) as lite:
        assert set(engine.stats()) == set(lite.stats())


def test_a_build_submits_the_embedding_job_and_the_job_embeds_what_was_accepted(
    rt: Runtime, engine: PostgresEngine, model: Counting, queue: Submitted
) -> None:
    turns(engine, 3)
    assert engine.stats()["embedding_wait"] == 6 and model.texts == []  # stored, never encoded on the host
    job = BuildBeliefs(request=ConsolidateRequest(reach=Reach.subtree(LAYOUT.root)))
    built = execute(rt, Delivery("memory.build_beliefs", "b1", (job.to_dict(),)))
    assert built.verdict is Verdict.DONE and built.result is not None
    assert model.texts == [] and engine.stats()["embedding_wait"] == 6  # the build ran no model
    assert built.result["embedding"] == "follow-1" and queue.jobs == [EmbedItems()]
    ran = execute(rt, Delivery("memory.embed_items", "e1", (queue.jobs[0].to_dict(),)))
    assert ran.result == {"job": "embed_items", "embedded": 6, "waiting": 0, "follow_up": None}
    assert engine.stats()["embedding_wait"] == 0 and len(model.texts) == 3 and len(queue.jobs) == 1


def test_the_embedding_job_chains_while_items_wait(rt: Runtime, engine: PostgresEngine, queue: Submitted) -> None:
    turns(engine, 3)
    first = execute(rt, Delivery("memory.embed_items", "e1", (EmbedItems(limit=4).to_dict(),)))
    assert first.result == {"job": "embed_items", "embedded": 4, "waiting": 2, "follow_up": "follow-1"}
    second = execute(rt, Delivery("memory.embed_items", "e2", (queue.jobs[0].to_dict(),)))
    assert second.result == {"job": "embed_items", "embedded": 2, "waiting": 0, "follow_up": None}


def test_beat_submits_an_embedding_job_only_while_items_wait(
    rt: Runtime, engine: PostgresEngine, queue: Submitted
) -> None:
    idle = execute(rt, Delivery("memory.embed_due", "d1"))
    assert idle.result == {"waiting": 0, "job": None} and queue.jobs == []
    turns(engine, 1)
    due = execute(rt, Delivery("memory.embed_due", "d2"))
    assert due.result == {"waiting": 2, "job": "follow-1"} and queue.jobs == [EmbedItems()]


def test_items_wait_for_the_current_model_only(engine: PostgresEngine, pg_url: str) -> None:
    turns(engine, 2)
    assert engine.embed_backlog() == 4 and engine.stats()["embedding_wait"] == 0
    with PostgresEngine(pg_url, embedder=Counting("hash-next")) as changed:
        assert changed.stats()["embedding_wait"] == 4  # the old model's vectors do not count


def test_status_shows_what_waits_and_counts_live_items_per_scope(pg_url: str, tmp_path: Path) -> None:
    root = Namespace.parse("team:acme")
    with PostgresEngine(pg_url, embedder=HashEmbedder()) as engine:
        facts = FactStore(engine, root)
        for key in ("ui.theme", "ui.font"):
            facts.learn(f"The {key} is plain", key=key)
        assert facts.learn("The ui.theme is light", key="ui.theme").superseded
        engine.embed_backlog(limit=1)
    env = {
        "MEMORY_CORE_ENGINE": pg_url,
        "MEMORY_CORE_EMBEDDER": "hash",
        "MEMORY_CORE_LAYOUT_ROOT": str(root),
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_ENGINE_PLUGINS": "",
    }
    status = json.loads(invoke(env, "status", "--json"))
    text = invoke({**env, "COLUMNS": "200"}, "status")
    assert status["items"] == {"learning": 2} and status["engine_stats"]["items"] == 3  # one value superseded
    assert status["engine_stats"]["embedding_wait"] == 1  # two live values, one embedded
    assert [(s["namespace"], s["items"]) for s in status["scopes"]] == [("team:acme", 2)]
    assert "items   2 (learning 2)" in text and "1 waiting for embedding" in text
    assert re.search(r"team:acme\s*│\s*learning\s*│\s*2\s*│", text), text
