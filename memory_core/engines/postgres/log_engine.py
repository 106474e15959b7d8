"""The log hooks of ``PostgresEngine`` (seed 002; ``log``, ``log_ops``, ``log_view``), as a mixin.

``current_lsn``, ``log``, ``history``, ``as_of``, ``retract``, ``rollback`` and ``move`` of the contract
(``MemoryEngine`` checks their arguments first). Each runs in one transaction of the engine's pool. The view
``as_of`` returns (``log_view_engine.PostgresView``) reads the state at its LSN through ``_past``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from memory_core.memory_log import MAX_LOG_PAGE, LogChange, LogPage, LogRecord, Tier

from . import log, log_ops
from .driver import Conn

if TYPE_CHECKING:
    from .engine import PostgresEngine

__all__ = ["LogHooks"]

_T = TypeVar("_T")


class LogHooks:
    """The log hooks, for ``PostgresEngine`` (which supplies ``_run``)."""

    _past: log_ops.Past | None = None
    """The state as of an LSN this engine reads (``as_of``'s view); None: now."""

    def _run(self, fn: Callable[[Conn], _T]) -> _T:
        raise NotImplementedError  # ``PostgresEngine._run``

    def _upto(self) -> int | None:
        return None if self._past is None else self._past.end

    def _current_lsn(self) -> int:
        upto = self._upto()
        return self._run(log.current_lsn) if upto is None else upto

    def _log(self, since: int, limit: int) -> LogPage:
        records, more = self._run(partial(log.page, since=since, limit=min(limit, MAX_LOG_PAGE), upto=self._upto()))
        return LogPage(records=tuple(records), next_since=records[-1].lsn if more and records else None)

    def _history(self, item_id: str) -> tuple[LogRecord, ...]:
        return self._run(partial(log.history, item_id=item_id, upto=self._upto()))

    def _as_of(self, lsn: int) -> PostgresEngine:
        from .log_view_engine import view_of  # the view subclasses the engine

        return view_of(self, self._run(partial(log_ops.past, lsn=lsn)), lsn)

    def _retract(self, ids: tuple[str, ...], reason: str) -> LogChange:
        return self._run(partial(log_ops.retract, ids=ids, reason=reason))

    def _rollback(self, to_lsn: int, reason: str) -> LogChange:
        return self._run(partial(log_ops.rollback, to_lsn=to_lsn, reason=reason))

    def _move(self, ids: tuple[str, ...], tier: Tier, reason: str) -> LogChange:
        return self._run(partial(log_ops.move, ids=ids, tier=tier, reason=reason))
