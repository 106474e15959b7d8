"""Brain retrieval on real documents: does a pre-turn pack show the passage that answers a question about the PEPs?

The questions (``tests/fixtures/brain/pep_questions.json``) were written by reading the shared PEPs; each names
the PEP that answers it and a phrase of the answer. The brain is ingested as the product ingests it (converted,
split into passages, belief builds run), beside a LoCoMo conversation so the pack's sections compete as they do
for a real agent, and every question is asked as that agent's pre-turn read. The floor is the measured result
(17 of 17 with passages; 1 of 17 with whole documents, whose bullets showed their PEP headers).
"""

from __future__ import annotations

from pathlib import Path

from _data import DATA_DIR, require_data

from memory_core.engines.sqlite import SQLiteEngine
from memory_core.eval.brain import (
    answered_share,
    check_pack,
    ingest_brain,
    load_brain,
    load_questions,
    pep_number,
    run_brain_check,
)
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.recall.types import ContextPack, SectionHits
from memory_core.replay import ConversationFile, load_conversations
from memory_core.replay.driver import Replayer

SHARED = DATA_DIR
QUESTIONS = Path(__file__).parent / "fixtures" / "brain" / "pep_questions.json"
ANSWERED_FLOOR = 16
"""Of the 17 questions; 17 measured (a margin of one for ranking ties that move with the replay's clock)."""


def _needs_shared() -> None:
    require_data()  # skips on a laptop without the data, fails when CI=true


def test_pep_numbers_come_from_file_names() -> None:
    assert pep_number("/x/peps/pep-0008.rst") == 8 and pep_number("pep-0723.md") == 723
    assert pep_number("/x/notes.rst") is None and pep_number(None) is None


def test_a_pack_answers_only_with_a_shown_bullet_of_the_right_pep() -> None:
    (question,) = [q for q in load_questions(QUESTIONS) if q.pep == 703 and q.phrase == "PYTHONGIL"]
    pack = ContextPack(sections=(SectionHits(heading="Brain", hits=()),))
    assert not check_pack(pack, question).answered and not check_pack(pack, question).found


def test_the_brain_section_shows_the_answering_passage(tmp_path: Path) -> None:
    _needs_shared()
    questions = load_questions(QUESTIONS)
    assert len(questions) == 17
    layout = MemoryLayout("ws:brain-check")
    with SQLiteEngine(tmp_path / "memory.db", synchronous="normal") as engine:
        files = load_brain(SHARED / "docs" / "peps")
        assert files.documents > 1000  # passages, not the 10 files
        ingest_brain(engine, layout, files)
        data = load_conversations(SHARED / "locomo" / "locomo_dev.json", "locomo", ["conv-26"])
        turns = [t for t in data.turns if t.thread_id.endswith(("-s1", "-s2", "-s3"))]
        assert turns
        jobs: list[object] = []
        Replayer(engine, layout, jobs.append).replay(ConversationFile(format="locomo", turns=turns))
        runner = BackgroundRunner(engine, layout)
        for job in jobs:
            runner.run(job)  # type: ignore[arg-type]
        answers = run_brain_check(engine, layout, "caroline", questions)
    missed = [a.question.question for a in answers if not a.answered]
    assert sum(a.answered for a in answers) >= ANSWERED_FLOOR, missed
    assert answered_share(answers) >= ANSWERED_FLOOR / 17
    assert all(a.found for a in answers)
