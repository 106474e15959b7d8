"""The CortexDB doubles on their own: the unaccommodating log, both wires' rules, and every fault knob."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from memory_core.engines.cortexdb.double import CortexDouble, CortexLog, direct_double, hosted_double
from memory_core.errors import InvalidRequest

SCOPE = "app:tinymemory/agent:a/app:documents"


def _event(text: str = "hello world", scope: str = SCOPE, key: str | None = "k1", **context: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scope": scope,
        "modality": "document",
        "content": {"kind": "message", "role": "user", "text": text},
        "context": {"labels": context.pop("labels", ["kind:document"]), **context},
    }
    if key is not None:
        body["idempotency_key"] = key
    return body


@pytest.fixture
def direct() -> CortexDouble:
    return direct_double()


@pytest.fixture
def hosted() -> CortexDouble:
    return hosted_double()


def _client(double: CortexDouble, token: str = "t0k") -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}", "X-Cortex-Actor": "user:local"}
    return httpx.Client(transport=double.transport, base_url="http://double.test", headers=headers)


@pytest.fixture
def dc(direct: CortexDouble) -> Iterator[httpx.Client]:
    with _client(direct) as client:
        yield client


@pytest.fixture
def hc(hosted: CortexDouble) -> Iterator[httpx.Client]:
    with _client(hosted) as client:
        yield client


def _hosted_write(hc: httpx.Client, body: dict[str, Any], key: str) -> httpx.Response:
    return hc.post("/memory/experience", json=body, headers={"Idempotency-Key": key})


def _listed(client: httpx.Client, path: str = "/v1/events", **params: str) -> list[str]:
    data = client.get(path, params={"scope": SCOPE, "limit": "100", **params}).json()
    data = data["data"] if "success" in data else data
    return [item["id"] for item in data["items"]]


# the log ------------------------------------------------------------------------------------------------
def test_a_key_replays_with_the_same_body_conflicts_with_another_and_forget_releases_it(dc: httpx.Client) -> None:
    first = dc.post("/v1/experience", json=_event())
    assert first.status_code == 202 and "replayed_from_idempotency" not in first.json()
    again = dc.post("/v1/experience", json=_event())
    assert again.json() == {"event_id": first.json()["event_id"], "replayed_from_idempotency": True}
    assert dc.post("/v1/experience", json=_event("other text")).status_code == 409
    forget = {"scope": SCOPE, "layers": ["events"], "selector": {"memory_ids": [first.json()["event_id"]]}}
    assert dc.post("/v1/forget", json=forget).json() == {"forgotten": 1}
    fresh = dc.post("/v1/experience", json=_event())
    assert fresh.status_code == 202 and fresh.json()["event_id"] != first.json()["event_id"]


def test_listings_are_newest_first_emit_every_event_twice_and_count_copies_in_limit(dc: httpx.Client) -> None:
    ids = [dc.post("/v1/experience", json=_event(f"text {i}", key=f"k{i}")).json()["event_id"] for i in range(3)]
    page = dc.get("/v1/events", params={"scope": SCOPE, "limit": "3"}).json()
    assert [item["id"] for item in page["items"]] == [ids[2], ids[2], ids[1]]
    assert page["has_more"] is True
    rest = dc.get("/v1/events", params={"scope": SCOPE, "limit": "3", "cursor": page["next_cursor"]}).json()
    assert [item["id"] for item in rest["items"]] == [ids[1], ids[0], ids[0]] and rest["has_more"] is False
    assert _listed(dc, nonsense="ignored", view="whatever") == [i for i in reversed(ids) for _ in range(2)]


def test_labels_narrow_a_listing_any_of(dc: httpx.Client) -> None:
    a = dc.post("/v1/experience", json=_event("a", key="ka", labels=["x"])).json()["event_id"]
    b = dc.post("/v1/experience", json=_event("b", key="kb", labels=["y"])).json()["event_id"]
    dc.post("/v1/experience", json=_event("c", key="kc", labels=["z"]))
    assert _listed(dc, labels="x,y") == [b, b, a, a]


def test_forget_is_only_by_ids(dc: httpx.Client) -> None:
    dc.post("/v1/experience", json=_event())
    for selector in ({}, {"memory_ids": []}):
        body = {"scope": SCOPE, "layers": ["events"], "selector": selector}
        assert dc.post("/v1/forget", json=body).status_code == 422
    body = {"scope": SCOPE, "layers": ["events"], "selector": {"memory_ids": ["x"]}, "confirm_all": True}
    assert dc.post("/v1/forget", json=body).status_code == 422
    assert len(_listed(dc)) == 2


def test_recall_packs_and_answers_render_role_and_text_and_need_the_pack(dc: httpx.Client) -> None:
    dc.post("/v1/experience", json=_event("billing runs on postgres"))
    dc.post("/v1/experience", json=_event("lunch is at noon", key="k2"))
    body = {"scope": SCOPE, "query": "postgres billing", "budgets": {"per_layer_limits": {"events": 5}}}
    assert dc.post("/v1/recall", json=body).status_code == 422  # view is required
    pack = dc.post("/v1/recall", json={**body, "view": "granular"}).json()
    assert pack["pack_id"] == "pack_test"
    assert [e["content"]["text"] for e in pack["layers"]["events"]] == ["billing runs on postgres"]
    ask = {"scope": SCOPE, "question": "db?", "use_pack_id": "pack_test", "cite_sources": True}
    answer = dc.post("/v1/answer", json={**ask, "answer_instructions": None}).json()
    assert answer["answer"] == "[user] billing runs on postgres"
    assert answer["diagnostics"]["answer_model"] == "cortex-double"
    assert dc.post("/v1/answer", json={**ask, "use_pack_id": "pack_other"}).status_code == 404
    dc.post("/v1/forget", json={"scope": SCOPE, "layers": ["events"], "selector": {"memory_ids": ["nope"]}})
    assert dc.post("/v1/answer", json=ask).status_code == 404  # packs drop after any forget


def test_direct_refuses_unregistered_scope_types_and_a_wrong_actor(direct: CortexDouble, dc: httpx.Client) -> None:
    answer = dc.post("/v1/experience", json=_event(scope="app:tinymemory/planet:mars/app:documents"))
    assert answer.status_code == 422 and answer.json()["code"] == "UNREGISTERED_SCOPE_TYPE"
    assert dc.get("/v1/auth/whoami").json() == {"caller": "user:local"}
    with httpx.Client(transport=direct.transport, base_url="http://d.test", headers={"Authorization": "Bearer t"}) as c:
        refused = c.get("/v1/admin/health")
    assert refused.status_code == 401 and refused.json()["code"] == "ACTOR_MISMATCH"


def test_direct_bulk_answers_one_result_per_item_and_builds_beliefs(direct: CortexDouble, dc: httpx.Client) -> None:
    items = [_event("Refunds take five days. Finance approves.", key="b1"), _event("Lunch is at noon.", key="b2")]
    answer = dc.post("/v1/experience/bulk", json={"items": items, "ordering": "strict_temporal"})
    assert answer.status_code == 202 and len(answer.json()["results"]) == 2
    assert dc.post("/v1/beliefs/build", json={"scope": SCOPE, "extra": 1}).status_code == 422
    built = dc.post("/v1/beliefs/build", json={"scope": SCOPE}).json()
    assert built["built"] == 3 and built["events_scanned"] == 2
    beliefs = dc.get("/v1/beliefs", params={"scope": SCOPE, "limit": "10"}).json()["items"]
    assert beliefs[0]["claim"] == {
        "subject": "the record",
        "predicate": "notes_that",
        "object": "Refunds take five days.",
    }
    assert dc.post("/v1/beliefs/build", json={"scope": SCOPE}).json()["built"] == 0


def test_erasure_needs_confirm_all_and_removes_the_scope(dc: httpx.Client) -> None:
    dc.post("/v1/experience", json=_event())
    assert dc.post("/v1/erasures", json={"scope": SCOPE}).status_code == 422
    assert dc.post("/v1/erasures", json={"scope": SCOPE, "confirm_all": True}).json()["erased"] == 1
    assert _listed(dc) == [] and dc.get("/v1/scopes/list", params={"prefix": "app:"}).json() == {"items": []}


# hosted -------------------------------------------------------------------------------------------------
def test_hosted_wraps_answers_and_failures_in_envelopes(hc: httpx.Client) -> None:
    ok = _hosted_write(hc, _event(key=None), "idem-1")
    assert ok.json() == {"success": True, "data": {"event_id": "evt_000001"}}
    bad = hc.post("/memory/experience", json=_event(key=None))
    assert bad.status_code == 400
    assert bad.json() == {
        "success": False,
        "error": "an Idempotency-Key header is required",
        "errorCode": "IDEMPOTENCY_KEY_REQUIRED",
    }
    assert hc.get("/memory/scopes", params={"prefix": "app:"}).json()["data"] == {"scopes": [SCOPE]}


def test_hosted_claims_each_idempotency_key(hc: httpx.Client) -> None:
    first = _hosted_write(hc, _event(key=None), "idem-1")
    assert _hosted_write(hc, _event(key=None), "idem-1").json() == first.json()  # a replay of the stored answer
    assert _hosted_write(hc, _event("changed", key=None), "idem-1").status_code == 409
    assert len(_listed(hc, "/memory/events")) == 2  # one event, listed twice


def test_hosted_scope_grammar_repeated_labels_and_strict_answer_schema(hc: httpx.Client) -> None:
    deep = "/".join(f"agent:a{i}" for i in range(32))
    assert _hosted_write(hc, _event(scope=deep, key=None), "k-deep").status_code == 422
    assert _hosted_write(hc, _event(scope="no-type", key=None), "k-bad").status_code == 422
    repeated = hc.get("/memory/events", params=[("scope", SCOPE), ("labels", "a"), ("labels", "b")])
    assert repeated.status_code == 400
    _hosted_write(hc, _event("hello world", key=None), "k1")
    hc.post("/memory/recall", json={"scope": SCOPE, "query": "hello", "view": "granular"})
    ask = {"scope": SCOPE, "question": "hi?", "use_pack_id": "pack_test"}
    assert hc.post("/memory/answer", json={**ask, "answer_instructions": None}).status_code == 422
    assert hc.post("/memory/answer", json={**ask, "extra": True}).status_code == 422
    assert hc.post("/memory/answer", json=ask).json()["data"]["answer"] == "[user] hello world"


def test_hosted_delete_memory_erases_the_whole_tree(hc: httpx.Client) -> None:
    _hosted_write(hc, _event(key=None), "k1")
    assert hc.delete("/memory").json()["data"] == {"erased": 1}
    assert _listed(hc, "/memory/events") == []


# knobs --------------------------------------------------------------------------------------------------
def test_fail_all_answers_503_everywhere(direct: CortexDouble, dc: httpx.Client) -> None:
    direct.knobs.fail_all = True
    assert {dc.get("/v1/admin/health").status_code, dc.post("/v1/experience", json=_event()).status_code} == {503}


def test_arm_after_write_holds_the_faults_until_a_write_lands(direct: CortexDouble, dc: httpx.Client) -> None:
    direct.knobs.update({"fail_all": True, "arm_after_write": True})
    assert dc.get("/v1/admin/health").status_code == 200
    assert dc.post("/v1/experience", json=_event()).status_code == 202
    assert dc.get("/v1/admin/health").status_code == 503


def test_accept_token_refuses_any_other_bearer(direct: CortexDouble) -> None:
    direct.knobs.accept_token = "right"
    with _client(direct, "wrong") as wrong, _client(direct, "right") as right:
        assert wrong.get("/v1/admin/health").status_code == 401
        assert right.get("/v1/admin/health").status_code == 200


def test_hide_listing_for_keeps_a_new_event_out_of_the_next_listings(direct: CortexDouble, dc: httpx.Client) -> None:
    direct.knobs.hide_listing_for = 2
    dc.post("/v1/experience", json=_event())
    assert [len(_listed(dc)) for _ in range(3)] == [0, 0, 2]


@pytest.mark.parametrize("wire", ["direct", "hosted"])
def test_rate_limits_answer_429_with_retry_after_then_recover(wire: str) -> None:
    double = direct_double() if wire == "direct" else hosted_double()
    double.knobs.update({"rate_limit_after": 1, "rate_limit_count": 2, "rate_limit_retry_after": 3})
    path = "/v1/admin/health" if wire == "direct" else "/memory/scopes"
    with _client(double) as client:
        answers = [client.get(path) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 429, 429, 200]
    assert answers[1].headers["Retry-After"] == "3"
    if wire == "hosted":  # express-rate-limit: plain text and RateLimit-* headers
        assert answers[1].text.startswith("Too many requests") and answers[1].headers["RateLimit-Remaining"] == "0"


def test_apply_then_fail_stores_the_event_but_answers_500(direct: CortexDouble, dc: httpx.Client) -> None:
    direct.knobs.apply_then_fail = 1
    assert dc.post("/v1/experience", json=_event()).status_code == 500
    assert len(_listed(dc)) == 2
    assert dc.post("/v1/experience", json=_event("next", key="k2")).status_code == 202  # only once


def test_claim_then_fail_holds_the_key_and_stores_nothing(hosted: CortexDouble, hc: httpx.Client) -> None:
    hosted.knobs.claim_then_fail = 1
    assert _hosted_write(hc, _event(key=None), "idem-9").status_code == 500
    retry = _hosted_write(hc, _event(key=None), "idem-9")
    assert retry.status_code == 409 and retry.json()["errorCode"] == "IDEMPOTENCY_KEY_IN_FLIGHT"
    assert _listed(hc, "/memory/events") == []


def test_fail_nth_experience_fails_only_that_request_unapplied(direct: CortexDouble, dc: httpx.Client) -> None:
    direct.knobs.fail_nth_experience = 2
    codes = [dc.post("/v1/experience", json=_event(f"t{i}", key=f"k{i}")).status_code for i in range(3)]
    assert codes == [202, 500, 202]
    texts = {e["content"]["text"] for e in dc.get("/v1/events", params={"scope": SCOPE}).json()["items"]}
    assert texts == {"t0", "t2"}


def test_recall_down_fails_recall_and_answer_only(direct: CortexDouble, dc: httpx.Client) -> None:
    dc.post("/v1/experience", json=_event())
    direct.knobs.recall_down = True
    body = {"scope": SCOPE, "query": "hello", "view": "granular"}
    assert dc.post("/v1/recall", json=body).status_code == 503
    assert dc.post("/v1/answer", json={"scope": SCOPE, "use_pack_id": "pack_test"}).status_code == 503
    assert len(_listed(dc)) == 2


def test_whoami_off_answers_404_and_asks_for_no_actor(direct: CortexDouble) -> None:
    direct.knobs.whoami = False
    with httpx.Client(transport=direct.transport, base_url="http://d.test", headers={"Authorization": "Bearer t"}) as c:
        assert c.get("/v1/auth/whoami").status_code == 404
        assert c.get("/v1/admin/health").status_code == 200


def test_an_unknown_knob_is_refused_by_name(direct: CortexDouble) -> None:
    with pytest.raises(InvalidRequest) as info:
        direct.knobs.update({"fail_sometimes": True})
    assert info.value.field == "fail_sometimes"


def test_seen_records_every_request_with_its_status_and_never_serves_the_bearer(
    direct: CortexDouble, dc: httpx.Client
) -> None:
    dc.get("/v1/admin/health")
    dc.post("/v1/experience?wait=indexed", json=_event())
    dc.get("/v1/nowhere")
    assert [(s.method, s.path, s.status) for s in direct.seen] == [
        ("GET", "v1/admin/health", 200),
        ("POST", "v1/experience", 202),
        ("GET", "v1/nowhere", 404),
    ]
    assert direct.seen[1].param("wait") == "indexed" and direct.seen[1].body["idempotency_key"] == "k1"
    assert direct.seen[0].bearer == "t0k"
    assert "t0k" not in str([s.to_json() for s in direct.seen])


def test_two_doubles_can_share_one_log() -> None:
    log = CortexLog()
    direct, hosted = direct_double(log), hosted_double(log)
    with _client(direct) as dc, _client(hosted) as hc:
        dc.post("/v1/experience", json=_event())
        assert len(_listed(hc, "/memory/events")) == 2


@pytest.mark.parametrize(
    ("args", "option"), [(["--wire", "grpc"], "--wire"), (["--host", "0.0.0.0"], "--host")], ids=["wire", "host"]
)
def test_the_cortex_double_command_refuses_bad_options_naming_them(args: list[str], option: str) -> None:
    from typer.testing import CliRunner

    from memory_core.cli import load_commands

    result = CliRunner().invoke(load_commands(), ["cortex-double", "--port", "0", *args])
    assert result.exit_code == 2 and option in result.output
