"""Scrubbing where a host, a worker or a command opens its engine: on unless ``MEMORY_CORE_SCRUB=off``."""

from __future__ import annotations

import logging

from memory_core.engine import MemoryEngine
from memory_core.safety.detector import Policy
from memory_core.safety.engine import ScrubbingEngine
from memory_core.settings import get_settings

__all__ = ["OFF_WARNING", "guard", "scrubbing_enabled"]

log = logging.getLogger("memory_core.safety")

OFF_WARNING = (
    "MEMORY_CORE_SCRUB=off: scrubbing is OFF; credentials and personal identifiers written to engine {engine} are "
    "stored verbatim and can be read back"
)
"""What every open says while scrubbing is off."""


def scrubbing_enabled() -> bool:
    """The ``MEMORY_CORE_SCRUB`` setting (True unless turned off).

    Raises:
        ConfigError: a malformed ``MEMORY_CORE_`` setting.
    """
    return get_settings().scrub


def guard(engine: MemoryEngine, *, enabled: bool | None = None, policy: Policy | None = None) -> MemoryEngine:
    """``engine`` wrapped in a ``ScrubbingEngine``, or, when scrubbing is off, ``engine`` itself and a warning.

    Args:
        engine: The engine just opened.
        enabled: Wrap it; None: ``scrubbing_enabled()``.
        policy: The scrub policy; None: ``Policy.default()``.
    """
    if enabled if enabled is not None else scrubbing_enabled():
        return engine if isinstance(engine, ScrubbingEngine) else ScrubbingEngine(engine, policy)
    log.warning(OFF_WARNING.format(engine=engine.descriptor().id))
    return engine
