"""Shared pieces of the fp8 pytest files: the runtime library, an independent fp8 reference; the
tests' shared support modules (tests/python: exact.py) on sys.path."""
from __future__ import annotations

import glob
import os
import sys

import pytest

torch = pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(REPO, "tests", "python") not in sys.path:
    sys.path.append(os.path.join(REPO, "tests", "python"))


def _library_path():
    # ctest passes the built library; by hand, the newest build*/lib copy is used.
    path = os.environ.get("AUTOCASTGEN_RUNTIME_TORCH_LIB")
    if path:
        return path
    found = glob.glob(os.path.join(REPO, "build*", "lib", "libautocastgen_runtime_torch.so"))
    return max(found, key=os.path.getmtime) if found else None


@pytest.fixture(scope="session")
def ops():
    path = _library_path()
    if path is None:
        pytest.skip("libautocastgen_runtime_torch.so is not built (set AUTOCASTGEN_RUNTIME_TORCH_LIB)")
    torch.ops.load_library(path)
    cuda_part = os.path.join(os.path.dirname(path), "libautocastgen_runtime_torch_cuda.so")
    if torch.version.cuda and os.path.exists(cuda_part):  # the CUDA kernels (Note [the CUDA part of the runtime])
        torch.ops.load_library(cuda_part)
    return torch.ops.autocastgen


@pytest.fixture
def fresh_fp8_state(ops):
    """Each test starts with no fp8 weight copies, zeroed cache counters and no delayed-scaling
    history, and leaves no weight copies behind."""
    ops.fp8_clear_weight_cache()
    ops.fp8_reset_weight_cache_stats()
    ops.fp8_reset_delayed_scaling_state()
    yield
    ops.fp8_clear_weight_cache()


FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def ref_scale(amax: torch.Tensor, dtype: torch.dtype, margin: int = 0) -> torch.Tensor:
    """The documented scale rule, written from its description (Note [fp8 scale])."""
    a = float(amax)
    if a != a or a == float("inf"):
        return torch.tensor(float("nan"))
    if a == 0.0:
        return torch.tensor(1.0)
    s = torch.finfo(dtype).max / a / 2.0**margin  # Python floats are doubles
    return torch.tensor(min(s, 2.0**126), dtype=torch.float32)


def nan_sign_cleared(codes: torch.Tensor) -> torch.Tensor:
    """fp8 codes with the sign bit of each NaN code (0x7F, 0xFF) cleared, the same dtype: PyTorch's
    widening of a bfloat16/float16 NaN to float32 drops its sign on some paths (its vectorised and
    scalar loops differ), so where its cast is the reference a NaN's sign is not compared."""
    raw = codes.view(torch.uint8)
    return torch.where((raw & 0x7F) == 0x7F, raw & 0x7F, raw).view(codes.dtype)


def ref_quantize(x: torch.Tensor, dtype: torch.dtype, margin: int = 0, scale: torch.Tensor | None = None):
    """Current scaling with PyTorch's own ops: (fp8 data, the GEMM's 1/scale)."""
    if scale is None:
        scale = ref_scale(x.detach().abs().max(), dtype, margin)
    m = torch.finfo(dtype).max
    q = (x.detach().float() * scale).clamp(-m, m).to(dtype)
    return q, scale.reciprocal()
