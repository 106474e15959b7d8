"""The LoCoMo evaluation: tolerant evidence ids, recall, the BM25 baseline, and an end-to-end run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from memory_core.errors import InvalidRequest
from memory_core.eval.baseline import Bm25Baseline
from memory_core.eval.evidence import RecallTally, covered_turns, evidence_recall, parse_evidence
from memory_core.eval.locomo import asking_agent, pack_turns, run_locomo_eval
from memory_core.eval.questions import read_questions, sample_questions
from memory_core.meta import ItemKind, MemoryMeta
from memory_core.query import Hit
from memory_core.recall.types import ContextPack, SectionHits


def test_malformed_evidence_is_repaired_or_counted_never_guessed() -> None:
    parsed = parse_evidence(["D1:3", "D8:6; D9:17", "D", "D:11:26", "D10:02", "D1:3"])
    assert parsed.ids == ("D1:3", "D8:6", "D9:17", "D10:2")
    assert parsed.repaired == 1
    assert parsed.skipped == 2


def test_bare_string_evidence_is_one_id_not_a_sequence_of_characters() -> None:
    assert parse_evidence("D1:1") == parse_evidence(["D1:1"])
    assert parse_evidence("D1:1").ids == ("D1:1",)
    assert parse_evidence(None).ids == () and parse_evidence(None).skipped == 0
    assert parse_evidence(7) == parse_evidence(["7"])  # one unreadable entry, counted
    assert parse_evidence(7).skipped == 1


def test_malformed_questions_are_skipped_and_counted_by_reason_never_raised() -> None:
    qa = [
        {"question": "Where did Ann move?", "evidence": ["D1:1"], "category": 4, "answer": "Lisbon"},
        {"evidence": ["D1:2"], "category": 1},  # no question: a KeyError before
        {"question": "  ", "evidence": ["D1:2"], "category": 1},
        {"question": "Category as text?", "evidence": ["D1:2"], "category": "1"},  # dropped silently before
        {"question": "Category as a flag?", "evidence": ["D1:2"], "category": True},
        {"question": "Category 9?", "evidence": ["D1:2"], "category": 9},
        {"question": "No evidence?", "evidence": ["D"], "category": 2},
        {"question": "Bare string evidence?", "evidence": "D1:3", "category": 2},
        {"question": "Adversarial", "evidence": ["D1:1"], "category": 5},
        "not an object",
    ]
    read = read_questions(qa)
    assert [(q.index, q.category, q.text, q.evidence.ids, q.answer) for q in read.questions] == [
        (0, 4, "Where did Ann move?", ("D1:1",), "Lisbon"),
        (7, 2, "Bare string evidence?", ("D1:3",), None),
    ]
    assert dict(read.skipped) == {
        "question missing or blank": 2,
        "category is not an integer": 2,
        "category is not one of 1-5": 1,
        "no readable evidence": 1,
        "not a JSON object": 1,
    }
    assert read.left_out == 1 and read.evidence_skipped == 1 and read.evidence_repaired == 0


def test_the_question_sample_spreads_over_categories_middle_first() -> None:
    qa = [{"question": f"q{i}", "evidence": [f"D1:{i}"], "category": c} for i, c in enumerate([1, 1, 1, 2, 4, 4])]
    questions = read_questions(qa).questions
    assert [q.text for q in sample_questions(questions, 4)] == ["q1", "q3", "q5", "q2"]
    assert [q.text for q in sample_questions(questions, 10)] == ["q1", "q3", "q5", "q2", "q4", "q0"]
    assert sample_questions(questions, 0) == []


def _hit(item_id: str, kind: ItemKind, derived: tuple[str, ...] = ()) -> Hit:
    return Hit(id=item_id, kind=kind, text=item_id, meta=MemoryMeta(), derived_from=derived)


def test_pack_turns_count_the_turns_a_packed_belief_was_derived_from() -> None:
    refs = {"turn-a": "D1:1", "turn-b": "D1:2", "turn-c": "D1:3"}
    belief = _hit("belief-x", ItemKind.LEARNING, ("turn-b", "turn-c", "not-a-turn"))
    pack = ContextPack(
        markdown="- x",
        refs=("belief-x", "turn-a"),
        sections=(
            SectionHits(heading="Beliefs", hits=(belief,)),
            SectionHits(heading="History", hits=(_hit("turn-a", ItemKind.CONVERSATION),)),
        ),
    )
    assert pack_turns(pack, refs) == {"D1:1", "D1:2", "D1:3"}
    only_belief = pack.model_copy(update={"refs": ("belief-x",)})
    assert pack_turns(only_belief, refs) == {"D1:2", "D1:3"}


def test_recall_is_the_share_of_evidence_present() -> None:
    assert evidence_recall(["D1:1", "D1:2"], ["D1:2", "D9:9"]) == 0.5
    with pytest.raises(ValueError):
        evidence_recall([], ["D1:1"])


def test_a_belief_covers_the_turns_it_was_derived_from() -> None:
    refs = {"item-a": "D1:1", "item-b": "D1:2"}
    assert covered_turns(["belief-x", "item-a"], refs, {"belief-x": ("item-b",)}) == {"D1:1", "D1:2"}


def test_tally_means_per_category() -> None:
    tally = RecallTally("pack")
    tally.add(1, 1.0)
    tally.add(1, 0.0)
    tally.add(2, 1.0)
    assert tally.mean(1) == 0.5 and tally.mean() == pytest.approx(2 / 3)
    assert math.isnan(tally.mean(3))
    assert tally.to_dict()["per_category"]["1"] == {"recall": 0.5, "n": 2}


def test_bm25_ranks_the_matching_turn_first() -> None:
    bm25 = Bm25Baseline([("D1:1", "I adopted a cat"), ("D1:2", "the weather is nice"), ("D1:3", "my cat is Luna")])
    assert bm25.top("what is the cat called, Luna?", 1) == ["D1:3"]
    assert len(bm25.top("anything", 10)) == 3


def test_questions_are_asked_of_the_speaker_they_name() -> None:
    assert asking_agent("When did Melanie paint a sunrise?", ["Caroline", "Melanie"]) == "melanie"
    assert asking_agent("What happened?", ["Caroline", "Melanie"]) == "caroline"


def _mini_sample() -> dict[str, Any]:
    return {
        "sample_id": "mini",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Luna last week."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "I am training for the Berlin marathon."},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "Good luck with the training!"},
            ],
        },
        "qa": [
            {"question": "What is the name of Ann's cat?", "answer": "Luna", "evidence": ["D1:1"], "category": 4},
            {"question": "Which marathon is Bo training for?", "answer": "Berlin", "evidence": ["D1:2"], "category": 1},
            {"question": "Unanswerable?", "evidence": ["D"], "category": 2},
            {"question": "Adversarial", "evidence": ["D1:1"], "category": 5},
        ],
    }


def test_an_end_to_end_run_scores_every_question_with_evidence(tmp_path: Path) -> None:
    path = tmp_path / "mini.json"
    path.write_text(json.dumps([_mini_sample()]))
    result = run_locomo_eval(path, engine_url="reference://", ks=(1, 2))
    assert len(result.questions) == 2
    assert result.skipped_questions == 1 and result.evidence_skipped == 1
    assert result.skip_reasons == {"no readable evidence": 1} and result.left_out == 1
    assert set(result.tallies) == {"pack", "bm25@pack", "fetch@1", "fetch@2", "bm25@1", "bm25@2"}
    assert result.tallies["pack"].mean() == 1.0  # a three-turn conversation fits in any pack
    assert result.tallies["bm25@2"].mean() == 1.0
    assert result.to_dict()["methods"][0]["method"] == "pack"


def test_recall_is_also_tallied_per_sample(tmp_path: Path) -> None:
    other = _mini_sample()
    other["sample_id"] = "other"
    other["qa"] = other["qa"][:1]
    path = tmp_path / "two.json"
    path.write_text(json.dumps([_mini_sample(), other]))
    result = run_locomo_eval(path, engine_url="reference://", ks=(1,))
    per_sample = result.per_sample()
    assert list(per_sample) == ["mini", "other"]
    assert [len(per_sample[s]["pack"].all()) for s in per_sample] == [2, 1]
    assert per_sample["other"]["bm25@1"].per_category == {4: [1.0]}
    assert result.to_dict()["per_sample"]["mini"]["pack"]["n"] == 2


def test_a_run_with_a_brain_ingests_its_passages_into_every_sample(tmp_path: Path) -> None:
    path = tmp_path / "mini.json"
    path.write_text(json.dumps([_mini_sample()]))
    brain = tmp_path / "handbook"
    brain.mkdir()
    text = " ".join(f"What is the name of the cat of Ann, in note {j}?" for j in range(20))
    sections = "\n\n".join(f"## Pets {i}\n\n{text}" for i in range(4))
    (brain / "pets.md").write_text(f"# Pets\n\n{sections}\n", encoding="utf-8")
    result = run_locomo_eval(path, ks=(1,), brain=brain)  # a fresh SQLite file per sample
    assert result.brain == str(brain) and result.brain_items > 1  # passages, not one document
    assert result.to_dict()["brain_items"] == result.brain_items
    assert len(result.questions) == 2
    assert any(q.brain_bullets > 0 for q in result.questions)  # "cat" questions meet the pet passages
    with pytest.raises(InvalidRequest):
        run_locomo_eval(path, ks=(1,), brain=tmp_path / "missing")
