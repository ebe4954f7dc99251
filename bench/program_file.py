"""Reading a program file as data, timed against PyTorch's own loader in the same run
(docs/security.md#program-files): `autocastgen precision-map` and `autocastgen apply` on a small
program and on the same program whose first weight's record is a zip bomb (4 GiB of zeros
deflated to a few MB, its declared shape unchanged), and torch.export.load on both.

Each row is a fresh process (wall time and peak resident memory of the child, medians of --runs);
the baseline is the small program through the same command.

  python3 bench/program_file.py [--runs 3] [--build build]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one child process (its own rusage, from wait4)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--build", default=str(REPO / "build"))
    args = parser.parse_args()
    build = Path(args.build).resolve()
    import torch

    from hostile_programs import zip_bomb

    folder = Path(tempfile.mkdtemp(prefix="program-file-bench-"))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    torch.export.save(torch.export.export(model, (torch.randn(4, 16),)), folder / "small.pt2")
    start = time.perf_counter()
    zip_bomb(folder / "small.pt2", folder / "bomb.pt2")
    print(f"bomb: {(folder / 'bomb.pt2').stat().st_size / 2**20:.1f} MiB on disk, made in {time.perf_counter() - start:.1f} s")
    env = dict(os.environ, AUTOCASTGEN_PYTHON=sys.executable)
    cli = str(build / "bin" / "autocastgen")
    torch_load = [sys.executable, "-c", "import sys, torch; torch.export.load(sys.argv[1])"]
    rows = [
        ("precision-map", lambda p: [cli, "precision-map", str(p)]),
        ("apply", lambda p: [cli, "apply", str(p), "--dtype", "bfloat16", "-o", str(folder / "out.pt2")]),
        ("torch.export.load", lambda p: [*torch_load, str(p)]),
    ]
    # In one process, start-up left out: autocastgen.precision_map of each file.
    sys.path.insert(0, str(build / "python"))
    import autocastgen

    def in_process(path: Path) -> float:
        times = []
        for _ in range(max(5, args.runs)):
            start = time.perf_counter()
            autocastgen.precision_map(path)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    autocastgen.precision_map(folder / "small.pt2")  # imports and first-call costs out of the timings
    print(f"autocastgen.precision_map in one process: small {in_process(folder / 'small.pt2') * 1e3:.1f} ms, "
          f"bomb {in_process(folder / 'bomb.pt2') * 1e3:.1f} ms")
    print("| command | small program: s, MiB | zip bomb: s, MiB, exit | bomb - small, s |")
    print("|---|---|---|---|")
    for name, command in rows:
        results = {}
        for program in ("small", "bomb"):
            runs = [timed(command(folder / f"{program}.pt2"), env) for _ in range(args.runs)]
            results[program] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2])
        (small_s, small_mb, _), (bomb_s, bomb_mb, code) = results["small"], results["bomb"]
        print(f"| {name} | {small_s:.2f}, {small_mb:.0f} | {bomb_s:.2f}, {bomb_mb:.0f}, {code} | {bomb_s - small_s:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
