#!/usr/bin/env python3
"""fp8 under torch.compile on the CPU: one training step (forward, backward) of an MLP of three
nn.Linear layers under torch.autocast("cpu", bfloat16), as eager fp8, Inductor-compiled fp8 and
Inductor-compiled bfloat16 (no policy), all in one run; prints the step times and their ratios.
Compiled fp8 runs twice, once per traced route (AUTOCASTGEN_FP8_TRACE=decompose, the default:
PyTorch ops Inductor fuses; opaque: our fused kernel as one op).

Usage: AUTOCASTGEN_RUNTIME_TORCH_LIB=build/lib/libautocastgen_runtime_torch.so bench/fp8_compile.py
       [--batch 256] [--width 512] [--steps 30] [--threads 1]
Method and the last measured numbers: bench/README.md ("fp8_compile.py").
"""
import argparse
import glob
import os
import statistics
import time

import torch
import torch._inductor.config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY = os.path.join(REPO, "tests", "fp8", "data", "fp8_cpu.yaml")


def library():
    path = os.environ.get("AUTOCASTGEN_RUNTIME_TORCH_LIB")
    return path or max(glob.glob(os.path.join(REPO, "build*", "lib", "libautocastgen_runtime_torch.so")),
                       key=os.path.getmtime)


def model(width):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(width, 2 * width), torch.nn.ReLU(), torch.nn.Linear(2 * width, 2 * width),
              torch.nn.ReLU(), torch.nn.Linear(2 * width, width)]
    return torch.nn.Sequential(*layers)


def step_time(fn, net, x, steps):
    """Median seconds per step after two warm-up steps (the first one compiles)."""
    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(x)
        out.float().sum().backward()
        for p in net.parameters():
            p.grad = None

    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), first


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.ops.load_library(library())
    ops = torch.ops.autocastgen
    x = torch.randn(args.batch, args.width)
    results = {}
    with torch._inductor.config.patch(force_disable_caches=True):  # the compile time is measured too
        ops.load_runtime_policy_file(POLICY)
        net = model(args.width)
        results["eager fp8"] = step_time(net, net, x, args.steps)
        for route in ("decompose", "opaque"):  # Note [fp8 traced route] in runtime/torch/fp8/operand.cpp
            os.environ["AUTOCASTGEN_FP8_TRACE"] = route
            torch._dynamo.reset()
            net = model(args.width)
            results[f"inductor fp8 {route}"] = step_time(torch.compile(net, fullgraph=True), net, x, args.steps)
        del os.environ["AUTOCASTGEN_FP8_TRACE"]
        ops.clear_runtime_policies()
        torch._dynamo.reset()
        net = model(args.width)
        results["inductor bf16"] = step_time(torch.compile(net, fullgraph=True), net, x, args.steps)
        net = model(args.width)
        results["eager bf16"] = step_time(net, net, x, args.steps)
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch {args.batch}, width {args.width}, "
          f"median of {args.steps} steps")
    for name, (t, first) in results.items():
        print(f"  {name:22s} {t * 1e3:8.2f} ms/step   first step {first:6.2f} s")
    fp8e, bf16c = results["eager fp8"][0], results["inductor bf16"][0]
    for route in ("decompose", "opaque"):
        fp8c = results[f"inductor fp8 {route}"][0]
        print(f"  inductor fp8 {route:9s} / eager fp8     {fp8c / fp8e:.2f}")
        print(f"  inductor fp8 {route:9s} / inductor bf16 {fp8c / bf16c:.2f}")


if __name__ == "__main__":
    main()
