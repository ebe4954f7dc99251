"""fp8 with row-wise scales (granularity rowwise and rowwise_with_gw_hp, Note [fp8 rowwise] in
runtime/torch/fp8/rowwise.cpp) on the CPU: the output and every gradient bit for bit against a
reference written here with plain PyTorch ops, rowwise more accurate than tensorwise on rows with
outliers, rowwise_with_gw_hp's weight gradient equal to the bfloat16 one, the weight cache's separate
copies, runtime policy files (and their located errors), torch.compile (aot_eager bit for bit,
fullgraph; the quantiser op also under Inductor), opcheck of fp8_quantize_weight_rowwise and fp8_quantize_rowwise, and the fused
row-wise quantiser bit for bit against the PyTorch ops it replaces in eager code.
"""
from __future__ import annotations

import os

import pytest
import torch

if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", "CPU"):
    pytest.skip(f"torch {torch.__version__} has no CPU _scaled_mm kernel", allow_module_level=True)

from test_fp8_gemm import act, param  # noqa: E402

from conftest import ref_quantize  # noqa: E402
from exact import assert_exact, exact  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
E4M3 = torch.float8_e4m3fn
ROWWISE = {"granularity": "rowwise", "backward": "float8_e4m3fn"}
GW_HP = {"granularity": "rowwise_with_gw_hp", "backward": "float8_e4m3fn"}

pytestmark = pytest.mark.usefixtures("fresh_fp8_state")


# --- The reference, from the description of the arithmetic (docs/fp8.md, "Row-wise scales") ------

def ref_rows(x: torch.Tensor, reduced_dim: int, margin: int = 0):
    """x in e4m3 with one power-of-two scale per slice, the amax over reduced_dim: (data, 1/scale)."""
    x = x.detach()
    amax = x.abs().amax(reduced_dim, keepdim=True).double()
    scale = (torch.finfo(E4M3).max / amax / 2.0**margin).clamp(max=2.0**126)
    scale = torch.where(amax > 0, scale, 1.0).float()
    scale = torch.exp2(torch.floor(torch.log2(scale)))  # round down to a power of two
    data = (x.float() * scale).clamp(-448.0, 448.0).to(E4M3)
    return data, scale.reciprocal()


def ref_mm(a8, sa, b8, sb, bias=None):
    """The scaled product: dequantised row-major float32 operands, their float32 mm, the bias added
    in float32, one rounding to bfloat16."""
    out = (a8.float() * sa).contiguous() @ (b8.float() * sb).contiguous()
    if bias is not None:
        out = out + bias.to(torch.bfloat16).float()
    return out.to(torch.bfloat16)


def ref_linear(x, w, b, g, gw_hp=False):
    """Output, grad x, grad w, grad b of F.linear(x, w, b) with output gradient g."""
    k = w.shape[1]
    x2, g2 = x.reshape(-1, k), g.reshape(-1, w.shape[0])
    xa, sxa = ref_rows(x2, 1)
    wa, swa = ref_rows(w, 1)
    out = ref_mm(xa, sxa, wa.t(), swa.reshape(1, -1), b).reshape(*x.shape[:-1], -1)
    ga, sga = ref_rows(g2, 1)
    if gw_hp:
        wt, inv = ref_quantize(w.detach(), E4M3)  # tensorwise, the scale repeated per column
        gx = ref_mm(ga, sga, wt, inv.reshape(1, 1).expand(1, k))
        gw = (g2.to(torch.bfloat16).t().contiguous() @ x2.detach().to(torch.bfloat16).contiguous()).float()
    else:
        wc, swc = ref_rows(w, 0)
        gx = ref_mm(ga, sga, wc, swc)
        gc, sgc = ref_rows(g2, 0)
        xc, sxc = ref_rows(x2, 0)
        gw = ref_mm(gc.t(), sgc.reshape(-1, 1), xc, sxc).float()
    gb = None if b is None else g2.float().sum(0)
    return out, gx.float().reshape(x.shape), gw, gb


def grads_of(out, g, *tensors):
    return torch.autograd.grad(out, tensors, g)


# --- The ops --------------------------------------------------------------------------------------

@pytest.mark.parametrize("recipe", [ROWWISE, GW_HP], ids=["rowwise", "gw_hp"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_bit_for_bit(ops, recipe, bias):
    x = act(2, 16, 64)
    w = param(48, 64)
    b = param(48, seed=5) if bias else None
    out = ops.fp8_linear(x, w, b, out_dtype=torch.bfloat16, **recipe)
    g = act(2, 16, 48, seed=7, requires_grad=False).to(torch.bfloat16)
    got = grads_of(out, g, x, w, *([b] if bias else []))
    ref_out, gx, gw, gb = ref_linear(x, w, b, g, gw_hp=recipe is GW_HP)
    assert out.dtype == torch.bfloat16
    assert_exact(out, ref_out)
    assert_exact(got[0], gx)
    assert_exact(got[1], gw)
    if bias:
        assert_exact(got[2], gb)


def test_mm_and_addmm_bit_for_bit(ops):
    a = act(32, 64)
    b = param(64, 48)
    g = act(32, 48, seed=7, requires_grad=False).to(torch.bfloat16)
    aa, saa = ref_rows(a, 1)
    bc, sbc = ref_rows(b, 0)
    ga, sga = ref_rows(g, 1)
    br, sbr = ref_rows(b, 1)
    gc, sgc = ref_rows(g, 0)
    ac, sac = ref_rows(a, 0)
    ref_grad_a = ref_mm(ga, sga, br.t(), sbr.reshape(1, -1)).float()
    ref_grad_b = ref_mm(ac.t(), sac.reshape(-1, 1), gc, sgc).float()

    out = ops.fp8_mm(a, b, out_dtype=torch.bfloat16, **ROWWISE)
    assert_exact(out, ref_mm(aa, saa, bc, sbc))
    ga_, gb_ = grads_of(out, g, a, b)
    assert_exact((ga_, gb_), (ref_grad_a, ref_grad_b))

    # addmm with a 2-D self, beta and alpha: alpha folded into A's scales, beta * self added in float32.
    c = act(32, 48, seed=9)
    out = ops.fp8_addmm(c, a, b, beta=0.5, alpha=2.0, out_dtype=torch.bfloat16, **ROWWISE)
    ref = (ref_mm(aa, saa * 2.0, bc, sbc).float() + 0.5 * c.detach().float()).to(torch.bfloat16)
    assert_exact(out, ref)
    gc_, ga_, gb_ = grads_of(out, g, c, a, b)
    assert_exact(gc_, g.float() * 0.5)
    assert_exact(ga_, ref_mm(ga, sga * 2.0, br.t(), sbr.reshape(1, -1)).float())
    assert_exact(gb_, ref_mm(ac.t(), sac.reshape(-1, 1) * 2.0, gc, sgc).float())


def test_cpu_gemm_equals_scaled_mm_where_it_takes_rowwise_scales():
    """2.15's CPU _scaled_mm takes row-wise scales (2.11's does not): ours gives its bits."""
    a8, sa = ref_rows(act(32, 64), 1)
    b8, sb = ref_rows(param(48, 64), 1)
    bias = param(48, seed=5).detach().to(torch.bfloat16)
    try:
        theirs = torch._scaled_mm(a8, b8.t(), sa, sb.reshape(1, -1), bias=bias, out_dtype=torch.bfloat16)
    except RuntimeError as e:
        pytest.skip(f"this torch's CPU _scaled_mm takes no row-wise scales: {str(e)[:80]}")
    assert_exact(theirs, ref_mm(a8, sa, b8.t(), sb.reshape(1, -1), bias))


def test_scales_are_powers_of_two_and_zero_rows_safe():
    x = act(16, 32, requires_grad=False)
    x[3] = 0.0
    x[5] *= 1e4
    data, inv = ref_rows(x, 1)
    assert torch.all(torch.frexp(inv).mantissa == 0.5)
    assert inv[3].item() == 1.0 and torch.all(data[3].float() == 0)


def test_rowwise_more_accurate_than_tensorwise_on_outlier_rows(ops):
    x = act(64, 128, requires_grad=False)
    outliers = torch.zeros(64, dtype=torch.bool)
    outliers[::8] = True
    x[outliers] *= 1e5  # every 8th token an outlier row: one tensor scale pushes the others into subnormals
    w = param(64, 128)
    full_precision = x @ w.detach().t()

    def rel_error(out, rows):
        return ((out.float()[rows] - full_precision[rows]).norm() / full_precision[rows].norm()).item()

    tensorwise = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16)
    rowwise = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, **ROWWISE)
    normal = ~outliers
    assert rel_error(rowwise, normal) < rel_error(tensorwise, normal), (rel_error(rowwise, normal),
                                                                        rel_error(tensorwise, normal))
    assert rel_error(rowwise, normal) < 0.5 * rel_error(tensorwise, normal)  # measured: 0.04 and 0.43
    assert rel_error(rowwise, slice(None)) <= rel_error(tensorwise, slice(None)) * 1.05


def test_weight_cache_keeps_tensorwise_and_rowwise_apart(ops):
    x = act(16, 64)  # requires grad: the forward also makes W's per-column copy for grad x
    w = param(32, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tw = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16)
        rw = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, **ROWWISE)
        rw2 = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, **ROWWISE)
        quantizations, hits, entries = ops.fp8_weight_cache_stats()
    # tensorwise once; rowwise twice (per row for the forward, per column for grad x), then hits
    assert (quantizations, hits, entries) == (3, 2, 3)
    xa, sxa = ref_rows(x, 1)
    wa, swa = ref_rows(w, 1)
    assert_exact(rw, ref_mm(xa, sxa, wa.t(), swa.reshape(1, -1)))
    assert_exact(rw2, rw)
    assert tw.dtype == rw.dtype and not exact(tw, rw)  # other bits, not another dtype
    # a changed weight is quantised again (its data stamp), row-wise copies included
    with torch.no_grad():
        w.mul_(2.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rw3 = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, **ROWWISE)
    wa, swa = ref_rows(w, 1)
    assert_exact(rw3, ref_mm(xa, sxa, wa.t(), swa.reshape(1, -1)))


def test_opcheck_quantize_weight_rowwise(ops):
    for args, kwargs in [((param(32, 16), E4M3, 1), {}), ((param(32, 16), E4M3, 0), {"margin": 1}),
                         ((param(16, 32), E4M3, 0), {"cache": False})]:
        torch.library.opcheck(ops.fp8_quantize_weight_rowwise.default, args, kwargs)
    w = param(32, 16)
    data, inv = ops.fp8_quantize_weight_rowwise(w, E4M3, 0, cache=False)
    ref_data, ref_inv = ref_rows(w, 0)
    assert inv.shape == (1, 16)
    assert_exact((data, inv), (ref_data, ref_inv))


# --- The fused quantiser against the PyTorch ops (Note [fp8 rowwise], "Quantisation") ---------------

SOURCES = [torch.float32, torch.bfloat16, torch.float16]


def special_rows(dtype: torch.dtype, cols: int = 67) -> torch.Tensor:
    """One row per hard case: outliers, all zeros, NaNs of both signs, infinities, subnormal
    magnitudes, the source's largest values, values that land on and next to e4m3's max."""
    g = torch.Generator().manual_seed(38)
    x = torch.randn(12, cols, generator=g)
    x[0, 3] = 1e5                                         # an outlier
    x[1] = 0.0                                            # all zero: scale 1
    x[2] = -0.0
    x[3, 5], x[3, 9] = float("nan"), -float("nan")        # NaN scale
    x[4, 0] = float("inf")
    x[5, -1] = -float("inf")
    x[6] *= torch.finfo(dtype).tiny / 64                  # subnormal magnitudes of the source dtype
    x[7] = torch.finfo(dtype).max * torch.rand(cols, generator=g)
    x[8] = torch.linspace(-460.0, 460.0, cols)            # around e4m3's max (scale 0.5)
    x[9] = 448.0 * torch.rand(cols, generator=g)
    x[9, 1] = 448.0                                       # amax exactly fp8_max: scale 1
    x[10] = torch.finfo(dtype).tiny * torch.randn(cols, generator=g)  # tiny normals: scale capped at 2^126
    x[11] = x[11] * 3e3
    return x.to(dtype)


def rowwise_inputs(dtype: torch.dtype):
    g = torch.Generator().manual_seed(7)
    shapes = [(1, 1), (1, 37), (37, 1), (3, 5), (33, 65), (64, 128), (129, 257)]
    yield from ((torch.randn(*s, generator=g) * 10.0 ** torch.randint(-4, 5, (s[0], 1), generator=g)).to(dtype)
                for s in shapes)
    x = special_rows(dtype)
    yield x
    yield x.t().contiguous()  # the hard cases as columns
    yield x.t()               # non-contiguous: quantised as contiguous


@pytest.mark.parametrize("dtype", SOURCES, ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("reduced_dim", [1, 0], ids=["per_row", "per_column"])
@pytest.mark.parametrize("margin", [0, 3])
def test_fused_rowwise_quantiser_equals_the_ops(ops, dtype, reduced_dim, margin):
    for x in rowwise_inputs(dtype):
        for fp8 in (E4M3, torch.float8_e5m2):
            fused = ops.fp8_quantize_rowwise(x, fp8, reduced_dim, margin)
            unfused = ops.fp8_quantize_rowwise(x, fp8, reduced_dim, margin, fused=False)
            assert fused[1].dtype == torch.float32  # the inverse scales
            assert_exact(fused, unfused)
        if torch.isfinite(x).all():  # and the reference written from the description
            assert_exact(ops.fp8_quantize_rowwise(x, E4M3, reduced_dim, margin), ref_rows(x, reduced_dim, margin))


def test_fused_rowwise_quantiser_edges(ops):
    x = special_rows(torch.float32)
    data, inv = ops.fp8_quantize_rowwise(x, E4M3, 1)
    assert inv[1].item() == 1.0 and inv[2].item() == 1.0 and torch.all(data[1:3].float() == 0)
    assert_exact(data[2].view(torch.uint8), torch.full((67,), 0x80, dtype=torch.uint8))  # -0 stays -0
    assert torch.isnan(inv[3:6]).all() and torch.all(data[3:6].view(torch.uint8) == 0x7F)  # Note [fp8 NaN scale]
    assert torch.all(torch.frexp(inv[torch.isfinite(inv)]).mantissa == 0.5)
    # margin 64 on huge values: the scale underflows to 0 on both paths (inverse +inf)
    big = torch.full((2, 8), 1e30)
    for reduced_dim in (0, 1):
        fused = ops.fp8_quantize_rowwise(big, E4M3, reduced_dim, 64)
        assert_exact(fused, ops.fp8_quantize_rowwise(big, E4M3, reduced_dim, 64, fused=False))
        assert torch.isinf(fused[1]).all()
    # many threads, both axes, a source large enough to be split into pieces
    y = torch.randn(300, 1000) * torch.logspace(-3, 3, 300).unsqueeze(1)
    for reduced_dim in (0, 1):
        assert_exact(ops.fp8_quantize_rowwise(y, E4M3, reduced_dim),
                     ops.fp8_quantize_rowwise(y, E4M3, reduced_dim, fused=False))


def test_opcheck_quantize_rowwise(ops):
    for args, kwargs in [((act(8, 16), E4M3, 1), {}), ((act(8, 16, dtype=torch.bfloat16), E4M3, 0), {"margin": 2}),
                         ((act(5, 3), E4M3, 0), {"fused": False})]:
        torch.library.opcheck(ops.fp8_quantize_rowwise.default, args, kwargs)
    with pytest.raises(RuntimeError, match="reduced_dim must be 0 or 1"):
        ops.fp8_quantize_rowwise(act(4, 4), E4M3, 2)
    with pytest.raises(RuntimeError, match="float32, bfloat16 or float16 only"):
        ops.fp8_quantize_rowwise(act(4, 4, dtype=torch.float64), E4M3, 1)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_quantize_rowwise_compiled_equals_eager(ops, backend):
    """The op in a compiled graph (fullgraph): its fake kernel traces, and the graph calls the fused
    kernel on real tensors, so both backends give eager's bits."""
    import torch._inductor.config

    def both_axes(x):
        return ops.fp8_quantize_rowwise(x, E4M3, 1), ops.fp8_quantize_rowwise(x, E4M3, 0, 2)

    x = act(32, 64, dtype=torch.bfloat16)
    with torch._inductor.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        got = torch.compile(both_axes, backend=backend, fullgraph=True)(x)
        torch._dynamo.reset()
    assert_exact(got, both_axes(x))


@pytest.mark.parametrize("recipe", [ROWWISE, GW_HP], ids=["rowwise", "gw_hp"])
def test_linear_fused_equals_unfused(ops, recipe):
    """The GEMMs' eager quantisation (fused) against fused=False (the ops, as traced code runs them)."""
    results = []
    for fused in (True, False):
        x = act(2, 16, 64, dtype=torch.bfloat16)
        w = param(48, 64)
        out = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, fused=fused, cache=False, **recipe)
        g = act(2, 16, 48, seed=7, requires_grad=False).to(torch.bfloat16)
        results.append((out, *grads_of(out, g, x, w)))
    for a, b in zip(*results):
        assert_exact(a, b)


# --- As a policy ----------------------------------------------------------------------------------

@pytest.fixture(params=["fp8_cpu_rowwise.yaml", "fp8_cpu_rowwise_gw_hp.yaml"], ids=["rowwise", "gw_hp"])
def policy(request, ops):
    assert ops.load_runtime_policy_file(os.path.join(DATA, request.param)) == 3
    yield GW_HP if "gw_hp" in request.param else ROWWISE
    ops.clear_runtime_policies()


def test_policy_linear_bit_for_bit(ops, policy):
    x = act(2, 16, 64)
    lin = torch.nn.Linear(64, 48)
    g = act(2, 16, 48, seed=7, requires_grad=False).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = lin(x)
    got = grads_of(out, g, x, lin.weight, lin.bias)
    ref_out, gx, gw, gb = ref_linear(x, lin.weight, lin.bias, g, gw_hp=policy is GW_HP)
    assert_exact(out, ref_out)
    for a, b in zip(got, (gx, gw, gb)):
        assert_exact(a, b)


def test_policy_errors_are_located(ops, tmp_path):
    cases = {
        "fp8: {granularity: colwise}": (4, 22, "unknown fp8 granularity 'colwise' (expected tensorwise or rowwise "
                                               "or rowwise_with_gw_hp)"),
        "fp8: {scaling: delayed, granularity: rowwise}": (4, 40, "takes 'scaling: current' only"),
        "fp8: {granularity: rowwise_with_gw_hp, backward: float8_e5m2}": (
            4, 52, "'granularity: rowwise_with_gw_hp' needs 'backward: float8_e4m3fn'"),
    }
    for recipe, (line, col, text) in cases.items():
        path = tmp_path / "p.yaml"
        path.write_text("autocast:\n  device: cpu\n  lower_precision: [bfloat16]\n  " + recipe +
                        "\nlists:\n  fp8: [linear]\n")
        with pytest.raises(RuntimeError) as e:
            ops.load_runtime_policy_file(str(path))
        assert f"{path}:{line}:{col}: error:" in str(e.value) and text in str(e.value), str(e.value)


# --- torch.compile ----------------------------------------------------------------------------------

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 48)
        self.w2 = param(48, 32, seed=2)
        self.b3 = param(16, seed=3)
        self.w3 = param(32, 16, seed=4)

    def forward(self, x):
        h = self.linear(x)
        h = torch.mm(h, self.w2)
        return torch.addmm(self.b3, h, self.w3, beta=0.5)


def test_compile_aot_eager_bit_for_bit(ops, policy):
    import torch._inductor.config
    with torch._inductor.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        net = Net()
        compiled = torch.compile(net, backend="aot_eager", fullgraph=True)

        def step(model, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            out.float().square().mean().backward()
            grads = [p.grad.clone() for p in net.parameters()] + [x.grad.clone()]
            for p in net.parameters():
                p.grad = None
            return out, grads

        for seed in range(2):
            x = act(32, 64, seed=seed)
            ref_out, ref_grads = step(net, x)
            x.grad = None
            out, grads = step(compiled, x)
            assert out.dtype == torch.bfloat16
            assert_exact(out, ref_out)
            for a, b in zip(grads, ref_grads):
                assert_exact(a, b)
        torch._dynamo.reset()
