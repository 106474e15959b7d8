"""``MetaFilter.matches``, rule by rule, against the table of reference §1.6 (``meta/filter.rs``)."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core import (
    ItemKind,
    MemoryMeta,
    MetaFilter,
    Namespace,
    Reach,
    SourceKind,
    SourceRef,
    ToolCallMeta,
    TurnRange,
)
from memory_core.meta import path_has_prefix

DOC, CONV, LEARN = ItemKind.DOCUMENT, ItemKind.CONVERSATION, ItemKind.LEARNING
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def meta(**fields: Any) -> MemoryMeta:
    return MemoryMeta.model_validate(fields)


def matches(flt: dict[str, Any], held: MemoryMeta, kind: ItemKind = DOC) -> bool:
    return MetaFilter.model_validate(flt).matches(kind, held)


# folder and file_path: exact, or a prefix on a "/" boundary; a trailing "/" on the filter is ignored -------------
PATH_CASES = [
    ("/a/b", "/a/b", True),
    ("/a/b", "/a/b/c", True),
    ("/a/b", "/a/b/c/d.rs", True),
    ("/a/b", "/a/bc", False),
    ("/a/b", "/a", False),
    ("/a/b", "/x/a/b", False),
    ("/a/b/", "/a/b", True),
    ("/a/b/", "/a/b/c", True),
    ("/a/b/", "/a/bc", False),
    ("/a/b//", "/a/b/c", True),
    ("/a/b", "/a/b/", True),
    ("/", "/anything", True),
    ("/", "relative/path", False),
    ("", "", True),
    ("", "/abs", True),
    ("", "relative", False),  # the empty prefix sits on no boundary before "relative"
    ("/", "", True),  # "/" with its trailing slash ignored is "", which "" equals
    ("src", "src/app", True),
    ("src", "srcs", False),
]


@pytest.mark.parametrize(("prefix", "value", "admitted"), PATH_CASES)
def test_path_prefixes_match_on_a_slash_boundary(prefix: str, value: str, admitted: bool) -> None:
    assert path_has_prefix(value, prefix) is admitted
    assert matches({"folder": prefix}, meta(folder=value)) is admitted
    assert matches({"file_path": prefix}, meta(file_path=value)) is admitted


def test_a_path_filter_never_matches_an_item_without_that_path() -> None:
    assert not matches({"folder": "/a"}, meta(file_path="/a/b"))
    assert not matches({"file_path": "/a"}, meta(folder="/a"))
    assert not matches({"folder": ""}, meta())


# exact fields ------------------------------------------------------------------------------------------------
EXACT = ["workspace", "language", "repo", "commit", "url", "thread_id", "agent_id"]


@pytest.mark.parametrize("name", EXACT)
def test_exact_fields_match_only_the_same_value(name: str) -> None:
    assert matches({name: "Rust"}, meta(**{name: "Rust"}))
    assert not matches({name: "Rust"}, meta(**{name: "rust"}))  # no case folding
    assert not matches({name: "Rust"}, meta(**{name: "Rust/x"}))  # no prefix either
    assert not matches({name: "Rust"}, meta())  # a missing value never matches a set field
    assert matches({}, meta(**{name: "Rust"}))


def test_exact_prefix_rules_do_not_leak_into_the_exact_fields() -> None:
    assert not matches({"url": "https://x.test/a"}, meta(url="https://x.test/a/b"))
    assert not matches({"repo": "owner"}, meta(repo="owner/name"))


def test_turns_match_the_exact_range() -> None:
    assert matches({"turns": {"first": 4, "last": 5}}, meta(turns=TurnRange(first=4, last=5)), CONV)
    assert not matches({"turns": {"first": 4, "last": 5}}, meta(turns=TurnRange(first=4, last=6)), CONV)
    assert not matches({"turns": {"first": 4, "last": 5}}, meta(), CONV)


def test_tool_call_matches_the_tool_name_whatever_the_call_id() -> None:
    held = meta(tool_call=ToolCallMeta(name="search", id="call-1"))
    assert matches({"tool_call": "search"}, held)
    assert not matches({"tool_call": "call-1"}, held)
    assert not matches({"tool_call": "search"}, meta())


def test_source_id_and_sources() -> None:
    held = meta(source=SourceRef(kind=SourceKind.FILE, id="drive-7"))
    assert matches({"source_id": "drive-7"}, held)
    assert not matches({"source_id": "drive-8"}, held)
    assert not matches({"source_id": "drive-7"}, meta())  # the default source has no id
    assert matches({"sources": ["file", "link"]}, held)
    assert not matches({"sources": ["link"]}, held)
    assert matches({"sources": []}, held)
    assert matches({"sources": ["agent"]}, meta())  # the default source kind is agent


# lists: kinds and tags_any -------------------------------------------------------------------------------------
def test_kinds_admit_only_the_listed_kinds_and_an_empty_list_admits_all() -> None:
    held = meta()
    assert [k for k in ItemKind.all() if matches({"kinds": ["learning"]}, held, k)] == [LEARN]
    assert [k for k in ItemKind.all() if matches({"kinds": ["document", "conversation"]}, held, k)] == [DOC, CONV]
    assert [k for k in ItemKind.all() if matches({}, held, k)] == [DOC, CONV, LEARN]
    assert MetaFilter.of_kinds([LEARN]).admits_kind(LEARN) and not MetaFilter.of_kinds([LEARN]).admits_kind(DOC)


def test_tags_any_needs_one_tag_in_common() -> None:
    held = meta(tags=("red", "blue"))
    assert matches({"tags_any": ["green", "blue"]}, held)
    assert not matches({"tags_any": ["green", "Red"]}, held)
    assert not matches({"tags_any": ["red"]}, meta())
    assert matches({"tags_any": []}, held)


# the observed window: [observed_after, observed_before) ----------------------------------------------------------
@pytest.mark.parametrize(
    ("at", "after", "before", "admitted"),
    [
        (T0, T0, None, True),  # inclusive lower bound
        (T0 - timedelta(microseconds=1), T0, None, False),
        (T0, None, T0, False),  # exclusive upper bound
        (T0 - timedelta(microseconds=1), None, T0, True),
        (T0, T0 - timedelta(days=1), T0 + timedelta(days=1), True),
        (T0 + timedelta(days=1), T0 - timedelta(days=1), T0 + timedelta(days=1), False),
        (None, T0, None, False),  # no observed_at never matches once a bound is set
        (None, None, T0, False),
        (None, None, None, True),
    ],
)
def test_the_observed_window_is_half_open(
    at: datetime | None, after: datetime | None, before: datetime | None, admitted: bool
) -> None:
    flt = MetaFilter(observed_after=after, observed_before=before)
    assert flt.matches(DOC, MemoryMeta(observed_at=at)) is admitted


def test_the_window_compares_instants_not_wall_clocks() -> None:
    paris = datetime(2024, 5, 1, 16, 0, tzinfo=ZoneInfo("Europe/Paris"))  # 14:00 UTC (CEST is UTC+2)
    assert matches({"observed_after": "2024-05-01T13:59:59Z"}, MemoryMeta(observed_at=paris))
    assert not matches({"observed_before": "2024-05-01T14:00:00Z"}, MemoryMeta(observed_at=paris))


# reach and service sandboxes ---------------------------------------------------------------------------------
def test_no_reach_admits_every_namespace_but_service_sandboxes() -> None:
    for ns in ("root", "agent:a", "team:t/agent:a/agent:b", "ws:main/project:p"):
        assert matches({}, meta(namespace=ns)), ns
    for ns in ("service:nightly", "team:t/service:nightly", "team:t/service:nightly/agent:bot"):
        assert not matches({}, meta(namespace=ns)), ns
        assert not matches({"workspace": "w"}, meta(namespace=ns, workspace="w")), ns


def test_a_reach_into_a_sandbox_reads_it() -> None:
    inside = meta(namespace="team:t/service:nightly/agent:bot")
    assert matches({"reach": Reach.of("team:t/service:nightly/agent:bot").to_dict()}, inside)
    assert matches({"reach": Reach.subtree("team:t/service:nightly").to_dict()}, inside)
    assert not matches({"reach": Reach.subtree("team:t").to_dict()}, inside)


def test_every_set_field_must_match() -> None:
    held = meta(workspace="w", language="en", tags=("x",), folder="/a/b")
    assert matches({"workspace": "w", "language": "en", "tags_any": ["x"], "folder": "/a"}, held)
    assert not matches({"workspace": "w", "language": "de", "tags_any": ["x"], "folder": "/a"}, held)
    assert not matches({"workspace": "w", "reach": Reach.exact("agent:a").to_dict()}, held)


# property: a filter made of an item's own values admits it, and changing any one value refuses it ---------------
values = st.text(alphabet=string.ascii_lowercase + "/.-", min_size=1, max_size=8)
FIELDS = ["workspace", "folder", "file_path", "language", "repo", "commit", "url", "thread_id", "agent_id"]


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional={name: values for name in FIELDS}), st.sampled_from(FIELDS), values)
def test_a_filter_of_the_items_own_values_admits_it_and_one_changed_value_refuses_it(
    held: dict[str, str], name: str, other: str
) -> None:
    item = meta(**held, namespace=Namespace.parse("agent:a"))
    assert MetaFilter.model_validate(held).matches(DOC, item)
    changed = {**held, name: other}
    admitted = MetaFilter.model_validate(changed).matches(DOC, item)
    if name not in held:
        assert not admitted  # the item has no value there: a set field never matches it
    elif name in ("folder", "file_path"):
        assert admitted == path_has_prefix(held[name], other)
    else:
        assert admitted == (other == held[name])
