"""autocastgen from Python.

Importing the package loads ``libautocastgen_runtime_torch.so`` (unless a backend library brought
it already) and offers autocastgen's own autocast state, the C++ ``autocastgen::AutocastScope``
and worker-thread capture, to Python::

    import autocastgen
    with autocastgen.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)

Per-op autocast statistics: ``with autocastgen.stats() as s: ...`` (docs/insight.md).

See docs/runtime.md ("From Python").
"""

from __future__ import annotations

from . import insight
from ._runtime import load_runtime
from .insight import Stats, stats
from .state import (
    AutocastState,
    autocast,
    capture_state,
    get_dtype,
    is_cache_enabled,
    is_enabled,
    nesting,
    state_guard,
    with_state,
)

__all__ = [
    "AutocastState",
    "Stats",
    "autocast",
    "capture_state",
    "get_dtype",
    "insight",
    "is_cache_enabled",
    "is_enabled",
    "load_runtime",
    "nesting",
    "state_guard",
    "stats",
    "with_state",
]

load_runtime()
