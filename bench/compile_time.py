#!/usr/bin/env python3
"""Compile time of the generated cpu wrappers against the same registrations written with
PyTorch's KERNEL_CPU helpers, measured in one run with identical flags; also the same wrappers
registered with TORCH_FN(f) (one boxing adaptor instantiated per op) instead of the generated
function-pointer registration (`m.impl(name, &f)`: one per C++ signature), made from the generated
file by rewriting its registrations. Prints a ratio table."""
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
        files = {"generated wrappers (autocastgen)": os.path.join(ours_dir, "autocast_cpu.cpp"),
                 "generated, registered with TORCH_FN": os.path.join(torch_fn_dir, "autocast_cpu.cpp"),
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
    torch_fn = statistics.median(times["generated, registered with TORCH_FN"])
    print(f"| ratio generated / baseline (goal <= 0.5) | {ours / base:.2f} |")
    print(f"| ratio TORCH_FN registration / baseline | {torch_fn / base:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
