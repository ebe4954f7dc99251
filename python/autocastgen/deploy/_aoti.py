"""AOTInductor packages of a baked program that round as eager does (`export_aoti`; docs/deploy.md)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ._program import DeployError, autocast_off, deployable_program, scalar_arithmetic_in_float32


def export_aoti(program: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
                package_path: str | Path, device: str | None = None, dtype: torch.dtype | None = None,
                policy: Any = None, emulate_precision_casts: bool = True,
                inductor_configs: dict[str, Any] | None = None, trusted: bool = False) -> Path:
    """A baked program as an AOTInductor package (`torch._inductor.aoti_load_package` runs it, in a
    process without autocastgen). Inductor keeps the rounding to bfloat16 or float16 between the ops
    it fuses only with `emulate_precision_casts` (on here; PyTorch's default is off, which computes
    fused low-precision chains in float32). `program` as export_onnx's: a file is read as data
    unless `trusted`."""
    import torch._inductor.config as inductor_config

    program = deployable_program(program, args, kwargs, device=device, dtype=dtype, policy=policy, trusted=trusted)
    _check_fp8_gemms(program)
    scalar_arithmetic_in_float32(program)
    with autocast_off(program), inductor_config.patch(emulate_precision_casts=emulate_precision_casts):
        written = torch._inductor.aoti_compile_and_package(program, package_path=str(package_path),
                                                           inductor_configs=inductor_configs)
    return Path(written)


def _check_fp8_gemms(program: torch.export.ExportedProgram) -> None:
    """The package runs fp8 GEMMs with PyTorch's own _scaled_mm: refused where this PyTorch has no
    kernel for it on the program's device (the CPU before 2.11), instead of failing in Inductor."""
    for node in program.graph.nodes:
        if node.target is not torch.ops.aten._scaled_mm.default:
            continue
        device = node.args[0].meta["val"].device.type
        key = {"cpu": "CPU", "cuda": "CUDA"}.get(device, device)
        if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm", key):
            raise DeployError(
                f"fp8 GEMM {node.name}: PyTorch {torch.__version__} has no {device} kernel for aten::_scaled_mm, "
                "which the package would call; deploy from a release that has one, or export under a policy "
                "without fp8")
