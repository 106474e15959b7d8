"""The live turn's ranking costs, counted (issue 12 with the model ranking): one query encode per ``pre_turn``
shared by every section and run off the sections' threads, reranks bounded by ``RERANK_POOL`` with the decoded
token vectors of their candidates kept per process, one BLAS thread, and each shown text stemmed once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from memory_core import Document, FetchRequest, ItemKind
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.blas import blas_threads, limit_blas
from memory_core.engines.sqlite.rerank import RERANK_POOL
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.brain import Brain
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.query import FetchMode, ForgetTarget
from memory_core.recall import relevance
from memory_core.retrieval.embedder import Encoded, HashEmbedder

LAYOUT = MemoryLayout()


class SlowCounting(HashEmbedder):
    """The hash embedder, counting its calls and the threads they ran on; each call takes ``delay_s``.

    The delay widens the window in which a pack's concurrent sections could each find no encoding and run the
    model themselves (what the counts below rule out); nothing asserts time.
    """

    def __init__(self, delay_s: float = 0.05) -> None:
        self.delay_s = delay_s
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> Encoded:
        with self._lock:
            self.calls.append((threading.current_thread().name, tuple(texts)))
        time.sleep(self.delay_s)
        return super().encode(texts)


@pytest.fixture
def model() -> SlowCounting:
    return SlowCounting()


@pytest.fixture
def engine(tmp_path: Path, model: SlowCounting) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "m.db", synchronous="normal", embedder=model) as e:
        yield e


def _queries(model: SlowCounting) -> list[str]:
    return [texts[0] for _, texts in model.calls if len(texts) == 1 and not texts[0].startswith("user: ")]


def test_one_encode_per_pre_turn_for_all_its_sections(engine: SQLiteEngine, model: SlowCounting) -> None:
    agent = AgentMemory(engine, LAYOUT, "ann")
    other = AgentMemory(engine, LAYOUT, "bob")
    for i in range(4):
        other.post_turn({"thread_id": "b", "turn_index": i, "assistant_text": f"Bob kayaks on lake {i} at dawn"})
        agent.post_turn({"thread_id": "old", "turn_index": i, "assistant_text": f"Ann saw a calm lake {i} at dawn"})
    docs = [BrainDocument.new("files", f"Kayaks float; lake {i} is calm at dawn.") for i in range(2)]
    Brain(engine, LAYOUT).ingest_many(docs)
    engine.embed_backlog()
    model.calls.clear()
    questions = ["Where does Bob kayak?", "When is the lake calm?", "What floats at dawn?"]
    for turn, question in enumerate(questions):
        before = engine.reads.reranks
        agent.pre_turn({"thread_id": "a", "turn_index": turn, "user_text": question})
        assert engine.reads.reranks - before >= 3  # several sections reranked with this question's tokens...
    assert _queries(model) == questions  # ...and the model ran once per pre_turn, for all of them
    assert engine.query_encodes == len(questions)
    assert {name for name, _ in model.calls} == {"memory-core-encode_0"}  # never on a section's thread
    engine.fetch(FetchRequest(query=questions[0], mode=FetchMode.HYBRID))
    assert engine.query_encodes == len(questions)  # a query asked again is not encoded again


def test_a_failed_encoding_is_retried_by_the_next_read(engine: SQLiteEngine, model: SlowCounting) -> None:
    engine.store(Document.of("a lake at dawn"))
    engine.store(Document.of("a lake at dusk"))
    fail = True
    encode = model.encode

    def flaky(texts: Sequence[str]) -> Encoded:
        if fail:
            raise RuntimeError("model unavailable")
        return encode(texts)

    model.encode = flaky  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="model unavailable"):
        engine.fetch(FetchRequest(query="lake", mode=FetchMode.HYBRID))
    fail = False
    assert engine.fetch(FetchRequest(query="lake", mode=FetchMode.HYBRID)).hits
    assert engine.query_encodes == 2


def _docs(n: int) -> list[Document]:
    return [Document.of(f"Lake report {i}: the kayak club paddled {i} km.") for i in range(n)]


def test_a_rerank_scores_at_most_the_pool_and_reads_each_vector_once(engine: SQLiteEngine) -> None:
    docs = _docs(RERANK_POOL * 3)
    for start in range(0, len(docs), 100):
        engine.store_many(docs[start : start + 100])
    engine.embed_backlog()
    request = FetchRequest(query="kayak lake report", mode=FetchMode.HYBRID, limit=5)
    first = engine.fetch(request)
    assert len(first.hits) == 5
    assert engine.reads.reranks == 1 and engine.reads.most_reranked == RERANK_POOL  # 300 candidates held
    cache = engine._tokens
    read, hits = cache.stats.read, cache.stats.hits
    assert RERANK_POOL <= read <= 2 * RERANK_POOL and hits == 0  # the pool and the turns before them, once
    again = engine.fetch(request)
    assert [h.id for h in again.hits] == [h.id for h in first.hits]
    assert cache.stats.read == read  # nothing decoded twice
    assert cache.stats.hits >= RERANK_POOL
    assert engine.reads.most_reranked == RERANK_POOL


def test_a_kept_vector_of_a_forgotten_item_is_not_served(engine: SQLiteEngine) -> None:
    engine.store_many(_docs(4))
    engine.embed_backlog()
    engine.fetch(FetchRequest(query="kayak lake report", mode=FetchMode.HYBRID))
    gone = engine.fetch(FetchRequest(query="report 2", mode=FetchMode.KEYWORD, limit=1)).hits[0]
    seqs = engine._db.run(lambda conn: [int(r[0]) for r in conn.execute("SELECT seq FROM items ORDER BY seq")])
    assert len(engine._tokens) == 4
    engine.forget(ForgetTarget(ids=[gone.id]))
    served = engine._db.run(lambda conn: engine._tokens.load(conn, seqs, engine.embedder.name, engine.embedder.dims))
    assert len(served) == 3 and all(row.tokens is not None for row in served.values())
    hits = engine.fetch(FetchRequest(query="kayak lake report", mode=FetchMode.HYBRID)).hits
    assert gone.id not in {h.id for h in hits} and len(hits) == 3


def test_the_engine_runs_blas_on_one_thread(engine: SQLiteEngine) -> None:
    pools = blas_threads()
    assert pools and all(n == 1 for n in pools)  # numpy's BLAS pool, set when the first engine opened
    assert limit_blas(4) is False  # once per process: a later engine leaves it alone
    assert blas_threads() == pools


def test_the_floor_stems_each_shown_text_once(engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    stemmed: list[str] = []
    real = relevance.term_set

    def counting(text: str) -> frozenset[str]:
        stemmed.append(text)
        return real(text)

    relevance.shown_terms.cache_clear()
    monkeypatch.setattr(relevance, "term_set", counting)
    agent = AgentMemory(engine, LAYOUT, "ann")
    for i in range(6):
        agent.post_turn({"thread_id": "a", "turn_index": i, "assistant_text": f"The kayak club met at lake {i}"})
    question = "Where did the kayak club meet?"
    for _ in range(3):  # the same question three times: the same hits
        pack = agent.recall(question)
        assert any(h.kind == ItemKind.CONVERSATION for s in pack.sections for h in s.hits)
    shown = [text for text in stemmed if text != question]
    assert shown and len(shown) == len(set(shown))  # every shown text stemmed once, not once per pack


@pytest.mark.parametrize("kind", ["sqlite", "reference"])
def test_the_team_read_leaves_the_agent_out_before_ranking(tmp_path: Path, kind: str) -> None:
    from memory_core.engines.reference import ReferenceEngine

    store = SQLiteEngine(tmp_path / "t.db", synchronous="normal") if kind == "sqlite" else ReferenceEngine()
    ann, bob = AgentMemory(store, LAYOUT, "ann"), AgentMemory(store, LAYOUT, "bob")
    bob.post_turn({"thread_id": "b", "turn_index": 0, "assistant_text": "A kayak trip on the lake"})
    for i in range(12):  # ann's own turns, written last, rank first for the question
        ann.post_turn({"thread_id": "a", "turn_index": i, "assistant_text": f"Kayak kayak lake trip number {i}"})
    if isinstance(store, SQLiteEngine):
        store.drain_pending()
    team = LAYOUT.conversations_filter(None)
    plain = store.fetch(FetchRequest(query="kayak lake trip", filter=team, limit=1, max_scopes=1))
    assert [h.meta.agent_id for h in plain.hits] == ["ann"]  # without the field: ann takes the page and the scope
    request = FetchRequest(query="kayak lake trip", filter=team, limit=1, max_scopes=1, exclude_agent_id="ann")
    page = store.fetch(request)
    assert [h.meta.agent_id for h in page.hits] == ["bob"]  # one hit asked, and it is the other agent's
    if isinstance(store, SQLiteEngine):
        assert store.reads.recent[-1] == (team, 1)  # only bob's turn was ranked
        store.close()
    assert "exclude_agent_id" not in FetchRequest(query="q").model_dump(mode="json", exclude_none=True)
    assert FetchRequest.model_validate_json(request.model_dump_json()).exclude_agent_id == "ann"


def test_the_index_loads_a_big_file_in_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core.engines.sqlite import index

    path = tmp_path / "big.db"
    with SQLiteEngine(path, synchronous="normal") as writer:
        writer.store_many(_docs(100))
    monkeypatch.setattr(index, "LOAD_PAGE", 7)
    with SQLiteEngine(path, synchronous="normal") as reader:  # a new process's first read
        hits = reader.fetch(FetchRequest(query="kayak report 42", mode=FetchMode.KEYWORD, limit=100)).hits
        assert len(hits) == 100 and "report 42:" in hits[0].text
        assert reader._index.loads == 15 and reader._index.size() == 100  # 100 rows, 7 a query (the last: 2)
        reader.store_many(_docs(103)[100:])
        assert len(reader.fetch(FetchRequest(query="kayak", mode=FetchMode.KEYWORD, limit=200)).hits) == 103
        assert reader._index.loads == 16
