"""The HTTP API against the app in process (httpx over the ASGI transport): auth, tenancy, bodies, the lifecycle,
learn/forget, ingest jobs, errors mapped to statuses, health, metrics and the OpenAPI document."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from _executors import ManualExecutor
from httpkit import TOKEN_A, TOKEN_A_BOT, TOKEN_B, TOKENS, Api, RecordingQueue, run

from memory_core.descriptor import EngineHealth
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import ConfigError, EngineError, EngineUnavailable
from memory_core.http import TokenTable, create_app
from memory_core.http.errors import status_for
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, JobOutcome
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Namespace
from memory_core.query import ListRequest

PRE = {"thread_id": "t1", "turn_index": 0, "user_text": "Where does Mara live these days?"}


def stored(engine: ReferenceEngine) -> list[str]:
    return sorted(h.id for h in engine.list(ListRequest(limit=200)).items)


def learn(api: Api, text: str, token: str = TOKEN_A) -> str:
    response = api.post("/v1/learn", {"text": text}, token)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


# auth ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", f"Token {TOKEN_A}", "Bearer not-a-token-anyone-has-xx"],
)
def test_a_missing_or_rejected_token_is_401_and_nothing_is_stored(api: Api, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = api.post("/v1/pre_turn", PRE, token=None, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"] == "Unauthorized"
    assert TOKEN_A not in response.text
    assert stored(api.engine) == []


def test_a_token_naming_another_tenants_root_is_403_and_nothing_is_stored(api: Api) -> None:
    for path, body in [("/v1/pre_turn", PRE), ("/v1/learn", {"text": "Mara lives in Porto."}), ("/v1/recall", {})]:
        response = api.post(path, body, TOKEN_A, params={"root": "team:b"})
        assert response.status_code == 403, (path, response.text)
        assert response.json()["error"] == "OutOfScope"
        assert "team:b" not in response.text  # the refusal says nothing about the other root
    assert stored(api.engine) == []


def test_a_token_naming_its_own_root_is_served(api: Api) -> None:
    assert api.post("/v1/recall", {}, TOKEN_A, params={"root": "team:a"}).status_code == 200


def test_an_agent_the_token_is_not_bound_to_is_403(api: Api) -> None:
    assert api.post("/v1/pre_turn", PRE, TOKEN_A_BOT, params={"agent": "assistant"}).status_code == 403
    assert stored(api.engine) == []
    served = api.post("/v1/pre_turn", PRE, TOKEN_A_BOT)  # no agent named: the token's own
    assert served.status_code == 200
    [item] = api.engine.list(ListRequest(limit=10)).items
    assert item.meta.agent_id == "bot"
    assert item.meta.namespace == MemoryLayout("team:a").conversations("bot")


def test_insecure_local_serves_without_a_header_at_its_root() -> None:
    engine = ReferenceEngine()
    app = create_app(engine, TokenTable.insecure_local(MemoryLayout("team:dev")), queue=RecordingQueue)
    response = Api(engine, RecordingQueue(), app, "http://127.0.0.1:8080").post("/v1/pre_turn", PRE, token=None)
    assert response.status_code == 200, response.text
    [item] = engine.list(ListRequest(limit=10)).items
    assert item.meta.namespace == Namespace.parse("team:dev/agent:assistant")


def test_token_files_refuse_short_duplicated_or_malformed_tokens_without_showing_them() -> None:
    secret = "short-secret"
    with pytest.raises(ConfigError) as short:
        TokenTable.from_json([{"token": secret, "root": "team:a"}])
    assert secret not in str(short.value)
    with pytest.raises(ConfigError, match="twice") as twice:
        TokenTable.from_json([{"token": TOKEN_A, "root": "team:a"}, {"token": TOKEN_A, "root": "team:b"}])
    assert TOKEN_A not in str(twice.value)
    with pytest.raises(ConfigError, match=r"tokens\[0\].root"):
        TokenTable.from_json([{"token": TOKEN_A, "root": "not a namespace"}])
    with pytest.raises(ConfigError, match="unknown keys"):
        TokenTable.from_json([{"token": TOKEN_A, "root": "team:a", "admin": True}])
    with pytest.raises(ConfigError, match="no token"):
        TokenTable.from_json([])
    assert TOKEN_A not in repr(TokenTable.from_json(TOKENS))


# bodies ----------------------------------------------------------------------------------------------------------
def test_a_body_over_the_limit_is_413_before_it_is_parsed(api: Api) -> None:
    big = {**PRE, "user_text": "x" * 5000}
    response = api.post("/v1/pre_turn", big)
    assert response.status_code == 413
    assert response.json() == {"error": "BodyTooLarge", "message": response.json()["message"], "field": "body"}
    assert stored(api.engine) == []


def test_a_streamed_body_without_a_length_is_cut_at_the_limit(api: Api) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield b" " * 1000

    response = api.call("POST", "/v1/pre_turn", content=chunks())
    assert response.status_code == 413
    assert stored(api.engine) == []


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (b"\xff\xfe", "body"),
        (json.dumps({**PRE, "turn_index": -1}).encode(), "turn_index"),
        (json.dumps({**PRE, "user_text": "  "}).encode(), "user_text"),
        (json.dumps({**PRE, "namespace": "team:b"}).encode(), "namespace"),
        (json.dumps({"thread_id": "t1"}).encode(), "turn_index"),
    ],
)
def test_a_malformed_body_is_400_naming_the_field_and_nothing_is_stored(api: Api, content: bytes, field: str) -> None:
    response = api.call("POST", "/v1/pre_turn", content=content, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidRequest"
    assert response.json()["field"] == field
    assert stored(api.engine) == []


def test_an_unknown_route_or_method_answers_json(api: Api) -> None:
    missing = api.post("/v1/nothing", {})
    assert missing.status_code == 404 and missing.json()["error"] == "NotFound"
    wrong = api.call("GET", "/v1/pre_turn")
    assert wrong.status_code == 405 and wrong.json()["error"] == "InvalidRequest"


# the lifecycle -------------------------------------------------------------------------------------------------
def test_a_learning_reaches_its_tenants_packs_and_no_other(api: Api) -> None:
    learn(api, "Mara moved to Porto in March.")
    mine = api.post("/v1/pre_turn", PRE, TOKEN_A)
    theirs = api.post("/v1/pre_turn", PRE, TOKEN_B)
    assert mine.status_code == theirs.status_code == 200
    assert "Porto" in mine.json()["pack"]["markdown"]
    assert "Porto" not in theirs.json()["pack"]["markdown"]
    assert mine.json()["logged"]["replayed"] is False
    again = api.post("/v1/pre_turn", PRE, TOKEN_A)  # a retried turn is a replay
    assert again.json()["logged"]["replayed"] is True
    assert "Mara live these days" not in again.json()["pack"]["markdown"]  # never the logged turn itself


def test_a_keyed_fact_replaces_its_value_and_bad_fact_fields_are_refused_by_name(api: Api) -> None:
    for text in ("The UI theme is dark.", "The UI theme is light."):
        sent = api.post("/v1/learn", {"text": text, "key": "ui.theme", "importance": 0.9})
        assert sent.status_code == 200, sent.text
    markdown = api.post("/v1/pre_turn", {**PRE, "user_text": "Which UI theme?"}).json()["pack"]["markdown"]
    assert "light" in markdown and "dark" not in markdown
    for body, field in (
        ({"text": "x", "key": " "}, "learning.key"),
        ({"text": "x", "key": "k" * 129}, "learning.key"),
        ({"text": "x", "importance": 1.5}, "learning.importance"),
        ({"text": "x", "kind": "preference", "importance": 0.5}, "learning.importance"),
    ):
        refused = api.post("/v1/learn", body)
        assert refused.status_code == 400 and refused.json()["field"] == field, refused.text


def test_post_turn_queues_the_build_it_makes_due_at_the_tokens_root(api: Api) -> None:
    quiet = api.post("/v1/post_turn", {"thread_id": "t1", "turn_index": 1, "assistant_text": "Porto, I think."})
    assert quiet.status_code == 200 and quiet.json()["job_ids"] == []
    due = api.post("/v1/post_turn", {"thread_id": "t1", "turn_index": 9, "assistant_text": "Noted."})
    assert due.status_code == 200, due.text
    [handle] = due.json()["job_ids"]
    assert handle.startswith("job-1.")  # the queue's id, bound to the token's root (http.jobs)
    [job] = api.queue.jobs
    assert isinstance(job, BuildBeliefs)
    assert job.request.reach.at == MemoryLayout("team:a").conversations("assistant")


def test_start_session_compaction_and_recall_answer_packs(api: Api) -> None:
    learn(api, "Mara moved to Porto in March.")
    api.post("/v1/pre_turn", PRE)
    session = api.post("/v1/start_session", {"thread_id": "t1"})
    assert session.status_code == 200 and session.json()["markdown"]
    compaction = api.post(
        "/v1/recall_for_compaction", {"thread_id": "t1", "dropped": [{"role": "user", "text": "Where is Mara?"}]}
    )
    assert compaction.status_code == 200 and "Porto" in compaction.json()["markdown"]
    recall = api.post("/v1/recall", {"query": "Porto"})
    assert recall.status_code == 200 and "Porto" in recall.json()["markdown"]


def test_forget_touches_only_the_tokens_root(api: Api) -> None:
    mine = learn(api, "Mara moved to Porto in March.")
    refused = api.post("/v1/forget", {"ids": [mine]}, TOKEN_B)
    assert refused.status_code == 200
    assert refused.json() == {"forgotten": 0, "skipped": 1}
    assert stored(api.engine) == [mine]
    done = api.post("/v1/forget", {"ids": [mine, mine, "unknown-id"]}, TOKEN_A)
    assert done.json() == {"forgotten": 1, "skipped": 1}
    assert stored(api.engine) == []


def test_forget_takes_1_to_100_ids(api: Api) -> None:
    assert api.post("/v1/forget", {"ids": []}).json()["field"] == "ids"
    assert api.post("/v1/forget", {"ids": [f"id-{i}" for i in range(101)]}).json()["field"] == "ids"


# jobs ------------------------------------------------------------------------------------------------------------
def test_ingest_queues_a_job_at_the_tokens_root_and_refuses_another(api: Api) -> None:
    docs = [{"source": "notes", "title": "Trip", "text": "Kyoto in April."}]
    refused = api.post("/v1/ingest", {"job": "ingest_brain", "documents": docs, "root": "team:b"})
    assert refused.status_code == 403
    assert api.queue.jobs == []
    accepted = api.post("/v1/ingest", {"job": "ingest_brain", "documents": docs})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["state"] == "published"
    assert accepted.json()["job_id"].startswith("job-1.")
    [job] = api.queue.jobs
    assert isinstance(job, IngestBrain) and job.root == Namespace.parse("team:a")


def test_the_documented_ingest_body_is_accepted_and_stored(api: Api) -> None:
    from pathlib import Path

    from memory_core.lifecycle.runner import BackgroundRunner

    page = (Path(__file__).parents[2] / "docs" / "http-api.md").read_text(encoding="utf-8")
    section = page.split("## Ingest", 1)[1].split("\n## ", 1)[0]
    example = json.loads(section.split("```json", 1)[1].split("```", 1)[0])
    accepted = api.post("/v1/ingest", example)
    assert accepted.status_code == 202, accepted.text
    [job] = api.queue.jobs
    assert isinstance(job, IngestBrain) and job.collection == "handbook" and job.root == Namespace.parse("team:a")
    assert str(job.documents[0].source) == "notion" and job.documents[0].title == "Release process"
    report = BackgroundRunner(api.engine, MemoryLayout("team:a")).run(job)
    assert report.outcome == JobOutcome.done(), report
    found = api.post("/v1/recall", {"query": "When are releases cut?"}).json()["markdown"]
    assert "every Friday after the freeze" in found
    bad = {**example, "documents": [{**example["documents"][0], "source": "Not a slug!"}]}
    refused = api.post("/v1/ingest", bad)
    assert refused.status_code == 400 and "source" in refused.json()["field"]


# errors, health, metrics, OpenAPI ------------------------------------------------------------------------------
class DownEngine(ReferenceEngine):
    def store_with(self, *args: Any, **kwargs: Any) -> Any:
        raise EngineUnavailable("engine server stopped answering")


def test_an_engine_outage_is_503_with_retry_after_and_pre_turn_still_answers() -> None:
    engine = DownEngine()
    api = Api(engine, RecordingQueue(), create_app(engine, TokenTable.from_json(TOKENS), queue=RecordingQueue))
    response = api.post("/v1/post_turn", {"thread_id": "t1", "turn_index": 1, "assistant_text": "Noted."})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json() == {"error": "EngineUnavailable", "message": "the engine is unavailable; retry later"}
    pre = api.post("/v1/pre_turn", PRE)  # pre_turn never fails on the engine: the log error is reported
    assert pre.status_code == 200
    assert pre.json()["log_error"] == "the turn was not logged (see the server's log)"
    metrics = api.call("GET", "/metrics").text
    assert "memory_core_pre_turn_log_errors_total 1.0" in metrics


ENGINE_URL = "postgresql://postgres:***@127.0.0.1:15432/db"


class LeakyEngine(ReferenceEngine):
    """An engine whose errors and health name its address, as the PostgreSQL engine's do."""

    def store_with(self, *args: Any, **kwargs: Any) -> Any:
        raise EngineError(f"postgresql {ENGINE_URL}: DataError: invalid byte sequence")

    def fetch(self, *args: Any, **kwargs: Any) -> Any:
        raise EngineUnavailable(f"postgresql {ENGINE_URL} is unavailable: connection refused")

    def health(self) -> EngineHealth:
        return EngineHealth.down(f"postgresql {ENGINE_URL} is unavailable: connection refused")


def test_no_answer_names_the_engine_address(caplog: pytest.LogCaptureFixture) -> None:
    engine = LeakyEngine()
    api = Api(engine, RecordingQueue(), create_app(engine, TokenTable.from_json(TOKENS), queue=RecordingQueue))
    failed = api.post("/v1/post_turn", {"thread_id": "t1", "turn_index": 1, "assistant_text": "Noted."})
    assert failed.status_code == 500
    assert failed.json() == {"error": "EngineError", "message": "internal error (see the server's log)"}
    pre = api.post("/v1/pre_turn", PRE)
    assert pre.status_code == 200
    reasons = {s["reason"] for s in pre.json()["pack"]["skipped"]}
    assert "unavailable (see the server's log)" in reasons
    recall = api.post("/v1/recall", {"query": "Mara"})
    assert recall.status_code == 200 and recall.json()["skipped"]
    down = api.call("GET", "/health", token=None)
    assert (down.status_code, down.json()) == (503, {"status": "unavailable"})
    told = api.call("GET", "/health")
    assert (told.status_code, told.json()) == (503, {"engine": "reference", "health": {"state": "down"}})
    for response in (failed, pre, recall, down, told):
        assert "127.0.0.1" not in response.text and "postgresql" not in response.text
    assert ENGINE_URL in caplog.text  # the operator still sees the detail in the server's log


def test_every_error_variant_has_one_status() -> None:
    from memory_core import errors
    from memory_core.http.errors import BodyTooLarge, OutOfScope

    table = {
        errors.InvalidRequest("x"): 400,
        BodyTooLarge("x"): 413,
        errors.Unauthorized("x"): 401,
        OutOfScope("x"): 403,
        errors.NotFound("x"): 404,
        errors.Conflict("x"): 409,
        errors.Unsupported("x"): 501,
        errors.EngineUnavailable("x"): 503,
        errors.EngineError("x"): 500,
        errors.ConfigError("x"): 500,
        RuntimeError("x"): 500,
    }
    assert {type(e).__name__: status_for(e) for e in table} == {type(e).__name__: s for e, s in table.items()}


def test_health_needs_no_token_and_metrics_needs_one(api: Api) -> None:
    health = api.call("GET", "/health", token=None)
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    assert api.call("GET", "/health").json() == {"engine": "reference", "health": {"state": "ok"}}
    assert api.call("GET", "/health", token="wrong-token-wrong-token").status_code == 401
    assert api.call("GET", "/metrics", token=None).status_code == 401
    api.post("/v1/recall", {})
    api.post("/v1/recall", {}, token="Bearer wrong-token-wrong-token")
    text = api.call("GET", "/metrics").text
    assert 'memory_core_http_requests_total{method="POST",route="/v1/recall",status="200"} 1.0' in text
    assert 'memory_core_http_requests_total{method="POST",route="/v1/recall",status="401"} 1.0' in text
    assert TOKEN_A not in text


def test_the_openapi_document_is_generated_from_the_models(api: Api) -> None:
    doc = api.call("GET", "/openapi.json", token=None).json()
    assert doc["openapi"].startswith("3.1")
    pre = doc["paths"]["/v1/pre_turn"]["post"]
    body_ref = pre["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][body_ref.rsplit("/", 1)[1]]
    assert set(schema["required"]) >= {"thread_id", "turn_index", "user_text"}
    assert schema["additionalProperties"] is False
    assert {"400", "401", "403", "413", "415", "503"} <= set(pre["responses"])
    assert doc["paths"]["/v1/ingest"]["post"]["responses"]["202"]
    assert "/v1/jobs/{job_id}" in doc["paths"]


def test_the_server_closes_the_queue_it_opened_on_shutdown() -> None:
    queue = RecordingQueue()
    engine = ReferenceEngine()
    app = create_app(engine, TokenTable.from_json(TOKENS), queue=lambda: queue)

    async def lifespan() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                docs = [{"source": "notes", "text": "Kyoto in April."}]
                headers = {"Authorization": f"Bearer {TOKEN_A}"}
                body = {"job": "ingest_brain", "documents": docs}
                assert (await client.post("/v1/ingest", json=body, headers=headers)).status_code == 202

    run(lifespan)
    assert queue.closed


# prefetch ----------------------------------------------------------------------------------------------------
def test_with_prefetch_pre_turn_answers_the_last_completed_pack_per_root_and_learn_clears_it() -> None:
    engine, pool = ReferenceEngine(), ManualExecutor()
    app = create_app(engine, TokenTable.from_json(TOKENS), queue=RecordingQueue, prefetch=True, prefetch_executor=pool)
    api = Api(engine, RecordingQueue(), app)
    learn(api, "Mara moved to Porto in March.")
    cold = api.post("/v1/pre_turn", PRE).json()
    assert cold["earlier_lookup"] is False and cold["pack"]["markdown"] == ""
    assert cold["logged"]["replayed"] is False  # logged at once, as without the cache
    assert pool.run_all() == 1
    warm = api.post("/v1/pre_turn", {**PRE, "turn_index": 2}).json()
    assert warm["earlier_lookup"] is True and "Porto" in warm["pack"]["markdown"]
    other = api.post("/v1/pre_turn", {**PRE, "turn_index": 2}, TOKEN_B).json()
    assert other["earlier_lookup"] is False  # another root, another cache
    pool.run_all()
    learn(api, "Mara's sister lives in Braga.")  # a write clears the root's packs
    assert api.post("/v1/pre_turn", {**PRE, "turn_index": 4}).json()["earlier_lookup"] is False
    metrics = api.call("GET", "/metrics").text
    assert 'memory_core_prefetch_lookups_total{result="hit"} 1.0' in metrics
    assert 'memory_core_prefetch_lookups_total{result="miss"} 3.0' in metrics
