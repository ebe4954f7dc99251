#!/usr/bin/env python3
"""Alternates bench_wrapper_overhead in --mode=builtin and --mode=generated processes over several
rounds (so machine drift hits both alike) and prints median CPU ns/call (the benchmarks are
single-threaded, and CPU time is less disturbed than wall time by other work on the machine) and
the ratio per op. The
generated process also times every op with per-op statistics on (`<op> [stats on]`), interleaved
with the same op's statistics-off runs (Google Benchmark's random interleaving), and the ratio
on / off is printed too, and the same for the non-finite watch (`<op> [watch on]`, record mode). --before BINARY also times another build's --mode=generated (say, one
from before a change to the drivers) in the same rounds."""
import argparse
import json
import statistics
import subprocess
import sys

STATS_ON = " [stats on]"
WATCH_ON = " [watch on]"


def run(binary, mode, min_time, repetitions, only=None):
    command = [binary, f"--mode={mode}", "--benchmark_format=json", f"--benchmark_min_time={min_time}",
               f"--benchmark_repetitions={repetitions}", "--benchmark_enable_random_interleaving=true"]
    if only:
        command.append(f"--benchmark_filter={only}")
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    results = json.loads(out)["benchmarks"]
    failed = [f'{b["name"]}: {b["error_message"]}' for b in results if b.get("error_occurred")]
    if failed:
        sys.exit(f"{mode} mode measured the wrong kernels: " + "; ".join(failed))
    times = {}
    for b in results:
        if b.get("run_type", "iteration") == "iteration":
            times.setdefault(b["run_name"], []).append(b["cpu_time"])  # CPU time: less disturbed by other work on a busy machine
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/bench_wrapper_overhead")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repetitions", type=int, default=3, help="interleaved repetitions per process")
    ap.add_argument("--min-time", default="0.1s")
    ap.add_argument("--before", metavar="BINARY", help="another build's bench_wrapper_overhead, timed in --mode=generated")
    ap.add_argument("--off-only", action="store_true",
                    help="with --before: time only the everything-off cases of both builds (no builtin, stats or watch)")
    ap.add_argument("--rules", action="store_true",
                    help="also time --mode=rules (mse_loss behind a precision rule) against the plain wrappers")
    args = ap.parse_args()
    if args.off_only:
        if not args.before:
            sys.exit("--off-only needs --before")
        off = r"^cpu/[a-z0-9_]+ \([a-z_0-9]+\)$"
        samples = {"before": {}, "generated": {}}
        for _ in range(args.rounds):
            for key, binary in (("before", args.before), ("generated", args.binary)):
                for name, ns in run(binary, "generated", args.min_time, args.repetitions, off).items():
                    samples[key].setdefault(name, []).extend(ns)
        print(f"| op (everything off; medians of {args.rounds} alternating rounds x {args.repetitions}) "
              f"| {args.before} ns/call | this build ns/call | ratio (goal <= 1.01) |")
        print("|---|---|---|---|")
        for name in samples["before"]:
            b, g = statistics.median(samples["before"][name]), statistics.median(samples["generated"][name])
            print(f"| {name} | {b:.0f} | {g:.0f} | {g / b:.3f} |")
        return 0
    samples = {"builtin": {}, "generated": {}, "before": {}, "rules": {}}
    for _ in range(args.rounds):
        runs = [("builtin", args.binary), ("generated", args.binary)] + ([("before", args.before)] if args.before else [])
        runs += [("rules", args.binary)] if args.rules else []
        for key, binary in runs:
            mode = {"builtin": "builtin", "rules": "rules"}.get(key, "generated")
            for name, ns in run(binary, mode, args.min_time, args.repetitions).items():
                samples[key].setdefault(name, []).extend(ns)
    med = {k: {n: statistics.median(v) for n, v in s.items()} for k, s in samples.items()}
    print(f"| op (tiny tensors, bf16 autocast; medians of {args.rounds} alternating rounds x {args.repetitions} "
          "interleaved repetitions) | PyTorch built-in ns/call | generated ns/call | ratio (goal <= 1.0) "
          "| generated, statistics on ns/call | stats on / off (goal <= 1.3) | watch on (record) ns/call "
          "| watch on / off |")
    print("|---|---|---|---|---|---|---|---|")
    for name in med["builtin"]:
        b, g, s = med["builtin"][name], med["generated"][name], med["generated"][name + STATS_ON]
        w = med["generated"].get(name + WATCH_ON, float("nan"))
        print(f"| {name} | {b:.0f} | {g:.0f} | {g / b:.2f} | {s:.0f} | {s / g:.2f} | {w:.0f} | {w / g:.2f} |")
    if args.rules:
        print()
        print("| op (statistics off) | plain wrappers ns/call | mse_loss behind a rule ns/call | ratio (goal <= 1.03 on "
              "mse_loss, 1.0 elsewhere) |")
        print("|---|---|---|---|")
        for name in med["builtin"]:
            g, r = med["generated"][name], med["rules"][name]
            print(f"| {name} | {g:.0f} | {r:.0f} | {r / g:.3f} |")
    if args.before:
        print()
        print(f"| op (statistics off) | {args.before} ns/call | this build ns/call | ratio |")
        print("|---|---|---|---|")
        for name in med["builtin"]:
            b, g = med["before"][name], med["generated"][name]
            print(f"| {name} | {b:.0f} | {g:.0f} | {g / b:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
