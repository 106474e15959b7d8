"""Flower's command line from settings: basic auth always on, readable task arguments.

Flower 2.x refuses its HTTP API without auth unless ``FLOWER_UNAUTHENTICATED_API`` is set (reference
``celery-reliability.md`` §6.2); we always pass ``--basic-auth`` from ``Settings.flower_user``/``flower_password``
(compared with ``hmac.compare_digest`` since Flower 2.0). Task arguments show the ``argsrepr`` ``JobQueue``
sets (``build_beliefs agent:alice [conversation]``), escaped by Flower (XSS fixes #594/#650).
"""

from __future__ import annotations

from memory_core.settings import Settings

__all__ = ["DEFAULT_PASSWORD", "flower_argv"]

DEFAULT_PASSWORD = "change-me"
"""The settings' placeholder password; ``memory-core flower`` warns when it is still in use."""


def flower_argv(settings: Settings, port: int | None = None, address: str = "127.0.0.1") -> list[str]:
    """``celery`` arguments that start Flower with basic auth on ``address:port``.

    Raises:
        ValueError: a blank user or password, or a ``:``/``,`` in the user (Flower splits on them).
    """
    user = settings.flower_user.strip()
    password = settings.flower_password.get_secret_value()
    if not user or not password:
        raise ValueError("flower needs MEMORY_CORE_FLOWER_USER and MEMORY_CORE_FLOWER_PASSWORD")
    if ":" in user or "," in user or "," in password:
        raise ValueError("flower user may not contain ':' or ',', nor the password ','")
    return [
        "flower",
        f"--port={port or settings.flower_port}",
        f"--address={address}",
        f"--basic-auth={user}:{password}",
        "--purge_offline_workers=60",
    ]
