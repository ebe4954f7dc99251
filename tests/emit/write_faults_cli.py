#!/usr/bin/env python3
"""Write faults in the verbs that write files, `generate` and `import -o` (issue 19, finding 2).

Each case gives the verb a previous output to replace, then makes the write fail:
  - a file-size limit (RLIMIT_FSIZE, as `ulimit -f`): SIGXFSZ used to kill the process (exit 153)
    and leave `<file>.tmp<pid>` behind; now exit 1 and "cannot write '<file>': File too large";
  - a full file system (a 64 KiB tmpfs filled to the last byte, tests/python/full_disk.py; skipped
    where no tmpfs can be mounted): exit 1 and "cannot write '<file>': No space left on device";
    and printed output to /dev/full: exit 1 and "cannot write the output: No space left on device";
  - a rename that cannot succeed (a non-empty directory where the output goes);
  - SIGTERM and SIGINT while the temporary exists: it is made a FIFO beforehand (its name is
    `<file>.tmp<pid>`, and `exec` keeps the shell's pid), so the writer blocks in it, with part of
    the data sent (generate) or opening it (import); the process must end by that signal, the FIFO
    removed.
Every case checks: no `.tmp` file is left, and the previous output is untouched.

Usage: write_faults_cli.py --autocastgen BIN [--import]   (prints one line per case; exit 1 on failure)
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from full_disk import Unavailable, full_file_system  # noqa: E402

PREVIOUS = "previous output\n"
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def leftovers(out: Path) -> list[str]:
    return sorted(str(p) for p in out.rglob("*") if ".tmp" in p.name)


def fresh(out: Path, name: str) -> Path:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    target = out / name
    target.write_text(PREVIOUS)
    return target


def file_size_limit(verb: str, args: list[str], out: Path, name: str, limit: int) -> None:
    target = fresh(out, name)

    def limit_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run(args, capture_output=True, text=True, preexec_fn=limit_size, cwd=ROOT)
    check(r.returncode == 1, f"{verb}, file-size limit: exit 1 (got {r.returncode}; 153 is death by SIGXFSZ)")
    check(f"error: cannot write '{target}': File too large" in r.stderr, f"{verb}, file-size limit: message\n{r.stderr}")
    check(target.read_text() == PREVIOUS, f"{verb}, file-size limit: previous output untouched")
    check(leftovers(out) == [], f"{verb}, file-size limit: no temporary left: {leftovers(out)}")


def full_disk(verb: str, args_in: Callable[[Path], list[str]], name: str) -> None:
    try:
        with full_file_system({name: PREVIOUS.encode()}) as out:
            target = out / name
            r = subprocess.run(args_in(out), capture_output=True, text=True, cwd=ROOT)
            check(r.returncode == 1, f"{verb}, full disk: exit 1 (got {r.returncode})")
            check(f"error: cannot write '{target}': No space left on device" in r.stderr, f"{verb}, full disk: message\n{r.stderr}")
            check(target.read_text() == PREVIOUS, f"{verb}, full disk: previous output untouched")
            check(leftovers(out) == [], f"{verb}, full disk: no temporary left: {leftovers(out)}")
    except Unavailable as why:
        print(f"skip {verb}, full disk: {why}")


def stdout_full(cli: str) -> None:
    """Printed output to a full disk (/dev/full) is an error too, never status 0 over a cut file."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([cli, "schema", "--schemas", "tests/data/schemas/mini_native_functions.yaml"], stdout=full,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT)
    check(r.returncode == 1, f"schema > /dev/full: exit 1 (got {r.returncode})")
    check(r.stderr == "autocastgen: error: cannot write the output: No space left on device\n",
          f"schema > /dev/full: message\n{r.stderr}")


def rename_fails(verb: str, args: list[str], out: Path, name: str) -> None:
    shutil.rmtree(out, ignore_errors=True)
    (out / name / "inside").mkdir(parents=True)
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    check(r.returncode == 1, f"{verb}, failed rename: exit 1 (got {r.returncode})")
    check(f"error: cannot write '{out / name}': Is a directory" in r.stderr, f"{verb}, failed rename: message\n{r.stderr}")
    check((out / name / "inside").is_dir() and leftovers(out) == [], f"{verb}, failed rename: nothing changed or left")


def wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


def interrupted(verb: str, args: list[str], out: Path, name: str, sig: signal.Signals, mid_write: bool) -> None:
    """mid_write: a reader takes the first bytes, and the writer blocks on the full pipe (outputs
    over 64 KiB); else the writer blocks opening the temporary, waiting for a reader."""
    target = fresh(out, name)
    script = 'mkfifo "$1.tmp$$" && shift && exec "$@"'
    proc = subprocess.Popen(["sh", "-c", script, "sh", str(target), *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    fifo = Path(f"{target}.tmp{proc.pid}")
    deadline = time.monotonic() + 120
    reader = None
    if mid_write:
        while not fifo.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        data = b""
        while not data and time.monotonic() < deadline and proc.poll() is None:
            try:
                data = os.read(reader, 4096)
            except BlockingIOError:
                time.sleep(0.05)
        check(bool(data), f"{verb}, {sig.name}: the writer was mid-write")
    else:
        while "wait_for_partner" not in wchan(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        check("wait_for_partner" in wchan(proc.pid), f"{verb}, {sig.name}: the writer was opening its temporary")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if reader is not None:
        os.close(reader)
    check(proc.returncode == -sig, f"{verb}, {sig.name}: ended by the signal (returncode {proc.returncode})\n{err}")
    check(not fifo.exists() and leftovers(out) == [], f"{verb}, {sig.name}: temporary removed: {leftovers(out)}")
    check(target.is_file() and target.read_text() == PREVIOUS, f"{verb}, {sig.name}: previous output untouched")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--autocastgen", required=True)
    parser.add_argument("--import", dest="with_import", action="store_true", help="also test `import -o` (needs the importer)")
    options = parser.parse_args()
    cli = os.path.abspath(options.autocastgen)
    with_import = options.with_import
    with tempfile.TemporaryDirectory(prefix="autocastgen_faults_") as tmp:
        out = Path(tmp) / "out"
        generate = [cli, "generate", "--policy", "schemas/policies/cpu.yaml", "--out", str(out)]
        file_size_limit("generate", generate, out, "autocast_cpu.cpp", 50 * 1024)  # the issue's `ulimit -f 50`
        full_disk("generate", lambda folder: [*generate[:-1], str(folder)], "autocast_cpu.cpp")
        stdout_full(cli)
        rename_fails("generate", generate, out, "autocast_cpu.cpp")
        for sig in (signal.SIGTERM, signal.SIGINT):
            interrupted("generate", generate, out, "autocast_cpu.cpp", sig, mid_write=True)
        if with_import:
            imp = [cli, "import", "tests/audit/fixtures/two_keys.cpp", "-o", str(out)]
            file_size_limit("import -o", imp, out, "cpu.yaml", 300)
            rename_fails("import -o", imp, out, "cpu.yaml")
            interrupted("import -o", imp, out, "cpu.yaml", signal.SIGTERM, mid_write=False)
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
