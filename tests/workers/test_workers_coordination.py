"""Coordination stores (Redis and SQLite, one behaviour) and single flight with coalescing."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.consolidation import BuildScope
from memory_core.errors import EngineUnavailable
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.meta import ItemKind
from memory_core.namespace import Namespace, Reach
from workers.coordination import (
    Coordination,
    Enter,
    Leave,
    Pending,
    RedisCoordination,
    SqliteCoordination,
    engine_key,
    pending_key,
    redis_client,
    scope_key,
    single_flight,
)
from workers.gate import split_record


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Coordination]:
    prefix = f"mc-unit-{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        coordination: Coordination = SqliteCoordination(tmp_path / "c.db", prefix, job_ttl_s=60, keep_s=60)
        yield coordination
        coordination.close()
        return
    url = request.getfixturevalue("workers_redis")
    client = redis_client(url, 5.0, 25)
    yield RedisCoordination(client, prefix, job_ttl_s=60, keep_s=60)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def claim(store: Coordination, key: str, job_id: str) -> Pending:
    """The pending mark a submit of ``job_id`` (its own payload) claims for ``key``."""
    got = store.claim_job(job_id, f"digest-{job_id}", key, 30)
    assert got is not None
    return got


def test_lock_values_round_trip_even_with_bars_in_the_job_id() -> None:
    assert split_record("tok|a|b|17") == ("tok", "a|b", "17")  # the gate's lock mark: token|task_id|started_us


def test_one_trigger_acquires_and_leaves_with_the_lock_released(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "t1", None, 30).enter is Enter.ACQUIRED
    assert store.gate_extend("s", "t1", 30)
    assert store.gate_leave("s", "t1", 30).leave is Leave.RELEASED
    assert store.gate_enter("s", "job-2", "t2", None, 30).enter is Enter.ACQUIRED


def test_a_trigger_during_a_build_coalesces_into_exactly_one_follow_up(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "t1", None, 30).enter is Enter.ACQUIRED
    for i in range(5):
        assert store.gate_enter("s", f"job-{i + 2}", f"t{i + 2}", store.now_us(), 30).enter is Enter.COALESCED
    assert store.gate_leave("s", "t1", 30).leave is Leave.AGAIN  # one follow-up for the five
    assert store.gate_leave("s", "t1", 30).leave is Leave.RELEASED


def test_a_trigger_stamped_before_the_running_pass_started_is_covered(store: Coordination) -> None:
    stamp = store.now_us()
    time.sleep(0.002)
    assert store.gate_enter("s", "job-1", "t1", None, 30).enter is Enter.ACQUIRED
    assert store.gate_enter("s", "job-2", "t2", stamp, 30).enter is Enter.COVERED  # the running pass reads its writes
    assert store.gate_leave("s", "t1", 30).leave is Leave.RELEASED
    assert store.gate_enter("s", "job-3", "t3", stamp, 30).enter is Enter.COVERED  # the finished pass did too
    assert store.gate_enter("s", "job-4", "t4", store.now_us(), 30).enter is Enter.ACQUIRED


def expire_lock(store: Coordination, scope: str) -> None:
    """What the end of a dead holder's lease does: the lock key is gone."""
    if isinstance(store, RedisCoordination):
        store.client.delete(store.key("gate", "{" + scope + "}", "lock"))
        return
    assert isinstance(store, SqliteCoordination)
    with store._tx() as db:
        db.execute("UPDATE kv SET expires = 0 WHERE key = ?", (store.key("gate", scope, "lock"),))


def test_a_twin_delivery_of_a_job_never_shares_its_lock_and_acquires_once_the_lease_is_gone(
    store: Coordination,
) -> None:
    """Issue 11 §2: the same job id no longer takes over a live lock (a redelivery while the first still runs)."""
    assert store.gate_enter("s", "job-1", "first", None, 30).enter is Enter.ACQUIRED
    twin = store.gate_enter("s", "job-1", "second", None, 30)
    assert twin.enter is Enter.BUSY and 0 < twin.wait_us <= 30_000_000  # at most the lease left
    assert store.gate_extend("s", "first", 30)  # the first delivery still owns it
    assert store.gate_leave("s", "first", 30).leave is Leave.RELEASED
    assert store.gate_enter("s", "job-1", "third", None, 30).enter is Enter.ACQUIRED  # the lock is free again
    store.gate_abort("s", "third")

    assert store.gate_enter("s", "job-2", "dying", None, 30).enter is Enter.ACQUIRED
    assert store.gate_enter("s", "job-2", "redelivered", None, 30).enter is Enter.BUSY
    expire_lock(store, "s")  # the first delivery died: its lease ran out
    assert store.gate_enter("s", "job-2", "redelivered", None, 30).enter is Enter.ACQUIRED
    assert not store.gate_extend("s", "dying", 30)
    assert store.gate_leave("s", "dying", 30).leave is Leave.LOST
    assert store.gate_leave("s", "redelivered", 30).leave is Leave.RELEASED


def test_release_is_compare_and_delete(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "t1", None, 30).enter is Enter.ACQUIRED
    store.gate_abort("s", "someone-else")
    assert store.gate_enter("s", "job-2", "t2", None, 30).enter is Enter.COALESCED
    store.gate_abort("s", "t1")  # a failed pass releases; the dirty flag stays for the next build
    assert store.gate_enter("s", "job-3", "t3", None, 30).enter is Enter.ACQUIRED


def test_a_lease_that_ran_out_frees_the_scope(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "t1", None, 1).enter is Enter.ACQUIRED
    time.sleep(1.2)
    assert store.gate_enter("s", "job-2", "t2", None, 30).enter is Enter.ACQUIRED
    assert store.gate_leave("s", "t1", 30).leave is Leave.LOST


def test_pending_marks_collapse_identical_triggers_until_the_job_starts(store: Coordination) -> None:
    first = claim(store, "k", "job-1")
    assert first.fresh and first.job_id == "job-1"
    again = claim(store, "k", "job-2")
    assert not again.fresh and again.job_id == "job-1" and again.stamp_us >= first.stamp_us  # job-1's, advanced
    store.clear_pending("k", "job-2")  # not its mark: kept
    assert claim(store, "k", "job-3").job_id == "job-1"
    store.clear_pending("k", "job-1")
    assert claim(store, "k", "job-4").fresh


def test_per_job_marks_count_record_and_forget(store: Coordination) -> None:
    assert [store.begin_job("j", None).attempts for _ in range(3)] == [1, 2, 3]
    store.add_progress("j", "scope-a")
    store.add_progress("j", "scope-b")
    assert store.progress("j") == {"scope-a", "scope-b"}
    assert not store.is_done("j")
    store.mark_done("j")
    assert store.is_done("j")
    store.forget_job("j")
    assert not store.is_done("j") and store.progress("j") == frozenset() and store.begin_job("j", None).attempts == 1


def test_a_delivery_begins_in_one_call_clearing_its_pending_mark_and_reading_its_marks(store: Coordination) -> None:
    claimed = claim(store, "k", "job-1")
    assert claimed.fresh
    first = store.begin_job("job-1", "k")
    assert (first.done, first.attempts, first.progress, first.stamp_us) == (False, 1, frozenset(), claimed.stamp_us)
    assert claim(store, "k", "job-2").fresh  # the pending mark was cleared: a new trigger queues a new job
    store.add_progress("job-1", "scope-a")
    again = store.begin_job("job-1", "k")  # a retry: "k" now names job-2, which it leaves alone
    assert (again.done, again.attempts, again.progress) == (False, 2, {"scope-a"})
    assert again.stamp_us == claimed.stamp_us  # the claim's stamp outlives its pending mark: a retry keeps it
    assert not claim(store, "k", "job-3").fresh
    store.mark_done("job-1")
    twin = store.begin_job("job-1", None)
    assert twin.done and twin.attempts == 2 and store.attempts("job-1") == 2  # a twin of a done job is no attempt
    assert twin.stamp_us is None  # no pending mark named: not read
    store.forget_job("job-1")  # a requeue starts the id afresh, its stamp too
    assert store.begin_job("job-1", "k").stamp_us is None


def test_an_unreachable_redis_is_engine_unavailable() -> None:
    client = redis_client("redis://127.0.0.1:1/0", 0.2, 0)
    store = RedisCoordination(client, "x", 60, 60)
    with pytest.raises(EngineUnavailable):
        store.begin_job("j", None)


def test_keys_name_engine_scope_and_job_without_leaking_the_url() -> None:
    engine = engine_key("postgresql://user:secret@host/db")
    assert "secret" not in engine and len(engine) == 16
    a = BuildScope(namespace=Namespace.parse("agent:alice"), kinds=(ItemKind.CONVERSATION,))
    b = BuildScope(namespace=Namespace.parse("agent:alice"), kinds=(ItemKind.DOCUMENT,))
    assert scope_key(engine, a) != scope_key(engine, b) != scope_key(engine_key("other"), b)
    job = BuildBeliefs(request={"reach": Reach.exact("agent:alice").to_dict()})
    assert pending_key(engine, job) == pending_key(engine, BuildBeliefs.model_validate_json(job.to_json()))


def test_concurrent_triggers_give_at_most_one_follow_up_and_never_overlap(store: Coordination) -> None:
    running = 0
    overlaps = 0
    passes = 0
    lock = threading.Lock()
    first_started = threading.Event()
    release = threading.Event()

    def build() -> int:
        nonlocal running, overlaps, passes
        with lock:
            running += 1
            passes += 1
            overlaps += running > 1
        first_started.set()
        release.wait(5)
        with lock:
            running -= 1
        return passes

    def trigger(i: int) -> None:
        single_flight(store, "scope", f"job-{i}", store.now_us(), 30, build)

    threads = [threading.Thread(target=trigger, args=(0,))]
    threads[0].start()
    assert first_started.wait(5)
    threads += [threading.Thread(target=trigger, args=(i,)) for i in range(1, 40)]
    for t in threads[1:]:
        t.start()
    for t in threads[1:]:
        t.join(10)
    release.set()
    threads[0].join(10)
    assert overlaps == 0
    assert passes == 2  # the first build, then one follow-up for the 39 triggers that came in meanwhile


def test_a_failing_build_releases_the_lock_and_raises(store: Coordination) -> None:
    def boom() -> None:
        raise EngineUnavailable("engine down")

    with pytest.raises(EngineUnavailable):
        single_flight(store, "scope", "job-1", None, 30, boom)
    assert store.gate_enter("scope", "job-2", "t", None, 30).enter is Enter.ACQUIRED


def test_a_long_build_keeps_its_lease(store: Coordination) -> None:
    def slow() -> str:
        time.sleep(1.6)  # longer than the 1 s lease; the lease thread extends it every third of a second
        return "built"

    flight = single_flight(store, "scope", "job-1", None, 1, slow)
    assert flight.enter is Enter.ACQUIRED and flight.results == ["built"] and not flight.lost


# a coalesced trigger is never lost (issue 5 review, item 1) ----------------------------------------------
def test_a_failed_follow_up_pass_leaves_the_coalesced_trigger_to_the_retry(store: Coordination) -> None:
    t1 = store.now_us()
    time.sleep(0.002)
    assert store.gate_enter("s", "job-1", "a", t1, 30).enter is Enter.ACQUIRED
    assert store.gate_enter("s", "job-2", "b", store.now_us(), 30).enter is Enter.COALESCED  # job-2 is marked done
    assert store.gate_leave("s", "a", 30).leave is Leave.AGAIN  # built = job-1's first-pass start, newer than t1
    store.gate_abort("s", "a")  # the follow-up pass raised
    assert store.gate_enter("s", "job-1", "a2", t1, 30).enter is Enter.ACQUIRED  # the retry builds what job-2 asked for
    assert store.gate_leave("s", "a2", 30).leave is Leave.RELEASED
    assert store.gate_enter("s", "job-3", "c", t1, 30).enter is Enter.COVERED  # a completed later pass covers it now


def test_a_follow_up_killed_before_it_completes_leaves_the_trigger_after_the_lease_runs_out(
    store: Coordination,
) -> None:
    t1 = store.now_us()
    time.sleep(0.002)
    assert store.gate_enter("s", "job-1", "a", t1, 1).enter is Enter.ACQUIRED
    assert store.gate_enter("s", "job-2", "b", store.now_us(), 1).enter is Enter.COALESCED
    assert store.gate_leave("s", "a", 1).leave is Leave.AGAIN
    time.sleep(1.2)  # kill -9 during the follow-up: no abort runs, the lease expires
    assert store.gate_enter("s", "job-1", "a2", t1, 30).enter is Enter.ACQUIRED  # the redelivery builds
    assert store.gate_leave("s", "a2", 30).leave is Leave.RELEASED


def test_a_trigger_during_a_follow_up_pass_gets_one_more_pass(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "a", None, 30).enter is Enter.ACQUIRED
    assert store.gate_enter("s", "job-2", "b", store.now_us(), 30).enter is Enter.COALESCED
    assert store.gate_leave("s", "a", 30).leave is Leave.AGAIN
    time.sleep(0.002)
    assert store.gate_enter("s", "job-3", "c", store.now_us(), 30).enter is Enter.COALESCED  # during the follow-up
    assert store.gate_leave("s", "a", 30).leave is Leave.AGAIN
    assert store.gate_leave("s", "a", 30).leave is Leave.RELEASED


def test_a_retry_after_a_failed_follow_up_builds_again(store: Coordination) -> None:
    t1 = store.now_us()
    time.sleep(0.002)
    passes: list[str] = []
    second_trigger: list[Enter] = []

    def flaky() -> str:
        passes.append("pass")
        if len(passes) == 1:  # job-2 arrives while the first pass builds
            second_trigger.append(store.gate_enter("scope", "job-2", "x", store.now_us(), 30).enter)
            return "first"
        raise EngineUnavailable("the engine went away during the follow-up")

    with pytest.raises(EngineUnavailable):
        single_flight(store, "scope", "job-1", t1, 30, flaky)
    assert second_trigger == [Enter.COALESCED] and len(passes) == 2

    retry = single_flight(store, "scope", "job-1", t1, 30, lambda: "retried")
    assert retry.enter is Enter.ACQUIRED and retry.results == ["retried"]


def test_a_trigger_stamped_in_the_future_gets_one_follow_up_not_endless_passes(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "a", None, 30).enter is Enter.ACQUIRED
    future = store.now_us() + 3_600_000_000  # a hand-made message: an hour ahead of the store's clock
    assert store.gate_enter("s", "job-2", "b", future, 30).enter is Enter.COALESCED
    assert store.gate_leave("s", "a", 30).leave is Leave.AGAIN
    assert store.gate_leave("s", "a", 30).leave is Leave.RELEASED


# a minimum interval between the starts of two passes of a scope (issue 5 §4 with fast builds) ---------------
GAP_US = 400_000  # 0.4 s


def test_a_trigger_too_soon_after_a_pass_is_deferred_and_the_others_fold_into_it(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "a", None, 30, GAP_US).enter is Enter.ACQUIRED
    assert store.gate_leave("s", "a", 30, GAP_US).leave is Leave.RELEASED
    deferred = store.gate_enter("s", "job-2", "b", store.now_us(), 30, GAP_US)
    assert deferred.enter is Enter.DEFERRED and 0 < deferred.wait_us <= GAP_US
    for i in range(3, 8):  # every trigger while job-2 holds the follow-up slot folds into it
        assert store.gate_enter("s", f"job-{i}", f"t{i}", store.now_us(), 30, GAP_US).enter is Enter.COALESCED
    again = store.gate_enter("s", "job-2", "b2", None, 30, GAP_US)  # job-2 back too early (a fast timer)
    assert again.enter is Enter.DEFERRED and again.wait_us <= deferred.wait_us
    time.sleep(deferred.wait_us / 1_000_000)
    assert store.gate_enter("s", "job-2", "b3", None, 30, GAP_US).enter is Enter.ACQUIRED
    assert store.gate_leave("s", "b3", 30, GAP_US).leave is Leave.RELEASED  # it started after all five
    assert store.gate_enter("s", "job-3", "c", store.now_us() - GAP_US * 2, 30, GAP_US).enter is Enter.COVERED


def test_a_follow_up_pass_too_soon_after_the_first_is_deferred_with_the_lock_released(store: Coordination) -> None:
    assert store.gate_enter("s", "job-1", "a", None, 30, GAP_US).enter is Enter.ACQUIRED
    assert store.gate_enter("s", "job-2", "b", store.now_us(), 30, GAP_US).enter is Enter.COALESCED
    left = store.gate_leave("s", "a", 30, GAP_US)
    assert left.leave is Leave.DEFERRED and 0 < left.wait_us <= GAP_US
    assert store.gate_enter("s", "job-3", "c", store.now_us(), 30, GAP_US).enter is Enter.COALESCED  # into job-1's
    time.sleep(left.wait_us / 1_000_000)
    assert store.gate_enter("s", "job-1", "a2", None, 30, GAP_US).enter is Enter.ACQUIRED  # job-1 comes back
    assert store.gate_leave("s", "a2", 30, GAP_US).leave is Leave.RELEASED


def test_a_follow_up_slot_whose_job_never_comes_back_frees_itself_and_keeps_the_triggers(
    store: Coordination,
) -> None:
    assert store.gate_enter("s", "job-1", "a", None, 1, GAP_US).enter is Enter.ACQUIRED
    assert store.gate_leave("s", "a", 1, GAP_US).leave is Leave.RELEASED
    assert store.gate_enter("s", "job-2", "b", store.now_us(), 1, GAP_US).enter is Enter.DEFERRED  # then killed
    stamp = store.now_us()
    assert store.gate_enter("s", "job-3", "c", stamp, 1, GAP_US).enter is Enter.COALESCED
    time.sleep(GAP_US / 1_000_000 + 1.1)  # the slot lives the interval plus one lease
    assert store.gate_enter("s", "job-4", "d", stamp, 1, GAP_US).enter is Enter.ACQUIRED  # not "covered"


def test_fast_builds_triggered_from_many_threads_within_the_interval_build_at_most_twice(
    store: Coordination,
) -> None:
    lock = threading.Lock()
    running = overlaps = passes = 0
    pending: list[tuple[int, float]] = []  # (job, wait) of deferred deliveries, re-run like Celery's countdown

    def build() -> None:
        nonlocal running, overlaps, passes
        with lock:
            running += 1
            passes += 1
            overlaps += running > 1
        with lock:
            running -= 1

    def deliver(i: int, stamp: int) -> None:
        flight = single_flight(store, "scope", f"job-{i}", stamp, 30, build, gap_s=GAP_US / 1_000_000)
        if flight.deferred:
            with lock:
                pending.append((i, flight.wait_s))

    stamps: list[tuple[int, int]] = []
    threads = []
    for i in range(40):
        stamps.append((i, store.now_us()))
        threads.append(threading.Thread(target=deliver, args=stamps[-1]))
        threads[-1].start()
        time.sleep(0.005)  # spread over ~0.2 s, within the interval
    for t in threads:
        t.join(10)
    while pending:
        job, wait = pending.pop()
        time.sleep(wait)
        deliver(job, dict(stamps)[job])
    assert overlaps == 0
    assert passes <= 2


def test_a_job_id_binds_one_payload_until_its_marks_are_forgotten(store: Coordination) -> None:
    assert store.claim_job("j", "digest-a", None, 30) is not None
    assert store.claim_job("j", "digest-a", None, 30) is not None  # a replay
    assert store.claim_job("j", "digest-b", None, 30) is None  # another payload under the id
    assert store.claim_job("k", "digest-b", None, 30) is not None  # ids are independent
    store.forget_job("j")  # a requeue starts the id afresh
    assert store.claim_job("j", "digest-b", None, 30) is not None


def test_a_submit_binds_its_id_and_claims_its_pending_mark_together(store: Coordination) -> None:
    plain = store.claim_job("j", "digest-a", None, 30)
    assert plain is not None and (plain.job_id, plain.fresh) == ("j", True)
    assert store.claim_job("j", "digest-b", None, 30) is None  # the id names another payload
    first = store.claim_job("b1", "digest-build", "pk", 30)
    assert first is not None and first.fresh and first.stamp_us > 0
    again = store.claim_job("b2", "digest-build", "pk", 30)
    assert again is not None and (again.job_id, again.fresh) == ("b1", False)
    assert again.stamp_us >= first.stamp_us  # the queued job's stamp moves to its newest trigger's
    assert store.claim_job("j", "digest-c", "pk2", 30) is None  # refused: and no pending mark is left behind
    fresh = store.claim_job("c", "digest-c", "pk2", 30)
    assert fresh is not None and (fresh.job_id, fresh.fresh) == ("c", True)


def _after(store: Coordination, stamp_us: int) -> None:
    """Wait until the store's clock has passed ``stamp_us`` (an order of events, not a duration)."""
    while store.now_us() <= stamp_us:
        pass


def test_a_trigger_coalesced_into_a_queued_job_during_a_pass_is_not_covered_by_that_pass(store: Coordination) -> None:
    # The lost build (docs/jobs.md, "The scope gate"): job A begins (clearing the pending mark), trigger 1 queues
    # job B, A's pass starts, trigger 2 coalesces into B (its data may come after A's pass read), A completes. B's
    # first stamp is older than A's pass; the last trigger's is not: B must build.
    assert claim(store, "pk", "a").fresh
    assert store.begin_job("a", "pk").stamp_us is not None
    first = claim(store, "pk", "b")
    assert first.fresh and first.job_id == "b"
    _after(store, first.stamp_us)
    assert store.gate_enter("s", "a", "ta", None, 30).enter is Enter.ACQUIRED
    started = int(split_record(store.gate_state("s")["lock"].value)[2])
    assert started > first.stamp_us  # trigger 1 alone is covered by A's pass
    _after(store, started)
    second = claim(store, "pk", "c")
    assert (second.job_id, second.fresh) == ("b", False)
    assert store.gate_leave("s", "ta", 30).leave is Leave.RELEASED
    begun = store.begin_job("b", "pk")
    assert store.gate_enter("s", "b", "tb", begun.stamp_us, 30).enter is Enter.ACQUIRED
    assert begun.stamp_us == second.stamp_us > started  # B stands for the newest trigger it serves
    assert store.gate_leave("s", "tb", 30).leave is Leave.RELEASED
    assert store.begin_job("b", "pk").stamp_us == second.stamp_us  # a redelivery keeps the advanced stamp


def test_a_trigger_coalesced_into_a_queued_job_while_its_pass_still_runs_makes_that_pass_go_again(
    store: Coordination,
) -> None:
    first = claim(store, "pk", "b")
    _after(store, first.stamp_us)
    assert store.gate_enter("s", "a", "ta", None, 30).enter is Enter.ACQUIRED
    started = int(split_record(store.gate_state("s")["lock"].value)[2])
    _after(store, started)
    assert claim(store, "pk", "c").job_id == "b"
    begun = store.begin_job("b", "pk")  # B is delivered while A's pass still runs
    assert store.gate_enter("s", "b", "tb", begun.stamp_us, 30).enter is Enter.COALESCED
    assert store.gate_leave("s", "ta", 30).leave is Leave.AGAIN


def test_triggers_coalesced_into_a_queued_job_before_any_pass_started_are_still_covered(store: Coordination) -> None:
    first = claim(store, "pk", "b")
    second = claim(store, "pk", "c")
    assert second.job_id == "b" and second.stamp_us >= first.stamp_us
    _after(store, second.stamp_us)
    assert store.gate_enter("s", "a", "ta", None, 30).enter is Enter.ACQUIRED
    assert store.gate_leave("s", "ta", 30).leave is Leave.RELEASED
    begun = store.begin_job("b", "pk")
    assert store.gate_enter("s", "b", "tb", begun.stamp_us, 30).enter is Enter.COVERED  # no extra pass


class CountingStore(SqliteCoordination):
    """Counts lease extensions; ``extended`` is set at the first."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "keeper", 60, 60)
        self.extensions = 0
        self.extended = threading.Event()

    def gate_extend(self, scope: str, token: str, ttl_s: int) -> bool:
        self.extensions += 1
        kept = super().gate_extend(scope, token, ttl_s)
        self.extended.set()
        return kept


def test_short_builds_start_no_lease_thread_each_and_are_never_extended(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "c.db")
    single_flight(store, "warm", "job-0", None, 60, lambda: 0)  # the store's one keeper thread starts here
    threads = threading.active_count()
    for n in range(20):
        flight = single_flight(store, f"s{n}", f"job-{n}", None, 60, lambda n=n: n)
        assert flight.results == [n] and not flight.lost
    assert threading.active_count() == threads  # no thread per build
    assert store.extensions == 0  # released long before a third of the lease


def test_a_long_build_is_extended_and_a_lost_lease_is_reported(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "c.db")

    def long_build() -> str:  # runs until the keeper has extended its lease at least once
        assert store.extended.wait(30), "the keeper never extended the lease"
        return "built"

    flight = single_flight(store, "long", "job-1", None, 1, long_build)
    assert flight.results == ["built"] and not flight.lost and store.extensions >= 1

    store.extended.clear()

    def robbed() -> str:  # the lock vanishes mid-build (its lease ran out): the next extension finds it gone
        with store._tx() as db:
            db.execute("DELETE FROM kv WHERE key = ?", (store.key("gate", "robbed", "lock"),))
        assert store.extended.wait(30)
        return "built"

    assert single_flight(store, "robbed", "job-2", None, 1, robbed).lost
