"""Counting and watching: statistics blocks, the non-finite watch and record-only mode, over
torch.ops.autocastgen.stats_* (docs/insight.md; the package's doc has the examples). Defines the
ops the runtime calls back into Python: the user's line for the watch, log messages."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from types import FrameType
from typing import Any

import torch

from .._core import traced
from .._core.paths import IMPORTED_FROM


def _ops() -> Any:
    return torch.ops.autocastgen


# Note [the user's line] (runtime/torch/insight/watch.cpp): the non-finite watch calls this op from C++ on
# the thread running the wrapped op; the Python frames that called into it are still on that
# thread's stack. The first one outside torch and this package is the user's line.
_SKIPPED = (
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
    IMPORTED_FROM + os.sep,  # the whole package, its subpackages too
    "<frozen ",
)


def _user_line() -> str:
    from_trace = _traced_user_line()
    if from_trace is not None:
        return from_trace
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_SKIPPED):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _traced_user_line() -> str | None:
    """While torch.compile replays a graph, the user's line of the node being replayed (its stack
    trace, which Dynamo recorded); None outside such a replay."""
    try:
        import torch.fx.traceback as fx_traceback

        meta = fx_traceback.get_current_meta() if fx_traceback.has_preserved_node_meta() else None
    except Exception:  # noqa: BLE001 - an older torch without these: fall back to the frames
        return None
    stack = (meta or {}).get("stack_trace")
    if not stack:
        return None
    line = ""
    for match in re.finditer(r'File "([^"]+)", line (\d+)', stack):
        if not match.group(1).startswith(_SKIPPED):
            line = f"{match.group(1)}:{match.group(2)}"
    return line


def _log_message(level: int, message: str) -> None:
    # Note [quiet by default] (runtime/torch/insight/log.h): what the runtime did that needs no
    # action (the kernels a loaded policy replaced) goes to the logger "autocastgen", at INFO (once
    # per load) and DEBUG (per op): silent unless the program configures logging.
    logging.getLogger("autocastgen").log(level, "%s", message)


def _define_user_line() -> torch.library.Library:
    library = torch.library.Library("autocastgen", "FRAGMENT")
    library.define("watch_user_line() -> str")
    # CompositeExplicitAutograd: ops of no tensor (Note [bookkeeping ops] in runtime/torch/bookkeeping_op.h).
    library.impl("watch_user_line", _user_line, "CompositeExplicitAutograd")
    library.define("log_message(int level, str message) -> ()")
    library.impl("log_message", _log_message, "CompositeExplicitAutograd")
    return library


# Kept for the life of the module: dropping the library unregisters the op. A reload of this module
# keeps the one it made first (its globals survive the reload).
_library = globals().get("_library") or _define_user_line()


def enabled() -> bool:
    """Whether statistics are being counted (by a ``stats()`` block or ``AUTOCASTGEN_STATS``)."""
    return bool(_ops().stats_enabled())


def merge() -> None:
    """Adds the calling thread's counts to the process-wide table."""
    _ops().stats_merge()


def snapshot() -> dict[str, Any]:
    """The process-wide table (after merging the calling thread) as ``{"version": 1, "ops": [...]}``."""
    table: dict[str, Any] = json.loads(_ops().stats_snapshot())
    return table


def reset() -> None:
    """Drops every count so far (other threads' unmerged counts included), the first non-finite
    event and the record of which ops warned."""
    _ops().stats_reset()


def flush(path: str = "") -> bool:
    """Writes the snapshot to ``path`` (default: the ``AUTOCASTGEN_STATS`` file). A failure warns and
    returns False; it never raises."""
    return bool(_ops().stats_flush(path))


_COUNTS = ("calls", "casts", "cast_bytes", "cache_hits", "cache_misses", "cache_evictions", "outputs_checked",
           "nonfinite")
_RANGE_COUNTS = ("calls", "output_elements", "float16_overflow", "float16_underflow", "bfloat16_overflow",
                 "bfloat16_underflow")


def _larger(a: float | None, b: float | None, pick: Any = max) -> float | None:
    return b if a is None else a if b is None else pick(a, b)


def _sum_rows(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two rows of one (op, rule) (two modules' rows) as one, as the runtime adds two calls."""
    out = dict(a)
    for field in (*_COUNTS, "compiled_calls"):
        if field in a or field in b:
            out[field] = a.get(field, 0) + b.get(field, 0)
    out["ran_in"] = {d: a["ran_in"].get(d, 0) + b["ran_in"].get(d, 0) for d in {**a["ran_in"], **b["ran_in"]}}
    out["input_dtypes"] = sorted(set(a.get("input_dtypes", [])) | set(b.get("input_dtypes", [])))
    out["output_max_abs"] = _larger(a.get("output_max_abs"), b.get("output_max_abs"))
    if "ranges" in a and "ranges" in b:
        ranges = {f: a["ranges"][f] + b["ranges"][f] for f in _RANGE_COUNTS}
        for side in ("input", "output"):
            ranges[f"{side}_max_abs"] = _larger(a["ranges"][f"{side}_max_abs"], b["ranges"][f"{side}_max_abs"])
            ranges[f"{side}_min_abs"] = _larger(a["ranges"][f"{side}_min_abs"], b["ranges"][f"{side}_min_abs"], min)
        out["ranges"] = ranges
    elif "ranges" in b:
        out["ranges"] = b["ranges"]
    if "first_nonfinite" not in out and "first_nonfinite" in b:
        out["first_nonfinite"] = b["first_nonfinite"]
    return out


def _refuse_compiling(what: str) -> None:
    # The switches are process-wide state a graph cannot change; around the compiled call they work.
    if torch.compiler.is_compiling():
        traced.prepare()
        traced.refuse(
            f"{what} inside a function torch.compile traces: switch statistics, the watch and record-only "
            "mode around the compiled call instead (its calls are counted and checked, docs/compile.md)"
        )


class Stats:
    """What a ``stats()`` block counted, read when it ends: ``table`` (``{"version": 1, "ops": [...]}``,
    the block's own: its counts, largest values, ranges and first non-finite events, Note [a
    block's table] in runtime/torch/insight/stats.cpp; the block's file holds the same) and ``ops``
    (``{op: entry}``; an op counted under two rules keeps the one with more calls). The
    process-wide table is not reset, so an ``AUTOCASTGEN_STATS`` file still gets every count."""

    _enable = "stats_enable"
    _disable = "stats_disable"

    def __init__(self, path: str | None, ranges: bool = False) -> None:
        self._path = path
        self._ranges = ranges
        self._window: int | None = None
        self.table: dict[str, Any] = {"version": 1, "ops": []}

    @property
    def ops(self) -> dict[str, dict[str, Any]]:
        # With autocastgen.attach an (op, rule) has a row per module: summed here (without
        # "module"), so that `ops` reads the same attached or not; `table` keeps the rows.
        summed: dict[tuple[str, str | None], dict[str, Any]] = {}
        for entry in self.table["ops"]:
            key = (entry["op"], entry.get("policy"))
            summed[key] = _sum_rows(summed[key], entry) if key in summed else {
                k: v for k, v in entry.items() if k != "module"}
        found: dict[str, dict[str, Any]] = {}
        for entry in sorted(summed.values(), key=lambda e: -e["calls"]):  # stable: the table's order
            found.setdefault(entry["op"], entry)
        return found

    def __enter__(self) -> Stats:
        _refuse_compiling(f"autocastgen.{'record' if self._enable == 'record_enable' else 'stats'}()")
        self._window = int(_ops().stats_window_open())
        getattr(_ops(), self._enable)()
        if self._ranges:
            _ops().ranges_enable()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ranges:
            _ops().ranges_disable()
        getattr(_ops(), self._disable)()  # merges this thread first
        if self._window is not None:
            window, self._window = self._window, None
            self.table = json.loads(_ops().stats_window_close(window, self._path or ""))


def stats(path: str | None = None, ranges: bool = False) -> Stats:
    """A context manager that counts while it is open (on every thread; other threads' counts are
    included once they merged, see the module's doc). ``path``: also write the block's table to
    this JSON file when the block ends. ``ranges``: the range record on too (autocast still
    casts; each entry gets ``ranges``, docs/insight.md)."""
    return Stats(path, ranges)


class _Record(Stats):
    _enable = "record_enable"
    _disable = "record_disable"


def record(path: str | None = None) -> Stats:
    """Record-only mode while the block is open: autocastgen's wrappers and runtime policies cast
    nothing (ops run in their inputs' dtypes, as if autocast were off) and record value ranges and
    statistics. Use it around a float32 model's usual autocast scope to see which ops would leave
    float16's range. Same result object as :func:`stats`."""
    return _Record(path, ranges=False)


def set_finite_mode(mode: str) -> str:
    """Sets the non-finite watch's process-wide mode (``"off"``, ``"record"``, ``"warn"``,
    ``"raise"``) and returns the previous one. Any other value raises ``ValueError``."""
    return str(_ops().finite_set_mode(mode))


def finite_mode() -> str:
    """The non-finite watch's mode (``AUTOCASTGEN_FINITE`` sets it at load)."""
    return str(_ops().finite_mode())


def first_nonfinite() -> str | None:
    """The first non-finite event since the last :func:`reset` (the watch's message), or None."""
    return str(_ops().finite_first()) or None


class _Watch:
    def __init__(self, mode: str) -> None:
        self._mode = mode
        self._previous: str | None = None

    def __enter__(self) -> _Watch:
        _refuse_compiling("autocastgen.watch()")
        self._previous = set_finite_mode(self._mode)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            set_finite_mode(self._previous)

    @property
    def first(self) -> str | None:
        """The first non-finite event so far (see :func:`first_nonfinite`)."""
        return first_nonfinite()


def watch(mode: str = "warn") -> _Watch:
    """The non-finite watch in ``mode`` while the block is open (the previous mode comes back
    after). Every floating output of an autocast-wrapped op is reduced once; a NaN or Inf is
    counted in the op's ``nonfinite`` and, in ``"warn"`` mode, warned once per op, in ``"raise"``
    mode raised as RuntimeError, both naming the op and the file:line of your call."""
    if mode not in ("off", "record", "warn", "raise"):
        raise ValueError(f"autocastgen.watch: {mode!r} is not a mode (expected 'off', 'record', 'warn' or 'raise')")
    return _Watch(mode)
