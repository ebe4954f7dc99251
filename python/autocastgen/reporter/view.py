"""What the report shows, as plain data: rows per op and per module, the module tree with the
dtypes its ops ran in, float16 headroom per place with the advisor's verdict, non-finite events,
and what changed between two files. No HTML here (html.py renders it).

Numbers are formatted as ``autocastgen stats`` prints them (codegen/cli/verb_stats.cpp): max
|value| ``{:.6g}``, headroom ``{:+.1f}`` bits (Note [headroom] there), shares ``{:.3g}%``.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from .._core.ranges import measure

FLOAT16_MAX = 65504.0
ADVISOR_MARGIN_BITS = 1.0  # autocastgen advise's default --margin-bits


# --- formatting, as the stats verb ---------------------------------------------------------------

def magnitude(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def headroom_bits(max_abs: float | None) -> float | None:
    if max_abs is None or max_abs <= 0:
        return None
    return math.log2(FLOAT16_MAX / max_abs)


def headroom_text(max_abs: float | None) -> str:
    bits = headroom_bits(max_abs)
    return "-" if bits is None else f"{bits:+.1f}"


def share(count: int, elements: int) -> str:
    return "0" if not count or not elements else f"{100.0 * count / elements:.3g}%"


def ran_in_text(ran_in: Mapping[str, int]) -> str:
    if len(ran_in) == 1:
        for dtype, calls in ran_in.items():
            return f"{dtype} {calls}"
    ordered = sorted(ran_in.items(), key=lambda item: -item[1])  # stable: the file's order on ties
    return ", ".join(f"{dtype} {calls}" for dtype, calls in ordered)


def cache_text(row: Mapping[str, Any]) -> str:
    # Note [compiled calls] in runtime/torch/insight/stats_json.cpp: compiled calls' cache use is unknown.
    hits = f"{row.get('cache_hits', 0)}/{row.get('cache_misses', 0)}/{row.get('cache_evictions', 0)}"
    compiled = row.get("compiled_calls", 0)
    if not compiled:
        return hits
    return "? (compiled)" if compiled >= row["calls"] else f"{hits} +? ({compiled} compiled)"


def nonfinite_text(row: Mapping[str, Any]) -> str:
    return "-" if not row.get("outputs_checked", 0) else str(row.get("nonfinite", 0))


def module_text(row: Mapping[str, Any]) -> str:
    return "-" if "module" not in row else (row["module"] or "<root>")


def is_fp8(dtype: str) -> bool:
    return dtype.startswith("float8")


def fp8_text(row: Mapping[str, Any]) -> str:
    """fp8 rows: calls whose GEMM ran in float8, and those skipped (ran in the lower precision;
    docs/fp8.md, Statistics)."""
    if row.get("policy") != "fp8":
        return "-"
    ran = sum(n for d, n in row["ran_in"].items() if is_fp8(d))
    return f"{ran} / {row['calls'] - ran}"


def fp8_skipped_text(row: Mapping[str, Any]) -> str:
    """Why fp8 calls ran in the lower precision (the row's ``fp8_skipped``): ``reason: calls``,
    most calls first (the file's order on ties), ``; `` between them; "-" when none were skipped."""
    skipped = row.get("fp8_skipped")
    if not skipped:
        return "-"
    ordered = sorted(skipped.items(), key=lambda item: -item[1])
    return "; ".join(f"{reason}: {calls}" for reason, calls in ordered)


def dominant(ran_in: Mapping[str, int]) -> str:
    if len(ran_in) == 1:
        for dtype in ran_in:
            return dtype
    return max(ran_in.items(), key=lambda item: item[1])[0] if ran_in else "none"


# --- tables ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    name: str
    numeric: bool
    title: str = ""
    wide: bool = False  # long texts: cut to the column's width, whole in the cell's tooltip


ROW_COLUMNS = (
    Column("calls", True), Column("ran in", False, "calls by the dtype the op ran in"),
    Column("casts", True), Column("cast bytes", True), Column("cache hit/miss/evict", True),
    Column("fp8 / skipped", True,
           "fp8 rule: calls whose GEMM ran in float8 / skipped (ran in the lower-precision dtype)"),
    Column("non-finite", True, "outputs with NaN or Inf ('-': not checked)"),
    Column("max |out|", True),
    Column("f16 headroom", True, "log2(65504 / max |out|) in bits; negative: over float16's range"),
    Column("f16 over", True, "share of output elements above 65504 (range record)"),
    Column("fp8 skipped because", False, "why the skipped fp8 calls ran in the lower precision: reason: calls", True),
)


def row_cells(row: Mapping[str, Any]) -> list[str]:
    ranges = row.get("ranges")
    big = row.get("output_max_abs")
    fp8 = row.get("policy") == "fp8"
    return [str(row["calls"]), ran_in_text(row["ran_in"]), str(row["casts"]), str(row["cast_bytes"]),
            cache_text(row), fp8_text(row) if fp8 else "-", nonfinite_text(row), magnitude(big), headroom_text(big),
            share(ranges["float16_overflow"], ranges["output_elements"]) if ranges else "-",
            fp8_skipped_text(row) if fp8 else "-"]


def _order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """The stats verb's order: non-finite first, least float16 headroom, most calls, op, rule, module."""
    return (-r.get("nonfinite", 0), -(r.get("output_max_abs") or -1), -r["calls"], r["op"], r.get("policy", ""),
            "module" in r, r.get("module", ""))


Row = TypeVar("Row", bound=Mapping[str, Any])


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    """As the stats verb: non-finite first, least float16 headroom, most calls, op, rule, module."""
    return sorted(rows, key=_order)


def by_module(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``stats --by module``: by module (rows outside every module last), each
    module's in the order of sort_rows(); one sort."""
    return sorted(rows, key=lambda r: ("module" in r, r.get("module", ""), *_order(r)))


_SUMMED = ("calls", "casts", "cast_bytes", "cache_hits", "cache_misses", "cache_evictions", "compiled_calls",
           "outputs_checked", "nonfinite")


def _add(into: dict[str, Any], row: Mapping[str, Any]) -> None:
    """Adds ``row``'s figures that the tables show to ``into`` in place (a large file has 100k
    rows: insight._sum_rows, which copies, made this the report's slowest step)."""
    for name in _SUMMED:
        if name in row:
            into[name] = into.get(name, 0) + row[name]
    ran_in = into["ran_in"]
    for dtype, calls in row["ran_in"].items():
        ran_in[dtype] = ran_in.get(dtype, 0) + calls
    big = row.get("output_max_abs")
    if big is not None and (into.get("output_max_abs") is None or big > into["output_max_abs"]):
        into["output_max_abs"] = big
    if "fp8_skipped" in row:
        mine = into.setdefault("fp8_skipped", {})
        for reason, calls in row["fp8_skipped"].items():
            mine[reason] = mine.get(reason, 0) + calls
    if "ranges" in row:
        mine = into.setdefault("ranges", {"output_elements": 0, "float16_overflow": 0})
        mine["output_elements"] += row["ranges"]["output_elements"]
        mine["float16_overflow"] += row["ranges"]["float16_overflow"]


def per_op(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (op, rule): an op's module rows summed, as ``autocastgen stats`` prints them."""
    summed: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["op"], row.get("policy", ""))
        into = summed.get(key)
        if into is None:
            into = summed[key] = {"op": row["op"], "ran_in": {}, "output_max_abs": None}
            if "policy" in row:
                into["policy"] = row["policy"]
        _add(into, row)
    return sort_rows(summed.values())


def total(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"op": "total", "calls": 0, "ran_in": {}, "casts": 0, "cast_bytes": 0}
    for row in rows:
        _add(out, row)
    return out


# --- the module tree ------------------------------------------------------------------------------

@dataclass
class Node:
    """A module: its path, its own rows, and what ran in it and the modules inside it."""

    path: str
    kind: str = ""  # the module's class, when the model was given
    rows: list[Mapping[str, Any]] = field(default_factory=list)
    children: dict[str, Node] = field(default_factory=dict)
    ran_in: dict[str, int] = field(default_factory=dict)  # the subtree's calls by dtype
    nonfinite: int = 0
    worst_headroom: float | None = None
    left_out: int = 0  # the root's: rows whose module is past TREE_DEPTH or TREE_PATH (Note [bounded tree])

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1] if self.path else "<root>"


# Note [bounded tree]: a module path comes from the file, so it can be a million segments long.
# Each segment is a node and every node is drawn by recursion, and each node keeps its whole path,
# so a path's cost grows with its segments times its length. Paths of more than TREE_DEPTH
# segments or TREE_PATH characters stay out of the tree (a note on the page counts their rows;
# the per-module table has them); real models nest a few levels and name a module in tens of
# characters.
TREE_DEPTH = 64
TREE_PATH = 1024


def module_tree(rows: Iterable[Mapping[str, Any]], model: Any = None) -> Node | None:
    """The attached modules the rows ran in (and, with ``model``, every module of it with its class),
    each with the dtypes of the calls inside it. None when no row has a module. Note [bounded tree]."""
    root = Node("")
    nodes = {"": root}

    def node(path: str) -> Node:
        if path not in nodes:
            parent = node(path.rsplit(".", 1)[0] if "." in path else "")
            nodes[path] = parent.children.setdefault(path, Node(path))
        return nodes[path]

    def fits(path: str) -> bool:
        return len(path) <= TREE_PATH and path.count(".") < TREE_DEPTH

    if model is not None:
        for path, module in model.named_modules():
            if fits(path):
                node(path).kind = type(module).__name__
    found = False
    for row in rows:
        if "module" not in row:
            continue
        found = True
        if not fits(row["module"]):
            root.left_out += 1
            continue
        node(row["module"]).rows.append(row)  # not copied: nothing here changes a row
    if not found and model is None:
        return None

    def fold(n: Node) -> None:
        for row in n.rows:
            for dtype, calls in row["ran_in"].items():
                n.ran_in[dtype] = n.ran_in.get(dtype, 0) + calls
            n.nonfinite += row.get("nonfinite", 0)
            bits = headroom_bits(row.get("output_max_abs"))
            if bits is not None and (n.worst_headroom is None or bits < n.worst_headroom):
                n.worst_headroom = bits
        for child in n.children.values():
            fold(child)
            for dtype, calls in child.ran_in.items():
                n.ran_in[dtype] = n.ran_in.get(dtype, 0) + calls
            n.nonfinite += child.nonfinite
            if child.worst_headroom is not None and (n.worst_headroom is None
                                                     or child.worst_headroom < n.worst_headroom):
                n.worst_headroom = child.worst_headroom

    fold(root)
    return root


# --- float16 headroom per place -------------------------------------------------------------------

class Place(NamedTuple):
    """An op in a module (or outside every module) with its largest finite |output|. A tuple, not
    a dataclass: cheap to make (a large record moves thousands of places)."""

    module: str | None
    op: str
    policy: str
    max_abs: float
    bits: float  # float16 headroom: log2(65504 / max_abs), inf for 0
    ranges: Mapping[str, Any] | None  # the row's, for over
    moved: str = ""  # why the advisor moves it to float32 ("" when it does not)

    @property
    def over(self) -> str:
        """The share of output elements above 65504, "-" without ranges."""
        r = self.ranges
        return share(r["float16_overflow"], r["output_elements"]) if r else "-"


@dataclass(frozen=True)
class Headroom:
    """The places (module, op, rule) with a measured max |out|: those with the least float16
    headroom, those the advisor moves, and how many there are."""

    least: list[Place]  # the places with the least headroom, least first (as many as asked for)
    moved: list[Place]  # every place the advisor moves to float32, least headroom first
    over: int           # places over float16's range (headroom below 0)
    count: int          # places in all


def places(rows: Sequence[Mapping[str, Any]], advice: Any = None, keep: int = 40) -> Headroom:
    """Every (module, op, rule) with a measured max |out|, least headroom first, with the advisor's
    verdict: the range proposal that ``autocastgen advise --dtype float16`` makes from this file
    (a record: float32, ranges, modules; _core/ranges.py's measure, the same code), and the places of an
    ``Advice`` when one is given (validation included). Only the ``keep`` with the least headroom
    and the moved ones are made into Places (a 100k-row file has 100k places)."""
    reasons: dict[tuple[str, str], str] = {}
    record = [r for r in rows if "module" in r and "ranges" in r and r.get("policy") == "lower_precision_fp"]
    if record and all(not (set(r["ran_in"]) - {"float32", "float64"}) for r in record):
        for m in measure([r for r in record if _may_move(r["ranges"])], "float16", ADVISOR_MARGIN_BITS):
            if m.range_reason is not None:
                reasons[(m.place.module, m.place.op)] = f"by ranges: {m.range_reason}"
    for moved in getattr(advice, "moved", ()):
        reasons[(moved.module, moved.op)] = f"by {moved.by}: {moved.reason}"
    keyed = []
    log2 = math.log2
    for row in rows:
        ranges = row.get("ranges")
        value = row.get("output_max_abs")
        if value is None and ranges:
            value = ranges.get("output_max_abs")
        if value is None:
            continue
        value = float(value)
        module = row.get("module")
        keyed.append((log2(FLOAT16_MAX / value) if value > 0 else math.inf, module or "", row["op"],
                      row.get("policy", ""), module, value, ranges))
    order = operator.itemgetter(0, 1, 2, 3)

    def place(bits: float, _: str, op: str, policy: str, module: str | None, value: float,
              ranges: Mapping[str, Any] | None) -> Place:
        reason = reasons.get((module, op), "") if module is not None else ""
        return Place(module, op, policy, value, bits, ranges, reason)

    moved = sorted((k for k in keyed if k[4] is not None and (k[4], k[2]) in reasons), key=order)
    return Headroom([place(*k) for k in heapq.nsmallest(keep, keyed, key=order)], [place(*k) for k in moved],
                    sum(1 for k in keyed if k[0] < 0), len(keyed))


# Note [the advisor's candidates]: measure (_core/ranges.py) gives a place a range reason only when its
# max |in| or |out| is within the margin of float16's largest value, some of its output elements
# are over the range, or a share of them under float16's smallest subnormal. A record has one row
# per place (the reader refuses an (op, rule, module) listed twice), so the rows that can meet
# none of these are left out before measuring (a 100k-row record has few candidates); the bound
# is one bit wider than the margin, so rounding cannot drop a place.
_CANDIDATE = FLOAT16_MAX / 2.0 ** (ADVISOR_MARGIN_BITS + 1)


def _may_move(ranges: Mapping[str, Any]) -> bool:
    if ranges.get("float16_overflow") or ranges.get("float16_underflow"):
        return True
    big_in, big_out = ranges.get("input_max_abs"), ranges.get("output_max_abs")
    return (big_in is not None and big_in >= _CANDIDATE) or (big_out is not None and big_out >= _CANDIDATE)


# --- non-finite events -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    module: str | None
    op: str
    policy: str
    count: int
    line: str
    message: str


def events(rows: Iterable[Mapping[str, Any]]) -> list[Event]:
    """Rows with non-finite outputs, most first, with the first event's user line and message
    (Note [events in the file] in runtime/torch/insight/stats_table.h; present when the watch was on)."""
    found = []
    for row in rows:
        if row.get("nonfinite", 0) > 0:
            first = row.get("first_nonfinite") or {}
            found.append(Event(row.get("module"), row["op"], row.get("policy", ""), row["nonfinite"],
                               first.get("line", ""), first.get("message", "")))
    return sorted(found, key=lambda e: (-e.count, e.module or "", e.op))


# --- two files ---------------------------------------------------------------------------------------

DIFF_FIELDS = ("policy", "calls", "ran in", "casts", "cast bytes", "fp8 / skipped", "non-finite", "max |out|",
               "f16 headroom", "fp8 skipped because")
DIFF_TEXT = ("policy", "ran in", "fp8 skipped because")  # the fields that are not numbers


def _diff_cells(row: Mapping[str, Any] | None) -> list[str]:
    if row is None:
        return ["-"] * len(DIFF_FIELDS)
    return [row.get("policy", "") or "-", str(row["calls"]), ran_in_text(row["ran_in"]), str(row["casts"]),
            str(row["cast_bytes"]), fp8_text(row), nonfinite_text(row), magnitude(row.get("output_max_abs")),
            headroom_text(row.get("output_max_abs")), fp8_skipped_text(row)]


def diff(a: Sequence[Mapping[str, Any]],
         b: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[str, str, str, list[str], list[str]]], int]:
    """Per (module, op), the rows whose figures differ between two files: (status, module, op,
    cells in A, cells in B), status ``changed``, ``added`` or ``removed``; and how many are the
    same. An op under another rule in B (a policy moved it) is one changed place."""
    def keyed(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:
            key = (module_text(row), row["op"])
            into = out.get(key)
            if into is None:
                into = out[key] = {"op": row["op"], "ran_in": {}, "output_max_abs": None}
                if "policy" in row:
                    into["policy"] = row["policy"]
            else:
                into["policy"] = " + ".join(sorted({into.get("policy", ""), row.get("policy", "")}))
            _add(into, row)
        return out

    left, right = keyed(a), keyed(b)
    changed, same = [], 0
    for key in sorted(set(left) | set(right)):
        cells_a, cells_b = _diff_cells(left.get(key)), _diff_cells(right.get(key))
        if cells_a == cells_b:
            same += 1
            continue
        status = "added" if key not in left else "removed" if key not in right else "changed"
        changed.append((status, key[0], key[1], cells_a, cells_b))
    return changed, same
