"""The belief distiller: pure functions from stored items to beliefs (data in, data out, no I/O).

An engine builds a scope's beliefs incrementally in three steps, doing the I/O itself in between:

1. ``extract(new_items)`` → ``Statement`` values (what each new item says; see ``extract``);
2. ``lookup(statements)`` → the keys, subjects and anchors of the existing beliefs those statements may touch,
   which the engine loads by index;
3. ``merge(statements, loaded)`` → every belief created or changed, in its new state, for the engine to save.

On forget, ``retract(affected, removed_ids, siblings)`` shrinks or deletes the beliefs derived from removed
items. Beliefs record the ids of the items they were derived from (``Belief.evidence``); their hit id is
``belief_id(namespace, from_kind, key)``, stable across rebuilds.
"""

from memory_core.beliefs.dates import format_day, resolve
from memory_core.beliefs.extract import extract, speaker_name
from memory_core.beliefs.merge import ANCHOR_WINDOW, NEAR_DUPLICATE, Lookup, lookup, merge, retract
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

__all__ = [
    "ANCHOR_WINDOW",
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
    "resolve",
    "retract",
    "speaker_name",
]
