"""Relative dates resolved against the day a statement was made (pure).

``resolve("I went there yesterday", date(2023, 5, 8))`` gives ``("I went there on 7 May 2023", 2023-05-07)``.
Phrases read (case-insensitive): ``today``/``tonight``/``this morning``, ``yesterday``, ``the day before
yesterday``, ``tomorrow``, ``N days/weeks/months/years ago``, ``last/next week|weekend|month|year``,
``last <weekday>``, ``this weekend``, ``this month``, ``this year``. The written form follows LoCoMo's answers
(``7 May 2023``, ``the week before 9 June 2023``) so a belief reads the way a question is answered.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Final

__all__ = ["format_day", "resolve"]

_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS: Final = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "few": 3,
    "a few": 3,
}
_NUM = r"([0-9]{1,4}|a couple of|a couple|couple of|a few|few|an|a|one|two|three|four|five|six|seven|eight|nine|ten)"
_PATTERNS: Final = (
    ("dby", re.compile(r"\bthe day before yesterday\b", re.I)),
    ("yesterday", re.compile(r"\b(?:yesterday|last night)\b", re.I)),
    ("today", re.compile(r"\b(?:today|tonight|this morning|this afternoon|this evening|earlier today)\b", re.I)),
    ("tomorrow", re.compile(r"\btomorrow\b", re.I)),
    ("ago", re.compile(rf"\b{_NUM}\s+(day|week|month|year)s?\s+ago\b", re.I)),
    ("last_weekday", re.compile(rf"\blast\s+({'|'.join(_WEEKDAYS)})\b", re.I)),
    ("last_weekend", re.compile(r"\blast\s+weekend\b", re.I)),
    ("this_weekend", re.compile(r"\bthis\s+(?:past\s+)?weekend\b", re.I)),
    ("next_weekend", re.compile(r"\bnext\s+weekend\b", re.I)),
    ("last_week", re.compile(r"\blast\s+week\b", re.I)),
    ("next_week", re.compile(r"\bnext\s+week\b", re.I)),
    ("last_month", re.compile(r"\blast\s+month\b", re.I)),
    ("next_month", re.compile(r"\bnext\s+month\b", re.I)),
    ("this_month", re.compile(r"\bthis\s+month\b", re.I)),
    ("last_year", re.compile(r"\blast\s+year\b", re.I)),
    ("next_year", re.compile(r"\bnext\s+year\b", re.I)),
    ("this_year", re.compile(r"\bthis\s+year\b", re.I)),
)


def format_day(day: date) -> str:
    """``7 May 2023``."""
    return f"{day.day} {day:%B} {day.year}"


def _month_shift(day: date, months: int) -> date:
    index = day.year * 12 + (day.month - 1) + months
    return date(index // 12, index % 12 + 1, 1)


def _phrase(kind: str, m: re.Match[str], ref: date) -> tuple[str, date]:
    on = format_day(ref)
    if kind == "dby":
        d = ref - timedelta(days=2)
        return f"on {format_day(d)}", d
    if kind == "yesterday":
        d = ref - timedelta(days=1)
        return f"on {format_day(d)}", d
    if kind == "today":
        return f"on {on}", ref
    if kind == "tomorrow":
        d = ref + timedelta(days=1)
        return f"on {format_day(d)}", d
    if kind == "ago":
        raw = m.group(1).lower()
        n = int(raw) if raw.isdigit() else _NUMBERS[raw]
        unit = m.group(2).lower()
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n
        plural = "s" if n != 1 else ""
        return f"{m.group(1)} {unit}{plural} before {on}", ref - timedelta(days=days)
    if kind == "last_weekday":
        target = _WEEKDAYS.index(m.group(1).lower())
        back = (ref.weekday() - target) % 7 or 7
        d = ref - timedelta(days=back)
        return f"on {d:%A}, {format_day(d)}", d
    if kind in {"last_weekend", "this_weekend"}:
        back = (ref.weekday() - 5) % 7
        if kind == "last_weekend" or ref.weekday() < 5:
            back = back or 7
        d = ref - timedelta(days=back)
        return f"the weekend of {format_day(d)}", d
    if kind == "next_weekend":
        d = ref + timedelta(days=(5 - ref.weekday()) % 7 or 7)
        return f"the weekend of {format_day(d)}", d
    if kind == "last_week":
        return f"the week before {on}", ref - timedelta(days=7)
    if kind == "next_week":
        return f"the week after {on}", ref + timedelta(days=7)
    if kind in {"last_month", "next_month", "this_month"}:
        d = _month_shift(ref, {"last_month": -1, "next_month": 1, "this_month": 0}[kind])
        return f"in {d:%B} {d.year}", d
    year = ref.year + {"last_year": -1, "next_year": 1, "this_year": 0}[kind]
    return f"in {year}", date(year, 1, 1)


def resolve(text: str, ref: date | None) -> tuple[str, date | None]:
    """Replace the first relative date phrase in ``text`` by the absolute one ``ref`` implies.

    Args:
        text: A sentence.
        ref: The day the sentence was said (None: nothing is resolved).

    Returns:
        The rewritten text and the day it refers to (None when no phrase was found).
    """
    if ref is None:
        return text, None
    best: tuple[int, str, re.Match[str]] | None = None
    for kind, pattern in _PATTERNS:
        m = pattern.search(text)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), kind, m)
    if best is None:
        return text, None
    _, kind, m = best
    try:
        phrase, day = _phrase(kind, m, ref)
    except (OverflowError, ValueError):  # the day falls outside year 1..9999: leave the sentence as said
        return text, None
    return text[: m.start()] + phrase + text[m.end() :], day
