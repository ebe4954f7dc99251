#!/usr/bin/env python3
"""Runs bench_runtime in a few processes and prints markdown ratio tables for autocastgen's runtime.

Usage: bench/runtime_ratios.py [path/to/bench_runtime] [--processes N] [--reps N] [--parts hit,threads,boxed]

  hit      ns per cast-cache hit: autocastgen::cached_cast in an AutocastScope vs
           at::autocast::cached_cast with PyTorch's CPU autocast on (64x64 fp32 weight).
  threads  aggregate hits/s with 1, 2, 4, 8 (and nproc, when more) threads on 16 shared weights:
           ours (thread-local cache) vs PyTorch's (one map behind a mutex).
  boxed    ns per at::mm call under bf16 CPU autocast: generated wrapper (unboxed) vs the
           runtime-policy boxed kernel (register_runtime_policy), under at::autocast and under an
           AutocastScope.

Every baseline is measured in the same process as what it is compared to, alternating with it.
Ratios are medians of the per-repetition ratios (each pair measured back to back), pooled over the
processes; times and rates are medians of all samples. The binary checks that each measurement
ran what it claims (cache hits, which kernel handled aten::mm) and exits 1 otherwise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def find_binary():
    root = os.path.join(HERE, "..")
    for build in sorted(os.listdir(root)):
        path = os.path.join(root, build, "bin", "bench_runtime")
        if build.startswith("build") and os.path.exists(path):
            return os.path.normpath(path)
    return None


def default_threads(cpus):
    counts, t = [], 1
    while t <= max(8, cpus):
        counts.append(t)
        t *= 2
    if cpus > 8 and cpus not in counts:
        counts.append(cpus)
    return counts


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def paired_ratio(num, den):
    return median([a / b for a, b in zip(num, den)])


def merge(runs, *keys):
    """Concatenates the sample lists found at runs[i][keys...] over the processes."""
    out = []
    for run in runs:
        node = run
        for k in keys:
            node = node[k]
        out.extend(node)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", nargs="?", default=None)
    ap.add_argument("--processes", type=int, default=3, help="processes to run (samples are pooled)")
    ap.add_argument("--reps", type=int, default=11, help="alternating repetitions per process (hit, boxed)")
    ap.add_argument("--threads-reps", type=int, default=3, help="alternating repetitions per process (threads)")
    ap.add_argument("--threads", help="thread counts, comma-separated (default: 1,2,4,8 and up to nproc)")
    ap.add_argument("--duration-ms", type=float, default=100, help="time per thread-scaling measurement")
    ap.add_argument("--parts", default="hit,threads,boxed")
    ap.add_argument("--json", help="also write the raw outputs (a JSON list, one per process) here")
    args = ap.parse_args()
    binary = args.binary or find_binary()
    if binary is None:
        sys.exit("bench_runtime not found; build it (cmake --build build -j2 --target bench_runtime) or pass its path")

    cpus = len(os.sched_getaffinity(0))
    threads = args.threads or ",".join(str(t) for t in default_threads(cpus))
    cmd = [binary, f"--parts={args.parts}", f"--reps={args.reps}", f"--threads-reps={args.threads_reps}",
           f"--threads={threads}", f"--duration-ms={args.duration_ms}"]
    load_before = os.getloadavg()[0]
    runs = []
    for _ in range(args.processes):
        # stderr holds PyTorch's kernel-override warnings; it is shown only when the run fails.
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            sys.stderr.flush()
            sys.exit(f"bench_runtime failed (exit {done.returncode}); its message is above. Command: {' '.join(cmd)}")
        runs.append(json.loads(done.stdout))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)

    first = runs[0]
    print(f"bench_runtime: nproc {os.cpu_count()}, CPUs usable {cpus} (binary sees "
          f"{first['affinity_cpus']}), intra-op threads {first['torch_threads']}, "
          f"{args.processes} processes x {args.reps} alternating repetitions, medians; "
          f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (other work on the machine "
          "disturbs the timings, thread scaling most)")
    parts = args.parts.split(",")

    if "hit" in parts:
        ours, torch = merge(runs, "hit", "ours_ns"), merge(runs, "hit", "torch_ns")
        print()
        print(f"### Cast-cache hit, one thread ({first['hit']['weight']} weight, "
              f"{first['hit']['iters']} hits per sample)")
        print()
        print("| autocastgen::cached_cast ns/hit | at::autocast::cached_cast ns/hit | ours / PyTorch (time) |")
        print("|---|---|---|")
        print(f"| {median(ours):.1f} | {median(torch):.1f} | {paired_ratio(ours, torch):.2f} |")

    if "threads" in parts:
        t = first["threads"]
        counts = [str(c) for c in t["counts"]]
        ours = {c: merge(runs, "threads", "ours_hps", c) for c in counts}
        torch = {c: merge(runs, "threads", "torch_hps", c) for c in counts}
        base = counts[0]
        print()
        print(f"### Thread scaling: aggregate cache hits/s, {t['weights']} shared weights round robin, "
              f"{t['duration_ms']:g} ms per sample")
        print()
        if cpus < max(int(c) for c in counts):
            print(f"This machine runs the benchmark on {cpus} CPUs: thread counts above {cpus} oversubscribe "
                  "the cores and cannot scale; only the rows up to that count say anything about scaling.")
            print()
        print(f"| threads | ours M hits/s | ours x {base} thread | PyTorch M hits/s | PyTorch x {base} thread "
              "| ours / PyTorch (throughput) |")
        print("|---|---|---|---|---|---|")
        for c in counts:
            note = " (> CPUs)" if int(c) > cpus else ""
            print(f"| {c}{note} | {median(ours[c]) / 1e6:.1f} | {median(ours[c]) / median(ours[base]):.2f} "
                  f"| {median(torch[c]) / 1e6:.1f} | {median(torch[c]) / median(torch[base]):.2f} "
                  f"| {paired_ratio(ours[c], torch[c]):.2f} |")

    if "boxed" in parts:
        b = first["boxed"]
        print()
        if "skipped" in b:
            print(f"### Boxed vs unboxed: skipped ({b['skipped']})")
        else:
            print(f"### Boxed runtime-policy kernel vs generated wrapper: at::mm, fp32 CPU inputs, bf16 autocast, "
                  f"{b['iters']} calls per sample")
            print()
            print("| op | generated wrapper ns/call | boxed, at::autocast state ns/call | boxed / generated "
                  "| boxed, AutocastScope ns/call | boxed (scope) / generated |")
            print("|---|---|---|---|---|---|")
            for case in b["cases"]:
                u = merge(runs, "boxed", "cases", case, "unboxed_ns")
                bx = merge(runs, "boxed", "cases", case, "boxed_ns")
                bs = merge(runs, "boxed", "cases", case, "boxed_scope_ns")
                print(f"| {case} | {median(u):.0f} | {median(bx):.0f} | {paired_ratio(bx, u):.2f} "
                      f"| {median(bs):.0f} | {paired_ratio(bs, u):.2f} |")
            print()
            print(f"AutocastCPU kernel of aten::mm, generated: `{b['generated_kernel'].strip()}`; "
                  f"runtime policy: `{b['runtime_kernel'].strip()}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
