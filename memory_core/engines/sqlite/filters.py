"""``MetaFilter`` and ``Reach`` as SQL ``WHERE`` clauses (pure: values in, SQL text and parameters out).

Every field of the filter (contract reference §1.6) becomes an index-friendly predicate on a column:

| field | SQL |
| --- | --- |
| ``reach`` | ``ns = at``; ancestors ``ns IN (…)``; subtree: ``ns`` in ``[at, at[:-1] + '0')``, no ``service:`` below |
| ``kinds`` with ``reach`` | ``kind IN (…)`` inside each reach term: one ``(kind, ns)`` index lookup per term |
| exact fields | ``col = ?`` |
| ``folder``, ``file_path`` | ``col = p OR col`` in ``[p + '/', p + '0')`` (a prefix on a ``/`` boundary) |
| ``turns`` | ``turn_first = ? AND turn_last = ?`` |
| ``sources`` | ``IN (…)`` |
| ``tags_any`` | ``EXISTS`` in ``item_tags`` (beliefs carry exactly the ``belief`` tag) |
| observed window | ``observed_at >= after AND observed_at < before`` (NULL never matches) |

The result must agree with ``MetaFilter.matches`` row for row; ``tests/test_sqlite_filters.py`` checks that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_core.limits import BELIEF_TAG
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Reach

from .rows import ns_key, placeholders, to_us

__all__ = ["Where", "compile_filter", "reach_sql"]

_FALSE = "0"


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
        """The predicates joined by AND (``1`` when there are none)."""
        return " AND ".join(f"({p})" for p in self.parts) if self.parts else "1"


def _reach_terms(reach: Reach, col: str) -> list[tuple[str, list[Any]]]:
    """``reach.admits(ns)`` on ``col`` as disjoint OR terms, each one index lookup on ``col``.

    Exact and ancestor nodes are one ``col IN (…)`` (the node itself included); a subtree is one range
    ``[at, at[:-1] + '0')`` that includes the node itself, so a reach needs at most two terms (ancestors,
    subtree), never an OR inside a range.
    """
    at = ns_key(reach.at)
    above = [ns_key(n) for n in reach.at.ancestors_and_self()[:-1]] if reach.inherit else []
    if not reach.descendants:
        nodes = [*above, at]
        return [(f"{col} = ?" if len(nodes) == 1 else f"{col} IN ({placeholders(len(nodes))})", nodes)]
    if at == "":
        subtree: tuple[str, list[Any]] = (f"instr({col}, 'service:') = 0", [])
    else:
        subtree = (
            f"{col} >= ? AND {col} < ? AND instr(substr({col}, {len(at) + 1}), 'service:') = 0",
            [at, at[:-1] + "0"],
        )
    if not above:
        return [subtree]
    return [(f"{col} = ?" if len(above) == 1 else f"{col} IN ({placeholders(len(above))})", above), subtree]


def reach_sql(
    reach: Reach, col: str, *, kinds: Sequence[str] = (), kind_col: str | None = None
) -> tuple[str, list[Any]]:
    """The predicate for ``reach.admits(ns)`` on the namespace-key column ``col`` (and ``kind_col IN kinds``).

    With ``kinds`` the kind test is repeated inside each OR term, so SQLite serves every term from one
    ``(kind, ns)`` index lookup (an equality or a range on ``ns``) rather than scanning every namespace of
    the kind (sqlite.org/optoverview.html §3, §8: a term must constrain the index's columns by itself).

    Returns:
        The SQL text and its parameters, in order.

    Raises:
        ValueError: ``kinds`` without ``kind_col`` (a programming error).
    """
    terms = _reach_terms(reach, col)
    if kinds:
        if kind_col is None:
            raise ValueError("reach_sql: kinds need kind_col")
        test = f"{kind_col} IN ({placeholders(len(kinds))})"
        terms = [(f"{test} AND {sql}", [*kinds, *params]) for sql, params in terms]
    if len(terms) == 1:
        return terms[0]
    return " OR ".join(f"({sql})" for sql, _ in terms), [p for _, params in terms for p in params]


def _prefix(where: Where, col: str, prefix: str) -> None:
    """``meta.path_has_prefix`` in SQL: the prefix itself, or its ``/``-trimmed base and what lies below it.

    The range ``[base + "/", base + "0")`` holds exactly the strings starting ``base/`` ("0" follows "/"), so
    an index on the column serves it; an empty base (``""`` or ``"/"``) admits ``""`` and absolute paths only.
    """
    p = prefix.rstrip("/")
    where.add(f"{col} = ? OR {col} = ? OR ({col} >= ? AND {col} < ?)", prefix, p, p + "/", p + "0")


def compile_filter(flt: MetaFilter, alias: str, *, beliefs: bool = False) -> Where:
    """The ``WHERE`` predicates for ``flt`` over the ``items`` (or, with ``beliefs``, the ``beliefs``) table.

    Args:
        flt: The filter.
        alias: The table's alias in the query (``i``, ``b``).
        beliefs: Compile for ``beliefs``: every row is a ``learning`` tagged ``belief``.
    """
    where = Where()
    a = alias
    if beliefs:
        if not flt.admits_kind(ItemKind.LEARNING):
            where.add(_FALSE)
        if flt.tags_any and BELIEF_TAG not in flt.tags_any:
            where.add(_FALSE)
    kinds = [k.value for k in flt.kinds] if flt.kinds and not beliefs else []
    sql, params = reach_sql(flt.effective_reach(), f"{a}.ns", kinds=kinds, kind_col=f"{a}.kind")
    where.add(sql, *params)
    for name, col in (
        ("workspace", "workspace"),
        ("language", "language"),
        ("repo", "repo"),
        ("commit", "commit_sha"),
        ("url", "url"),
        ("thread_id", "thread_id"),
        ("agent_id", "agent_id"),
        ("tool_call", "tool_call"),
        ("source_id", "source_id"),
    ):
        value = getattr(flt, name)
        if value is not None:
            where.add(f"{a}.{col} = ?", value)
    if flt.folder is not None:
        _prefix(where, f"{a}.folder", flt.folder)
    if flt.file_path is not None:
        _prefix(where, f"{a}.file_path", flt.file_path)
    if flt.turns is not None:
        where.add(f"{a}.turn_first = ? AND {a}.turn_last = ?", flt.turns.first, flt.turns.last)
    if flt.sources:
        where.add(f"{a}.source_kind IN ({placeholders(len(flt.sources))})", *(s.value for s in flt.sources))
    if flt.tags_any and not beliefs:
        marks = placeholders(len(flt.tags_any))
        where.add(f"EXISTS (SELECT 1 FROM item_tags t WHERE t.seq = {a}.seq AND t.tag IN ({marks}))", *flt.tags_any)
    if flt.observed_after is not None or flt.observed_before is not None:
        where.add(f"{a}.observed_at IS NOT NULL")
        if flt.observed_after is not None:
            where.add(f"{a}.observed_at >= ?", to_us(flt.observed_after))
        if flt.observed_before is not None:
            where.add(f"{a}.observed_at < ?", to_us(flt.observed_before))
    return where
