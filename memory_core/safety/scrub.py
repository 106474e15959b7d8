"""The scrub pass: find credentials and personal identifiers in text and replace them (reference §6.2); pure.

``find`` normalises the text (``normalize``), runs every detector in the order of §6.2 (private-key blocks,
credential markers, credential shapes, checksum-gated PII) and keeps, where two findings overlap, the one found
first. A credential shape's token is also found glued after a ``-`` or ``_`` (``my-sk-…``: ``glued``), once the
credential passes have run. ``scrub`` replaces what ``find`` found in the original text, leaving every other
character as typed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from memory_core.safety.credentials import CREDENTIAL_DETECTORS
from memory_core.safety.detector import WINDOW_MARGIN, Detector, Policy
from memory_core.safety.glued import glued_spans
from memory_core.safety.normalize import Normalized, normalize, unwrapped
from memory_core.safety.pii import EMAIL, PII_DETECTORS

__all__ = ["DETECTORS", "Finding", "find", "scrub"]

DETECTORS: Final[tuple[Detector, ...]] = (*CREDENTIAL_DETECTORS, *PII_DETECTORS)
"""Every detector, in the order they run."""
WRAP_REACH: Final = 1200
"""How far past a vendor prefix a token wrapped over several lines is looked for, characters."""
_NEEDLES: Final = tuple(sorted({needle for detector in DETECTORS for needle in detector.needles}))
"""Every detector's needles, each looked for once a text (``_present``)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the pass found.

    Attributes:
        detector: The detector's name (``aws_access_key``, ``pii_card``).
        start / end: Its span in the original text, ``[start, end)``.
        replacement: What it becomes.
        redacted: False for what is detected but kept (emails under the default policy).
    """

    detector: str
    start: int
    end: int
    replacement: str
    redacted: bool = True


def _windows(
    cache: dict[re.Pattern[str], list[tuple[int, int]]], pattern: re.Pattern[str], text: str
) -> list[tuple[int, int]]:
    """The pattern's matches widened by ``WINDOW_MARGIN`` a side, overlapping ones merged (computed once a text)."""
    if pattern not in cache:
        merged: list[tuple[int, int]] = []
        for match in pattern.finditer(text):
            lo, hi = max(0, match.start() - WINDOW_MARGIN), min(len(text), match.end() + WINDOW_MARGIN)
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        cache[pattern] = merged
    return cache[pattern]


def find(text: str, policy: Policy | None = None) -> list[Finding]:
    """Everything the pass finds in ``text``, in text order; pure.

    Args:
        text: Any text.
        policy: The policy; None: ``Policy.default()`` (corroborated, emails kept).

    Returns:
        Non-overlapping findings, spans in the original text (hidden characters inside a finding included).
    """
    policy = policy or Policy.default()
    norm = normalize(text)
    found: list[Finding] = []
    _detect(norm, DETECTORS, policy, found)
    if "\n" in norm.text:  # a token a line break cut in two (a pasted key, a JWT wrapped at 76 columns)
        lowered = norm.text.lower()
        present = _present(lowered)
        wrappable = tuple(d for d in DETECTORS if d.wrappable and _may_run(d, present))
        needles = {n for d in wrappable for n in d.needles}
        for lo, hi in _around(lowered, needles):
            joined = unwrapped(norm, lo, hi)
            if joined is not None:
                _detect(joined, wrappable, policy, found, extend=True)
    found.sort(key=lambda f: f.start)
    return found


def _around(lowered: str, needles: set[str], before: int = 8, after: int = WRAP_REACH) -> list[tuple[int, int]]:
    """Windows from just before each needle to ``after`` characters past it, overlapping ones merged."""
    starts: list[int] = []
    for needle in needles:
        at = lowered.find(needle)
        while at != -1:
            starts.append(at)
            at = lowered.find(needle, at + 1)
    merged: list[tuple[int, int]] = []
    for at in sorted(starts):
        lo, hi = max(0, at - before), min(len(lowered), at + after)
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def _present(lowered: str) -> frozenset[str]:
    """The needles the lower-cased text holds (one scan each, however many detectors share the text)."""
    return frozenset(needle for needle in _NEEDLES if needle in lowered)


def _may_run(detector: Detector, present: frozenset[str]) -> bool:
    return not detector.needles or not present.isdisjoint(detector.needles)


def _detect(
    norm: Normalized,
    detectors: tuple[Detector, ...],
    policy: Policy,
    found: list[Finding],
    *,
    extend: bool = False,
) -> None:
    """Run ``detectors`` over ``norm`` and add what they find to ``found`` (original spans).

    A finding overlapping earlier ones is dropped; with ``extend`` (the pass over unwrapped lines), one that
    covers each of them and more (the whole of a token whose first line alone was found) replaces them.
    """
    for detector, start, end in _spans(norm.text, detectors, policy):
        if end <= start:
            continue
        o_start, o_end = norm.span(start, end)
        redacted = detector.pii_class != EMAIL or policy.redact_emails
        overlapping = [f for f in found if o_start < f.end and f.start < o_end]
        if overlapping:
            wider = (
                extend
                and redacted
                and all(
                    o_start <= f.start and f.end <= o_end and (f.start, f.end) != (o_start, o_end) for f in overlapping
                )
            )
            if not wider:
                continue
            found[:] = [f for f in found if f not in overlapping]
        found.append(Finding(detector.name, o_start, o_end, detector.replacement, redacted))


def _spans(text: str, detectors: tuple[Detector, ...], policy: Policy) -> Iterator[tuple[Detector, int, int]]:
    """Each detector's spans in ``text``, detector by detector (``_detect``).

    The credential detectors come first, in order; then their tokens glued after a ``-`` or ``_``
    (``glued.glued_spans``), so a ``key = value`` holding one (``password=hunter2-sk-…``) is redacted whole, not
    cut at the joint; then the personal-identifier detectors.
    """
    lowered = text.lower()
    needles = _present(lowered)
    windows: dict[re.Pattern[str], list[tuple[int, int]]] = {}
    present: dict[re.Pattern[str], bool] = {}
    glued: list[Detector] = []
    pending = True  # the glued tokens are still to be looked for
    for detector in detectors:
        if pending and detector.pii_class is not None:
            pending = False
            for shape in glued:
                yield from ((shape, lo, hi) for lo, hi in glued_spans(shape, text, lowered, needles))
        if not _may_run(detector, needles):
            continue
        if detector.prefilter is not None:
            if detector.prefilter not in present:
                present[detector.prefilter] = detector.prefilter.search(text) is not None
            if not present[detector.prefilter]:
                continue
        if detector.glued is not None:
            glued.append(detector)
        ranges = [(0, len(text))] if detector.windows is None else _windows(windows, detector.windows, text)
        for lo, hi in ranges:
            for start, end in detector.spans(text, policy, lo, hi):
                yield detector, start, end
    if pending:
        for shape in glued:
            yield from ((shape, lo, hi) for lo, hi in glued_spans(shape, text, lowered, needles))


def scrub(text: str, policy: Policy | None = None) -> str:
    """``text`` with every redacted finding replaced; the same string when nothing is found; pure.

    Args:
        text: Any text.
        policy: The policy; None: ``Policy.default()``.
    """
    findings = [f for f in find(text, policy) if f.redacted]
    if not findings:
        return text
    out: list[str] = []
    at = 0
    for finding in findings:
        out.append(text[at : finding.start])
        out.append(finding.replacement)
        at = finding.end
    out.append(text[at:])
    return "".join(out)
