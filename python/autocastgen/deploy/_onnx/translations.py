"""torch.onnx translations of ops whose low-precision arithmetic PyTorch's own translation does not
reproduce (custom_translation_table of export_onnx; ONNX Script, traced)."""
from __future__ import annotations

import math
from typing import Any

import torch

from .elem_types import FLOAT
from .fp8 import scaled_mm_to_onnx
from .packages import numpy, torch_lib_nn
from .packages import opset as op
from .packages import script_ir as ir


def translations() -> dict[Any, Any]:
    return {torch.ops.aten._scaled_mm.default: scaled_mm_to_onnx,
            torch.ops.aten.scaled_dot_product_attention.default: attention_to_onnx}


# Note [attention in low precision]
# Eager's CPU attention in bfloat16 or float16 is one fused kernel (flash attention): the scores and
# their softmax in float32, the unnormalised probabilities exp(s - max) rounded to the input's dtype
# for the second GEMM, which sums in float32, then the division by the float32 sum and one rounding.
# PyTorch's translation (MatMul, Softmax, MatMul in the input's dtype) rounds after each step; run
# in float32 with one rounding (Note [one rounding per op]) it still differs from eager in 31 % of a
# small causal attention layer's outputs, this one in 3 % (bfloat16; float16: 19 % against 31 %, the
# kernel's exp being a 20-bit approximation; tests/python/deploy/test_deploy_onnx.py). It is the kernel's
# arithmetic for up to 512 keys (one block; longer sequences rescale from block to block). Other
# calls (float32, dropout, dynamic shapes) take PyTorch's translation.
def attention_to_onnx(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                      is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
    low = query.dtype
    shapes = (query.shape, key.shape)
    if (low not in (ir.DataType.BFLOAT16, ir.DataType.FLOAT16) or dropout_p or len(query.shape) != 4
            or not all(isinstance(d, int) for shape in shapes for d in shape)):
        return torch_lib_nn.aten_scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                              enable_gqa)
    (batch, heads, targets, width), (_, kv_heads, sources, _) = (tuple(s) for s in shapes)
    q, k, v = (op.Cast(t, to=FLOAT) for t in (query, key, value))
    if enable_gqa and kv_heads != heads:  # repeat_interleave of the key/value heads
        def repeat(t: Any) -> Any:
            grown = op.Expand(op.Unsqueeze(t, [2]), [batch, kv_heads, heads // kv_heads, sources, width])
            return op.Reshape(grown, [batch, heads, sources, width])
        k, v = repeat(k), repeat(v)
    factor = scale if scale is not None else 1.0 / math.sqrt(width)
    scores = op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), op.Constant(value_float=factor))
    if is_causal:
        causal = numpy.triu(numpy.full((targets, sources), -numpy.inf, dtype=numpy.float32), 1)
        scores = op.Add(scores, op.Constant(value=ir.tensor(causal)))
    elif attn_mask is not None:
        if attn_mask.dtype == ir.DataType.BOOL:
            attn_mask = op.Where(attn_mask, op.Constant(value_float=0.0), op.Constant(value_float=-math.inf))
        scores = op.Add(scores, op.Cast(attn_mask, to=FLOAT))
    exps = op.Exp(op.Sub(scores, op.ReduceMax(scores, [-1], keepdims=1)))
    rounded = op.Cast(op.Cast(exps, to=int(low)), to=FLOAT)
    return op.Cast(op.Div(op.MatMul(rounded, v), op.ReduceSum(exps, [-1], keepdims=1)), to=int(low))
