"""Shared fixtures: environment hygiene, service checks and the real data (skip on a laptop, fail when CI=true)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from _data import CI, DATA_DIR, TINY_DATA_DIR, require_data

__all__ = ["CI", "DATA_DIR", "REDIS_HOST", "REDIS_PORT", "TINY_DATA_DIR", "require_data", "require_service"]

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip the test when the service does not answer, unless CI=true, where that is a failure."""
    if _answers(host, port):
        return
    message = f"{name} is not answering on {host}:{port}"
    if CI:
        pytest.fail(f"{message} (CI=true: a missing service fails the run)")
    pytest.skip(message)


@pytest.fixture
def data_dir() -> Path:
    """The real data folder (see ``require_data``): skips on a laptop without it, fails when CI=true."""
    return require_data()


@pytest.fixture
def tiny_data_dir() -> Path:
    """``TINY_DATA_DIR``: a folder laid out like the real data, for cheap end-to-end runs."""
    return TINY_DATA_DIR


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Strip MEMORY_CORE_ variables so the developer's own settings never leak into a test."""
    for key in list(os.environ):
        if key.startswith("MEMORY_CORE_"):
            monkeypatch.delenv(key, raising=False)
    from memory_core.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()
