"""fp8 under torch.compile: a fullgraph forward and backward of nn.Linear, torch.mm and torch.addmm
under torch.autocast("cpu") with an fp8 runtime policy (data/fp8_cpu.yaml: current scaling,
data/fp8_cpu_delayed.yaml: delayed) gives eager fp8's outputs and gradients bit for bit with
backend="aot_eager" and to bfloat16 rounding with Inductor; delayed scaling's amax history advances
as in eager, once per weight per step (Note [fp8 under tracing] in runtime/torch/fp8/operand.cpp).
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch._inductor.config

if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
    pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel", allow_module_level=True)
if not hasattr(torch, "compile"):
    pytest.skip(f"torch {torch.__version__} has no torch.compile", allow_module_level=True)

from test_fp8_gemm import act, param  # noqa: E402

from exact import assert_exact  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
POLICIES = {"current": "fp8_cpu.yaml", "delayed": "fp8_cpu_delayed.yaml"}
STEPS = 3


@pytest.fixture(params=sorted(POLICIES))
def scaling(request, ops):
    # PyTorch's compile caches (AOTAutograd's, Inductor's FX graph cache, on disk) key on the
    # traced graph, not on the policy loaded: both policies trace the same Dynamo graph, so a cached
    # result of one would serve the other (docs/fp8.md, "torch.compile").
    no_caches = torch._inductor.config.patch(force_disable_caches=True)
    no_caches.__enter__()
    assert ops.load_runtime_policy_file(os.path.join(DATA, POLICIES[request.param])) == 3
    torch._dynamo.reset()
    ops.fp8_clear_weight_cache()
    ops.fp8_reset_delayed_scaling_state()
    yield request.param
    ops.clear_runtime_policies()
    ops.fp8_clear_weight_cache()
    torch._dynamo.reset()
    no_caches.__exit__(None, None, None)


class Net(torch.nn.Module):
    """One fp8 GEMM of each kind: linear with a bias (the GEMM's bias), mm, addmm with beta != 1
    (the sum made in float32)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 48)
        self.w2 = param(48, 32, seed=2)
        self.b3 = param(16, seed=3)
        self.w3 = param(32, 16, seed=4)

    def weights(self):
        return (self.linear.weight, self.w2, self.w3)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.linear(x)
            z = torch.mm(y, self.w2)
            return torch.addmm(self.b3, z, self.w3, beta=0.5, alpha=2.0)


def train(ops, net, fn):
    """STEPS steps of fn (forward, backward, an in-place update that changes every weight): per
    step the output, every gradient and each weight's delayed-scaling state; and the weight
    cache's (quantisations, hits)."""
    ops.fp8_reset_weight_cache_stats()
    steps = []
    for step in range(STEPS):
        x = act(32, 64, seed=10 + step)
        gy = act(32, 16, dtype=torch.bfloat16, seed=20 + step, requires_grad=False)
        out = fn(x)
        out.backward(gy)
        params = list(net.parameters())
        grads = [x.grad] + [p.grad.clone() for p in params]
        states = [ops.fp8_delayed_scaling_state(w) for w in net.weights()]
        steps.append((out.detach(), grads, states))
        with torch.no_grad():
            for p in params:
                p.sub_(0.05 * p.grad)
                p.grad = None
    return steps, ops.fp8_weight_cache_stats()[:2]


def eager_and_compiled(ops, backend):
    net = Net()
    twin = copy.deepcopy(net)
    eager = train(ops, net, net)
    compiled = train(ops, twin, torch.compile(twin, fullgraph=True, backend=backend))
    return eager, compiled


def test_aot_eager_is_bit_identical_to_eager(ops, scaling):
    (eager, eager_cache), (compiled, compiled_cache) = eager_and_compiled(ops, "aot_eager")
    for step, ((out, grads, states), (c_out, c_grads, c_states)) in enumerate(zip(eager, compiled)):
        assert out.dtype == torch.bfloat16
        assert_exact(c_out, out, f"step {step}: output")
        for i, (got, want) in enumerate(zip(c_grads, grads)):
            assert_exact(got, want, f"step {step}: gradient {i}")
        assert c_states == states, f"step {step}: delayed-scaling state"
        if scaling == "delayed":
            # The history moved once per weight per step.
            assert [casts for _, _, casts in c_states] == [step + 1] * 3
    assert compiled_cache == eager_cache == [3 * STEPS, 0]


def test_inductor_is_eager_to_bfloat16_rounding(ops, scaling):
    (eager, _), (compiled, _) = eager_and_compiled(ops, "inductor")
    for step, ((out, grads, states), (c_out, c_grads, c_states)) in enumerate(zip(eager, compiled)):
        tol = {"rtol": 1.6e-2, "atol": 1e-2}
        torch.testing.assert_close(c_out.float(), out.float(), **tol, msg=f"step {step}: output")
        for i, (got, want) in enumerate(zip(c_grads, grads)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.float(), want.float(), **tol, msg=f"step {step}: gradient {i}")
        for (history, _scale, casts), (c_history, _c_scale, c_casts) in zip(states, c_states):
            assert c_casts == casts, (step, states, c_states)
            torch.testing.assert_close(torch.tensor(c_history), torch.tensor(history), **tol)


@pytest.mark.parametrize("route", ["decompose", "opaque"])
def test_the_graph_holds_the_quantisation(ops, scaling, route, monkeypatch):
    """Weights through fp8_quantize_weight; activations and output gradients as PyTorch ops that
    Inductor can fuse (the default), or as fp8_quantize ops (AUTOCASTGEN_FP8_TRACE=opaque): Note
    [fp8 traced route] in runtime/torch/fp8/operand.cpp."""
    monkeypatch.setenv("AUTOCASTGEN_FP8_TRACE", route)
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    from torch._dynamo.backends.common import aot_autograd

    net = Net()
    fn = torch.compile(net, fullgraph=True, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    fn(act(32, 64)).backward(act(32, 16, dtype=torch.bfloat16, requires_grad=False))
    forward, backward = graphs
    assert forward.count("autocastgen.fp8_quantize_weight.default") == 3  # one per weight
    opaque = 3 if route == "opaque" else 0
    assert forward.count("autocastgen.fp8_quantize.default") == opaque  # the activations
    assert backward.count("autocastgen.fp8_quantize.default") == opaque  # each output gradient
    # Decomposed: one amax per activation / gradient, and its saturating cast.
    assert forward.count("aten.amax.default") == 3 - opaque and backward.count("aten.amax.default") == 3 - opaque
    assert forward.count("aten.clamp.default") == 3 - opaque
    assert forward.count("aten._scaled_mm.default") == 3 and backward.count("aten._scaled_mm.default") == 6


def test_an_unknown_route_is_refused(ops, scaling, monkeypatch):
    monkeypatch.setenv("AUTOCASTGEN_FP8_TRACE", "fused")
    fn = torch.compile(Net(), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"AUTOCASTGEN_FP8_TRACE=fused: expected"):
        fn(act(32, 64))


def test_dynamic_shapes_stop_with_what_to_do(ops, scaling):
    net = Net()
    fn = torch.compile(net, fullgraph=True, dynamic=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"concrete shapes.*dynamic=False"):
        fn(act(32, 64))
