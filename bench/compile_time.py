#!/usr/bin/env python3
"""Compile time of the generated cpu wrappers against the same registrations written with
PyTorch's KERNEL_CPU helpers, measured in one run with identical flags; also the wrappers
registered through function pointers (`m.impl(name, &f)`: one boxing adaptor per C++ signature)
instead of TORCH_FN(f) (one per op), made from the generated file by rewriting its registrations.
Prints a ratio table."""
import argparse, os, re, statistics, subprocess, sys, tempfile, time


def torch_dir():
    import importlib.util
    return os.path.dirname(importlib.util.find_spec("torch").origin)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autocastgen", default="build/bin/autocastgen")
    ap.add_argument("--policy", default="schemas/policies/cpu.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    args = ap.parse_args()
    tdir = torch_dir()
    flags = ["-std=c++20", "-O2", "-fPIC", "-c", "-Iruntime/include", "-isystem", f"{tdir}/include",
             "-isystem", f"{tdir}/include/torch/csrc/api/include", "-o", os.devnull]
    with tempfile.TemporaryDirectory() as tmp:
        ours_dir, macros_dir, fnptr_dir = (os.path.join(tmp, d) for d in ("ours", "macros", "fnptr"))
        base = [args.autocastgen, "generate", "--policy", args.policy, "--name", "cpu"]
        subprocess.run(base + ["--out", ours_dir], check=True, capture_output=True)
        subprocess.run(base + ["--out", macros_dir, "--templates", "bench/templates/kernel_macros"], check=True,
                       capture_output=True)
        os.makedirs(fnptr_dir)
        with open(os.path.join(ours_dir, "autocast_cpu.cpp")) as f:
            fnptr_source, count = re.subn(r"TORCH_FN\(([^()]+)\)", r"&\1", f.read())
        assert count > 0, "no TORCH_FN registrations found in the generated file"
        with open(os.path.join(fnptr_dir, "autocast_cpu.cpp"), "w") as f:
            f.write(fnptr_source)
        files = {"generated wrappers (autocastgen)": os.path.join(ours_dir, "autocast_cpu.cpp"),
                 "generated, registered by function pointer": os.path.join(fnptr_dir, "autocast_cpu.cpp"),
                 "KERNEL_CPU helpers (baseline)": os.path.join(macros_dir, "autocast_cpu.cpp")}
        times = {name: [] for name in files}
        for _ in range(args.repeat):  # alternate, so drift hits both alike
            for name, path in files.items():
                start = time.perf_counter()
                subprocess.run([args.cxx, path, *flags], check=True)
                times[name].append(time.perf_counter() - start)
    ours = statistics.median(times["generated wrappers (autocastgen)"])
    base = statistics.median(times["KERNEL_CPU helpers (baseline)"])
    print(f"| compile of {args.policy} ({args.cxx} -O2, median of {args.repeat}) | seconds |")
    print("|---|---|")
    for name, samples in times.items():
        print(f"| {name} | {statistics.median(samples):.2f} |")
    fnptr = statistics.median(times["generated, registered by function pointer"])
    print(f"| ratio generated / baseline (goal <= 0.5) | {ours / base:.2f} |")
    print(f"| ratio function-pointer registration / baseline | {fnptr / base:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
