"""Namespaces and reaches (contract reference §1.7): syntax, the visibility table, siblings, service sandboxes."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core import (
    ROOT,
    InvalidRequest,
    Learning,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    Namespace,
    Reach,
    SegmentKind,
)
from memory_core.engines.reference import ReferenceEngine
from memory_core.namespace import fnv1a32, sanitize_segment_id

R = ROOT
T = Namespace.parse("team:acme")
W = Namespace.parse("team:acme/agent:writer")
H = Namespace.parse("team:acme/agent:writer/agent:helper")
E = Namespace.parse("team:acme/agent:editor")
NODES = {"R": R, "T": T, "W": W, "H": H, "E": E}

# the worked example of namespaces.md (reference §1.7)
WORKED_EXAMPLE: list[tuple[str, Reach | None, str]] = [
    ("of(W)", Reach.of(W), "RTW"),
    ("of(E)", Reach.of(E), "RTE"),
    ("exact(W)", Reach.exact(W), "W"),
    ("of(H)", Reach.of(H), "RTWH"),
    ("subtree(W)", Reach.subtree(W), "WH"),
    ("subtree(T)", Reach.subtree(T), "TWHE"),
    ("{T, inherit, descendants}", Reach(at=T, inherit=True, descendants=True), "RTWHE"),
    ("of(root)", Reach.of(R), "R"),
    ("subtree(root)", Reach.subtree(R), "RTWHE"),
    ("no reach", None, "RTWHE"),
]


@pytest.mark.parametrize(("label", "reach", "sees"), WORKED_EXAMPLE, ids=[row[0] for row in WORKED_EXAMPLE])
def test_the_worked_example_visibility_table(label: str, reach: Reach | None, sees: str) -> None:
    flt = MetaFilter(reach=reach)
    admitted = "".join(name for name, node in NODES.items() if flt.admits_namespace(node))
    assert admitted == sees


@pytest.mark.parametrize(("label", "reach", "sees"), WORKED_EXAMPLE, ids=[row[0] for row in WORKED_EXAMPLE])
def test_an_engine_lists_exactly_what_the_reach_admits(label: str, reach: Reach | None, sees: str) -> None:
    engine = ReferenceEngine()
    by_id = {}
    for name, node in NODES.items():
        by_id[engine.store(Learning(text=f"fact at {name}", meta=MemoryMeta().at(node))).id] = name
    page = engine.list(ListRequest(filter=MetaFilter(reach=reach), limit=10))
    assert "".join(sorted(by_id[hit.id] for hit in page.items)) == "".join(sorted(sees))


def test_reach_constructors() -> None:
    assert (Reach.of(W).inherit, Reach.of(W).descendants) == (True, False)
    assert (Reach.exact(W).inherit, Reach.exact(W).descendants) == (False, False)
    assert (Reach.subtree(W).inherit, Reach.subtree(W).descendants) == (False, True)
    assert Reach() == Reach.of(ROOT)
    assert Reach.subtree() == Reach.subtree(ROOT)


def test_reach_nodes_are_read_root_first() -> None:
    assert Reach.of(H).nodes() == [R, T, W, H]
    assert Reach.exact(H).nodes() == [H]
    assert Reach.subtree(W).nodes() == [W]


def test_within_refuses_widening() -> None:
    assert Reach.exact(W).within(Reach.of(W))
    assert Reach.of(W).within(Reach.of(H))
    assert not Reach.of(H).within(Reach.of(W))
    assert Reach.subtree(H).within(Reach.subtree(W))
    assert not Reach.subtree(W).within(Reach.of(H))
    assert not Reach.exact(E).within(Reach.of(W))


# siblings ---------------------------------------------------------------------------------------------------
segment_ids = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=6)
paths = st.lists(st.tuples(st.sampled_from(SegmentKind), segment_ids), max_size=3)


@settings(max_examples=80, deadline=None)
@given(
    parent=paths,
    kind=st.sampled_from(SegmentKind),
    mine=segment_ids,
    theirs=segment_ids,
    below=paths,
    inherit=st.booleans(),
    descendants=st.booleans(),
)
def test_a_sibling_and_its_subtree_are_never_visible(
    parent: list[tuple[SegmentKind, str]],
    kind: SegmentKind,
    mine: str,
    theirs: str,
    below: list[tuple[SegmentKind, str]],
    inherit: bool,
    descendants: bool,
) -> None:
    if mine == theirs:
        return
    base = Namespace(tuple(parent))
    me = base.child(kind, mine)
    sibling = Namespace((*base.child(kind, theirs).segments, *below))
    assert not Reach(at=me, inherit=inherit, descendants=descendants).admits(sibling)


def test_the_same_text_at_two_siblings_is_two_items_each_invisible_to_the_other() -> None:
    engine = ReferenceEngine()
    a = engine.store(Learning(text="same", meta=MemoryMeta().at("agent:a"))).id
    b = engine.store(Learning(text="same", meta=MemoryMeta().at("agent:b"))).id
    assert a != b
    assert [h.id for h in engine.list(ListRequest(filter=MetaFilter(reach=Reach.of("agent:a")))).items] == [a]
    assert engine.get({"ids": [a, b], "reach": Reach.of("agent:b").to_dict()})[0].id == b


# service sandboxes ------------------------------------------------------------------------------------------
SANDBOX = Namespace.parse("team:acme/service:nightly")
INSIDE = Namespace.parse("team:acme/service:nightly/agent:bot")


def test_a_descendant_read_never_enters_a_service_sandbox() -> None:
    assert not Reach.subtree(T).admits(SANDBOX)
    assert not Reach.subtree(T).admits(INSIDE)
    assert not Reach.subtree(ROOT).admits(INSIDE)
    assert not MetaFilter().admits_namespace(SANDBOX)
    assert not Reach(at=T, inherit=True, descendants=True).admits(INSIDE)


def test_a_sandbox_is_read_from_inside() -> None:
    assert Reach.exact(SANDBOX).admits(SANDBOX)
    assert Reach.subtree(SANDBOX).admits(INSIDE)
    assert [n for n in (R, T, SANDBOX, INSIDE) if Reach.of(INSIDE).admits(n)] == [R, T, SANDBOX, INSIDE]


def test_an_unscoped_listing_leaves_sandboxed_items_out() -> None:
    engine = ReferenceEngine()
    engine.store(Learning(text="sandboxed", meta=MemoryMeta().at(INSIDE)))
    visible = engine.store(Learning(text="shared", meta=MemoryMeta().at(T))).id
    assert [h.id for h in engine.list().items] == [visible]
    assert len(engine.list({"filter": {"reach": Reach.of(INSIDE).to_dict()}}).items) == 2


# syntax -----------------------------------------------------------------------------------------------------
def test_root_parses_from_empty_and_root_and_formats_as_root() -> None:
    assert Namespace.parse("") == ROOT == Namespace.parse("root")
    assert str(ROOT) == "root" and ROOT.depth == 0 and ROOT.is_root and ROOT.parent is None


def test_workspace_segments_use_the_ws_prefix() -> None:
    ns = Namespace.parse("ws:main/project:p1")
    assert ns.segments == ((SegmentKind.WORKSPACE, "main"), (SegmentKind.PROJECT, "p1"))
    assert str(ns) == "ws:main/project:p1"


def test_namespace_navigation() -> None:
    assert H.parent == W and H.depth == 3
    assert H.ancestors_and_self() == [R, T, W, H]
    assert H.is_within(T) and H.is_within(H) and not T.is_within(H) and not E.is_within(W)
    assert H.shared_ancestor() == T
    assert Namespace.agent("me@x.com").segments[0][0] is SegmentKind.AGENT
    assert Namespace.parse("agent:x/team:y").shared_ancestor() == Namespace.parse("agent:x/team:y")


def test_depth_is_at_most_8() -> None:
    eight = "/".join(f"agent:a{i}" for i in range(8))
    assert Namespace.parse(eight).depth == 8
    with pytest.raises(InvalidRequest, match="depth 9 exceeds 8"):
        Namespace.parse(eight).child(SegmentKind.AGENT, "one-more")


def test_sanitized_ids_keep_valid_ids_and_hash_the_rest() -> None:
    assert sanitize_segment_id("writer_1-x") == "writer_1-x"
    assert sanitize_segment_id("") == "_"
    raw = "priya@acme.com"
    assert sanitize_segment_id(raw) == f"priya-acme-com-{fnv1a32(raw.encode()):08x}"
    long_raw = "é" * 200
    cut = sanitize_segment_id(long_raw)
    assert cut == "-" * 119 + f"-{fnv1a32(long_raw.encode()):08x}" and len(cut) == 128


def test_fnv1a32_matches_the_published_vectors() -> None:
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"foobar") == 0xBF9CF968


# ids end where they end: no trailing newline slips past the id rule ----------------------------------------
@pytest.mark.parametrize("bad", ["x\n", "\nx", "x\r", "x\t", "x ", "x\x00", "é"])
def test_a_segment_id_with_any_character_outside_the_set_is_refused(bad: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        Namespace(((SegmentKind.AGENT, bad),))
    assert info.value.field == "namespace"
    with pytest.raises(InvalidRequest):
        ROOT.child(SegmentKind.TEAM, bad)
    with pytest.raises(InvalidRequest):
        Namespace.parse(f"team:a/agent:{bad}/agent:y")


def test_sanitizing_replaces_a_trailing_newline_and_the_result_survives_json() -> None:
    raw = "bob\n"
    assert sanitize_segment_id(raw) == f"bob--{fnv1a32(raw.encode()):08x}"
    ns = Namespace.agent(raw)
    assert str(ns) == f"agent:bob--{fnv1a32(raw.encode()):08x}"
    meta = MemoryMeta().at(ns)
    assert MemoryMeta.model_validate_json(meta.to_json()) == meta


def test_parse_trims_the_whole_string_as_the_reference_does_but_never_inside_it() -> None:
    # reference namespace/mod.rs: `FromStr` trims the input before splitting; segments themselves are not trimmed
    assert Namespace.parse("  team:a/agent:b\n") == Namespace.parse("team:a/agent:b")
    assert Namespace.parse(" root ") == ROOT
    for inner in ("team:a /agent:b", "team:a/ agent:b", "team:a\n/agent:b"):
        with pytest.raises(InvalidRequest):
            Namespace.parse(inner)
