"""Single flight and coalescing per (engine, scope), on a ``Coordination`` store: ``single_flight`` and its keys.

A build of one scope runs under that scope's lock (owner token, compare-and-delete release) whose lease one
keeper thread per store extends every third of its TTL (a short build starts no thread), no sooner than
``gap_s`` after the scope's last pass started; a trigger that finds it taken or too soon coalesces, is covered
or is deferred by the gate's rules (``workers.gate``). On the submit side, identical triggers while a job is
still queued collapse into that job (``pending_key``).

Source: reference ``celery-reliability.md`` §2.4 (lock + pending flag, N triggers → at most one extra run),
https://redis.io/topics/distlock (token, compare-and-delete), Kleppmann 2016 (a lease is not a mutex: the
builds themselves are idempotent, so a lease lost mid-build costs a repeat, never a wrong belief).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Generic, TypeVar

from memory_core._model import ContractModel
from memory_core.consolidation import BuildScope
from memory_core.engines import engine_identity
from memory_core.errors import EngineUnavailable
from workers.coordination import Coordination, Enter, Leave

__all__ = [
    "Flight",
    "Lease",
    "LeaseKeeper",
    "engine_key",
    "job_digest",
    "keeper_of",
    "pending_key",
    "scope_key",
    "single_flight",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


def engine_key(url: str) -> str:
    """16 hex digits naming the store an engine URL names (hashed, and no password in it).

    ``engines.engine_identity``: two spellings of one database give one key, so a worker takes the host's jobs.
    """
    return hashlib.sha256(engine_identity(url).encode()).hexdigest()[:16]


def scope_key(engine: str, scope: BuildScope) -> str:
    """16 hex digits naming (engine, namespace, kinds): the unit of single flight."""
    kinds = ",".join(sorted(k.value for k in scope.kinds))
    return hashlib.sha256(f"{engine}\x00{scope.namespace}\x00{kinds}".encode()).hexdigest()[:16]


def pending_key(engine: str, job: ContractModel) -> str:
    """32 hex digits naming (engine, job JSON): identical triggers share one pending job."""
    return hashlib.sha256(f"{engine}\x00{job.to_json()}".encode()).hexdigest()[:32]


def job_digest(task: str, job: ContractModel) -> str:
    """32 hex digits naming (task, job JSON): the payload a job id is bound to (``Coordination.claim_job``)."""
    return hashlib.sha256(f"{task}\x00{job.to_json()}".encode()).hexdigest()[:32]


class Lease:
    """One build's hold on its scope's lock, kept alive by the store's ``LeaseKeeper`` while the build runs.

    A build shorter than a third of the lease costs no thread and no extension: it is registered, then removed.

    Attributes:
        lost: True once an extension found the lock owned by someone else (or expired).
    """

    def __init__(self, keeper: LeaseKeeper, scope: str, token: str, ttl_s: int) -> None:
        self.keeper = keeper
        self.scope = scope
        self.token = token
        self.ttl_s = ttl_s
        self.due = 0.0
        self.lost = False

    def __enter__(self) -> Lease:
        self.keeper.hold(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.keeper.release(self)


class LeaseKeeper:
    """One daemon thread per coordination store that extends, every third of their TTL, the leases still held.

    Started by the first lease that is held (and again in a forked child, which has no thread of its parent);
    a lease released before its first third has passed is never touched. An extension that finds the lock gone
    marks the lease lost; one that cannot reach the store is tried again a third later (the lease has 2/3 left).
    """

    def __init__(self, coordination: Coordination) -> None:
        self._coordination = coordination
        self._held: dict[int, Lease] = {}
        self._pid = os.getpid()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        """Keep ``lease`` alive from now until ``release``."""
        if self._pid != os.getpid():  # a forked child: the parent's thread and lock are not ours
            self.__init__(self._coordination)  # type: ignore[misc]
        with self._wake:
            lease.due = time.monotonic() + lease.ttl_s / 3
            self._held[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()
            self._wake.notify()

    def release(self, lease: Lease) -> None:
        """Stop extending ``lease``."""
        with self._wake:
            self._held.pop(id(lease), None)

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [lease for lease in self._held.values() if lease.due <= now]
                if not due:
                    wait = min((lease.due for lease in self._held.values()), default=now + 60.0) - now
                    self._wake.wait(max(wait, 0.001))
                    continue
                for lease in due:
                    lease.due = now + lease.ttl_s / 3
            for lease in due:
                self._extend(lease)

    def _extend(self, lease: Lease) -> None:
        try:
            kept = self._coordination.gate_extend(lease.scope, lease.token, lease.ttl_s)
        except EngineUnavailable as exc:  # a blip: try again next time, the lease still has 2/3 left
            log.warning("scope %s: lease extension failed: %s", lease.scope, exc)
            return
        if not kept:
            lease.lost = True
            log.warning("scope %s: lease lost while building", lease.scope)
            self.release(lease)


_KEEPERS: weakref.WeakKeyDictionary[Coordination, LeaseKeeper] = weakref.WeakKeyDictionary()
_KEEPERS_LOCK = threading.Lock()


def keeper_of(coordination: Coordination) -> LeaseKeeper:
    """The ``LeaseKeeper`` of a coordination store (made on first use; it goes with the store)."""
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(coordination)
        if keeper is None:
            keeper = _KEEPERS[coordination] = LeaseKeeper(coordination)
        return keeper


@dataclass
class Flight(Generic[T]):
    """What one trigger of one scope did.

    Attributes:
        enter: ``acquired`` (this caller built), ``coalesced`` (the running build goes again), ``covered``,
            ``deferred`` (too soon after the last pass: come back after ``wait_s``) or ``busy`` (another delivery
            of this job is building the scope: come back after ``wait_s``, at most its lease).
        results: One entry per pass built by this caller: the first, then each follow-up.
        lost: True when the lease ended before the caller left (another build may have overlapped).
        wait_s: Seconds until this caller's scope may build again, when a pass was deferred (on entry, or a
            follow-up when leaving); 0 otherwise. The caller must come back then (its job holds the follow-up).
    """

    enter: Enter
    results: list[T] = field(default_factory=list)
    lost: bool = False
    wait_s: float = 0.0

    @property
    def deferred(self) -> bool:
        """True when this caller owes the scope a pass after ``wait_s``."""
        return self.wait_s > 0 or self.enter in (Enter.DEFERRED, Enter.BUSY)


def single_flight(
    coordination: Coordination,
    scope: str,
    task_id: str,
    stamp_us: int | None,
    ttl_s: int,
    build: Callable[[], T],
    gap_s: float = 0.0,
) -> Flight[T]:
    """Run ``build`` under the scope's lock, passing again once per burst of triggers that came in meanwhile.

    Args:
        coordination: The store holding the lock.
        scope: ``scope_key(...)`` of the scope.
        task_id: The job id; a lock another delivery of the same job holds is waited out (``busy``), never shared.
        stamp_us: When the trigger was stamped (store clock), or None to always count as new.
        ttl_s: The lease, seconds.
        build: One pass; its result is kept in ``Flight.results``.
        gap_s: Least seconds between the starts of two passes of the scope (0: none).

    Returns:
        The ``Flight``; no pass runs unless ``enter`` is ``acquired``.

    Raises:
        EngineUnavailable: the store is unreachable (retryable).
        Exception: whatever ``build`` raises; the lock is released first, the dirty mark kept (and raised).
    """
    token = secrets.token_hex(8)
    gap_us = int(gap_s * 1_000_000)
    entered = coordination.gate_enter(scope, task_id, token, stamp_us, ttl_s, gap_us)
    flight: Flight[T] = Flight(entered.enter, wait_s=entered.wait_us / 1_000_000)
    if entered.enter is not Enter.ACQUIRED:
        return flight
    with Lease(keeper_of(coordination), scope, token, ttl_s) as lease:
        try:
            while True:
                flight.results.append(build())
                left = coordination.gate_leave(scope, token, ttl_s, gap_us)
                leave = left.leave
                if leave is not Leave.AGAIN:
                    break
        except BaseException:
            try:
                coordination.gate_abort(scope, token)
            except EngineUnavailable as exc:  # the lease expires on its own
                log.warning("scope %s: release after a failed build failed: %s", scope, exc)
            raise
    flight.lost = leave is Leave.LOST or lease.lost
    if leave is Leave.DEFERRED:
        flight.wait_s = max(left.wait_us / 1_000_000, 0.001)
    return flight
