"""tests/python/rotation.py: the bounds of Note [tests by rotation] hold for every sequence of
landings that add 1..MAX_STEP commits each (a longest-path search over the indices, not a sample),
and a run reports the cases it left out.
"""
from __future__ import annotations

import math

import pytest

import rotation
from rotation import MAX_STEP, window, windows

# (cases, per_run): test_deploy_aoti (8, 1), test_deploy_models (4, 1), test_export_models (32, 4),
# test_export_corpus (200, 24); and shapes whose windows wrap (per_run not dividing the cases), or
# take everything.
SHAPES = [(8, 1), (4, 1), (32, 4), (200, 24), (2, 1), (3, 1), (5, 2), (7, 3), (6, 4), (3, 5)]


def taken(count: int, per_run: int, case: int, length: int) -> list[bool]:
    """Whether the run of index i takes `case`, for i in 0..length-1."""
    return [case in window(i, count, per_run) for i in range(length)]


def search_length(count: int, per_run: int) -> int:
    """Three periods of the rule (block b starts at b x per_run mod count): a sequence starting in
    the first that ran to the end of the range would exceed every bound checked."""
    return 3 * MAX_STEP * (count // math.gcd(count, per_run))


def longest_run_without(takes: list[bool]) -> int:
    """The most consecutive landings, each 1..MAX_STEP commits after the one before, that all leave
    the case out, starting in the first third of the range (a longest path: runs[i] is the longest
    such sequence starting at index i)."""
    runs = [0] * (len(takes) + MAX_STEP)
    for i in range(len(takes) - 1, -1, -1):
        runs[i] = 0 if takes[i] else 1 + max(runs[i + 1:i + 1 + MAX_STEP])
        if i + MAX_STEP >= len(takes) and not takes[i]:
            runs[i] = len(takes)  # the range ended before the case ran: no bound
    return max(runs[:len(takes) // 3])


def widest_gap(takes: list[bool]) -> int:
    """The most the index can move between two landings that take the case with none taking it
    between them (farthest[i]: the farthest index taking it that landings from i can reach first)."""
    end = len(takes)
    farthest = [end * 2] * (end + MAX_STEP)
    for i in range(end - 1 - MAX_STEP, -1, -1):
        farthest[i] = max(j if takes[j] else farthest[j] for j in range(i + 1, i + 1 + MAX_STEP))
    return max(farthest[i] - i for i in range(end // 3) if takes[i])


@pytest.mark.parametrize("count,per_run", SHAPES)
def test_every_case_runs_within_the_bound_for_every_step_up_to_max_step(count: int, per_run: int) -> None:
    w = windows(count, per_run)
    length = search_length(count, per_run)
    for case in range(count):
        takes = taken(count, per_run, case, length)
        landings = longest_run_without(takes)
        assert landings <= (w - 1) * MAX_STEP, f"case {case} of {count} left out for {landings} landings"
        gap = widest_gap(takes)
        assert gap <= (w + 1) * MAX_STEP - 1, f"case {case} of {count}: the index moved by {gap} between its runs"
        if count % per_run == 0 and w > 1:  # the bounds are reached: no slack in the Note's numbers
            assert (landings, gap) == ((w - 1) * MAX_STEP, (w + 1) * MAX_STEP - 1)


@pytest.mark.parametrize("count,per_run", SHAPES)
@pytest.mark.parametrize("step", [1, 2, 3, 4, 6, 8, 16, MAX_STEP - 1, MAX_STEP])
def test_landings_of_one_step_take_every_case_in_turn(count: int, per_run: int, step: int) -> None:
    # Landings of `step` commits each, from every start in one period: (W - 1) x MAX_STEP + 1 of
    # them take every case. The index mod W, the rule before, failed this for steps sharing a
    # factor with W (a step of 2 and two windows: half the cases never ran).
    bound = (windows(count, per_run) - 1) * MAX_STEP + 1
    for start in range(search_length(count, per_run) // 3):
        seen = set()
        for landing in range(bound):
            seen.update(window(start + landing * step, count, per_run))
        assert seen == set(range(count)), f"from index {start}, step {step}: never {set(range(count)) - seen}"


def test_a_step_beyond_max_step_can_leave_cases_out() -> None:
    # Why the bound needs MAX_STEP (Note [tests by rotation]): landings of W x MAX_STEP commits
    # each stay in one window.
    count, per_run = 8, 1
    step = windows(count, per_run) * MAX_STEP
    assert {window(landing * step, count, per_run)[0] for landing in range(100)} == {0}


def test_a_run_takes_its_window_and_reports_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    monkeypatch.delenv("AUTOCASTGEN_ALL_CASES", raising=False)
    monkeypatch.setattr(rotation, "REPORT", [])
    monkeypatch.setenv("AUTOCASTGEN_ROTATION_INDEX", str(2 * MAX_STEP + 5))  # block 2: the third case
    assert rotation.rotating(cases, 1, always=[("a", 1)]) == [("a", 1), ("c", 3)]
    assert rotation.REPORT == [f"rotation: {__name__} left out 2 of 4 cases at index {2 * MAX_STEP + 5} (block 2): "
                               "b-2, d-4 (AUTOCASTGEN_ALL_CASES=1 runs them)"]
    monkeypatch.setenv("AUTOCASTGEN_ROTATION_INDEX", str(3 * MAX_STEP - 1))  # the same block
    assert rotation.rotating(cases, 1) == [("c", 3)]
    monkeypatch.setenv("AUTOCASTGEN_ALL_CASES", "1")
    monkeypatch.setattr(rotation, "REPORT", [])
    assert rotation.rotating(cases, 1) == cases
    monkeypatch.delenv("AUTOCASTGEN_ALL_CASES")
    monkeypatch.delenv("AUTOCASTGEN_ROTATION_INDEX")
    assert rotation.rotating(cases, 1) == cases  # run by hand: every case
    assert rotation.REPORT == []


# scripts/test's parts (rotation.test_command_parts), with the real lists' lengths: three other
# installed releases, eight header-checked ones, eleven second releases of the pip test's wheel
# (after 2.3, which is only ever the release outside it).
OTHERS = ["2.4.1", "2.7.1", "2.11.0"]
HEADERS = ["2.5.1", "2.6.0", "2.8.0", "2.9.1", "2.10.0", "2.12.1", "2.13.0", "2.14.1"]
PIP = ["2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1"]


def parts_of_the_test_command() -> list[tuple[str, str, int]]:
    """(part, value, period in blocks): every preset, release and check a run can take, and how many
    blocks its turns repeat after (the bound is one block less than that, MAX_STEP landings each)."""
    cases = [("sanitizers", preset, len(rotation.TURNS)) for preset in ("asan", "asan-torch", "tsan")]
    cases += [("full_builds", release, 2 * len(OTHERS)) for release in OTHERS]
    cases += [("header_checks", release, len(HEADERS) // rotation.HEADER_CHECKS_PER_RUN) for release in HEADERS]
    cases += [("pip", release, 2 * (len(PIP) - 1)) for release in PIP[1:]]  # PIP[0]: only ever outside
    cases += [("long_tests", name, len(rotation.TURNS)) for group in rotation.LONG_TESTS for name in group]
    return cases


@pytest.mark.parametrize("part,value,period", parts_of_the_test_command())
def test_every_part_of_the_test_command_runs_within_the_bound_for_every_step(part: str, value: str,
                                                                              period: int) -> None:
    length = 3 * MAX_STEP * period
    if part == "pip":  # the wheel's second release (the first of the two; the second is outside it)
        takes = [rotation.test_command_parts(i, OTHERS, HEADERS, PIP)["pip"][:1] == [value] for i in range(length)]
    else:
        takes = [value in rotation.test_command_parts(i, OTHERS, HEADERS, PIP)[part] for i in range(length)]
    landings = longest_run_without(takes)
    assert landings == (period - 1) * MAX_STEP, f"{part} {value}: left out for {landings} landings"
    assert widest_gap(takes) == (period + 1) * MAX_STEP - 1


def test_a_run_takes_one_turn_and_the_pip_test_beside_the_sanitizers() -> None:
    for at in range(0, 24 * MAX_STEP, 7):
        parts = rotation.test_command_parts(at, OTHERS, HEADERS, PIP)
        assert bool(parts["sanitizers"]) != bool(parts["full_builds"])
        assert bool(parts["pip"]) == bool(parts["sanitizers"])
        assert len(parts["header_checks"]) == rotation.HEADER_CHECKS_PER_RUN
        if parts["pip"]:
            second, outside = parts["pip"]
            assert PIP.index(outside) == PIP.index(second) - 1  # older than any release in the wheel


def test_each_long_suite_is_in_one_group_and_a_run_leaves_out_the_others() -> None:
    names = [name for group in rotation.LONG_TESTS for name in group]
    assert len(names) == len(set(names)), "a long suite in two groups"
    assert len(rotation.LONG_TESTS) == len(rotation.TURNS)
    for at in range(0, 8 * MAX_STEP, 5):
        parts = rotation.test_command_parts(at, OTHERS, HEADERS, PIP)
        assert parts["long_tests"] and not set(parts["long_tests"]) & set(parts["long_tests_left_out"])
        assert sorted(parts["long_tests"] + parts["long_tests_left_out"]) == sorted(names)
