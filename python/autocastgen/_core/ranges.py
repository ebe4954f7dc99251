"""What a record's ranges say for one dtype: each place's merged ranges from the float32 run, and
whether they move it to float32 (Note [the advisor] in advisor/_search.py). The advisor's range
proposal, which the report shows for a record too (reporter/view.py): the same code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FORMATS", "LOWER_RULE", "Measure", "Place", "measure", "percent"]

# The formats' largest finite value and smallest positive subnormal (docs/insight.md, the range record).
FORMATS = {"float16": (65504.0, 2.0**-24), "bfloat16": (3.3895313892515355e38, 2.0**-133)}
LOWER_RULE = "lower_precision_fp"
_UNDERFLOW_SHARE = 0.01  # Note [the advisor] in advisor/_search.py


@dataclass(frozen=True, order=True)
class Place:
    """One op overload (as the record names it, ``aten::linear``) inside one module (its path)."""

    module: str
    op: str

    @property
    def policy_name(self) -> str:
        """The op as a policy names it: aten ops bare."""
        return self.op[len("aten::"):] if self.op.startswith("aten::") else self.op


@dataclass(frozen=True)
class Measure:
    """A place's merged ranges from the float32 run, and what they say for one dtype."""

    place: Place
    calls: int
    input_max_abs: float | None
    output_max_abs: float | None
    output_elements: int
    overflow: int
    underflow: int
    input_headroom: float | None  # bits: log2(format max / max |x|)
    output_headroom: float | None
    loss_bits: float | None       # log2(max |input| / max |output|)
    range_reason: str | None      # why the ranges move it; None when they do not

    @property
    def headroom(self) -> float:
        known = [h for h in (self.input_headroom, self.output_headroom) if h is not None]
        return min(known) if known else math.inf


def percent(share: float) -> str:
    return f"{100 * share:.3g}%"


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _bits(limit: float, value: float | None) -> float | None:
    if value is None:
        return None
    return math.inf if value == 0 else math.log2(limit / value)


def measure(rows: Iterable[Mapping[str, Any]], dtype: str, margin_bits: float) -> list[Measure]:
    """Every place of the record (rows under `lower_precision_fp`, merged per (module, op)) with
    what its ranges say for ``dtype`` (Note [the advisor]); in (module, op) order."""
    largest, smallest = FORMATS[dtype]
    merged: dict[Place, dict[str, Any]] = {}
    for row in rows:
        if row["policy"] != LOWER_RULE:
            continue
        place = Place(str(row["module"]), str(row["op"]))
        ranges = row.get("ranges") or {}
        into = merged.setdefault(place, {"calls": 0, "in": None, "out": None, "elements": 0, "over": 0, "under": 0})
        into["calls"] += int(row.get("calls", 0))
        for key, name in (("in", "input_max_abs"), ("out", "output_max_abs")):
            value = _number(ranges.get(name))
            if value is not None:
                into[key] = value if into[key] is None else max(into[key], value)
        into["elements"] += int(ranges.get("output_elements", 0))
        into["over"] += int(ranges.get(f"{dtype}_overflow", 0))
        into["under"] += int(ranges.get(f"{dtype}_underflow", 0))
    found = []
    for place in sorted(merged):
        m = merged[place]
        in_room, out_room = _bits(largest, m["in"]), _bits(largest, m["out"])
        loss = None
        if m["in"] and m["out"]:
            loss = math.log2(m["in"] / m["out"])
        reasons = []
        if out_room is not None and (out_room < margin_bits or m["over"]):
            text = f"max |out| {m['out']:.6g}, {dtype} headroom {out_room:+.1f} bits"
            if m["over"]:
                text += f", {percent(m['over'] / max(m['elements'], 1))} of elements out of range"
            reasons.append(text)
        elif m["over"]:
            reasons.append(f"{percent(m['over'] / max(m['elements'], 1))} of elements out of range")
        if in_room is not None and in_room < margin_bits:
            reasons.append(f"max |in| {m['in']:.6g}, {dtype} headroom {in_room:+.1f} bits")
        if m["elements"] and m["under"] / m["elements"] >= _UNDERFLOW_SHARE:
            reasons.append(f"{percent(m['under'] / m['elements'])} of output elements below {dtype}'s "
                           f"smallest subnormal ({smallest:.3g})")
        found.append(Measure(place, m["calls"], m["in"], m["out"], m["elements"], m["over"], m["under"],
                              in_room, out_room, loss, "; ".join(reasons) or None))
    return found
