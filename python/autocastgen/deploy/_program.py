"""The program a deployment starts from: a baked ExportedProgram holding only PyTorch's ops, with
autocast off while it is decomposed, exported or compiled (docs/deploy.md)."""
from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from .. import state
from .._export import export, load_program
from .._export.program import is_guard, unguarded

# A deployed program holds no op of ours (Note [fp8 in a deployed program]).
_OUR_NAMESPACE = "autocastgen"


class DeployError(ValueError):
    """A program that cannot be deployed as asked; the message says which node and what to do."""


def deployable_program(program: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
                       device: str | None = None, dtype: torch.dtype | None = None, policy: Any = None,
                       trusted: bool = False) -> torch.export.ExportedProgram:
    """A baked ExportedProgram with only PyTorch's ops: `program` itself when it is one (checked), the
    program saved at `program` when it is a path (read as data unless `trusted`: Note [a program file
    is data]), or `autocastgen.export(program, args, kwargs, device=, dtype=, policy=)` of a module,
    with autocastgen.export's guard scope inlined; what cannot run without autocastgen raises DeployError."""
    from_file = isinstance(program, (str, os.PathLike))
    if from_file or isinstance(program, torch.export.ExportedProgram):
        if device is not None or dtype is not None or policy is not None or args or kwargs:
            raise DeployError("an ExportedProgram is deployed as it was baked: device=, dtype=, policy=, args and "
                              "kwargs are for a module, which autocastgen.export bakes first")
        # The passes below edit its graph: a program read here is ours, the caller's stays as it was.
        program = load_program(program, trusted=trusted) if from_file else copy.deepcopy(program)
    else:
        program = _export(program, args, kwargs, device=device, dtype=dtype, policy=policy)
    ours = set()
    guard = False
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.ops.higher_order.wrap_with_autocast:
            # Note [the guard] in _export/program.py: autocastgen.export's scope switches autocast off;
            # any other scope's casts are decided only when it is decomposed.
            if is_guard(node):
                guard = True
                continue
            raise DeployError(
                f"the program is not baked: node {node.name} is an autocast scope (wrap_with_autocast), whose casts "
                "are decided when it is decomposed; bake it with autocastgen.export, or run_decompositions() while "
                "the policy is loaded")
        if _namespace(node.target) == _OUR_NAMESPACE:
            ours.add(node.target)
    if guard:  # its body inlined, module paths kept; the passes below see every node
        program = unguarded(program)
    if ours:
        raise DeployError(
            f"the program holds autocastgen's ops {sorted(str(op) for op in ours)}, which need autocastgen to run "
            "(statistics or the watch on while it was baked, or fp8 GEMMs decomposed by hand): bake it with "
            "autocastgen.export, which writes fp8 as PyTorch's ops (docs/export.md)")
    _explicit_amax_dims(program)
    deployable: torch.export.ExportedProgram = program
    return deployable


def _export(model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None,
            **options: Any) -> torch.export.ExportedProgram:
    missing = [name for name in ("device", "dtype") if options[name] is None]
    if missing:
        raise DeployError(f"deploying a module needs {' and '.join(missing)}= (what autocastgen.export bakes)")
    return export(model, tuple(args), kwargs, **options)


def _namespace(target: Any) -> str | None:
    name = getattr(target, "namespace", None)
    return name if isinstance(name, str) else None


def _explicit_amax_dims(program: torch.export.ExportedProgram) -> None:
    """`amax(x)` with its default dim=[] (every dimension) spelled out: torch.onnx's translation
    needs the argument (the traced fp8 route reduces whole tensors so)."""
    changed = False
    for node in program.graph.nodes:
        if node.target is torch.ops.aten.amax.default and len(node.args) == 1 and "dim" not in node.kwargs:
            node.args = (node.args[0], list(range(node.args[0].meta["val"].dim())), False)
            changed = True
    if changed:
        program.graph_module.recompile()


def _devices(program: torch.export.ExportedProgram) -> set[str]:
    found = {"cpu"}
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            found.add(value.device.type)
    return found


@contextlib.contextmanager
def autocast_off(program: torch.export.ExportedProgram) -> Iterator[None]:
    """PyTorch's and autocastgen's autocast off for the program's devices: its casts are baked, and
    decomposing or compiling it inside a scope would dispatch its ops through autocast again."""
    with contextlib.ExitStack() as stack:
        for device in sorted(_devices(program)):
            stack.enter_context(torch.autocast(device, enabled=False))
            if state.is_enabled(device):
                stack.enter_context(state.autocast(device, enabled=False))
        yield




# Note [scalar operands]
# Eager's CPU arithmetic on a bfloat16 or float16 tensor and a Python number computes in float32
# with the number as a float32 (TensorIterator's opmath), then rounds once: `scores * 0.35355339`.
# torch.onnx makes the number a constant of the tensor's dtype (0.353515625 in bfloat16), and so
# does Inductor's lowering, so the product differs from eager's in many elements (the attention
# block: 6.7e-4 from eager in both). Deployed programs write such calls as eager computes them: the
# tensor cast up (exact), the op in float32 with the number, one cast down; the block then equals
# eager bit for bit in ONNX Runtime and in AOTInductor.
_SCALAR_ARITHMETIC = {torch.ops.aten.mul.Tensor, torch.ops.aten.div.Tensor, torch.ops.aten.add.Tensor,
                      torch.ops.aten.sub.Tensor, torch.ops.aten.rsub.Scalar, torch.ops.aten.mul.Scalar,
                      torch.ops.aten.div.Scalar, torch.ops.aten.add.Scalar, torch.ops.aten.sub.Scalar}
_LOWER_PRECISION = (torch.bfloat16, torch.float16)
OPMATH_MARK = "[autocastgen] a Python number's arithmetic in float32, as eager's (Note [scalar operands])"


def scalar_arithmetic_in_float32(program: torch.export.ExportedProgram) -> int:
    """Note [scalar operands]. Returns the number of calls rewritten."""
    graph = program.graph
    rewritten = 0
    for node in list(graph.nodes):
        value = node.meta.get("val")
        if (node.target not in _SCALAR_ARITHMETIC or not isinstance(value, torch.Tensor)
                or value.dtype not in _LOWER_PRECISION
                or not any(isinstance(a, (int, float)) and not isinstance(a, bool) for a in node.args)):
            continue

        def add(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], fake_value: Any,
                node: torch.fx.Node = node) -> torch.fx.Node:
            new: torch.fx.Node = graph.call_function(target, args, kwargs)
            new.meta.update({k: v for k, v in node.meta.items() if k != "val"})
            # Decompositions keep a node's stack trace, and torch.onnx writes it into the node's
            # metadata: the ONNX pass marks these nodes by it.
            new.meta["stack_trace"] = f"{node.meta.get('stack_trace') or ''}\n{OPMATH_MARK}"
            new.meta["val"] = fake_value
            return new

        # A graph's val is a FakeTensor (typed as a Tensor here).
        with graph.inserting_before(node), value.fake_mode:  # type: ignore[attr-defined]
            args = tuple(add(torch.ops.aten._to_copy.default, (a,), {"dtype": torch.float32},
                             a.meta["val"].to(torch.float32)) if isinstance(a, torch.fx.Node) else a
                         for a in node.args)
            fake_args = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
            wide = add(node.target, args, dict(node.kwargs), node.target(*fake_args, **node.kwargs))
            down = add(torch.ops.aten._to_copy.default, (wide,), {"dtype": value.dtype},
                       wide.meta["val"].to(value.dtype))
        node.replace_all_uses_with(down)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        program.graph_module.recompile()
    return rewritten
