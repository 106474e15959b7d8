"""Text normalisation before detection: hidden characters dropped, look-alike digits and letters folded to ASCII.

A secret typed with a zero-width space inside it, or with full-width or Arabic-Indic digits, must still be
found (reference §6.2: "Text is first normalised (zero-width characters, full-width and Arabic-Indic digits)").
Detection runs on the normalised text; ``Normalized.span`` maps a match back to the original text so only the
secret's own characters are replaced and everything else is kept as it was typed.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["HIDDEN", "Normalized", "normalize", "unwrapped"]

HIDDEN = frozenset("\u00ad\u180e\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff")
"""Characters dropped before detection: soft hyphen, Mongolian vowel separator, zero-width space/joiners, word
joiner, invisible operators, zero-width no-break space."""

_HIDDEN_RE = re.compile("[" + "".join(sorted(HIDDEN)) + "]")
_SPACES = "\u00a0\u2007\u202f\u3000"
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"


@lru_cache(maxsize=1)
def _fold_table() -> dict[int, int]:
    """One-to-one folds: every non-ASCII decimal digit of the BMP, full-width ASCII, odd spaces and dashes."""
    table: dict[int, int] = {}
    for code in range(0x80, 0x10000):
        digit = unicodedata.decimal(chr(code), None)
        if digit is not None:
            table[code] = ord("0") + digit
    for code in range(0xFF01, 0xFF5F):  # full-width ASCII block
        table[code] = code - 0xFEE0
    for ch in _SPACES:
        table[ord(ch)] = ord(" ")
    for ch in _DASHES:
        table[ord(ch)] = ord("-")
    return table


@lru_cache(maxsize=1)
def _folds() -> re.Pattern[str]:
    """A character class of everything ``_fold_table`` maps (a search is far cheaper than a translate)."""
    codes = sorted(_fold_table())
    ranges: list[tuple[int, int]] = []
    for code in codes:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges) + "]")


@dataclass(frozen=True, slots=True)
class Normalized:
    """Normalised text and the way back to the original.

    Attributes:
        text: The normalised text detectors read.
        origin: For each character of ``text``, its index in the original (None: the same index, nothing was
            dropped).
        original_length: Length of the original text.
    """

    text: str
    origin: tuple[int, ...] | None
    original_length: int

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the normalised span ``[start, end)`` (hidden characters inside it included)."""
        if self.origin is None:
            return start, end
        first = self.origin[start] if start < len(self.origin) else self.original_length
        last = self.origin[end - 1] + 1 if end > start else first
        return first, last


def normalize(text: str) -> Normalized:
    """Fold ``text`` for detection; pure.

    Hidden characters (``HIDDEN``) are dropped; every other character maps to exactly one character: non-ASCII
    decimal digits (full-width, Arabic-Indic, Devanagari, …) to ``0-9``, full-width ASCII to ASCII, no-break and
    ideographic spaces to a space, Unicode dashes and the minus sign to ``-``. ASCII text comes back as is.
    """
    if text.isascii():
        return Normalized(text, None, len(text))
    folded = text.translate(_fold_table()) if _folds().search(text) else text
    if _HIDDEN_RE.search(folded) is None:
        return Normalized(folded, None, len(text))
    kept = [i for i, ch in enumerate(folded) if ch not in HIDDEN]
    return Normalized("".join(folded[i] for i in kept), tuple(kept), len(text))


_WRAP = re.compile(r"(?<=[A-Za-z0-9_+/=.-]{8})\r?\n[ \t]*(?=[A-Za-z0-9_+/=.-]{8})")
"""A line break right after 8+ token characters and before 8+ more (indentation allowed): where a pasted token
was wrapped. A short word on the next line ("bye"), or a line ending in a space, is never joined to it."""


def unwrapped(norm: Normalized, start: int = 0, end: int | None = None) -> Normalized | None:
    """``norm`` with line breaks inside tokens removed, mapped back to the original; pure.

    A key pasted across two lines reads as one token. Only ``norm.text[start:end]`` is read (the result's text is
    that slice, unwrapped). None when no line break sits between two token characters there.
    """
    text = norm.text[start:end]
    if "\n" not in text:
        return None
    breaks = [(m.start(), m.end()) for m in _WRAP.finditer(text)]
    if not breaks:
        return None
    kept: list[int] = []
    last = 0
    for cut_from, cut_to in breaks:
        kept.extend(range(last, cut_from))
        last = cut_to
    kept.extend(range(last, len(text)))
    origin = tuple(start + i for i in kept) if norm.origin is None else tuple(norm.origin[start + i] for i in kept)
    return Normalized("".join(text[i] for i in kept), origin, norm.original_length)
