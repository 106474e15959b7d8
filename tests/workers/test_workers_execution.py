"""The flow of one delivery (``workers.execution.execute``), in process, on the reference engine."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memory_core._model import ContractModel
from memory_core.consolidation import BuildScope, ConsolidateReceipt, ConsolidateRequest
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, parse_job
from memory_core.meta import ItemKind
from memory_core.namespace import Namespace, Reach
from memory_core.settings import Settings
from workers.coordination import SqliteCoordination, Started, scope_key
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Delivery, Runtime, Verdict, backoff_s, execute
from workers.handlers import BuildReport, BuildScopes
from workers.kinds import JOB_KINDS
from workers.queue import DrainReport


@dataclass
class FakeQueue:
    """Stands in for ``JobQueue`` inside a worker: records what the flow submits."""

    submitted: list[Any] = field(default_factory=list)
    drained: list[int] = field(default_factory=list)

    def submit(self, job: Any, *, job_id: str | None = None) -> str:
        self.submitted.append(job if isinstance(job, ContractModel) else parse_job(job))
        return f"follow-{len(self.submitted)}"

    def drain(self, limit: int = 1000) -> DrainReport:
        self.drained.append(limit)
        return DrainReport(delivered=2, left=0)

    @property
    def outbox(self) -> Any:
        class _Box:
            def prune(self) -> int:
                return 0

        return _Box()

    def close(self) -> None:
        pass


class FlakyEngine(ReferenceEngine):
    """The reference engine; ``fail_at`` scopes raise ``EngineUnavailable`` for their first ``failures`` builds."""

    def __init__(self, fail_at: set[str] | None = None, failures: int = 1) -> None:
        super().__init__()
        self.fail_at = fail_at or set()
        self.failures = failures
        self.calls: list[str] = []

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        node = str(request.reach.at)
        self.calls.append(node)
        if node in self.fail_at and self.calls.count(node) <= self.failures:
            raise EngineUnavailable(f"{node} is locked")
        return super()._consolidate(request)


def converse(engine: ReferenceEngine, agent: str, text: str) -> None:
    engine.store(
        {
            "type": "conversation",
            "turns": [{"role": "user", "text": text}, {"role": "assistant", "text": "ok"}],
            "meta": {"namespace": f"agent:{agent}"},
        }
    )


@pytest.fixture
def rt(tmp_path: Path) -> Runtime:
    settings = Settings(
        _env_file=None, max_retries=2, retry_backoff_s=1.0, retry_backoff_max_s=3.0, build_min_interval_s=0
    )  # no minimum interval here: the tests below build one scope several times in a row
    engine = FlakyEngine()
    return Runtime(
        settings,
        engine=engine,
        coordination=SqliteCoordination(tmp_path / "c.db", "t", 60, 60),
        letters=SqliteDeadLetters(tmp_path / "c.db", 100),
        queue=FakeQueue(),  # type: ignore[arg-type]
    )


def build_delivery(job_id: str, reach: Reach, **kwargs: Any) -> Delivery:
    job = BuildBeliefs(request=ConsolidateRequest(reach=reach, kinds=(ItemKind.CONVERSATION,)))
    return Delivery("memory.build_beliefs", job_id, (job.to_dict(),), kwargs)


def test_a_build_runs_one_consolidate_per_scope_under_the_reach(rt: Runtime) -> None:
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    converse(engine, "a", "I live in Oslo.")
    converse(engine, "b", "I play the cello.")
    out = execute(rt, build_delivery("j1", Reach.subtree()))
    assert out.verdict is Verdict.DONE and out.result is not None
    assert [s["namespace"] for s in out.result["scopes"]] == ["agent:a", "agent:b"]
    assert all(s["enter"] == "acquired" and s["passes"] == 1 for s in out.result["scopes"])
    assert sorted(engine.calls) == ["agent:a", "agent:b"]
    assert rt.coordination.is_done("j1")  # the done mark covers the last scope: only the first is recorded
    assert rt.coordination.progress("j1") == {
        scope_key(rt.engine_key, s)
        for s in engine.scopes(ConsolidateRequest(reach=Reach.subtree(), kinds=(ItemKind.CONVERSATION,)))[:1]
    }


def test_a_failing_scope_is_retried_alone_without_redoing_the_others(rt: Runtime) -> None:
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    engine.fail_at = {"agent:b"}
    converse(engine, "a", "I live in Oslo.")
    converse(engine, "b", "I play the cello.")
    first = execute(rt, build_delivery("j1", Reach.subtree()), random.Random(1))
    assert first.verdict is Verdict.RETRY and isinstance(first.error, EngineUnavailable)
    assert first.countdown is not None and 0 <= first.countdown <= 1.0  # attempt 1: uniform(0, base)
    second = execute(rt, build_delivery("j1", Reach.subtree()))  # Celery's retry: same id, same payload
    assert second.verdict is Verdict.DONE and second.result is not None
    assert [s["enter"] for s in second.result["scopes"]] == ["done_before", "acquired"]
    assert engine.calls.count("agent:a") == 1 and engine.calls.count("agent:b") == 2


def test_transient_errors_retry_with_growing_backoff_then_dead_letter(rt: Runtime) -> None:
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    engine.fail_at, engine.failures = {"agent:a"}, 99
    converse(engine, "a", "I live in Oslo.")
    verdicts = [execute(rt, build_delivery("j1", Reach.exact("agent:a"))) for _ in range(3)]
    assert [v.verdict for v in verdicts] == [Verdict.RETRY, Verdict.RETRY, Verdict.DEAD]
    letter = rt.letters.get("j1")
    assert letter.error == "EngineUnavailable" and letter.attempts == 3 and letter.task == "memory.build_beliefs"
    assert letter.payload["job"] == "build_beliefs"


def test_a_malformed_job_is_dead_lettered_at_once_and_a_twin_is_dropped(rt: Runtime) -> None:
    bad = Delivery("memory.ingest_brain", "j2", ({"job": "ingest_brain", "documents": []},))
    out = execute(rt, bad)
    assert out.verdict is Verdict.DEAD
    assert rt.letters.get("j2").attempts == 1 and rt.letters.get("j2").error == "InvalidRequest"
    assert execute(rt, bad).verdict is Verdict.DUPLICATE


@pytest.mark.parametrize(
    "delivery",
    [
        Delivery("memory.build_beliefs", "x", ()),
        Delivery("memory.build_beliefs", "x", ({}, {})),
        Delivery("memory.build_beliefs", "x", ("not json",)),
        Delivery(
            "memory.build_beliefs", "x", ({"job": "build_beliefs", "request": {"reach": {"at": "root"}}},), {"x": 1}
        ),
        Delivery(
            "memory.build_beliefs",
            "x",
            ({"job": "build_beliefs", "request": {"reach": {"at": "root"}}},),
            {"triggered_us": "soon"},
        ),
        Delivery("memory.ingest_brain", "x", ({"job": "build_beliefs", "request": {"reach": {"at": "root"}}},)),
        Delivery("memory.build_due", "x", ("extra",)),
        Delivery("memory.drain_outbox", "x", (), {"limit": 0}),
        Delivery("memory.nope", "x", ()),
    ],
)
def test_deliveries_of_the_wrong_shape_are_dead_lettered_not_retried(rt: Runtime, delivery: Delivery) -> None:
    out = execute(rt, delivery)
    assert out.verdict is Verdict.DEAD and rt.letters.get("x").error == "InvalidRequest"


def test_a_job_started_more_often_than_allowed_is_dead_lettered_without_running(rt: Runtime) -> None:
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    converse(engine, "a", "I live in Oslo.")
    for _ in range(3):  # three starts already lost (a child killed each time, requeued by reject_on_worker_lost)
        rt.coordination.begin_job("j3", None)
    out = execute(rt, build_delivery("j3", Reach.exact("agent:a")))
    assert out.verdict is Verdict.DEAD and rt.letters.get("j3").error == "GaveUp"
    assert engine.calls == []


def test_ingest_stores_and_submits_the_batch_follow_ups(rt: Runtime) -> None:
    job = IngestBrain(documents=(BrainDocument.new("notion", "Redis keeps the queues.", title="Queues"),))
    out = execute(rt, Delivery("memory.ingest_brain", "j4", (job.to_dict(),)))
    assert out.verdict is Verdict.DONE and out.result is not None
    assert out.result["stored"] == 1 and out.result["follow_ups"] == ["follow-1"]
    queue = rt.queue
    assert isinstance(queue, FakeQueue)
    assert isinstance(queue.submitted[0], BuildBeliefs)


def test_an_ingest_touching_several_scopes_submits_their_builds_as_one_batch(rt: Runtime) -> None:
    sources = ("notion", "drive")
    docs = tuple(BrainDocument.new(source, f"{source} keeps the queues.", title=source) for source in sources)
    out = execute(rt, Delivery("memory.ingest_brain", "j7", (IngestBrain(documents=docs).to_dict(),)))
    assert out.verdict is Verdict.DONE and out.result is not None and out.result["stored"] == 2
    queue = rt.queue
    assert isinstance(queue, FakeQueue) and out.result["follow_ups"] == ["follow-1"]
    batch = queue.submitted[0]
    assert isinstance(batch, BuildScopes) and len(batch.requests) == 2


def test_build_due_submits_the_scopes_written_since_their_last_build_as_one_batch(rt: Runtime) -> None:
    from datetime import UTC, datetime

    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)

    class Marked(FlakyEngine):
        def _scopes(self, request: ConsolidateRequest) -> list[BuildScope]:
            kinds = (ItemKind.CONVERSATION,)
            return [
                BuildScope(namespace=Namespace.parse("agent:due"), kinds=kinds, last_write=t1, last_build=t0),
                BuildScope(namespace=Namespace.parse("agent:fresh"), kinds=kinds, last_write=t0, last_build=t1),
                BuildScope(namespace=Namespace.parse("agent:never"), kinds=kinds, last_write=t0),
            ]

    rt.engine = Marked()
    out = execute(rt, Delivery("memory.build_due", "j5"))
    assert out.verdict is Verdict.DONE and out.result == {"scopes": 3, "due": 2, "jobs": ["follow-1"]}
    queue = rt.queue
    assert isinstance(queue, FakeQueue) and len(queue.submitted) == 1
    batch = queue.submitted[0]
    assert isinstance(batch, BuildScopes)
    assert [str(r.reach.at) for r in batch.requests] == ["agent:due", "agent:never"]


class BrokenEngine(FlakyEngine):
    """``broken`` scopes raise a ``ValueError`` (the job's own fault, never transient) on every build."""

    def __init__(self, broken: set[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.broken = broken

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        if str(request.reach.at) in self.broken:
            self.calls.append(str(request.reach.at))
            raise ValueError(f"{request.reach.at} cannot be built")
        return super()._consolidate(request)


def batch_delivery(rt: Runtime, job_id: str, *agents: str) -> Delivery:
    kinds = (ItemKind.CONVERSATION,)
    job = BuildScopes(requests=tuple(ConsolidateRequest(reach=Reach.exact(f"agent:{a}"), kinds=kinds) for a in agents))
    return Delivery("memory.build_scopes", job_id, (job.to_dict(),), {"engine": rt.engine_key})


def test_a_batch_builds_each_scope_under_its_own_gate_and_dead_letters_a_failing_one_alone(rt: Runtime) -> None:
    engine = BrokenEngine({"agent:b"})
    rt.engine = engine
    for agent in "abc":
        converse(engine, agent, f"I am {agent}.")
    kinds = (ItemKind.CONVERSATION,)
    scopes = {a: engine.scopes(ConsolidateRequest(reach=Reach.exact(f"agent:{a}"), kinds=kinds))[0] for a in "abc"}
    units = {a: scope_key(rt.engine_key, scope) for a, scope in scopes.items()}
    out = execute(rt, batch_delivery(rt, "batch-1", "a", "b", "c", "a"))  # a scope named twice builds once
    assert out.verdict is Verdict.DONE and out.result is not None
    assert engine.calls == ["agent:a", "agent:b", "agent:c"]
    lines = {s["namespace"]: s for s in out.result["scopes"]}
    assert [s["namespace"] for s in out.result["scopes"]] == ["agent:a", "agent:b", "agent:c"]
    assert lines["agent:a"]["passes"] == lines["agent:c"]["passes"] == 1 and lines["agent:b"]["outcome"] == "dead"
    for agent in "ac":  # each built scope went through its own gate: its lock released, its pass recorded
        state = rt.coordination.gate_state(units[agent])
        assert "built" in state and "lock" not in state
    assert "built" not in rt.coordination.gate_state(units["b"])  # the failed pass covered nothing
    letters = rt.letters.list()
    assert [letter.id for letter in letters] == [f"batch-1:{units['b']}"] == [lines["agent:b"]["letter"]]
    letter = letters[0]
    assert (letter.task, letter.error, letter.engine) == ("memory.build_beliefs", "ValueError", rt.engine_key)
    requeued = JOB_KINDS.parse(letter.payload)  # the letter is a one-scope build, requeued like any other
    assert isinstance(requeued, BuildBeliefs) and str(requeued.request.reach.at) == "agent:b"
    assert rt.coordination.is_done("batch-1")


def test_a_transient_failure_in_a_batch_retries_it_and_the_retry_builds_only_what_is_left(rt: Runtime) -> None:
    engine = BrokenEngine(set(), fail_at={"agent:b"})
    rt.engine = engine
    for agent in "abc":
        converse(engine, agent, f"I am {agent}.")
    first = execute(rt, batch_delivery(rt, "batch-2", "a", "b", "c"), random.Random(0))
    assert first.verdict is Verdict.RETRY and engine.calls == ["agent:a", "agent:b"]
    second = execute(rt, batch_delivery(rt, "batch-2", "a", "b", "c"), random.Random(0))
    assert second.verdict is Verdict.DONE and second.result is not None
    assert engine.calls == ["agent:a", "agent:b", "agent:b", "agent:c"]  # agent:a is not built again
    assert [s["enter"] for s in second.result["scopes"]] == ["done_before", "acquired", "acquired"]
    assert rt.letters.list() == []


def test_drain_outbox_drains_the_local_outbox(rt: Runtime) -> None:
    out = execute(rt, Delivery("memory.drain_outbox", "j6", (), {"limit": 10}))
    assert out.verdict is Verdict.DONE and out.result == {"delivered": 2, "left": 0, "error": None}


def test_when_the_store_cannot_count_attempts_celerys_retry_count_caps_the_retries(rt: Runtime, tmp_path: Path) -> None:
    class Down(SqliteCoordination):
        def begin_job(self, job_id: str, pending: str | None) -> Started:
            raise EngineUnavailable("redis down")

    rt.coordination = Down(tmp_path / "d.db", "t", 60, 60)
    assert (
        execute(
            rt,
            build_delivery(
                "j7",
                Reach.subtree(),
            ),
            random.Random(2),
        ).verdict
        is Verdict.RETRY
    )
    late = Delivery("memory.build_beliefs", "j7", build_delivery("j7", Reach.subtree()).args, retries=2)
    assert execute(rt, late).verdict is Verdict.DEAD


@pytest.mark.parametrize("attempt", [1, 2, 3, 8])
def test_backoff_is_full_jitter_under_an_exponential_cap(attempt: int) -> None:
    rng = random.Random(attempt)
    cap = min(5.0, 0.5 * 2 ** (attempt - 1))
    samples = [backoff_s(attempt, 0.5, 5.0, rng) for _ in range(200)]
    assert all(0.0 <= s <= cap for s in samples)
    assert max(samples) > cap / 2  # spread over the whole window, not pinned to one value


def test_a_coordination_store_locked_when_opened_is_a_retry_not_an_escape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    import workers.coordination

    monkeypatch.setattr(workers.coordination, "BUSY_TIMEOUT_S", 0.2)
    settings = Settings(_env_file=None, var_dir=tmp_path / "var", max_retries=2)
    SqliteCoordination(tmp_path / "var" / "coordination.db", "t", 60, 60).close()  # exists, in WAL mode
    holder = sqlite3.connect(tmp_path / "var" / "coordination.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        rt = Runtime(settings, engine=FlakyEngine(), letters=SqliteDeadLetters(tmp_path / "l.db", 10))
        out = execute(rt, build_delivery("j8", Reach.subtree()), random.Random(3))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.verdict is Verdict.RETRY and isinstance(out.error, EngineUnavailable)
    assert rt.letters.count() == 0


def _published(tmp_path: Path) -> list[tuple[list[Any], dict[str, Any]]]:
    """(args, kwargs) of every message the server-less broker holds, then removes them."""
    import base64
    import json

    out = []
    for path in sorted((tmp_path / "var/broker/queue").glob("*.msg")):
        args, kwargs, _ = json.loads(base64.b64decode(json.loads(path.read_text())["body"]))
        out.append((args, kwargs))
        path.unlink()
    return out


def test_a_job_for_another_engine_is_dead_lettered_unrun_and_requeue_keeps_its_engine(
    rt: Runtime, tmp_path: Path
) -> None:
    from workers.coordination import engine_key
    from workers.queue import JobQueue, requeue

    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    converse(engine, "a", "I live in Oslo.")
    foreign = engine_key("sqlite:///another/deployment.db")
    out = execute(rt, build_delivery("j9", Reach.exact("agent:a"), engine=foreign))
    assert out.verdict is Verdict.DEAD and engine.calls == []  # nothing ran against this worker's store
    letter = rt.letters.get("j9")
    assert letter.error == "WrongEngine" and letter.attempts == 1 and letter.engine == foreign
    assert f"job for engine {foreign} reached a worker of engine {rt.engine_key}" in letter.message

    # a shell of this engine requeues it: the job still names the engine it was submitted for
    host = JobQueue(Settings(_env_file=None, var_dir=tmp_path / "var"), coordination=rt.coordination)
    assert requeue(host.settings, "j9", store=rt.letters, queue=host) == "j9"
    ((args, kwargs),) = _published(tmp_path)
    assert kwargs["engine"] == foreign != engine_key(host.settings.engine)
    assert execute(rt, Delivery("memory.build_beliefs", "j9", tuple(args), kwargs)).verdict is Verdict.DEAD
    assert engine.calls == []  # never run against the wrong store

    # --engine retargets it deliberately
    assert requeue(host.settings, "j9", engine=rt.settings.engine, store=rt.letters, queue=host) == "j9"
    ((args, kwargs),) = _published(tmp_path)
    assert kwargs["engine"] == rt.engine_key
    assert execute(rt, Delivery("memory.build_beliefs", "j9", tuple(args), kwargs)).verdict is Verdict.DONE
    assert engine.calls == ["agent:a"]
    host.close()


def test_a_requeued_job_that_fails_again_at_once_keeps_its_new_letter(rt: Runtime, tmp_path: Path) -> None:
    from workers.dead_letters import DeadLetter
    from workers.queue import JobQueue, requeue

    class FastFailingWorker(JobQueue):
        """Publishing is followed at once by the worker dead-lettering the job again (a fast consumer)."""

        def _publish(self, job: Any, job_id: str, engine: str | None = None) -> str:
            served = super()._publish(job, job_id, engine)
            rt.letters.put(DeadLetter.of(job_id, "InvalidRequest", payload=job.to_dict(), message="failed again"))
            return served

    job = IngestBrain(documents=(BrainDocument.new("web", "Requeued.", title="r"),))
    rt.letters.put(DeadLetter.of("j20", "EngineUnavailable", payload=job.to_dict(), message="first failure"))
    host = FastFailingWorker(Settings(_env_file=None, var_dir=tmp_path / "var"), coordination=rt.coordination)
    requeue(host.settings, "j2", store=rt.letters, queue=host)  # a unique prefix of the id
    assert rt.letters.get("j20").message == "failed again"  # the second failure is not deleted by the requeue
    host.close()


def test_a_job_stamped_for_this_engine_or_not_stamped_runs(rt: Runtime) -> None:
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    converse(engine, "a", "I live in Oslo.")
    assert execute(rt, build_delivery("j10", Reach.exact("agent:a"), engine=rt.engine_key)).verdict is Verdict.DONE
    assert execute(rt, build_delivery("j11", Reach.exact("agent:a"))).verdict is Verdict.DONE  # sent by hand
    bad = execute(rt, build_delivery("j12", Reach.exact("agent:a"), engine=7))
    assert bad.verdict is Verdict.DEAD and rt.letters.get("j12").error == "InvalidRequest"


def test_a_build_too_soon_after_the_last_one_is_deferred_to_the_intervals_end_without_using_an_attempt(
    rt: Runtime,
) -> None:
    rt.settings = rt.settings.model_copy(update={"build_min_interval_s": 30.0})
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    converse(engine, "a", "I live in Oslo.")
    converse(engine, "b", "I play the cello.")
    assert execute(rt, build_delivery("j30", Reach.exact("agent:a"))).verdict is Verdict.DONE
    converse(engine, "a", "I moved to Bergen.")
    later = execute(rt, build_delivery("j31", Reach.subtree()))  # agent:a built a moment ago; agent:b never
    assert later.verdict is Verdict.DEFER and later.countdown is not None and 25 < later.countdown <= 30
    assert engine.calls == ["agent:a", "agent:b"]  # b built now, a deferred
    assert rt.coordination.attempts("j31") == 0  # nothing of a ran: the deferral is not an attempt
    other = execute(rt, build_delivery("j40", Reach.exact("agent:a"), triggered_us=rt.coordination.now_us()))
    assert other.verdict is Verdict.DONE and other.result is not None
    assert [x["enter"] for x in other.result["scopes"]] == ["coalesced"]  # folded into j31's follow-up
    assert engine.calls == ["agent:a", "agent:b"]


def test_a_claimed_build_takes_its_triggers_stamp_from_the_store_and_an_older_message_from_its_keywords(
    rt: Runtime,
) -> None:
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    converse(engine, "a", "I live in Oslo.")
    claimed = rt.coordination.claim_job("j60", "digest-j60", "k60", 30)  # the trigger: stamped by the store
    assert claimed is not None and claimed.fresh
    assert execute(rt, build_delivery("j61", Reach.exact("agent:a"))).verdict is Verdict.DONE  # a later pass
    enters: dict[str, list[str]] = {}
    for job_id, kwargs in [
        ("j60", {"pending": "k60"}),  # its claim's stamp, read at begin: the later pass covered it
        ("j62", {"triggered_us": claimed.stamp_us}),  # a message queued before the stamp moved: alike
        ("j63", {}),  # no stamp at all: always new
    ]:
        out = execute(rt, build_delivery(job_id, Reach.exact("agent:a"), **kwargs))
        assert out.verdict is Verdict.DONE and out.result is not None
        enters[job_id] = [x["enter"] for x in out.result["scopes"]]
    assert enters == {"j60": ["covered"], "j62": ["covered"], "j63": ["acquired"]}
    assert engine.calls == ["agent:a", "agent:a"]


class AfterReadEngine(FlakyEngine):
    """Runs ``after`` once, inside a build after it read the scope (what it writes is not in that pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.after: Any = None

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        receipt = super()._consolidate(request)
        hook, self.after = self.after, None
        if hook is not None:
            hook()
        return receipt


@pytest.mark.parametrize("old_message", [False, True])
def test_a_trigger_coalesced_into_a_queued_build_during_an_earlier_pass_is_built_not_covered(
    rt: Runtime, old_message: bool
) -> None:
    # The lost build: B is queued (trigger 1) before A's pass starts; trigger 2 coalesces into B after A's pass
    # read the scope. B must build trigger 2's turn, also when its message still carries trigger 1's
    # ``triggered_us`` (queued before the stamp moved to the store).
    engine = AfterReadEngine()
    rt.engine = engine
    converse(engine, "a", "I live in Oslo.")
    job = BuildBeliefs(request=ConsolidateRequest(reach=Reach.exact("agent:a"), kinds=(ItemKind.CONVERSATION,)))
    first = rt.coordination.claim_job("jB", "digest-b", "kb", 30)
    assert first is not None and first.fresh
    while rt.coordination.now_us() <= first.stamp_us:  # A's pass starts after trigger 1's stamp
        pass
    coalesced: list[Any] = []

    def trigger_two() -> None:
        converse(engine, "a", "I moved to Bergen.")
        coalesced.append(rt.coordination.claim_job("jC", "digest-b", "kb", 30))

    engine.after = trigger_two
    assert execute(rt, build_delivery("jA", Reach.exact("agent:a"))).verdict is Verdict.DONE
    assert coalesced[0] is not None and (coalesced[0].job_id, coalesced[0].fresh) == ("jB", False)
    kwargs: dict[str, Any] = {"pending": "kb"}
    if old_message:
        kwargs["triggered_us"] = first.stamp_us
    out = execute(rt, Delivery("memory.build_beliefs", "jB", (job.to_dict(),), kwargs))
    assert out.verdict is Verdict.DONE and out.result is not None
    assert [x["enter"] for x in out.result["scopes"]] == ["acquired"]
    assert engine.calls == ["agent:a", "agent:a"]


# issue 11 §2: a twin delivery never runs beside the first, and the job still completes once -------------------
class HookedEngine(FlakyEngine):
    """Runs ``during`` once, inside the first build (while its delivery holds the scope's lock)."""

    def __init__(self) -> None:
        super().__init__()
        self.during: Any = None

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        hook, self.during = self.during, None
        if hook is not None:
            hook()
        return super()._consolidate(request)


@pytest.fixture
def hooked(rt: Runtime) -> Runtime:
    rt.engine = HookedEngine()
    return rt


def test_a_twin_delivery_while_the_first_builds_is_deferred_and_dropped_once_the_job_is_done(hooked: Runtime) -> None:
    engine = hooked.engine
    assert isinstance(engine, HookedEngine)
    converse(engine, "a", "I live in Oslo.")
    twins: list[Any] = []
    engine.during = lambda: twins.append(execute(hooked, build_delivery("j1", Reach.exact("agent:a"))))
    first = execute(hooked, build_delivery("j1", Reach.exact("agent:a")))
    assert [t.verdict for t in twins] == [Verdict.DEFER]  # the redelivered copy waited, it did not build beside
    assert twins[0].countdown is not None and 0 < twins[0].countdown <= hooked.settings.retry_backoff_max_s
    assert first.verdict is Verdict.DONE and engine.calls == ["agent:a"]
    again = execute(hooked, build_delivery("j1", Reach.exact("agent:a")))  # the twin's countdown ends
    assert again.verdict is Verdict.DUPLICATE and engine.calls == ["agent:a"]  # one run in all
    assert hooked.coordination.attempts("j1") == 1  # the deferral was not an attempt


def test_a_twin_delivery_of_a_job_whose_first_copy_died_completes_it_once(hooked: Runtime) -> None:
    engine = hooked.engine
    assert isinstance(engine, HookedEngine)
    converse(engine, "a", "I live in Oslo.")
    scope = engine.scopes(ConsolidateRequest(reach=Reach.exact("agent:a")))[0]
    unit = scope_key(hooked.engine_key, scope)
    store = hooked.coordination
    assert store.gate_enter(unit, "j2", "died-mid-build", None, 60).enter.value == "acquired"  # then killed
    waited = execute(hooked, build_delivery("j2", Reach.exact("agent:a")))
    assert waited.verdict is Verdict.DEFER and engine.calls == []
    assert isinstance(store, SqliteCoordination)
    with store._tx() as db:  # the dead delivery's lease runs out
        db.execute("UPDATE kv SET expires = 0 WHERE key = ?", (store.key("gate", unit, "lock"),))
    done = execute(hooked, build_delivery("j2", Reach.exact("agent:a")))
    assert done.verdict is Verdict.DONE and engine.calls == ["agent:a"]
    assert execute(hooked, build_delivery("j2", Reach.exact("agent:a"))).verdict is Verdict.DUPLICATE
    assert engine.calls == ["agent:a"]


def test_a_builds_result_is_one_report_model_with_the_stored_json_shape(rt: Runtime) -> None:
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    engine.fail_at = {"agent:b"}
    converse(engine, "a", "I live in Oslo.")
    converse(engine, "b", "I play the cello.")
    assert execute(rt, build_delivery("j9", Reach.subtree())).verdict is Verdict.RETRY
    out = execute(rt, build_delivery("j9", Reach.subtree()))
    assert out.result is not None
    assert list(out.result) == ["job", "scopes"] and out.result["job"] == "build_beliefs"  # no embedding job: none wait
    first, second = out.result["scopes"]
    assert first == {"namespace": "agent:a", "enter": "done_before"}  # nothing else on a scope built before
    assert list(second) == ["namespace", "kinds", "enter", "passes", "outcome", "built"]  # no lease_lost: kept
    assert second["kinds"] == ["conversation"] and second["passes"] == 1 and second["outcome"] == "done"
    assert BuildReport.model_validate(out.result).to_dict() == out.result  # the model reads its own JSON back


def test_retention_forgets_old_turns_and_a_dry_run_only_reports(rt: Runtime) -> None:
    from datetime import UTC, datetime, timedelta

    from memory_core.facts.store import FactStore
    from memory_core.items import Role, Turn
    from memory_core.lifecycle.agent import turn_item
    from memory_core.query import ListRequest

    now = datetime.now(UTC)
    node = rt.layout.conversations("a")
    for i, age in enumerate((200, 100, 1)):
        rt.engine.store(
            turn_item(node, "a", "t", i, Turn(role=Role.USER, text=f"turn {i}"), at=now - timedelta(days=age))
        )
    FactStore(rt.engine, rt.layout.learnings()).learn("an old fact", at=now - timedelta(days=400))
    dry = execute(rt, Delivery("memory.retention", "r1", (), {"dry_run": True}))
    assert dry.verdict is Verdict.DONE and (dry.result["too_old"], dry.result["kept"]) == (2, 1)
    assert "done" not in dry.result
    out = execute(rt, Delivery("memory.retention", "r2"))
    assert out.verdict is Verdict.DONE and out.result["done"] == 2
    texts = sorted(h.text for h in rt.engine.list(ListRequest(limit=10)).items)
    assert texts == ["an old fact", "user: turn 2"]
    bad = execute(rt, Delivery("memory.retention", "r3", (), {"dry_run": "yes"}))
    assert bad.verdict is Verdict.DEAD
