#!/usr/bin/env python3
"""Where fp8 pays, one GEMM at a time: a linear layer's forward + backward (float32 weight, input
under torch.autocast(DEVICE, bfloat16)) over a grid of shapes, bf16 autocast against fp8.

The data behind `select: auto` (docs/fp8.md): for every (M tokens, K in, N out) the median time of
- bf16: plain autocast (PyTorch's kernels);
- fp8-tensorwise: the fp8 runtime policy (tests/fp8/data/fp8_DEVICE.yaml), weight re-quantised every
  step (the weight cache is emptied after each step, as a training step under torch.autocast does);
- rowwise (a reference in PyTorch ops, this file): per-row scales of each GEMM operand, e4m3 everywhere,
  through torch._scaled_mm's rowwise scales (torchao's rowwise recipe's arithmetic), and
  rowwise-gw-hp: the same with the weight gradient in bf16.
Each variant's ratio is bf16 ms / variant ms (> 1: faster than bf16). Eager; with --compiled, the
Llama shapes compiled too, bf16 and fp8-tensorwise (torch.compile(fullgraph=True), Inductor, caches off).

Usage: bench/gpu/fp8_gemm_grid.py [--json FILE] [--small] [--compiled] [--device cuda|cpu]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import traceback

import torch
from timing import add_device_argument, device_ms, device_name

REPO = pathlib.Path(__file__).resolve().parents[2]
DEVICE = "cuda"
E4M3 = torch.float8_e4m3fn


def quantize_tensorwise(t):
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = torch.exp2(torch.floor(torch.log2(torch.finfo(E4M3).max / amax)))
    return (t.float() * scale).clamp(-torch.finfo(E4M3).max, torch.finfo(E4M3).max).to(E4M3), scale.reciprocal()


def quantize_rowwise(t, dim):
    """t in e4m3 with one scale per slice along `dim` reduced (amax over dim); returns (q, inverse scale)."""
    amax = t.abs().amax(dim=dim, keepdim=True).float().clamp(min=1e-12)
    scale = torch.exp2(torch.floor(torch.log2(torch.finfo(E4M3).max / amax)))  # a power of two, as torchao's
    q = (t.float() * scale).clamp(-torch.finfo(E4M3).max, torch.finfo(E4M3).max).to(E4M3)
    return q, scale.reciprocal()


def column_major(t):
    return t.t().contiguous().t()


class RowwiseLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, hp_weight_grad):
        xq, xs = quantize_rowwise(x, 1)            # (M, 1)
        wq, ws = quantize_rowwise(weight, 1)       # (N, 1)
        ctx.save_for_backward(x, weight)
        ctx.hp_weight_grad = hp_weight_grad
        return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws.t(), out_dtype=torch.bfloat16)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        gq, gs = quantize_rowwise(grad, 1)         # (M, 1)
        if ctx.hp_weight_grad:  # torchao's rowwise_with_gw_hp: the weight tensorwise here
            wq, ws = quantize_tensorwise(weight)
            ws = ws.reshape(1, 1).expand(1, weight.shape[1]).contiguous()
        else:
            wq, ws = quantize_rowwise(weight, 0)   # (1, K)
        grad_x = torch._scaled_mm(gq, column_major(wq), scale_a=gs, scale_b=ws, out_dtype=torch.bfloat16)
        if ctx.hp_weight_grad:
            grad_w = grad.t().to(torch.bfloat16) @ x.to(torch.bfloat16)
        else:
            gtq, gts = quantize_rowwise(grad, 0)   # (1, N): per output feature over tokens
            xq, xs = quantize_rowwise(x, 0)        # (1, K)
            grad_w = torch._scaled_mm(gtq.t().contiguous(), column_major(xq), scale_a=gts.reshape(-1, 1), scale_b=xs,
                                      out_dtype=torch.bfloat16)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


def shapes(small, compiled=False):
    if small:
        return [(64, 32, 48), (128, 64, 64)]
    grid = [(m, k, n) for m in (4096, 16384) for k in (1024, 2048, 4096, 8192) for n in (1024, 2048, 4096, 8192)]
    # The linears of the two Llama sizes of bench/gpu/llama_fp8.py (4096 tokens): q/o, k/v, up/gate, down.
    llama = [(4096, 1024, 1024), (4096, 1024, 256), (4096, 1024, 2816), (4096, 2816, 1024),
             (4096, 4096, 4096), (4096, 4096, 1024), (4096, 4096, 11008), (4096, 11008, 4096)]
    # Compiled rows cost a compile each: the Llama shapes alone.
    return llama if compiled else grid + [s for s in llama if s not in grid]


def make_step(variant, m, k, n, compiled):
    import autocastgen

    autocastgen.clear_runtime_policies()
    if variant == "fp8-tensorwise":
        autocastgen.load_policy(str(REPO / f"tests/fp8/data/fp8_{DEVICE}.yaml"))
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(n, k, device=DEVICE) / k ** 0.5)
    x = torch.randn(m, k, device=DEVICE)

    def loss_fn(x, weight):
        if variant.startswith("rowwise"):
            y = RowwiseLinear.apply(x.to(torch.bfloat16), weight, variant == "rowwise-gw-hp")
        else:
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                y = torch.nn.functional.linear(x, weight)
        return y.float().square().mean()

    fn = torch.compile(loss_fn, fullgraph=True) if compiled else loss_fn

    def step():
        weight.grad = None
        fn(x, weight).backward()
        if variant == "fp8-tensorwise":
            torch.ops.autocastgen.fp8_clear_weight_cache(DEVICE)

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--compiled", action="store_true", help="also each row compiled")
    add_device_argument(parser)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("fp8_gemm_grid.py: no CUDA device", file=sys.stderr)
        return 2
    from torch._inductor import config as inductor_config

    import autocastgen  # noqa: F401

    inductor_config.force_disable_caches = True
    variants = ["bf16", "fp8-tensorwise", "rowwise", "rowwise-gw-hp"]
    rows = []
    result = {"device": device_name(DEVICE), "torch": torch.__version__, "rows": rows}
    for compiled in ([False, True] if args.compiled else [False]):
        for m, k, n in shapes(args.small, compiled):
            times = {}
            # Compiled: PyTorch's path and ours (the rowwise reference is eager arithmetic).
            for variant in variants[:2] if compiled else variants:
                entry = {"m": m, "k": k, "n": n, "variant": variant, "mode": "compiled" if compiled else "eager"}
                try:
                    torch._dynamo.reset()
                    entry["ms"] = device_ms(make_step(variant, m, k, n, compiled), DEVICE, warmup=3,
                                            iters=3 if args.small else 15)
                    times[variant] = entry["ms"]
                    if "bf16" in times:
                        entry["speedup_vs_bf16"] = times["bf16"] / entry["ms"]
                except Exception as error:  # noqa: BLE001 -- recorded, the other rows go on
                    entry["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
                    entry["traceback_tail"] = traceback.format_exc().splitlines()[-4:]
                rows.append(entry)
                print(json.dumps(entry), flush=True)
            if args.json:
                pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
