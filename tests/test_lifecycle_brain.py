"""Brain: ingest, ingest_many, search, forget and build (seed 000, reference §4.5)."""

from __future__ import annotations

import pytest
from _lifecycle_doubles import Recording, stored

from memory_core.consolidation import ConsolidateRequest, Consolidation, WaitFor, WriteOptions
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.items import Document
from memory_core.lifecycle import (
    Brain,
    BrainDocument,
    BrainSource,
    BuildBeliefs,
    IngestBrain,
    MemoryLayout,
    parse_job,
)
from memory_core.limits import MAX_STORE_MANY
from memory_core.meta import ItemKind, MemoryMeta, SourceKind, SourceRef
from memory_core.namespace import Namespace, Reach
from memory_core.query import FetchMode

ROOT = "team:acme"


@pytest.fixture
def layout() -> MemoryLayout:
    return MemoryLayout(ROOT)


@pytest.fixture
def engine() -> Recording:
    return Recording()


def doc(source: str, text: str, **kw) -> BrainDocument:
    return BrainDocument.new(source, text, **kw)


def build_of(source: str) -> BuildBeliefs:
    request = ConsolidateRequest(reach=Reach.subtree(f"{ROOT}/source:{source}"), kinds=(ItemKind.DOCUMENT,))
    return BuildBeliefs(request=request)


# ingest -------------------------------------------------------------------------------------------------
def test_ingest_stores_at_the_source_node_and_returns_its_build(engine, layout):
    result = Brain(engine, layout).ingest(doc("notion", "Refunds take five business days.", title="Refunds"))
    (item,) = stored(engine.inner)
    assert isinstance(item, Document) and item.id == result.receipt.id and not result.receipt.replayed
    assert item.meta.namespace == Namespace.parse(f"{ROOT}/source:notion")
    assert item.meta.source == SourceRef(kind=SourceKind.IMPORT) and item.title == "Refunds"
    assert result.job == build_of("notion")
    assert result.job is not None and result.job.request.kinds == (ItemKind.DOCUMENT,)
    (call,) = engine.of("store_with")
    assert call.options == WriteOptions.visible()


def test_ingest_with_accepted_passes_the_wait_through(engine, layout):
    Brain(engine, layout).ingest_with(doc("files", "A local note."), WaitFor.ACCEPTED)
    (call,) = engine.of("store_with")
    assert call.options == WriteOptions.accepted()
    assert stored(engine.inner)[0].meta.source.kind is SourceKind.FILE
    with pytest.raises(InvalidRequest) as err:
        Brain(engine, layout).ingest_with(doc("files", "x"), "eventually")
    assert err.value.field == "wait"


def test_a_brain_document_never_carries_an_agent_id(engine, layout):
    meta = MemoryMeta(namespace=Namespace.parse("team:other/agent:spy"), agent_id="spy", tags=("hr",))
    Brain(engine, layout).ingest(
        {"source": "github", "text": "The repo uses trunk-based flow.", "meta": meta.to_dict()}
    )
    (item,) = stored(engine.inner)
    assert item.meta.agent_id is None
    assert item.meta.namespace == Namespace.parse(f"{ROOT}/source:github")
    assert item.meta.tags == ("hr",)
    listed = engine.list({"filter": {"agent_id": "spy"}})
    assert listed.items == ()


def test_an_explicit_source_ref_is_kept(engine, layout):
    meta = MemoryMeta(source=SourceRef(kind=SourceKind.LINK, id="https://example.test/a"))
    Brain(engine, layout).ingest(doc("web", "A page.", meta=meta))
    assert stored(engine.inner)[0].meta.source == meta.source


def test_ingest_refuses_blank_text_and_stores_nothing(engine, layout):
    with pytest.raises(InvalidRequest) as err:
        Brain(engine, layout).ingest(doc("notion", "   "))
    assert err.value.field == "text"
    assert engine.calls == []


def test_ingest_returns_no_job_under_automatic_consolidation(layout):
    brain = Brain(ReferenceEngine(Consolidation.AUTOMATIC), layout)
    assert brain.ingest(doc("notion", "A page.")).job is None
    assert brain.build("notion") == build_of("notion")


def test_a_collection_lives_below_its_source(engine, layout):
    Brain(engine, layout).ingest(doc("github", "README of the api."), collection="api")
    (item,) = stored(engine.inner)
    assert item.meta.namespace == Namespace.parse(f"{ROOT}/source:github/project:api")


# ingest_many --------------------------------------------------------------------------------------------
def test_ingest_many_stores_in_chunks_and_returns_one_build_per_source(engine, layout):
    docs = [doc("notion" if i % 3 else "github", f"Document number {i}.") for i in range(2 * MAX_STORE_MANY + 50)]
    batch = Brain(engine, layout).ingest_many(docs)
    assert [len(c.arg) for c in engine.of("store_many_with")] == [100, 100, 50]
    assert len(batch.receipts) == 250 and len(stored(engine.inner)) == 250
    assert [r.id for r in batch.receipts] == [d.into_item(layout).id for d in docs]
    assert batch.jobs == (build_of("github"), build_of("notion"))


def test_ingest_many_is_all_or_nothing_on_an_invalid_document(engine, layout):
    docs = [doc("notion", "fine"), {"source": "notion", "text": " "}, doc("notion", "also fine")]
    with pytest.raises(InvalidRequest) as err:
        Brain(engine, layout).ingest_many(docs)
    assert err.value.field == "documents.1.text"
    assert engine.calls == []
    with pytest.raises(InvalidRequest) as err:
        Brain(engine, layout).ingest_many([doc("notion", "fine"), {"source": "", "text": "x"}])
    assert err.value.field == "documents.1.source"
    with pytest.raises(InvalidRequest) as err:
        Brain(engine, layout).ingest_many([])
    assert err.value.field == "documents"
    assert engine.calls == []


def test_ingest_many_accepted_and_automatic(layout):
    engine = Recording(ReferenceEngine(Consolidation.AUTOMATIC))
    batch = Brain(engine, layout).ingest_many([doc("web", "a"), doc("pdf", "b")], WaitFor.ACCEPTED)
    assert batch.jobs == () and len(batch.receipts) == 2
    (call,) = engine.of("store_many_with")
    assert call.options == WriteOptions.accepted()


def test_ingest_many_replays_repeated_documents(engine, layout):
    brain = Brain(engine, layout)
    first = brain.ingest_many([doc("notion", "same"), doc("notion", "other")])
    again = brain.ingest_many([doc("notion", "same"), doc("notion", "other")])
    assert [r.id for r in again.receipts] == [r.id for r in first.receipts]
    assert all(r.replayed for r in again.receipts) and len(stored(engine.inner)) == 2


# search, forget, build ----------------------------------------------------------------------------------
def _seed(brain: Brain) -> None:
    brain.ingest(doc("notion", "Refunds take five business days."))
    brain.ingest(doc("github", "Refunds are processed by the billing service."), collection="billing")
    brain.ingest(doc("files", "The office closes at six."))


def test_search_one_source_or_the_whole_brain(engine, layout):
    brain = Brain(engine, layout)
    _seed(brain)
    engine.reset()
    everywhere = brain.search("refunds", limit=5)
    assert {str(h.meta.namespace) for h in everywhere if "Refunds" in h.text} == {
        f"{ROOT}/source:notion",
        f"{ROOT}/source:github/project:billing",
    }
    github = brain.search("refunds", source="github")
    assert [h.text for h in github] == ["Refunds are processed by the billing service."]
    assert {c.arg.mode for c in engine.of("fetch")} == {FetchMode.HYBRID}
    assert engine.of("fetch")[0].arg.filter.kinds == (ItemKind.DOCUMENT,)


def test_search_uses_the_first_mode_without_hybrid_and_refuses_without_modes(layout):
    keyword = Recording(modes=[FetchMode.KEYWORD, FetchMode.VECTOR])
    Brain(keyword, layout).search("anything")
    assert keyword.of("fetch")[0].arg.mode is FetchMode.KEYWORD
    with pytest.raises(Unsupported):
        Brain(Recording(modes=[]), layout).search("anything")
    with pytest.raises(InvalidRequest) as err:
        Brain(keyword, layout).search(" ")
    assert err.value.field == "query"


def test_forget_removes_a_source_with_its_collections_only(engine, layout):
    brain = Brain(engine, layout)
    _seed(brain)
    brain.ingest(doc("github", "Top-level github doc."))
    assert brain.forget("github").forgotten == 2
    left = stored(engine.inner)
    assert [i.meta.namespace for i in left] == [
        Namespace.parse(f"{ROOT}/source:notion"),
        Namespace.parse(f"{ROOT}/source:files"),
    ]


def test_build_targets_the_source_subtree(engine, layout):
    job = Brain(engine, layout).build(BrainSource.GITHUB)
    assert job.request.reach == Reach.subtree(f"{ROOT}/source:github")
    assert job.request.reach.admits(Namespace.parse(f"{ROOT}/source:github/project:api"))
    assert job.request.kinds == (ItemKind.DOCUMENT,)


# a source is always named -------------------------------------------------------------------------------
def _three_documents(engine: Recording, layout: MemoryLayout) -> None:
    """An agent's private note, a root-level document and a brain page: what a whole-layout forget would erase."""
    engine.inner.store(Document.of("writer's private note", MemoryMeta().at(f"{ROOT}/agent:writer")))
    engine.inner.store(Document.of("a root document", MemoryMeta().at(ROOT)))
    Brain(engine.inner, layout).ingest(doc("notion", "A brain page."))


@pytest.mark.parametrize("source", [None, "", "   "])
def test_forget_refuses_a_missing_or_blank_source_and_forgets_nothing(engine, layout, source):
    _three_documents(engine, layout)
    with pytest.raises(InvalidRequest) as err:
        Brain(engine, layout).forget(source)
    assert err.value.field == "source"
    assert engine.of("forget") == [] and len(stored(engine.inner)) == 3


def test_search_refuses_a_bool_limit_and_a_blank_source(engine, layout):
    brain = Brain(engine, layout)
    for limit in (True, 2.0, 0, 1001):
        with pytest.raises(InvalidRequest) as err:
            brain.search("anything", limit=limit)  # type: ignore[arg-type]
        assert err.value.field == "limit"
    with pytest.raises(InvalidRequest) as err:
        brain.search("anything", source=" ")
    assert err.value.field == "source"
    assert engine.calls == []


@pytest.mark.parametrize("collection", ["", "  "])
def test_a_blank_collection_is_refused_and_nothing_is_stored(engine, layout, collection):
    brain = Brain(engine, layout)
    calls = [
        lambda: layout.brain_collection("notion", collection),
        lambda: brain.ingest(doc("notion", "A page."), collection=collection),
        lambda: brain.ingest_with(doc("notion", "A page."), WaitFor.ACCEPTED, collection=collection),
        lambda: brain.ingest_many([doc("notion", "A page.")], collection=collection),
        lambda: brain.ingest_job([doc("notion", "A page.")], collection=collection),
        lambda: IngestBrain(documents=(doc("notion", "A page."),), collection=collection),
    ]
    for call in calls:
        with pytest.raises(InvalidRequest) as err:
            call()
        assert err.value.field == "collection"
    assert engine.calls == []


def test_a_source_id_is_a_slug_case_folded_or_refused():
    assert BrainSource.parse(" Notion ").id == "notion" and BrainSource.parse("MD") == BrainSource.MARKDOWN
    assert str(BrainSource.parse("google-drive_2")) == "google-drive_2"
    layout = MemoryLayout(ROOT)
    assert layout.brain("Gmail") == Namespace.parse(f"{ROOT}/source:gmail")  # the id is the node's segment
    for bad in ("Gmail App/x", "gmail app", "a:b", "x" * 129, "ünï"):
        with pytest.raises(InvalidRequest) as err:
            BrainSource.parse(bad)
        assert err.value.field == "source" and "slug" in err.value.message
    with pytest.raises(InvalidRequest) as err:
        BrainDocument.model_validate({"source": "Gmail App/x", "text": "x"})
    assert err.value.field == "source"


@pytest.mark.parametrize("source", [" ", None, 5])
def test_a_bad_source_in_a_document_is_named_once(source):
    with pytest.raises(InvalidRequest) as err:
        BrainDocument.model_validate({"source": source, "text": "x"})
    assert err.value.field == "source"
    assert str(err.value).count("source:") == 1, str(err.value)


def test_ingest_job_checks_every_document_and_names_the_layout_root(engine, layout):
    job = Brain(engine, layout).ingest_job([doc("notion", "A page."), {"source": "web", "text": "B"}], collection="x")
    assert job.root == Namespace.parse(ROOT) and job.collection == "x" and len(job.documents) == 2
    assert parse_job(job.to_json()) == job
    with pytest.raises(InvalidRequest) as err:
        Brain(engine, layout).ingest_job([doc("notion", "fine"), {"source": "notion", "text": " "}])
    assert err.value.field == "documents.1.text"
    assert engine.calls == []  # making a job stores nothing


# construction ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [None, "reference://", 5])
def test_brain_and_runner_refuse_an_engine_that_is_not_a_memory_engine(layout, bad):
    """``Brain(None)`` failed only at first use (``'NoneType' object has no attribute …``)."""
    from memory_core.lifecycle import BackgroundRunner

    for build in (Brain, BackgroundRunner):
        with pytest.raises(InvalidRequest) as err:
            build(bad, layout)
        assert err.value.field == "engine"
        assert err.value.reason.startswith(f"expected a MemoryEngine, got {type(bad).__name__}")


@pytest.mark.parametrize("bad", ["team:acme", 5])
def test_brain_and_runner_refuse_a_layout_that_is_not_a_memory_layout(engine, bad):
    """``Brain(engine, "team:acme")`` was accepted and failed at first use; None still means ``MemoryLayout()``."""
    from memory_core.lifecycle import BackgroundRunner

    for build in (Brain, BackgroundRunner):
        with pytest.raises(InvalidRequest) as err:
            build(engine, bad)
        assert err.value.field == "layout"
        assert err.value.reason == f"expected a MemoryLayout or None, got {type(bad).__name__}"
        assert build(engine).layout == MemoryLayout()
        assert build(engine, None).layout == MemoryLayout()
