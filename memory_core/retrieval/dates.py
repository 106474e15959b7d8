"""Dates a query names, and which items were observed on them (pure; the date signal of ``fusion.fuse``).

A question that names a day or a month ("What painting did Melanie show to Caroline on October 13, 2023?",
"What did Maria donate in December 2023?", "When did Melanie go camping in June?") is about what was said then.
The date is read from the text, in English, in these forms (case-insensitive, ordinals allowed):

* a day: ``13 October 2023``, ``13 October, 2023``, ``October 13, 2023``, ``October 13th 2023``: the items
  observed that day (UTC);
* a month of a year: ``October 2023``, ``October, 2023``: the items observed that month;
* a month alone, after ``in``, ``on``, ``during``, ``of``, ``since``, ``before``, ``after``, ``by``, ``early``,
  ``mid`` or ``late`` (``in June``): the items observed in that month of any year. A bare month word is not
  read ("May I ask…"), nor a day without its year.

When a query names a day, its months are not read again as months. Days are UTC days: items store their
``observed_at`` in UTC, and a host that logs local times as naive stamps (as LoCoMo's replay does) stores those
wall-clock days. The signal only reorders the candidates the ranking found (``fusion.DATE_BOOST``); it never
filters, as a host's explicit time hint (``FetchRequest.refers_to``) does not either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["NamedDates", "named_dates"]

_MONTHS: Final = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH: Final = "(" + "|".join(_MONTHS) + ")"
_ORD: Final = r"(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR: Final = re.compile(rf"\b(\d{{1,2}}){_ORD}\s+{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_DAY_YEAR: Final = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}}){_ORD},?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_YEAR: Final = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_ALONE: Final = re.compile(
    rf"\b(?:in|on|during|of|since|before|after|by|early|mid|late)\s+{_MONTH}\b(?!\s+\d)", re.IGNORECASE
)
_US: Final = 1_000_000


def _month(name: str) -> int:
    return _MONTHS.index(name.lower()) + 1


def _us(year: int, month: int, day: int) -> int:
    return int(datetime(year, month, day, tzinfo=UTC).timestamp()) * _US


def _next_month(year: int, month: int) -> int:
    return _us(year + 1, 1, 1) if month == 12 else _us(year, month + 1, 1)


@dataclass(frozen=True)
class NamedDates:
    """The dates a query names.

    Attributes:
        spans: ``[start, end)`` UTC spans in µs since the epoch: each named day or month of a year.
        months: Months (1-12) named without a year: any year's.
    """

    spans: tuple[tuple[int, int], ...] = ()
    months: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        """True when the query names any date."""
        return bool(self.spans or self.months)

    def covers(self, when_us: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of ``when_us`` (observation times, µs since the epoch, UTC) fall on a named date."""
        when = np.asarray(when_us, dtype=np.int64)
        out = np.zeros(len(when), dtype=bool)
        for start, end in self.spans:
            out |= (when >= start) & (when < end)
        if self.months and len(when):
            months = (when.astype("datetime64[us]").astype("datetime64[M]").astype(np.int64) % 12) + 1
            out |= np.isin(months, sorted(self.months))
        return out


def named_dates(query: str) -> NamedDates:
    """The days and months ``query`` names (see the module docstring); empty when it names none."""
    days: list[tuple[int, int, int]] = []
    for found in _DAY_MONTH_YEAR.finditer(query):
        days.append((int(found[3]), _month(found[2]), int(found[1])))
    for found in _MONTH_DAY_YEAR.finditer(query):
        days.append((int(found[3]), _month(found[1]), int(found[2])))
    spans: list[tuple[int, int]] = []
    for year, month, day in days:
        try:
            start = _us(year, month, day)
        except ValueError:  # "31 February 2023" names no day
            continue
        spans.append((start, start + 86_400 * _US))
    if days:
        return NamedDates(spans=tuple(spans))
    for found in _MONTH_YEAR.finditer(query):
        year, month = int(found[2]), _month(found[1])
        if 1 <= year <= 9998:
            spans.append((_us(year, month, 1), _next_month(year, month)))
    if spans:
        return NamedDates(spans=tuple(spans))
    return NamedDates(months=frozenset(_month(found[1]) for found in _MONTH_ALONE.finditer(query)))
