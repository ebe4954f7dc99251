#!/usr/bin/env python3
"""Alternates bench_wrapper_overhead in --mode=builtin, --mode=generated and --mode=generated-stats
processes over several rounds (so machine drift hits all alike) and prints median ns/call and the
ratios per op: generated / built-in, and statistics on / off (generated-stats / generated)."""
import argparse, json, statistics, subprocess, sys


def run(binary, mode, min_time):
    out = subprocess.run([binary, f"--mode={mode}", "--benchmark_format=json", f"--benchmark_min_time={min_time}"],
                         check=True, capture_output=True, text=True).stdout
    results = json.loads(out)["benchmarks"]
    failed = [f'{b["name"]}: {b["error_message"]}' for b in results if b.get("error_occurred")]
    if failed:
        sys.exit(f"{mode} mode measured the wrong kernels: " + "; ".join(failed))
    return {b["name"]: b["real_time"] for b in results}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/bench_wrapper_overhead")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", default="0.2")
    args = ap.parse_args()
    samples = {"builtin": {}, "generated": {}, "generated-stats": {}}
    for _ in range(args.rounds):
        for mode in samples:
            for name, ns in run(args.binary, mode, args.min_time).items():
                samples[mode].setdefault(name, []).append(ns)
    print(f"| op (tiny tensors, bf16 autocast; median of {args.rounds} alternating rounds) "
          "| PyTorch built-in ns/call | generated ns/call | ratio (goal <= 1.0) "
          "| generated, statistics on ns/call | stats on / off (goal <= 1.3) |")
    print("|---|---|---|---|---|---|")
    for name in samples["builtin"]:
        b, g = statistics.median(samples["builtin"][name]), statistics.median(samples["generated"][name])
        s = statistics.median(samples["generated-stats"][name])
        print(f"| {name} | {b:.0f} | {g:.0f} | {g / b:.2f} | {s:.0f} | {s / g:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
