"""The compose deployment runs on PostgreSQL: a pgvector image with a volume and a health check, used by every
memory-core service; and the Docker image installs the engine."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_compose_has_a_postgresql_service_every_memory_core_service_uses() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = compose["services"]
    pg = services["postgres"]
    assert pg["image"].startswith("pgvector/pgvector:")
    assert "postgres-data:/var/lib/postgresql/data" in pg["volumes"] and "postgres-data" in compose["volumes"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    for name in ("worker-beliefs", "worker-ingest", "beat", "flower"):
        service = services[name]
        assert service["depends_on"]["postgres"] == {"condition": "service_healthy"}
        engine = service["environment"]["MEMORY_CORE_ENGINE"]
        assert "postgresql://memory:" in engine and "@postgres:5432/memory" in engine


def test_the_image_installs_the_postgres_extra() -> None:
    assert '".[postgres]"' in (REPO / "Dockerfile").read_text()
