"""Beliefs built from real text: LoCoMo conversations (as the lifecycle logs them) and the PEPs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _data import DATA_DIR, require_data

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    Document,
    MemoryMeta,
    Reach,
    SourceKind,
    SourceRef,
)
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.eval.evidence import parse_evidence
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import turn_item
from memory_core.meta import ObservedActor
from memory_core.namespace import Namespace
from memory_core.replay.formats import parse_locomo

SHARED = DATA_DIR
BUILD = ConsolidateRequest(reach=Reach.subtree())
pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True, scope="module")
def _shared_data() -> None:
    """Skip without the shared data, except in CI (``CI=true``), where missing data fails the run."""
    require_data()


def _locomo() -> tuple[list[tuple[str, str, Conversation]], list[dict[str, Any]]]:
    data = json.loads((SHARED / "locomo" / "locomo_dev.json").read_text())
    parsed = parse_locomo(data)
    rows = []
    for i, t in enumerate(parsed.turns):
        speaker = t.speaker.lower()
        item = turn_item(
            Namespace.agent(speaker),
            speaker,
            t.thread_id,
            i,
            Turn(role=Role.USER, text=t.text),
            at=t.at,
            observed_actor=ObservedActor(id=f"user:{speaker}", name=t.speaker),
        )
        rows.append((t.thread_id.split("-s")[0], t.ref or "", item))
    return rows, data


@pytest.fixture(scope="module")
def locomo(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SQLiteEngine, dict[str, tuple[str, str]], list[dict[str, object]]]]:
    rows, data = _locomo()
    engine = SQLiteEngine(tmp_path_factory.mktemp("locomo") / "memory.db", synchronous="normal")
    items = [item for _, _, item in rows]
    for start in range(0, len(items), 100):
        engine.store_many(items[start : start + 100])
    engine.consolidate(BUILD)
    refs = {item.id: (sample, ref) for sample, ref, item in rows}
    yield engine, refs, data
    engine.close()


def test_a_dated_event_becomes_a_third_person_belief_with_its_date(locomo) -> None:  # type: ignore[no-untyped-def]
    engine, refs, _ = locomo
    hits = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="Caroline LGBTQ support group", limit=5))
    top = next(h for h in hits if any(refs[i] == ("conv-26", "D1:3") for i in h.derived_from))
    assert top.text.startswith("Caroline went to a LGBTQ support group on 7 May 2023")
    assert top.meta.namespace == Namespace.agent("caroline") and "belief" in top.meta.tags


def test_beliefs_cover_most_evidence_turns_of_the_questions(locomo) -> None:  # type: ignore[no-untyped-def]
    engine, refs, data = locomo
    covered = {
        refs[i] for h in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=1000)) for i in h.derived_from
    }
    evidence = [(s["sample_id"], e) for s in data for q in s["qa"] for e in parse_evidence(q.get("evidence", [])).ids]
    share = sum(1 for e in evidence if e in covered) / len(evidence)
    turns_share = len(covered) / len(refs)
    assert share >= 0.8 and share > turns_share + 0.2, (share, turns_share)


def test_building_session_by_session_equals_building_once(locomo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine, _, _ = locomo
    rows, _ = _locomo()
    first_sample = [item for sample, _, item in rows if sample == "conv-26"]
    with SQLiteEngine(tmp_path / "steps.db", synchronous="normal") as steps:
        for start in range(0, len(first_sample), 37):
            steps.store_many(first_sample[start : start + 37])
            steps.consolidate(BUILD)
        stepwise = {
            (h.id, h.text, h.confidence, h.derived_from)
            for h in steps.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=1000))
        }
    with SQLiteEngine(tmp_path / "once.db", synchronous="normal") as once:
        for start in range(0, len(first_sample), 100):
            once.store_many(first_sample[start : start + 100])
        once.consolidate(BUILD)
        whole = {
            (h.id, h.text, h.confidence, h.derived_from)
            for h in once.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=1000))
        }
    assert stepwise == whole and len(whole) > 100


def test_peps_give_their_title_and_opening_sentence(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "peps.db", synchronous="normal") as engine:
        docs = []
        for path in sorted((SHARED / "docs" / "peps").glob("*.rst")):
            meta = MemoryMeta(
                namespace="source:files", file_path=f"/peps/{path.name}", source=SourceRef(kind=SourceKind.FILE)
            )
            docs.append(Document.of(path.read_text(), meta))
        engine.store_many(docs)
        engine.consolidate(BUILD)
        texts = [h.text for h in engine.beliefs(BeliefsRequest(reach=Reach.exact("source:files"), limit=1000))]
    titles = sorted(t for t in texts if t.startswith("Document: "))
    assert len(titles) == len(docs)
    assert "Document: Style Guide for Python Code." in titles
    assert any(t.startswith("Style Guide for Python Code: This document gives coding conventions") for t in texts)
    assert not any(re.search(r"public domain|^\.\. |::$", t) for t in texts)
