"""Per-op autocast statistics from Python, over torch.ops.autocastgen.stats_* (docs/insight.md).

    import autocastgen
    with autocastgen.stats() as s:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    print(s.ops["aten::linear"]["casts"])
    autocastgen.insight.snapshot()      # the process-wide table at any time

Counting is process-wide while any ``stats()`` block (or ``AUTOCASTGEN_STATS``) is on. Each
thread counts into its own table; a thread's counts reach the shared table when its ``stats()``
block ends, when it calls :func:`merge`, :func:`snapshot` or :func:`flush`, or when it ends.

The non-finite watch and the range record (``AUTOCASTGEN_FINITE``, ``AUTOCASTGEN_RECORD``)::

    with autocastgen.watch("raise"):          # or "warn", "record"
        model(x)                              # RuntimeError naming the op and your line
    with autocastgen.record("ranges.json") as r:   # casts nothing, records value ranges
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    r.ops["aten::pow.Tensor_Scalar"]["ranges"]["float16_overflow"]
"""

from ._stats import (
    Stats,
    enabled,
    finite_mode,
    first_nonfinite,
    flush,
    merge,
    record,
    reset,
    set_finite_mode,
    snapshot,
    stats,
    watch,
)
from ._tensorboard import TensorBoard

__all__ = [
    "Stats",
    "TensorBoard",
    "enabled",
    "finite_mode",
    "first_nonfinite",
    "flush",
    "merge",
    "record",
    "reset",
    "set_finite_mode",
    "snapshot",
    "stats",
    "watch",
]
