"""Which of a test's long cases, and which of scripts/test's long parts, this run takes (Note [tests
by rotation]).

scripts/test exports its rotation index as AUTOCASTGEN_ROTATION_INDEX (docs/releases.md: the number
of commits in HEAD, else the UTC day number); a test with more long cases than the default run can
afford (AOTInductor compiles, real models) takes `per_run` of them, a window chosen by the index.
Run by hand (no index), or with AUTOCASTGEN_ALL_CASES=1 (scripts/test-all-releases), every case
runs. The cases a run leaves out are printed at the end of its pytest output (conftest.py).

Note [tests by rotation]
A run knows its index, the number of commits in HEAD, and nothing of the runs before it. One
landing (one CI run) adds any number of commits, so consecutive runs' indices differ by any step.
Windows keyed on the index itself (window = index mod W) cover every case in W landings of one
commit each, but never with a step that shares a factor with W: with two windows and landings of
two commits each, half the cases never run.

No rule of the index alone bounds coverage whatever the step: a rule that leaves some case out at
infinitely many indices leaves it out in every landing of a sequence that stops only at those. The
same holds for any rule a run computes from what it sees (a hash of HEAD's tree, the day number),
with no record of which earlier commits were landings. A bound needs a largest step, MAX_STEP
commits a landing; then a case is certain to run only where its window holds for MAX_STEP
consecutive indices (a wall no landing can jump), and each of the W windows needs such walls.

So the window is keyed on the block, index div MAX_STEP: block b takes the `per_run` cases from
position b x per_run on (wrapping), and any W = ceil(len(cases) / per_run) consecutive blocks take
every case. When no landing adds more than MAX_STEP commits, every block holds a landing, and
- every case runs in at least one of any (W - 1) x MAX_STEP + 1 consecutive landings (the worst:
  landings of one commit each, walking through the W - 1 other walls), and
- the index moves by at most (W + 1) x MAX_STEP - 1 between two runs that take a case.
tests/python/support/test_rotation.py checks both bounds against every sequence of steps 1..MAX_STEP (a
longest-path search) for the real tests' shapes and others. A landing of more commits (several
merges at once) may jump a block: that case waits for the next cycle of blocks, and only a run of
such landings can keep a window out for longer. MAX_STEP = 32: one branch's merge added 2-17
commits so far. With the UTC day number as the index (a shallow clone) a window lasts MAX_STEP days.
A bound whatever the step needs an index that moves by one a landing (a CI run number as
AUTOCASTGEN_ROTATION, or landings as merges counted on HEAD's first-parent line) and MAX_STEP = 1.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

# The most commits one landing may add for the bounds of Note [tests by rotation] to hold.
MAX_STEP = 32
# What the run's rotations left out, one line per rotating() call (conftest.py prints them).
REPORT: list[str] = []


def index() -> int | None:
    """The run's rotation index, or None when every case should run."""
    if os.environ.get("AUTOCASTGEN_ALL_CASES") == "1":
        return None
    value = os.environ.get("AUTOCASTGEN_ROTATION_INDEX")
    return int(value) if value not in (None, "") else None


def windows(count: int, per_run: int) -> int:
    """How many consecutive blocks take every one of `count` cases, `per_run` a block."""
    return -(-count // per_run)


def window(at: int, count: int, per_run: int) -> list[int]:
    """The positions (of `count` cases) that the run of index `at` takes: `per_run` of them from
    position block x per_run, wrapping, where block = at div MAX_STEP (Note [tests by rotation])."""
    if per_run >= count:
        return list(range(count))
    start = (at // MAX_STEP * per_run) % count
    return sorted((start + i) % count for i in range(per_run))


def case_name(case: object) -> str:
    """A case as pytest's ids name it: a tuple's parts joined by '-', torch dtypes without 'torch.'."""
    parts = case if isinstance(case, tuple) else (case,)
    return "-".join(str(part).removeprefix("torch.") for part in parts)


def rotating(cases: Sequence[T], per_run: int, *, always: Sequence[T] = ()) -> list[T]:
    """`always`, then `per_run` of `cases` for this run's index (window()), in their order; every
    case when there is no index. What it leaves out goes to REPORT."""
    at = index()
    picked = set(range(len(cases))) if at is None else set(window(at, len(cases), per_run))
    chosen = [case for i, case in enumerate(cases) if i in picked]
    left_out = [case for i, case in enumerate(cases) if i not in picked and case not in always]
    if left_out:
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        REPORT.append(f"rotation: {caller} left out {len(left_out)} of {len(cases)} cases at index {at} "
                      f"(block {at // MAX_STEP}): {', '.join(case_name(c) for c in left_out)} "
                      f"(AUTOCASTGEN_ALL_CASES=1 runs them)")
    return [*always, *(case for case in chosen if case not in always)]


# scripts/test's long parts take turns by the same blocks (index div MAX_STEP), so that what holds
# for a test's cases holds for them: landings of up to MAX_STEP commits each run every part within
# a bounded number of landings (test_rotation.py checks each part's bound). Six turns: a sanitizer
# preset (asan, asan-torch, tsan) in the even blocks, one other installed release's full build in
# the odd ones; the pip package's test runs beside the sanitizers, its second release taking turns
# over its own candidates; one header check every run; a sixth of the long suites (LONG_TESTS).
TURNS = (("asan",), (), ("asan-torch",), (), ("tsan",), ())
HEADER_CHECKS_PER_RUN = 1
# The default build's long suites (ctest names) take the same turns, a group each: turn t runs
# LONG_TESTS[t] and leaves the other groups out, and a release build's tests leave them all out
# (they are end-to-end suites of features whose release-dependent parts the shorter tests load).
# A suite of about 15 s or more that runs a feature end to end belongs here, unless it guards
# hostile input or exactness that every landing must keep (test_program_file, test_export,
# test_bake, the scaler's, compile_policy's and the runtime policy's tests run every time). Their
# wall times (ctest -j 2 on a fresh 2-core machine, 2026-12-07, in seconds) add up to 1,565 s; the
# groups balance the turns' other parts: the release turns build 2.4 (old ABI: every file compiled
# again), 2.7 and 2.11, always in turns 1, 3 and 5, so turn 1 takes the lightest group (88 s) and
# asan's, the shortest sanitizer build, the heaviest (378 s). Every suite runs once in six blocks
# (test_rotation.py checks the bound, and scripts/test that each name is a test of the build).
LONG_TESTS = (
    # turn 0, beside asan and the pip test: 378 s
    ("docs/test_doc_blocks", "python/test_export_corpus",  # 191, 148
     "distributed/test_dist_lightning", "release-matrix/policies/2.5", "release-matrix/policies/2.6"),  # 18, 10, 11
    # turn 1, beside the 2.4 build (the longest turn: every file compiled again): 88 s
    ("errors/audit/import", "python/test_trainer", "report/test_report_browser",  # 23, 21, 16
     "python/test_advise_fp8", "python/test_accelerate"),  # 15, 13
    # turn 2, beside asan-torch and the pip test: 304 s
    ("python/test_export_generation", "python/test_stats", "audit.import", "python/test_deploy_aoti",  # 83, 62, 71, 49
     "release-matrix/policies/2.15", "release-matrix/policies/2.12"),  # 26, 13
    # turn 3, beside the 2.7 build: 259 s
    ("python/test_export_custom_ops", "python/test_compile_insight", "python/test_export_transformers_exporters",  # 74, 55, 41
     "distributed/test_dist_fp8_llama_2d", "python/test_integrations_import", "python/test_lightning",  # 31, 20, 14
     "release-matrix/policies/2.11"),  # 24
    # turn 4, beside tsan and the pip test: 275 s
    ("python/test_deploy_models", "python/test_deploy_onnx", "audit.release_diff",  # 66, 47, 36
     "python/test_fp8_select", "python/test_deploy_fp8", "privateuse1/training",  # 26, 22, 20
     "distributed/test_dist_fp8_2d", "release-matrix/policies/2.4", "release-matrix/policies/2.7",  # 19, 15, 13
     "release-matrix/policies/2.8"),  # 11
    # turn 5, beside the 2.11 build: 261 s
    ("consumer/install_build_run", "python/test_export_models", "fp8/test_fp8_compile",  # 50, 46, 40
     "python/test_advise", "python/test_compile_policy_paths", "distributed/test_dist_accelerate",  # 31, 27, 20
     "release-matrix/policies/2.9", "release-matrix/policies/2.10",  # 12, 11
     "release-matrix/policies/2.13", "release-matrix/policies/2.14"),  # 13, 11
)


def test_command_parts(at: int, others: Sequence[str], header_candidates: Sequence[str],
                       pip_candidates: Sequence[str]) -> dict[str, list[str]]:
    """What scripts/test's run of index `at` adds to the default build: its sanitizer presets, the
    other installed release it builds fully, the releases it header-checks, and where the pip test
    runs, the second release of its wheel and the one just before it, outside the wheel's range (so
    pip refuses the wheel beside it): `pip_candidates` are the releases oldest first, the first of
    them older than any the wheel may hold."""
    block = at // MAX_STEP
    (turn,) = window(at, len(TURNS), 1)
    sanitizers = list(TURNS[turn])
    # The release turns are every other block: block div 2 counts them.
    full_builds = [] if sanitizers or not others else [others[(block // 2) % len(others)]]
    headers = [header_candidates[i] for i in window(at, len(header_candidates), HEADER_CHECKS_PER_RUN)]
    pip: list[str] = []
    if sanitizers and len(pip_candidates) > 1:  # the sanitizer turns are the even blocks: block div 2 counts them
        second = 1 + (block // 2) % (len(pip_candidates) - 1)
        pip = [pip_candidates[second], pip_candidates[second - 1]]
    long_left_out = [name for group in LONG_TESTS[:turn] + LONG_TESTS[turn + 1:] for name in group]
    return {"sanitizers": sanitizers, "full_builds": full_builds, "header_checks": headers, "pip": pip,
            "long_tests": list(LONG_TESTS[turn]), "long_tests_left_out": long_left_out}


def main() -> None:
    """`python3 tests/python/rotation.py parts INDEX --others ... --headers ... --pip ...`: one line
    per part, `name: value...` (scripts/test reads them)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("verb", choices=["parts"])
    parser.add_argument("index", type=int)
    for option in ("others", "headers", "pip"):
        parser.add_argument(f"--{option}", nargs="*", default=[])
    args = parser.parse_args()
    parts = test_command_parts(args.index, args.others, args.headers, args.pip)
    for name, values in parts.items():
        print(f"{name}: {' '.join(values)}")


if __name__ == "__main__":
    main()
