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


class Stats:
    """What a ``stats()`` block counted, read when it ends: ``table`` (the JSON object) and ``ops``
    (``{op: entry}``; an op counted under two policies keeps the one with more calls)."""

    def __init__(self, reset_first: bool, path: str | None) -> None:
        self._reset_first = reset_first
        self._path = path
        self.table: dict[str, Any] = {"version": 1, "ops": []}

    @property
    def ops(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for entry in self.table["ops"]:  # sorted by calls, descending
            found.setdefault(entry["op"], entry)
        return found

    def __enter__(self) -> Stats:
        if self._reset_first:
            reset()
        _ops().stats_enable()
        return self

    def __exit__(self, *exc: object) -> None:
        _ops().stats_disable()  # merges this thread first
        self.table = snapshot()
        if self._path is not None:
            flush(self._path)


def stats(reset: bool = True, path: str | None = None) -> Stats:
    """A context manager that counts while it is open. ``reset``: start from zero (default);
    ``path``: also write the table to this JSON file when the block ends."""
    return Stats(reset, path)
