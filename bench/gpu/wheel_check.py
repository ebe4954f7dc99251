#!/usr/bin/env python3
"""The wheel on a GPU (issue 56, item 4; scripts/gpu-check phase `wheel`): the package installed from
the wheel loads the runtime of the machine's torch and its CUDA part, the GradScaler on CUDA gives
torch.amp.GradScaler's bits (on autocastgen's kernels, unless they cannot run on this GPU: Note
[PyTorch's kernels where ours cannot run]), the fp8 quantiser's CUDA kernel gives PyTorch's CUDA
cast's bits (issue 63, item 6), and a runtime policy casts under torch.autocast on CUDA.

Usage: PYTHONPATH=<folder the wheel was installed into> bench/gpu/wheel_check.py --json OUT.json
Run it without the build tree's variables (AUTOCASTGEN_RUNTIME_TORCH_LIB, PYTHONPATH=build/python):
the point is the wheel's own runtime. --device cpu checks what a CPU can (the dry run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch


def scaler_steps(scaler_class: type, device: str) -> tuple[list[list[float]], float]:
    """Three steps of a small linear model, the second with an inf gradient; the weights and the scale."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = scaler_class(device, init_scale=1024.0, growth_interval=1)
    x = torch.randn(16, 8, device=device)
    for step in range(3):
        optimizer.zero_grad()
        loss = model(x).square().mean()
        if step == 1:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return [p.detach().cpu().flatten().tolist() for p in model.parameters()], float(scaler.get_scale())


def fp8_cast_equal(device: str) -> bool:
    """autocastgen's fused scale + saturating cast (the quantiser of the fp8 policies) against PyTorch's
    ops on the same device, bit for bit in both formats, NaNs aside (their sign bit is free)."""
    ops = torch.ops.autocastgen
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(100_003, generator=g, dtype=torch.float64) * torch.pow(2.0, torch.randint(-20, 20, (100_003,),
                                                                                              generator=g)))
    x = x.to(torch.bfloat16).to(device)
    for fmt in (torch.float8_e4m3fn, torch.float8_e5m2):
        for value in (1.0, 0.7, 448.0 / 3.0):
            scale = torch.tensor(value, dtype=torch.float32, device=device)
            data, _ = ops.fp8_scale_cast(x, scale, fmt, fused=True)
            m = torch.finfo(fmt).max
            want = (x.float() * scale).clamp(-m, m).to(fmt)
            if data.dtype != want.dtype or data.shape != want.shape or not torch.equal(data.view(torch.uint8),
                                                                                      want.view(torch.uint8)):
                return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    leaked = [name for name in ("AUTOCASTGEN_RUNTIME_TORCH_LIB", "AUTOCASTGEN_BUILD_DIR") if os.environ.get(name)]
    if leaked:
        sys.exit(f"wheel_check: {', '.join(leaked)} set: run it with the wheel's runtime alone")
    import autocastgen
    from autocastgen._core import runtime

    result: dict[str, object] = {"version": autocastgen.__version__, "runtime": autocastgen.load_runtime(),
                                 "cuda_part": runtime.cuda_part(), "torch": torch.__version__}
    ours = scaler_steps(autocastgen.GradScaler, args.device)
    theirs = scaler_steps(torch.amp.GradScaler, args.device)
    result["scaler_equal"] = ours == theirs
    result["scaler_kernels"] = ("PyTorch's" if autocastgen.grad_scaler.pytorch_kernels_instead(torch.device(args.device))
                                else "autocastgen's")
    result["fp8_cast_equal"] = fp8_cast_equal(args.device)
    autocastgen.load_policy(autocastgen.shipped_policy(args.device))
    a = torch.randn(32, 32, device=args.device)
    with torch.autocast(args.device, dtype=torch.bfloat16):
        result["mm_dtype"] = str(torch.mm(a, a).dtype)
    ok = (result["scaler_equal"] and result["fp8_cast_equal"] and result["mm_dtype"] == "torch.bfloat16"
          and "/_runtime/torch-" in str(result["runtime"])
          and (args.device != "cuda" or str(result["cuda_part"]).endswith("libautocastgen_runtime_torch_cuda.so")))
    result["ok"] = bool(ok)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
