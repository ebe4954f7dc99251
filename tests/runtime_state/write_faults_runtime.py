#!/usr/bin/env python3
"""Statistics written at exit under write faults (issue 47; Note [writes under faults] in
core/support/atomic_file.cpp): a C++ program (stats_at_exit) with AUTOCASTGEN_STATS set, under a
file-size limit (`ulimit -f`: SIGXFSZ used to end it at exit, exit status 153, the file lost) and
on a full file system. Each case gives it a previous file: the program must exit 0 with a warning
naming the file and the system's reason, leave the previous file as it was and no temporary.

Then four writers flush one file over and over while 15 of them, one at a time, are killed by
SIGKILL at a random moment and replaced: a reader polling the file must always find it whole (one
JSON document as the runtime writes it), whatever the kills left behind as temporaries.

Usage: write_faults_runtime.py --program BIN   (prints one line per case; exit 1 on failure)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from full_disk import Unavailable, full_file_system, temporaries  # noqa: E402

PREVIOUS = b'{"version": 1, "ops": [], "note": "the previous run"}\n'
failures: list[str] = []


def check(ok: bool, what: str, detail: str = "") -> None:
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else "\n" + detail))
    if not ok:
        failures.append(what)


def run_case(name: str, program: str, folder: Path, reason: str, limit_bytes: int | None = None) -> None:
    target = folder / "stats.json"

    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    env = {**os.environ, "AUTOCASTGEN_STATS": str(target)}
    result = subprocess.run([program], env=env, capture_output=True, text=True, preexec_fn=limit, timeout=120)
    check(result.returncode == 0, f"{name}: exit 0 (got {result.returncode}; -25 is death by SIGXFSZ)", result.stderr)
    wanted = f"autocastgen: warning: could not write the statistics to '{target}' (AUTOCASTGEN_STATS): {reason}"
    check(wanted in result.stderr, f"{name}: the warning names the file and '{reason}'", result.stderr)
    check(target.read_bytes() == PREVIOUS, f"{name}: the previous file is untouched")
    check(temporaries(folder) == [], f"{name}: no temporary left: {temporaries(folder)}")


def killed_writers(program: str, kills: int = 15) -> None:
    with tempfile.TemporaryDirectory(prefix="autocastgen_stats_kills_") as tmp:
        target = Path(tmp) / "stats.json"
        target.write_bytes(PREVIOUS)
        start = lambda: subprocess.Popen([program, "--flush-forever", str(target)], stdout=subprocess.DEVNULL,  # noqa: E731
                                         stderr=subprocess.DEVNULL)
        writers = [start() for _ in range(4)]
        chance = random.Random(47)
        reads, torn = 0, []
        try:
            for _ in range(kills):
                deadline = time.monotonic() + chance.uniform(0.05, 0.3)
                while time.monotonic() < deadline:
                    text = target.read_bytes()
                    reads += 1
                    try:
                        if json.loads(text)["version"] != 1:
                            torn.append(text[:200])
                    except (ValueError, KeyError, TypeError):
                        torn.append(text[:200])
                victim = chance.randrange(len(writers))
                writers[victim].send_signal(signal.SIGKILL)
                writers[victim].wait()
                writers[victim] = start()
        finally:
            for writer in writers:
                writer.kill()
                writer.wait()
        check(not torn and reads > 0, f"{kills} SIGKILLs among 4 writers: every one of {reads} reads whole", repr(torn[:3]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--program", required=True, help="tests/runtime_state/stats_at_exit")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autocastgen_stats_faults_") as tmp:
        folder = Path(tmp)
        (folder / "stats.json").write_bytes(PREVIOUS)
        run_case("file-size limit", options.program, folder, "File too large", limit_bytes=16)
    try:
        with full_file_system({"stats.json": PREVIOUS}) as folder:
            run_case("full disk", options.program, folder, "No space left on device")
    except Unavailable as why:
        print(f"skip full disk: {why}")
    killed_writers(options.program)
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
