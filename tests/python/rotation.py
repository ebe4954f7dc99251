"""Which of a test's long cases this run takes (Note [tests by rotation]).

scripts/test exports its rotation index as AUTOCASTGEN_ROTATION_INDEX (docs/releases.md: the number
of commits in HEAD, else the UTC day number); a test with more long cases than the default run can
afford (AOTInductor compiles, real models) takes `per_run` of them, a different window each index, so
that consecutive runs cover every case. Run by hand (no index), or with AUTOCASTGEN_ALL_CASES=1
(scripts/test-all-releases), every case runs.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def index() -> int | None:
    """The run's rotation index, or None when every case should run."""
    if os.environ.get("AUTOCASTGEN_ALL_CASES") == "1":
        return None
    value = os.environ.get("AUTOCASTGEN_ROTATION_INDEX")
    return int(value) if value not in (None, "") else None


def rotating(cases: Sequence[T], per_run: int, *, always: Sequence[T] = ()) -> list[T]:
    """`always`, then `per_run` of `cases` for this run's index (a window moving by `per_run` each
    index, wrapping), in their order; every case when there is no index."""
    at = index()
    if at is None or per_run >= len(cases):
        chosen = list(cases)
    else:
        start = (at * per_run) % len(cases)
        picked = {(start + i) % len(cases) for i in range(per_run)}
        chosen = [case for i, case in enumerate(cases) if i in picked]
    return [*always, *(case for case in chosen if case not in always)]
