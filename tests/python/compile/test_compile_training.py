"""A training step compiled with torch.autocast around the compiled call counts and decides what
eager does: AOTAutograd traces the backward inside the forward's autocast scope
(torch._functorch.config.backward_pass_autocast = "same_as_forward"), eager's backward runs outside
it, and our drivers leave the backward's calls untouched (Note [the backward a trace puts in the
forward's scope] in runtime/torch/state/traced.cpp; docs/compile.md).

ctest sets AUTOCASTGEN_BUILD_DIR; by hand:
  AUTOCASTGEN_BUILD_DIR=build python3 -m pytest tests/python/compile/test_compile_training.py
"""
from __future__ import annotations

import copy
import os
import pathlib

import pytest
import torch

from built_tree import require_built

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
require_built(BUILD, "python/autocastgen/__init__.py")  # an error under ctest where missing

import autocastgen  # noqa: E402
from exact import assert_exact  # noqa: E402

# fp8 for the GEMMs a model calls as torch.mm, bfloat16 for its linears: a linear's backward makes
# two aten::mm calls, which a backward traced in the forward's scope would run in fp8.
FP8_POLICY = """\
autocast:
  device: cpu
  lower_precision: [bfloat16]
  fp8: {scaling: current, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2}
lists:
  fp8: [mm]
  lower_precision_fp: [linear]
"""


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(64, 64) / 8)
        self.lin1, self.lin2 = torch.nn.Linear(64, 64), torch.nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(torch.relu(self.lin1(torch.mm(x, self.w))))


def steps(model: torch.nn.Module, run: torch.nn.Module, count: int = 2) -> tuple[list, list]:
    """`count` training steps, torch.autocast around the forward, backward() after it."""
    out = []
    with autocastgen.stats() as counted:
        for step in range(count):
            torch.manual_seed(10 + step)
            x = torch.randn(32, 64)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = run(x).float().square().mean()
            loss.backward()
            out.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
            with torch.no_grad():
                for p in model.parameters():
                    p.sub_(0.1 * p.grad)
                    p.grad = None
    table = [(e["op"], e["calls"], e["ran_in"], e.get("fp8_skipped")) for e in counted.table["ops"]]
    return out, table


@pytest.fixture
def fp8_policy():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
        pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel")
    autocastgen.load_policy(FP8_POLICY)
    torch._dynamo.reset()
    yield
    autocastgen.clear_runtime_policies()
    torch._dynamo.reset()


@pytest.mark.parametrize("backward_pass_autocast", ["same_as_forward", "off"])
def test_a_compiled_training_step_counts_and_decides_as_eager(fp8_policy, backward_pass_autocast) -> None:
    import torch._functorch.config

    model = Net()
    twin = copy.deepcopy(model)
    eager, eager_table = steps(model, model)
    with torch._functorch.config.patch(backward_pass_autocast=backward_pass_autocast):
        compiled, compiled_table = steps(twin, torch.compile(twin, backend="aot_eager", fullgraph=True))
    assert [row[0] for row in eager_table] == ["aten::linear", "aten::mm"]
    assert compiled_table == eager_table  # no backward mm counted, none in fp8
    assert_exact(compiled, eager)
