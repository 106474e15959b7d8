"""``PostgresView``: the read-only engine ``PostgresEngine.as_of(lsn)`` returns (seed 002, ``docs/log-model.md``).

It shares its engine's pool and caches and reads the state as of its LSN (``log_view``): the same ``fetch``,
``recall``, ``list``, ``get`` and ``beliefs``, and the log up to that LSN. Every write raises ``Unsupported``,
and closing it leaves the engine's pool open.
"""

from __future__ import annotations

from typing import Any, NoReturn

from memory_core.descriptor import EngineDescriptor
from memory_core.errors import Unsupported

from .engine import PostgresEngine
from .log_engine import LogHooks
from .log_ops import Past

__all__ = ["PostgresView", "view_of"]


class PostgresView(PostgresEngine):
    """A read-only ``PostgresEngine`` over the state as of ``at`` (built by ``view_of``, never constructed)."""

    at: int

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise Unsupported(f"a view as of LSN {self.at} is read-only")

    _store = _store_with = _store_many = _store_many_with = _refuse
    _forget = _erase = _consolidate = _refuse
    _retract = _rollback = _move = _refuse
    build_scope = _refuse

    def descriptor(self) -> EngineDescriptor:
        """The engine's, labelled with the LSN."""
        base = super().descriptor()
        return base.model_copy(update={"label": f"{base.label} (as of LSN {self.at})"})

    def close(self) -> None:
        """Nothing to release: the pool is the engine's."""

    def __repr__(self) -> str:
        return f"PostgresView({self.options.masked!r}, at={self.at})"


def view_of(engine: LogHooks, past: Past, lsn: int) -> PostgresView:
    """A view of ``engine`` reading the state ``past`` describes (asked for at ``lsn``)."""
    view = PostgresView.__new__(PostgresView)
    view.__dict__.update(engine.__dict__)
    view._past = past
    view.at = lsn
    return view
