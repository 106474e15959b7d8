"""Engine selection by URL.

| scheme | engine | example |
| --- | --- | --- |
| ``reference`` | ``ReferenceEngine`` (in memory) | ``reference://?consolidation=scheduled`` |
| ``sqlite`` | ``SQLiteEngine`` (one local file, shared by processes) | ``sqlite:///./var/memory.db`` |
| ``postgresql``, ``postgres`` | ``PostgresEngine`` (the ``postgres`` extra) | ``postgresql://user:pw@host/db`` |
| ``cortexdb+https`` | ``CortexEngine``, CortexDB Direct | ``cortexdb+https://api-v1.cortexdb.ai`` |
| ``tinyhumans+https`` | ``CortexEngine``, TinyHumans hosted | ``tinyhumans+https://api.tinyhumans.ai`` |

Later engines register their scheme here (``register_engine``); each is imported only when its URL is opened.
``open_engine`` is the one place engines are opened, and it registers the ``MEMORY_CORE_ENGINE_PLUGINS``
setting's schemes first (``scheme=module:callable``, comma-separated), so every command (``recall``, ``status``,
``context``, ``conformance``, ``replay``, the workers) and every library caller honours the same plugins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit, urlunsplit

from memory_core.engine import MemoryEngine
from memory_core.errors import ConfigError
from memory_core.settings import get_settings, parse_engine_plugins

__all__ = [
    "engine_identity",
    "known_schemes",
    "load_plugins",
    "mask_url",
    "open_engine",
    "open_host_engine",
    "register_engine",
]

_REGISTRY: dict[str, str] = {
    "reference": "memory_core.engines.reference:ReferenceEngine.from_url",
    "sqlite": "memory_core.engines.sqlite:SQLiteEngine.from_url",
    "postgresql": "memory_core.engines.postgres:PostgresEngine.from_url",
    "postgres": "memory_core.engines.postgres:PostgresEngine.from_url",
    # CortexDB over httpx: Direct and TinyHumans hosted; +http for loopback servers (issue 18)
    "cortexdb+https": "memory_core.engines.cortexdb.binding:open_cached",
    "cortexdb+http": "memory_core.engines.cortexdb.binding:open_cached",
    "tinyhumans+https": "memory_core.engines.cortexdb.binding:open_cached",
    "tinyhumans+http": "memory_core.engines.cortexdb.binding:open_cached",
}


def register_engine(scheme: str, target: str) -> None:
    """Register ``scheme`` → ``"module:callable"``, a callable taking the URL and returning a ``MemoryEngine``."""
    _REGISTRY[scheme.lower()] = target


def load_plugins(plugins: str | None = None) -> dict[str, str]:
    """Register the engine plugins ``plugins`` names (default: the ``MEMORY_CORE_ENGINE_PLUGINS`` setting).

    Args:
        plugins: ``scheme=module:callable`` entries separated by commas, or None for the setting.

    Returns:
        The schemes registered, with their targets (imported only when a URL of theirs is opened).

    Raises:
        ConfigError: a malformed entry, naming ``MEMORY_CORE_ENGINE_PLUGINS`` (or another malformed setting).
    """
    spec = get_settings().engine_plugins if plugins is None else plugins
    try:
        targets = parse_engine_plugins(spec)
    except ValueError as exc:
        raise ConfigError(f"MEMORY_CORE_ENGINE_PLUGINS: {exc}") from None
    for scheme, target in targets.items():
        register_engine(scheme, target)
    return targets


_SECRET_PARAMS = frozenset({"password", "passwd", "pwd", "sslpassword", "secret", "token", "key", "api_key"})
"""Query parameters whose value is a secret (libpq takes ``?password=``; ``sslpassword`` unlocks a key)."""


def mask_url(url: str) -> str:
    """``url`` with its secrets replaced by ``***``, for anything printed or logged.

    The password of the authority and the value of a secret query parameter (``?password=…``, libpq's
    ``sslpassword``, ``token``, ``key``…) are masked. A URL without a secret is returned as it is; one that does
    not parse is shown only by its scheme.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return f"{url.partition(':')[0]}://***"
    pairs = [pair.partition("=") for pair in parts.query.split("&")] if parts.query else []
    secret = [bool(sep) and name.lower() in _SECRET_PARAMS for name, sep, _ in pairs]
    if password is None and not any(secret):
        return url
    if any(secret):
        query = "&".join(
            f"{name}{sep}{'***' if hidden else value}" for (name, sep, value), hidden in zip(pairs, secret, strict=True)
        )
        parts = parts._replace(query=query)
    if password is not None:
        userinfo, _, host = parts.netloc.rpartition("@")
        parts = parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{host}")
    return urlunsplit(parts)


def engine_identity(url: str) -> str:
    """Which store a URL names, without its password: two spellings of one store give one identity.

    ``postgresql://``/``postgres://``: the parsed, normalised connection identity (``PgOptions.identity``:
    default port, option order and scheme spelling do not matter); a URL it refuses, and any other scheme: the
    stripped URL with its password masked (``mask_url``).
    """
    text = url.strip()
    if urlsplit(text).scheme.lower() in ("postgresql", "postgres"):
        options = importlib.import_module("memory_core.engines.postgres.options")
        try:
            return str(options.parse_url(text).identity)
        except ConfigError:
            pass
    return mask_url(text)


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


def open_engine(url: str, *, plugins: str | None = None) -> MemoryEngine:
    """Open the engine a URL names (``reference://``, ``sqlite:///path/to/memory.db``, a plugin's scheme).

    Args:
        url: The engine URL.
        plugins: Engine plugins to register first (``load_plugins``); None: the ``MEMORY_CORE_ENGINE_PLUGINS``
            setting.

    Raises:
        ConfigError: a URL that is not a string or is blank, a malformed plugin entry, an unknown scheme (the
            message lists the known ones), or a registered ``module:callable`` target that cannot be imported (the
            message names it).
    """
    if not isinstance(url, str):
        raise ConfigError(f"engine URL must be a string, got {type(url).__name__}")
    if not url.strip():
        raise ConfigError("engine URL is blank")
    load_plugins(plugins)
    scheme = urlsplit(url.strip()).scheme.lower()
    if not scheme or scheme not in _REGISTRY:
        raise ConfigError(f"unknown engine scheme {scheme or url!r} (known: {', '.join(known_schemes())})")
    return _resolve(_REGISTRY[scheme])(url.strip())


def open_host_engine(url: str, *, plugins: str | None = None, scrub: bool | None = None) -> MemoryEngine:
    """``open_engine``, wrapped in a ``ScrubbingEngine``: how hosts, workers and commands open their engine.

    Args:
        url: The engine URL.
        plugins: As ``open_engine``.
        scrub: Wrap it; None: the ``MEMORY_CORE_SCRUB`` setting (on unless turned off; off is logged as a warning
            on every open).

    Raises:
        ConfigError: as ``open_engine``.
    """
    from memory_core.safety.host import guard

    return guard(open_engine(url, plugins=plugins), enabled=scrub)
