#!/usr/bin/env python3
"""Header-only check of one PyTorch release (2.4 to 2.15) from the release cache: the wrappers for
every eligible overload of that release's native_functions.yaml, generated for that release, and
the runtime library compile against that release's headers (`-fsyntax-only`: each wrapper's
static_assert against at::_ops is checked; nothing is linked, so no torch library is needed).

The runtime is one translation unit: every public header (so they also compose: one that names
::torch must not find autocastgen::torch), then every source. The sources are built one by one,
each with the precompiled torch headers, against the pinned and the rotating release; here what is
checked is that the API they use exists in this release, and torch's headers are parsed once
rather than once a file (150 -> 15 CPU s a release). The two compiles run in parallel."""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUR_INCLUDES = ["runtime/include", "runtime/torch", "core", "kernels/common/include", "kernels/cpu/include",
                "kernels/cuda/include", "kernels/fp8/common/include", "kernels/fp8/cpu/include",
                "kernels/fp8/cuda/include"]


def cached_release(release: str) -> Path:
    found = subprocess.run([sys.executable, str(ROOT / "scripts" / "torch-releases"), "path", "--cached", release],
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"FAIL: {found.stderr.strip()}")
    return Path(found.stdout.strip())


def compile_one(cxx: str, flags: list[str], source: Path) -> tuple[Path, float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run([cxx, *flags, "-fsyntax-only", str(source)], capture_output=True, text=True)
    return source, time.monotonic() - start, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True)
    parser.add_argument("--release", required=True, help="X.Y")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    parser.add_argument("--cuda-include", default="", help="the CUDA toolkit's include directory, for the CUDA glue")
    parser.add_argument("--jobs", type=int, default=2)
    options = parser.parse_args()

    folder = cached_release(options.release)
    schemas = folder / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml"
    flags = ["-std=c++20", "-w", f"-isystem{folder / 'include'}", f"-isystem{folder / 'include/torch/csrc/api/include'}"]
    flags += [f"-I{ROOT / d}" for d in OUR_INCLUDES]
    headers = sorted((ROOT / "runtime" / "include").rglob("*.h"))
    sources = sorted((ROOT / "runtime" / "torch").rglob("*.cpp"))  # every room: state/, policies/, ..., fp8/
    if options.cuda_include:
        flags.append(f"-isystem{options.cuda_include}")
    else:
        sources = [s for s in sources if not s.name.endswith("_cuda.cpp")]

    with tempfile.TemporaryDirectory(prefix=f"release-{options.release}-") as tmp:
        out = Path(tmp)
        # Every eligible overload, listed by that release's own torchgen (tests/all_ops/make_policy.py).
        policy = out / "all_ops.yaml"
        made = subprocess.run([sys.executable, str(ROOT / "tests" / "all_ops" / "make_policy.py"), str(schemas), str(policy)],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(folder)})
        if made.returncode != 0:
            print(f"FAIL: listing the eligible ops of {options.release}:\n{made.stderr}")
            return 1
        generated = subprocess.run([options.autocastgen, "generate", "--policy", str(policy), "--schemas", str(schemas),
                                    "--torch-version", options.release, "--out", str(out), "--name", "all_ops",
                                    "--no-fallthrough"], capture_output=True, text=True)
        if generated.returncode != 0:
            print(f"FAIL: autocastgen generate for {options.release}:\n{generated.stderr}")
            return 1
        wrappers = out / "autocast_all_ops.cpp"
        first_line = wrappers.read_text().splitlines()[0]
        if f"for PyTorch {options.release}" not in first_line:
            print(f"FAIL: the @generated line does not name PyTorch {options.release}: {first_line}")
            return 1
        # The runtime's sources share no names at file scope, anonymous namespaces included
        # (docs/architecture.md), so they compile as one unit; an error names its own file:line.
        runtime = out / "runtime_unit.cpp"
        runtime.write_text("".join(f'#include "{path}"\n' for path in [*headers, *sources]))
        units = {wrappers: f"generated wrappers ({made.stdout.strip()})",
                 runtime: f"runtime: {len(headers)} public headers, {len(sources)} sources"}
        failures = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs) as pool:
            for source, seconds, proc in pool.map(lambda s: compile_one(options.cxx, flags, s), units):
                if proc.returncode != 0:
                    failures += 1
                    errors = [line for line in proc.stderr.splitlines() if "error" in line]
                    print(f"FAIL {units[source]}: {len(errors)} errors against PyTorch {options.release}'s headers")
                    print("\n".join(proc.stderr.splitlines()[:40]))
                else:
                    print(f"ok   {units[source]} ({seconds:.1f} s)")
    print(f"{len(units) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
