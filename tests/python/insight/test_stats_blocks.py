"""A block's table is the block's (Note [a block's table] in runtime/torch/insight/stats.cpp):
`stats()` and `record()` blocks in sequence and nested, their files, tables and the report agree
and hold only what ran while the block was open; each row keeps its first non-finite event with
its module and line (Note [events in the file]).

Every case runs in a fresh interpreter (child_process.py). ctest sets AUTOCASTGEN_BUILD_DIR and
AUTOCASTGEN_CLI; by hand:
  AUTOCASTGEN_BUILD_DIR=build-h40 AUTOCASTGEN_CLI=build-h40/bin/autocastgen python3 -m pytest tests/python/insight/test_stats_blocks.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import child_process
from built_tree import require_built
from child_process import last_json

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = os.environ.get("AUTOCASTGEN_CLI", str(BUILD / "bin" / "autocastgen"))
# The build's package and CLI: an error under ctest where missing (built_tree.py).
require_built(BUILD, "python/autocastgen/__init__.py", CLI)

# Runtime policies on aten::linear (and PyTorch's CPU kernels for the rest): counted by the drivers.
PRELUDE = """
import json, sys, torch, autocastgen
autocastgen.register_runtime_policy("aten::linear", "lower_precision_fp", "cpu")
torch.manual_seed(0)
def model(width):
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 4)).eval()
def run(m, x, dtype=torch.float16):
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        return m(x)
def read(path):
    with open(path) as f:
        return json.load(f)
"""


def run_child(body: str) -> dict:
    return last_json(child_process.run_child(BUILD, PRELUDE, body))


def test_a_record_after_a_stats_block_holds_only_its_own_rows(tmp_path):
    # The case: a float16 aten::linear of model A counted earlier must not reach B's record.
    path = tmp_path / "b.record.json"
    out = run_child(f"""
        a, b = model(16), model(32)
        with autocastgen.stats() as first:
            run(a, torch.randn(4, 8))
        with autocastgen.attach(b), autocastgen.record({str(path)!r}) as r:
            run(b, torch.randn(4, 8) * 100)
        print(json.dumps({{"first": first.table, "record": r.table, "file": read({str(path)!r}),
                          "process": autocastgen.insight.snapshot()}}))
    """)
    assert out["file"] == out["record"]
    assert [(e.get("module"), e["op"], e["calls"], e["ran_in"]) for e in out["record"]["ops"]] == [
        ("0", "aten::linear", 1, {"float32": 1}), ("2", "aten::linear", 1, {"float32": 1})]
    assert [(e["op"], e["ran_in"]) for e in out["first"]["ops"]] == [("aten::linear", {"float16": 2})]
    # The process-wide table still has both (an AUTOCASTGEN_STATS file gets everything).
    assert sum(e["calls"] for e in out["process"]["ops"]) == 4
    policy = tmp_path / "base.yaml"
    policy.write_text("autocast: {device: cpu, lower_precision: [float16, bfloat16]}\n"
                      "lists:\n  lower_precision_fp: [linear]\n")
    advised = subprocess.run([CLI, "advise", str(path), "--policy", str(policy), "--dtype", "float16",
                              "-o", str(tmp_path / "advised.yaml")], capture_output=True, text=True, timeout=120)
    assert advised.returncode == 0, advised.stderr


def test_nested_blocks_hold_their_own_counts_and_extremes(tmp_path):
    out = run_child(f"""
        m = model(16)
        with autocastgen.stats({str(tmp_path / 'outer.json')!r}, ranges=True) as outer:
            run(m, torch.randn(4, 8) * 1000)
            with autocastgen.stats({str(tmp_path / 'inner.json')!r}, ranges=True) as inner:
                run(m, torch.randn(4, 8))
            run(m, torch.randn(4, 8) * 1000)
        with autocastgen.stats(ranges=True) as after:
            run(m, torch.randn(4, 8))
        print(json.dumps({{"outer": outer.table, "inner": inner.table, "after": after.table,
                          "outer_file": read({str(tmp_path / 'outer.json')!r}),
                          "inner_file": read({str(tmp_path / 'inner.json')!r})}}))
    """)
    assert out["outer_file"] == out["outer"] and out["inner_file"] == out["inner"]
    (outer,), (inner,), (after,) = out["outer"]["ops"], out["inner"]["ops"], out["after"]["ops"]
    assert (outer["calls"], inner["calls"], after["calls"]) == (6, 2, 2)
    # The inner block's largest values are its own, not the outer runs' (x 1000) before it.
    assert inner["output_max_abs"] < outer["output_max_abs"] / 50
    assert inner["ranges"]["input_max_abs"] < outer["ranges"]["input_max_abs"] / 50
    assert after["output_max_abs"] < outer["output_max_abs"] / 50


def test_each_row_keeps_its_first_nonfinite_event(tmp_path):
    path = tmp_path / "watch.json"
    out = run_child(f"""
        m = model(16)
        with torch.no_grad():
            m[2].weight.fill_(1e4)
        with autocastgen.attach(m), autocastgen.watch("record"), autocastgen.stats({str(path)!r}) as s:
            run(m, torch.randn(4, 8) * 1000)  # the second Linear overflows float16
        print(json.dumps({{"table": s.table, "file": read({str(path)!r})}}))
    """)
    assert out["file"] == out["table"]
    rows = {e["module"]: e for e in out["table"]["ops"]}
    assert "first_nonfinite" not in rows["0"]
    event = rows["2"]["first_nonfinite"]
    assert rows["2"]["nonfinite"] == 1
    assert event["message"].startswith("autocastgen: non-finite output: aten::linear (rule lower_precision_fp, "
                                       "ran in float16) returned inf in output 0")
    assert "in module '2'" in event["message"] and event["message"].endswith(f"; called from {event['line']}")
    assert event["line"]
