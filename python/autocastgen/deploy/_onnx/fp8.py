"""fp8 in ONNX (Note [fp8 in a deployed program] in deploy/_fp8.py): PyTorch's _scaled_mm as
DequantizeLinear and a float32 MatMul, saturating casts to float8 as QuantizeLinear."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .elem_types import FLOAT, FLOAT8E4M3FN, FLOAT8E5M2
from .packages import helper, numpy_helper
from .packages import opset as op

if TYPE_CHECKING:
    from .packages import GraphProto, ModelProto, NodeProto


def scaled_mm_to_onnx(self: Any, mat2: Any, scale_a: Any, scale_b: Any, bias: Any = None, scale_result: Any = None,
                      out_dtype: Any = None, use_fast_accum: bool = False) -> Any:
    """aten._scaled_mm (tensorwise) for torch.onnx's custom_translation_table (ONNX Script, traced)."""
    product = op.MatMul(op.DequantizeLinear(self, scale_a), op.DequantizeLinear(mat2, scale_b))
    if bias is not None:
        product = op.Add(product, op.Cast(bias, to=FLOAT))
    if scale_result is not None:
        product = op.Mul(product, scale_result)
    return op.Cast(product, to=int(out_dtype) if out_dtype is not None else FLOAT)


ONNX_FLOAT8 = {FLOAT8E4M3FN, FLOAT8E5M2}


def casts_to_quantize_linear(model: ModelProto) -> int:
    """Each saturating Cast from float32 to float8 -> QuantizeLinear(x, 1, zero of the type)."""
    graph = model.graph
    types = {info.name: info.type.tensor_type.elem_type for info in [*graph.value_info, *graph.input]}
    replaced = 0
    for node in graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        saturate = next((a.i for a in node.attribute if a.name == "saturate"), 1)
        if node.op_type != "Cast" or to not in ONNX_FLOAT8 or types.get(node.input[0]) != FLOAT:
            continue
        if not saturate:
            continue  # a non-saturating cast (NaN above the range) is no QuantizeLinear
        scale, zero = f"{node.name}__scale", f"{node.name}__zero_point"
        graph.initializer.append(helper.make_tensor(scale, FLOAT, [], [1.0]))
        graph.initializer.append(helper.make_tensor(zero, to, [], [0.0]))
        _drop_clamp_before(graph, node, to)
        node.op_type = "QuantizeLinear"
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("saturate", 1))
        node.input.extend([scale, zero])
        replaced += 1
    used = {name for node in graph.node for name in node.input} | {out.name for out in graph.output}
    unused = [init for init in graph.initializer if init.name not in used]
    for init in unused:  # the bounds of the Clips read past
        graph.initializer.remove(init)
    return replaced


def _drop_clamp_before(graph: GraphProto, cast: NodeProto, to: int) -> None:
    """Reads past a Clip to [-max, max] of the float8 type feeding `cast` alone: QuantizeLinear's
    saturation clamps to the same bounds (the same bits, infinities included), and onnxruntime 1.32's
    Clip + QuantizeLinear fusion fails on a float8 zero point."""
    producer = next((n for n in graph.node if cast.input[0] in n.output), None)
    if producer is None or producer.op_type != "Clip" or len(producer.input) != 3:
        return
    if sum(cast.input[0] in n.input for n in graph.node) != 1:
        return
    constants = {i.name: i for i in graph.initializer}
    constants.update({n.output[0]: n.attribute[0].t for n in graph.node if n.op_type == "Constant" and n.attribute
                      and n.attribute[0].name == "value"})
    if not all(name in constants for name in producer.input[1:]):
        return
    low, high = (float(numpy_helper.to_array(constants[name])) for name in producer.input[1:])
    if (low, high) == (-FLOAT8_MAX[to], FLOAT8_MAX[to]):
        cast.input[0] = producer.input[0]
        graph.node.remove(producer)


FLOAT8_MAX = {FLOAT8E4M3FN: 448.0, FLOAT8E5M2: 57344.0}
