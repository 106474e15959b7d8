"""LoCoMo evidence ids and evidence recall (pure).

A question's ``evidence`` lists dialog ids ``D<session>:<turn>`` (``D3:12`` = session 3, turn 12). A few are
malformed in the data (``"D8:6; D9:17"``, ``"D"``, ``"D:11:26"``; peers.md §3.1), so ids are found with a
regex rather than split, and what cannot be read is counted, not guessed.

Evidence recall of a retrieval = the share of a question's evidence turns present in what was retrieved
(LoCoMo ``task_eval/evaluation.py``, retrieval recall); a belief covers the turns it was derived from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EvidenceParse", "RecallTally", "covered_turns", "evidence_recall", "parse_evidence"]

_DIA_ID = re.compile(r"D(\d+):(\d+)")
_CLEAN = re.compile(r"^D\d+:\d+$")


@dataclass(frozen=True)
class EvidenceParse:
    """The readable evidence ids of one question, and how many strings needed repair or were unreadable.

    Attributes:
        ids: Canonical ids (``D3:12``), deduplicated, in order.
        repaired: Strings that were not one clean id but held readable ids (``"D8:6; D9:17"``).
        skipped: Strings with no readable id (``"D"``, ``"D:11:26"``).
    """

    ids: tuple[str, ...]
    repaired: int = 0
    skipped: int = 0


def parse_evidence(raw: object) -> EvidenceParse:
    """Read a question's evidence tolerantly (see the module docstring).

    Args:
        raw: A list of id strings, as in the data; a bare string (``"D1:1"``) is one entry, not a sequence of
            characters; None is no evidence; any other value is one entry (counted as skipped unless its text
            holds an id).
    """
    if raw is None:
        values: list[object] = []
    elif isinstance(raw, list | tuple):
        values = list(raw)
    else:
        values = [raw]
    ids: list[str] = []
    repaired = skipped = 0
    for value in values:
        text = str(value).strip()
        found = [f"D{int(s)}:{int(t)}" for s, t in _DIA_ID.findall(text)]
        if not found:
            skipped += 1
            continue
        if not _CLEAN.match(text):
            repaired += 1
        ids.extend(found)
    return EvidenceParse(ids=tuple(dict.fromkeys(ids)), repaired=repaired, skipped=skipped)


def evidence_recall(evidence: Sequence[str], retrieved: Iterable[str]) -> float:
    """The share of ``evidence`` present in ``retrieved`` (1.0 for no evidence is never asked: callers skip)."""
    if not evidence:
        raise ValueError("a question without evidence has no recall")
    got = set(retrieved)
    return sum(1 for e in evidence if e in got) / len(evidence)


@dataclass
class RecallTally:
    """Mean recall overall and per category, for one retrieval method.

    Attributes:
        method: The retrieval's name (``pack``, ``fetch@10``, ``bm25@10``).
        per_category: category → list of per-question recalls.
    """

    method: str
    per_category: dict[int, list[float]] = field(default_factory=dict)

    def add(self, category: int, recall: float) -> None:
        """Record one question's recall."""
        self.per_category.setdefault(category, []).append(recall)

    def mean(self, category: int | None = None) -> float:
        """Mean recall for one category, or over every question (NaN when none)."""
        values = self.per_category.get(category, []) if category is not None else self.all()
        return sum(values) / len(values) if values else float("nan")

    def all(self) -> list[float]:
        """Every recorded recall."""
        return [v for values in self.per_category.values() for v in values]

    def to_dict(self) -> dict[str, Any]:
        """``{method, overall, n, per_category: {c: {recall, n}}}``."""
        return {
            "method": self.method,
            "overall": self.mean(),
            "n": len(self.all()),
            "per_category": {
                str(c): {"recall": self.mean(c), "n": len(v)} for c, v in sorted(self.per_category.items())
            },
        }


def covered_turns(hit_ids: Iterable[str], refs: Mapping[str, str], derived: Mapping[str, Sequence[str]]) -> set[str]:
    """Dialog ids a retrieval holds: each item id mapped through ``refs``; a belief through its ``derived`` ids."""
    out: set[str] = set()
    for hit_id in hit_ids:
        if hit_id in refs:
            out.add(refs[hit_id])
        for source_id in derived.get(hit_id, ()):
            if source_id in refs:
                out.add(refs[source_id])
    return out
