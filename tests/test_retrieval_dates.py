"""The date signal: dates a query names (``retrieval.dates``) and how the fused ranking uses them."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from memory_core.engines.sqlite.rerank import reorder
from memory_core.engines.sqlite.vectors import Stored
from memory_core.retrieval.dates import NamedDates, named_dates
from memory_core.retrieval.fusion import fuse


def _us(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp()) * 1_000_000


@pytest.mark.parametrize(
    "query",
    [
        "What painting did Melanie show to Caroline on October 13, 2023?",
        "What did John do on 13 October, 2023?",
        "What happened on October 13th 2023?",
        "what happened on 13th october 2023",
    ],
)
def test_a_named_day_covers_that_utc_day_only(query: str) -> None:
    dates = named_dates(query)
    when = np.array([_us(2023, 10, 13, 0, 0), _us(2023, 10, 13, 23, 59), _us(2023, 10, 14), _us(2023, 10, 12, 23)])
    assert dates and dates.covers(when).tolist() == [True, True, False, False]


def test_a_named_month_covers_the_month_of_that_year_or_of_any_year() -> None:
    when = np.array([_us(2023, 12, 31, 23), _us(2024, 1, 1), _us(2022, 12, 5), _us(2023, 6, 2), _us(2021, 6, 30)])
    assert named_dates("What did Maria donate in December 2023?").covers(when).tolist() == [
        True,
        False,
        False,
        False,
        False,
    ]
    assert named_dates("When did Melanie go camping in June?").covers(when).tolist() == [
        False,
        False,
        False,
        True,
        True,
    ]


@pytest.mark.parametrize(
    "query", ["May I ask what you painted?", "What happened on March 5?", "What did she say?", "On 31 February 2023?"]
)
def test_text_that_names_no_readable_date_names_none(query: str) -> None:
    dates = named_dates(query)
    assert not dates and not dates.covers(np.array([_us(2023, 5, 1), _us(2023, 3, 5)])).any()


def test_a_named_day_is_not_read_again_as_its_month() -> None:
    dates = named_dates("What did Jon say on 1 February, 2023 about February 2023?")
    assert dates == NamedDates(spans=((_us(2023, 2, 1), _us(2023, 2, 2)),))


def test_fuse_lifts_a_candidate_observed_on_a_named_date() -> None:
    n = 3
    lexical = np.arange(1, n + 1)
    none = np.full((n, 2), -1.0, dtype=np.float32)
    off = np.zeros(n, dtype=bool)
    flat = np.ones(n)
    assert np.argsort(-fuse(lexical, none, none, off, flat, off)).tolist() == [0, 1, 2]
    dated = np.array([False, False, True])
    assert np.argsort(-fuse(lexical, none, none, off, flat, off, None, dated)).tolist() == [2, 0, 1]


def test_reorder_moves_the_turn_said_on_the_named_day_ahead() -> None:
    # two turns the model scores alike; the lexical stage puts the one from May first, the question names October
    dims = 4
    token = np.eye(dims, dtype=np.float32)[:1]
    may, october, later = _us(2023, 5, 8, 13, 56), _us(2023, 10, 13, 10, 31), _us(2030, 1, 1)  # recency: alike
    stored = {1: Stored(token, None, None, may, 0.5), 2: Stored(token, None, None, october, 0.5)}
    ranked = [(1, 0.40), (2, 0.30)]
    plain = reorder(ranked, stored, "What painting did she show?", token, now_us=later)
    named = reorder(ranked, stored, "What painting did she show on October 13, 2023?", token, now_us=later)
    assert [s for s, _ in plain] == [1, 2]
    assert [s for s, _ in named] == [2, 1]
    assert [v for _, v in named] == [0.40, 0.40]  # absolute scores, the best at or below each place (envelope)
