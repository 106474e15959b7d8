"""Whether an engine is fresh: holds nothing the conformance suite did not write.

The suite writes, forgets and, on an engine that keeps a log, rolls the log back to LSNs taken inside its
checks. A rollback is store-wide by design (seed 002: ``rollback(to_lsn)`` undoes every record after the LSN,
whoever wrote it), so a run beside another writer undoes that writer's changes, and on a store no one else writes
the run still leaves its own log records behind (a forget keeps a tombstone). ``memory-core conformance``
therefore runs only against a store that holds nothing yet: a fresh ``sqlite:///…`` file, or ``reference://``.

"Holds nothing" is read through the ``MemoryEngine`` contract, one record at most per read: the first log record
(engines declaring ``log``), the first listed item, and the first exported item (which also sees forgotten and
retracted items; skipped where ``export`` is ``Unsupported``).
"""

from __future__ import annotations

from memory_core.engine import MemoryEngine
from memory_core.errors import Unsupported
from memory_core.query import ListRequest

__all__ = ["held_data"]


def held_data(engine: MemoryEngine) -> str | None:
    """What ``engine`` already holds, in words, or None when it holds nothing (a fresh store).

    Args:
        engine: The engine about to be tested; only read (three reads of at most one record each).

    Returns:
        None when it holds nothing; else a short phrase such as ``"its log is at LSN 673"`` or
        ``"it holds items (one is `ab12…`)"``.

    Raises:
        MemoryCoreError: the engine failed to answer a read (``EngineUnavailable``, ``EngineError``, …).
    """
    if engine.descriptor().log:
        page = engine.log(0, 1)
        if page.records:
            return f"its log is at LSN {engine.current_lsn()}"
    listed = engine.list(ListRequest(limit=1)).items
    if listed:
        return f"it holds items (one is `{listed[0].id}`)"
    try:
        exported = engine.export(ListRequest(limit=1)).items
    except Unsupported:
        return None
    if exported:
        return f"it holds items (one is `{exported[0].id}`, not live)"
    return None
