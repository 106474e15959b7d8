"""LoCoMo question objects read tolerantly, and a spread sample of them for display (pure).

A sample's ``qa`` is a list of ``{question, answer, evidence, category}`` objects (Maharana et al., ACL 2024).
Real files are not always clean, so each question is read on its own: one that cannot be scored is skipped
and counted under its reason, never guessed at and never allowed to stop the run:

* not a JSON object; ``question`` missing, not text or blank;
* ``category`` not an integer (JSON ``"1"`` and ``true`` included: a category is a number in the data) or
  not one of LoCoMo's five;
* no readable evidence id (``evidence.parse_evidence``; a bare string ``"D1:1"`` is read as one id).

Category 5 (adversarial: no evidence to find) is valid but left out of scoring, as almost every report on
LoCoMo does (peers.md §3.1); it is counted apart from the skipped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_core.eval.evidence import EvidenceParse, parse_evidence

__all__ = ["ALL_CATEGORIES", "EVAL_CATEGORIES", "Question", "QuestionSet", "read_questions", "sample_questions"]

EVAL_CATEGORIES = (1, 2, 3, 4)
"""LoCoMo categories with evidence to retrieve (5 is adversarial; peers.md §3.1)."""
ALL_CATEGORIES = (1, 2, 3, 4, 5)
"""LoCoMo's five question categories."""


@dataclass(frozen=True)
class Question:
    """One scorable question.

    Attributes:
        index: Its position in the sample's ``qa`` list (0-based).
        category: 1-4.
        text: The question.
        evidence: Its readable evidence ids (never empty) and the strings repaired or skipped to get them.
        answer: The gold answer as text (None when the file has none).
    """

    index: int
    category: int
    text: str
    evidence: EvidenceParse
    answer: str | None = None


@dataclass
class QuestionSet:
    """What ``read_questions`` kept, skipped and left out.

    Attributes:
        questions: Scorable questions (categories 1-4 with readable evidence), in file order.
        skipped: Reason → questions not scored for it (see the module docstring).
        left_out: Valid questions of a category outside ``EVAL_CATEGORIES`` (category 5).
        evidence_repaired: Evidence strings of the kept questions that needed repair (``"D8:6; D9:17"``).
        evidence_skipped: Evidence strings with no readable id, over the questions that reached the evidence.
    """

    questions: list[Question] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    left_out: int = 0
    evidence_repaired: int = 0
    evidence_skipped: int = 0


def _category(value: Any) -> int | str:
    """The category, or the reason it cannot be used."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "category is not an integer"
    if value not in ALL_CATEGORIES:
        return "category is not one of 1-5"
    return value


def read_questions(qa: Sequence[Any], categories: Sequence[int] = EVAL_CATEGORIES) -> QuestionSet:
    """Read a sample's ``qa`` list (see the module docstring); nothing raises for a malformed question."""
    out = QuestionSet()
    for index, raw in enumerate(qa):
        if not isinstance(raw, dict):
            out.skipped["not a JSON object"] += 1
            continue
        text = raw.get("question")
        if not isinstance(text, str) or not text.strip():
            out.skipped["question missing or blank"] += 1
            continue
        category = _category(raw.get("category"))
        if isinstance(category, str):
            out.skipped[category] += 1
            continue
        if category not in categories:
            out.left_out += 1
            continue
        evidence = parse_evidence(raw.get("evidence"))
        out.evidence_skipped += evidence.skipped
        if not evidence.ids:
            out.skipped["no readable evidence"] += 1
            continue
        out.evidence_repaired += evidence.repaired
        answer = raw.get("answer")
        out.questions.append(Question(index, category, text.strip(), evidence, None if answer is None else str(answer)))
    return out


def sample_questions(
    questions: Sequence[Question], n: int, categories: Sequence[int] = EVAL_CATEGORIES
) -> list[Question]:
    """Up to ``n`` questions spread over ``categories``, for display.

    Round after round, one per category in turn, each the middle one of those left in that category (file
    order within a category), so a short sample still shows every category, not only the file's first questions.
    """
    by_category = {c: [q for q in questions if q.category == c] for c in categories}
    picked: list[Question] = []
    while len(picked) < n and any(by_category.values()):
        for c in categories:
            left = by_category[c]
            if left and len(picked) < n:
                picked.append(left.pop(len(left) // 2))
    return picked
