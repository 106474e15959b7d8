"""Checks 7-8 of the contract reference §2: store_many and store_with."""

from __future__ import annotations

from memory_core.conformance.context import CheckContext, show_ids
from memory_core.consolidation import WriteOptions

__all__ = ["store_many", "store_with"]


def store_many(c: CheckContext) -> str:
    """A batch of 3 documents stores in order, lists on return, and replays as a whole; ``[]`` is refused.

    Three receipts, none a replay, ``receipt[i].id == items[i].fingerprint()``; every item lists on return;
    sending the same batch again gives three replays; an empty batch is ``InvalidRequest``.
    """
    items = [c.run.document(f"store many {i}") for i in range(1, 4)]
    receipts = c.call(c.engine.store_many, items)
    c.ensure(len(receipts) == 3, f"a batch of 3 answered {len(receipts)} receipts")
    replayed = [i for i, r in enumerate(receipts) if r.replayed]
    c.ensure(not replayed, f"first stores reported replays at positions {replayed}")
    got = [r.id for r in receipts]
    wanted = [item.id for item in items]
    c.ensure(got == wanted, f"receipts are not in item order: got {show_ids(got)}, items are {show_ids(wanted)}")
    listed = set(c.ids(c.run.filter()))
    missing = [i for i in wanted if i not in listed]
    c.ensure(not missing, f"batch items did not list on return: {show_ids(missing)}")
    again = c.call(c.engine.store_many, items)
    c.ensure(
        len(again) == 3 and all(r.replayed for r in again),
        f"re-sending the batch answered {[r.to_dict() for r in again]}, not 3 replays",
    )
    c.refuses("an empty batch", c.engine.store_many, [])
    return "3 in order"


def store_with(c: CheckContext) -> str:
    """``visible`` answers the fingerprint, lists at once and replays on a repeat; ``accepted`` answers the id.

    Source: reference §2 check 8 and §1.10 (``WaitFor``).
    """
    visible = c.run.document("store with visible")
    receipt = c.call(c.engine.store_with, visible, WriteOptions.visible())
    c.ensure(receipt.id == visible.id, f"a visible store answered {receipt.id} for an item fingerprinted {visible.id}")
    c.ensure(receipt.id in c.ids(c.run.filter()), "a store waiting for visibility did not list on return")
    again = c.call(c.engine.store_with, visible, WriteOptions.visible())
    c.ensure(again.replayed, "storing a visible item again was not a replay")

    accepted = c.run.document("store with accepted")
    receipt = c.call(c.engine.store_with, accepted, WriteOptions.accepted())
    c.ensure(
        receipt.id == accepted.id, f"an accepted store answered {receipt.id} for an item fingerprinted {accepted.id}"
    )
    return "visible and accepted"
