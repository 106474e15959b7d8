"""Fixtures of the PostgreSQL engine tests: a fresh database per test (``pgkit``), dropped at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pgkit import create_database, drop_database, require_postgres, url_for


@pytest.fixture
def pg_databases() -> Iterator[Callable[[], str]]:
    """A factory of fresh databases (URLs), every one dropped at teardown."""
    require_postgres()
    made: list[str] = []

    def make() -> str:
        made.append(create_database())
        return url_for(made[-1])

    yield make
    for name in made:
        drop_database(name)


@pytest.fixture
def pg_url(pg_databases: Callable[[], str]) -> str:
    """The URL of one fresh database, dropped at teardown."""
    return pg_databases()
