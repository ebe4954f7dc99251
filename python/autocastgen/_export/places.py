"""Precision by place in an exported graph: module frames and fp32 sections' inputs from each node's
``nn_module_stack``, while autocastgen.export re-traces the graph under the policy (docs/export.md).

Note [places in an exported graph]
Eager code learns the running module from attach()'s hooks (places.py); an exported graph has no
modules, but every node torch.export made records the modules it ran in
(``node.meta["nn_module_stack"]``: a key per module call, with its path as named_modules() spells
it, outermost first). Before the graph is re-traced (run_decompositions under autocast, which runs
it node by node), :class:`PlaceNodes` puts into it a call of :meth:`Frames.enter` before every node
whose modules differ from the previous node's: it leaves the frames the node is not in and enters
the others, as the hooks would, so the drivers the node reaches decide by its place. A value that
flows into a module call from outside it (a user input or an op's result, not a parameter) goes
through :meth:`Frames.module_input` first, which casts it to float32 when that module's section is
``fp32`` (Note [the fp32 section's inputs] in autocastgen/places.py: attach's pre-hook does the same to the
module's tensor arguments). Those calls are Python functions, not ops: the trace runs them and
records only what they call on tensors. They are removed when the re-trace ends.

Note [dtype assertions in a re-traced graph]
torch.export records ``aten._assert_tensor_metadata(x, dtype=...)`` beside a ``.to(...)`` call, with
the dtype ``x`` had when it was exported. A float32 program (apply_policy's) re-traced under a
policy gives ``x`` another dtype by design, and the assertion would fail the trace; so while the
graph is re-traced those nodes assert no dtype (device and layout still), and their values reach
them as they come, not through module_input.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .._core.runtime import load_runtime

Stack = tuple[tuple[str, str], ...]  # (module call key, module path), outermost first
_ASSERT_METADATA = torch.ops.aten._assert_tensor_metadata.default


def _ops() -> Any:
    load_runtime()
    return torch.ops.autocastgen


def node_stack(node: torch.fx.Node) -> Stack:
    """The module calls a node ran in, outermost first (root included)."""
    stack = node.meta.get("nn_module_stack") or {}
    return tuple((str(key), str(value[0])) for key, value in stack.items())


class Frames:
    """The frames the re-trace is in: entered and left by the calls PlaceNodes puts in the graph."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.entered: list[tuple[str, int]] = []  # (module call key, depth below its frame)
        self.sections: dict[str, str] = {}  # module call key -> its section while entered
        self.autocast_on = True  # whether the graph being run runs under autocast (ops.py)

    def enter(self, *stack: tuple[str, str]) -> None:
        self.autocast_on = torch.is_autocast_enabled(self.device)
        common = 0
        while common < min(len(self.entered), len(stack)) and self.entered[common][0] == stack[common][0]:
            common += 1
        self._leave_to(common)
        for key, path in stack[common:]:
            depth = int(_ops().module_depth())
            self.sections[key] = str(_ops().module_enter_section(path, self.device))
            self.entered.append((key, depth))

    def module_input(self, value: Any, key: str) -> Any:
        if (
            self.sections.get(key) == "fp32"
            and isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and value.dtype != torch.float64
        ):
            return value.float()
        return value

    def close(self) -> None:
        self._leave_to(0)

    def _leave_to(self, count: int) -> None:
        if count < len(self.entered):
            _ops().module_exit(self.entered[count][1])
            del self.entered[count:]


class PlaceNodes:
    """Puts the calls of Note [places in an exported graph] into a program's graphs; remove() takes
    them out again (the program is the caller's: it is left as it was)."""

    def __init__(self, program: torch.export.ExportedProgram, frames: Frames) -> None:
        self.frames = frames
        signature = program.graph_signature
        self.not_inputs = {*signature.inputs_to_parameters, *signature.inputs_to_buffers,
                           *signature.inputs_to_lifted_tensor_constants}
        self.added: list[tuple[torch.fx.GraphModule, list[torch.fx.Node]]] = []
        self.loosened: list[tuple[torch.fx.Node, dict[str, Any]]] = []  # Note [dtype assertions in a re-traced graph]
        self.root = program.graph_module
        for module in program.graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                self._insert(module)

    def _insert(self, module: torch.fx.GraphModule) -> None:
        graph = module.graph
        added: list[torch.fx.Node] = []
        stacks: dict[torch.fx.Node, Stack] = {}
        casts: dict[tuple[torch.fx.Node, str], torch.fx.Node] = {}
        previous: Stack | None = None
        for node in list(graph.nodes):
            if node.op == "output":
                if module is self.root:  # a body's caller enters its next node's frames itself
                    with graph.inserting_before(node):
                        added.append(graph.call_function(self.frames.enter, ()))
                break
            if node.op != "call_function":
                stacks[node] = ()
                continue
            stack = stacks[node] = node_stack(node)
            if node.target is _ASSERT_METADATA:
                if node.kwargs.get("dtype") is not None:
                    self.loosened.append((node, dict(node.kwargs)))
                    node.kwargs = {**node.kwargs, "dtype": None}
                continue
            if stack != previous:
                with graph.inserting_before(node):
                    enter = graph.call_function(self.frames.enter, stack)
                enter.meta["nn_module_stack"] = node.meta.get("nn_module_stack")
                added.append(enter)
                previous = stack
            self._cast_inputs(graph, node, stack, stacks, casts, added)
            if isinstance(node.target, torch._ops.HigherOrderOperator):
                previous = None  # its body sets frames of its own: the next node enters again
        self.added.append((module, added))
        module.recompile()

    def _cast_inputs(self, graph: torch.fx.Graph, node: torch.fx.Node, stack: Stack,
                     stacks: dict[torch.fx.Node, Stack], casts: dict[tuple[torch.fx.Node, str], torch.fx.Node],
                     added: list[torch.fx.Node]) -> None:
        """Routes each tensor argument made outside one of the node's module calls through
        module_input for each such call, outermost first (one cast node per value and call)."""
        keys = [key for key, path in stack if path]  # the root ("") matches no pattern
        for source in node.all_input_nodes:
            if source.op == "get_attr" or source.name in self.not_inputs:
                continue
            if not isinstance(source.meta.get("val"), torch.Tensor):
                continue
            made_in = {key for key, _ in stacks.get(source, ())}
            value = source
            for key in keys:
                if key in made_in:
                    continue
                cast = casts.get((source, key))
                if cast is None:
                    with graph.inserting_before(node):
                        cast = graph.call_function(self.frames.module_input, (value, key))
                    cast.meta.update(val=source.meta["val"], nn_module_stack=node.meta.get("nn_module_stack"))
                    casts[(source, key)] = cast
                    added.append(cast)
                value = cast
            if value is not source:
                node.replace_input_with(source, value)

    def remove(self) -> None:
        for node, kwargs in self.loosened:
            node.kwargs = kwargs
        self.loosened.clear()
        for module, added in self.added:
            graph = module.graph
            for node in reversed(added):
                if node.target == self.frames.module_input:
                    source = node.args[0]
                    assert isinstance(source, torch.fx.Node)  # module_input(x, ...) of the node it marks
                    node.replace_all_uses_with(source)
                graph.erase_node(node)
            module.recompile()
        self.added.clear()


@contextmanager
def places_in(program: torch.export.ExportedProgram, device: str) -> Iterator[Frames]:
    """The program's graphs with the calls of Note [places in an exported graph] while the block runs."""
    frames = Frames(device)
    nodes = PlaceNodes(program, frames)
    try:
        yield frames
    finally:
        frames.close()
        nodes.remove()
