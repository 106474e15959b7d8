"""The reference's EngineSettings over the doubles: tenant and retired roots, root registration, attribution,
headers, refused configurations, and the one-engine-per-configuration cache (contract reference §5.1, §5.4,
§6.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memory_core import Learning, MemoryMeta, open_engine
from memory_core.conformance.testing import conformance_test
from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.cortexdb import DIRECT, HOSTED, CortexEngine, binding
from memory_core.engines.cortexdb.double import direct_double, double_engine, hosted_double
from memory_core.engines.cortexdb.engine import url_options
from memory_core.errors import ConfigError
from memory_core.items import Conversation, Role, Turn
from memory_core.meta import ObservedActor
from memory_core.namespace import ROOT, Reach
from memory_core.query import EraseRequest, ForgetTarget, ListRequest

TOKEN = "s3cret-token-value"


def _ids(engine: CortexEngine) -> list[str]:
    return [hit.id for hit in engine.list(ListRequest(limit=200)).items]


# refused configurations ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("wire", "options", "named"),
    [
        (DIRECT, {"tenant_root": True}, "tenant_root"),
        (HOSTED, {"tenant_root": True, "scope_root": "org:42"}, "tenant_root"),
        (DIRECT, {"retired_scope_root": "user:42"}, "retired_scope_root"),
        (DIRECT, {"scope_root": "org:42", "retired_scope_root": "org:42"}, "retired_scope_root"),
        (DIRECT, {"scope_root": "org:42", "retired_scope_root": "org:42/user:1"}, "retired_scope_root"),
        (DIRECT, {"scope_root": "org:42", "retired_scope_root": "user 42"}, "retired_scope_root"),
        (HOSTED, {"scope_root": "org:42", "scope_owner": "user:42"}, "scope_owner"),
        (DIRECT, {"scope_owner": "user:42"}, "scope_owner"),
        (DIRECT, {"scope_root": "org:42", "scope_owner": "alice"}, "scope_owner"),
        (HOSTED, {"observed_actor": True}, "observed_actor"),
        (DIRECT, {"scope_root": "org:42/app:x"}, "scope_root"),
    ],
)
def test_a_layout_setting_that_cannot_work_is_a_config_error_naming_it(wire, options, named) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=f"error: {named}"):
        CortexEngine(wire, TOKEN, endpoint="http://127.0.0.1:1", **options)


@pytest.mark.parametrize("name", ["Authorization", "x-cortex-actor", "Idempotency-Key", "Cookie", "Host"])
def test_a_header_the_transport_sets_is_refused_without_echoing_its_value(name: str) -> None:
    with pytest.raises(ConfigError, match=f"headers: {name}") as caught:
        CortexEngine(DIRECT, TOKEN, endpoint="http://127.0.0.1:1", headers={name: "very-secret-value"})
    assert "very-secret-value" not in str(caught.value)
    with pytest.raises(ConfigError, match="one line") as caught:
        CortexEngine(DIRECT, TOKEN, endpoint="http://127.0.0.1:1", headers={"x-a": "v\r\nInjected: 1"})
    assert "Injected" not in str(caught.value)


def _with_key(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    from memory_core.settings import get_settings

    monkeypatch.setenv("MEMORY_CORE_CORTEXDB_KEY", TOKEN)
    monkeypatch.setenv("MEMORY_CORE_TINYHUMANS_TOKEN", TOKEN)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    binding.invalidate()
    yield
    binding.invalidate()


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("scope_root=org:1&scope_root=org:2", "scope_root"),
        ("consolidation=automatic&consolidation=on_demand", "consolidation"),
        ("scope_root=org:1&retired_scope_root=user:1&retired_scope_root=user:2", "retired_scope_root"),
        ("observed_actor=maybe", "observed_actor"),
        ("tenant_root=yes", "tenant_root"),
    ],
)
def test_a_url_setting_given_twice_or_unreadable_is_refused_naming_it(
    query: str, named: str, monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    _with_key(monkeypatch)
    with pytest.raises(ConfigError, match=f"error: {named}"):
        open_engine(f"cortexdb+http://127.0.0.1:3141?{query}")


def test_url_settings_and_headers_reach_the_engine_and_the_wire(
    monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    _with_key(monkeypatch, MEMORY_CORE_CORTEXDB_HEADERS='{"x-sdk-name": "openhuman", "x-host-version": "7"}')
    url = "cortexdb+http://127.0.0.1:3141?scope_root=org:42&scope_owner=user:42&observed_actor=true"
    options = url_options(url)
    assert (options["scope_root"], options["scope_owner"], options["observed_actor"]) == ("org:42", "user:42", True)
    assert options["headers"] == {"x-sdk-name": "openhuman", "x-host-version": "7"}
    double = direct_double()
    with double_engine(double, headers=options["headers"]) as engine:
        engine.store(Learning(text="headers ride along"))
    assert double.seen
    assert all(s.headers.get("x-host-version") == "7" for s in double.seen)
    assert all(s.headers.get("x-sdk-name") == "openhuman" for s in double.seen)


# the tenant root (hosted) ------------------------------------------------------------------------------
def test_the_tenant_layout_sends_no_root_and_reads_what_the_backend_re_rooted() -> None:
    double = hosted_double(tenant="org:42")
    chat = Conversation(turns=(Turn(role=Role.USER, text="hi there"),), meta=MemoryMeta().at("ws:main"))
    with double_engine(double, tenant_root=True) as engine:
        engine.store(chat)
        assert _ids(engine) == [chat.id]
        assert engine.get({"ids": [chat.id]})[0].id == chat.id
    assert {e.scope for e in double.log.events} == {"org:42/ws:main/app:conversations"}
    sent = {s.body.get("scope") for s in double.requests("POST", "memory/experience")}
    assert sent == {"ws:main/app:conversations"}
    listings = double.requests("GET", "memory/scopes")
    assert listings and all(s.param("prefix") is None for s in listings)  # an empty prefix= is never sent


def test_a_legacy_hosted_engine_finds_its_root_below_the_tenant() -> None:
    double = hosted_double(tenant="org:7")
    with double_engine(double) as engine:
        engine.store(Learning(text="legacy below a tenant"))
        assert len(_ids(engine)) == 1
    assert {e.scope for e in double.log.events} == {"org:7/app:tinymemory/app:learnings"}


test_the_tenant_layout_conforms = conformance_test(
    lambda: double_engine(hosted_double(tenant="org:42"), tenant_root=True)
)


# the retired root --------------------------------------------------------------------------------------
def test_a_retired_root_is_read_forgotten_and_erased_but_never_written() -> None:
    double = direct_double()
    old = Learning(text="kept under the old root", meta=MemoryMeta().at("agent:a"))
    both = Learning(text="held under both roots")
    new = Learning(text="written after the move")
    with double_engine(double, scope_root="user:42") as before:
        before.store_many([old, both])
    with double_engine(double, scope_root="org:42", retired_scope_root="user:42") as engine:
        engine.store_many([both, new])
        assert sorted(_ids(engine)) == sorted([old.id, both.id, new.id])  # `both` once
        assert {e.scope.split("/")[0] for e in double.log.events if e.text == new.text} == {"org:42"}
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree(ROOT)))
        built = {s.body["scope"] for s in double.requests("POST", "v1/beliefs/build")}
        assert built and all(scope.startswith("org:42/") for scope in built)  # builds only where it writes
        assert engine.forget(ForgetTarget(ids=(both.id,))).forgotten == 1
        assert not [e for e in double.log.events if e.text == both.text]  # gone from both roots
        engine.erase(EraseRequest(reach=Reach.subtree(ROOT), whole_tree=True))
    assert double.log.events == []


def test_a_node_beginning_with_a_root_is_refused_before_anything_is_sent() -> None:
    from memory_core.errors import InvalidRequest

    double = direct_double()
    with double_engine(double, scope_root="user:42", retired_scope_root="user:7") as engine:
        for node in ("user:42", "user:42/agent:a", "user:7/agent:a"):
            with pytest.raises(InvalidRequest) as caught:
                engine.store(Learning(text="would read back two ways", meta=MemoryMeta().at(node)))
            assert caught.value.field == "namespace"
        engine.store(Learning(text="fine", meta=MemoryMeta().at("user:420")))
    assert len(double.log.events) == 1


def test_the_retired_layout_conforms() -> None:
    def engine() -> CortexEngine:
        double = direct_double()
        with double_engine(double, scope_root="user:42") as before:
            before.store(Learning(text="an old learning outside the suite's run"))
        engine: CortexEngine = double_engine(double, scope_root="org:42", retired_scope_root="user:42")
        return engine

    from memory_core.conformance import run

    with engine() as e:
        report = run(e)
    assert report.passed, report.render()


# root registration -------------------------------------------------------------------------------------
def test_the_root_is_registered_with_its_owner_once_before_the_first_write() -> None:
    double = direct_double()
    with double_engine(double, scope_root="org:42", scope_owner="user:42") as engine:
        assert not double.requests("POST", "v1/scopes")  # nothing before a write
        engine.store(Learning(text="first"))
        engine.store(Learning(text="second"))
    posts = double.requests("POST", "v1/scopes")
    assert [s.body for s in posts] == [{"path": "org:42", "members": [{"actor": "user:42", "role": "owner"}]}]
    first_write = next(i for i, s in enumerate(double.seen) if s.path == "v1/experience")
    assert double.seen.index(posts[0]) < first_write
    assert double.log.registration("org:42") == {"path": "org:42", "members": [{"actor": "user:42", "role": "owner"}]}


def test_a_root_registered_by_another_gains_the_owner_and_a_failed_registration_is_tried_again() -> None:
    double = direct_double()
    double.log.register({"path": "org:42", "members": [{"actor": "user:admin", "role": "owner"}]})
    with double_engine(double, scope_root="org:42", scope_owner="user:42") as engine:
        engine.store(Learning(text="joins the root"))
    members = double.log.registration("org:42")["members"]  # type: ignore[index]
    assert {"actor": "user:42", "role": "owner"} in members and {"actor": "user:admin", "role": "owner"} in members
    assert len(double.requests("PUT", "v1/scopes/members")) == 1

    flaky = direct_double(fail_registration=503)
    with double_engine(flaky, scope_root="org:9", scope_owner="user:9") as engine:
        engine.store(Learning(text="the write still lands"))
        assert len(flaky.log.events) == 1 and flaky.log.registration("org:9") is None
        flaky.knobs.fail_registration = None
        engine.store(Learning(text="the next write registers"))
        engine.store(Learning(text="and only once"))
    assert flaky.log.registration("org:9") is not None
    assert [s.status for s in flaky.requests("POST", "v1/scopes")] == [503, 201]


def test_no_registration_without_an_owner() -> None:
    double = direct_double()
    with double_engine(double, scope_root="org:42") as engine:
        engine.store(Learning(text="plain"))
    assert not [s for s in double.seen if s.path.startswith("v1/scopes") and s.method != "GET"]


# attribution -------------------------------------------------------------------------------------------
def _chat() -> Conversation:
    meta = MemoryMeta(agent_id="scout")
    return Conversation(turns=(Turn(role=Role.USER, text="q?"), Turn(role=Role.ASSISTANT, text="a.")), meta=meta)


def test_observed_actor_attributes_assistant_turns_and_named_actors_only() -> None:
    double = direct_double()
    named = Learning(text="Bob said the deploy is friday", meta=MemoryMeta(observed_actor=ObservedActor(id="user:bob")))
    phone = Learning(text="from a phone", meta=MemoryMeta(observed_actor=ObservedActor(id="tel:+1 555 123 4567")))
    with double_engine(double, scope_root="org:42", scope_owner="user:42", observed_actor=True) as engine:
        engine.store_many([_chat(), named, phone, Learning(text="the owner's own")])
    bodies = [
        b for s in double.requests("POST") if s.path.startswith("v1/experience") for b in s.body.get("items", [s.body])
    ]
    by_text = {b["content"]["text"]: b for b in bodies}
    assert by_text["a."]["observed_actor"] == {"id": "agent:scout", "type": "agent"}
    assert by_text["a."]["subject"] == {"id": "user:42", "type": "user"}
    assert by_text[named.text]["observed_actor"] == {"id": "user:bob", "type": "user"}
    for text in ("q?", "from a phone", "the owner's own"):
        assert "observed_actor" not in by_text[text] and "subject" not in by_text[text]
    from memory_core.engines.cortexdb.envelope import idempotency_key

    assert all(b["idempotency_key"] == idempotency_key(b) for b in bodies)  # keyed over what is sent


def test_a_refused_attribution_resends_plain_and_stops_asking() -> None:
    double = direct_double(deny_attribution=True)
    with double_engine(double, observed_actor=True) as engine:
        engine.store(_chat())
        engine.store(Learning(text="later", meta=MemoryMeta(observed_actor=ObservedActor(id="user:bob"))))
        assert len(_ids(engine)) == 2  # nothing lost
    writes = [s for s in double.seen if s.path.startswith("v1/experience")]
    assert [s.status for s in writes] == [403, 202, 202]
    assert all("observed_actor" not in b for s in writes[1:] for b in s.body.get("items", [s.body]))
    assert "observed_actor" in writes[0].body["items"][1]


def test_attribution_off_sends_nothing_new() -> None:
    double = direct_double()
    with double_engine(double) as engine:
        engine.store(_chat())
    sent = [b for s in double.requests("POST") for b in s.body.get("items", [s.body])]
    assert sent and all("observed_actor" not in b and "subject" not in b for b in sent)


# one engine per configuration per process ---------------------------------------------------------------
def test_open_engine_hands_out_one_engine_per_configuration(monkeypatch: pytest.MonkeyPatch, fresh_cache: None) -> None:
    _with_key(monkeypatch)
    url = "cortexdb+http://127.0.0.1:3141"
    first = open_engine(url)
    first.close()  # shared: a caller closing it does not close it for the others
    assert open_engine(url + "/") is first  # the same endpoint, normalised
    assert open_engine(url + "?scope_root=org:1") is not first
    assert open_engine("tinyhumans+http://127.0.0.1:3141") is not first
    assert open_engine("cortexdb+http://127.0.0.1:3142") is not first
    assert binding.cached_engines() == 4
    _with_key(monkeypatch, MEMORY_CORE_CORTEXDB_KEY="another-key")
    assert open_engine(url) is not first  # a new key builds anew
    assert TOKEN not in binding.fingerprint(url_options(url))
    assert binding.invalidate() == 5 and binding.cached_engines() == 0
    assert open_engine(url) is not first


def test_url_settings_work_end_to_end_over_the_loopback_double(
    monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    from memory_core.engines.cortexdb.double import DoubleServer

    hosted = hosted_double(tenant="org:42")
    direct = direct_double()
    _with_key(monkeypatch, MEMORY_CORE_CORTEXDB_HEADERS='{"x-sdk-name": "loopback-host"}')
    with DoubleServer(hosted) as h, DoubleServer(direct) as d:
        tenant = open_engine(f"tinyhumans+{h.url}?tenant_root=true")
        tenant.store(Learning(text="tenant rooted", meta=MemoryMeta().at("ws:main")))
        assert len(tenant.list(ListRequest()).items) == 1
        owned = open_engine(f"cortexdb+{d.url}?scope_root=org:42&scope_owner=user:42&observed_actor=on")
        owned.store(_chat())
    assert {e.scope for e in hosted.log.events} == {"org:42/ws:main/app:learnings"}
    assert direct.log.registration("org:42") is not None
    assert any("observed_actor" in b for s in direct.requests("POST") for b in s.body.get("items", [s.body]))
    assert all(s.headers.get("x-sdk-name") == "loopback-host" for s in [*hosted.seen, *direct.seen])


def test_a_reserved_header_in_the_settings_is_refused_by_open_engine(
    monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    _with_key(monkeypatch, MEMORY_CORE_CORTEXDB_HEADERS='{"Authorization": "Bearer stolen"}')
    with pytest.raises(ConfigError, match="headers: Authorization") as caught:
        open_engine("cortexdb+http://127.0.0.1:3141")
    assert "stolen" not in str(caught.value)
