"""The non-finite watch, the range record and record-only mode from Python (autocastgen.watch,
autocastgen.record, AUTOCASTGEN_FINITE, AUTOCASTGEN_RECORD; docs/insight.md).

Note [the overflowing model]: nn.Linear(8, 4) with every weight 300 and no bias, on a 2x8 input of
300s: each output is 8 * 300 * 300 = 720000, above float16's largest finite value (65504), so under
float16 autocast aten::linear returns inf, and in float32 it returns 720000 (log2(65504 / 720000)
= -3.46 bits of headroom). The user's line is the one calling the module (`model` below); the
frames inside torch.nn are skipped.

Every case runs in a fresh interpreter: loading a generated library cannot be undone.
ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/insight/test_finite_watch.py
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import textwrap

import pytest

import child_process
from built_tree import require_built
from child_process import last_json

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
CPU_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu.so"
OWN_STATE_LIBRARY = BUILD / "lib" / "libautocastgen_torch_cpu_own_state.so"

# The build's runtime, generated CPU libraries (the own-state one too) and package: an error under
# ctest where missing (built_tree.py).
require_built(BUILD, "python/autocastgen/__init__.py", RUNTIME, CPU_LIBRARY, OWN_STATE_LIBRARY)

PRELUDE = textwrap.dedent(
    """
    import json, sys, warnings
    import torch

    lin = torch.nn.Linear(8, 4, bias=False)
    with torch.no_grad():
        lin.weight.fill_(300.0)
    big = torch.full((2, 8), 300.0)
    small = torch.full((2, 8), 1.0)

    def model(x):
        return torch.relu(lin(x))  # LINEAR

    torch_fp16 = lambda: torch.autocast("cpu", dtype=torch.float16)
    """
)
LINEAR_LINE = PRELUDE.splitlines().index(next(s for s in PRELUDE.splitlines() if s.endswith("# LINEAR"))) + 1

# How each state is set up: what the child loads, and the float16 autocast scope it runs under.
STATES = {
    "generated": (f"torch.ops.load_library({str(CPU_LIBRARY)!r})\nimport autocastgen", "torch_fp16"),
    "own_state": (
        f"torch.ops.load_library({str(OWN_STATE_LIBRARY)!r})\nimport autocastgen",
        'lambda: autocastgen.autocast("cpu", dtype=torch.float16)',
    ),
    "runtime_policy": (
        "import autocastgen\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')  # replacing PyTorch's kernel warns (tested elsewhere)\n"
        "    autocastgen.register_runtime_policy('aten::linear', 'lower_precision_fp', 'cpu')",
        "torch_fp16",
    ),
}


def run_child(body: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return child_process.run_child(BUILD, PRELUDE, body, env, check)


@pytest.mark.parametrize("state", sorted(STATES))
def test_raise_names_the_op_the_rule_the_inputs_and_the_line(state):
    setup, scope = STATES[state]
    result = run_child(
        setup
        + f"""
scope = {scope}
with autocastgen.watch("raise"):
    with scope():
        assert model(small).dtype == torch.float16  # finite: no error
        try:
            model(big)
            error = None
        except RuntimeError as e:
            error = str(e)
print(json.dumps(error))
"""
    )
    error = last_json(result)
    assert error is not None, "raise mode did not raise"
    assert error.startswith(
        "autocastgen: non-finite output: aten::linear (rule lower_precision_fp, ran in float16) returned inf in "
        "output 0 (float16 [2, 4]); inputs: float16 [2, 8] max |x| 300, float16 [4, 8] max |x| 300; "
        f"called from <string>:{LINEAR_LINE}"
    ), error


def test_warn_once_per_op_and_record_mode_counts_quietly():
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with autocastgen.stats() as s, autocastgen.watch("warn"), torch_fp16():
                for _ in range(3):
                    model(big)                  # three non-finite aten::linear outputs, one warning
                torch.mm(big, big.t())          # another op: its own warning
                model(small)
        warned = [str(w.message) for w in caught if "non-finite" in str(w.message)]
        first = autocastgen.insight.first_nonfinite()
        autocastgen.insight.reset()
        with warnings.catch_warnings(record=True) as quiet:
            warnings.simplefilter("always")
            with autocastgen.watch("record"), torch_fp16():
                model(big)
        print(json.dumps({{"warned": warned, "first": first, "table": s.table,
                          "quiet": [str(w.message) for w in quiet], "recorded": autocastgen.insight.first_nonfinite(),
                          "mode": autocastgen.insight.finite_mode()}}))
        """
    )
    out = last_json(result)
    assert [w.split(" (")[0] for w in out["warned"]] == [
        "autocastgen: non-finite output: aten::linear",
        "autocastgen: non-finite output: aten::mm",
    ], out["warned"]
    assert out["warned"][0].startswith(out["first"])  # PyTorch appends where the C++ warning came from
    linear = next(e for e in out["table"]["ops"] if e["op"] == "aten::linear")
    assert (linear["calls"], linear["outputs_checked"], linear["nonfinite"]) == (4, 4, 3)
    assert linear["output_max_abs"] == 2400.0  # the finite call: 8 * 300 * 1
    assert out["quiet"] == []
    assert "aten::linear" in out["recorded"] and f"<string>:{LINEAR_LINE}" in out["recorded"]
    assert out["mode"] == "off"  # the watch blocks restored it


def test_record_only_casts_nothing_and_flags_the_float16_overflow():
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        with autocastgen.record() as r:
            with torch_fp16():
                y = model(big)
        with torch_fp16():
            after = model(small).dtype
        print(json.dumps({{"dtype": str(y.dtype), "after": str(after), "linear": r.ops["aten::linear"]}}))
        """
    )
    out = last_json(result)
    assert out["dtype"] == "torch.float32"  # record-only: nothing cast
    assert out["after"] == "torch.float16"  # casting again once the block ended
    linear = out["linear"]
    assert (linear["ran_in"], linear["casts"], linear["nonfinite"]) == ({"float32": 1}, 0, 0)
    assert linear["output_max_abs"] == 720000.0
    assert linear["ranges"] == {
        "calls": 1,
        "input_max_abs": 300.0,
        "input_min_abs": 300.0,
        "output_max_abs": 720000.0,
        "output_min_abs": 720000.0,
        "output_elements": 8,
        "float16_overflow": 8,
        "float16_underflow": 0,
        "bfloat16_overflow": 0,
        "bfloat16_underflow": 0,
    }


def test_record_env_var_writes_the_ranges_at_exit(tmp_path):
    path = tmp_path / "ranges.json"
    result = run_child(
        f"""
        torch.ops.load_library({str(CPU_LIBRARY)!r})
        import autocastgen
        with torch_fp16():
            y = model(big)
        print(json.dumps(str(y.dtype)))
        """,
        env={"AUTOCASTGEN_RECORD": str(path)},
    )
    assert last_json(result) == "torch.float32"
    table = json.loads(path.read_text())
    linear = next(e for e in table["ops"] if e["op"] == "aten::linear")
    assert linear["ranges"]["float16_overflow"] == 8 and linear["output_max_abs"] == 720000.0


def test_bad_values_warn_or_raise_and_never_stop_the_run(tmp_path):
    path = tmp_path / "missing-dir" / "ranges.json"
    result = run_child(
        """
        import autocastgen
        errors = []
        for bad in (lambda: autocastgen.insight.set_finite_mode("loud"), lambda: autocastgen.watch("loud")):
            try:
                bad()
            except ValueError as e:
                errors.append(str(e))
        model(small)
        print(json.dumps({"mode": autocastgen.insight.finite_mode(), "errors": errors}))
        """,
        env={"AUTOCASTGEN_FINITE": "loud", "AUTOCASTGEN_RECORD": str(path)},
    )
    out = last_json(result)
    assert out["mode"] == "off"
    assert len(out["errors"]) == 2 and all("'loud' is not a mode" in e for e in out["errors"]), out["errors"]
    assert (
        "autocastgen: warning: AUTOCASTGEN_FINITE='loud' is not a mode of the non-finite watch (off, record, warn or "
        "raise); the watch stays off" in result.stderr
    )
    assert f"could not write the statistics to '{path}' (AUTOCASTGEN_RECORD): No such file or directory" in result.stderr
