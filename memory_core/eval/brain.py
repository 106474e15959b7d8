"""The brain in evaluations: a folder ingested as the product ingests it, and a retrieval check on it.

``load_brain(folder)`` converts every file below ``folder`` and splits it into passages (``iter_documents`` and
``split_document``, the two steps ``memory-core ingest`` plans with), one ``IngestBrain`` job per file, stored
in ``brain_collection("files", <folder name>)``; ``ingest_brain(engine, layout, files)`` runs those jobs and
the belief builds they return, as a worker would.

The *brain check* asks questions whose answers sit in known documents (``tests/fixtures/brain``: a PEP number
and a phrase of the answer for each) and looks at what a pack shows: a question is **answered** when a bullet
of the pack's Brain section that survived the budget comes from the expected file (``meta.file_path`` named
``pep-<number>.rst``) and holds the phrase (case-insensitive, whitespace collapsed, in the bullet's text as
rendered: what the model reads, not the stored item); **found** when such a bullet comes from the expected
file at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memory_core.documents import Converted, Failed, iter_documents, split_document
from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.jobs import BackgroundJob, IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.policy import BRAIN_HEADING, RecallPolicy
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.namespace import sanitize_segment_id
from memory_core.recall import bullet
from memory_core.recall.types import ContextPack

__all__ = [
    "BRAIN_SOURCE",
    "BrainAnswer",
    "BrainFiles",
    "BrainQuestion",
    "answered_share",
    "brain_bullets",
    "check_pack",
    "ingest_brain",
    "load_brain",
    "load_questions",
    "pep_number",
    "run_brain_check",
]

BRAIN_SOURCE = "files"
"""The brain source evaluation documents are stored under (as ``memory-core ingest`` and the demo do)."""
_PEP_FILE = re.compile(r"pep-0*(\d+)\.[a-z]+$")


@dataclass(frozen=True)
class BrainFiles:
    """A folder converted for the brain: one job per file (its passages), in walk order.

    Attributes:
        folder: The folder.
        jobs: ``IngestBrain`` jobs, one per converted file, in ``brain_collection(files, <folder name>)``.
    """

    folder: Path
    jobs: tuple[IngestBrain, ...]

    @property
    def documents(self) -> int:
        """Passages over all jobs."""
        return sum(len(job.documents) for job in self.jobs)


def load_brain(folder: Path | str) -> BrainFiles:
    """Convert every supported file below ``folder`` and split each into passages (see the module docstring).

    Raises:
        InvalidRequest: ``field="brain"``: the folder holds no convertible file, or a file failed to convert.
    """
    root = Path(folder)
    collection = sanitize_segment_id(root.resolve().name or "brain")
    jobs: list[IngestBrain] = []
    for result in iter_documents([root], source=BRAIN_SOURCE):
        if isinstance(result, Failed):
            raise InvalidRequest(result.error.message, field="brain")
        if isinstance(result, Converted):
            jobs.append(IngestBrain(documents=tuple(split_document(result.document)), collection=collection))
    if not jobs:
        raise InvalidRequest(f"{root}: no document to ingest", field="brain")
    return BrainFiles(folder=root, jobs=tuple(jobs))


def ingest_brain(engine: MemoryEngine, layout: MemoryLayout, files: BrainFiles) -> int:
    """Run ``files``' ingest jobs, then each distinct belief build they returned; how many jobs ran."""
    runner = BackgroundRunner(engine, layout)
    builds: dict[str, BackgroundJob] = {}
    for job in files.jobs:
        for follow in runner.run(job).follow_ups:
            builds.setdefault(follow.to_json(), follow)
    for build in builds.values():
        runner.run(build)
    return len(files.jobs) + len(builds)


def brain_bullets(pack: ContextPack) -> int:
    """How many bullets of the pack's Brain section survived the budget (cited in ``pack.refs``)."""
    refs = set(pack.refs)
    return sum(1 for s in pack.sections if s.heading == BRAIN_HEADING for hit in s.hits if hit.id in refs)


@dataclass(frozen=True)
class BrainQuestion:
    """A question, the PEP that answers it, and a phrase of the answer."""

    question: str
    pep: int
    phrase: str


def load_questions(path: Path | str) -> list[BrainQuestion]:
    """``{"questions": [{"question", "pep", "phrase"}, …]}`` from a JSON file.

    Raises:
        InvalidRequest: ``field="questions"``: an unreadable file or a malformed entry.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))["questions"]
        return [BrainQuestion(str(q["question"]), int(q["pep"]), str(q["phrase"])) for q in raw]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest(f"{path}: not a brain question file ({exc})", field="questions") from None


def pep_number(file_path: str | None) -> int | None:
    """The PEP number of a file named ``pep-0008.rst`` (any extension), else None."""
    if not file_path:
        return None
    found = _PEP_FILE.search(file_path)
    return int(found.group(1)) if found else None


def _squash(text: str) -> str:
    return " ".join(text.split()).lower()


@dataclass(frozen=True)
class BrainAnswer:
    """What one pack showed for one question.

    Attributes:
        question: The question.
        answered: A shown Brain bullet of the expected PEP holds the phrase.
        found: A shown Brain bullet comes from the expected PEP.
        bullets: Brain bullets shown.
        tokens: The pack's tokens.
    """

    question: BrainQuestion
    answered: bool
    found: bool
    bullets: int
    tokens: int


def check_pack(pack: ContextPack, question: BrainQuestion) -> BrainAnswer:
    """Whether ``pack``'s shown Brain bullets answer ``question`` (see the module docstring)."""
    refs = set(pack.refs)
    shown = [hit for s in pack.sections if s.heading == BRAIN_HEADING for hit in s.hits if hit.id in refs]
    right = [hit for hit in shown if pep_number(hit.meta.file_path) == question.pep]
    phrase = _squash(question.phrase)
    answered = any(phrase in _squash(bullet(hit)) for hit in right)
    return BrainAnswer(question, answered, bool(right), len(shown), pack.tokens)


def run_brain_check(
    engine: MemoryEngine,
    layout: MemoryLayout,
    agent_id: str,
    questions: Iterable[BrainQuestion],
    policy: RecallPolicy | None = None,
) -> list[BrainAnswer]:
    """Ask each question as ``agent_id``'s pre-turn read (``AgentMemory.recall``) and check its pack."""
    agent = AgentMemory(engine, layout, agent_id).with_policy(policy or RecallPolicy())
    return [check_pack(agent.recall(q.question), q) for q in questions]


def answered_share(answers: Sequence[BrainAnswer]) -> float:
    """The share of ``answers`` answered (0 for none)."""
    return sum(a.answered for a in answers) / len(answers) if answers else 0.0
