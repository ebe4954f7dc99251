#!/usr/bin/env python3
"""The CUDA scaler goals (issue 14's rows), each a ratio measured in the same run:

- one 256M-element gradient: ours (autocastgen.grad_scaler.non_finite_check_and_unscale_, the call
  autocastgen.GradScaler makes: through autocastgen._C where built, else torch.ops) in GB/s
  against a device-to-device copy of the same tensor (bytes read + written alike), goal >= 0.93;
  PyTorch's torch._amp_foreach_non_finite_check_and_unscale_ beside it;
- 1000 gradients of 4099 elements: eager wall time per call against PyTorch's op, goal <= 0.8,
  and the GPU time per list from CUDA events; the same with empty gradients (the host work alone),
  each from the package's entry and from torch.ops directly (Note [unscale from Python]),
  and with --cpp the same rows from C++ (bench/gpu/scaler_host.cpp: no Python argument conversion).

Usage: bench/gpu/scaler.py [--json FILE] [--small] [--device cuda|cpu]
(--small --device cpu: a quick try of the script without a GPU; with --device cuda and no GPU it exits 2)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch
from timing import add_device_argument, device_ms, device_name, wall_us

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def python_entries():
    """Our op as Python calls it: {label: function}. The package's entry first (what
    autocastgen.GradScaler calls; labelled by the path it takes), then torch.ops directly."""
    from autocastgen import grad_scaler
    package = "autocastgen._C" if grad_scaler._C is not None else "package, no _C: torch.ops"
    return {package: grad_scaler.non_finite_check_and_unscale_,
            "torch.ops": torch.ops.autocastgen.non_finite_check_and_unscale_}


def ours(grads, found_inf, inv_scales, entry=None):
    entry = entry or next(iter(python_entries().values()))
    for inv_scale in inv_scales:
        entry(grads, found_inf, inv_scale)


def pytorch(grads, found_inf, inv_scales):
    for inv_scale in inv_scales:
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)


def halve_then_double(device):
    """Two calls per timed sample, by 1/2 and then by 2: every element is read and written (a kernel
    may skip the store when 1/scale is 1), and the values come back exactly (powers of two)."""
    return [torch.full((1,), 0.5, device=device), torch.full((1,), 2.0, device=device)]


def optional_ms(fn, device, **kw):
    """device_ms, or None where PyTorch's op has no kernel for the dtype (CUDA: no bfloat16)."""
    try:
        return device_ms(fn, device, **kw)
    except NotImplementedError:
        return None


def big_tensor_rows(numel, device):
    rows = []
    for name, dtype in DTYPES.items():
        g = torch.randn(numel, device=device).to(dtype)
        dst = torch.empty_like(g)
        found_inf = torch.zeros(1, device=device)
        inv = halve_then_double(device)
        moved = 2 * g.numel() * g.element_size()  # read + write, per call
        # The tensors bound now: `del` drops them at the end of the iteration.
        copy = device_ms(lambda g=g, dst=dst: (dst.copy_(g), g.copy_(dst)), device) / 2
        t_ours = device_ms(lambda g=g: ours([g], found_inf, inv), device) / 2
        t_torch = optional_ms(lambda g=g: pytorch([g], found_inf, inv), device)
        t_torch = t_torch and t_torch / 2
        rows.append({
            "row": f"unscale {numel} {name}",
            "copy_GBps": moved / copy / 1e6, "ours_GBps": moved / t_ours / 1e6,
            "pytorch_GBps": t_torch and moved / t_torch / 1e6,
            "ours_over_copy": copy / t_ours, "ours_over_pytorch_time": t_torch and t_ours / t_torch,
            "goal": "ours_over_copy >= 0.93" if name == "float32" else None,
            "met": (copy / t_ours >= 0.93) if name == "float32" else None,
        })
        del g, dst
        torch.cuda.empty_cache()
    return rows


def list_rows(count, numel, device, dtypes=DTYPES):
    rows = []
    for name, dtype in dtypes.items():
        grads = [torch.randn(numel, device=device).to(dtype) for _ in range(count)]
        found_inf = torch.zeros(1, device=device)
        inv = halve_then_double(device)
        has_kernel = optional_ms(lambda: pytorch(grads, found_inf, inv), device, warmup=0, iters=1) is not None
        if has_kernel:
            w_torch = wall_us(lambda: pytorch(grads, found_inf, inv), device) / 2
            g_torch = device_ms(lambda: pytorch(grads, found_inf, inv), device, iters=50) / 2
        for i, (label, entry) in enumerate(python_entries().items()):
            if i > 0 and name != "float32":
                continue  # the second entry for float32 only: the entry's cost does not depend on the dtype
            w_ours = wall_us(lambda: ours(grads, found_inf, inv, entry), device) / 2  # per call
            g_ours = device_ms(lambda: ours(grads, found_inf, inv, entry), device, iters=50) / 2
            row = f"unscale {count} x {numel} {name} ({label})"
            if not has_kernel:
                rows.append({"row": row, "ours_wall_us": w_ours, "ours_gpu_us": g_ours * 1e3,
                             "pytorch": f"no {device} kernel for {name}"})
                continue
            goal = name == "float32" and numel and i == 0
            rows.append({
                "row": row,
                "ours_wall_us": w_ours, "pytorch_wall_us": w_torch, "wall_ratio": w_ours / w_torch,
                "ours_gpu_us": g_ours * 1e3, "pytorch_gpu_us": g_torch * 1e3, "gpu_ratio": g_ours / g_torch,
                "goal": "wall_ratio <= 0.8" if goal else None,
                "met": w_ours / w_torch <= 0.8 if goal else None,
            })
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--small", action="store_true", help="tiny sizes (a quick try of the script)")
    parser.add_argument("--cpp", metavar="BINARY", help="also run bench_scaler_cuda_host (bench/gpu/scaler_host.cpp)")
    add_device_argument(parser)
    args = parser.parse_args()
    if not torch.cuda.is_available() and args.device == "cuda":  # torch.cuda first: a --device cpu try reaches it too
        print("bench/gpu/scaler.py: no CUDA device", file=sys.stderr)
        return 2
    import autocastgen  # noqa: F401  -- loads the runtime library with the scaler ops

    big, count, numel = (1 << 16, 10, 4099) if args.small else (256 << 20, 1000, 4099)
    rows = big_tensor_rows(big, args.device) + list_rows(count, numel, args.device)
    # Empty gradients: no kernel runs, what remains is each op's per-call host work (for ours, from
    # Python: torch.ops' argument conversion, the dispatcher, the glue's checks).
    rows += list_rows(count, 0, args.device, {"float32": torch.float32})
    if args.cpp:  # the same rows from C++, without Python's argument conversion
        found = subprocess.run([args.cpp, str(count), str(numel)], capture_output=True, text=True, check=True)
        rows += [dict(json.loads(line), goal=None, met=None) for line in found.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        print(json.dumps(row))
    result = {"device": device_name(args.device), "torch": torch.__version__, "rows": rows}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
