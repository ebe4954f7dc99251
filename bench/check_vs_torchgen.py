#!/usr/bin/env python3
"""Times `autocastgen check` (the whole process) against torchgen's parse_native_yaml on the same
native_functions.yaml, in the same run, and prints a markdown table with the ratio ours/torchgen.

Measured (wall time, and CPU time = user + system, medians of --runs):
  ours           the whole `autocastgen <verb> ...` process
  torchgen warm  parse_native_yaml(...) alone in this (warm) interpreter, its cache cleared before
                 each call
  torchgen cold  a fresh `python -c` process that imports torchgen and calls parse_native_yaml
  start-up       `autocastgen --version`: what loading the binary and its libraries costs
  yaml-cpp floor bench_yaml_floor: yaml-cpp's event parser over the file with a no-op handler, the
                 least any reader built on yaml-cpp can take
The target (issue 14) is ours <= 0.07 x torchgen warm, wall and CPU. CPU time is less disturbed by other work on a
busy machine; both sides run in one thread.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def torchgen_paths() -> tuple[str, str]:
    spec = importlib.util.find_spec("torchgen")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torchgen is not importable (is PyTorch installed? run scripts/setup)")
    native = Path(spec.submodule_search_locations[0]) / "packaged" / "ATen" / "native"
    return str(native / "native_functions.yaml"), str(native / "tags.yaml")


class Times:
    """Wall and CPU seconds of repeated runs."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def median(self) -> float:
        return statistics.median(self.wall)

    def median_cpu(self) -> float:
        return statistics.median(self.cpu)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(command: list[str], runs: int, cwd: Path) -> Times:
    times = Times()
    for _ in range(runs):
        cpu = children_cpu()
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.wall.append(time.perf_counter() - start)
        times.cpu.append(children_cpu() - cpu)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')}")
    return times


def torchgen_warm(native: str, tags: str, runs: int) -> tuple[Times, int]:
    import torchgen.gen as gen

    times = Times()
    count = 0
    for i in range(runs + 1):  # the first call also warms up torchgen's own imports and caches
        gen._GLOBAL_PARSE_NATIVE_YAML_CACHE.clear()
        cpu = time.process_time()
        start = time.perf_counter()
        parsed = gen.parse_native_yaml(native, tags)
        if i:
            times.wall.append(time.perf_counter() - start)
            times.cpu.append(time.process_time() - cpu)
        count = len(parsed.native_functions)
    return times, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", default=str(ROOT / "build" / "bin" / "autocastgen"))
    parser.add_argument("--verb", choices=["check", "schema"], default="check",
                        help="check: `check --policy POLICY` (default); schema: `schema` (parsing only)")
    parser.add_argument("--policy", default="schemas/policies/cuda.yaml", help="for --verb check (relative to the repo)")
    parser.add_argument("--schemas", help="native_functions.yaml (default: the installed torchgen's)")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--yaml-floor", default=str(ROOT / "build" / "bin" / "bench_yaml_floor"),
                        help="bench_yaml_floor (yaml-cpp's event parser, no-op handler); its row is left out when absent")
    options = parser.parse_args()

    native, tags = torchgen_paths()
    schemas = options.schemas or native
    if not Path(options.autocastgen).exists():
        sys.exit(f"{options.autocastgen} does not exist; build it first (cmake --preset default && cmake --build build)")
    # Without --schemas, autocastgen reads the installed file itself, as users run it.
    ours_cmd = [options.autocastgen, options.verb] + (["--schemas", options.schemas] if options.schemas else [])
    if options.verb == "check":
        ours_cmd += ["--policy", options.policy]

    ours = time_process(ours_cmd, options.runs, ROOT)
    startup = time_process([options.autocastgen, "--version"], options.runs, ROOT)
    floor = time_process([options.yaml_floor, schemas], options.runs, ROOT) if Path(options.yaml_floor).exists() else None
    warm, functions = torchgen_warm(schemas, tags, options.runs)
    cold_script = ("from torchgen.gen import parse_native_yaml; "
                   f"parse_native_yaml({schemas!r}, {tags!r})")
    cold = time_process([sys.executable, "-c", cold_script], options.runs, ROOT)

    size = os.path.getsize(schemas)
    load = os.getloadavg()[0]
    print(f"Input: {schemas} ({size / 1024:.0f} KiB, {functions} native functions); "
          f"{options.runs} runs each; {platform.node()}, {os.cpu_count()} CPUs, load average {load:.1f}\n")
    print("| what | wall median | wall min | ours / this (wall) | CPU median | ours / this (CPU) |")
    print("|---|---:|---:|---:|---:|---:|")
    shown = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(ours_cmd))
    rows = [(f"ours: `{shown}` (whole process)", ours),
            ("torchgen `parse_native_yaml`, warm interpreter (call only)", warm),
            ("torchgen fresh process (import + parse)", cold),
            ("(part of ours) start-up only: `autocastgen --version`", startup)]
    if floor:
        rows.append(("(floor of ours) yaml-cpp's event parser alone, no-op handler: `bench_yaml_floor`", floor))
    for label, t in rows:
        print(f"| {label} | {t.median() * 1e3:.1f} ms | {min(t.wall) * 1e3:.1f} ms | {ours.median() / t.median():.3f} | "
              f"{t.median_cpu() * 1e3:.1f} ms | {ours.median_cpu() / t.median_cpu():.3f} |")
    target = 0.07  # issue 14's goal, wall and CPU
    ratio = ours.median() / warm.median()
    verdict = "meets" if ratio <= target else "misses"
    print(f"\nRatio ours / torchgen warm parse (wall) = {ratio:.3f} ({verdict} the target of <= {target:.2f}); "
          f"CPU: {ours.median_cpu() / warm.median_cpu():.3f}.")
    if floor:
        print(f"yaml-cpp alone / torchgen warm parse: {floor.median() / warm.median():.3f} wall, "
              f"{floor.median_cpu() / warm.median_cpu():.3f} CPU (no reader on yaml-cpp goes below this); "
              f"ours / yaml-cpp alone: {ours.median_cpu() / floor.median_cpu():.2f} CPU.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
