"""Which ops and types an ONNX Runtime execution provider has kernels for, from the runtime's own
kernel registry (Note [the ONNX pass] in passes.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .packages import TensorProto, ort_kernels

if TYPE_CHECKING:
    from .packages import NodeProto, OpSchema


class KernelTable:
    """Which op, opset and types an ONNX Runtime execution provider has kernels for, from the
    runtime's own registry (onnxruntime.capi's get_all_opkernel_def)."""

    def __init__(self, provider: str = "CPUExecutionProvider"):
        self.provider = provider
        self.kernels: dict[tuple[str, str], list[tuple[tuple[int, int], dict[str, set[int]]]]] = {}
        for k in ort_kernels.get_all_opkernel_def():
            if k.provider != provider:
                continue
            domain = "" if k.domain in ("", "ai.onnx") else k.domain
            constraints = {param: {_elem_type(t) for t in types} for param, types in k.type_constraints.items()}
            self.kernels.setdefault((domain, k.op_name), []).append((tuple(k.version_range), constraints))
        if not self.kernels:
            raise ValueError(f"onnxruntime has no kernels for the execution provider {provider!r}")

    def has_kernel(self, node: NodeProto, schema: OpSchema,
                   bindings: dict[str, list[tuple[str, int, int]]]) -> bool:
        for (low, high), constraints in self.kernels.get((node.domain or "", node.op_type), []):
            if not low <= schema.since_version <= high:
                continue
            if all(t in constraints[param] for param, operands in bindings.items() if param in constraints
                   for _, _, t in operands):
                return True
        return False


def _elem_type(text: str) -> int:
    name = text.removeprefix("tensor(").removesuffix(")")
    spelled = {"float": "FLOAT", "double": "DOUBLE", "float16": "FLOAT16", "bfloat16": "BFLOAT16"}.get(
        name, name.upper())
    try:
        value: int = TensorProto.DataType.Value(spelled)
        return value
    except ValueError:
        return -1
