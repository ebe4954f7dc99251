#!/usr/bin/env python3
"""Instructions per call of bench_wrapper_overhead's tiny-tensor ops, counted by valgrind's callgrind:
a measure that other work on the machine does not disturb (wall and CPU times on a shared 2-core VM
spread by more than the 1 % the cost goals are about, and the VM has no hardware counters).

For each binary (this build in --mode=builtin and --mode=generated, and --before BINARY in
--mode=generated) it runs callgrind twice with collection on only inside the benchmark's per-op
lambdas (the whole op: dispatcher, autocast kernel, casts, the CPU kernel, freeing the result), at
two run lengths, and reports the marginal count (difference of instructions / difference of calls),
so one-off work (first-call initialisation, Google Benchmark's batches) drops out. Ratios are
against PyTorch's built-in autocast kernels and, with --before, against the other build."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

OFF_CASES = r"^cpu/[a-z0-9_]+ \([a-z_0-9]+\)$"  # everything off: no statistics, no watch
# In the annotated call tree: a caller line ('<', with its call count) and the function line ('*').
CALLER = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+<\s+.*\(([\d,]+)x\)")
FUNCTION = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+\*\s+\?\?\?:std::_Function_handler<.*make_cases\(\)::\{lambda\(\)#(\d+)\}>::_M_invoke")


def count(binary, mode, min_time):
    """{lambda number: (inclusive instructions, calls)} for one callgrind run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no",
                   "--toggle-collect=*make_cases*lambda*", binary, f"--mode={mode}",
                   f"--benchmark_filter={OFF_CASES}", f"--benchmark_min_time={min_time}", "--benchmark_format=json"]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
        tree = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--tree=caller", "--threshold=100", out],
                              check=True, capture_output=True, text=True).stdout
    result, calls = {}, 0
    for line in tree.splitlines():
        if not line.strip():
            calls = 0
        elif m := CALLER.match(line):
            calls += int(m.group(2).replace(",", ""))
        elif m := FUNCTION.match(line):
            result[int(m.group(2))] = (int(m.group(1).replace(",", "")), calls)
    return result


def per_call(binary, mode, short, long):
    a, b = count(binary, mode, short), count(binary, mode, long)
    per = {}
    for case in sorted(a):
        (ir_a, n_a), (ir_b, n_b) = a[case], b[case]
        if n_b <= n_a:
            sys.exit(f"{binary} {mode}: the longer run made no more calls of case {case} ({n_a} then {n_b})")
        per[case] = ((ir_b - ir_a) / (n_b - n_a), n_b)
    return per


def case_names(binary):
    listed = subprocess.run([binary, "--mode=builtin", "--benchmark_list_tests=true", f"--benchmark_filter={OFF_CASES}"],
                            check=True, capture_output=True, text=True).stdout.split("\n")
    return [name for name in listed if name]  # make_cases' order: lambda #1 is the first case


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/bench_wrapper_overhead")
    ap.add_argument("--before", metavar="BINARY", help="another build's bench_wrapper_overhead, counted in --mode=generated")
    ap.add_argument("--min-time", nargs=2, type=float, default=[0.1, 0.4], metavar=("SHORT", "LONG"),
                    help="Google Benchmark's --benchmark_min_time of the two runs (seconds under valgrind)")
    ap.add_argument("--generated-only", action="store_true",
                    help="count this build's generated wrappers only (a quick look while changing them)")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: install valgrind (apt-get install valgrind)")
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} does not exist; build it first (cmake --build build --target bench_wrapper_overhead)")
    names = case_names(args.binary)
    if args.generated_only:
        counts = per_call(args.binary, "generated", *args.min_time)
        print("| op | generated instr/call |\n|---|---|")
        for case, name in enumerate(names, start=1):
            print(f"| {name} | {counts[case][0]:,.0f} |")
        return 0
    columns = [("builtin", args.binary, "builtin"), ("generated", args.binary, "generated")]
    if args.before:
        columns.append(("before", args.before, "generated"))
    counts = {label: per_call(binary, mode, *args.min_time) for label, binary, mode in columns}
    header = "| op (tiny tensors, bf16 autocast, everything off) | PyTorch built-in instr/call | generated instr/call | generated / built-in |"
    rule = "|---|---|---|---|"
    if args.before:
        header += " before instr/call | generated / before |"
        rule += "---|---|"
    print(header)
    print(rule)
    for case, name in enumerate(names, start=1):
        builtin, generated = counts["builtin"][case][0], counts["generated"][case][0]
        row = f"| {name} | {builtin:,.0f} | {generated:,.0f} | {generated / builtin:.4f} |"
        if args.before:
            before = counts["before"][case][0]
            row += f" {before:,.0f} | {generated / before:.4f} |"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
