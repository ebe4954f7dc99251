"""fp8 as a policy: nn.Linear, F.linear, torch.mm and torch.addmm under torch.autocast("cpu")
run in float8 through the policy's `fp8` list, against a reference written in the tests.

Run twice by ctest, once per route (the two cannot share a process: both take AutocastCPU's
linear, mm and addmm):
- AUTOCASTGEN_FP8_POLICY_LIB: the library add_autocast_ops() generated from data/fp8_cpu.yaml
  (current scaling);
- AUTOCASTGEN_FP8_POLICY_FILE: data/fp8_cpu_delayed.yaml loaded as a runtime policy (delayed
  scaling, a 4-long amax history, margin 1); with neither variable (by hand), this route.
"""
from __future__ import annotations

import contextlib
import json
import math
import os

import pytest
import torch
import torch.nn.functional as F

from conftest import ref_quantize, ref_scale

if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
    pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel", allow_module_level=True)

from test_fp8_gemm import act, assert_close, param, ref_linear, smm  # noqa: E402

from exact import assert_exact  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
LIB = os.environ.get("AUTOCASTGEN_FP8_POLICY_LIB")
POLICY_FILE = os.environ.get("AUTOCASTGEN_FP8_POLICY_FILE") or (
    None if LIB else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "fp8_cpu_delayed.yaml"))
DELAYED = POLICY_FILE is not None
MARGIN = 1 if DELAYED else 0


@pytest.fixture(scope="module", autouse=True)
def route(ops):
    if LIB:
        torch.ops.load_library(LIB)
    else:
        assert ops.load_runtime_policy_file(POLICY_FILE) == 3
    yield
    if POLICY_FILE:
        ops.clear_runtime_policies()


pytestmark = pytest.mark.usefixtures("fresh_fp8_state")


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def backward_all(y, gy, *tensors):
    for t in tensors:
        if t is not None:
            t.grad = None
    y.backward(gy)
    return [None if t is None else t.grad for t in tensors]


def test_nn_linear_and_f_linear_match_the_reference(ops):
    layer = torch.nn.Linear(64, 48)
    x = act(4, 8, 64)
    gy = act(4, 8, 48, dtype=torch.bfloat16, seed=9, requires_grad=False)
    # The first cast of a weight under delayed scaling has no history: it is current-scaled.
    want = ref_linear(x, layer.weight, layer.bias, torch.bfloat16, gy, margin=MARGIN)
    for call in (lambda: layer(x), lambda: F.linear(x, layer.weight, layer.bias)):
        ops.fp8_reset_delayed_scaling_state()
        ops.fp8_clear_weight_cache()
        with autocast():
            y = call()
        assert y.dtype == torch.bfloat16
        grads = backward_all(y, gy, x, layer.weight, layer.bias)
        for name, got, expected in zip(("out", "grad_input", "grad_weight", "grad_bias"), [y.detach(), *grads], want):
            assert_close(got, expected, name)


def ref_mm(a, b, gy, alpha=1.0):
    """Output and gradients of an fp8 mm, written from Note [fp8 autograd]."""
    qa, ia = ref_quantize(a, E4M3, MARGIN)
    qb, ib = ref_quantize(b, E4M3, MARGIN)
    # _scaled_mm wants its second operand column-major on CUDA; the CPU takes either.
    out = smm(qa, qb, ia * alpha, ib, torch.bfloat16, fast=True)
    qg, ig = ref_quantize(gy, E5M2, MARGIN)
    ga = smm(qg, qb.t(), ig * alpha, ib, a.dtype)
    gb = smm(qa.t(), qg, ia * alpha, ig, b.dtype)
    return out, ga, gb


def test_mm_matches_the_reference(ops):
    a, b = act(32, 64), param(64, 48)
    gy = act(32, 48, dtype=torch.bfloat16, seed=4, requires_grad=False)
    with autocast():
        y = torch.mm(a, b)
    grads = backward_all(y, gy, a, b)
    for name, got, expected in zip(("out", "grad_a", "grad_b"), [y.detach(), *grads], ref_mm(a, b, gy)):
        assert_close(got, expected, name)


def test_matmul_keeps_the_autocast_kernel_it_has(ops):
    # PyTorch's CPU autocast casts matmul itself (its lower_precision_fp list), and the policy does
    # not replace that kernel: matmul runs in bfloat16, not in fp8 (docs/fp8.md, "Limits").
    a, b = act(32, 64, requires_grad=False), param(64, 48)
    with autocast():
        y = torch.matmul(a, b)
    assert_exact(y, torch.mm(a.bfloat16(), b.detach().bfloat16()))
    assert ops.fp8_weight_cache_stats()[0] == 0


def test_addmm_matches_the_reference(ops):
    bias, a, b = param(48, seed=7), act(32, 64), param(64, 48)
    gy = act(32, 48, dtype=torch.bfloat16, seed=4, requires_grad=False)
    with autocast():
        y = torch.addmm(bias, a, b, beta=0.5, alpha=2.0)
    assert y.dtype == torch.bfloat16
    grads = backward_all(y, gy, bias, a, b)
    prod, ga, gb = ref_mm(a, b, gy, alpha=2.0)
    # beta != 1: the product in float32, beta * self added in float32, rounded once (fp8.h).
    qa, ia = ref_quantize(a, E4M3, MARGIN)
    qb, ib = ref_quantize(b, E4M3, MARGIN)
    want = (smm(qa, qb, ia * 2.0, ib, torch.float32, fast=True) + 0.5 * bias.detach()).to(torch.bfloat16)
    assert_close(y.detach(), want, "out")
    assert_close(grads[1], ga, "grad_mat1")
    assert_close(grads[2], gb, "grad_mat2")
    assert_close(grads[0], (0.5 * gy.float().sum(0)).to(bias.dtype), "grad_self")


def test_shapes_fp8_cannot_take_run_in_bfloat16(ops):
    # K = 60 is not a multiple of 16 (Note [fp8 shapes]): the call runs as lower_precision_fp.
    layer = torch.nn.Linear(60, 48)
    x = act(16, 60)
    with autocast():
        y = layer(x)
    want = F.linear(x.bfloat16(), layer.weight.bfloat16(), layer.bias.bfloat16())
    assert y.dtype == torch.bfloat16
    assert_exact(y, want)
    assert ops.fp8_weight_cache_stats()[0] == 0  # nothing was quantised
    # And outside autocast nothing changes.
    assert_exact(layer(x), F.linear(x, layer.weight, layer.bias))


def test_statistics_show_fp8_calls_and_fallbacks(ops):
    # docs/fp8.md, "Statistics": one row per op under policy fp8; ran_in tells fp8 from fallback.
    fits, does_not = torch.nn.Linear(64, 48), torch.nn.Linear(60, 48)
    ops.stats_reset()
    ops.stats_enable()
    try:
        with autocast():
            fits(act(16, 64))
            does_not(act(16, 60))
        snapshot = json.loads(ops.stats_snapshot())
    finally:
        ops.stats_disable()
        ops.stats_reset()
    rows = [row for row in snapshot["ops"] if row["op"] == "aten::linear"]
    assert len(rows) == 1, rows
    assert rows[0]["policy"] == "fp8" and rows[0]["calls"] == 2
    assert rows[0]["ran_in"] == {"float8_e4m3fn": 1, "bfloat16": 1}


def test_shared_weight_is_quantised_once_per_scope(ops):
    layer = torch.nn.Linear(64, 64)
    with autocast():
        h = act(16, 64, requires_grad=False)
        for _ in range(10):
            h = layer(h).float()
        q, hits, entries = ops.fp8_weight_cache_stats()
    assert (q, hits, entries) == (1, 9, 1)


def test_outside_autocast_and_with_other_dtypes_nothing_changes(ops):
    a, b = act(32, 64, requires_grad=False), param(64, 48)
    assert_exact(torch.mm(a, b), torch.mm(a, b.detach()))
    with autocast():
        y = torch.mm(a.double(), b.double())  # float64 is not eligible: no fp8, no cast
    assert y.dtype == torch.float64


@pytest.mark.skipif(not DELAYED, reason="the runtime policy file's recipe is the delayed one")
def test_delayed_history_rolls_once_per_step(ops):
    layer = torch.nn.Linear(64, 16, bias=False)
    x = act(16, 64, requires_grad=False)
    amaxes = [1.0, 4.0, 2.0, 0.5, 0.25]
    for step, amax in enumerate(amaxes):
        with torch.no_grad():
            layer.weight.fill_(amax / 2)
            layer.weight[0, 0] = -amax
        with autocast():
            layer(x)
            layer(x)  # the cache serves the second call: the history moves once per scope
        ops.fp8_clear_weight_cache()  # PyTorch's autocast scope ended (docs/fp8.md)
        history, scale, casts = ops.fp8_delayed_scaling_state(layer.weight)
        assert casts == step + 1
        assert history == list(reversed(amaxes[max(0, step - 3): step + 1]))  # 4 kept, most recent first
        assert scale == ref_scale(torch.tensor(max(history)), E4M3, margin=1).item()


class MLP(torch.nn.Module):
    def __init__(self, manual_bf16: bool):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(i, o) for i, o in ((64, 128), (128, 128), (128, 16)))
        for p in self.parameters():
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[-1])))
        self.manual_bf16 = manual_bf16

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            if self.manual_bf16:  # what bf16 CPU autocast does to linear, written out (run without autocast)
                x = F.linear(x.bfloat16(), layer.weight.bfloat16(), layer.bias.bfloat16())
            else:
                x = layer(x)
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        return x


def train(ops, manual_bf16: bool, steps: int = 200):
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(64, 16, generator=g) / 8
    model = MLP(manual_bf16)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 64, generator=g)
        target = torch.tanh(x @ teacher) + 0.1 * torch.sin(3 * x[:, :16])
        with contextlib.nullcontext() if manual_bf16 else autocast():
            out = model(x)
        loss = F.mse_loss(out.float(), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ops.fp8_clear_weight_cache()
        losses.append(loss.item())
    return sum(losses[-20:]) / 20, losses[0]


def test_mlp_trains_200_steps_like_bf16_autocast(ops):
    torch.set_num_threads(1)  # see test_fp8_gemm.one_thread
    bf16_final, bf16_first = train(ops, manual_bf16=True)
    fp8_final, _ = train(ops, manual_bf16=False)
    assert bf16_final < 0.5 * bf16_first
    assert abs(fp8_final - bf16_final) <= 0.05 * bf16_final, (fp8_final, bf16_final)
