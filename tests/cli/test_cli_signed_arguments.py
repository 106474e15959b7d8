"""``signed_arguments``: a negative number where an argument stands reaches the command (``rollback -1``), while
options, their values and ``--`` keep their meaning (pure; ``memory_core.cli._common``)."""

from __future__ import annotations

import pytest

from memory_core.cli._common import NEGATIVE_NUMBER, signed_arguments

VALUES = {"--why": 1, "--engine": 1, "-e": 1, "--as-of": 1, "--pair": 2}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-1", "--why", "x"], ["--why", "x", "--", "-1"]),
        (["--why", "x", "-1"], ["--why", "x", "--", "-1"]),
        (["--why", "-1", "5"], ["--why", "-1", "5"]),  # an option's value stays its value
        (["-e", "sqlite:///m.db", "-2.5"], ["-e", "sqlite:///m.db", "--", "-2.5"]),
        (["-esqlite:///m.db", "-3"], ["-esqlite:///m.db", "--", "-3"]),  # a value joined to its short option
        (["--engine=-1", "-4"], ["--engine=-1", "--", "-4"]),
        (["a", "-1", "b", "--json", "c"], ["a", "--json", "--", "-1", "b", "c"]),  # arguments keep their order
        (["-1", "--", "-2", "--why"], ["--", "-1", "-2", "--why"]),  # after --, everything is an argument
        (["--", "-1"], ["--", "-1"]),
        (["--pair", "-1", "-2", "-3"], ["--pair", "-1", "-2", "--", "-3"]),
        (["-x", "--why", "y"], ["-x", "--why", "y"]),  # no negative number: unchanged (-x: Click refuses it)
        (["text", "--json"], ["text", "--json"]),
        (["-"], ["-"]),
    ],
)
def test_negative_numbers_in_argument_places_move_behind_double_dash(args: list[str], expected: list[str]) -> None:
    assert signed_arguments(args, VALUES) == expected


@pytest.mark.parametrize("token", ["-1", "-0", "-12.5", "-.5", "-1e3", "-2E-4", "-7."])
def test_negative_numbers(token: str) -> None:
    assert NEGATIVE_NUMBER.fullmatch(token)


@pytest.mark.parametrize("token", ["-x", "--1", "-1x", "-", "-e1", "1", "-1-2", "-١"])
def test_not_negative_numbers(token: str) -> None:
    assert not NEGATIVE_NUMBER.fullmatch(token)
