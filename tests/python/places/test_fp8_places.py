"""fp8 by place (docs/fp8.md, "fp8 by place"): an fp8 entry's `modules:` condition and the
`modules:` section's `{fp8: on}` / `{fp8: off}`, in runtime policies, against the same GEMMs run
under a policy without fp8 (bit for bit) and under an fp8 list that applies everywhere (bit for
bit), with the statistics of each place.

Each case runs in a fresh interpreter (a loaded policy stays loaded). ctest sets
AUTOCASTGEN_BUILD_DIR; by hand: AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/places/test_fp8_places.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import textwrap

import pytest
import torch

import child_process
from built_tree import require_built
from child_process import last_json
from exact import CHILD_IMPORT

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
RUNTIME = BUILD / "lib" / "libautocastgen_runtime_torch.so"
CLI = pathlib.Path(os.environ.get("AUTOCASTGEN_CLI", BUILD / "bin" / "autocastgen"))

# The build's runtime and package: an error under ctest where missing (built_tree.py).
require_built(BUILD, "python/autocastgen/__init__.py", RUNTIME)
pytestmark = [
    pytest.mark.skipif(not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"),
                       reason=f"torch {torch.__version__} has no CPU _scaled_mm kernel (2.4, 2.7)"),
]

HEADER = "autocast: {device: cpu, lower_precision: [bfloat16], fp8: {scaling: current}}\n"

# Two layers of an MLP block and a projection, then a head; every GEMM fp8 can take (multiples
# of 16). A forward hook records each Linear's input and output.
PRELUDE = CHILD_IMPORT + textwrap.dedent(
    """
    import json
    import torch
    import autocastgen

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(32, 64)
            self.down = torch.nn.Linear(64, 32)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = Mlp()
            self.proj = torch.nn.Linear(32, 32)

        def forward(self, x):
            return self.proj(x + self.mlp(x))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Layer(), Layer()])
            self.head = torch.nn.Linear(32, 16)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    def run(policy_text):
        '''Each Linear's (input, output) under `policy_text`, and the statistics rows.'''
        autocastgen.clear_runtime_policies()
        autocastgen.load_policy(policy_text)
        torch.manual_seed(0)
        model = Model()
        seen = {}
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(lambda m, args, out, name=name: seen.__setitem__(name, (args[0], out)))
        torch.manual_seed(1)
        x = torch.randn(16, 32)
        with torch.no_grad(), autocastgen.attach(model), autocastgen.stats() as s, torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
        rows = sorted((r["module"], r["policy"], sorted(r["ran_in"].items())) for r in s.table["ops"])
        return model, seen, rows

    def alone(policy_text, model, name, x):
        '''One Linear of `model` called by itself (outside every module) under `policy_text`.'''
        autocastgen.clear_runtime_policies()
        autocastgen.load_policy(policy_text)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model.get_submodule(name)(x)

    LINEARS = ["layers.0.mlp.up", "layers.0.mlp.down", "layers.0.proj",
               "layers.1.mlp.up", "layers.1.mlp.down", "layers.1.proj", "head"]
    """
)
NO_FP8 = HEADER + "lists:\n  lower_precision_fp: [linear]\n"
ALL_FP8 = HEADER + "lists:\n  fp8: [linear]\n"


def run_child(body: str) -> dict:
    return last_json(child_process.run_child(BUILD, PRELUDE, body, None, True))


def compare_body(policy: str) -> str:
    """Runs `policy`, then each Linear alone on the input it saw under the policy without fp8 and
    under the everywhere-fp8 one: which of the two it equals, bit for bit."""
    return f"""
        model, seen, rows = run({policy!r})
        same = {{}}
        for name in LINEARS:
            x, y = seen[name]
            lower = alone({NO_FP8!r}, model, name, x)
            fp8 = alone({ALL_FP8!r}, model, name, x)
            assert not exact(lower, fp8), name  # the two paths differ, so exactness says which ran
            same[name] = "fp8" if exact(y, fp8) else "lower" if exact(y, lower) else "neither"
        print(json.dumps({{"same": same, "rows": rows}}))
        """


FP8 = [["float8_e4m3fn", 1]]
BF16 = [["bfloat16", 1]]


def test_an_fp8_entry_scoped_to_modules_runs_fp8_inside_and_lower_precision_elsewhere() -> None:
    policy = HEADER + textwrap.dedent(
        """
        lists:
          lower_precision_fp: [linear]
          fp8:
            - {op: linear, modules: ["layers.*.mlp"]}
        """
    )
    out = run_child(compare_body(policy))
    assert out["same"] == {"layers.0.mlp.up": "fp8", "layers.0.mlp.down": "fp8", "layers.0.proj": "lower",
                           "layers.1.mlp.up": "fp8", "layers.1.mlp.down": "fp8", "layers.1.proj": "lower",
                           "head": "lower"}
    assert out["rows"] == [["head", "lower_precision_fp", BF16], ["layers.0.mlp.down", "fp8", FP8],
                           ["layers.0.mlp.up", "fp8", FP8], ["layers.0.proj", "lower_precision_fp", BF16],
                           ["layers.1.mlp.down", "fp8", FP8], ["layers.1.mlp.up", "fp8", FP8],
                           ["layers.1.proj", "lower_precision_fp", BF16]]


def test_the_section_turns_fp8_off_and_on_by_place_innermost_first() -> None:
    # Both layers off, but layers.1.mlp on again (the innermost module an fp8 value matches
    # decides; "layers.*" would match the Linears themselves, innermost of all); head is in no
    # fp8 section: fp8.
    policy = HEADER + textwrap.dedent(
        """
        lists:
          fp8: [linear]
        modules:
          layers.0: {fp8: off}
          layers.1: {fp8: off}
          layers.1.mlp: {fp8: on}
        """
    )
    out = run_child(compare_body(policy))
    assert out["same"] == {"layers.0.mlp.up": "lower", "layers.0.mlp.down": "lower", "layers.0.proj": "lower",
                           "layers.1.mlp.up": "fp8", "layers.1.mlp.down": "fp8", "layers.1.proj": "lower",
                           "head": "fp8"}
    # A GEMM skipped because of its place stays in the fp8 row, ran in the lower-precision dtype.
    assert out["rows"] == [["head", "fp8", FP8], ["layers.0.mlp.down", "fp8", BF16], ["layers.0.mlp.up", "fp8", BF16],
                           ["layers.0.proj", "fp8", BF16], ["layers.1.mlp.down", "fp8", FP8],
                           ["layers.1.mlp.up", "fp8", FP8], ["layers.1.proj", "fp8", BF16]]


def test_precedence_of_entry_conditions_and_the_section() -> None:
    # The entry applies inside layers.*; the section turns layers.0.mlp off; `{fp8: on}` on head
    # does not widen the entry's condition (head stays lower_precision_fp); a precision value and
    # an fp8 value are separate dimensions: layers.1 in fp32 (autocast off) wins over fp8 inside.
    policy = HEADER + textwrap.dedent(
        """
        lists:
          lower_precision_fp: [linear]
          fp8:
            - {op: linear, modules: ["layers.*"]}
        modules:
          layers.0.mlp: {fp8: off}
          head: {fp8: on}
          layers.1.proj: fp32
        """
    )
    out = run_child(
        f"""
        model, seen, rows = run({policy!r})
        same = {{}}
        for name in LINEARS:
            x, y = seen[name]
            lower = alone({NO_FP8!r}, model, name, x)
            fp8 = alone({ALL_FP8!r}, model, name, x)
            same[name] = "fp8" if exact(y, fp8) else "lower" if exact(y, lower) else str(y.dtype)
        print(json.dumps({{"same": same, "rows": rows}}))
        """
    )
    assert out["same"] == {"layers.0.mlp.up": "lower", "layers.0.mlp.down": "lower", "layers.0.proj": "fp8",
                           "layers.1.mlp.up": "fp8", "layers.1.mlp.down": "fp8", "layers.1.proj": "torch.float32",
                           "head": "lower"}
    rows = {r[0]: (r[1], r[2]) for r in out["rows"]}
    assert rows["layers.0.mlp.up"] == ("fp8", BF16)  # skipped by place
    assert rows["layers.0.proj"] == ("fp8", FP8)
    assert rows["head"] == ("lower_precision_fp", BF16)
    assert rows["layers.1.proj"] == ("fp8", [["float32", 1]])  # autocast off inside: untouched, counted


def test_check_prints_the_section_and_the_manifest_carries_it(tmp_path: pathlib.Path) -> None:
    policy = tmp_path / "fp8_places.yaml"
    policy.write_text(HEADER + textwrap.dedent(
        """
        lists:
          lower_precision_fp: [linear]
          fp8:
            - {op: linear, modules: ["layers.*.mlp"]}
        modules:
          layers.0.mlp: {fp8: off}
        """
    ))
    text = subprocess.run([str(CLI), "check", "--policy", str(policy)], capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert "{layers.0.mlp: {fp8: off}}" in text.stdout
    import json
    data = json.loads(subprocess.run([str(CLI), "check", "--policy", str(policy), "--format", "json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert data["modules"] == {"layers.0.mlp": "{fp8: off}"}
    entries = [e for e in data["entries"] if e["policy"] == "fp8"]
    assert entries and entries[0]["modules"] == ["layers.*.mlp"]
