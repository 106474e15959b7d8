"""``memory-core eval locomo``: evidence recall of packs and top-k fetches on LoCoMo, beside BM25.

For each sample (conversation) the file is replayed through ``AgentMemory`` on a fresh layout root
(``ws:<sample>``), the jobs ``post_turn`` returned are run, and then for every question of categories 1-4:

* ``pack``: the pack ``pre_turn`` would inject (``AgentMemory.recall``: the same sections and budget, without
  logging the question), asked of the agent of the speaker the question names (else the first speaker);
* ``fetch@k``: the engine's top-k hybrid fetch over the sample's conversations, k distinct turns;
* ``bm25@k``: the BM25 baseline over the same turns (``Bm25Baseline``), computed in the same run;
* ``bm25@pack``: BM25 given as many turns as the pack holds, the like-for-like baseline for the pack.

Each question's hybrid fetch is timed beside a keyword fetch of the same question (the lexical stage alone), in
the same run, so ``fetch_ms`` gives the model's query-time cost as a ratio (wall times on a shared machine mean
little alone).

Recall is the share of a question's evidence turns present (``evidence.py``); a belief in the pack covers
the turns it was derived from. Questions are read by ``questions.read_questions``: a malformed one (no
question text, a category that is not an integer, no readable evidence) is skipped and counted under its
reason; category 5 (adversarial, no evidence to find) is left out, as almost every report on LoCoMo does
(peers.md §3.1).

After the replay and its jobs, an engine that embeds in the background (``embed_backlog``, SQLite) is brought
up to date, as workers that have caught up leave it: questions are asked of a store whose items are embedded.

With ``brain`` (``--brain DIR``), the folder's documents are also ingested into each sample's engine before
the replay, the way the product does it (``eval.brain.load_brain``: converted, split into passages, stored by
``IngestBrain`` jobs, and the belief builds those jobs return run too). A real host has a shared brain beside
its conversations, and a pack's Brain section (ranked above the agent's history) competes with the evidence
for the budget; ``brain_bullets`` counts the Brain bullets each pack kept.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_core.engine import MemoryEngine
from memory_core.engines import open_engine
from memory_core.eval.baseline import Bm25Baseline
from memory_core.eval.brain import BrainFiles, brain_bullets, ingest_brain, load_brain
from memory_core.eval.evidence import RecallTally, covered_turns, evidence_recall
from memory_core.eval.questions import EVAL_CATEGORIES, read_questions
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.policy import RecallPolicy
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Reach
from memory_core.query import FetchMode, FetchRequest
from memory_core.recall.types import ContextPack
from memory_core.replay.driver import Replayer, agent_id_for
from memory_core.replay.formats import ConversationFile, load_conversations
from memory_core.timing import percentile

__all__ = [
    "EVAL_CATEGORIES",
    "EvalResult",
    "QuestionResult",
    "asking_agent",
    "pack_turns",
    "percentiles",
    "run_locomo_eval",
]

DEFAULT_KS = (5, 10, 20)
"""Top-k sizes the issue asks for."""


@dataclass
class QuestionResult:
    """One question's retrievals: evidence ids and the turns each method held."""

    sample: str
    category: int
    question: str
    evidence: tuple[str, ...]
    pack_turns: tuple[str, ...]
    pack_tokens: int
    recalls: dict[str, float]
    brain_bullets: int = 0


@dataclass
class EvalResult:
    """The whole evaluation: one tally per method, per-question rows, and what was skipped.

    ``skipped_questions`` is the number of questions not scored for a fault of theirs, ``skip_reasons`` the
    same split by reason; ``left_out`` counts the valid questions of category 5, which are not scored.
    """

    engine: str
    budget_tokens: int
    ks: tuple[int, ...]
    tallies: dict[str, RecallTally] = field(default_factory=dict)
    questions: list[QuestionResult] = field(default_factory=list)
    skipped_questions: int = 0
    skip_reasons: dict[str, int] = field(default_factory=dict)
    left_out: int = 0
    evidence_repaired: int = 0
    evidence_skipped: int = 0
    turns: int = 0
    items: int = 0
    brain: str | None = None
    brain_items: int = 0
    fetch_ms: dict[str, list[float]] = field(default_factory=lambda: {"hybrid": [], "keyword": []})

    def methods(self) -> list[str]:
        """Method names in display order."""
        return list(self.tallies)

    def per_sample(self) -> dict[str, dict[str, RecallTally]]:
        """Sample id → method → its tally over that sample's questions (samples in run order).

        A change to retrieval should hold on each conversation, not only on their mean: the per-sample view is
        the leave-one-conversation-out check the evaluation's readers make.
        """
        out: dict[str, dict[str, RecallTally]] = {}
        for q in self.questions:
            tallies = out.setdefault(q.sample, {name: RecallTally(name) for name in self.tallies})
            for name, value in q.recalls.items():
                if name in tallies:
                    tallies[name].add(q.category, value)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary with every question."""
        return {
            "engine": self.engine,
            "budget_tokens": self.budget_tokens,
            "ks": list(self.ks),
            "turns": self.turns,
            "items": self.items,
            "brain": self.brain,
            "brain_items": self.brain_items,
            "skipped_questions": self.skipped_questions,
            "skip_reasons": dict(sorted(self.skip_reasons.items())),
            "left_out_category_5": self.left_out,
            "evidence_strings_repaired": self.evidence_repaired,
            "evidence_strings_skipped": self.evidence_skipped,
            "methods": [t.to_dict() for t in self.tallies.values()],
            "per_sample": {
                sample: {name: t.to_dict() for name, t in tallies.items()}
                for sample, tallies in self.per_sample().items()
            },
            "fetch_ms": {mode: percentiles(times) for mode, times in self.fetch_ms.items()},
            "questions": [q.__dict__ for q in self.questions],
        }


def percentiles(times: Sequence[float]) -> dict[str, float | int]:
    """``{n, p50, p99}`` of timings in ms (0 when there are none)."""
    return {
        "n": len(times),
        "p50": percentile(times, 50) if times else 0.0,
        "p99": percentile(times, 99) if times else 0.0,
    }


def pack_turns(pack: ContextPack, refs: dict[str, str]) -> set[str]:
    """Dialog turns a pack holds: its cited items, and the turns its beliefs were derived from."""
    derived = {hit.id: hit.derived_from for section in pack.sections for hit in section.hits if hit.derived_from}
    return covered_turns(pack.refs, refs, derived)


def asking_agent(question: str, speakers: Sequence[str]) -> str:
    """The agent a question is asked of: the first speaker whose first name it mentions, else the first speaker."""
    for speaker in speakers:
        first = speaker.split()[0]
        if re.search(rf"\b{re.escape(first)}\b", question, flags=re.IGNORECASE):
            return agent_id_for(speaker)
    return agent_id_for(speakers[0])


def _top_turns(
    engine: MemoryEngine,
    question: str,
    flt: MetaFilter,
    refs: dict[str, str],
    k: int,
    mode: FetchMode | None = None,
    took_ms: list[float] | None = None,
) -> list[str]:
    mode = mode or engine.descriptor().preferred_mode()
    if mode is None:
        return []
    start = time.perf_counter()
    page = engine.fetch(FetchRequest(query=question, mode=mode, filter=flt, limit=min(1000, k * 4)))
    if took_ms is not None:
        took_ms.append(1000 * (time.perf_counter() - start))
    out: list[str] = []
    for hit in page.hits:
        turn = refs.get(hit.id)
        if turn is not None and turn not in out:
            out.append(turn)
        if len(out) == k:
            break
    return out


def _engine_for(url: str | None, workdir: Path, sample: str) -> MemoryEngine:
    if url is None:
        return open_engine(f"sqlite:///{workdir / sample / 'memory.db'}")
    return open_engine(url)


def run_locomo_eval(
    path: Path | str | ConversationFile,
    *,
    engine_url: str | None = None,
    samples: Iterable[str] | None = None,
    budget_tokens: int = 1200,
    ks: Sequence[int] = DEFAULT_KS,
    on_question: Callable[[QuestionResult], None] | None = None,
    on_sample: Callable[[str, int], None] | None = None,
    brain: Path | str | BrainFiles | None = None,
) -> EvalResult:
    """Replay each sample, then measure evidence recall per question (see the module docstring).

    Args:
        path: A LoCoMo JSON file, or one already read (``load_conversations(path, "locomo")``).
        engine_url: The engine to use; None opens a fresh SQLite file per sample in a temporary folder.
        samples: Sample ids to keep (all when None).
        budget_tokens: The pack budget, tokens of 4 characters.
        ks: The top-k sizes.
        on_question: Progress callback per question.
        on_sample: Progress callback per sample: (sample id, its number of questions).
        brain: A folder of documents ingested into each sample's brain before its replay, or one already read
            (``load_brain``); None: no brain.

    Returns:
        The tallies per method, per question rows, and the skipped counts.

    Raises:
        InvalidRequest: an unreadable file, an unknown sample, or a brain folder that cannot be converted.
    """
    data = path if isinstance(path, ConversationFile) else load_conversations(path, "locomo", samples)
    ks = tuple(sorted(set(ks)))
    files = brain if isinstance(brain, BrainFiles) or brain is None else load_brain(brain)
    result = EvalResult(engine=engine_url or "sqlite (fresh file per sample)", budget_tokens=budget_tokens, ks=ks)
    if files is not None:
        result.brain, result.brain_items = str(files.folder), files.documents
    names = ["pack", "bm25@pack", *(f"fetch@{k}" for k in ks), *(f"bm25@{k}" for k in ks)]
    result.tallies = {n: RecallTally(n) for n in names}
    policy = RecallPolicy(budget_tokens=budget_tokens)
    with tempfile.TemporaryDirectory(prefix="memory-core-eval-") as tmp:
        for sample in data.samples:
            prefix = f"{sample}-s"
            turns = [t for t in data.turns if t.thread_id.startswith(prefix)]
            one = ConversationFile(format="locomo", turns=turns, speakers=list(dict.fromkeys(t.speaker for t in turns)))
            engine = _engine_for(engine_url, Path(tmp), sample)
            try:
                _eval_sample(
                    engine, sample, one, data.qa.get(sample, []), policy, ks, result, on_question, on_sample, files
                )
            finally:
                engine.close()
    return result


def _eval_sample(
    engine: MemoryEngine,
    sample: str,
    conv: ConversationFile,
    qa: list[dict[str, Any]],
    policy: RecallPolicy,
    ks: tuple[int, ...],
    result: EvalResult,
    on_question: Callable[[QuestionResult], None] | None,
    on_sample: Callable[[str, int], None] | None,
    brain: BrainFiles | None = None,
) -> None:
    layout = MemoryLayout(f"ws:{agent_id_for(sample)}")
    runner = BackgroundRunner(engine, layout)
    if brain is not None:
        ingest_brain(engine, layout, brain)
    jobs: list[Any] = []
    replayer = Replayer(engine, layout, jobs.append, policy=policy)
    report = replayer.replay(conv)
    for job in {j.to_json(): j for j in jobs}.values():
        runner.run(job)
    embed = getattr(engine, "embed_backlog", None)
    if callable(embed):  # the workers caught up: everything stored is embedded (builds embed a bounded batch)
        embed()
    result.turns += report.turns
    result.items += len(report.refs)
    bm25 = Bm25Baseline([(t.ref or "", t.text) for t in conv.turns if t.ref])
    conversations = MetaFilter(reach=Reach.subtree(layout.root), kinds=(ItemKind.CONVERSATION,))
    read = read_questions(qa)
    result.evidence_repaired += read.evidence_repaired
    result.evidence_skipped += read.evidence_skipped
    result.left_out += read.left_out
    for reason, count in read.skipped.items():
        result.skip_reasons[reason] = result.skip_reasons.get(reason, 0) + count
        result.skipped_questions += count
    if on_sample is not None:
        on_sample(sample, len(read.questions))
    for q in read.questions:
        parsed, question, category = q.evidence, q.text, q.category
        pack = replayer.agent(asking_agent(question, conv.speakers)).recall(question)
        held = pack_turns(pack, report.refs)
        recalls = {"pack": evidence_recall(parsed.ids, held)}
        recalls["bm25@pack"] = evidence_recall(parsed.ids, bm25.top(question, max(1, len(held))))
        top = _top_turns(engine, question, conversations, report.refs, max(ks), took_ms=result.fetch_ms["hybrid"])
        if FetchMode.KEYWORD in engine.descriptor().fetch_modes:  # the lexical stage alone: the query-cost baseline
            _top_turns(
                engine, question, conversations, report.refs, max(ks), FetchMode.KEYWORD, result.fetch_ms["keyword"]
            )
        ranked = bm25.top(question, max(ks))
        for k in ks:
            recalls[f"fetch@{k}"] = evidence_recall(parsed.ids, top[:k])
            recalls[f"bm25@{k}"] = evidence_recall(parsed.ids, ranked[:k])
        for name, value in recalls.items():
            result.tallies[name].add(category, value)
        row = QuestionResult(
            sample, category, question, parsed.ids, tuple(sorted(held)), pack.tokens, recalls, brain_bullets(pack)
        )
        result.questions.append(row)
        if on_question is not None:
            on_question(row)
