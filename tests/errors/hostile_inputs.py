#!/usr/bin/env python3
"""Hostile inputs end in a located error within bounded memory (issue 47, "a policy is data").

Each input is made at test time (a 65 KB billion laughs, 50 MB of unknown ops, nesting 100,000
deep, a 60,000-space line, a 5000-digit number, ESC sequences in names, a million nodes, ...) and
given to the CLI under `ulimit -v 200000` (RLIMIT_AS). Every case must end by itself with its exit
status (1; 0 where the input is fine and only its display is at stake), print the expected error
at the expected place, never abort (no "terminate called", no signal) and never write a raw
control character to the terminal. Wall time and peak RSS are printed, never checked.

Usage: hostile_inputs.py --autocastgen BIN [--keep DIR]   (exit 1 on failure)
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MINI_SCHEMAS = ROOT / "tests" / "data" / "schemas" / "mini_native_functions.yaml"
ADDRESS_SPACE = 200_000 * 1024  # `ulimit -v 200000`
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


@dataclass
class Case:
    name: str
    args: list[str]
    first_line: str  # a regex the first line of stderr must match
    exit: int = 1
    also: str = ""  # a regex the whole output (stdout + stderr) must match somewhere
    address_space: int = ADDRESS_SPACE


def write_inputs(folder: Path) -> list[Case]:
    check = lambda path: ["check", "--policy", str(path), "--schemas", str(MINI_SCHEMAS)]  # noqa: E731
    cases: list[Case] = []

    # Billion laughs in 65 KB: a 60,000-byte scalar anchored, nine levels of ten aliases.
    laughs = ["autocast: {device: cpu}", "big: &a0 ['" + "x" * 60_000 + "']"]
    laughs += [f"l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    (folder / "laughs.yaml").write_text("\n".join(laughs) + "\n")
    cases.append(Case("billion laughs, 65 KB", check(folder / "laughs.yaml"),
                      rf"^{re.escape(str(folder / 'laughs.yaml'))}:5:\d+: error: invalid YAML: anchors and aliases copy "
                      r"more than 64 MiB$"))
    # Memory running out (a tighter limit than the copies need): one error line, never SIGABRT
    # (Note [the CLI never aborts] in codegen/cli/main.cpp). Where the CLI starts small (the old-ABI
    # builds link less), the copies' limit may come first: either line is an orderly end.
    cases.append(Case("out of memory (ulimit -v 40000)", check(folder / "laughs.yaml"),
                      r"^(autocastgen: error: out of memory \(the input is too large for the memory this process may use\)"
                      rf"|{re.escape(str(folder / 'laughs.yaml'))}:5:\d+: error: invalid YAML: anchors and aliases copy "
                      r"more than 64 MiB)$",
                      address_space=40_000 * 1024))
    small = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    small += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    (folder / "laughs_small.yaml").write_text("\n".join(small) + "\n")
    cases.append(Case("billion laughs, 500 bytes", check(folder / "laughs_small.yaml"),
                      rf"^{re.escape(str(folder / 'laughs_small.yaml'))}:\d+:\d+: error: invalid YAML: anchors and "
                      r"aliases copy more than 64 MiB$"))

    # Unknown ops: 50 MB (over the limit of policy files), and 1 MiB less a little (under it).
    header = "autocast:\n  device: cpu\nlists:\n  fp32:\n"
    for name, size in (("unknown_50mb.yaml", 50_000_000), ("unknown_1mib.yaml", (1 << 20) - 64)):
        with open(folder / name, "w") as f:
            f.write(header)
            written, i = len(header), 0
            while written + 24 < size:
                line = f"    - no_such_op_{i}\n"
                f.write(line)
                written += len(line)
                i += 1
    cases.append(Case("50 MB of unknown ops", check(folder / "unknown_50mb.yaml"),
                      rf"^autocastgen: error: cannot read policy '{re.escape(str(folder / 'unknown_50mb.yaml'))}': larger "
                      r"than 1 MiB, the limit for policy files$"))
    cases.append(Case("1 MiB of unknown ops", check(folder / "unknown_1mib.yaml"),
                      rf"^{re.escape(str(folder / 'unknown_1mib.yaml'))}:5:7: error: unknown op 'no_such_op_0'$",
                      also=r"autocastgen: note: more than 20 errors; the rest are counted, not shown\n"
                           r".*: \d+ errors \(\d+ not shown\) generated\.\n$"))
    cases.append(Case("/dev/zero as a policy", check("/dev/zero"),
                      r"^autocastgen: error: cannot read policy '/dev/zero': larger than 1 MiB, the limit for policy files$"))

    # Nesting: flow and block, far past the limit.
    (folder / "deep_flow.yaml").write_text("lists: " + "[" * 100_000 + "]" * 100_000 + "\n")
    cases.append(Case("nesting 100,000 deep (flow)", check(folder / "deep_flow.yaml"),
                      rf"^{re.escape(str(folder / 'deep_flow.yaml'))}:1:71: error: invalid YAML: nesting deeper than 64 levels$"))
    (folder / "deep_block.yaml").write_text("".join(" " * i + "- \n" for i in range(200)))
    cases.append(Case("nesting 200 deep (block)", check(folder / "deep_block.yaml"),
                      rf"^{re.escape(str(folder / 'deep_block.yaml'))}:65:65: error: invalid YAML: nesting deeper than 64 levels$"))

    # A 60,000-space `extends:` line (quadratic in a regex elsewhere): a located error, the line
    # shown around its column.
    (folder / "spaces.yaml").write_text("extends:" + " " * 60_000 + "base.yaml\nautocast:\n  device: cpu\n")
    cases.append(Case("a 60,000-space extends: line", check(folder / "spaces.yaml"),
                      rf"^{re.escape(str(folder / 'spaces.yaml'))}:1:60009: error: cannot read extended policy ",
                      also=r"\n\.\.\. {100}base\.yaml\n {103}\^"))

    # An op name holding ESC (YAML's "\e"): the message prints it escaped.
    (folder / "esc_op.yaml").write_text('autocast: {device: cpu}\nlists:\n  fp32: ["mm\\e[31m\\e]0;title\\a"]\n')
    cases.append(Case("ESC in an op name", check(folder / "esc_op.yaml"),
                      rf"^{re.escape(str(folder / 'esc_op.yaml'))}:3:10: error: malformed op name 'mm\\x1b\[31m\\x1b\]0;title\\x07'; "))

    # Statistics files.
    def stats_file(name: str, op: str = "aten::mm", calls: str = "1", module: str | None = None, extra: str = "") -> Path:
        module_member = f'"module": "{module}", ' if module is not None else ""
        (folder / name).write_text(
            f'{{"version": 1, "ops": [{{"op": "{op}", "policy": "fp32", {module_member}"calls": {calls}, '
            f'"ran_in": {{"Float": 1}}, "casts": 0, "cast_bytes": 0, "cache_hits": 0{extra}}}]}}\n')
        return folder / name

    digits = stats_file("digits.json", calls="9" * 5000)
    cases.append(Case("a 5000-digit count", ["stats", str(digits)],
                      rf"^{re.escape(str(digits))}:1:70: error: 'calls' must be a non-negative integer, found "
                      r"'9{40}\.\.\.'$"))
    cases.append(Case("a 5000-digit count, report", ["report", str(digits), "-o", str(folder / "never.html")],
                      rf"^{re.escape(str(digits))}:1:70: error: 'calls' must be a non-negative integer, found '9{{40}}\.\.\.'$",
                      also=r"autocastgen: 1 error; no report written\n$"))
    huge = stats_file("huge_float.json", extra=', "output_max_abs": 1' + "0" * 5000)
    cases.append(Case("a 5000-digit magnitude", ["stats", str(huge)],
                      rf"^{re.escape(str(huge))}:1:\d+: error: 'output_max_abs' must be a non-negative number or null, "
                      r"found '10{39}\.\.\.'$"))
    esc = stats_file("esc.json", op="aten::mm\\u001b[31mRED\\u001b[0m", module="enc\\u001b]0;pwned\\u0007oder\\u009b2J")
    cases.append(Case("ESC sequences in names", ["stats", "--by", "module", str(esc)], r"^$", exit=0,
                      also=r"enc\\x1b\]0;pwned\\x07oder\\u009b2J +aten::mm\\x1b\[31mRED\\x1b\[0m +fp32"))
    long_module = stats_file("long_module.json", module=".".join(["layer"] * 200_000))
    cases.append(Case("a 1.2 MB module path", ["stats", str(long_module)],
                      rf"^{re.escape(str(long_module))}:1:71: error: 'module' is 1199999 bytes long; names in statistics "
                      r"files hold at most 1048576 bytes$"))
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    cases.append(Case("JSON nested 100,000 deep", ["stats", str(folder / "deep.json")],
                      rf"^{re.escape(str(folder / 'deep.json'))}:1:65: error: invalid JSON: nesting deeper than 64 levels$"))
    (folder / "nodes.json").write_text("[" + "1," * 1_000_000 + "1]")
    cases.append(Case("a million and one nodes", ["stats", str(folder / "nodes.json")],
                      rf"^{re.escape(str(folder / 'nodes.json'))}:1:2000000: error: invalid JSON: more than 1000000 nodes "
                      r"in one document$"))
    return cases


def run(cli: str, case: Case) -> tuple[bool, str]:
    """Runs one case; its own peak RSS from os.wait4."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (case.address_space, case.address_space))  # noqa: E731
        process = subprocess.Popen([cli, *case.args], stdout=out, stderr=err, cwd=ROOT, preexec_fn=limit)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    problems = []
    if process.returncode != case.exit:
        problems.append(f"exit {process.returncode}, expected {case.exit}")
    if "terminate called" in stderr or "Traceback" in stderr:
        problems.append("aborted or a traceback")
    first = stderr.split("\n", 1)[0]
    if not re.search(case.first_line, first):
        problems.append(f"first line of stderr {first[:300]!r} does not match {case.first_line!r}")
    if case.also and not re.search(case.also, stdout + stderr, re.DOTALL):
        problems.append(f"output does not match {case.also!r}:\n{(stdout + stderr)[:2000]}")
    if found := CONTROL.search(stdout + stderr):
        problems.append(f"a raw control character in the output: {found.group()!r}")
    if len(stderr) > 64 * 1024:
        problems.append(f"{len(stderr)} bytes of diagnostics")
    line = f"{'ok  ' if not problems else 'FAIL'} {case.name:30} exit {process.returncode}  {seconds:5.2f} s  " \
           f"peak RSS {usage.ru_maxrss / 1024:5.0f} MiB"
    return not problems, line + "".join(f"\n     {p}" for p in problems)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--autocastgen", required=True)
    parser.add_argument("--keep", help="write the inputs here and keep them")
    options = parser.parse_args()
    cli = os.path.abspath(options.autocastgen)
    with tempfile.TemporaryDirectory(prefix="autocastgen_hostile_") as tmp:
        folder = Path(options.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        results = [run(cli, case) for case in write_inputs(folder)]
    for _, line in results:
        print(line)
    failed = sum(not ok for ok, _ in results)
    print(f"{failed} of {len(results)} failed (under ulimit -v {ADDRESS_SPACE // 1024})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
