"""A program's precision map: what each op of an exported program runs in, and the casts into it,
per module and per op (``autocastgen precision-map PROGRAM.pt2``, docs/export.md).

It reads the graph alone (the dtypes torch.export recorded for every value, the modules each node
ran in), so it works for any exported program, ours or not; the policy's record (Note [the
program's record] in bake.py) adds what decided the casts and the weights stored in lower
precision.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from .._core.terminal import shown
from .program import graph_modules, recorded

_CAST = torch.ops.aten._to_copy.default


def _dtype_name(dtype: torch.dtype | None) -> str:
    return str(dtype).removeprefix("torch.")


def _floating_dtype(value: Any) -> torch.dtype | None:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.dtype
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _floating_dtype(item)
            if found is not None:
                return found
    return None


def _module_of(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return str(list(stack.values())[-1][0]) if stack else ""


def _is_cast(node: torch.fx.Node) -> bool:
    return node.target is _CAST and "dtype" in node.kwargs


def _computes(node: torch.fx.Node) -> bool:
    """An op that computes floating values: not a cast, a view or an alias of its input."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or _is_cast(node):
        return False
    if any(ret.alias_info is not None for ret in target._schema.returns):
        return False
    return _floating_dtype(node.meta.get("val")) is not None


def precision_map(program: torch.export.ExportedProgram) -> dict[str, Any]:
    """``{"record": the policy's record or None, "rows": [...], "casts": N}``: one row per (module,
    op) with its calls, the dtypes it ran in (its floating output's) and the casts into it
    (``"float32->bfloat16": n``)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    casts = 0
    for module in graph_modules(program):
        for node in module.graph.nodes:
            if node.op == "call_function" and _is_cast(node):
                casts += 1
            if not _computes(node):
                continue
            key = (_module_of(node), node.target._schema.name)
            row = rows.setdefault(key, {"module": key[0], "op": key[1], "calls": 0, "ran_in": Counter(),
                                        "casts_in": Counter()})
            row["calls"] += 1
            row["ran_in"][_dtype_name(_floating_dtype(node.meta["val"]))] += 1
            for source in node.all_input_nodes:
                if source.op == "call_function" and _is_cast(source):
                    before = _floating_dtype(source.args[0].meta.get("val")) if source.args else None
                    after = source.kwargs["dtype"]
                    row["casts_in"][f"{_dtype_name(before) if before else '?'}->{_dtype_name(after)}"] += 1
    ordered = [
        {**row, "ran_in": dict(sorted(row["ran_in"].items())), "casts_in": dict(sorted(row["casts_in"].items()))}
        for _, row in sorted(rows.items())
    ]
    return {"record": recorded(program), "rows": ordered, "casts": casts}


def by_op(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows summed over modules."""
    merged: dict[str, dict[str, Any]] = {}
    for row in rows:
        into = merged.setdefault(row["op"], {"op": row["op"], "calls": 0, "ran_in": Counter(), "casts_in": Counter()})
        into["calls"] += row["calls"]
        into["ran_in"].update(row["ran_in"])
        into["casts_in"].update(row["casts_in"])
    return [{**row, "ran_in": dict(sorted(row["ran_in"].items())), "casts_in": dict(sorted(row["casts_in"].items()))}
            for _, row in sorted(merged.items())]


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counter.items()) or "-"


def format_text(name: str, mapped: dict[str, Any], per_module: bool) -> str:
    """The map as a table, as `autocastgen stats` prints its rows. Module paths, op names, the
    file's and the policies' names come from the program: shown escaped (Note [names on a terminal])."""
    record = mapped["record"]
    rows = mapped["rows"] if per_module else by_op(mapped["rows"])
    lines = []
    if record is None:
        lines.append(f"{shown(name)}: no autocastgen policy recorded (a program autocastgen.export did not make)")
    else:
        lines.append(f"{shown(name)}: {shown(record['device'])} {shown(record['dtype'])}, policy "
                     f"{shown(', '.join(record['policies']))} (digest {shown(record['digest'])}), "
                     f"torch {shown(record['torch'])}")
        stored = record.get("stored_in_lower_precision") or {}
        if stored:
            counts = shown(_counts(Counter(stored.values())))
            lines.append(f"stored in lower precision: {len(stored)} tensors ({counts})")
    lines.append(f"{len(rows)} rows ({'module, op' if per_module else 'op'}); {mapped['casts']} casts in the graph")
    header = (["module"] if per_module else []) + ["op", "calls", "ran in", "casts in"]
    table = [header] + [[shown(cell) for cell in ([row["module"]] if per_module else []) +
                         [row["op"], str(row["calls"]), _counts(row["ran_in"]), _counts(row["casts_in"])]]
                        for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    return "\n".join(lines)
