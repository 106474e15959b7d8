"""Credential tokens glued after a hyphen or underscore (``my-sk-proj-…``, ``API_KEY_sk-…``, ``x_AKIA…``); pure.

A credential shape wants its token to start a word (``credentials._B``), so a token written right after a ``-`` or
``_`` (a word glued before it, or the parts of an id) is not found by the shape itself. This is the one place that
reads such a joint as a word boundary, for text (``scrub.find``) and ids alike (``ids.holds_credential``, which
calls ``find``).

The rule (docs/safety.md, pass 3, "Glued to a word"): a joint is a ``-`` or ``_`` right before one of a
glued detector's needles (its token prefix, ``sk-``, ``ghp_``, ``akia``, …) or before a match of its prefilter
(Mailgun ``key-``+hex, Twilio ``SK``+hex, a Telegram bot id). Joints are tried leftmost first, one at a time: the
detector's own pattern (its minimum length, its character classes, its end of token; only the guard wanting a word
start left out, ``Detector.glued``) must match starting right after the joint. So a token whose body itself holds
``-sk-`` is taken whole from its first joint, never cut at the second. Only the token is replaced: ``my-sk-proj-…``
→ ``my-[REDACTED]``.

The glued token must also look generated (``generated``: a run of 20+ letters and digits, or of 8+ mixing two of
lower case, upper case and digits; every vendor format has one). That keeps as typed an ordinary hyphenated name the
generic ``sk-`` shape would accept (``eu-sk-prod-eu-west-1-nodes``, ``x-sk-learn-pipeline-config``).
Personal-identifier detectors are never run this way: ids such as ``job-20240517-0001`` pass their checksums by
chance.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from memory_core.safety.detector import Detector, Span

__all__ = ["GLUED_REACH", "JOINTS", "generated", "glued_spans", "joints"]

JOINTS: Final = "-_"
"""The characters a token may be glued after."""
GLUED_REACH: Final = 1200
"""How far past a joint a glued token is read, characters (as far as a wrapped token is looked for, ``scrub``)."""
_SPACE: Final = re.compile(r"\s")
_ALNUM_RUN: Final = re.compile(r"[A-Za-z0-9]{8,}")
_LONG_RUN: Final = 20


def generated(token: str) -> bool:
    """Whether ``token`` holds a run of ASCII letters and digits that reads as generated, not as a word; pure.

    A run (between other characters) of 20+, or of 8+ mixing two of lower case, upper case and digits. Every
    issuer format of ``credentials.CREDENTIAL_DETECTORS`` has one in its random part (an AWS key id is one run of
    20); a name made of words and short numbers (``prod-eu-west-1-nodes``, ``learn-pipeline-config``) has none.
    """
    for run in _ALNUM_RUN.findall(token):
        classes = any(c.islower() for c in run) + any(c.isupper() for c in run) + any(c.isdigit() for c in run)
        if len(run) >= _LONG_RUN or classes >= 2:
            return True
    return False


def joints(detector: Detector, text: str, lowered: str, present: frozenset[str]) -> list[int]:
    """Positions of ``-``/``_`` in ``text`` right before ``detector``'s token prefix, ascending; pure.

    Args:
        detector: A detector with ``glued`` set.
        text: The normalised text.
        lowered: ``text.lower()`` (needles are lower-case).
        present: The needles ``lowered`` holds (only these are looked for).
    """
    found: set[int] = set()
    for needle in detector.needles:
        if needle not in present:
            continue
        at = lowered.find(needle, 1)
        while at != -1:
            if text[at - 1] in JOINTS:
                found.add(at - 1)
            at = lowered.find(needle, at + 1)
    if detector.prefilter is not None:
        found.update(m.start() - 1 for m in detector.prefilter.finditer(text, 1) if text[m.start() - 1] in JOINTS)
    return sorted(found)


def glued_spans(detector: Detector, text: str, lowered: str, present: frozenset[str]) -> Iterator[Span]:
    """The spans of ``detector``'s tokens glued after a joint in ``text`` (the joint itself not included); pure.

    At each joint (``joints``), leftmost first, the detector's token pattern (``Detector.glued``) is matched right
    after it, over at most ``GLUED_REACH`` characters; a match that passes ``generated`` is kept. A joint inside a
    token already matched (kept or not) is skipped, so the work stays linear in the text. A match that runs to the
    reach while its whitespace-free run goes on (a token longer than the reach) is kept to the end of that run.

    Args:
        detector: A detector whose ``glued`` pattern is set.
        text: The normalised text.
        lowered: ``text.lower()``.
        present: The needles ``lowered`` holds.

    Yields:
        ``(start, end)`` in ``text``, ascending, not overlapping.
    """
    pattern = detector.glued
    if pattern is None:
        return
    taken = 0
    for joint in joints(detector, text, lowered, present):
        if joint < taken:
            continue
        stop = min(len(text), joint + 1 + GLUED_REACH)
        match = pattern.match(text, joint + 1, stop)
        if match is None:
            continue
        end = match.end()
        if end == stop < len(text) and not text[stop].isspace():
            space = _SPACE.search(text, stop)
            end = len(text) if space is None else space.start()
        taken = end
        if generated(text[joint + 1 : end]):
            yield joint + 1, end
