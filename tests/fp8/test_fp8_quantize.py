"""fp8 quantisation primitives against PyTorch's own ops, bit for bit (CPU).

The fused kernels (`fused=True`) and the unfused ATen path (`fused=False`) must both give exactly
`(x.float() * scale).clamp(-max, max).to(float8)`, `x.abs().amax()` and the documented scale rule,
for every source dtype and every class of value: NaN (either sign), infinities, signed zeros,
float32 and float16 subnormals, values above fp8's range, and rounding ties.

AUTOCASTGEN_FP8_EXHAUSTIVE=1 also runs all 2^32 float32 bit patterns (about a minute per format).
"""
from __future__ import annotations

import math
import os

import pytest
import torch

from conftest import nan_sign_cleared, ref_scale
from exact import assert_exact

FORMATS = [torch.float8_e4m3fn, torch.float8_e5m2]
SOURCES = [torch.float32, torch.bfloat16, torch.float16]


def torch_cast(x, scale, dtype):
    m = torch.finfo(dtype).max
    return (x.float() * scale).clamp(-m, m).to(dtype)


def specials(dtype):
    """Every class of value the source dtype can hold, both signs."""
    f = torch.finfo(dtype)
    vals = [0.0, 1.0, 448.0, 464.0, 480.0, 57344.0, 61440.0, 1e30, f.max, f.tiny, f.tiny / 4, f.smallest_normal,
            2.0**-9, 2.0**-10, 3 * 2.0**-10, 2.0**-16, 2.0**-17, 3 * 2.0**-17, 1.0625, 1.1875, 0.1, math.inf]
    x = torch.tensor(vals, dtype=torch.float64)
    x = torch.cat([x, -x]).to(dtype)
    nan = torch.tensor([math.nan, -math.nan], dtype=dtype)
    return torch.cat([x, nan])


def random_wide(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    mant = torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1
    exp = torch.randint(-30, 20, (n,), generator=g).to(torch.float64)
    return (mant * torch.pow(2.0, exp)).to(dtype)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_cast_is_bit_exact_with_pytorch(ops, fmt, src, fused):
    for x in (specials(src), random_wide(src, 100_003, 1)):
        for s in (1.0, 0.7, 3.0e4, 2.0**-20, 448.0 / 3.0):
            scale = torch.tensor(s, dtype=torch.float32)
            data, amax = ops.fp8_scale_cast(x, scale, fmt, fused=fused)
            assert data.dtype == fmt and data.shape == x.shape
            # A NaN's sign: conftest.nan_sign_cleared; float32 sources keep it on every path, and
            # test_nan_code_keeps_the_sign checks ours.
            assert_exact(nan_sign_cleared(data), nan_sign_cleared(torch_cast(x, scale, fmt)), (fmt, src, s))
            want = x.float().abs().amax()
            # An amax is never negative: -1 stands for NaN, whichever payload the reduction met.
            assert_exact(torch.where(amax.isnan(), -1.0, amax), torch.where(want.isnan(), -1.0, want))


@pytest.mark.parametrize("fmt", FORMATS)
def test_nan_code_keeps_the_sign(ops, fmt):
    x = torch.tensor([math.nan, -math.nan, 1.0])
    data, _ = ops.fp8_scale_cast(x, torch.tensor(1.0), fmt)
    assert data.view(torch.uint8).tolist()[:2] == [0x7F, 0xFF]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_float_class_by_bit_pattern(ops, fmt):
    # Every 251st float32 bit pattern: all exponents, signs, NaN payloads and subnormals.
    bits = torch.arange(0, 2**32, 251, dtype=torch.int64)
    x = (bits - (bits >= 2**31).to(torch.int64) * 2**32).to(torch.int32).view(torch.float32)
    for fused in (True, False):
        data, _ = ops.fp8_scale_cast(x, torch.tensor(1.0), fmt, fused=fused)
        assert_exact(nan_sign_cleared(data), nan_sign_cleared(torch_cast(x, torch.tensor(1.0), fmt)))


@pytest.mark.skipif(os.environ.get("AUTOCASTGEN_FP8_EXHAUSTIVE") != "1", reason="set AUTOCASTGEN_FP8_EXHAUSTIVE=1")
@pytest.mark.parametrize("fmt", FORMATS)
def test_all_float32_bit_patterns(ops, fmt):
    step = 2**26
    one = torch.tensor(1.0)
    for start in range(0, 2**32, step):
        bits = torch.arange(start, start + step, dtype=torch.int64)
        x = (bits - (bits >= 2**31).to(torch.int64) * 2**32).to(torch.int32).view(torch.float32)
        data, _ = ops.fp8_scale_cast(x, one, fmt)
        assert_exact(nan_sign_cleared(data), nan_sign_cleared(torch_cast(x, one, fmt)), hex(start))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("src", SOURCES)
def test_amax_propagates_nan_and_keeps_inf(ops, src, fused):
    x = random_wide(src, 70_001, 2)
    assert_exact(ops.fp8_amax(x, fused=fused), x.float().abs().amax())
    x[12345] = -math.inf
    assert ops.fp8_amax(x, fused=fused).item() == math.inf
    x[69_999] = math.nan
    assert math.isnan(ops.fp8_amax(x, fused=fused).item())
    assert ops.fp8_amax(torch.zeros(5, dtype=src), fused=fused).item() == 0.0


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_scale_rule(ops, fmt, fused):
    amaxes = [1.0, 3.0, 0.02, 1e-10, 12345.678, 5e-37, 1e-45, 0.0, math.inf, math.nan]
    for margin in (0, 2):
        for a in amaxes:
            scale, inv = ops.fp8_scale_from_amax(torch.tensor(a), fmt, margin, fused=fused)
            want = ref_scale(torch.tensor(a), fmt, margin)
            if math.isnan(want.item()):
                assert scale.isnan() and inv.isnan(), a
            else:
                assert scale.item() == want.item(), (a, margin)
                assert inv.item() == want.reciprocal().item()
    # amax == 0 keeps 1; a tiny amax is capped at 2^126 so that 1/scale stays a normal float.
    assert ops.fp8_scale_from_amax(torch.tensor(0.0), fmt, fused=fused)[0].item() == 1.0
    scale, inv = ops.fp8_scale_from_amax(torch.tensor(1e-45), fmt, fused=fused)
    assert scale.item() == 2.0**126 and inv.item() == 2.0**-126


def test_scale_agrees_with_torchaos_formula(ops):
    # torchao's amax_to_scale: finfo.max / clamp(amax.double(), min=1e-12), rounded to float32.
    for a in torch.logspace(-11, 6, 200, dtype=torch.float32):
        scale, _ = ops.fp8_scale_from_amax(a, torch.float8_e4m3fn)
        assert scale.item() == (448.0 / a.double().clamp(min=1e-12)).float().item()
