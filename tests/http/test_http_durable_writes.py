"""HTTP learn/forget never fail the caller (issue 15 §6, reference §6.4): with the engine down they become
``tool_write`` jobs on the service's queue and answer "queued"; a worker's apply (``apply_tool_write``) stores or
removes them later. The fact rules are checked before anything is queued, and a learning records the token's
agent without moving to the agent's node."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from httpkit import TOKEN_A, TOKEN_A_BOT, TOKEN_B, TOKENS, Api, Sent

from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable
from memory_core.http import TokenTable, create_app
from memory_core.namespace import Namespace, Reach
from memory_core.query import ForgetReport, ForgetTarget, ListRequest, StoreReceipt
from memory_core.tools import ToolWrite
from memory_core.tools.jobs import apply_tool_write
from memory_core.tools.writes import QUEUED_REMOVE, QUEUED_SAVE

AWS = "AKIAIOSFODNN7EXAMPLE"


class Flaky(ReferenceEngine):
    """A reference engine whose writes can stop answering (reads still work: a store that failed over)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = True

    def _check(self) -> None:
        if not self.up:
            raise EngineUnavailable("connection refused")

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        self._check()
        return super()._store_with(item, options)

    def _store(self, item: AnyItem) -> StoreReceipt:
        self._check()
        return super()._store(item)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        self._check()
        return super()._forget(target)

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        self._check()
        return super()._forget_within(ids, reach)


@dataclass
class Coordination:
    done: set[str] = field(default_factory=set)

    def is_done(self, job_id: str) -> bool:
        return job_id in self.done


@dataclass
class ToolQueue:
    """A JobQueue double: keeps the jobs (as they travel: JSON) and says which have finished."""

    jobs: list[ToolWrite] = field(default_factory=list)
    coordination: Coordination = field(default_factory=Coordination)

    def send(self, job: ToolWrite) -> Sent:
        self.jobs.append(ToolWrite.model_validate_json(job.to_json()))
        return Sent(f"tw-{len(self.jobs)}", "parked")

    def close(self) -> None:
        pass

    def run_all(self, engine: ReferenceEngine) -> list[dict[str, object]]:
        """Apply every job in order, as a worker would."""
        out = []
        for i, job in enumerate(self.jobs, start=1):
            assert job.after is None or job.after in self.coordination.done, "a job ran before the one it follows"
            out.append(apply_tool_write(engine, job))
            self.coordination.done.add(f"tw-{i}")
        return out


@pytest.fixture
def engine() -> Flaky:
    return Flaky()


@pytest.fixture
def queue() -> ToolQueue:
    return ToolQueue()


@pytest.fixture
def api(engine: Flaky, queue: ToolQueue) -> Api:
    app = create_app(engine, TokenTable.from_json(TOKENS), max_body=4096, queue=lambda: queue)
    return Api(engine, queue, app)  # type: ignore[arg-type]


def _learnings(engine: ReferenceEngine) -> list[tuple[str, str, str | None]]:
    page = engine.list(ListRequest(limit=100))
    return sorted((h.text, str(h.meta.namespace), h.meta.agent_id) for h in page.items)


def test_with_the_engine_down_learn_answers_queued_and_a_worker_stores_it_later(
    api: Api, engine: Flaky, queue: ToolQueue
) -> None:
    engine.up = False
    sent = api.post("/v1/learn", {"text": f"The deploy key is {AWS}.", "key": "deploy.key"}, TOKEN_A_BOT)
    assert sent.status_code == 200, sent.text
    body = sent.json()
    assert body["state"] == "queued" and body["message"] == QUEUED_SAVE and body["replayed"] is False
    assert body["job_id"].startswith("tw-1.")  # a handle of the token's root (http.jobs)
    [job] = queue.jobs
    assert job.op == "learn" and job.place == Namespace.parse("team:a") and job.learning is not None
    assert AWS not in job.to_json()  # scrubbed before it is queued
    assert job.learning.id == body["id"] and job.learning.meta.agent_id == "bot"
    assert _learnings(engine) == []
    engine.up = True
    [applied] = queue.run_all(engine)
    assert applied["id"] == body["id"] and applied["replayed"] is False
    [(text, namespace, agent)] = _learnings(engine)
    assert AWS not in text and namespace == "team:a" and agent == "bot"
    markdown = api.post("/v1/recall", {"query": "deploy key"}, TOKEN_A).json()["markdown"]
    assert "deploy key" in markdown
    status = api.call("GET", f"/v1/jobs/{body['job_id']}", TOKEN_B)
    assert status.status_code == 404  # another root's token cannot follow it


def test_a_request_made_while_one_is_queued_waits_behind_it_even_once_the_engine_is_back(
    api: Api, engine: Flaky, queue: ToolQueue
) -> None:
    engine.up = False
    first = api.post("/v1/learn", {"text": "Mara lives in Porto."}).json()
    engine.up = True
    forget = api.post("/v1/forget", {"ids": [first["id"]]}, TOKEN_A_BOT).json()  # another agent, same root
    assert forget == {"forgotten": 0, "skipped": 0, "state": "queued", "message": QUEUED_REMOVE} | {
        "job_id": forget["job_id"]
    }
    assert [j.op for j in queue.jobs] == ["learn", "forget"] and queue.jobs[1].after == "tw-1"
    assert [r.get("forgotten") for r in queue.run_all(engine)] == [None, 1]
    assert _learnings(engine) == []
    again = api.post("/v1/learn", {"text": "Mara lives in Braga."})  # nothing waits now: saved at once
    assert again.json() == {"id": again.json()["id"], "replayed": False}
    assert len(queue.jobs) == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"text": "x", "key": " "}, "learning.key"),
        ({"text": "x", "key": "k" * 129}, "learning.key"),
        ({"text": "x", "importance": 1.5}, "learning.importance"),
        ({"text": "x", "kind": "preference", "importance": 0.5}, "learning.importance"),
        ({"text": "x", "kind": "preference", "key": "drink"}, "learning.key"),
        ({"text": "y" * 2001}, "learning.text"),
        ({"text": "Mara\x00lives in Porto."}, "learning.text"),
    ],
)
def test_bad_fact_fields_are_refused_by_name_and_nothing_is_queued(
    api: Api, engine: Flaky, queue: ToolQueue, body: dict[str, object], field: str
) -> None:
    engine.up = False
    refused = api.post("/v1/learn", body)
    assert refused.status_code == 400 and refused.json()["field"] == field, refused.text
    assert queue.jobs == [] and _learnings(engine) == []


def test_learn_records_the_tokens_agent_at_the_root_not_at_the_agents_node(api: Api, engine: Flaky) -> None:
    assert api.post("/v1/learn", {"text": "Mara lives in Porto."}, TOKEN_A_BOT).status_code == 200
    assert api.post("/v1/learn", {"text": "Mara has a cat.", "kind": "preference"}, TOKEN_A).status_code == 200
    assert _learnings(engine) == [
        ("Mara has a cat.", "team:a", "assistant"),
        ("Mara lives in Porto.", "team:a", "bot"),
    ]


def test_with_the_engine_up_forget_still_touches_only_the_tokens_root(api: Api, queue: ToolQueue) -> None:
    mine = api.post("/v1/learn", {"text": "Mara moved to Porto."}).json()["id"]
    assert api.post("/v1/forget", {"ids": [mine]}, TOKEN_B).json() == {"forgotten": 0, "skipped": 1}
    assert api.post("/v1/forget", {"ids": [mine, mine, "nope"]}).json() == {"forgotten": 1, "skipped": 1}
    assert queue.jobs == []


def test_a_turn_holding_nul_is_refused_by_name_and_nothing_is_logged(api: Api, engine: Flaky) -> None:
    pre = api.post("/v1/pre_turn", {"thread_id": "t1", "turn_index": 0, "user_text": "Where\x00 is Mara?"})
    assert pre.status_code == 400 and pre.json()["field"] == "user_text", pre.text
    post = api.post("/v1/post_turn", {"thread_id": "t1", "turn_index": 1, "assistant_text": "In\x00 Porto."})
    assert post.status_code == 400 and post.json()["field"] == "assistant_text", post.text
    assert engine.list(ListRequest(limit=10)).items == ()
