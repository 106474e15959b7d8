"""``Detector``: one named pattern with its gate, and the spans it finds; pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["WINDOW_MARGIN", "Detector", "Finder", "Policy", "Span", "Stage", "near", "regex_spans"]

WINDOW_MARGIN = 3
"""Characters kept on each side of a window (a sign, a bracket, a check letter, and what follows it)."""

Span = tuple[int, int]
"""``[start, end)`` in the normalised text."""


class Stage(StrEnum):
    """The four passes of reference §6.2, in the order they run."""

    PRIVATE_KEY = "private_key"
    MARKER = "marker"
    SHAPE = "shape"
    PII = "pii"


Finder = Callable[[str, "Policy", int, int], Iterator[Span]]
"""A detector's finder: (normalised text, policy, start, end) → the spans to replace within ``text[start:end]``
(read as ``re.finditer``'s ``pos``/``endpos``: look-behinds still see what precedes ``start``)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """How hard the scrub pass looks (reference §6.2 ``Policy::corroborated``).

    Attributes:
        corroborated: A bare run of digits (no separators) counts as a card, CPF, CNPJ, CUIT, SSN or Aadhaar only
            with corroboration: an IIN prefix or a keyword within 64 characters for cards, the class's keyword
            for the others. False: the checksum alone decides for cards; keywords still gate the others.
        redact_emails: Replace email addresses with ``[REDACTED_PII_EMAIL]``. Off by default, as in the reference:
            an email is detected (``find`` reports it) but kept, since an address is what a user asks an agent to
            remember and grants no access by itself.
    """

    corroborated: bool = True
    redact_emails: bool = False

    @classmethod
    def default(cls) -> Policy:
        """The host policy: corroborated, emails kept."""
        return cls()

    @classmethod
    def strict(cls) -> Policy:
        """Checksum-only cards and redacted emails."""
        return cls(corroborated=False, redact_emails=True)


@dataclass(frozen=True, slots=True)
class Detector:
    """A named detector.

    Attributes:
        name: Stable name (``aws_access_key``, ``pii_card``); findings carry it.
        stage: Which pass of §6.2 it belongs to (passes run in ``Stage`` order; an earlier finding wins where
            two overlap).
        replacement: What a finding becomes (``[REDACTED]``, ``[REDACTED_PRIVATE_KEY]``,
            ``[REDACTED_PII_CARD]``).
        spans: The finder: normalised text → the spans to replace (a credential's prefix is kept outside them).
        pii_class: The PII class (``CARD``, ``IBAN``, …) for PII detectors, else None.
        needles: A prefilter: the finder runs only when the lower-cased text holds one of these (empty: always).
        prefilter: Another: the finder runs only when this pattern is found in the text.
        windows: Run the finder only around this pattern's matches (each widened by ``WINDOW_MARGIN`` characters
            a side), not over the whole text: for classes made of one run of digits and separators.
        wrappable: Also look for it with line breaks between token characters removed (a vendor token with a
            distinctive prefix, which a line wrap may have cut in two; never prose-like patterns).
        glued: The token's own pattern without the guard that wants it to start a word, matched right after a
            ``-`` or ``_`` (``my-sk-…``, ``x_AKIA…``: ``glued.glued_spans``); set for the credential shapes that
            want a word start, never for personal identifiers. None: not looked for glued.
    """

    name: str
    stage: Stage
    replacement: str
    spans: Finder
    pii_class: str | None = None
    needles: tuple[str, ...] = ()
    prefilter: re.Pattern[str] | None = None
    windows: re.Pattern[str] | None = None
    wrappable: bool = False
    glued: re.Pattern[str] | None = None


def regex_spans(
    pattern: re.Pattern[str], group: str | int = 0, gate: Callable[[re.Match[str], str, Policy], bool] | None = None
) -> Finder:
    """A finder yielding ``group``'s span of every match of ``pattern`` that passes ``gate(match, text, policy)``."""

    def spans(text: str, policy: Policy, start: int, end: int) -> Iterator[Span]:
        for match in pattern.finditer(text, start, end):
            if match.group(group) is None or (gate is not None and not gate(match, text, policy)):
                continue
            yield match.span(group)

    return spans


def near(text: str, start: int, end: int, keywords: re.Pattern[str], window: int = 64) -> bool:
    """Whether ``keywords`` occurs within ``window`` characters before ``start`` or after ``end``."""
    return keywords.search(text, max(0, start - window), min(len(text), end + window)) is not None
