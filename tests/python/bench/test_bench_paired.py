"""bench/gpu/paired.py: the ratios of timings taken in turns, and the verdict on a goal (issue 38).
Arithmetic only: no timing is taken here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "gpu"))

from paired import paired_ratios, verdict  # noqa: E402


def test_pairs_are_ratios_of_the_same_turn() -> None:
    # A drift that doubles both sides of the third pair leaves its ratio alone.
    summary = paired_ratios([10.0, 10.0, 20.0, 10.0, 10.0], [10.0, 9.0, 20.0, 11.0, 10.0])
    assert summary["ratios"] == [1.0, 10.0 / 9.0, 1.0, 10.0 / 11.0, 1.0]
    assert summary["median"] == 1.0 and summary["pairs"] == 5
    assert (summary["q1"], summary["q3"]) == (1.0, 1.0)
    assert (summary["low"], summary["high"]) == (10.0 / 11.0, 10.0 / 9.0)


def test_quartiles_interpolate_between_two_pairs() -> None:
    summary = paired_ratios([1.0, 1.0], [1.0, 0.5])
    assert (summary["q1"], summary["median"], summary["q3"]) == (1.25, 1.5, 1.75)


@pytest.mark.parametrize(("numerators", "denominators"), [([], []), ([1.0], [1.0, 2.0])])
def test_unpaired_turns_are_refused(numerators, denominators) -> None:
    with pytest.raises(ValueError, match="turns"):
        paired_ratios(numerators, denominators)


def test_verdict_needs_the_worse_quartile_to_meet_the_goal() -> None:
    around = {"median": 0.99, "q1": 0.97, "q3": 1.01}
    assert verdict(around, 0.98, higher_is_better=True) == "within noise (median meets it)"
    assert verdict({"median": 1.0, "q1": 0.99, "q3": 1.02}, 0.98, higher_is_better=True) == "met"
    assert verdict({"median": 0.9, "q1": 0.85, "q3": 0.95}, 0.98, higher_is_better=True) == "missed"
    # For a cost ratio (generated / PyTorch, goal <= 1.02) the worse side is the upper quartile.
    assert verdict({"median": 1.0, "q1": 0.99, "q3": 1.01}, 1.02, higher_is_better=False) == "met"
    assert verdict({"median": 1.03, "q1": 1.01, "q3": 1.05}, 1.02, higher_is_better=False) == "within noise (median misses it)"
    assert verdict({"median": 1.1, "q1": 1.05, "q3": 1.2}, 1.02, higher_is_better=False) == "missed"
