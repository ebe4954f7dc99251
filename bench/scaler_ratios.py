#!/usr/bin/env python3
"""Runs bench_scaler once and prints the grad-scaler ratio table (all numbers from that one run).

Usage: bench/scaler_ratios.py [path/to/bench_scaler] [--repetitions N] [--json OUT]
Ratios use the median real time over the repetitions. "x memcpy" is the scaler's throughput over
memcpy's for the same bytes (>= 0.8 is the goal on the big tensor); "/ torch" and "/ unfused" are
time ratios (<= 1.0 means faster than PyTorch's _amp_foreach_non_finite_check_and_unscale_).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def find_binary():
    for build in sorted(os.listdir(os.path.join(HERE, ".."))):
        path = os.path.join(HERE, "..", build, "bin", "bench_scaler")
        if build.startswith("build") and os.path.exists(path):
            return os.path.normpath(path)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", nargs="?", default=None)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per repetition")
    ap.add_argument("--json", help="also write the raw Google Benchmark JSON here")
    args = ap.parse_args()
    binary = args.binary or find_binary()
    if binary is None:
        sys.exit("bench_scaler not found; build it (cmake --build <dir> --target bench_scaler) or pass its path")
    cmd = [binary, "--benchmark_format=json", f"--benchmark_repetitions={args.repetitions}",
           "--benchmark_report_aggregates_only=true", f"--benchmark_min_time={args.min_time}"]
    raw = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    if args.json:
        with open(args.json, "w") as f:
            f.write(raw)
    data = json.loads(raw)
    median = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            median[b["run_name"].replace("/real_time", "")] = b["real_time"]  # microseconds

    ctx = data["context"]
    print(f"bench_scaler: {ctx.get('num_cpus')} CPUs, torch threads {ctx.get('torch_threads')}, "
          f"ISA {ctx.get('cpu_isa')}, {args.repetitions} repetitions, medians")
    print()
    header = f"{'shape':<14} {'dtype':<9} {'ours ms':>8} {'torch ms':>9} {'/ torch':>8} " \
             f"{'unfused ms':>10} {'/ unfused':>9} {'memcpy ms':>9} {'x memcpy':>8} {'x memcpy(par)':>13}"
    print(header)
    print("-" * len(header))
    for shape in ("big_64M", "many_1000x4K"):
        memcpy1 = median.get(f"memcpy_1thread/{shape}")
        memcpyp = median.get(f"memcpy_parallel/{shape}")
        for dtype in ("float32", "bfloat16", "float16"):
            ours = median.get(f"ours/{dtype}/{shape}")
            torch_t = median.get(f"torch_amp/{dtype}/{shape}")
            if ours is None or torch_t is None:
                continue
            unfused = median.get(f"unfused/{dtype}/{shape}")
            row = f"{shape:<14} {dtype:<9} {ours / 1e3:8.2f} {torch_t / 1e3:9.2f} {ours / torch_t:8.2f} "
            if unfused is not None:
                row += f"{unfused / 1e3:10.2f} {ours / unfused:9.3f} "
            else:
                row += f"{'':>10} {'':>9} "
            if dtype == "float32" and memcpy1 and memcpyp:
                # Same bytes: the ratio of times is the ratio of throughputs.
                row += f"{memcpy1 / 1e3:9.2f} {memcpy1 / ours:8.2f} {memcpyp / ours:13.2f}"
            print(row)
        k = median.get(f"kernel_1thread/float32/{shape}")
        if k is not None and memcpy1:
            print(f"{shape:<14} {'float32':<9} kernel on 1 thread: {k / 1e3:.2f} ms, {memcpy1 / k:.2f} x memcpy (1 thread)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
