"""Scope layouts (legacy and v3) and lookup labels: pure functions of the contract reference §5.4."""

from __future__ import annotations

import pytest

from memory_core.conformance.testing import conformance_test
from memory_core.engines.cortexdb.double import direct_double, double_engine, hosted_double
from memory_core.engines.cortexdb.layout import (
    check_root,
    lookup_label,
    narrowing_labels,
    parse_scope,
    scope_for,
    scope_prefix,
    strip_tenant,
)
from memory_core.meta import ItemKind, MetaFilter, SourceKind
from memory_core.namespace import Namespace

CASES = [
    ("", ItemKind.LEARNING, None, "app:tinymemory/app:learnings"),
    ("agent:a/agent:scout", ItemKind.CONVERSATION, None, "app:tinymemory/agent:a/agent:scout/app:conversations"),
    ("team:acme/source:notion", ItemKind.DOCUMENT, None, "app:tinymemory/team:acme/source:notion/app:documents"),
    ("ws:main", ItemKind.CONVERSATION, "org:42", "org:42/ws:main/app:conversations"),
    ("ws:main", ItemKind.DOCUMENT, "org:42", "org:42/ws:main/app:documents"),
    ("source:github/project:api", ItemKind.DOCUMENT, "org:42", "org:42/app:brain/source:github/project:api"),
    ("source:github", ItemKind.LEARNING, "org:42", "org:42/source:github/app:learnings"),
    ("agent:a/service:ci", ItemKind.LEARNING, "org:42", "org:42/agent:a/app:flows/service:ci/app:learnings"),
    ("service:ci/source:x", ItemKind.DOCUMENT, "org:42", "org:42/app:flows/service:ci/source:x/app:documents"),
]


@pytest.mark.parametrize(("ns", "kind", "root", "path"), CASES)
def test_scopes_follow_the_reference_layouts_and_parse_back(
    ns: str, kind: ItemKind, root: str | None, path: str
) -> None:
    namespace = Namespace.parse(ns)
    assert scope_for(namespace, kind, root) == path
    assert parse_scope(path, root) == (namespace, kind)


@pytest.mark.parametrize(
    ("path", "root"),
    [
        ("app:other/agent:a/app:learnings", None),
        ("app:tinymemory/agent:a/app:beliefs", None),
        ("app:tinymemory/agent:a", None),
        ("org:42/agent:a/app:learnings", None),
        ("org:7/agent:a/app:learnings", "org:42"),
        ("org:42/app:brain/agent:a", "org:42"),
        ("org:42/ws:main/app:brain/source:x/app:documents", "org:42"),
    ],
)
def test_foreign_scopes_are_not_ours(path: str, root: str | None) -> None:
    assert parse_scope(path, root) is None


@pytest.mark.parametrize("root", ["", "org", "org:42/app:x", "Org:1", "org:a b"])
def test_a_malformed_scope_root_is_refused(root: str) -> None:
    with pytest.raises(ValueError, match="scope_root"):
        check_root(root)


def test_lookup_labels_hash_the_value_and_a_read_narrows_by_one_field() -> None:
    assert lookup_label("i", "abc") == "tm:i:ba7816bf8f01cfea"
    assert narrowing_labels(MetaFilter(workspace="w", repo="r")) == [lookup_label("r", "r")]
    assert narrowing_labels(MetaFilter(sources=(SourceKind.FILE, SourceKind.AGENT))) == [
        lookup_label("k", "file"),
        lookup_label("k", "agent"),
    ]
    assert narrowing_labels(MetaFilter(folder="/x")) == []


test_the_v3_layout_conforms_on_direct = conformance_test(lambda: double_engine(direct_double(), scope_root="org:42"))
test_the_v3_layout_conforms_on_hosted = conformance_test(lambda: double_engine(hosted_double(), scope_root="org:42"))


def test_an_engine_with_a_scope_root_writes_and_reads_only_under_it() -> None:
    from memory_core import Document, MemoryMeta
    from memory_core.query import ListRequest

    double = direct_double()
    item = Document.of("brain page", MemoryMeta().at("source:github/project:api"))
    with double_engine(double, scope_root="org:42") as engine, double_engine(double) as legacy:
        engine.store(item)
        assert [h.id for h in engine.list(ListRequest()).items] == [item.id]
        assert legacy.list(ListRequest()).items == ()  # another layout's scopes are foreign
    assert {e.scope for e in double.log.events} == {"org:42/app:brain/source:github/project:api"}


@pytest.mark.parametrize(
    ("listed", "root", "ours"),
    [
        ("org:42/ws:main/app:conversations", "", "ws:main/app:conversations"),
        ("org:42/app:learnings", "", "app:learnings"),
        ("org:42/user:7/agent:a/app:learnings", "", "user:7/agent:a/app:learnings"),
        ("org:7/app:tinymemory/agent:a/app:learnings", None, "app:tinymemory/agent:a/app:learnings"),
        ("org:7/user:42/app:learnings", "user:42", "user:42/app:learnings"),
        ("app:tinymemory/app:learnings", None, "app:tinymemory/app:learnings"),
    ],
)
def test_a_hosted_listing_is_read_below_the_tenant_the_backend_pinned(listed: str, root: str | None, ours: str) -> None:
    assert strip_tenant(listed, root) == ours


def test_the_tenant_layout_sends_no_root_and_no_prefix() -> None:
    assert scope_for(Namespace.parse("ws:main"), ItemKind.CONVERSATION, "") == "ws:main/app:conversations"
    assert scope_for(Namespace.parse(""), ItemKind.LEARNING, "") == "app:learnings"
    assert scope_for(Namespace.parse("source:x"), ItemKind.DOCUMENT, "") == "app:brain/source:x"
    assert parse_scope("ws:main/app:conversations", "") == (Namespace.parse("ws:main"), ItemKind.CONVERSATION)
    assert parse_scope("app:tinymemory/app:learnings", "") is None  # the legacy tree is another layout
    assert scope_prefix("") is None and scope_prefix("org:42") == "org:42/"
