"""The ONNX graph pass of autocastgen.export_onnx: mixed-dtype operands made valid, ops the target
runtime has no kernel for run in float32 with the dtype's rounding, module paths in node metadata.

Note [the ONNX pass]
A baked program holds the policy as explicit casts; torch.onnx turns them into Cast nodes and every
op into ONNX ops of the dtype the policy gave it. Two things then keep the graph from running as
eager ran it:

- Mixed operands. PyTorch's CPU norms take a bfloat16 or float16 input with float32 weight and
  bias, compute in float32 and return the input's dtype; ONNX's LayerNormalization and
  GroupNormalization bind input, scale and bias to one type, so the graph is invalid. The pass
  computes such a node in the widest of its operands' types (its inputs cast up, exactly) and casts
  the outputs bound to that type back to the first input's type: eager's arithmetic, one rounding.
  Only normalisation ops are rewritten so; another op with operands of two types is refused, since
  what eager did there is not known.
- Missing kernels. ONNX Runtime's CPU provider has no bfloat16 MatMul, Add, Gelu, Softmax... and no
  float16 ones for many ops. Where a float16 kernel is missing ORT itself runs the op in float32 and
  drops the casts between such ops (its InsertCastTransformer), so chains of them never round:
  closer to float32 than to eager. The pass asks the runtime's kernel registry (`KernelTable`) which
  nodes lack a kernel for their types and, by option, runs each in float32 with casts around it:
  inputs up (exact), the output down to its dtype (the rounding eager does after each op). A
  Cast(float->low)->Cast(low->float) pair between two such nodes is that rounding, and ORT keeps it
  at every optimisation level (tested).

Note [one rounding per op]
Eager rounds each op's result once; torch.onnx writes some ops as several nodes (scaled dot-product
attention as MatMul, Softmax, MatMul...; a linear as MatMul and Add), and eager's fused kernel keeps
what passes between them in float32. So when a node must run in float32, every low-precision node
translating the same call (the same `pkg.torch.onnx.name_scopes`) runs in float32 with it, and only
the values leaving that call are rounded. Nodes torch.onnx made without that metadata stand alone.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._program import OPMATH_MARK
from .elem_types import BFLOAT16, DOUBLE, FLOAT, FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT16
from .packages import TensorProto, helper, onnx

if TYPE_CHECKING:
    from .packages import ModelProto, NodeProto, OpSchema

MODULE_KEY = "pkg.autocastgen.module"
REWRITE_KEY = "pkg.autocastgen.rewrite"
LOW_PRECISION = {BFLOAT16, FLOAT16, FLOAT8E4M3FN, FLOAT8E5M2, FLOAT8E4M3FNUZ, FLOAT8E5M2FNUZ}
FP8 = LOW_PRECISION - {BFLOAT16, FLOAT16}
WIDTH = {FLOAT8E4M3FN: 1, FLOAT8E5M2: 1, FLOAT8E4M3FNUZ: 1, FLOAT8E5M2FNUZ: 1, BFLOAT16: 2, FLOAT16: 2, FLOAT: 4,
         DOUBLE: 8}
NORMS = {"LayerNormalization", "GroupNormalization", "InstanceNormalization", "BatchNormalization",
         "RMSNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization"}


class OnnxPassError(ValueError):
    """A graph the pass cannot make valid without guessing what eager computed."""


def type_name(elem_type: int) -> str:
    name: str = TensorProto.DataType.Name(elem_type)
    return name.lower()


@dataclass(frozen=True)
class NodeNote:
    """One node the pass reports: its name, op, the types that made it a case, its module path."""

    node: str
    op: str
    dtypes: tuple[str, ...]
    module: str | None

    def __str__(self) -> str:
        where = f" in {self.module!r}" if self.module is not None else ""
        return f"{self.op} {self.node!r} ({', '.join(self.dtypes)}){where}"


class Graph:
    """A ModelProto's main graph with the element type of every value the exporter typed."""

    def __init__(self, model: ModelProto):
        self.model = model
        self.graph = model.graph
        self.types: dict[str, int] = {}
        for info in [*self.graph.input, *self.graph.output, *self.graph.value_info]:
            if info.type.HasField("tensor_type"):
                self.types[info.name] = info.type.tensor_type.elem_type
        for init in self.graph.initializer:
            self.types[init.name] = init.data_type
        for node in self.graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
                self.types[node.output[0]] = node.attribute[0].t.data_type
        self.opset = {entry.domain or "": entry.version for entry in model.opset_import}
        self.nodes: list[NodeProto] = []  # copies, written back by commit()
        for node in self.graph.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            self.nodes.append(copy)
        self._names = {name for node in self.nodes for name in [*node.input, *node.output, node.name]}
        self._names.update(self.types)
        self._upcasts: dict[tuple[str, int], str] = {}
        self._infos = {info.name: info for info in self.graph.value_info}

    def commit(self) -> None:
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def declare(self, name: str, elem_type: int) -> None:
        self.types[name] = elem_type
        if name in self._infos:
            self._infos[name].type.tensor_type.elem_type = elem_type
        else:
            self.graph.value_info.append(helper.make_tensor_value_info(name, elem_type, None))
            self._infos[name] = self.graph.value_info[-1]

    def schema(self, node: NodeProto) -> OpSchema | None:
        try:
            domain = node.domain or ""
            schema: OpSchema = onnx.defs.get_schema(node.op_type, self.opset.get(domain, 1), domain)
            return schema
        except onnx.defs.SchemaError:
            return None

    def bindings(self, node: NodeProto) -> dict[str, list[tuple[str, int, int]]]:
        """Type parameter -> [(input/output, index, element type)] for the node's typed operands."""
        schema = self.schema(node)
        if schema is None:
            return {}
        params = {c.type_param_str for c in schema.type_constraints}
        found: dict[str, list[tuple[str, int, int]]] = {}
        for kind, formals, actuals in (("input", schema.inputs, node.input), ("output", schema.outputs, node.output)):
            for i, name in enumerate(actuals):
                if not name or not formals:
                    continue
                formal = formals[min(i, len(formals) - 1)]
                if i >= len(formals) and formal.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
                    continue
                if formal.type_str in params and name in self.types:
                    found.setdefault(formal.type_str, []).append((kind, i, self.types[name]))
        return found

    def upcast(self, value: str, to: int, like: NodeProto) -> str:
        """`value` cast to `to`: one Cast per value (the program's own if it has one), placed
        right after the value's producer (or first), so that every user may share it."""
        key = (value, to)
        if key not in self._upcasts:
            cast = next((n for n in self.nodes if n.op_type == "Cast" and not n.domain and n.input[0] == value
                         and [(a.name, a.i) for a in n.attribute] == [("to", to)]), None)
            if cast is not None:
                self.nodes.remove(cast)
            else:
                out = self.fresh(f"{value}__{type_name(to)}")
                cast = helper.make_node("Cast", [value], [out], name=self.fresh(f"{like.name}__in"), to=to)
                copy_metadata(like, cast, f"casts an input up to {type_name(to)} (exact)")
                self.declare(out, to)
            producer = next((i for i, n in enumerate(self.nodes) if value in n.output), -1)
            self.nodes.insert(producer + 1, cast)
            self._upcasts[key] = cast.output[0]
        return self._upcasts[key]

    def insert_after(self, anchor: NodeProto, node: NodeProto, why: str) -> None:
        copy_metadata(anchor, node, why)
        self.nodes.insert(self._index(anchor) + 1, node)

    def _index(self, anchor: NodeProto) -> int:
        return next(i for i, n in enumerate(self.nodes) if n is anchor)


def copy_metadata(source: NodeProto, target: NodeProto, why: str) -> None:
    for prop in source.metadata_props:
        if prop.key != REWRITE_KEY:
            target.metadata_props.add(key=prop.key, value=prop.value)
    target.metadata_props.add(key=REWRITE_KEY, value=why)


def module_of(node: NodeProto) -> str | None:
    for prop in node.metadata_props:
        if prop.key == MODULE_KEY:
            module: str = prop.value
            return module
    return None


def note(graph: Graph, node: NodeProto, dtypes: Iterable[int]) -> NodeNote:
    return NodeNote(node.name, node.op_type, tuple(sorted({type_name(t) for t in dtypes})), module_of(node))


def add_module_paths(model: ModelProto) -> None:
    """Each node's module path (`model.named_modules()` spelling, "" for the root) as MODULE_KEY,
    from the exporter's name scopes: "", each enclosing module's path, the op's own name."""
    for node in model.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        scopes = props.get("pkg.torch.onnx.name_scopes")
        if scopes is None or MODULE_KEY in props:
            continue
        try:
            parts = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            continue
        if isinstance(parts, list) and len(parts) >= 2:
            node.metadata_props.add(key=MODULE_KEY, value=str(parts[-2]))
            if OPMATH_MARK in props.get("pkg.torch.onnx.stack_trace", ""):  # Note [scalar operands]
                node.metadata_props.add(key=REWRITE_KEY, value="a Python number's arithmetic in float32, as eager's")


def fix_mixed_operands(graph: Graph) -> list[NodeNote]:
    """Note [the ONNX pass], mixed operands. Returns the nodes rewritten."""
    fixed = []
    for node in list(graph.nodes):
        for param, operands in graph.bindings(node).items():
            kinds = {t for _, _, t in operands}
            if len(kinds) < 2:
                continue
            if node.op_type not in NORMS or not kinds <= set(WIDTH):
                raise OnnxPassError(
                    f"{note(graph, node, kinds)}: operands of one ONNX type ({param}) in several dtypes; only "
                    "normalisation ops are computed in the widest (what PyTorch's kernels do)")
            wide = max(kinds, key=lambda t: WIDTH[t])
            first = next(t for kind, _, t in operands if kind == "input")
            for kind, i, elem in operands:
                if kind == "input" and elem != wide:
                    node.input[i] = graph.upcast(node.input[i], wide, node)
                elif kind == "output":
                    narrow = node.output[i]
                    node.output[i] = graph.fresh(f"{narrow}__{type_name(wide)}")
                    graph.declare(node.output[i], wide)
                    graph.insert_after(node, helper.make_node("Cast", [node.output[i]], [narrow], name=graph.fresh(
                        f"{node.name}__out"), to=first), "casts the result to the input's dtype (mixed operands)")
            fixed.append(note(graph, node, kinds))
    return fixed


def nodes_without_kernels(graph: Graph, kernels: Any) -> list[NodeProto]:
    """The nodes with a low-precision operand whose types no kernel of the table takes."""
    missing = []
    for node in graph.nodes:
        if node.op_type == "Constant" and not node.domain:  # a value, not a kernel
            continue
        bindings = graph.bindings(node)
        if not any(t in LOW_PRECISION for operands in bindings.values() for _, _, t in operands):
            continue
        schema = graph.schema(node)
        if schema is not None and not kernels.has_kernel(node, schema, bindings):
            missing.append(node)
    return missing


def op_of(node: NodeProto) -> str | None:
    """Which call of the exported program the node translates (torch.onnx's name scopes end with it)."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes: str = prop.value
            return scopes
    return None


# Nodes whose output dtype an attribute gives: a Cast in a translation is a rounding it asks for.
_TYPED_BY_ATTRIBUTE = {"to", "dtype", "value"}


def with_their_ops(graph: Graph, missing: list[NodeProto]) -> list[NodeProto]:
    """Note [one rounding per op]: the nodes to run in float32, `missing` and the low-precision
    nodes that translate the same calls."""
    ops = {op_of(n) for n in missing} - {None}
    chosen = {id(n) for n in missing}
    for node in graph.nodes:
        if (op_of(node) in ops and not {a.name for a in node.attribute} & _TYPED_BY_ATTRIBUTE
                and any(graph.types.get(name) in LOW_PRECISION for name in [*node.input, *node.output])):
            chosen.add(id(node))
    return [n for n in graph.nodes if id(n) in chosen]


# Ops whose result is one of their inputs' values (or a sign flip of one): from values of a dtype
# they give values of that dtype, so their float32 result needs no rounding.
SELECTING = {"Where", "Max", "Min", "Abs", "Neg", "Relu", "Identity", "Reshape", "Transpose", "Squeeze",
             "Unsqueeze", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile",
             "Flatten", "ReduceMax", "ReduceMin", "MaxPool", "Clip"}


def run_in_float32(graph: Graph, nodes: list[NodeProto]) -> None:
    """Note [the ONNX pass], missing kernels, and Note [one rounding per op]: `nodes` in float32; a
    low-precision value one of them makes is rounded to its dtype by a Cast, except where it goes
    to another of them translating the same call, or is a SELECTING op's result of values of the
    dtype (which rounding would not change)."""
    chosen = {id(n) for n in nodes}
    outputs = {o.name for o in graph.graph.output}
    consumers: dict[str, list[NodeProto]] = {}
    for node in graph.nodes:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    unrounded: dict[str, tuple[str, str | None, bool]] = {}  # low value -> (float32 value, its op, exact)
    for node in nodes:
        op = op_of(node)
        exact = node.op_type in SELECTING and not node.domain
        for i, name in enumerate(node.input):
            if not name or graph.types.get(name) not in LOW_PRECISION:
                exact = exact and (not name or graph.types.get(name) not in WIDTH)
                continue
            inside = unrounded.get(name)
            if inside is not None and ((op is not None and inside[1] == op) or inside[2]):
                node.input[i] = inside[0]
                exact = exact and inside[2]
            else:
                node.input[i] = graph.upcast(name, FLOAT, node)
        for i, name in enumerate(node.output):
            low = graph.types.get(name)
            if low not in LOW_PRECISION:
                continue
            node.output[i] = graph.fresh(f"{name}__float")
            graph.declare(node.output[i], FLOAT)
            unrounded[name] = (node.output[i], op, exact)
            leaves = name in outputs or any(
                id(c) not in chosen or not (exact or (op is not None and op_of(c) == op))
                for c in consumers.get(name, []))
            if not leaves:
                continue
            rounding = helper.make_node("Cast", [node.output[i]], [name], name=graph.fresh(f"{node.name}__round"),
                                        to=low)
            if low in FP8:  # torch's casts to float8 do not saturate
                rounding.attribute.append(helper.make_attribute("saturate", 0))
            graph.insert_after(node, rounding, f"rounds the float32 result to {type_name(low)}")
        node.metadata_props.add(key=REWRITE_KEY, value="run in float32")
