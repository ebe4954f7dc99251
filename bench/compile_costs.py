#!/usr/bin/env python3
"""What autocastgen adds under torch.compile on the CPU (docs/compile.md): compile time of the
first call and time per training step (forward, loss, backward) of an MLP under bfloat16
autocast, eager and Inductor-compiled, for:

  torch      PyTorch's own autocast kernels, nothing of autocastgen loaded
  lib        the generated CPU library, torch.autocast (insight off: its guard is the only addition)
  own        the own-state library, autocastgen.autocast inside the compiled function
  stats      lib with statistics on (stats_traced_call per wrapped call)
  watch      lib with the non-finite watch on ("record": one aminmax and host copy per output)

Each configuration runs in its own process (a library cannot be unloaded). Prints one row each.
Usage: AUTOCASTGEN_RUNTIME_TORCH_LIB=build/lib/libautocastgen_runtime_torch.so PYTHONPATH=build/python \\
       bench/compile_costs.py [--width 256] [--batch 64] [--steps 40] [--threads 1] [--backend inductor]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("torch", "lib", "own", "stats", "watch")


def child(config: str, args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    torch._inductor.config.force_disable_caches = True  # measure the compile, not a cache hit
    scope = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    if config != "torch":
        import autocastgen

        if config == "own":
            torch.ops.load_library(os.path.join(REPO, "build", "lib", "libautocastgen_torch_cpu_own_state.so"))
            scope = lambda: autocastgen.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
        else:
            torch.ops.load_library(os.path.join(REPO, "build", "lib", "libautocastgen_torch_cpu.so"))
        if config == "stats":
            autocastgen.insight.stats().__enter__()
        if config == "watch":
            autocastgen.insight.set_finite_mode("record")
    torch.manual_seed(0)
    w = args.width
    net = torch.nn.Sequential(torch.nn.Linear(w, 2 * w), torch.nn.ReLU(), torch.nn.Linear(2 * w, 2 * w),
                              torch.nn.ReLU(), torch.nn.Linear(2 * w, w))
    x = torch.randn(args.batch, w)
    target = torch.randn(args.batch, w)

    def step(x):
        with scope():
            loss = torch.nn.functional.mse_loss(net(x).float(), target)
        loss.backward()
        return loss

    def timed(fn):
        start = time.perf_counter()
        fn(x)
        first = time.perf_counter() - start
        fn(x)
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
        return first, statistics.median(times)

    _, eager = timed(step)
    compile_s, compiled = timed(torch.compile(step, backend=args.backend))
    return {"config": config, "compile_s": compile_s, "eager_ms": eager * 1e3, "compiled_ms": compiled * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--child", choices=CONFIGS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    print(f"width {args.width}, batch {args.batch}, {args.threads} thread(s), backend {args.backend}, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'config':8} {'compile s':>10} {'eager ms':>9} {'compiled ms':>12} {'compiled/eager':>15}")
    for config in CONFIGS:
        out = subprocess.run([sys.executable, __file__, "--child", config] + sys.argv[1:], capture_output=True,
                             text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{config:8} {row['compile_s']:10.2f} {row['eager_ms']:9.3f} {row['compiled_ms']:12.3f} "
              f"{row['compiled_ms'] / row['eager_ms']:15.2f}")


if __name__ == "__main__":
    main()
