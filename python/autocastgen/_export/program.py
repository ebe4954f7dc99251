"""What autocastgen.export does to a program once its casts are traced: nothing of ours left in it,
weights stored once in the dtype they are cast to, views that hold for any layout, the guard, and
the policy's record (docs/export.md).

Note [views of any layout]
``run_decompositions`` traces the program on fake tensors under ``torch.no_grad()`` (PyTorch's
choice: an inference graph) and decomposes the model's ``reshape`` and ``contiguous`` calls by the
strides it saw: a ``reshape`` the strides allow becomes ``aten.view``, ``contiguous()`` of a
contiguous tensor disappears. An op the program keeps whole (Note [which ops a program keeps] in
ops.py) chooses its kernel again each time the program runs, and that kernel can lay its
result out otherwise than the trace's: ``scaled_dot_product_attention`` on the CPU runs the flash
kernel (its result laid out batch, sequence, heads, dim) under no_grad, and the math kernel
(contiguous) where grad mode is on and an input requires grad (T5's position bias, made from a
parameter, is its mask). A view of the trace's layout then fails when the program runs ("view size
is not compatible with input tensor's size and stride"; PyTorch's own ``run_decompositions({})``
of the float32 program fails the same way). So the program's views are ``aten.reshape``: the same
view where the strides allow it, a copy where they do not (what eager's ``contiguous()`` and
``reshape`` give), the same values either way. The kept op chooses as eager does in the caller's
grad mode, so the program gives eager's bits with gradients on and under no_grad alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

METADATA_KEY = "autocastgen"  # in graph_module.meta["custom"], which torch.export.save keeps

# The ops a traced driver call puts into the graph while statistics, the watch or the range record
# are on (Note [insight in compiled code] in runtime/torch/state/traced.cpp): they replay a record
# of this process, so a program keeps none of them.
_INSIGHT_OPS = ("stats_traced_call", "observe_traced")


class ExportError(RuntimeError):
    """A program autocastgen.export or apply_policy cannot make as asked; nothing was returned."""


def graph_modules(program: torch.export.ExportedProgram) -> list[torch.fx.GraphModule]:
    """The program's graph and the bodies of its higher-order ops."""
    return [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]


def drop_insight_ops(program: torch.export.ExportedProgram) -> None:
    for module in graph_modules(program):
        for node in list(module.graph.nodes):
            target = node.target
            if isinstance(target, torch._ops.OpOverload) and target.namespace == "autocastgen":
                if target._schema.name.split("::")[-1] in _INSIGHT_OPS:
                    module.graph.erase_node(node)
        module.recompile()


def refuse_leftovers(program: torch.export.ExportedProgram) -> None:
    """Nothing of autocastgen, and no autocast scope, may stay in a program: it runs without us."""
    for module in graph_modules(program):
        for node in module.graph.nodes:
            target = node.target
            if isinstance(target, torch._ops.OpOverload) and target.namespace == "autocastgen":
                name = target._schema.name
                hint = ""
                if name.startswith("autocastgen::fp8"):
                    hint = (": an fp8 entry's weights went through autocastgen's weight cache (delayed scaling, or "
                            "AUTOCASTGEN_FP8_TRACE=opaque); a program takes fp8 with current scaling only, as "
                            "PyTorch's own ops")
                raise ExportError(f"autocastgen.export: the traced program holds {name} (node {node.name}), which "
                                  f"a program loaded without autocastgen cannot run{hint}")
            if target is torch.ops.higher_order.wrap_with_autocast:
                raise ExportError(f"autocastgen.export: the traced program still holds an autocast scope (node "
                                  f"{node.name}), which would be decided again when it is decomposed")


def _plain_cast(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype of a ``_to_copy(x, dtype=D)`` that changes nothing but the dtype, else None."""
    if node.op != "call_function" or node.target is not torch.ops.aten._to_copy.default or len(node.args) != 1:
        return None
    dtype = node.kwargs.get("dtype")
    if set(node.kwargs) - {"dtype"} or not isinstance(dtype, torch.dtype):
        return None
    return dtype


def store_weights_once(program: torch.export.ExportedProgram) -> tuple[torch.export.ExportedProgram, dict[str, str]]:
    """A parameter or buffer every use of which casts it to one dtype is stored in that dtype, and
    its casts leave the graph: the same bits as casting at every call, once, and smaller files.
    Returns the program and {target: dtype} of what was stored so."""
    signature = program.graph_signature
    targets = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    mutated = set(signature.buffers_to_mutate.values())
    state_dict = dict(program.state_dict)
    constants = dict(program.constants)
    stored: dict[str, str] = {}
    graph = program.graph_module.graph
    for node in graph.nodes:
        target = targets.get(node.name)
        if node.op != "placeholder" or target is None or target in mutated or not node.users:
            continue
        dtypes = {_plain_cast(user) for user in node.users}
        if len(dtypes) != 1 or None in dtypes:
            continue
        dtype = dtypes.pop()
        table = state_dict if target in state_dict else constants
        old = table[target]
        new = old.detach().to(dtype)
        table[target] = torch.nn.Parameter(new, requires_grad=old.requires_grad) if isinstance(
            old, torch.nn.Parameter) else new
        fake = node.meta["val"]
        fake_mode = torch._guards.detect_fake_mode([fake])
        assert fake_mode is not None, f"{node.name}: a placeholder without a fake tensor"
        with fake_mode:
            node.meta["val"] = torch.empty_strided(fake.shape, fake.stride(), dtype=dtype, device=fake.device)
        for user in list(node.users):
            user.replace_all_uses_with(node)
            graph.erase_node(user)
        stored[target] = str(dtype).removeprefix("torch.")
    program.graph_module.recompile()
    return program._update(program.graph_module, signature, state_dict=state_dict, constants=constants), stored


def views_of_any_layout(program: torch.export.ExportedProgram) -> int:
    """Note [views of any layout]: every ``aten.view`` of the program's graphs made ``aten.reshape``;
    returns how many."""
    changed = 0
    for module in graph_modules(program):
        for node in module.graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.view.default:
                node.target = torch.ops.aten.reshape.default
                changed += 1
        module.recompile()
    return changed


def guarded(program: torch.export.ExportedProgram, device: str) -> torch.export.ExportedProgram:
    """Note [the guard]: the program's body inside PyTorch's ``wrap_with_autocast(device, None,
    False, None, body, ...)``, a scope that switches autocast *off* while the body runs. Run inside
    torch.autocast, a baked program would have PyTorch's lists applied again on top of its casts
    (autocast twice); in the scope the casts are the program's alone. It is PyTorch's own op, kept
    by torch.export.save and load, run by ``program.module()``; run_decompositions and AOTInductor
    inline it (its body traced with autocast off, so the casts stay as baked).

    Grad mode is the caller's as well: the body's views are first made to hold for any layout its
    kept ops give in either mode (Note [views of any layout])."""
    from torch._export.passes.replace_autocast_with_hop_pass import replace_autocast_with_hop_pass

    views_of_any_layout(program)
    module = program.graph_module
    graph = module.graph
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    output = next(node for node in graph.nodes if node.op == "output")
    anchor = placeholders[-1] if placeholders else next(iter(graph.nodes))
    with graph.inserting_after(anchor) if placeholders else graph.inserting_before(anchor):
        enter = graph.call_function(torch.amp.autocast_mode._enter_autocast, (device, None, False, None))
    with graph.inserting_before(output):
        graph.call_function(torch.amp.autocast_mode._exit_autocast, (enter,))
    module.recompile()
    module, signature = replace_autocast_with_hop_pass(module, program.graph_signature)
    assert signature is not None  # given one, the pass returns one
    # The pass builds a new graph, whose placeholders FX names anew (`input` becomes `input_1`: a
    # builtin's name); the signature names them as the graph does.
    placeholders = [node for node in module.graph.nodes if node.op == "placeholder"]
    specs = [dataclasses.replace(spec, arg=dataclasses.replace(spec.arg, name=node.name))
             if getattr(spec.arg, "name", node.name) != node.name else spec
             for spec, node in zip(signature.input_specs, placeholders, strict=True)]
    signature = dataclasses.replace(signature, input_specs=specs)
    return program._update(module, signature)


def is_guard(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a scope that switches autocast off, as guarded() puts around the body."""
    return (node.op == "call_function" and node.target is torch.ops.higher_order.wrap_with_autocast
            and node.args[2] is False)


def unguarded(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A copy of ``program`` with guarded()'s scope inlined: its body's nodes in the top graph, each
    with its metadata (``nn_module_stack``, stack traces), for passes that rewrite a deployed graph
    (ONNX, AOTInductor). run_decompositions would inline it too, but traces the body anew and drops
    the nodes' module paths."""
    import copy

    program = copy.deepcopy(program)
    module = program.graph_module
    graph = module.graph
    for scope in [node for node in graph.nodes if is_guard(node)]:
        body_attr = scope.args[4]  # the get_attr of the body's submodule
        body = getattr(module, body_attr.target)
        env: dict[torch.fx.Node, Any] = {}
        inputs = iter(scope.args[5:])
        results: Any = None
        with graph.inserting_before(scope):
            for node in body.graph.nodes:
                if node.op == "placeholder":
                    env[node] = next(inputs)
                elif node.op == "output":
                    results = torch.fx.node.map_arg(node.args[0], env.__getitem__)
                elif node.op == "get_attr":
                    raise ExportError(f"a guarded program's body holds {node.name}, a get_attr the inliner does "
                                      "not move")
                else:
                    env[node] = graph.node_copy(node, env.__getitem__)
        for user in list(scope.users):  # getitem(scope, i) -> the body's i-th result
            user.replace_all_uses_with(results[user.args[1]])
            graph.erase_node(user)
        graph.erase_node(scope)
        if not body_attr.users:
            graph.erase_node(body_attr)
            delattr(module, body_attr.target)
    graph.lint()
    module.recompile()
    return program


def record(program: torch.export.ExportedProgram, entry: dict[str, Any]) -> None:
    """The policy's record (Note [the program's record] in bake.py) into the program's metadata."""
    custom = dict(program.graph_module.meta.get("custom") or {})
    custom[METADATA_KEY] = entry
    program.graph_module.meta["custom"] = custom


def recorded(program: torch.export.ExportedProgram) -> dict[str, Any] | None:
    custom = program.graph_module.meta.get("custom") or {}
    entry = custom.get(METADATA_KEY)
    return entry if isinstance(entry, dict) else None
