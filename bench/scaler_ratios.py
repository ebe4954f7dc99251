#!/usr/bin/env python3
"""Runs bench_scaler once and prints the grad-scaler ratio tables (all numbers from that one run).

Usage: bench/scaler_ratios.py [path/to/bench_scaler] [--repetitions N] [--min-time S] [--filter REGEX]
                              [--stat median|min] [--quiet-below LOAD [--quiet-wait S]] [--json OUT]

Repetitions are interleaved (Google Benchmark's random interleaving: every repetition of every
variant runs in a shuffled order), and every number is the median over the repetitions (--stat
min: the fastest repetition, what a variant costs when nothing else gets in its way); ratios are
ratios of those numbers. Method and the last measured tables: bench/README.md.

cpu table: "/ torch" is our time over PyTorch's _amp_foreach_non_finite_check_and_unscale_ (lower
is better; goal <= 0.9 on the big tensor); "x memcpy" is our throughput over memcpy's for the same
bytes, against the faster of the 1-thread and the parallel memcpy (goal >= 0.9).
host table: CPU time per call (one thread, so less disturbed by other work than wall time) of the
host side of the CUDA path with the launches stubbed, next to the steps PyTorch's CUDA op runs
before its launches; and the dispatcher's share of a 1000-tensor call.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ("float32", "bfloat16", "float16")


def find_binary():
    for build in sorted(os.listdir(os.path.join(HERE, ".."))):
        path = os.path.join(HERE, "..", build, "bin", "bench_scaler")
        if build.startswith("build") and os.path.exists(path):
            return os.path.normpath(path)
    return None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def wait_for_quiet(limit, max_wait):
    """Waits (up to max_wait seconds) until the 1-minute load average is below limit."""
    deadline = time.monotonic() + max_wait
    while True:
        one = float(loadavg().split()[0])
        if one < limit or time.monotonic() >= deadline:
            return one < limit
        time.sleep(10)


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def ratio(a, b):
    return a / b if a is not None and b else None


def cpu_table(real):
    rows = ["| shape | dtype | ours ms | torch ms | ours / torch | ours 1-thr ms | torch 1-thr ms | 1-thr ratio "
            "| kernel 1-thr / pool / OpenMP ms | memcpy ms (1-thr / par) | x memcpy |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for shape in ("big_64M", "many_1000x4K"):
        for dtype in DTYPES:
            g = lambda v: real.get(f"cpu/{v}/{dtype}/{shape}")  # noqa: E731
            ours, torch_t = g("ours"), g("torch_amp")
            if ours is None and torch_t is None:
                continue
            ours1, torch1 = g("ours_1thread"), g("torch_amp_1thread")
            m1, mp = g("memcpy_1thread"), g("memcpy_parallel")
            best = min(x for x in (m1, mp) if x is not None) if (m1 or mp) else None
            ms = lambda x: fmt(x / 1e3 if x is not None else None, ".2f")  # noqa: E731
            rows.append(f"| {shape} | {dtype} | {ms(ours)} | {ms(torch_t)} | **{fmt(ratio(ours, torch_t), '.2f')}** "
                        f"| {ms(ours1)} | {ms(torch1)} | {fmt(ratio(ours1, torch1), '.2f')} "
                        f"| {ms(g('kernel_1thread'))} / {ms(g('kernel_pool'))} / {ms(g('kernel_omp'))} | {ms(m1)} / {ms(mp)} "
                        f"| **{fmt(ratio(best, ours), '.2f')}** |")
        unfused = real.get(f"cpu/unfused/float32/{shape}")
        ours = real.get(f"cpu/ours/float32/{shape}")
        if unfused is not None and ours is not None:
            rows.append(f"| {shape} | float32 | unfused ATen (isfinite().all() + mul_ per tensor): "
                        f"{unfused / 1e3:.2f} ms, ours / unfused {ours / unfused:.3f} | | | | | | | | |")
    return rows


def host_table(real, cpu):
    prefix = cpu.get("host/torch_prefix/1000x4099")
    rows = ["| step (1000 x 4099 fp32) | CPU us / call | wall us / call | / PyTorch's prefix |", "|---|---|---|---|"]
    names = [
        ("ours_glue", "ours: checks + staging + validation + overlap test + packing (launch stubbed)"),
        ("ours_prepare", "ours: validation + overlap test + packing of ready spans"),
        ("torch_prefix", "PyTorch's CUDA op before multi_tensor_apply: foreach checks + list copy"),
        ("memcpy_metadata", "memcpy of the work list (1000 x 16 bytes)"),
    ]
    for key, label in names:
        c = cpu.get(f"host/{key}/1000x4099")
        w = real.get(f"host/{key}/1000x4099")
        rows.append(f"| {label} | {fmt(c, '.2f')} | {fmt(w, '.2f')} | {fmt(ratio(c, prefix), '.2f')} |")
    op, direct = cpu.get("host/dispatch_op/1000x1"), cpu.get("host/dispatch_direct/1000x1")
    if op is not None and direct is not None:
        rows.append(f"| dispatcher share (1000 x 1, CPU op through the dispatcher minus called directly) "
                    f"| {op - direct:.2f} | | |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", nargs="?", default=None)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per repetition")
    ap.add_argument("--filter", default="", help="only benchmarks matching this regex (e.g. 'host/|float32')")
    ap.add_argument("--json", help="also write the raw Google Benchmark JSON here")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="statistic over the repetitions (default: median)")
    ap.add_argument("--quiet-below", type=float, help="first wait until the 1-minute load average is below this")
    ap.add_argument("--quiet-wait", type=float, default=1800, help="longest wait for --quiet-below, seconds")
    args = ap.parse_args()
    binary = args.binary or find_binary()
    if binary is None:
        sys.exit("bench_scaler not found; build it (cmake --build <dir> --target bench_scaler) or pass its path")
    cmd = [binary, "--benchmark_format=json", f"--benchmark_repetitions={args.repetitions}",
           "--benchmark_enable_random_interleaving=true",
           f"--benchmark_min_time={args.min_time}"]
    if args.filter:
        cmd.append(f"--benchmark_filter={args.filter}")
    if args.quiet_below is not None and not wait_for_quiet(args.quiet_below, args.quiet_wait):
        print(f"scaler_ratios: load stayed at or above {args.quiet_below} for {args.quiet_wait:.0f} s; "
              "measuring anyway", file=sys.stderr)
    load_before = loadavg()
    raw = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    load_after = loadavg()
    if args.json:
        with open(args.json, "w") as f:
            f.write(raw)
    data = json.loads(raw)
    samples, failed = {}, set()
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            failed.add(f"{b['run_name']}: {b.get('error_message')}")
        elif b.get("run_type") == "iteration":
            name = b["run_name"].replace("/real_time", "")
            samples.setdefault(name, []).append((b["real_time"], b["cpu_time"]))  # microseconds
    pick = statistics.median if args.stat == "median" else min
    real = {name: pick([r for r, _ in s]) for name, s in samples.items()}
    cpu = {name: pick([c for _, c in s]) for name, s in samples.items()}

    ctx = data["context"]
    print(f"bench_scaler: {ctx.get('num_cpus')} CPUs, torch threads {ctx.get('torch_threads')}, "
          f"ISA {ctx.get('cpu_isa')}, {args.repetitions} interleaved repetitions, {args.stat}s; "
          f"load average {load_before} before, {load_after} after")
    print()
    rows = cpu_table(real)
    if len(rows) > 2:
        print("\n".join(rows))
        print()
    rows = host_table(real, cpu)
    if any(r.split("|")[2].strip() not in ("-", "") for r in rows[2:]):
        print("\n".join(rows))
    if failed:
        print("scaler_ratios: variants that failed their own check:\n  " + "\n  ".join(sorted(failed)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
