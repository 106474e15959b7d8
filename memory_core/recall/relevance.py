"""The relevance floor of ranked reads (pure; ``HolisticRecall.min_relevance``, a *memory-core* extension).

Unset (the contract's behaviour, reference §4.1) nothing is dropped. Set to a share ``s``, after the reads and
before the beliefs are folded, a hit or belief of a ranked read (a ``fetch``, including an answer's fallback)
is kept only when it clears two bars, each ``s`` times the best value among the ranked reads' hits and beliefs
that the pack does not exclude (``exclude_ids``, the thread window, a section's ``exclude_agent_id``: a turn
already in the prompt must not set a bar):

* **score**: ``hit.score ≥ s × best score`` *of its own ranking*: stored items against the best stored item,
  beliefs against the best belief (see "One scale per ranking" below);
* **coverage**: ``coverage(hit) ≥ s × best coverage``, where coverage is the share of the read's query terms
  (``query_terms``: the words that are not function words or conversational filler, stemmed, by the tokenizer
  the engines rank with, ``retrieval.terms``) found in the text the hit's bullet shows
  (``shown_text``). A read whose query has no such term has no coverage bar.

Why two bars. Scores alone do not separate: the SQLite engine's keyword relevance ``bm25 / (bm25 + 20)`` plus
the cosine's constant share compresses ratios (a passage with half the best hit's BM25 scores ~0.65 of it), and
BM25 rewards repeating one query word. On LoCoMo with the PEPs as brain the question "How often does Melanie go
to the beach with her kids?" scored its best turn 0.436 (beach, go, often, kids) and six passages 0.27-0.34
(0.63-0.78 of it) that hold only ``go`` and function words (``case ["go", direction]`` in pattern-matching
examples, "the Go team" in the GIL PEP); over 383 questions the Brain bullets shown (all unrelated to the
chat) matched mostly ``the, to, what, a, in, go, does, has, when``, and the evidence turns matched names and
topics. Coverage counts each content term once, so repetition and function words earn nothing, and it is read
on the shown text, so a long document whose matching words lie past its 600-character bullet does not pass on
words the reader never sees. Answer and latest sections are never filtered.

**Conversation turns clear the score bar only** (issue 14 §5: the pack must carry the evidence its fetch
finds). A turn that answers is often a reply sharing no word with the question ("Yeah, I play clarinet!" for
"What instruments does Melanie play?"; the question's words are in the turn before it), and the engine's
ranking already weighed that: the window of neighbouring turns in the lexical stage and late interaction with
the model (``engines.sqlite.rerank``). On LoCoMo dev with the PEP brain the pack held 66.5% of the evidence
where the engine's fetch@10 held 75.7%, and 43 of the 58 turns the pack lost were among the fetch's first five;
with turns clearing the score bar alone it holds 76.0% in 701 tokens (fetch@10 78.2%; with no coverage bar at
all, 74.5% in 965 tokens: the passages it lets in crowd turns out; ``docs/retrieval.md``). Documents and
beliefs keep it: it is what keeps pattern-matching passages out of a chat's pack.

**One scale per ranking.** A score bar compares scores, so it is drawn within one ranking. A read returns stored
items of one kind per ranking (turns, passages, learnings) and beliefs, ranked over the beliefs' own text
index, whose BM25 runs on short third-person sentences that repeat
the speaker's name ("Jon's dance moves get Jon pumped..."). On LoCoMo a question's best belief often scored
twice its best turn (0.37 against 0.18 for "What does Jon's dance make him?"), so a bar drawn from the beliefs
dropped every turn of the History section, the evidence among them. Each bar is therefore ``s`` times the best
score among the hits of its own kind of ranking: beliefs against beliefs, stored items against stored items,
and conversation turns against turns only. A turn is ranked with its window, its date and its speaker, a
passage is long and carries dates and names: "What did Caroline do in May 2023?" lifted PEP passages that
mention 2023 to 0.40 while the May turns scored 0.06, and a bar drawn from the passages emptied History.
Passages and learnings still face the best stored item, turns included: in a chat's pack they earn their place
against the conversation. The coverage bar is shared: coverage is the same measure for any text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from memory_core.meta import ItemKind, MemoryMeta
from memory_core.query import Hit
from memory_core.recall.bullets import MAX_BULLET_CHARS, bullet
from memory_core.recall.outcomes import Gathered, Read, excluded
from memory_core.recall.repeats import utterance_text
from memory_core.recall.types import HolisticRecall
from memory_core.retrieval.terms import term_set

__all__ = ["SHOWN_TERMS_CACHE", "Bar", "coverage", "floor", "query_terms", "shown_terms", "shown_text"]

SHOWN_TERMS_CACHE: Final = 8192
"""Shown texts whose terms are kept per process (*memory-core*, issue 12 "bounded sections": an item's derived
terms are computed once, not on every pack: stemming the shown text of every hit of every pack was 5% of a
``pre_turn``'s CPU on the demo's data)."""
_NO_META: Final = MemoryMeta()
_UNSEEN: Final = -1.0
"""A coverage no hit has (coverages are in [0, 1] or None): ``floor``'s marker for a hit not measured yet."""


@lru_cache(maxsize=256)
def query_terms(query: str | None) -> frozenset[str]:
    """The terms of ``query`` (``retrieval.terms.term_set``); empty for None."""
    return term_set(query) if query else frozenset()


def shown_text(hit: Hit) -> str:
    """The text of the hit a reader sees: its bullet, a conversation's without the roles and the date prefix.

    Returns:
        ``bullet(hit)`` (``Title: body``, at most 600 characters plus ``…``); for a conversation its turns'
        text (``repeats.utterance_text``) cut to 600 characters.
    """
    if hit.kind == ItemKind.CONVERSATION:
        return utterance_text(hit.text)[:MAX_BULLET_CHARS]
    return bullet(hit)


@lru_cache(maxsize=SHOWN_TERMS_CACHE)
def shown_terms(text: str) -> frozenset[str]:
    """``term_set(text)``, kept for the ``SHOWN_TERMS_CACHE`` most recent texts (a pure function, cached)."""
    return term_set(text)


@lru_cache(maxsize=SHOWN_TERMS_CACHE)
def _hit_terms(kind: ItemKind, text: str) -> frozenset[str]:
    """The terms of the shown text of a hit of ``kind`` and ``text``, kept per process.

    ``shown_text`` reads only a hit's kind and text (a conversation's date prefix is left out), so the terms of
    an item are derived once, not on every pack that shows it.
    """
    return shown_terms(shown_text(Hit.model_construct(id="", kind=kind, text=text, meta=_NO_META, score=0.0)))


def coverage(terms: frozenset[str], hit: Hit) -> float | None:
    """The share of ``terms`` in the hit's shown text, in [0, 1]; None when ``terms`` is empty."""
    if not terms:
        return None
    return len(terms & _hit_terms(hit.kind, hit.text)) / len(terms)


@dataclass(frozen=True, slots=True)
class Bar:
    """The two bars a ranked hit must clear: a score and a query coverage (0 when no read has query terms)."""

    score: float
    coverage: float

    def passes(self, hit: Hit, covered: float | None) -> bool:
        """True when ``hit.score`` and its coverage (None: no coverage bar) reach the bars."""
        return hit.score >= self.score and (covered is None or covered >= self.coverage)


def _turn(hit: Hit) -> bool:
    return hit.kind == ItemKind.CONVERSATION


def _barred(hit: Hit) -> bool:
    """Whether the coverage bar applies to the hit: every kind but a conversation turn (module docstring)."""
    return not _turn(hit)


def floor(request: HolisticRecall, gathered: Sequence[Gathered]) -> list[Gathered]:
    """Drop the ranked reads' hits and beliefs below either bar (see the module docstring).

    Args:
        request: The pack request; nothing is dropped when its ``min_relevance`` is unset.
        gathered: One outcome per section, in section order (beliefs not yet folded).

    Returns:
        The outcomes, ranked reads filtered (order kept), every other outcome as it was. Stored hits face a score
        bar drawn from the best stored hit (turns: from the best turn), beliefs one drawn from the best belief
        ("One scale per ranking").
    """
    share = request.min_relevance
    if share is None:
        return list(gathered)
    covered: dict[tuple[int, str], float | None] = {}
    stored = turns = beliefs_top = 0.0  # the best score of each ranking (module docstring)
    shares: list[float] = []
    for position, (section, outcome) in enumerate(zip(request.sections, gathered, strict=True)):
        if not (isinstance(outcome, Read) and outcome.ranked):
            continue
        terms = query_terms(outcome.query)
        for hits, belief in ((outcome.hits, False), (outcome.beliefs, True)):
            for hit in hits:  # one pass per hit, no helper calls: a pack's reads return ~90 hits and beliefs
                key = (position, hit.id)
                value = covered.get(key, _UNSEEN)
                if value is _UNSEEN:  # an id twice in one read is one item: the first occurrence's coverage
                    value = covered[key] = len(terms & _hit_terms(hit.kind, hit.text)) / len(terms) if terms else None
                if excluded(request, section, hit):
                    continue
                score = hit.score
                if belief:
                    beliefs_top = max(beliefs_top, score)
                else:
                    stored = max(stored, score)
                    if hit.kind == ItemKind.CONVERSATION:
                        turns = max(turns, score)
                if value is not None:
                    shares.append(value)
    best = {"stored": stored, "turn": turns, "belief": beliefs_top}
    if max(best.values()) <= 0.0:
        return list(gathered)
    bar_coverage = share * max(shares, default=0.0)
    bars = {ranking: Bar(share * top, bar_coverage) for ranking, top in best.items()}
    beliefs = bars["belief"]

    def kept(hit: Hit, position: int) -> bool:
        bar = bars["turn" if _turn(hit) else "stored"]
        return bar.passes(hit, covered[(position, hit.id)] if _barred(hit) else None)

    out: list[Gathered] = []
    for position, outcome in enumerate(gathered):
        if isinstance(outcome, Read) and outcome.ranked:
            outcome = Read(
                [h for h in outcome.hits if kept(h, position)],
                [b for b in outcome.beliefs if beliefs.passes(b, covered[(position, b.id)] if _barred(b) else None)],
                query=outcome.query,
            )
        out.append(outcome)
    return out
