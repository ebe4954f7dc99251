"""fp8 in a deployed program: what ONNX can take of autocastgen.export's fp8 GEMMs.

Note [fp8 in a deployed program]
autocastgen.export bakes an fp8 policy's GEMMs as PyTorch's ops (Note [fp8 in an exported program]
in runtime/torch/fp8/operand.cpp): weights and activations current-scaled by aten ops, then
`_scaled_mm`; delayed scaling is refused there, since its scale comes from earlier steps. So a
deployed program holds nothing of ours: AOTInductor compiles it with PyTorch's own `_scaled_mm`,
and ONNX constant-folds the weights' quantisation into fp8 initializers. For ONNX
(`scaled_mm_to_onnx` and `casts_to_quantize_linear` in _onnx/fp8.py), `_scaled_mm` (tensorwise
scales) becomes DequantizeLinear of both operands, a float32 MatMul, the bias added in float32 and
one Cast to the output dtype (what PyTorch's CPU kernel computes), and each saturating cast to
float8 a QuantizeLinear with scale 1 (the scale multiply stays a Mul before it, so the rounding is
the same). Row-wise scales (powers of two made from a float's bits) do not export to ONNX.
"""
from __future__ import annotations

import torch

FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


class Fp8ExportError(ValueError):
    """An fp8 program that cannot be deployed as it stands."""


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
