"""The reference engine as the contract reference §3 describes it: storage, scoring, reads, forget, consolidation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_core import (
    ConfigError,
    ConsolidateRequest,
    ConsolidateStatus,
    Consolidation,
    Conversation,
    Document,
    EraseRequest,
    FetchMode,
    FetchRequest,
    ForgetTarget,
    InvalidRequest,
    ItemKind,
    Learning,
    LearningKind,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    Namespace,
    Reach,
    RecallRequest,
    Role,
    TimeHint,
    Turn,
    Unsupported,
    open_engine,
)
from memory_core.engines.reference import ReferenceEngine, first_sentence
from memory_core.scoring import EMBED_DIM, VECTOR_THRESHOLD, cosine, embed, keyword_score, mode_score, tokenize


def doc(text: str, ns: str = "root", **meta: object) -> Document:
    return Document.of(text, MemoryMeta.model_validate({"namespace": ns, **meta}))


def chat(*turns: tuple[Role, str], ns: str = "root") -> Conversation:
    return Conversation(turns=tuple(Turn(role=r, text=t) for r, t in turns), meta=MemoryMeta().at(ns))


# descriptor and URL ---------------------------------------------------------------------------------------
def test_descriptor() -> None:
    d = ReferenceEngine().descriptor()
    assert (d.id, d.label) == ("reference", "Reference (in-memory)")
    assert not (d.hosted or d.needs_endpoint or d.needs_key)
    assert d.fetch_modes == (FetchMode.KEYWORD, FetchMode.VECTOR, FetchMode.HYBRID)
    assert d.consolidation is Consolidation.ON_DEMAND
    assert ReferenceEngine().with_consolidation("scheduled").descriptor().consolidation is Consolidation.SCHEDULED


@pytest.mark.parametrize("mode", [c.value for c in Consolidation])
def test_the_url_declares_the_consolidation_mode(mode: str) -> None:
    assert open_engine(f"reference://?consolidation={mode}").descriptor().consolidation is Consolidation(mode)


@pytest.mark.parametrize("url", ["reference://?consolidation=sometimes", "reference://?colour=red"])
def test_a_bad_reference_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        open_engine(url)


def test_each_instance_keeps_its_own_state() -> None:
    a, b = ReferenceEngine(), ReferenceEngine()
    a.store(doc("only in a"))
    assert len(a) == 1 and b.is_empty()


# storage --------------------------------------------------------------------------------------------------
def test_storing_the_same_item_again_is_a_replay_with_one_copy() -> None:
    engine = ReferenceEngine()
    item = doc("hello")
    first, second = engine.store(item), engine.store(item)
    assert (first.replayed, second.replayed, first.id, second.id) == (False, True, item.id, item.id)
    receipts = engine.store_many([item, doc("other"), doc("other")])
    assert [r.replayed for r in receipts] == [True, False, True]
    assert len(engine) == 2


def test_a_restamped_item_is_a_replay() -> None:
    engine = ReferenceEngine()
    engine.store(doc("seen", observed_at=datetime(2024, 1, 1, tzinfo=UTC)))
    assert engine.store(doc("seen", observed_at=datetime(2025, 1, 1, tzinfo=UTC))).replayed


# first sentence (§3 distil rule) ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("Hello world. More text.", "Hello world."),
        ("Is it? Yes.", "Is it?"),
        ("Stop! Now.", "Stop!"),
        ("# Title\n\nThe body comes first. Then more.", "The body comes first."),
        ("# Title\nprose line one\n## Sub\nprose line two.", "prose line one prose line two."),
        ("# Only a heading", "Only a heading"),
        ("## A\n### B", "A B"),
        ("  spaced \n\n   out    words  ", "spaced out words"),
        ("no punctuation at all", "no punctuation at all"),
        ("", ""),
        ("  \n \n", ""),
        ("#", ""),
        ("x" * 300, "x" * 240),
        ("y" * 250 + ". tail", "y" * 240),
    ],
)
def test_first_sentence(text: str, statement: str) -> None:
    assert first_sentence(text) == statement


# scoring (§3 score.rs) -----------------------------------------------------------------------------------
def test_tokenize_splits_on_non_alphanumerics_and_lowercases() -> None:
    assert tokenize("Hello, World! x_y 42") == ["hello", "world", "x", "y", "42"]
    assert tokenize(" -- ") == []


def test_keyword_is_the_share_of_distinct_query_words_found() -> None:
    assert keyword_score({"a", "b", "c", "d"}, {"a", "c", "z"}) == 0.5
    assert keyword_score(set(), {"a"}) == 0.0


def test_embed_is_a_unit_64_dimension_vector() -> None:
    vec = embed("memory core")
    assert len(vec) == EMBED_DIM
    assert abs(sum(v * v for v in vec) - 1.0) < 1e-9
    assert cosine(vec, vec) == pytest.approx(1.0)
    assert embed("") == [0.0] * EMBED_DIM


# Golden vectors, derived by hand from §3 (pad each word with a space on each side, hash every trigram with 32-bit
# FNV-1a over code points, +1 at hash % 64, L2-normalise):
#   "ab"   -> " ab" 0xde972e88 % 64 = 8,  "ab " 0x5b484f5e % 64 = 30            -> 1/sqrt(2) at 8 and 30
#   "abc"  -> " ab" 8, "abc" 0x1a47e90b % 64 = 11, "bc " 0xb0bc5596 % 64 = 22   -> 1/sqrt(3) at 8, 11, 22
#   "aaaa" -> " aa" 0xe1973341 % 64 = 1, "aaa" 0x3445d362 % 64 = 34 (twice), "aa " 0xf5457035 % 64 = 53
#                                                                               -> (1, 2, 1)/sqrt(6) at 1, 34, 53
#   "é"    -> " é " over code points 0x71c02e26 % 64 = 38 (over UTF-8 bytes it would be index 5)
# cosine("ab", "abc") shares only index 8: (1/sqrt(2)) * (1/sqrt(3)) = 1/sqrt(6).
GOLDEN_EMBEDDINGS = [
    ("ab", {8: 2**-0.5, 30: 2**-0.5}),
    ("abc", {8: 3**-0.5, 11: 3**-0.5, 22: 3**-0.5}),
    ("aaaa", {1: 6**-0.5, 34: 2 * 6**-0.5, 53: 6**-0.5}),
    ("é", {38: 1.0}),
    ("AB, ab!", {8: 2**-0.5, 30: 2**-0.5}),  # tokenised to ["ab", "ab"] first: the same direction
]


@pytest.mark.parametrize(("text", "nonzero"), GOLDEN_EMBEDDINGS, ids=[row[0] for row in GOLDEN_EMBEDDINGS])
def test_embed_matches_the_hand_derived_golden_vectors(text: str, nonzero: dict[int, float]) -> None:
    vec = embed(text)
    assert {i for i, v in enumerate(vec) if v} == set(nonzero)
    assert all(vec[i] == pytest.approx(v, abs=1e-12) for i, v in nonzero.items())


def test_cosine_of_two_fixed_strings_matches_the_hand_derived_value() -> None:
    assert cosine(embed("ab"), embed("abc")) == pytest.approx(6**-0.5, abs=1e-12)
    assert cosine(embed("ab"), embed("aaaa")) == 0.0


def test_mode_scores_and_the_vector_threshold() -> None:
    assert VECTOR_THRESHOLD == 0.2
    assert mode_score(FetchMode.KEYWORD, 0.0, 0.9) is None
    assert mode_score(FetchMode.KEYWORD, 0.5, 0.0) == 0.5
    assert mode_score(FetchMode.VECTOR, 1.0, 0.19) is None
    assert mode_score(FetchMode.VECTOR, 0.0, 0.2) == 0.2
    assert mode_score(FetchMode.HYBRID, 0.0, 0.19) is None
    assert mode_score(FetchMode.HYBRID, 0.5, 0.0) == 0.25
    assert mode_score(FetchMode.HYBRID, 0.0, 0.4) == 0.2


def test_fetch_scores_each_mode_as_the_table_says() -> None:
    engine = ReferenceEngine()
    item = doc("consolidation builds beliefs")
    engine.store(item)
    query = "beliefs nightly"
    lexical = keyword_score(set(tokenize(query)), set(tokenize(item.render_text())))
    semantic = cosine(embed(query), embed(item.render_text()))
    by_mode = {m: engine.fetch(FetchRequest(query=query, mode=m)).hits for m in FetchMode.all()}
    assert by_mode[FetchMode.KEYWORD][0].score == pytest.approx(lexical) == 0.5
    assert by_mode[FetchMode.HYBRID][0].score == pytest.approx((lexical + semantic) / 2)
    assert (len(by_mode[FetchMode.VECTOR]) == 1) == (semantic >= VECTOR_THRESHOLD)
    assert engine.fetch(FetchRequest(query="zebra", mode=FetchMode.KEYWORD)).hits == ()


def test_ties_rank_in_insertion_order_and_better_scores_first() -> None:
    engine = ReferenceEngine()
    ids = [engine.store(doc(f"apple {n}")).id for n in ("three", "one", "two")]
    best = engine.store(doc("apple pie")).id
    hits = engine.fetch(FetchRequest(query="apple pie", mode=FetchMode.KEYWORD)).hits
    assert [h.id for h in hits] == [best, *ids]
    assert [h.score for h in hits] == [1.0, 0.5, 0.5, 0.5]


def test_a_time_hint_moves_hinted_days_first_and_keeps_order_inside_each_group() -> None:
    engine = ReferenceEngine()
    undated = engine.store(doc("trip notes alpha")).id
    early = engine.store(doc("trip notes beta", observed_at=datetime(2024, 1, 1, 12, tzinfo=UTC))).id
    late_utc = engine.store(doc("trip notes gamma", observed_at=datetime(2024, 1, 1, 23, 30, tzinfo=UTC))).id
    hinted = engine.store(doc("trip notes delta", observed_at=datetime(2024, 1, 2, 9, tzinfo=UTC))).id
    hint = TimeHint.model_validate({"from": "2024-01-02", "to": "2024-01-02"})
    request = FetchRequest(query="trip notes", mode=FetchMode.KEYWORD, refers_to=hint)
    assert [h.id for h in engine.fetch(request).hits] == [hinted, undated, early, late_utc]
    # 23:30 UTC on Jan 1 is Jan 2 in Kolkata (+05:30)
    kolkata = TimeHint.model_validate({"from": "2024-01-02", "to": "2024-01-02", "zone": "Asia/Kolkata"})
    request = request.model_copy(update={"refers_to": kolkata})
    assert [h.id for h in engine.fetch(request).hits] == [late_utc, hinted, undated, early]


# paging ---------------------------------------------------------------------------------------------------
def test_lists_page_with_decimal_offset_cursors_and_score_zero() -> None:
    engine = ReferenceEngine()
    ids = [engine.store(doc(f"item {i}")).id for i in range(5)]
    seen, cursors, cursor = [], [], None
    while True:
        page = engine.list(ListRequest(limit=2, cursor=cursor))
        assert all(h.score == 0.0 for h in page.items)
        seen += [h.id for h in page.items]
        if page.next_cursor is None:
            break
        cursors.append(page.next_cursor)
        cursor = page.next_cursor
    assert seen == ids and cursors == ["2", "4"]
    assert engine.list(ListRequest(cursor="9")).items == ()


def test_fetch_pages_the_same_way() -> None:
    engine = ReferenceEngine()
    for i in range(3):
        engine.store(doc(f"needle {i}"))
    first = engine.fetch(FetchRequest(query="needle", mode=FetchMode.KEYWORD, limit=2))
    assert first.next_cursor == "2" and first.beliefs == ()
    rest = engine.fetch(FetchRequest(query="needle", mode=FetchMode.KEYWORD, limit=2, cursor="2"))
    assert len(rest.hits) == 1 and rest.next_cursor is None


@pytest.mark.parametrize("method", ["list", "export"])
def test_a_bad_cursor_is_an_invalid_request(method: str) -> None:
    engine = ReferenceEngine()
    with pytest.raises(InvalidRequest, match="unknown cursor") as info:
        getattr(engine, method)({"cursor": "page-two"})
    assert info.value.field == "cursor"


def test_export_hands_items_back_whole() -> None:
    engine = ReferenceEngine()
    item = Learning(text="prefers tea", kind=LearningKind.PREFERENCE, confidence=0.75, evidence="said so")
    engine.store(item)
    page = engine.export()
    assert [(e.id, e.item) for e in page.items] == [(item.id, item)] and page.incomplete == ()


# recall ---------------------------------------------------------------------------------------------------
def test_recall_cites_the_top_hybrid_hits() -> None:
    engine = ReferenceEngine()
    engine.store(doc("the launch is on friday"))
    engine.store(doc("the launch moved to monday"))
    engine.store(doc("unrelated zebra facts"))
    answer = engine.recall(RecallRequest(question="when is the launch", limit=2))
    assert answer.model == "reference"
    assert len(answer.citations) == 2 and all(c.score is not None for c in answer.citations)
    snippets = [c.snippet for c in answer.citations]
    assert answer.answer == "From 2 stored items: " + " | ".join(snippets)


def test_recall_with_nothing_to_cite() -> None:
    answer = ReferenceEngine().recall(RecallRequest(question="anything"))
    assert answer.answer == "Nothing stored answers this question." and answer.citations == ()


# forget and erase -----------------------------------------------------------------------------------------
def test_forget_by_ids_counts_only_what_it_removed() -> None:
    engine = ReferenceEngine()
    a = engine.store(doc("a")).id
    assert engine.forget(ForgetTarget(ids=(a, a, "unknown"))).forgotten == 1
    assert engine.forget(ForgetTarget(ids=(a,))).forgotten == 0


def test_forget_by_filter_removes_what_matches() -> None:
    engine = ReferenceEngine()
    engine.store(doc("keep", tags=("keep",)))
    engine.store(doc("drop", tags=("drop",)))
    engine.store(doc("drop too", ns="agent:x", tags=("drop",)))
    assert engine.forget(ForgetTarget(filter=MetaFilter(tags_any=("drop",)))).forgotten == 2
    assert [h.text for h in engine.list().items] == ["keep"]


def test_erase_ignores_inherit_and_counts_namespace_kind_pairs() -> None:
    engine = ReferenceEngine()
    engine.store(doc("root doc"))
    engine.store(doc("node doc", ns="agent:x"))
    engine.store(Learning(text="node learning", meta=MemoryMeta().at("agent:x")))
    engine.store(doc("child doc", ns="agent:x/agent:y"))
    report = engine.erase(EraseRequest(reach=Reach.of("agent:x")))
    assert report.erased_scopes == 2 and len(report.receipts) == 2
    assert sorted(h.text for h in engine.list().items) == ["child doc", "root doc"]
    again = engine.erase(EraseRequest(reach=Reach.subtree("agent:x"), kinds=(ItemKind.DOCUMENT,)))
    assert again.erased_scopes == 1
    assert [h.text for h in engine.list().items] == ["root doc"]


# consolidation --------------------------------------------------------------------------------------------
def test_consolidation_none_is_unsupported_and_scheduled_only_acknowledges() -> None:
    request = ConsolidateRequest(reach=Reach.subtree())
    with pytest.raises(Unsupported):
        ReferenceEngine("none").consolidate(request)
    scheduled = ReferenceEngine("scheduled")
    scheduled.store(doc("A fact."))
    receipt = scheduled.consolidate(request)
    assert receipt.status is ConsolidateStatus.SCHEDULED and (receipt.jobs, receipt.scopes, receipt.built) == (
        (),
        0,
        None,
    )
    assert len(scheduled) == 1


@pytest.mark.parametrize("mode", ["on_demand", "automatic"])
def test_consolidation_distils_one_fact_per_document_or_conversation_at_its_node(mode: str) -> None:
    engine = ReferenceEngine(mode)
    source_doc = engine.store_many([doc("# Plan\n\nShip on Friday. Then rest.", ns="agent:a", tags=("plan",))])[0]
    conv = chat((Role.ASSISTANT, "Hi there."), (Role.USER, "I like green tea! Really."), ns="agent:b")
    engine.store(conv)
    engine.store(Learning(text="Learnings are never a source.", meta=MemoryMeta().at("agent:a")))
    engine.store(doc("#", ns="agent:a"))  # nothing left to say: skipped
    receipt = engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    assert receipt.status is ConsolidateStatus.COMPLETED
    assert (receipt.built, receipt.scopes) == (2, 2 * 3)
    facts = engine.list({"filter": {"tags_any": ["consolidated"]}}).items
    by_text = {h.text: h for h in facts}
    assert set(by_text) == {"Ship on Friday.", "I like green tea!"}
    ship = by_text["Ship on Friday."]
    assert ship.kind is ItemKind.LEARNING and ship.confidence == 0.5
    assert ship.meta.namespace == Namespace.parse("agent:a") and ship.meta.tags == ("plan", "consolidated")
    exported = engine.export({"filter": {"tags_any": ["consolidated"]}}).items
    stored = {e.item.text: e.item for e in exported if isinstance(e.item, Learning)}
    assert stored["Ship on Friday."].evidence == source_doc.id
    assert stored["I like green tea!"].evidence == conv.id
    assert stored["Ship on Friday."].kind is LearningKind.FACT
    assert by_text["I like green tea!"].meta.namespace == Namespace.parse("agent:b")


def test_consolidating_twice_replays_and_still_counts_what_it_built() -> None:
    engine = ReferenceEngine()
    engine.store(doc("One fact."))
    first = engine.consolidate(ConsolidateRequest(reach=Reach.exact("root")))
    size = len(engine)
    second = engine.consolidate(ConsolidateRequest(reach=Reach.exact("root")))
    assert first.built == second.built == 1 and len(engine) == size == 2


def test_consolidation_admits_only_the_requested_kinds_and_reach() -> None:
    engine = ReferenceEngine()
    engine.store(doc("Doc at a.", ns="agent:a"))
    engine.store(chat((Role.USER, "Chat at a."), ns="agent:a"))
    engine.store(doc("Doc at b.", ns="agent:b"))
    receipt = engine.consolidate(ConsolidateRequest(reach=Reach.exact("agent:a"), kinds=(ItemKind.CONVERSATION,)))
    assert (receipt.built, receipt.scopes) == (1, 1)
    assert [h.text for h in engine.list({"filter": {"tags_any": ["consolidated"]}}).items] == ["Chat at a."]


def test_no_build_reports_zero_scopes() -> None:
    receipt = ReferenceEngine().consolidate(ConsolidateRequest(reach=Reach.subtree()))
    assert (receipt.status, receipt.built, receipt.scopes) == (ConsolidateStatus.COMPLETED, 0, 0)


def test_reference_beliefs_are_ordinary_learnings_so_beliefs_answers_none() -> None:
    engine = ReferenceEngine()
    engine.store(doc("A fact."))
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    assert engine.beliefs({"reach": Reach.subtree().to_dict()}) == []
