"""Bounded candidates for a ``max_scopes`` read: which scopes, and how much of each (issue 12).

A ``fetch(max_scopes=N)`` ranks the items of at most N scopes (reference §1.3, ``reference.choose_scopes``).
Without a bound on each scope, one scope holding 100k conversation turns (a big agent) still made a section's
cost follow the store, and every small agent reading a Team section paid for it. So, a *memory-core* extension:
in a ``max_scopes`` read, a scope's **conversations** rank over its newest ``SCOPE_WINDOW`` turns (by write
order); documents and learnings are not windowed (a brain passage does not age). A section reading
``max_scopes`` scopes of conversations then ranks at most ``max_scopes × SCOPE_WINDOW`` rows, whatever the
store holds; older turns stay reachable through beliefs, unbounded reads, ``list`` and ``get``.

Everything here is pure: arrays in, a mask out. Scopes are handled by namespace code, never by building a
Python list of every row's namespace.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from memory_core.meta import ItemKind

from .index import CandidateRows
from .search import BoolArray, IntArray

__all__ = ["SCOPE_WINDOW", "newest_per_scope", "row_scopes", "windowed"]

SCOPE_WINDOW: Final = 2_000
"""Newest conversation turns of one scope a ``max_scopes`` read ranks (memory-core choice: above every LoCoMo
speaker's history, so the evaluation is unchanged, and ~0.3 ms of vector products per scope)."""
_CONVERSATION: Final = [k.value for k in ItemKind.all()].index(ItemKind.CONVERSATION.value)
"""The conversation kind's code in ``IndexView.kind_code`` (``ItemIndex`` codes kinds in ``ItemKind.all()`` order)."""


def row_scopes(rows: CandidateRows) -> tuple[IntArray, list[str]]:
    """Each row's namespace code, and the namespace key of every code (rows read from SQL coded alike)."""
    names = list(rows.ns_keys)
    held: IntArray = rows.view.ns_code[rows.pos].astype(np.int64)
    if not rows.extra_ns:
        return held, names
    code = {name: i for i, name in enumerate(names)}
    extra = np.fromiter((code.setdefault(ns, len(code)) for ns in rows.extra_ns), dtype=np.int64)
    names.extend(list(code)[len(names) :])
    return np.concatenate([held, extra]), names


def windowed(rows: CandidateRows) -> BoolArray:
    """Which rows the window applies to: held conversation rows (rows read from SQL are few and kept)."""
    kinds: npt.NDArray[np.int8] = rows.view.kind_code[rows.pos]
    out: BoolArray = np.concatenate([kinds == _CONVERSATION, np.zeros(len(rows.extra_ns), dtype=bool)])
    return out


def newest_per_scope(codes: IntArray, applies: BoolArray, window: int) -> BoolArray:
    """Keep every row the window does not apply to, and of the others the last ``window`` of each code; pure.

    Args:
        codes: Each row's scope code, rows in ascending write order.
        applies: Which rows the window applies to.
        window: Rows kept per code, newest (last) first.
    """
    keep = np.ones(len(codes), dtype=bool)
    at = np.flatnonzero(applies)
    if len(at) <= window:
        return keep
    grouped = at[np.argsort(codes[at], kind="stable")]  # by code, write order within a code
    sorted_codes = codes[grouped]
    ends = np.searchsorted(sorted_codes, sorted_codes, side="right")
    from_end = ends - 1 - np.arange(len(grouped))
    keep[grouped[from_end >= window]] = False
    return keep
