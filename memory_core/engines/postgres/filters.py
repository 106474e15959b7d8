"""``MetaFilter`` and ``Reach`` as PostgreSQL ``WHERE`` clauses (pure: values in, SQL text and parameters out).

Every field of the filter (contract reference §1.6) is a predicate an index serves:

| field | SQL |
| --- | --- |
| ``reach`` | ancestors and node: ``ns = ANY(…)``; subtree: ``ns`` in ``[at, at[:-1] + '0')``, no ``service:`` |
| ``kinds`` | ``kind = ANY(…)`` |
| exact fields | ``col = %s`` |
| ``folder``, ``file_path`` | ``col = p OR col`` in ``[p + '/', p + '0')`` (a prefix on a ``/`` boundary) |
| ``turns`` | ``turn_first = %s AND turn_last = %s`` |
| ``sources`` | ``source_kind = ANY(…)`` |
| ``tags_any`` | ``tags && …`` (GIN; beliefs carry exactly the ``belief`` tag) |
| observed window | ``observed_at >= after AND observed_at < before`` (NULL never matches) |

A subtree is one B-tree range because ``ns`` is in the ``C`` collation. Every read of the engine compiles
its reach here, so a read never leaves its reach (seed 004: the resource is a mandatory filter on every read).
``tests/test_postgres_filters.py`` checks agreement with ``MetaFilter.matches``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory_core.engines.sqlite.rows import ns_key, to_us
from memory_core.limits import BELIEF_TAG
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Reach

__all__ = ["Where", "admits_beliefs", "compile_filter", "reach_sql"]


@dataclass
class Where:
    """A conjunction of SQL predicates with their parameters, in order."""

    parts: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, sql: str, *params: Any) -> None:
        """AND one more predicate."""
        self.parts.append(sql)
        self.params.extend(params)

    @property
    def sql(self) -> str:
        """The predicates joined by AND (``true`` when there are none)."""
        return " AND ".join(f"({p})" for p in self.parts) if self.parts else "true"


def reach_sql(reach: Reach, col: str) -> tuple[str, list[Any]]:
    """``reach.admits(ns)`` on the namespace-key column ``col``: at most two index-served OR terms.

    Returns:
        The SQL text and its parameters, in order.
    """
    at = ns_key(reach.at)
    above = [ns_key(n) for n in reach.at.ancestors_and_self()[:-1]] if reach.inherit else []
    if not reach.descendants:
        return f"{col} = ANY(%s::text[])", [[*above, at]]
    if at == "":
        subtree = f"strpos({col}, 'service:') = 0"
        sub_params: list[Any] = []
    else:
        subtree = f"{col} >= %s AND {col} < %s AND strpos(substr({col}, {len(at) + 1}), 'service:') = 0"
        sub_params = [at, at[:-1] + "0"]
    if not above:
        return subtree, sub_params
    return f"({col} = ANY(%s::text[])) OR ({subtree})", [above, *sub_params]


def _prefix(where: Where, col: str, prefix: str) -> None:
    """``meta.path_has_prefix``: the prefix itself, or its ``/``-trimmed base and what lies below it."""
    p = prefix.rstrip("/")
    where.add(f"{col} = %s OR {col} = %s OR ({col} >= %s AND {col} < %s)", prefix, p, p + "/", p + "0")


_EXACT = (
    ("workspace", "workspace"),
    ("language", "language"),
    ("repo", "repo"),
    ("commit", "commit_sha"),
    ("url", "url"),
    ("thread_id", "thread_id"),
    ("agent_id", "agent_id"),
    ("tool_call", "tool_call"),
    ("source_id", "source_id"),
)


def admits_beliefs(flt: MetaFilter) -> bool:
    """Whether ``flt`` can admit a built belief: a ``learning`` tagged ``belief`` (no statement needed when not)."""
    return flt.admits_kind(ItemKind.LEARNING) and (not flt.tags_any or BELIEF_TAG in flt.tags_any)


def compile_filter(flt: MetaFilter, alias: str, *, beliefs: bool = False) -> Where:
    """The ``WHERE`` predicates for ``flt`` over ``items`` (or, with ``beliefs``, ``beliefs``) aliased ``alias``.

    Args:
        flt: The filter.
        alias: The table's alias in the query (``i``, ``b``).
        beliefs: Compile for ``beliefs``: every row is a ``learning`` tagged ``belief``.
    """
    where = Where()
    a = alias
    if beliefs:
        if not admits_beliefs(flt):
            where.add("false")
    elif flt.kinds:
        where.add(f"{a}.kind = ANY(%s::text[])", [k.value for k in flt.kinds])
    sql, params = reach_sql(flt.effective_reach(), f"{a}.ns")
    where.add(sql, *params)
    for name, col in _EXACT:
        value = getattr(flt, name)
        if value is not None:
            where.add(f"{a}.{col} = %s", value)
    if flt.folder is not None:
        _prefix(where, f"{a}.folder", flt.folder)
    if flt.file_path is not None:
        _prefix(where, f"{a}.file_path", flt.file_path)
    if flt.turns is not None:
        where.add(f"{a}.turn_first = %s AND {a}.turn_last = %s", flt.turns.first, flt.turns.last)
    if flt.sources:
        where.add(f"{a}.source_kind = ANY(%s::text[])", [s.value for s in flt.sources])
    if flt.tags_any and not beliefs:
        where.add(f"{a}.tags && %s::text[]", list(flt.tags_any))
    if flt.observed_after is not None or flt.observed_before is not None:
        where.add(f"{a}.observed_at IS NOT NULL")
        if flt.observed_after is not None:
            where.add(f"{a}.observed_at >= %s", to_us(flt.observed_after))
        if flt.observed_before is not None:
            where.add(f"{a}.observed_at < %s", to_us(flt.observed_before))
    return where
