"""The HTTP API against a hostile client: content types, bodies that parse two ways, header tricks, a token for
one root naming another anywhere, a server without tokens reached under a foreign ``Host``, concurrent calls, and
metrics whose labels stay bounded whatever paths are thrown at it."""

from __future__ import annotations

import asyncio
import json
import random
import re
import string
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpkit import TOKEN_A, TOKEN_A_BOT, TOKEN_B, TOKENS, Api, RecordingQueue, make_api, run
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.errors import ConfigError
from memory_core.http import TokenTable, create_app
from memory_core.http.app import ROUTES
from memory_core.http.auth import is_loopback_host
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.query import ListRequest
from memory_core.settings import get_settings

PRE = {"thread_id": "t1", "turn_index": 0, "user_text": "Where does Mara live these days?"}
JSON = {"Content-Type": "application/json"}


def stored(engine: Any) -> int:
    return len(engine.list(ListRequest(limit=200)).items)


# content types ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
def test_a_body_that_is_not_json_by_its_type_is_415_and_nothing_is_stored(api: Api, content_type: str | None) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = api.call("POST", "/v1/pre_turn", content=json.dumps(PRE).encode(), headers=headers)
    assert response.status_code == 415, response.text
    assert response.json()["error"] == "UnsupportedMediaType" and response.json()["field"] == "content-type"
    assert stored(api.engine) == 0


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "APPLICATION/JSON", "application/x+json"])
def test_json_types_are_served(api: Api, content_type: str) -> None:
    response = api.call(
        "POST", "/v1/pre_turn", content=json.dumps(PRE).encode(), headers={"Content-Type": content_type}
    )
    assert response.status_code == 200, response.text


def test_an_empty_body_needs_no_type(api: Api) -> None:
    assert api.call("POST", "/v1/recall").status_code == 200


# bodies that parse two ways ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"thread_id":"t1","turn_index":0,"user_text":"hi","turn_index":7}', "given twice"),
        (b'{"thread_id":"t1","turn_index":0,"user_text":"hi","at":{"a":1,"a":2}}', "given twice"),
        (b'{"text":"x","confidence":NaN}', "NaN is not JSON"),
        (b'{"text":"x","confidence":Infinity}', "Infinity is not JSON"),
        (b'{"thread_id":"t1","dropped":' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper"),
        (b'{"thread_id":"t1","dropped":' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested deeper"),
        (b'{"thread_id":"t1"} trailing', "not JSON"),
    ],
)
def test_a_body_that_could_be_read_two_ways_is_400_and_nothing_is_stored(content: bytes, says: str) -> None:
    engine = ReferenceEngine()
    api = Api(engine, RecordingQueue(), create_app(engine, TokenTable.from_json(TOKENS), queue=RecordingQueue))
    for path in ("/v1/pre_turn", "/v1/learn", "/v1/recall_for_compaction"):
        response = api.call("POST", path, content=content, headers=JSON)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["field"] in {"body", "turn_index", "thread_id", "text"}
    response = api.call("POST", "/v1/pre_turn", content=content, headers=JSON)
    if response.json()["field"] == "body":
        assert says in response.json()["message"]
    assert stored(engine) == 0


def test_a_negative_content_length_is_400(api: Api) -> None:
    response = api.call("POST", "/v1/pre_turn", content=b"{}", headers={**JSON, "Content-Length": "-1"})
    assert response.status_code == 400 and response.json()["field"] == "content-length"


# tokens and headers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header",
    [
        f"Bearer {TOKEN_A}\x00".encode(),
        f"Bearer {TOKEN_A}\u00e9".encode(),
        f"Bearer {TOKEN_A[:-1]}\u0131".encode(),
        f"Bearer {TOKEN_A} {TOKEN_B}".encode(),
        f"Bearer\t{TOKEN_A}".encode(),
        ("Bearer " + "\u00e9" * 16).encode(),
        b"Bearer \xff\xfe\xfd" + TOKEN_A.encode(),
    ],
)
def test_unicode_and_control_characters_in_the_token_header_are_401(api: Api, header: bytes) -> None:
    response = api.post("/v1/pre_turn", PRE, token=None, headers={"Authorization": header})
    assert response.status_code == 401, response.text
    assert TOKEN_A not in response.text and TOKEN_B not in response.text
    assert stored(api.engine) == 0


def test_the_scheme_is_case_insensitive(api: Api) -> None:  # RFC 7235 §2.1
    assert api.post("/v1/recall", {}, token=None, headers={"Authorization": f"bEaReR {TOKEN_A}"}).status_code == 200


@pytest.mark.parametrize(
    "token",
    ["spaces inside the token 0123", "t\u00f6ken-with-umlauts-0123456", "tab\tinside-0123456789", "x" * 15 + "\x7f"],
)
def test_a_token_file_with_a_token_no_header_can_carry_is_refused_without_showing_it(token: str) -> None:
    with pytest.raises(ConfigError) as err:
        TokenTable.from_json([{"token": token, "root": "team:a", "name": "odd"}])
    assert token not in str(err.value)
    assert "odd" in str(err.value)


@pytest.mark.parametrize("agent", ["a" * 129, "bot\x00x", "bot\u0085x"])
def test_an_agent_too_long_or_with_control_characters_is_400(api: Api, agent: str) -> None:
    response = api.post("/v1/pre_turn", PRE, params={"agent": agent})
    assert response.status_code == 400 and response.json()["field"] == "agent"
    assert stored(api.engine) == 0


# a token for root A naming root B anywhere ---------------------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        [("root", "team:b")],
        [("root", "team:a"), ("root", "team:b")],
        [("root", "team:b"), ("root", "team:a")],
        [("agent", "bot"), ("agent", "assistant")],
    ],
)
def test_a_query_naming_another_root_or_naming_twice_is_refused(api: Api, params: list[tuple[str, str]]) -> None:
    response = api.post("/v1/pre_turn", PRE, TOKEN_A_BOT, params=params)
    assert response.status_code in {400, 403}, response.text
    assert stored(api.engine) == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/pre_turn", {**PRE, "namespace": "team:b"}),
        ("/v1/pre_turn", {**PRE, "root": "team:b"}),
        ("/v1/learn", {"text": "Mara moved.", "namespace": "team:b"}),
        ("/v1/recall", {"query": "Mara", "reach": {"at": "team:b"}}),
        ("/v1/start_session", {"thread_id": "t1", "root": "team:b"}),
        ("/v1/ingest", {"job": "ingest_brain", "documents": [{"source": "notes", "text": "x"}], "root": "team:b"}),
        (
            "/v1/ingest",
            {"job": "ingest_brain", "documents": [{"source": "notes", "text": "x", "meta": {"namespace": "team:b"}}]},
        ),
    ],
)
def test_a_body_naming_another_root_is_refused_and_nothing_is_stored_or_queued(
    api: Api, path: str, body: dict[str, Any]
) -> None:
    response = api.post(path, body, TOKEN_A)
    assert response.status_code in {400, 403}, response.text
    assert stored(api.engine) == 0 and api.queue.jobs == []


def test_a_document_placed_under_the_tokens_own_root_is_queued(api: Api) -> None:
    doc = {"source": "notes", "text": "x", "meta": {"namespace": "team:a/source:notes"}}
    response = api.post("/v1/ingest", {"job": "ingest_brain", "documents": [doc]}, TOKEN_A)
    assert response.status_code == 202, response.text


# a server without tokens -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:8080", True),
        ("localhost", True),
        ("LOCALHOST:1", True),
        ("[::1]:8080", True),
        ("evil.example", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.nip.io", False),
        ("127.0.0.1:80@evil", False),
        ("[::1]evil", False),
        ("", False),
    ],
)
def test_loopback_host_headers(host: str, ok: bool) -> None:
    assert is_loopback_host(host) is ok


def test_a_server_without_tokens_refuses_a_foreign_host_header_as_a_rebinding_page_sends() -> None:
    engine = ReferenceEngine()
    app = create_app(engine, TokenTable.insecure_local(MemoryLayout("team:dev")), queue=RecordingQueue)
    rebound = Api(engine, RecordingQueue(), app, "http://attacker.example:8080")
    for path, body in [("/v1/pre_turn", PRE), ("/v1/learn", {"text": "x"})]:
        assert rebound.post(path, body, token=None).status_code == 403
    assert rebound.call("GET", "/metrics", token=None).status_code == 403
    assert stored(engine) == 0
    assert (
        Api(engine, RecordingQueue(), app, "http://localhost:8080").post("/v1/pre_turn", PRE, None).status_code == 200
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::"])
def test_serve_without_a_token_refuses_every_non_loopback_bind(tmp_path: Path, host: str) -> None:
    env = {"MEMORY_CORE_VAR_DIR": str(tmp_path / "var"), "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'm.db'}"}
    get_settings.cache_clear()
    try:
        for extra in ([], ["--insecure-local"]):
            result = CliRunner().invoke(load_commands(), ["serve", "--host", host, *extra], env=env)
            assert result.exit_code == 2, result.output
    finally:
        get_settings.cache_clear()
    assert not (tmp_path / "m.db").exists()


# concurrency -------------------------------------------------------------------------------------------------
def test_concurrent_calls_of_two_tenants_each_land_once_at_their_root(tmp_path: Path) -> None:
    engine = SQLiteEngine(tmp_path / "memory.db")
    try:
        app = create_app(engine, TokenTable.from_json(TOKENS), queue=RecordingQueue)
        n = 12

        async def go() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                calls = []
                for i in range(n):
                    for token in (TOKEN_A, TOKEN_B):
                        body = {**PRE, "turn_index": i, "user_text": f"Message {i} for {token[:8]}"}
                        calls.append(
                            client.post("/v1/pre_turn", json=body, headers={"Authorization": f"Bearer {token}"})
                        )
                    calls.append(
                        client.post(
                            "/v1/learn", json={"text": f"Fact {i}."}, headers={"Authorization": f"Bearer {TOKEN_A}"}
                        )
                    )
                return list(await asyncio.gather(*calls))

        responses = run(go)
        assert [r.status_code for r in responses] == [200] * (3 * n)
        items = engine.list(ListRequest(limit=200)).items
        by_root: dict[str, int] = {}
        for item in items:
            root = str(item.meta.namespace).split("/")[0]
            by_root[root] = by_root.get(root, 0) + 1
        assert by_root == {"team:a": 2 * n, "team:b": n}
        texts_b = {i.text for i in items if str(i.meta.namespace).startswith("team:b")}
        assert all(TOKEN_B[:8] in t for t in texts_b)
    finally:
        engine.close()


# metrics -----------------------------------------------------------------------------------------------------
def test_metric_labels_stay_bounded_under_random_paths_methods_and_ids() -> None:
    api = make_api()
    rng = random.Random(17)
    for _ in range(150):
        junk = "".join(rng.choice(string.ascii_letters + string.digits + "-_.~") for _ in range(rng.randint(1, 40)))
        method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH"])
        path = rng.choice([f"/{junk}", f"/v1/{junk}", f"/v1/jobs/{junk}", f"/v1/jobs/{junk}/x", f"/metrics/{junk}"])
        api.call(method, path, token=rng.choice([TOKEN_A, None, junk]))
    text = api.call("GET", "/metrics").text
    routes = set(re.findall(r'route="([^"]*)"', text))
    methods = set(re.findall(r'method="([^"]*)"', text))
    statuses = set(re.findall(r'status="([^"]*)"', text))
    assert routes <= {r.path for r in ROUTES}
    assert "/v1/jobs/{job_id}" in routes  # the junk job ids were counted under the route's template
    assert methods <= {"GET", "POST"}
    assert statuses <= {"200", "202", "400", "401", "403", "404", "405", "413", "415", "500", "503"}
    assert len(text.splitlines()) < 200
