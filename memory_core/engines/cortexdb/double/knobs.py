"""The doubles' fault knobs (contract reference §5.6); set them on ``double.knobs`` at any time."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from memory_core.errors import InvalidRequest

__all__ = ["Knobs"]


@dataclass
class Knobs:
    """What a double breaks, and when.

    Attributes:
        fail_all: Every request answers 503.
        accept_token: Only this bearer is accepted (others: 401); None accepts any non-blank bearer.
        hide_listing_for: Each event written from now on stays out of its scope's next N listings.
        rate_limit_after: After this many requests, answer 429s (None: never).
        rate_limit_count: How many 429s to answer once the limit is reached.
        rate_limit_retry_after: The ``Retry-After`` seconds a 429 carries (None: no header).
        apply_then_fail: The next N writes are applied, then answered 500.
        claim_then_fail: The next N hosted writes claim their Idempotency-Key, then answer 500 unapplied.
        fail_nth_experience: The n-th experience request (1-based, single or bulk) answers 500 unapplied.
        recall_down: Recall and answer requests answer 503.
        arm_after_write: ``fail_all`` and ``recall_down`` bite only once a write has been applied.
        whoami: Direct: whoami names the caller and requests must carry it as ``X-Cortex-Actor`` (401
            ``ACTOR_MISMATCH`` otherwise); False: whoami answers 404 and no actor is asked for.
        build_as_job: Direct: a belief build answers ``{job_id}`` (a started job) instead of its counts.
        fail_registration: Direct: ``POST v1/scopes`` answers this status (None: it registers).
        deny_attribution: Direct: a write naming an ``observed_actor`` other than the caller, or a ``subject``,
            is refused ``403 POLICY_DENIED`` (a bulk write whole), as CortexDB does without the
            ``scope.write.on_behalf_of`` / ``scope.write.about_other`` capabilities.
        tenant: Hosted: the tenant root (``org:42``) the backend pins every scope under: scopes (and a listing's
            ``prefix``) sent are stored below it, and listings report the full path (reference §5.4).
    """

    fail_all: bool = False
    accept_token: str | None = None
    hide_listing_for: int = 0
    rate_limit_after: int | None = None
    rate_limit_count: int = 1
    rate_limit_retry_after: int | None = 1
    apply_then_fail: int = 0
    claim_then_fail: int = 0
    fail_nth_experience: int | None = None
    recall_down: bool = False
    arm_after_write: bool = False
    whoami: bool = True
    build_as_job: bool = False
    fail_registration: int | None = None
    deny_attribution: bool = False
    tenant: str | None = None

    def update(self, changes: dict[str, Any]) -> None:
        """Set the named knobs.

        Raises:
            InvalidRequest: an unknown knob, naming it.
        """
        names = {f.name for f in fields(self)}
        for name, value in changes.items():
            if name not in names:
                raise InvalidRequest(f"unknown knob (known: {', '.join(sorted(names))})", field=name)
            setattr(self, name, value)
