"""The host layer: what a host process wraps around the lifecycle (reference §6), which itself spawns nothing.

``PrefetchMemory`` (``prefetch``) keeps the live turn off engine reads with a bounded cache of packs refreshed
on its own pool.
"""

from __future__ import annotations

from memory_core.host.prefetch import (
    PrefetchedPack,
    PrefetchedTurn,
    PrefetchLimits,
    PrefetchMemory,
    PrefetchStats,
    refilter,
)

__all__ = ["PrefetchLimits", "PrefetchMemory", "PrefetchStats", "PrefetchedPack", "PrefetchedTurn", "refilter"]
