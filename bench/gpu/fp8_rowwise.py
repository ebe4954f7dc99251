#!/usr/bin/env python3
"""Row-wise fp8 quantisation (issue 38): the fused kernel against the PyTorch ops it replaces in eager
code (torch.ops.autocastgen.fp8_quantize_rowwise, fused=True and fused=False: the same bits).

Rows: a bfloat16 activation [M, K] per row (the forward's amax over K) and per column (grad
weight's amax over M), and a float32 weight [N, K] per row, at the Llama-like shapes below; then one
eager rowwise fp8_linear forward + backward (five row-wise quantisations, the GEMMs) with fused and
unfused quantisation. Each pair is timed alternately in the same run, and each ratio is the median
of per-round ratios (unfused time / fused time: above 1 the fused kernel is faster).

On CUDA (scripts/gpu-check, phase fp8) times are CUDA-event medians. On the CPU (--device cpu) the
host clock, with --threads intra-op threads; bench/README.md ("fp8_rowwise.py") has CPU numbers.

Usage: bench/gpu/fp8_rowwise.py [--device cuda|cpu] [--small] [--threads N] [--rounds N] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
from timing import device_ms, device_name

E4M3 = torch.float8_e4m3fn


def shapes(small, device):
    if small:
        return [(256, 512, 256)]
    if device == "cpu":
        return [(1024, 1024, 1024), (4096, 4096, 1024)]
    return [(4096, 4096, 4096), (8192, 4096, 11008), (16384, 8192, 8192)]


def quant_rows(m, k, n, device):
    g = torch.Generator(device=device).manual_seed(0)
    act = torch.randn(m, k, device=device, generator=g).to(torch.bfloat16)
    weight = torch.randn(n, k, device=device, generator=g) * 0.02
    return [("act bf16 per row", act, 1), ("act bf16 per column", act, 0), ("weight fp32 per row", weight, 1)]


def linear_pair(m, k, n, device):
    ops = torch.ops.autocastgen
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(m, k, device=device, generator=g).to(torch.bfloat16).requires_grad_()
    w = torch.nn.Parameter(torch.randn(n, k, device=device, generator=g) * 0.02)
    gy = torch.randn(m, n, device=device, generator=g).to(torch.bfloat16)

    def step(fused):
        def run():
            y = ops.fp8_linear(x, w, None, out_dtype=torch.bfloat16, granularity="rowwise", backward="float8_e4m3fn",
                               fused=fused, cache=False)
            y.backward(gy)
            x.grad = None
            w.grad = None
        return run
    return step(True), step(False)


def paired(fused_fn, ops_fn, device, rounds, iters):
    fused, unfused, ratios = [], [], []
    for _ in range(rounds):
        f = device_ms(fused_fn, device, warmup=1, iters=iters)
        u = device_ms(ops_fn, device, warmup=1, iters=iters)
        fused.append(f)
        unfused.append(u)
        ratios.append(u / f)
    return statistics.median(fused), statistics.median(unfused), statistics.median(ratios)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--small", action="store_true", help="one small shape (a quick try of the script)")
    parser.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (0: PyTorch's default)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fp8_rowwise.py: no CUDA device", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    import autocastgen  # noqa: F401  (loads the runtime library: torch.ops.autocastgen)

    ops = torch.ops.autocastgen
    iters = 3 if args.small else 10
    rows = []
    print(f"{device_name(args.device)}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"{'what':<34} {'M x K x N':>20} {'fused ms':>9} {'ops ms':>9} {'ops/fused':>9}")
    for m, k, n in shapes(args.small, args.device):
        cases = []
        for name, t, dim in quant_rows(m, k, n, args.device):
            fused_out = ops.fp8_quantize_rowwise(t, E4M3, dim)
            ops_out = ops.fp8_quantize_rowwise(t, E4M3, dim, fused=False)
            if not (torch.equal(fused_out[0].view(torch.uint8), ops_out[0].view(torch.uint8))
                    and torch.equal(fused_out[1], ops_out[1])):
                print(f"fp8_rowwise.py: {name} {m}x{k}x{n}: fused and ops differ", file=sys.stderr)
                return 1
            cases.append((f"quantise {name}", lambda t=t, d=dim: ops.fp8_quantize_rowwise(t, E4M3, d),
                          lambda t=t, d=dim: ops.fp8_quantize_rowwise(t, E4M3, d, fused=False)))
        cases.append(("rowwise linear fwd+bwd", *linear_pair(m, k, n, args.device)))
        for name, fused_fn, ops_fn in cases:
            f, u, r = paired(fused_fn, ops_fn, args.device, args.rounds, iters)
            rows.append({"what": name, "m": m, "k": k, "n": n, "fused_ms": f, "ops_ms": u, "ratio": r})
            print(f"{name:<34} {f'{m}x{k}x{n}':>20} {f:9.3f} {u:9.3f} {r:9.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": device_name(args.device), "torch": torch.__version__,
                       "threads": torch.get_num_threads(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
