"""fp8 in a deployed program: the weight quantisation of autocastgen's fp8 GEMMs as PyTorch ops
(nothing of ours at run time), and fp8 GEMMs as ONNX QuantizeLinear / DequantizeLinear.

Note [fp8 in a deployed program]
A program exported under an fp8 policy quantises activations with PyTorch ops (Note [fp8 traced
route] in runtime/torch/fp8/operand.cpp) and weights through our op fp8_quantize_weight (or
fp8_quantize_weight_rowwise), whose kernel holds the weight cache and delayed scaling's history.
For deployment the weight ops (and fp8_quantize, the opaque route's) are decomposed into the
PyTorch ops of the same scale rule
(`aten_scale_from_amax` and `aten_power_of_two_scale` in runtime/torch/fp8/quantize.cpp, step for
step, so the bits are the op's: tests/python/test_deploy_fp8.py), which AOTInductor compiles
with PyTorch's own `_scaled_mm`, and which ONNX constant-folds into fp8 initializers. Delayed
scaling is refused: its scale comes from the amaxes of earlier steps, which a program does not
hold. For ONNX (`scaled_mm_to_onnx` and `casts_to_quantize_linear` in _onnx_fp8.py), `_scaled_mm` (tensorwise scales) becomes DequantizeLinear of both operands, a
float32 MatMul, the bias added in float32 and one Cast to the output dtype (what PyTorch's CPU
kernel computes), and each saturating cast to float8 a QuantizeLinear with scale 1 (the scale
multiply stays a Mul before it, so the rounding is the same).
"""
from __future__ import annotations

from typing import Any

import torch

K_MAX_SCALE = 2.0**126  # k8::kMaxScale (kernels/fp8/common): the largest scale the rule gives
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


class Fp8ExportError(ValueError):
    """An fp8 program that cannot be deployed as it stands."""


def _scale_from_amax(amax: torch.Tensor, fp8_max: float, margin: int, fallback: torch.Tensor) -> torch.Tensor:
    a = amax.to(torch.float64)
    s = torch.div(torch.scalar_tensor(fp8_max, dtype=torch.float64, device=a.device), a)
    if margin > 0:
        s = s.mul(2.0**-margin)
    s = s.clamp_max(K_MAX_SCALE).to(torch.float32)
    s = torch.where(a > 0, s, fallback.to(torch.float32))
    return torch.where(torch.isfinite(a), s, float("nan"))


def quantize_weight(weight: torch.Tensor, dtype: torch.dtype, scaling: str = "current", amax_history_len: int = 16,
                    margin: int = 0, cache: bool = True, fused: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8_quantize_weight for a program: current scaling, one scale per tensor."""
    if scaling != "current":
        raise Fp8ExportError(
            f"fp8 weights with {scaling} scaling cannot be deployed: their scale comes from the amaxes of earlier "
            "steps, which an exported program does not hold; export under a policy with fp8: {scaling: current}")
    fp8_max = torch.finfo(dtype).max
    one = torch.ones((), dtype=torch.float32, device=weight.device)
    scale = _scale_from_amax(weight.abs().amax().to(torch.float32), fp8_max, margin, one)
    data = (weight.to(torch.float32) * scale).clamp(-fp8_max, fp8_max).to(dtype)
    return data, scale.reciprocal()


def quantize_weight_rowwise(weight: torch.Tensor, dtype: torch.dtype, reduced_dim: int, margin: int = 0,
                            cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8_quantize_weight_rowwise for a program: power-of-two scales per row of the reduced dim."""
    fp8_max = torch.finfo(dtype).max
    amax = weight.abs().amax([reduced_dim], keepdim=True).to(torch.float32)
    scale = _scale_from_amax(amax, fp8_max, margin, torch.ones((), dtype=torch.float32, device=weight.device))
    pow2 = torch.bitwise_and(scale.view(torch.int32), 0x7F800000).view(torch.float32)
    scale = torch.where(torch.isfinite(scale), pow2, scale)
    data = (weight.to(torch.float32) * scale).clamp(-fp8_max, fp8_max).to(dtype).contiguous()
    return data, scale.reciprocal()


def quantize(x: torch.Tensor, dtype: torch.dtype, margin: int = 0, fused: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8_quantize (the opaque route's activations, AUTOCASTGEN_FP8_TRACE=opaque) for a program."""
    return quantize_weight(x, dtype, "current", 16, margin)


def decompositions() -> dict[Any, Any]:
    """Our fp8 quantisation ops -> PyTorch ops, for ExportedProgram.run_decompositions."""
    ops = torch.ops.autocastgen
    table: dict[Any, Any] = {}
    if hasattr(ops, "fp8_quantize_weight"):
        table[ops.fp8_quantize_weight.default] = quantize_weight
        table[ops.fp8_quantize.default] = quantize
    if hasattr(ops, "fp8_quantize_weight_rowwise"):
        table[ops.fp8_quantize_weight_rowwise.default] = quantize_weight_rowwise
    return table


def check_onnx_fp8(program: torch.export.ExportedProgram) -> None:
    """ONNX takes fp8 GEMMs with one scale per operand (DequantizeLinear per tensor). Row-wise
    scales are powers of two made by masking a float's bits (a view as int32), which ONNX lacks."""
    casts = [n for n in program.graph.nodes if n.target is torch.ops.aten._to_copy.default
             and n.kwargs.get("dtype") in FLOAT8]
    bit_views = [n for n in program.graph.nodes if n.target is torch.ops.aten.view.dtype]
    if casts and bit_views:
        raise Fp8ExportError(
            f"fp8 with row-wise scales ({bit_views[0].name} in {module_path(bit_views[0])!r} makes a power-of-two "
            "scale from a float's bits) does not export to ONNX: use granularity: tensorwise for ONNX, or "
            "export_aoti")
    for node in program.graph.nodes:
        if node.target is torch.ops.aten._scaled_mm.default:
            scales = [node.args[2], node.args[3]]
            if any(s.meta["val"].numel() != 1 for s in scales):
                raise Fp8ExportError(
                    f"fp8 GEMM {node.name} in {module_path(node)!r} has row-wise scales; ONNX export takes fp8 "
                    "GEMMs with tensorwise scales (granularity: tensorwise), deploy row-wise ones with export_aoti")
        if node.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default) and any(
                isinstance(a, torch.fx.Node) and a.meta["val"].dtype in FLOAT8 for a in node.args):
            raise Fp8ExportError(f"fp8 {node.target} in {module_path(node)!r} does not export to ONNX")


def module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return next(reversed(stack.values()))[0] if stack else ""
