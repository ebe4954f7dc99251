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
"""

from __future__ import annotations

import json
from typing import Any

import torch

__all__ = ["Stats", "enabled", "flush", "merge", "reset", "snapshot", "stats"]


def _ops() -> Any:
    return torch.ops.autocastgen


def enabled() -> bool:
    """Whether statistics are being counted (by a ``stats()`` block or ``AUTOCASTGEN_STATS``)."""
    return bool(_ops().stats_enabled())


def merge() -> None:
    """Adds the calling thread's counts to the process-wide table."""
    _ops().stats_merge()


def snapshot() -> dict[str, Any]:
    """The process-wide table (after merging the calling thread) as ``{"version": 1, "ops": [...]}``."""
    return json.loads(_ops().stats_snapshot())


def reset() -> None:
    """Drops every count so far (other threads' unmerged counts included)."""
    _ops().stats_reset()


def flush(path: str = "") -> bool:
    """Writes the snapshot to ``path`` (default: the ``AUTOCASTGEN_STATS`` file). A failure warns and
    returns False; it never raises."""
    return bool(_ops().stats_flush(path))


_COUNTS = ("calls", "casts", "cast_bytes", "cache_hits")


def _difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """The counts of `after` less those of `before` (two snapshots), in the file's order."""
    earlier = {(e["op"], e.get("policy")): e for e in before["ops"]}
    ops = []
    for entry in after["ops"]:
        old = earlier.get((entry["op"], entry.get("policy")))
        if old is not None:
            entry = dict(entry)
            for field in _COUNTS:
                entry[field] -= old[field]
            ran_in = {d: n - old["ran_in"].get(d, 0) for d, n in entry["ran_in"].items()}
            entry["ran_in"] = {d: n for d, n in ran_in.items() if n}
        if entry["calls"]:
            ops.append(entry)
    ops.sort(key=lambda e: (-e["calls"], e["op"], e.get("policy", "")))
    return {"version": after["version"], "ops": ops}


class Stats:
    """What a ``stats()`` block counted, read when it ends: ``table`` (``{"version": 1, "ops": [...]}``
    holding the counts made while the block was open; ``input_dtypes`` are those seen since the
    process's table was last reset) and ``ops`` (``{op: entry}``; an op counted under two rules keeps
    the one with more calls). The process-wide table is not reset, so an ``AUTOCASTGEN_STATS`` file
    still gets every count."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._before: dict[str, Any] = {"version": 1, "ops": []}
        self.table: dict[str, Any] = {"version": 1, "ops": []}

    @property
    def ops(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for entry in self.table["ops"]:  # sorted by calls, descending
            found.setdefault(entry["op"], entry)
        return found

    def __enter__(self) -> Stats:
        self._before = snapshot()
        _ops().stats_enable()
        return self

    def __exit__(self, *exc: object) -> None:
        _ops().stats_disable()  # merges this thread first
        self.table = _difference(snapshot(), self._before)
        if self._path is not None:
            flush(self._path)


def stats(path: str | None = None) -> Stats:
    """A context manager that counts while it is open (on every thread; other threads' counts are
    included once they merged, see the module's doc). ``path``: also write the process-wide table
    to this JSON file when the block ends."""
    return Stats(path)
