#!/usr/bin/env python3
"""Compile time of the generated cpu wrappers against the same registrations written with
PyTorch's KERNEL_CPU helpers, measured in one run with identical flags; also the same wrappers
registered with TORCH_FN(f) (one boxing adaptor instantiated per op) instead of the generated
function-pointer registration (`m.impl(name, &f)`: one per C++ signature), made from the generated
file by rewriting its registrations; and the wrappers generated in shards (`generate --shards N`),
the N files compiled in parallel on --jobs cores, as a build with -j<cores> would. Each row gets
its wall time and its compilers' CPU time (user + system, summed over the files). Prints a
ratio table. With --shipped, a second table: the generated sources of the three libraries
schemas/CMakeLists.txt builds (cpu, cpu with --state autocastgen, cuda) compiled together on --jobs
cores, unsharded and in --shipped-shards shards each, as `ninja -j<jobs>` builds them."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def torch_dir():
    import importlib.util
    return os.path.dirname(importlib.util.find_spec("torch").origin)


def compile_all(cxx, paths, flags, jobs):
    """Compiles `paths`, at most `jobs` at a time; (wall seconds, CPU seconds of the compilers)."""
    pending, running, cpu = list(paths), {}, 0.0
    start = time.perf_counter()
    while pending or running:
        while pending and len(running) < jobs:
            path = pending.pop(0)
            running[subprocess.Popen([cxx, path, *flags]).pid] = path
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        path = running.pop(pid)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"compiling {path} failed")
        cpu += usage.ru_utime + usage.ru_stime
    return time.perf_counter() - start, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autocastgen", default="build/bin/autocastgen")
    ap.add_argument("--policy", default="schemas/policies/cpu.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    ap.add_argument("--shards", default="2,4", help="comma-separated shard counts to measure (empty: none)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel compiles for the sharded rows")
    ap.add_argument("--shipped", action="store_true", help="also time the three shipped libraries' sources together")
    ap.add_argument("--shipped-shards", type=int, default=2)
    args = ap.parse_args()
    shard_counts = [int(n) for n in args.shards.split(",") if n]
    tdir = torch_dir()
    flags = ["-std=c++20", "-O2", "-fPIC", "-c", "-Iruntime/include", "-isystem", f"{tdir}/include",
             "-isystem", f"{tdir}/include/torch/csrc/api/include", "-o", os.devnull]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        ours_dir, macros_dir, torch_fn_dir = (os.path.join(tmp, d) for d in ("ours", "macros", "torch_fn"))
        base = [args.autocastgen, "generate", "--policy", args.policy, "--name", "cpu"]
        subprocess.run(base + ["--out", ours_dir], check=True, capture_output=True)
        subprocess.run(base + ["--out", macros_dir, "--templates", "bench/templates/kernel_macros"], check=True,
                       capture_output=True)
        os.makedirs(torch_fn_dir)
        with open(os.path.join(ours_dir, "autocast_cpu.cpp")) as f:
            torch_fn_source, count = re.subn(r'(m\.impl\("[^"]+", )&([^;]+)\);', r"\1TORCH_FN(\2));", f.read())
        assert count > 0, "no function-pointer registrations found in the generated file"
        with open(os.path.join(torch_fn_dir, "autocast_cpu.cpp"), "w") as f:
            f.write(torch_fn_source)
        rows = {"generated wrappers (autocastgen)": [os.path.join(ours_dir, "autocast_cpu.cpp")],
                "generated, registered with TORCH_FN": [os.path.join(torch_fn_dir, "autocast_cpu.cpp")]}
        for n in shard_counts:
            shard_dir = os.path.join(tmp, f"shards{n}")
            subprocess.run(base + ["--out", shard_dir, "--shards", str(n)], check=True, capture_output=True)
            files = [os.path.join(shard_dir, "autocast_cpu.cpp")]
            files += [os.path.join(shard_dir, f"autocast_cpu.shard{k}.cpp") for k in range(2, n + 1)]
            rows[f"generated in {n} shards, {min(n, args.jobs)} at a time"] = files
        rows["KERNEL_CPU helpers (baseline)"] = [os.path.join(macros_dir, "autocast_cpu.cpp")]
        shipped = {}
        if args.shipped:
            for n in sorted({1, args.shipped_shards}):
                files = []
                for policy, name, extra in (("cpu", "cpu", []), ("cpu", "cpu_own_state", ["--state", "autocastgen"]),
                                            ("cuda", "cuda", [])):
                    out = os.path.join(tmp, f"shipped{n}")
                    subprocess.run([args.autocastgen, "generate", "--policy", f"schemas/policies/{policy}.yaml", "--name",
                                    name, "--out", out, "--shards", str(n), *extra], check=True, capture_output=True)
                    files.append(os.path.join(out, f"autocast_{name}.cpp"))
                    files += [os.path.join(out, f"autocast_{name}.shard{k}.cpp") for k in range(2, n + 1)]
                shipped[f"SHARDS {n}: {len(files)} files, {args.jobs} at a time"] = files
        wall = {name: [] for name in [*rows, *shipped]}
        cpu = {name: [] for name in wall}
        for _ in range(args.repeat):  # alternate, so drift hits all alike
            for name, paths in [*rows.items(), *shipped.items()]:
                w, c = compile_all(args.cxx, paths, flags, args.jobs)
                wall[name].append(w)
                cpu[name].append(c)
    load_after = os.getloadavg()
    base_wall = statistics.median(wall["KERNEL_CPU helpers (baseline)"])
    base_cpu = statistics.median(cpu["KERNEL_CPU helpers (baseline)"])
    print(f"compile of {args.policy} ({args.cxx} -O2, median of {args.repeat}; {os.cpu_count()} cores, "
          f"sharded rows {args.jobs} at a time; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after)")
    print()
    print("| row | wall s | wall / KERNEL_CPU (goal <= 0.5) | CPU s | CPU / KERNEL_CPU |")
    print("|---|---|---|---|---|")
    for name in rows:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"| {name} | {w:.2f} | {w / base_wall:.2f} | {c:.2f} | {c / base_cpu:.2f} |")
    if shipped:
        first = next(iter(shipped))
        print()
        print("| the shipped libraries' sources (cpu, cpu_own_state, cuda) | wall s | wall / SHARDS 1 | CPU s | CPU / SHARDS 1 |")
        print("|---|---|---|---|---|")
        for name in shipped:
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            print(f"| {name} | {w:.2f} | {w / statistics.median(wall[first]):.2f} | {c:.2f} | "
                  f"{c / statistics.median(cpu[first]):.2f} |")


if __name__ == "__main__":
    sys.exit(main())
