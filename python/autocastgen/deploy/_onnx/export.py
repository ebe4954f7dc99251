"""autocastgen.export_onnx: a baked program as ONNX that passes onnx.checker and runs in ONNX Runtime
with the policy's precision (docs/deploy.md; the graph pass: Note [the ONNX pass] in passes.py)."""
from __future__ import annotations

import ctypes
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..._export.program import recorded
from .._fp8 import FLOAT8, Fp8ExportError, check_onnx_fp8
from .._program import DeployError, autocast_off, deployable_program, scalar_arithmetic_in_float32
from . import fp8, passes, translations
from .elem_types import BFLOAT16, BOOL, DOUBLE, FLOAT, FLOAT8E4M3FN, FLOAT8E5M2, FLOAT16, INT8, INT32, INT64, UINT8
from .kernels import KernelTable
from .packages import onnx, onnxruntime, require, script_optimizer

NO_KERNEL_CHOICES = ("float32", "keep", "error")


@dataclass
class OnnxExport:
    """What export_onnx made: the model and what its pass changed.

    `no_kernel`: nodes the provider has no kernel for in their dtypes; `in_float32`: the nodes the
    pass runs in float32 with the dtype's rounding (with no_kernel="float32": those, and the others
    translating the same calls, Note [one rounding per op]); `mixed`: normalisation nodes computed in
    the widest of their operands' types; `quantize_linear`: casts to float8 written as QuantizeLinear."""

    model: Any  # onnx.ModelProto
    provider: str
    no_kernel: list[Any] = field(default_factory=list)
    in_float32: list[Any] = field(default_factory=list)
    mixed: list[Any] = field(default_factory=list)
    quantize_linear: int = 0

    def save(self, path: str | Path) -> Path:
        onnx.save(self.model, str(path))
        return Path(path)

    def session(self, **options: Any) -> Any:
        """An onnxruntime.InferenceSession of the model on the export's provider."""
        return onnxruntime.InferenceSession(self.model.SerializeToString(), providers=[self.provider], **options)

    def run(self, *inputs: torch.Tensor, session: Any = None) -> list[torch.Tensor]:
        """Runs the model in onnxruntime on CPU tensors; the outputs as tensors of their ONNX dtype
        (bfloat16 included, which numpy lacks)."""
        session = session or self.session()
        feeds = {}
        for info, tensor in zip(session.get_inputs(), inputs, strict=True):
            tensor = tensor.detach().cpu().contiguous()
            value = onnxruntime.OrtValue.ortvalue_from_shape_and_type(list(tensor.shape), _ONNX_TYPE[tensor.dtype])
            ctypes.memmove(value.data_ptr(), tensor.data_ptr(), tensor.numel() * tensor.element_size())
            feeds[info.name] = value
        outputs = []
        for value in session.run_with_ort_values(None, feeds):
            tensor = torch.empty(value.shape(), dtype=_TORCH_TYPE[value.data_type()])
            ctypes.memmove(tensor.data_ptr(), value.data_ptr(), tensor.numel() * tensor.element_size())
            outputs.append(tensor)
        return outputs


_TORCH_TYPE = {"tensor(float)": torch.float32, "tensor(double)": torch.float64, "tensor(float16)": torch.float16,
               "tensor(bfloat16)": torch.bfloat16, "tensor(int64)": torch.int64, "tensor(int32)": torch.int32,
               "tensor(bool)": torch.bool, "tensor(uint8)": torch.uint8, "tensor(int8)": torch.int8,
               "tensor(float8e4m3fn)": torch.float8_e4m3fn, "tensor(float8e5m2)": torch.float8_e5m2}
# The ONNX element types of those dtypes.
_ONNX_TYPE = {torch.float32: FLOAT, torch.uint8: UINT8, torch.int8: INT8, torch.int32: INT32, torch.int64: INT64,
              torch.bool: BOOL, torch.float16: FLOAT16, torch.float64: DOUBLE, torch.bfloat16: BFLOAT16,
              torch.float8_e4m3fn: FLOAT8E4M3FN, torch.float8_e5m2: FLOAT8E5M2}


def export_onnx(program: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
                device: str | None = None, dtype: torch.dtype | None = None, policy: Any = None,
                no_kernel: str = "float32", provider: str = "CPUExecutionProvider", opset: int | None = None,
                path: str | Path | None = None, check: bool = True, trusted: bool = False,
                translations: dict[Any, Any] | None = None) -> OnnxExport:
    """A baked program as ONNX that passes onnx.checker and loads in onnxruntime with `provider`.

    `program`: a baked ExportedProgram, a file torch.export.save wrote of one (read as data unless
    `trusted`: docs/security.md), or a module baked by autocastgen.export (`args`, `kwargs`,
    `device`, `dtype`, `policy`). `no_kernel`: what to do with nodes the provider has no kernel
    for in their dtype: "float32" runs them in float32 with the dtype's rounding (casts around them),
    "keep" leaves and lists them, "error" raises DeployError naming them. `check` runs onnx.checker
    and opens a session (with "float32", a node the session still finds no kernel for is also run in
    float32). `translations`: {op overload: ONNX Script function} for ops torch.onnx cannot
    translate (a custom op: Note [custom ops in ONNX]), over ours. Note [the ONNX pass] in passes.py.
    Needs onnx, onnxscript and onnxruntime (an ImportError that says what to install where one is
    missing: Note [optional packages] in packages.py)."""
    require()
    if no_kernel not in NO_KERNEL_CHOICES:
        raise ValueError(f"no_kernel={no_kernel!r}: expected one of {NO_KERNEL_CHOICES}")
    kernels = KernelTable(provider)
    program = deployable_program(program, args, kwargs, device=device, dtype=dtype, policy=policy, trusted=trusted)
    has_fp8 = any(isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dtype in FLOAT8
                  for n in program.graph.nodes)
    if has_fp8 and opset is not None and opset < 19:
        raise DeployError(f"opset={opset}: float8 types need opset 19 or later")
    try:
        check_onnx_fp8(program)
    except Fp8ExportError as error:
        raise DeployError(str(error)) from None
    scalar_arithmetic_in_float32(program)
    model = _translate(program, opset, translations or {})
    result = OnnxExport(model, provider)
    passes.add_module_paths(model)
    _stamp(model, program)
    graph = passes.Graph(model)
    try:
        result.mixed = passes.fix_mixed_operands(graph)
    except passes.OnnxPassError as error:
        raise DeployError(str(error)) from None
    graph.commit()
    _fold_constants(model)
    result.quantize_linear = fp8.casts_to_quantize_linear(model)
    _fit_to_kernels(result, model, kernels, no_kernel, check)
    if check:
        try:
            onnx.checker.check_model(result.model, full_check=True)
        except onnx.checker.ValidationError as error:
            raise DeployError(f"the ONNX graph does not pass onnx.checker: {error}") from None
    if path is not None:
        result.save(path)
    return result


def _fit_to_kernels(result: OnnxExport, model: Any, kernels: Any, no_kernel: str, check: bool) -> None:
    """Note [the ONNX pass], missing kernels: finds the nodes `kernels` lacks, lists them, and with
    no_kernel="float32" runs them in float32; a node a session still refuses (one the registry did
    not show) joins them and the pass runs again."""
    forced: set[str] = set()
    while True:
        candidate = onnx.ModelProto()
        candidate.CopyFrom(model)
        graph = passes.Graph(candidate)
        missing = passes.nodes_without_kernels(graph, kernels)
        missing += [n for n in graph.nodes if n.name in forced and all(n is not m for m in missing)]
        result.no_kernel = [passes.note(graph, n, _low_types(graph, n)) for n in missing]
        if no_kernel == "error" and missing:
            raise DeployError(f"{result.provider} has no kernel for {len(missing)} node(s) in their dtype: "
                              + "; ".join(map(str, result.no_kernel)))
        if no_kernel == "float32":
            in_float32 = passes.with_their_ops(graph, missing)
            result.in_float32 = [passes.note(graph, n, _low_types(graph, n)) for n in in_float32]
            passes.run_in_float32(graph, in_float32)
        graph.commit()
        result.model = candidate
        refused = _session_refuses(result) if check and no_kernel == "float32" else None
        if refused is None:
            return
        if refused in forced:
            raise DeployError(f"onnxruntime ({result.provider}) finds no kernel for node {refused!r} even in float32")
        forced.add(refused)


# Note [custom ops in ONNX]
# A custom op (torch.library; transformers::grouped_mm_fallback of transformers' MoE experts) stays
# whole in a baked program, its policy's casts around it, and ONNX has no operator for it: torch.onnx
# finds no translation and fails. The refusal names the op and how to give one: an ONNX Script
# function of the op's arguments in `translations=` (torch.onnx's custom_translation_table), which
# receives them in the dtypes the policy cast them to; the pass then treats its nodes as any others
# (a node without a kernel in its dtype run in float32, one rounding per call).
_NO_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([^']+)', overload='([^']+)'\)>")


def _untranslatable(error: BaseException, program: torch.export.ExportedProgram) -> str | None:
    """Note [custom ops in ONNX]: the refusal of an op torch.onnx has no translation for, or None."""
    match = _NO_FUNCTION.search(str(error))
    if match is None:
        return None
    namespace, _, name = match.group(1).partition(".")
    overload = match.group(2)
    nodes = [n.name for n in program.graph.nodes
             if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
             and n.target.name() == f"{namespace}::{name}" + ("" if overload == "default" else f".{overload}")]
    where = (f" ({len(nodes)} node{'s' if len(nodes) != 1 else ''}: {', '.join(nodes[:3])}"
             f"{', ...' if len(nodes) > 3 else ''})")
    return (f"torch.onnx cannot translate the program: ONNX has no translation of {namespace}::{name}"
            f"{'' if overload == 'default' else '.' + overload}{where if nodes else ''}. Register one: "
            f"export_onnx(..., translations={{torch.ops.{namespace}.{name}.{overload}: function}}), an ONNX Script "
            f"function of the op's arguments returning its outputs (docs/deploy.md, \"Custom ops\")")


def _translate(program: torch.export.ExportedProgram, opset: int | None, extra: dict[Any, Any]) -> Any:
    """torch.onnx's translation, without its optimizer: its rewrites ignore dtypes (a BatchNorm with
    float32 parameters folded into a bfloat16 Conv gives a Conv of two types); _fold_constants
    does what the pass needs of it. `extra`: the caller's translations over ours."""
    options: dict[str, Any] = {"dynamo": True, "verbose": False, "optimize": False,
                               "custom_translation_table": {**translations.translations(), **extra}}
    if opset is not None:
        options["opset_version"] = opset
    # Its registry warns once per torchvision op when torchvision is absent, which no model here uses.
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    # Under no_grad as run_decompositions traces (Note [views of any layout] in _export/program.py):
    # torch.onnx decomposes under no_grad and then propagates types with gradients on, where sdpa's
    # CPU kernel lays its output out otherwise and a view it made fails (T5).
    with autocast_off(program), torch.no_grad():
        try:
            exported = torch.onnx.export(program, **options)
            assert exported is not None  # None only for dynamo=False with a file to write
            return exported.model_proto
        except Exception as error:  # torch.onnx's ConversionError and what it wraps
            refusal = _untranslatable(error, program)
            if refusal is not None:
                raise DeployError(refusal) from error
            summary = str(error).partition("## Exception summary")[2].strip().splitlines()
            raise DeployError("torch.onnx cannot translate the program: "
                              + (summary[0] if summary else str(error).splitlines()[0])) from error
        finally:
            registration.setLevel(level)


def _fold_constants(model: Any) -> None:
    """Constants folded (weights cast to their dtype stored so, fp8 weights quantised) and every value
    typed by shape inference, which the kernel lookup needs."""
    script_optimizer.fold_constants(model, onnx_shape_inference=True, input_size_limit=1 << 62,
                                    output_size_limit=1 << 62)
    script_optimizer.remove_unused_nodes(model)


def _low_types(graph: Any, node: Any) -> list[int]:
    return [graph.types[n] for n in [*node.input, *node.output] if graph.types.get(n) in passes.LOW_PRECISION]


_NO_IMPLEMENTATION = re.compile(r"Could not find an implementation for \S+ node with name '([^']+)'")


def _session_refuses(result: OnnxExport) -> str | None:
    """The node a session finds no kernel for (a case the registry did not show), or None."""
    try:
        result.session()
    except Exception as error:  # onnxruntime raises its own exception types
        match = _NO_IMPLEMENTATION.search(str(error))
        if match is None:
            raise DeployError(f"onnxruntime ({result.provider}) cannot load the graph: {error}") from None
        return match.group(1)
    return None


def _stamp(model: Any, program: torch.export.ExportedProgram) -> None:
    """The program's record (Note [the program's record] in _export/bake.py: what decided the casts, its
    digest, the dtype) as the model's metadata_props, keys prefixed `pkg.autocastgen.`, values JSON
    where they are not text."""
    entry = recorded(program)
    for key, value in sorted((entry or {}).items()):
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        model.metadata_props.add(key=f"pkg.autocastgen.{key}", value=text)


