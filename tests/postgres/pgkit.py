"""PostgreSQL test helpers: throwaway databases, dropped afterwards (skip without a server; fail in CI).

The server is ``MEMORY_CORE_TEST_POSTGRES`` as the run started (an admin URL; default the local trust-auth
``postgresql://postgres@127.0.0.1:5432/postgres``). Every database a test makes is named ``postgres_<random>``
and dropped with ``WITH (FORCE)``, so a test that leaves connections open still cleans up.
"""

from __future__ import annotations

import os
import socket
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from _data import CI

ADMIN_URL = os.environ.get("MEMORY_CORE_TEST_POSTGRES", "").strip() or "postgresql://postgres@127.0.0.1:5432/postgres"
"""The server's admin URL (read at import: the autouse fixture strips ``MEMORY_CORE_`` variables)."""


def require_postgres() -> None:
    """Skip when nothing answers at ``ADMIN_URL``'s address, unless CI=true, where that is a failure."""
    parts = urlsplit(ADMIN_URL)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return
    except OSError:
        pass
    message = f"PostgreSQL is not answering on {host}:{port}"
    if CI:
        pytest.fail(f"{message} (CI=true: a missing service fails the run)")
    pytest.skip(message)


def url_for(database: str, query: str = "") -> str:
    """``ADMIN_URL`` pointed at ``database``."""
    parts = urlsplit(ADMIN_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", query, ""))


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type,unused-ignore]


def create_database() -> str:
    """A new empty database ``postgres_<random>``; its name."""
    name = f"postgres_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    """Drop ``name`` even if connections are still open."""
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
