"""fp8 on a GPU: the CUDA quantisation kernels bit for bit against PyTorch's CUDA casts, and the
fp8 GEMMs (torch.ops.autocastgen.fp8_*, and an fp8 runtime policy under torch.autocast("cuda"))
against a reference over torch._scaled_mm; the fused row-wise quantiser against the PyTorch ops and
the CPU kernel. Skips itself without a GPU; scripts/gpu-check runs it on the lent machine. The CPU
twins of these checks are test_fp8_quantize.py, test_fp8_gemm.py and test_fp8_rowwise.py.
"""
from __future__ import annotations

import math
import pathlib

import pytest
import torch
import torch.nn.functional as F

from conftest import nan_sign_cleared, ref_scale
from exact import assert_exact

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

FORMATS = [torch.float8_e4m3fn, torch.float8_e5m2]
SOURCES = [torch.float32, torch.bfloat16, torch.float16]
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
DATA = pathlib.Path(__file__).parent / "data"

pytestmark = pytest.mark.usefixtures("fresh_fp8_state")


def torch_cast(x, scale, dtype):
    m = torch.finfo(dtype).max
    return (x.float() * scale).clamp(-m, m).to(dtype)


def wide_values(dtype, n, seed):
    """Random values over 50 binades, plus every special class (NaN, inf, zeros, subnormals, ties)."""
    g = torch.Generator().manual_seed(seed)
    mant = torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1
    exp = torch.randint(-30, 20, (n,), generator=g).to(torch.float64)
    f = torch.finfo(dtype)
    special = torch.tensor([0.0, 448.0, 464.0, 480.0, 57344.0, 61440.0, 1e30, f.max, f.tiny, f.tiny / 4,
                            2.0**-9, 2.0**-10, 3 * 2.0**-10, 2.0**-17, 1.0625, 1.1875, math.inf], dtype=torch.float64)
    x = torch.cat([mant * torch.pow(2.0, exp), special, -special]).to(dtype)
    return torch.cat([x, torch.tensor([math.nan, -math.nan], dtype=dtype)]).cuda()


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_cast_and_amax_are_bit_exact(ops, fmt, src, fused):
    x = wide_values(src, 1_000_003, 1)  # odd length: the vector loops' tails run too
    for s in (1.0, 0.7, 3.0e4, 2.0**-20, 448.0 / 3.0):
        scale = torch.tensor(s, dtype=torch.float32, device="cuda")
        data, amax = ops.fp8_scale_cast(x, scale, fmt, fused=fused)
        assert data.device.type == "cuda" and data.dtype == fmt and data.shape == x.shape
        assert_exact(nan_sign_cleared(data), nan_sign_cleared(torch_cast(x, scale, fmt)), (fmt, src, s))
        assert amax.isnan()  # the NaNs propagate
    finite = x[torch.isfinite(x)]
    assert_exact(ops.fp8_amax(finite, fused=fused), finite.float().abs().amax())


@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_every_float_class_by_bit_pattern(ops, fmt):
    bits = torch.arange(0, 2**32, 61, dtype=torch.int64, device="cuda")
    x = (bits - (bits >= 2**31).to(torch.int64) * 2**32).to(torch.int32).view(torch.float32)
    one = torch.tensor(1.0, device="cuda")
    for fused in (True, False):
        data, _ = ops.fp8_scale_cast(x, one, fmt, fused=fused)
        assert_exact(nan_sign_cleared(data), nan_sign_cleared(torch_cast(x, one, fmt)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_scale_rule(ops, fmt):
    for a in [1.0, 3.0, 0.02, 1e-10, 12345.678, 5e-37, 1e-45, 0.0, math.inf, math.nan]:
        scale, inv = ops.fp8_scale_from_amax(torch.tensor(a, device="cuda"), fmt, 0)
        want = ref_scale(torch.tensor(a), fmt, 0)
        if math.isnan(want.item()):
            assert scale.isnan() and inv.isnan(), a
        else:
            assert scale.item() == want.item() and inv.item() == want.reciprocal().item(), a


def quantize(x, dtype):
    """Current scaling with PyTorch's ops on the GPU: (fp8 data, the GEMM's 1/scale)."""
    scale = ref_scale(x.detach().abs().max().cpu(), dtype).cuda()
    return torch_cast(x.detach(), scale, dtype), scale.reciprocal()


def smm(a, b, sa, sb, out_dtype, bias=None, fast=False):
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)


def test_cuda_linear_matches_scaled_mm_reference(ops):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(64, 256, device="cuda", generator=g).bfloat16().requires_grad_()
    w = torch.nn.Parameter(torch.randn(128, 256, device="cuda", generator=g) * 0.05)
    gy = torch.randn(64, 128, device="cuda", generator=g).bfloat16()
    y = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16)
    y.backward(gy)
    qx, ix = quantize(x, E4M3)
    qw, iw = quantize(w, E4M3)
    qg, ig = quantize(gy, E5M2)
    torch.testing.assert_close(y.detach(), smm(qx, qw.t(), ix, iw, torch.bfloat16, fast=True), rtol=2**-8, atol=1e-6)
    torch.testing.assert_close(x.grad, smm(qg, qw.t().contiguous().t(), ig, iw, torch.bfloat16), rtol=2**-8, atol=1e-6)
    torch.testing.assert_close(w.grad, smm(qg.t().contiguous(), qx.t().contiguous().t(), ig, ix, torch.float32),
                               rtol=2**-8, atol=1e-6)
    exact = F.linear(x.float(), w.float())
    assert (y.float() - exact).abs().max() < 0.08 * exact.abs().max()


@pytest.mark.parametrize("policy", ["fp8_cuda.yaml", "fp8_cuda_delayed.yaml"])
def test_cuda_policy_runs_linear_in_fp8(ops, policy):
    ops.load_runtime_policy_file(str(DATA / policy))
    try:
        torch.manual_seed(0)
        layer = torch.nn.Linear(256, 128, device="cuda")
        x = torch.randn(32, 256, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = layer(x)
        assert y.dtype == torch.bfloat16
        y.float().sum().backward()
        assert layer.weight.grad is not None and torch.isfinite(layer.weight.grad).all()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            odd = layer(torch.randn(3, 256, device="cuda"))  # 3 rows: not fp8's shape, runs in bfloat16
        assert odd.dtype == torch.bfloat16
        exact = F.linear(x, layer.weight, layer.bias)
        assert (y.float() - exact).abs().max() < 0.08 * exact.abs().max()
    finally:
        ops.clear_runtime_policies()
        ops.fp8_clear_weight_cache("cuda")


def train_steps(ops, model, forward, steps=3):
    """Forward, backward and an in-place update per step: (output, gradients, delayed state) each."""
    out = []
    g = torch.Generator(device="cuda").manual_seed(7)
    for _ in range(steps):
        x = torch.randn(32, 256, device="cuda", generator=g)
        y = forward(model, x)
        y.float().square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        states = [ops.fp8_delayed_scaling_state(p) for p in model.parameters() if p.dim() == 2]
        out.append((y.detach(), grads, states))
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(0.01 * p.grad)
                p.grad = None
    return out


def autocast_forward(model, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(x)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("policy", ["fp8_cuda.yaml", "fp8_cuda_delayed.yaml"])
def test_cuda_compiled_fp8_matches_eager(ops, policy, backend):
    """fullgraph=True: aot_eager gives eager's bits (outputs, gradients, delayed-scaling history),
    Inductor agrees to bfloat16 rounding (Note [fp8 under tracing] in runtime/torch/fp8/operand.cpp)."""
    import copy

    import torch._inductor.config

    ops.load_runtime_policy_file(str(DATA / policy))
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).cuda()
            twin = copy.deepcopy(model)
            ops.fp8_reset_delayed_scaling_state()
            eager = train_steps(ops, model, autocast_forward)
            compiled = train_steps(ops, twin, torch.compile(autocast_forward, fullgraph=True, backend=backend))
        for step, ((y, grads, states), (cy, cgrads, cstates)) in enumerate(zip(eager, compiled)):
            if backend == "aot_eager":
                assert_exact(cy, y, step)
                assert_exact(cgrads, grads, step)
                assert cstates == states, step
            else:
                torch.testing.assert_close(cy.float(), y.float(), rtol=1.6e-2, atol=1e-2)
                for a, b in zip(cgrads, grads):
                    torch.testing.assert_close(a, b, rtol=1.6e-2, atol=1e-2)
                assert [c for _, _, c in cstates] == [c for _, _, c in states], step
    finally:
        ops.clear_runtime_policies()
        ops.fp8_clear_weight_cache("cuda")
        torch._dynamo.reset()


@pytest.mark.parametrize("m,k,n", [(16, 32, 48), (48, 80, 112), (64, 64, 64), (96, 4096, 208), (4112, 528, 80)])
def test_cuda_mm_gradients_through_the_byte_transpose(ops, m, k, n):
    """The backward GEMMs transpose fp8 copies with the byte transpose kernel (Note [byte transpose]):
    tiles partly outside the matrix included, the gradients equal the same _scaled_mm calls on
    operands laid out by PyTorch's own copies."""
    g = torch.Generator(device="cuda").manual_seed(m + k + n)
    a = torch.randn(m, k, device="cuda", generator=g).requires_grad_()
    b = torch.randn(k, n, device="cuda", generator=g).requires_grad_()
    gy = torch.randn(m, n, device="cuda", generator=g)
    y = ops.fp8_mm(a, b, out_dtype=torch.float32)
    y.backward(gy)
    qa, ia = quantize(a, E4M3)
    qb, ib = quantize(b, E4M3)
    qg, ig = quantize(gy, E5M2)
    col = lambda t: t.t().contiguous().t()  # noqa: E731 -- column-major copy
    assert_exact(a.grad, smm(qg, col(qb.t()), ig, ib, torch.float32))
    assert_exact(b.grad, smm(qa.t().contiguous(), col(qg), ia, ig, torch.float32))


# --- Row-wise scales (Note [fp8 rowwise] in runtime/torch/fp8/rowwise.cpp) ------------------------

def rows(x, reduced_dim):
    """e4m3 with one power-of-two scale per slice (amax over reduced_dim): (data, 1/scale)."""
    x = x.detach()
    amax = x.abs().amax(reduced_dim, keepdim=True).double()
    scale = torch.where(amax > 0, (448.0 / amax).clamp(max=2.0**126), 1.0).float()
    scale = torch.exp2(torch.floor(torch.log2(scale)))
    return (x.float() * scale).clamp(-448.0, 448.0).to(E4M3), scale.reciprocal()


def test_cuda_rowwise_linear_matches_scaled_mm(ops):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(64, 256, device="cuda", generator=g).bfloat16().requires_grad_()
    w = torch.nn.Parameter(torch.randn(128, 256, device="cuda", generator=g) * 0.05)
    b = torch.nn.Parameter(torch.randn(128, device="cuda", generator=g))
    gy = torch.randn(64, 128, device="cuda", generator=g).bfloat16()
    y = ops.fp8_linear(x, w, b, out_dtype=torch.bfloat16, granularity="rowwise", backward="float8_e4m3fn")
    y.backward(gy)
    qx, ix = rows(x, 1)
    qw, iw = rows(w, 1)
    ref = smm(qx, qw.t(), ix, iw.reshape(1, -1), torch.bfloat16, bias=b.detach().bfloat16(), fast=True)
    assert_exact(y.detach(), ref)
    qg, ig = rows(gy, 1)
    qwc, iwc = rows(w, 0)
    assert_exact(x.grad, smm(qg, qwc.t().contiguous().t(), ig, iwc, torch.bfloat16))
    qgc, igc = rows(gy, 0)
    qxc, ixc = rows(x, 0)
    ref_gw = smm(qgc.t().contiguous(), qxc.t().contiguous().t(), igc.reshape(-1, 1), ixc, torch.bfloat16).float()
    assert_exact(w.grad, ref_gw)
    exact = F.linear(x.float(), w.float(), b.float())
    assert (y.float() - exact).abs().max() < 0.08 * exact.abs().max()


@pytest.mark.parametrize("policy", ["fp8_cuda_rowwise.yaml", "fp8_cuda_rowwise_gw_hp.yaml"])
def test_cuda_rowwise_policy_compiled_matches_eager(ops, policy):
    import torch._inductor.config
    ops.load_runtime_policy_file(str(DATA / policy))
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            torch._dynamo.reset()
            torch.manual_seed(0)
            layer = torch.nn.Linear(256, 128, device="cuda")
            compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
            x = torch.randn(32, 256, device="cuda", requires_grad=True)
            results = []
            for model in (layer, compiled):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    y = model(x)
                y.float().square().mean().backward()
                results.append((y.detach(), x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone()))
                x.grad = None
                layer.zero_grad(set_to_none=True)
            for a, b in zip(*results):
                assert_exact(a, b)
            exact = F.linear(x, layer.weight, layer.bias)
            assert (results[0][0].float() - exact).abs().max() < 0.08 * exact.abs().max()
    finally:
        ops.clear_runtime_policies()
        ops.fp8_clear_weight_cache("cuda")
        torch._dynamo.reset()


def hard_matrix(dtype, rows, cols, seed):
    """Rows over many binades, with rows of zeros, NaNs of both signs, infinities, subnormals and the
    dtype's largest values."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float64) * torch.pow(
        2.0, torch.randint(-30, 20, (rows, 1), generator=g).double())
    f = torch.finfo(dtype)
    if rows >= 8:
        x[1] = 0.0
        x[2, cols // 2] = math.nan
        x[3, 0], x[3, -1] = -math.nan, math.nan
        x[4, -1] = math.inf
        x[5] = f.tiny / 16 * torch.randn(cols, generator=g, dtype=torch.float64)
        x[6] = f.max * torch.rand(cols, generator=g, dtype=torch.float64)
        x[7, 0] = -math.inf
    return x.to(dtype).cuda()


@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize("reduced_dim", [1, 0], ids=["per_row", "per_column"])
def test_cuda_fused_rowwise_quantiser_equals_the_ops(ops, src, reduced_dim):
    """The CUDA row-wise kernels (Note [fp8 rowwise kernels]) against the PyTorch ops on CUDA (what a
    trace records; bit for bit, a slice holding a NaN or an infinity all 0x7f, Note [fp8 NaN scale])
    and against the CPU kernel (the same, except that a NaN inverse scale's payload differs: a GPU
    returns its canonical NaN 0x7fffffff for 1/NaN, x86 the operand's 0x7fc00000)."""
    shapes = [(1, 1), (1, 37), (37, 1), (33, 65), (64, 128), (129, 257), (3, 70001), (4100, 96), (8, 4096)]
    for i, (r, c) in enumerate(shapes):
        x = hard_matrix(src, r, c, i)
        for margin in (0, 3):
            data, inv = ops.fp8_quantize_rowwise(x, E4M3, reduced_dim, margin)
            ref_data, ref_inv = ops.fp8_quantize_rowwise(x, E4M3, reduced_dim, margin, fused=False)
            cpu_data, cpu_inv = ops.fp8_quantize_rowwise(x.cpu(), E4M3, reduced_dim, margin)
            assert data.device.type == "cuda" and inv.shape == ref_inv.shape
            assert_exact(inv, ref_inv, (r, c, margin))
            torch.testing.assert_close(inv, cpu_inv.cuda(), rtol=0, atol=0, equal_nan=True)
            for want in (ref_data, cpu_data.cuda()):
                assert_exact(data, want, (r, c, margin))
