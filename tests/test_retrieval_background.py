"""The model runs in the background: storing never embeds, a worker's job does, and ranking uses what it wrote."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memory_core import Document, FetchRequest, ListRequest, MemoryMeta, Reach
from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.query import FetchMode
from memory_core.retrieval import fusion
from memory_core.retrieval.embedder import Encoded, HashEmbedder


class Recording(HashEmbedder):
    """The hash embedder, recording which thread encoded which texts."""

    def __init__(self, name: str = "hash") -> None:
        self.name = name
        self.calls: list[tuple[int, tuple[str, ...]]] = []

    def encode(self, texts: Sequence[str]) -> Encoded:
        self.calls.append((threading.get_ident(), tuple(texts)))
        return super().encode(texts)

    def texts_on(self, thread: int) -> list[str]:
        return [t for ident, texts in self.calls if ident == thread for t in texts]


def test_a_turn_stored_accepted_is_never_embedded_on_the_hosts_thread(tmp_path: Path) -> None:
    model = Recording()
    host = threading.get_ident()
    with SQLiteEngine(tmp_path / "m.db", embedder=model) as engine:
        agent = AgentMemory(engine, MemoryLayout("team:t"), "ann")
        agent.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "My tortoise is called Sheldon"})
        agent.post_turn({"thread_id": "t1", "turn_index": 1, "assistant_text": "Sheldon is a great name"})
        pack = agent.recall("What is the name of the tortoise?")
        assert engine.stats()["embedding_wait"] == 2  # stored, waiting for the model
        assert any("Sheldon" in h.text for s in pack.sections for h in s.hits)  # ranked lexically meanwhile
        stored_texts = {"user: My tortoise is called Sheldon", "assistant: Sheldon is a great name"}
        on_host = {t for _, texts in model.calls for t in texts}  # the host's thread and its recall pool
        assert not stored_texts & on_host  # only queries were encoded
        assert on_host == {"My tortoise is called Sheldon", "What is the name of the tortoise?"}  # two packs
        assert len(model.calls) == 2  # each pack's query once, for all its sections

        reports = []

        def work() -> None:  # what a worker does: a build job, then the embedding job (workers.handlers.run_embed)
            reports.append(
                BackgroundRunner(engine).run(BuildBeliefs(request=ConsolidateRequest(reach=Reach.subtree())))
            )
            reports.append(engine.embed_backlog())

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        assert reports[-1] == 2 and engine.stats()["embedding_wait"] == 0
        assert stored_texts <= set(model.texts_on(worker.ident or 0))
        assert not stored_texts & set(model.texts_on(host))
        assert all(ident == worker.ident for ident, _ in model.calls[2:])  # every later encoding: the job


def test_changing_the_model_re_embeds_in_the_background(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteEngine(path, embedder=Recording("hash")) as engine:
        engine.store_many([Document.of(f"note {i}", MemoryMeta()) for i in range(5)])
        assert engine.embed_backlog(batch=2) == 5 and engine.stats()["embedding_wait"] == 0
    other = Recording("hash-v2")
    with SQLiteEngine(path, embedder=other) as engine:
        assert engine.stats()["embedding_wait"] == 5  # the old model's vectors do not count
        assert engine.embed_backlog(limit=3) == 3 and engine.stats()["embedding_wait"] == 2
        engine.forget({"ids": [Document.of("note 4", MemoryMeta()).id]})  # a deleted item's vectors go with it
        assert engine.embed_backlog() == 1 and engine.stats()["embedding_wait"] == 0


def test_only_live_items_wait_for_the_model_and_the_job_embeds_exactly_those(tmp_path: Path) -> None:
    # status's "waiting for embedding" and what the embedding job encodes are one query (``vectors._WAITING``):
    # an item a supersede retracted is not served, so it neither waits nor is encoded; brought back, it waits
    model = Recording()
    with SQLiteEngine(tmp_path / "m.db", embedder=model) as engine:
        agent = AgentMemory(engine, MemoryLayout("team:t"), "ann")
        for i in range(10):
            agent.learn(f"value {i} of the thing", key=f"k{i}")
        before = engine.current_lsn()
        assert agent.learn("a new value of the thing", key="k0").superseded
        assert len(engine.list(ListRequest(limit=100)).items) == 10  # live: status's item count
        assert engine.stats()["embedding_wait"] == 10
        assert engine.embed_backlog() == 10 and engine.stats()["embedding_wait"] == 0
        encoded = [t for _, texts in model.calls for t in texts]
        assert len(encoded) == 10 and not any("value 0 of" in t for t in encoded)  # the superseded one: never
        engine.rollback(before, "undo the new value")  # the old value is live again, and has no vectors
        assert engine.stats()["embedding_wait"] == 1
        assert engine.embed_backlog() == 1 and "value 0 of" in model.calls[-1][1][0]


class Marked(HashEmbedder):
    """One token vector per text: ``e0`` for a text holding "blue" or "colour", ``e1`` for any other."""

    name = "marked"

    def encode(self, texts: Sequence[str]) -> Encoded:
        tokens = [np.eye(64, dtype=np.float32)[[0 if ("blue" in t or "colour" in t) else 1]] for t in texts]
        return Encoded(super().encode(texts).pooled, tokens)


def test_an_item_ranks_lexically_until_embedded_then_late_interaction_joins_the_fusion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two items: with the lexical ranking weighing as much as the model's two views together, the model's
    # preference only ties it; weighed like one view, the model's two views decide
    monkeypatch.setattr(fusion, "LEXICAL_WEIGHT", 1.0)
    strong = Document.of("report report report weekly", MemoryMeta())
    blue = Document.of("the report cover is blue", MemoryMeta())
    request = FetchRequest(query="report colour", mode=FetchMode.HYBRID, limit=2)
    with SQLiteEngine(tmp_path / "m.db", embedder=Marked()) as engine:
        engine.store_many([strong, blue])
        before = engine.fetch(request).hits
        assert [h.id for h in before] == [strong.id, blue.id]  # BM25: three "report"
        engine.embed_backlog()
        after = engine.fetch(request).hits
        assert [h.id for h in after] == [blue.id, strong.id]  # MaxSim of the query's token: the blue one
        assert after[0].score == after[1].score == pytest.approx(before[0].score)  # the best score, carried down
        keyword = engine.fetch(request.model_copy(update={"mode": FetchMode.KEYWORD})).hits
        assert [h.id for h in keyword] == [strong.id, blue.id]  # keyword mode stays BM25's
