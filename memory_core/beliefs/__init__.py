"""The belief distiller: pure functions from stored items to beliefs (data in, data out, no I/O).

An engine builds a scope's beliefs incrementally in three steps, doing the I/O itself in between:

1. ``extract(new_items)`` → ``Statement`` values (what each new item says; see ``extract``);
2. ``lookup(statements)`` → the keys, subjects and anchors of the existing beliefs those statements may touch
   (by key, the *active* belief per subject, the newest per anchor), which the engine loads by index;
3. ``merge(statements, loaded, held)`` → every belief created or changed, in its new state, for the engine to
   save; each names the evidence it gained (``Belief.added``), which the engine appends.

A belief keeps no list of its evidence (an engine stores one row per evidence item); it counts it
(``Belief.support``). On forget, ``retract(affected, survivors, others)`` rebuilds the beliefs that lost
evidence from their surviving items, or deletes them. A belief's hit id is ``belief_id(namespace, from_kind,
key)``, stable across rebuilds.
"""

from memory_core.beliefs.dates import format_day, resolve
from memory_core.beliefs.extract import extract, said_at, speaker_name
from memory_core.beliefs.merge import (
    ANCHOR_WINDOW,
    MIN_SHARED_TERMS,
    NEAR_DUPLICATE,
    Lookup,
    lookup,
    merge,
    near_duplicate,
)
from memory_core.beliefs.model import (
    Belief,
    BeliefStatus,
    Category,
    SourceItem,
    Statement,
    belief_id,
    common_meta,
    confidence_for,
)
from memory_core.beliefs.retract import rebuild, retract, statement_for

__all__ = [
    "ANCHOR_WINDOW",
    "MIN_SHARED_TERMS",
    "NEAR_DUPLICATE",
    "Belief",
    "BeliefStatus",
    "Category",
    "Lookup",
    "SourceItem",
    "Statement",
    "belief_id",
    "common_meta",
    "confidence_for",
    "extract",
    "format_day",
    "lookup",
    "merge",
    "near_duplicate",
    "rebuild",
    "resolve",
    "retract",
    "said_at",
    "speaker_name",
    "statement_for",
]
