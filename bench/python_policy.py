#!/usr/bin/env python3
"""Per-call time of a custom op under torch.autocast: autocastgen.load_policy's runtime kernel
against torch.library.register_autocast, in one process, alternating, with medians and ratios."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def define_ops(ns: str) -> torch.library.Library:
    """Two ops with one schema and one cheap CPU kernel (a * b), one per autocast registration:
    the time is mostly dispatch and casts, which is what the two registrations differ in."""
    lib = torch.library.Library(ns, "DEF")
    for name in ("mul_torch", "mul_acg"):
        lib.define(f"{name}(Tensor a, Tensor b) -> Tensor")
        lib.impl(name, lambda a, b: torch.mul(a, b), "CPU")
    return lib


def time_calls(fn, a, b, calls: int) -> float:
    """ns per call of `calls` back-to-back calls under bf16 CPU autocast."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn(a, b)
        return (time.perf_counter_ns() - start) / calls


def time_plain(fn, a, b, calls: int) -> float:
    """ns per call outside autocast (the op's own cost, inputs already bf16)."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(a, b)
    return (time.perf_counter_ns() - start) / calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=str(ROOT / "build"), help="build tree holding python/autocastgen")
    ap.add_argument("--rounds", type=int, default=21, help="alternating repetitions per size")
    ap.add_argument("--calls", type=int, default=1000, help="calls per repetition")
    ap.add_argument("--sizes", default="8,256", help="square tensor sizes")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.build) / "python"))
    import autocastgen

    torch.set_num_threads(1)  # dispatch cost, not kernel parallelism
    ns = f"acg_bench{os.getpid()}"
    lib = define_ops(ns)
    ops = getattr(torch.ops, ns)
    torch.library.register_autocast(f"{ns}::mul_torch", "cpu", torch.bfloat16, lib=lib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = f"autocast: {{device: cpu}}\nlists:\n  lower_precision_fp: [{ns}::mul_acg]\n"
        registered = autocastgen.load_policy(policy)
    assert registered == 1

    sides = {"register_autocast": ops.mul_torch.default, "load_policy": ops.mul_acg.default}
    print(f"# torch {torch.__version__}, 1 intra-op thread, {args.rounds} alternating rounds x {args.calls} calls, "
          f"bf16 CPU autocast, medians; CPUs usable: {len(os.sched_getaffinity(0))}")
    print("| size | op alone, bf16 inputs, no autocast ns/call | register_autocast ns/call | load_policy ns/call "
          "| ratio load_policy / register_autocast | autocast overhead: register_autocast ns | load_policy ns "
          "| overhead ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        a, b = torch.randn(size, size), torch.randn(size, size)
        expected = torch.mul(a.to(torch.bfloat16), b.to(torch.bfloat16))
        for name, fn in sides.items():  # both must run the op in bf16, with the same result
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = fn(a, b)
            if out.dtype != torch.bfloat16 or not torch.equal(out, expected):
                sys.exit(f"python_policy: {name} did not run {ns} in bfloat16 (got {out.dtype})")
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
        samples: dict[str, list[float]] = {"plain": [], **{n: [] for n in sides}}
        ratios: list[float] = []
        for _ in range(3):  # warm-up
            for fn in sides.values():
                time_calls(fn, a, b, args.calls // 10)
        for rep in range(args.rounds):
            order = list(sides) if rep % 2 == 0 else list(reversed(sides))
            got = {n: time_calls(sides[n], a, b, args.calls) for n in order}
            samples["plain"].append(time_plain(sides["load_policy"], a16, b16, args.calls))
            for n, ns_per_call in got.items():
                samples[n].append(ns_per_call)
            ratios.append(got["load_policy"] / got["register_autocast"])
        med = {n: statistics.median(v) for n, v in samples.items()}
        over_t, over_a = med["register_autocast"] - med["plain"], med["load_policy"] - med["plain"]
        print(f"| {size}x{size} | {med['plain']:.0f} | {med['register_autocast']:.0f} | {med['load_policy']:.0f} "
              f"| **{statistics.median(ratios):.2f}** | {over_t:.0f} | {over_a:.0f} | {over_a / over_t:.2f} |")
    autocastgen.clear_runtime_policies()
    return 0


if __name__ == "__main__":
    sys.exit(main())
