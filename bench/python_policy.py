#!/usr/bin/env python3
"""Per-call time of a custom op under torch.autocast with three cast rules, in one process,
alternating: autocastgen.compile_policy's generated wrapper, autocastgen.load_policy's runtime
kernel and torch.library.register_autocast; medians and ratios. Also the cold and warm times of
compile_policy (first compile into an empty cache; a new process loading from the cache)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
NS = "acg_bench"  # fixed: the warm probes define the same op, so that the cache key is the same
SIDES = ("register_autocast", "load_policy", "compile_policy")
OPS = {"register_autocast": "mul_torch", "load_policy": "mul_acg", "compile_policy": "mul_gen"}


def define_ops() -> torch.library.Library:
    """Three ops with one schema and one cheap CPU kernel (a * b), one per autocast registration:
    the time is mostly dispatch and casts, which is what the registrations differ in."""
    lib = torch.library.Library(NS, "DEF")
    for name in OPS.values():
        lib.define(f"{name}(Tensor a, Tensor b) -> Tensor")
        lib.impl(name, lambda a, b: torch.mul(a, b), "CPU")
    return lib


def time_calls(fn, a, b, calls: int) -> float:
    """ns per call of `calls` back-to-back calls under bf16 CPU autocast."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn(a, b)
        return (time.perf_counter_ns() - start) / calls


def time_plain(fn, a, b, calls: int) -> float:
    """ns per call outside autocast (the op's own cost, inputs already bf16)."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(a, b)
    return (time.perf_counter_ns() - start) / calls


def warm_probe(policy: str) -> int:
    """(A child process) defines the op, times compile_policy from the cache, prints JSON."""
    import autocastgen

    _lib = define_ops()
    start = time.perf_counter()
    handle = autocastgen.compile_policy(policy)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "compiled": handle.compiled}))
    return 0


def compile_times(policy: Path, probes: int) -> tuple[float, list[float], object]:
    """compile_policy cold (in this process, empty cache, ccache off) and warm (new processes)."""
    import autocastgen

    ccache = os.environ.get("CCACHE_DISABLE")
    os.environ["CCACHE_DISABLE"] = "1"  # a real compile, not a ccache hit of an earlier run
    try:
        start = time.perf_counter()
        handle = autocastgen.compile_policy(policy)
        cold = time.perf_counter() - start
    finally:
        if ccache is None:
            del os.environ["CCACHE_DISABLE"]
        else:
            os.environ["CCACHE_DISABLE"] = ccache
    if not handle.compiled:
        sys.exit("python_policy: compile_policy did not compile into the empty cache")
    warm = []
    for _ in range(probes):
        done = subprocess.run([sys.executable, __file__, "--warm-probe", str(policy), "--build", str(BUILD)],
                              capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.splitlines()[-1])
        if result["compiled"]:
            sys.exit(f"python_policy: a new process compiled again:\n{done.stderr}")
        warm.append(result["seconds"])
    return cold, warm, handle


def main() -> int:
    global BUILD
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=str(ROOT / "build"), help="build tree holding python/autocastgen")
    ap.add_argument("--rounds", type=int, default=21, help="alternating repetitions per size")
    ap.add_argument("--calls", type=int, default=1000, help="calls per repetition")
    ap.add_argument("--sizes", default="8,256", help="square tensor sizes")
    ap.add_argument("--mm-sizes", default="8,64", help="square sizes of the aten::mm rows")
    ap.add_argument("--probes", type=int, default=5, help="new processes timing compile_policy from the cache")
    ap.add_argument("--warm-probe", metavar="POLICY", help=argparse.SUPPRESS)
    args = ap.parse_args()
    BUILD = Path(args.build)
    sys.path.insert(0, str(BUILD / "python"))
    if args.warm_probe:
        return warm_probe(args.warm_probe)
    import autocastgen

    torch.set_num_threads(1)  # dispatch cost, not kernel parallelism
    lib = define_ops()
    ops = getattr(torch.ops, NS)
    torch.library.register_autocast(f"{NS}::mul_torch", "cpu", torch.bfloat16, lib=lib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = f"autocast: {{device: cpu}}\nlists:\n  lower_precision_fp: [{NS}::mul_acg]\n"
        registered = autocastgen.load_policy(policy)
    assert registered == 1

    with tempfile.TemporaryDirectory(prefix="acg-bench-") as scratch:
        os.environ["AUTOCASTGEN_CACHE"] = str(Path(scratch) / "cache")  # empty: the first call compiles
        compiled_policy = Path(scratch) / "bench_gen.yaml"
        compiled_policy.write_text(f"autocast: {{device: cpu}}\nlists:\n  lower_precision_fp: [{NS}::mul_gen]\n")
        cold, warm, handle = compile_times(compiled_policy, args.probes)
        again = time.perf_counter()
        autocastgen.compile_policy(compiled_policy)
        same_process = time.perf_counter() - again

        sides = {side: getattr(ops, OPS[side]).default for side in SIDES}
        print(f"# torch {torch.__version__}, 1 intra-op thread, {args.rounds} alternating rounds x {args.calls} calls, "
              f"bf16 CPU autocast, medians; CPUs usable: {len(os.sched_getaffinity(0))}")
        print()
        print(f"compile_policy: cold {cold:.1f} s (generate + compile + load into an empty cache, ccache off; "
              f"the build itself {handle.build_seconds:.1f} s); warm, in a new process: median "
              f"{statistics.median(warm) * 1000:.1f} ms, max {max(warm) * 1000:.1f} ms over {len(warm)} processes; "
              f"again in the same process: {same_process * 1000:.2f} ms")
        print()
        print("| size | op alone, bf16 inputs, no autocast ns/call | register_autocast ns/call | load_policy ns/call "
              "| compile_policy ns/call | load_policy / register_autocast | compile_policy / register_autocast "
              "| compile_policy / load_policy | autocast overhead ns: register_autocast | load_policy | compile_policy |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for size in (int(s) for s in args.sizes.split(",")):
            a, b = torch.randn(size, size), torch.randn(size, size)
            expected = torch.mul(a.to(torch.bfloat16), b.to(torch.bfloat16))
            for name, fn in sides.items():  # each must run the op in bf16, with the same result
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = fn(a, b)
                if out.dtype != torch.bfloat16 or not torch.equal(out, expected):
                    sys.exit(f"python_policy: {name} did not run {NS} in bfloat16 (got {out.dtype})")
            a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
            samples: dict[str, list[float]] = {"plain": [], **{n: [] for n in sides}}
            ratios: dict[str, list[float]] = {"lp/ra": [], "cp/ra": [], "cp/lp": []}
            for _ in range(3):  # warm-up
                for fn in sides.values():
                    time_calls(fn, a, b, args.calls // 10)
            for rep in range(args.rounds):
                order = SIDES[rep % 3:] + SIDES[:rep % 3]  # who goes first rotates every round
                got = {n: time_calls(sides[n], a, b, args.calls) for n in order}
                samples["plain"].append(time_plain(sides["load_policy"], a16, b16, args.calls))
                for n, ns_per_call in got.items():
                    samples[n].append(ns_per_call)
                ratios["lp/ra"].append(got["load_policy"] / got["register_autocast"])
                ratios["cp/ra"].append(got["compile_policy"] / got["register_autocast"])
                ratios["cp/lp"].append(got["compile_policy"] / got["load_policy"])
            med = {n: statistics.median(v) for n, v in samples.items()}
            ratio = {n: statistics.median(v) for n, v in ratios.items()}
            over = {n: med[n] - med["plain"] for n in SIDES}
            print(f"| {size}x{size} | {med['plain']:.0f} | {med['register_autocast']:.0f} | {med['load_policy']:.0f} "
                  f"| {med['compile_policy']:.0f} | **{ratio['lp/ra']:.2f}** | **{ratio['cp/ra']:.2f}** "
                  f"| **{ratio['cp/lp']:.2f}** | {over['register_autocast']:.0f} | {over['load_policy']:.0f} "
                  f"| {over['compile_policy']:.0f} |")
        aten_rows(autocastgen, Path(scratch), args)
    autocastgen.clear_runtime_policies()
    return 0


def kernel_on_key(op: str) -> str:
    """Where the op's AutocastCPU kernel was registered (the dispatcher's own record)."""
    lines = [line for line in torch._C._dispatch_dump_table(op).splitlines() if line.startswith("AutocastCPU:")]
    return lines[0] if lines else "(none)"


def aten_rows(autocastgen, scratch: Path, args) -> None:
    """aten::mm, an op with a C++ kernel: the generated wrapper against the runtime kernel, the
    same op alternating in one process (register_runtime_policy replaces the wrapper,
    clear_runtime_policies brings it back). register_autocast takes custom ops only."""
    policy = scratch / "bench_aten.yaml"
    policy.write_text("autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm]\n")
    handle = autocastgen.compile_policy(policy)
    autocastgen.clear_runtime_policies()  # from here on, only the runtime policy of mm toggles

    def runtime_on() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            autocastgen.register_runtime_policy("mm", "lower_precision_fp", "cpu")

    runtime_on()
    runtime_kernel = kernel_on_key("aten::mm")
    autocastgen.clear_runtime_policies()
    wrapper_kernel = kernel_on_key("aten::mm")
    if str(handle.source) not in wrapper_kernel or "runtime_policy" not in runtime_kernel:
        sys.exit(f"python_policy: aten::mm's AutocastCPU kernel is not the expected one:\n{wrapper_kernel}\n"
                 f"{runtime_kernel}")
    print()
    print("aten::mm (a C++ kernel), lower_precision_fp, the same op alternating in one process:")
    print()
    print("| size | mm alone, bf16 inputs, no autocast ns/call | load_policy (runtime kernel) ns/call "
          "| compile_policy (generated wrapper) ns/call | compile_policy / load_policy "
          "| autocast overhead ns: load_policy | compile_policy | overhead ratio |")
    print("|---|---|---|---|---|---|---|---|")
    mm = torch.ops.aten.mm.default
    for size in (int(s) for s in args.mm_sizes.split(",")):
        a, b = torch.randn(size, size), torch.randn(size, size)
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
        expected = torch.mm(a16, b16)
        samples: dict[str, list[float]] = {"plain": [], "load_policy": [], "compile_policy": []}
        ratios = []
        for rep in range(args.rounds + 3):  # the first 3 rounds warm up
            got = {}
            for side in (("load_policy", "compile_policy") if rep % 2 == 0 else ("compile_policy", "load_policy")):
                if side == "load_policy":
                    runtime_on()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = mm(a, b)
                if out.dtype != torch.bfloat16 or not torch.equal(out, expected):
                    sys.exit(f"python_policy: {side} did not run aten::mm in bfloat16 (got {out.dtype})")
                time_calls(mm, a, b, max(1, args.calls // 10))  # steady state, not the first calls after a toggle
                got[side] = time_calls(mm, a, b, args.calls)
                autocastgen.clear_runtime_policies()
            plain = time_plain(mm, a16, b16, args.calls)
            if rep >= 3:
                for side, ns_per_call in got.items():
                    samples[side].append(ns_per_call)
                samples["plain"].append(plain)
                ratios.append(got["compile_policy"] / got["load_policy"])
        med = {n: statistics.median(v) for n, v in samples.items()}
        over_l, over_c = med["load_policy"] - med["plain"], med["compile_policy"] - med["plain"]
        print(f"| {size}x{size} | {med['plain']:.0f} | {med['load_policy']:.0f} | {med['compile_policy']:.0f} "
              f"| **{statistics.median(ratios):.2f}** | {over_l:.0f} | {over_c:.0f} | {over_c / over_l:.2f} |")


BUILD = ROOT / "build"

if __name__ == "__main__":
    sys.exit(main())
