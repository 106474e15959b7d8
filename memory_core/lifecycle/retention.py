"""Retention: daily maintenance that bounds the logged turns below a layout root (seed 004 "Retention"; issue 20).

Seed 004 keeps episodes (here: the one-turn conversations ``AgentMemory`` logs, reference §4.3) for 90 days and
at most the 5,000 newest per resource (here: per layout root); facts are never pruned automatically. So:

* **What is considered**: conversation items in ``subtree(root)`` not already in the ``archive`` tier, nothing
  else: facts and other learnings, documents and built beliefs are never selected.
* **What goes** (``select``, pure): turns observed before ``now - max_age_days``; then, of the rest, all but the
  ``max_turns`` newest (by ``observed_at``, then id; an undated turn counts as the oldest, since nothing shows it
  is new, but is never "too old").
* **How it goes**: ``forget`` by id, so the engine's forget rules apply: beliefs derived only from removed turns go
  and a belief with surviving evidence is rebuilt from it (``docs/engines.md``). With ``archive`` and an engine
  that declares ``tiers``, the turns are ``move``d to the ``archive`` tier instead (kept, read only on request);
  without tiers ``archive`` falls back to forgetting, and the report says so.

``plan`` reads and decides (a dry run stops there); ``apply`` acts on a plan. The clock is a parameter, so tests
run it at any date.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from memory_core._model import format_timestamp
from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.memory_log import Tier
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.query import ForgetTarget, ListRequest
from memory_core.settings import Settings, get_settings
from memory_core.wording import plural

__all__ = ["RetentionPlan", "RetentionPolicy", "apply", "plan", "select"]

_PAGE: Final = 1000
_CHUNK: Final = 1000
"""Ids per forget or move (a write transaction each, so a live turn never waits behind one huge delete)."""
ARCHIVE_REASON: Final = "retention: past the age or count limit"


@dataclass(frozen=True)
class RetentionPolicy:
    """``{max_age_days, max_turns, archive}`` (defaults 90, 5,000 and off: seed 004).

    Raises:
        InvalidRequest: a limit that is not positive (``max_age_days``, ``max_turns``).
    """

    max_age_days: float = 90.0
    max_turns: int = 5_000
    archive: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_age_days, bool) or not self.max_age_days > 0:
            raise InvalidRequest("must be a positive number of days", field="max_age_days")
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns <= 0:
            raise InvalidRequest("must be a positive integer", field="max_turns")

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> RetentionPolicy:
        """``MEMORY_CORE_RETENTION_MAX_AGE_DAYS``, ``…_MAX_TURNS`` and ``…_ARCHIVE``."""
        s = settings or get_settings()
        return cls(s.retention_max_age_days, s.retention_max_turns, s.retention_archive)


def select(
    turns: Iterable[tuple[str, datetime | None]], now: datetime, policy: RetentionPolicy
) -> tuple[list[str], list[str], int]:
    """Which turns go; pure.

    Args:
        turns: ``(id, observed_at)`` of every turn considered.
        now: The clock (aware).
        policy: The limits.

    Returns:
        ``(too_old, over_count, kept)``: ids observed before ``now - max_age_days``; ids past the ``max_turns``
        newest of the rest (oldest first); how many stay.
    """
    cutoff = now - timedelta(days=policy.max_age_days)
    too_old: list[str] = []
    young: list[tuple[str, datetime | None]] = []
    for item_id, at in turns:
        if at is not None and at < cutoff:
            too_old.append(item_id)
        else:
            young.append((item_id, at))
    young.sort(key=lambda t: (t[1] is not None, t[1] or now, t[0]), reverse=True)  # newest first, undated last
    over = [item_id for item_id, _ in reversed(young[policy.max_turns :])]
    return too_old, over, min(len(young), policy.max_turns)


@dataclass(frozen=True)
class RetentionPlan:
    """What one retention run under ``root`` removes (a dry run's answer).

    Attributes:
        root: The layout root.
        now: The clock it ran at.
        policy: The limits.
        scanned: Turns considered.
        too_old: Ids older than ``max_age_days``.
        over_count: Ids past the ``max_turns`` newest.
        kept: Turns that stay.
        action: ``forget`` or ``archive`` (archive only when asked for and the engine declares tiers).
        note: Why ``archive`` was asked for but not possible, if it was.
    """

    root: Namespace
    now: datetime
    policy: RetentionPolicy
    scanned: int
    too_old: tuple[str, ...]
    over_count: tuple[str, ...]
    kept: int
    action: str = "forget"
    note: str | None = None
    done: int | None = field(default=None)

    @property
    def ids(self) -> tuple[str, ...]:
        """Every id that goes, the too old first."""
        return (*self.too_old, *self.over_count)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (counts, not ids)."""
        out: dict[str, Any] = {
            "root": str(self.root),
            "now": format_timestamp(self.now),
            "max_age_days": self.policy.max_age_days,
            "max_turns": self.policy.max_turns,
            "scanned": self.scanned,
            "too_old": len(self.too_old),
            "over_count": len(self.over_count),
            "kept": self.kept,
            "action": self.action,
        }
        if self.note is not None:
            out["note"] = self.note
        if self.done is not None:
            out["done"] = self.done
        return out

    def describe(self, dry_run: bool) -> list[str]:
        """Lines a person reads: what was scanned, what goes (or would go) and why."""
        cutoff = self.now - timedelta(days=self.policy.max_age_days)
        verb = (
            ("would archive" if dry_run else "archived")
            if self.action == "archive"
            else ("would forget" if dry_run else "forgot")
        )
        lines = [
            f"retention under {self.root} at {format_timestamp(self.now)}"
            f" (keep turns from the last {plural(float(self.policy.max_age_days), 'day')},"
            f" at most {self.policy.max_turns} newest)",
            f"  {plural(self.scanned, 'turn')} scanned; {verb} {len(self.ids)}: {len(self.too_old)} observed before "
            f"{format_timestamp(cutoff)}, {len(self.over_count)} past the {self.policy.max_turns} newest",
            f"  {plural(self.kept, 'turn')} kept; facts, other learnings, documents and beliefs are never pruned",
        ]
        if self.note:
            lines.append(f"  note: {self.note}")
        return lines


def _turns(engine: MemoryEngine, root: Namespace) -> list[tuple[str, datetime | None]]:
    flt = MetaFilter(reach=Reach.subtree(root), kinds=(ItemKind.CONVERSATION,))
    out: list[tuple[str, datetime | None]] = []
    cursor: str | None = None
    while True:
        page = engine.list(ListRequest(filter=flt, limit=_PAGE, cursor=cursor))
        out.extend(
            (h.id, h.meta.observed_at)
            for h in page.items
            if h.kind is ItemKind.CONVERSATION and h.tier is not Tier.ARCHIVE  # archived: already out of the way
        )
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def plan(engine: MemoryEngine, root: Namespace, now: datetime, policy: RetentionPolicy | None = None) -> RetentionPlan:
    """Read the turns under ``root`` and decide what goes; nothing is changed (the dry run).

    Raises:
        InvalidRequest: ``field="now"``: a naive clock.
        MemoryCoreError: the engine's error.
    """
    if now.utcoffset() is None:
        raise InvalidRequest("the clock needs a timezone", field="now")
    p = policy or RetentionPolicy.from_settings()
    turns = _turns(engine, root)
    too_old, over, kept = select(turns, now, p)
    action, note = "forget", None
    if p.archive:
        if engine.descriptor().tiers:
            action = "archive"
        else:
            note = f"archive asked for, but engine `{engine.descriptor().id}` declares no tiers: turns are forgotten"
    return RetentionPlan(root, now, p, len(turns), tuple(too_old), tuple(over), kept, action, note)


def _chunks(ids: Sequence[str]) -> Iterable[tuple[str, ...]]:
    for start in range(0, len(ids), _CHUNK):
        yield tuple(ids[start : start + _CHUNK])


def apply(engine: MemoryEngine, planned: RetentionPlan) -> RetentionPlan:
    """Forget (or archive) what ``planned`` selected, in chunks; the plan with ``done`` set.

    Raises:
        MemoryCoreError: the engine's error (chunks already done stay done; a rerun plans the rest).
    """
    done = 0
    for chunk in _chunks(planned.ids):
        if planned.action == "archive":
            change = engine.move(chunk, Tier.ARCHIVE, ARCHIVE_REASON)
            done += len(change.records)
        else:
            done += engine.forget(ForgetTarget(ids=chunk)).forgotten
    return RetentionPlan(**{**planned.__dict__, "done": done})
