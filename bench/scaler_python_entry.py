#!/usr/bin/env python3
"""Per-call time of the GradScaler's unscale from Python on N CPU gradients, three ways, in one
process, alternating (Note [unscale from Python] in python/src/autocastgen_C.cpp): autocastgen._C's
direct entry, the same op through torch.ops, and PyTorch's own
torch._amp_foreach_non_finite_check_and_unscale_ (the baseline); medians and ratios to the baseline.
Empty gradients by default, so the time is the call's own and not the kernel's.

    PYTHONPATH=build/python python3 bench/scaler_python_entry.py            # 100 and 1000 gradients
    PYTHONPATH=build/python python3 bench/scaler_python_entry.py --sizes 10 --numel 4099 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from autocastgen import grad_scaler  # the package loads the runtime, which registers the op


def per_call_us(call, grads: list[torch.Tensor], found: torch.Tensor, inv: torch.Tensor, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call(grads, found, inv)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="gradients per call")
    parser.add_argument("--numel", type=int, default=0, help="elements per gradient (0: the call alone)")
    parser.add_argument("--rounds", type=int, default=15, help="alternating rounds; the median is kept")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    direct = grad_scaler._C
    if direct is None:
        print("scaler_python_entry: autocastgen._C is not built for this Python (docs/python.md)", file=sys.stderr)
        return 1
    sides = {
        "autocastgen._C": direct.non_finite_check_and_unscale_,
        "torch.ops": torch.ops.autocastgen.non_finite_check_and_unscale_,
        "pytorch (baseline)": torch._amp_foreach_non_finite_check_and_unscale_,
    }
    results = []
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {args.numel} elements a gradient")
    print(f"{'gradients':>9}  " + "  ".join(f"{name:>20}" for name in sides) + "  _C/baseline  torch.ops/baseline")
    for n in args.sizes:
        grads = [torch.zeros(args.numel) for _ in range(n)]
        found, inv = torch.zeros(1), torch.ones(1)
        calls = max(20, 20000 // max(n, 1))
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, call in sides.items():
                times[name].append(per_call_us(call, grads, found, inv, calls))
        medians = {name: statistics.median(values) for name, values in times.items()}
        base = medians["pytorch (baseline)"]
        print(f"{n:>9}  " + "  ".join(f"{medians[name]:>17.1f} us" for name in sides)
              + f"  {medians['autocastgen._C'] / base:>11.3f}  {medians['torch.ops'] / base:>18.3f}")
        results.append({"gradients": n, "numel": args.numel, "us": medians,
                        "direct_over_baseline": medians["autocastgen._C"] / base,
                        "torch_ops_over_baseline": medians["torch.ops"] / base})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"python": sys.version.split()[0], "torch": torch.__version__, "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
