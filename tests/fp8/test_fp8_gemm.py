"""fp8 linear, mm and addmm (torch.ops.autocastgen.fp8_*) against a reference written here (CPU).

The reference quantises with PyTorch's ops (conftest.ref_quantize: amax, scale = max/amax in
double, clamp, cast), multiplies with torch._scaled_mm and its reciprocal scales, and computes the
gradients the same way with the output gradient in e5m2. Outputs and both gradients must agree to
rounding (in practice bit for bit: the same _scaled_mm calls on the same fp8 operands). Also: the
support rule, the weight cache, delayed scaling's history, non-finite inputs, and a small MLP that
trains 200 steps to within a few percent of bf16 autocast's loss.
"""
from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F

from conftest import ref_quantize, ref_scale

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2

# The GEMMs run on PyTorch's CPU _scaled_mm, which 2.11 and later have (2.4 and 2.7 do not; there
# the support rule refuses every call, tested in C++: Fp8Runtime.NoCpuScaledMmMeansNoFp8).
if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
    pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel", allow_module_level=True)


def assert_close(actual, expected, what=""):
    """Equal to rounding: within one unit in the last place of the result's dtype."""
    assert actual.dtype == expected.dtype, (what, actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    eps = torch.finfo(actual.dtype).eps
    torch.testing.assert_close(actual.float(), expected.float(), rtol=eps, atol=eps * expected.float().abs().max().item() + 1e-30,
                               equal_nan=True, msg=what)


def smm(a, b, sa, sb, out_dtype, bias=None, fast=False):
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)


def param(*shape, dtype=torch.float32, seed=0, scale=0.1):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter((torch.randn(*shape, generator=g) * scale).to(dtype))


def act(*shape, dtype=torch.float32, seed=1, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g)).to(dtype).requires_grad_(requires_grad)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Results do not depend on it; run time does: on a machine whose cores are busy with other
    # jobs, PyTorch's OpenMP regions wait for descheduled threads (a 64x64x128 CPU _scaled_mm took
    # 60 ms with 2 threads and 0.15 ms with 1 here).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


pytestmark = pytest.mark.usefixtures("fresh_fp8_state")


def ref_linear(x, w, b, out_dtype, gy, backward=E5M2, margin=0):
    """Forward output and gradients (x, w, b) of an fp8 linear, from the description in fp8.h."""
    k, n = w.shape[1], w.shape[0]
    x2 = x.detach().reshape(-1, k)
    qx, ix = ref_quantize(x2, E4M3, margin)
    qw, iw = ref_quantize(w, E4M3, margin)
    if b is not None and out_dtype != torch.float32:
        out = smm(qx, qw.t(), ix, iw, out_dtype, bias=b.detach().to(out_dtype), fast=True)
    else:
        out = smm(qx, qw.t(), ix, iw, torch.float32, fast=True)
        if b is not None:
            out = out + b.detach().float()
        out = out.to(out_dtype)
    out = out.view(*x.shape[:-1], n)
    g2 = gy.reshape(-1, n)
    qg, ig = ref_quantize(g2, backward, margin)
    gx = smm(qg, qw, ig, iw, x.dtype).view(x.shape)
    gw = smm(qg.t(), qx, ig, ix, w.dtype)
    gb = g2.float().sum(0).to(b.dtype) if b is not None else None
    return out, gx, gw, gb


def run_linear(ops, x, w, b, out_dtype, gy, **kw):
    for t in (x, w, b):
        if t is not None:
            t.grad = None
    y = ops.fp8_linear(x, w, b, out_dtype=out_dtype, **kw)
    y.backward(gy)
    return y.detach(), x.grad, w.grad, None if b is None else b.grad


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_reference(ops, out_dtype, in_dtype, bias):
    x = act(4, 8, 64, dtype=in_dtype)
    w = param(48, 64, dtype=in_dtype)
    b = param(48, dtype=in_dtype, seed=5) if bias else None
    gy = act(4, 8, 48, dtype=out_dtype, seed=9, requires_grad=False)
    want = ref_linear(x, w, b, out_dtype, gy)
    for kw in ({}, {"fused": False}, {"cuda_layout": True}, {"cache": False}):
        got = run_linear(ops, x, w, b, out_dtype, gy, **kw)
        for name, a, e in zip(("out", "grad_input", "grad_weight", "grad_bias"), got, want):
            if e is not None:
                assert_close(a, e, f"{name} {kw}")
    # And it is an approximation of the float32 linear (sanity of the whole construction).
    y = ops.fp8_linear(x, w, b, out_dtype=out_dtype).float()
    exact = F.linear(x.float(), w.float(), None if b is None else b.float())
    assert (y - exact).abs().max() < 0.08 * exact.abs().max()


def test_linear_with_e4m3_gradients_and_a_margin(ops):
    x, w, b = act(32, 64), param(32, 64), param(32, seed=3)
    gy = act(32, 32, dtype=torch.bfloat16, seed=4, requires_grad=False)
    want = ref_linear(x, w, b, torch.bfloat16, gy, backward=E4M3, margin=2)
    got = run_linear(ops, x, w, b, torch.bfloat16, gy, backward="float8_e4m3fn", margin=2)
    for a, e in zip(got, want):
        assert_close(a, e)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_mm_matches_reference(ops, out_dtype):
    a, b = act(32, 64), param(64, 48)
    gy = act(32, 48, dtype=out_dtype, seed=7, requires_grad=False)
    for kw in ({}, {"cuda_layout": True}, {"fused": False}):
        a.grad = b.grad = None
        y = ops.fp8_mm(a, b, out_dtype=out_dtype, **kw)
        y.backward(gy)
        qa, ia = ref_quantize(a, E4M3)
        qb, ib = ref_quantize(b, E4M3)
        qg, ig = ref_quantize(gy, E5M2)
        assert_close(y.detach(), smm(qa, qb, ia, ib, out_dtype, fast=True), f"out {kw}")
        assert_close(a.grad, smm(qg, qb.t(), ig, ib, torch.float32), f"grad a {kw}")
        assert_close(b.grad, smm(qa.t(), qg, ia, ig, torch.float32), f"grad b {kw}")


@pytest.mark.parametrize(
    "self_shape,beta,alpha",
    [((48,), 1.0, 1.0), ((48,), 0.5, 2.0), ((32, 48), 1.0, 1.0), ((32, 1), -1.5, 0.25), ((), 1.0, 3.0)],
)
def test_addmm_matches_reference(ops, self_shape, beta, alpha):
    c = act(*self_shape, seed=11) if self_shape else torch.tensor(0.7, requires_grad=True)
    a, b = act(32, 64), param(64, 48)
    gy = act(32, 48, dtype=torch.bfloat16, seed=7, requires_grad=False)
    y = ops.fp8_addmm(c, a, b, beta=beta, alpha=alpha, out_dtype=torch.bfloat16)
    y.backward(gy)
    qa, ia = ref_quantize(a, E4M3)
    qb, ib = ref_quantize(b, E4M3)
    if beta == 1.0 and c.dim() == 1:
        want = smm(qa, qb, ia * alpha, ib, torch.bfloat16, bias=c.detach().bfloat16(), fast=True)
    else:
        want = (smm(qa, qb, ia * alpha, ib, torch.float32, fast=True) + beta * c.detach()).bfloat16()
    assert_close(y.detach(), want, "out")
    qg, ig = ref_quantize(gy, E5M2)
    assert_close(a.grad, smm(qg, qb.t(), ig * alpha, ib, torch.float32), "grad mat1")
    assert_close(b.grad, smm(qa.t(), qg, ia, ig * alpha, torch.float32), "grad mat2")
    grad_c = (gy.float() * beta).sum_to_size(c.shape) if c.dim() else (gy.float() * beta).sum()
    assert_close(c.grad, grad_c, "grad self")


def test_addmm_beta_zero_ignores_nan_in_self(ops):
    c = torch.full((32, 48), math.nan)
    a, b = act(32, 64), param(64, 48)
    y = ops.fp8_addmm(c, a, b, beta=0, out_dtype=torch.bfloat16)
    assert not y.isnan().any()


def test_non_finite_operands_give_nan_results(ops):
    # An inf in the input: the amax is inf, the scale NaN, the result NaN (never silently clamped).
    x, w = act(16, 64), param(16, 64)
    x.data[3, 5] = math.inf
    assert ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16).isnan().all()
    # An inf in the output gradient (an fp16 overflow under a GradScaler): NaN gradients, which
    # the scaler's inf check sees.
    x = act(16, 64)
    y = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16)
    gy = torch.ones_like(y)
    gy[0, 0] = math.inf
    y.backward(gy)
    assert x.grad.isnan().all() and w.grad.isnan().all()


def test_support_rule(ops):
    sup = ops.fp8_linear_support
    x, w = act(32, 64), param(48, 64)
    assert sup(x, w, None, torch.bfloat16) == ""
    assert "K" in sup(act(32, 60), param(48, 60), None, torch.bfloat16)
    assert "N" in sup(x, param(40, 64), None, torch.bfloat16)
    # M only matters when the weight gets a gradient.
    x30 = act(30, 64)
    assert "M" in sup(x30, w, None, torch.bfloat16)
    with torch.no_grad():
        assert sup(x30, w, None, torch.bfloat16) == ""
    assert sup(x30, w.detach(), None, torch.bfloat16) == ""
    assert "float32, bfloat16 or float16" in sup(x.double(), w, None, torch.bfloat16)
    assert "out_dtype" in sup(x, w, None, torch.float64)
    assert "bias" in sup(x, w, param(47), torch.bfloat16)
    assert "last dimension" in sup(act(32, 32), w, None, torch.bfloat16)
    assert "empty" in sup(act(0, 64), w, None, torch.bfloat16)
    assert ops.fp8_mm_support(x, param(64, 48), torch.bfloat16) == ""
    assert "inner" in ops.fp8_mm_support(x, param(32, 48), torch.bfloat16)
    assert "broadcast" in ops.fp8_addmm_support(act(5), x, param(64, 48), torch.bfloat16)
    # Asking for an unsupported call is an error that names the reason.
    with pytest.raises(RuntimeError, match="not a multiple of 16"):
        ops.fp8_linear(act(32, 60), param(48, 60), None, out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="scaling"):
        ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, scaling="sometimes")
    with pytest.raises(RuntimeError, match="forward must be float8_e4m3fn"):
        ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, forward="float8_e5m2")
    with pytest.raises(RuntimeError, match="amax_history_len"):
        ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, scaling="delayed", amax_history_len=0)


def stats(ops):
    q, hits, entries = ops.fp8_weight_cache_stats()
    return q, hits, entries


def test_shared_weight_is_quantised_once_per_scope(ops):
    w, b = param(64, 64), param(64, seed=2)
    h = act(16, 64, requires_grad=False)  # an input that requires grad would be a leaf "weight" too
    for _ in range(10):
        h = ops.fp8_linear(h, w, b, out_dtype=torch.float32)
    h.sum().backward()
    assert stats(ops) == (1, 9, 1)
    # x @ W.t() (torch.matmul's mm) shares the copy with linear.
    ops.fp8_mm(act(16, 64, requires_grad=False), w.t(), out_dtype=torch.bfloat16)
    assert stats(ops) == (1, 10, 1)
    # The scope ends: the copy goes, the next use quantises again.
    ops.fp8_clear_weight_cache()
    assert stats(ops)[2] == 0
    ops.fp8_linear(act(16, 64, requires_grad=False), w, b, out_dtype=torch.bfloat16)
    assert stats(ops) == (2, 10, 1)


def test_cache_sees_in_place_updates(ops):
    w = param(64, 64)
    x = act(16, 64, requires_grad=False)
    y0 = ops.fp8_linear(x, w, None, out_dtype=torch.float32)
    with torch.no_grad():
        w.mul_(2.0)  # an optimizer step: bumps the version counter
    y1 = ops.fp8_linear(x, w, None, out_dtype=torch.float32)
    assert stats(ops)[:2] == (2, 0)
    torch.testing.assert_close(y1, 2 * y0, rtol=1e-2, atol=1e-3)
    w.data = torch.randn(64, 64)  # a storage swap, no version bump
    ops.fp8_linear(x, w, None, out_dtype=torch.float32)
    assert stats(ops)[:2] == (3, 0)
    ops.fp8_linear(x, w, None, out_dtype=torch.float32)
    assert stats(ops)[:2] == (3, 1)


def test_cache_off_and_activations(ops):
    w = param(64, 64)
    for _ in range(3):
        ops.fp8_linear(act(16, 64), w, None, out_dtype=torch.bfloat16, cache=False)
    assert stats(ops) == (3, 0, 0)
    # Tensors that are not weights (no grad, or not leaves) are never cached.
    frozen = w.detach()
    ops.fp8_linear(act(16, 64, requires_grad=False), frozen, None, out_dtype=torch.bfloat16)
    ops.fp8_mm(act(16, 64, requires_grad=False), act(64, 64).relu(), out_dtype=torch.bfloat16)
    assert stats(ops) == (3, 0, 0)
    # A leaf that requires grad is a weight, whichever operand it is (PyTorch's cast cache rule).
    ops.fp8_mm(act(16, 64), act(64, 64).relu(), out_dtype=torch.bfloat16)
    assert stats(ops) == (4, 0, 1)


def test_cache_is_per_thread(ops):
    w = param(64, 64)
    ops.fp8_linear(act(16, 64), w, None, out_dtype=torch.bfloat16)
    seen = {}

    def other():
        ops.fp8_linear(act(16, 64), w, None, out_dtype=torch.bfloat16)
        ops.fp8_linear(act(16, 64), w, None, out_dtype=torch.bfloat16)
        seen["stats"] = tuple(ops.fp8_weight_cache_stats())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["stats"] == (1, 1, 1)
    assert stats(ops) == (1, 0, 1)


def test_dead_weights_leave_the_cache(ops):
    for i in range(200):
        ops.fp8_linear(act(16, 64), param(16, 64, seed=i), None, out_dtype=torch.bfloat16)
    # Swept whenever the map doubles: far fewer than 200 entries remain.
    assert stats(ops)[2] < 130


def set_amax(w, amax):
    with torch.no_grad():
        w.fill_(amax / 2)
        w[0, 0] = -amax


def test_delayed_history_rolls(ops):
    w = param(16, 64)
    x = act(16, 64, requires_grad=False)
    amaxes = [1.0, 4.0, 2.0, 0.5, 0.25]
    for step, a in enumerate(amaxes):
        set_amax(w, a)
        y = ops.fp8_linear(x, w, None, out_dtype=torch.float32, scaling="delayed", amax_history_len=3)
        history, scale, casts = ops.fp8_delayed_scaling_state(w)
        assert casts == step + 1
        assert history == list(reversed(amaxes[max(0, step - 2): step + 1]))  # most recent first
        assert scale == ref_scale(torch.tensor(max(history)), E4M3).item()
        # This cast used the previous scale (the first one had no history: current scaling).
        used = ref_scale(torch.tensor(a if step == 0 else max(amaxes[max(0, step - 3): step])), E4M3)
        qx, ix = ref_quantize(x, E4M3)
        qw, iw = ref_quantize(w, E4M3, scale=used)
        assert_close(y, smm(qx, qw.t(), ix, iw, torch.float32, fast=True), f"step {step}")
        ops.fp8_clear_weight_cache()  # a new scope: the next call quantises the weight again
    # Within one scope the cache serves the copy and the history does not move.
    ops.fp8_linear(x, w, None, out_dtype=torch.float32, scaling="delayed", amax_history_len=3)
    ops.fp8_linear(x, w, None, out_dtype=torch.float32, scaling="delayed", amax_history_len=3)
    assert ops.fp8_delayed_scaling_state(w)[2] == len(amaxes) + 1


def test_delayed_scaling_saturates_then_adapts_and_reports_non_finite(ops):
    w = param(16, 64)
    x = act(16, 64, requires_grad=False)
    kw = dict(out_dtype=torch.float32, scaling="delayed", amax_history_len=2, cache=False)
    set_amax(w, 1.0)
    ops.fp8_linear(x, w, None, **kw)
    set_amax(w, 10.0)  # grew tenfold: cast with the old scale, saturated, recorded
    ops.fp8_linear(x, w, None, **kw)
    history, scale, _ = ops.fp8_delayed_scaling_state(w)
    assert history == [10.0, 1.0] and scale == ref_scale(torch.tensor(10.0), E4M3).item()
    with torch.no_grad():
        w[1, 1] = math.inf
    y = ops.fp8_linear(x, w, None, **kw)
    assert y.isnan().all()  # the pass met an inf: NaN out, as under current scaling
    history, scale2, _ = ops.fp8_delayed_scaling_state(w)
    assert history == [math.inf, 10.0] and scale2 == scale  # recorded, never a scale
    # Only weights have state; the recipe's length change restarts it.
    assert ops.fp8_delayed_scaling_state_size() == 1
    set_amax(w, 1.0)
    ops.fp8_linear(x, w, None, out_dtype=torch.float32, scaling="delayed", amax_history_len=5, cache=False)
    assert ops.fp8_delayed_scaling_state(w)[0] == [1.0]


class Fp8MLP(torch.nn.Module):
    def __init__(self, ops, fp8, **recipe):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.l1, self.l2, self.l3 = (torch.nn.Linear(i, o) for i, o in ((64, 128), (128, 128), (128, 16)))
        for p in self.parameters():
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[-1])))
        self.ops, self.fp8, self.recipe = ops, fp8, recipe

    def lin(self, layer, x):
        if self.fp8:
            return self.ops.fp8_linear(x, layer.weight, layer.bias, out_dtype=torch.bfloat16, **self.recipe)
        return layer(x)

    def forward(self, x):
        return self.lin(self.l3, F.gelu(self.lin(self.l2, F.gelu(self.lin(self.l1, x)))))


def train(ops, fp8, steps=200, **recipe):
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(64, 16, generator=g) / 8
    model = Fp8MLP(ops, fp8, **recipe)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 64, generator=g)
        target = torch.tanh(x @ teacher) + 0.1 * torch.sin(3 * x[:, :16])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        loss = F.mse_loss(out.float(), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ops.fp8_clear_weight_cache()  # the scope ends with the step
        losses.append(loss.item())
    return sum(losses[-20:]) / 20, losses[0]


@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_mlp_trains_like_bf16_autocast(ops, scaling):
    bf16_final, bf16_first = train(ops, fp8=False)
    fp8_final, fp8_first = train(ops, fp8=True, scaling=scaling)
    assert bf16_final < 0.5 * bf16_first  # the task is learnt at all
    assert abs(fp8_final - bf16_final) <= 0.05 * bf16_final, (fp8_final, bf16_final)


def test_matches_torchao_float8_linear(ops):
    """torchao's Float8Linear (tensorwise dynamic scaling, emulated on CPU): same outputs and
    gradients. Not a dependency of autocastgen: skipped when torchao is not installed."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        pytest.skip("torchao is not installed (pip install torchao==0.18.0 to run this comparison)")
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(64, 48))
    ao = convert_to_float8_training(
        torch.nn.Sequential(torch.nn.Linear(64, 48)), config=Float8LinearConfig(emulate=True)
    )
    ao.load_state_dict(ref.state_dict())
    lin = ref[0]
    x1 = act(32, 64)
    x2 = x1.detach().clone().requires_grad_()
    gy = act(32, 48, seed=3, requires_grad=False)
    y_ao = ao(x1)
    y_ao.backward(gy)
    y = ops.fp8_linear(x2, lin.weight, lin.bias, out_dtype=torch.float32)
    y.backward(gy)
    torch.testing.assert_close(y, y_ao, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lin.weight.grad, ao[0].weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lin.bias.grad, ao[0].bias.grad, rtol=1e-5, atol=1e-5)
