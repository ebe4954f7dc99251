"""Per-step autocast figures and the GradScaler's scale as TensorBoard scalars, through the user's
SummaryWriter (docs/insight.md, TensorBoard): nothing here imports tensorboard."""

from __future__ import annotations

import math
from typing import Any

from ._stats import Stats


class TensorBoard:
    """Per-step autocast figures and the GradScaler's scale as TensorBoard scalars, through the
    user's ``torch.utils.tensorboard.SummaryWriter`` (docs/insight.md, TensorBoard)::

        board = autocastgen.insight.TensorBoard(SummaryWriter("runs/fp16"))
        for step in range(steps):
            with autocastgen.stats() as s:
                train_step()                      # ... scaler.step(opt); scaler.update()
            board.log(step, stats=s, scaler=scaler)

    Tags (under ``autocastgen/``): ``calls/<dtype>``, ``casts``, ``cast_bytes``, ``cache_hits``,
    ``cache_misses``, ``nonfinite`` (outputs), ``fp8/ran``, ``fp8/fell_back`` (fp8 rules only),
    ``float16_headroom_bits`` (the least over the step's ops, when measured), ``scaler/scale``,
    ``scaler/skipped_steps`` (so far). A step counts as skipped when the scale went down since the
    previous ``log``, which is how GradScaler answers an inf or NaN gradient (back-off); log every
    step, and with ``hysteresis`` > 1 (autocastgen's GradScaler) only the step that backs off shows."""

    def __init__(self, writer: Any, prefix: str = "autocastgen") -> None:
        self.writer = writer
        self.prefix = prefix
        self.skipped = 0
        self._scale: float | None = None

    def log(self, step: int, stats: Stats | dict[str, Any] | None = None, scaler: Any = None) -> dict[str, float]:
        """Writes this step's scalars and returns them (tag -> value)."""
        values: dict[str, float] = {}
        if stats is not None:
            table = stats.table if isinstance(stats, Stats) else stats
            values.update(_step_figures(table["ops"]))
        if scaler is not None and scaler.is_enabled():
            scale = float(scaler.get_scale())
            if self._scale is not None and scale < self._scale:
                self.skipped += 1
            self._scale = scale
            values["scaler/scale"] = scale
            values["scaler/skipped_steps"] = float(self.skipped)
        for tag, value in values.items():
            self.writer.add_scalar(f"{self.prefix}/{tag}", value, step)
        return values


def _step_figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for field in ("casts", "cast_bytes", "cache_hits", "cache_misses", "nonfinite"):
        figures[field] = float(sum(r.get(field, 0) for r in rows))
    for row in rows:
        for dtype, calls in row["ran_in"].items():
            figures[f"calls/{dtype}"] = figures.get(f"calls/{dtype}", 0.0) + calls
        if row.get("policy") == "fp8":
            ran = sum(n for d, n in row["ran_in"].items() if d.startswith("float8"))
            figures["fp8/ran"] = figures.get("fp8/ran", 0.0) + ran
            figures["fp8/fell_back"] = figures.get("fp8/fell_back", 0.0) + row["calls"] - ran
    largest = max((r["output_max_abs"] for r in rows if r.get("output_max_abs")), default=None)
    if largest:
        figures["float16_headroom_bits"] = math.log2(65504.0 / largest)
    return figures
