"""Engine selection by URL.

| scheme | engine | example |
| --- | --- | --- |
| ``reference`` | ``ReferenceEngine`` (in memory) | ``reference://?consolidation=scheduled`` |
| ``sqlite`` | ``SQLiteEngine`` (one local file, shared by processes) | ``sqlite:///./var/memory.db`` |

Later engines register their scheme here (``register_engine``); each is imported only when its URL is opened.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

from memory_core.engine import MemoryEngine
from memory_core.errors import ConfigError

__all__ = ["known_schemes", "open_engine", "register_engine"]

_REGISTRY: dict[str, str] = {
    "reference": "memory_core.engines.reference:ReferenceEngine.from_url",
    "sqlite": "memory_core.engines.sqlite:SQLiteEngine.from_url",
}


def register_engine(scheme: str, target: str) -> None:
    """Register ``scheme`` → ``"module:callable"``, a callable taking the URL and returning a ``MemoryEngine``."""
    _REGISTRY[scheme.lower()] = target


def known_schemes() -> list[str]:
    """Every registered URL scheme, sorted."""
    return sorted(_REGISTRY)


def _resolve(target: str) -> Callable[[str], MemoryEngine]:
    module_name, _, attr_path = target.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError, ValueError) as exc:  # ValueError: an empty module name
        raise ConfigError(f"engine target {target!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    return cast(Callable[[str], MemoryEngine], obj)


def open_engine(url: str) -> MemoryEngine:
    """Open the engine a URL names (``reference://``, ``sqlite:///path/to/memory.db``).

    Raises:
        ConfigError: a blank URL, an unknown scheme (the message lists the known ones), or a registered
            ``module:callable`` target that cannot be imported (the message names it).
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("engine URL is blank")
    scheme = urlsplit(url.strip()).scheme.lower()
    if not scheme or scheme not in _REGISTRY:
        raise ConfigError(f"unknown engine scheme {scheme or url!r} (known: {', '.join(known_schemes())})")
    return _resolve(_REGISTRY[scheme])(url.strip())
