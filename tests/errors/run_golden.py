#!/usr/bin/env python3
"""Golden diagnostics runner: runs each case's `# RUN:` line and compares its output byte for byte.

A case is a file whose first line is `# RUN: autocastgen <args>`; `%s` in the args is the case
file's path relative to the repository root and `%S` its directory. An optional second line
`# EXIT: N` gives the expected exit status (default 1). The command runs from the repository root;
its stdout and stderr, merged, must equal `<case>.expected`. With --update the expected files are
rewritten instead (the exit status must still match).
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

RUN_RE = re.compile(r"^# RUN: autocastgen(?: (?P<args>.*))?$")
EXIT_RE = re.compile(r"^# EXIT: (?P<code>-?\d+)$")


class CaseError(Exception):
    pass


def read_header(case: Path) -> tuple[list[str], int]:
    lines = case.read_bytes().decode("utf-8", errors="replace").splitlines()
    if not lines or not (m := RUN_RE.match(lines[0])):
        raise CaseError(f"{case}: the first line must be '# RUN: autocastgen <args>'")
    exit_code = 1
    if len(lines) > 1 and (e := EXIT_RE.match(lines[1])):
        exit_code = int(e.group("code"))
    return shlex.split(m.group("args") or ""), exit_code


def is_case(path: Path) -> bool:
    if not path.is_file() or path.suffix == ".expected":
        return False
    with path.open("rb") as f:
        return f.readline().startswith(b"# RUN: ")


def collect(paths: list[str]) -> list[Path]:
    cases: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            cases.extend(sorted(c for c in p.iterdir() if is_case(c)))
        else:
            cases.append(p)
    return cases


def run_case(case: Path, root: Path, autocastgen: str, update: bool) -> bool:
    rel = Path(os.path.relpath(case.resolve(), root))
    args, expected_exit = read_header(case)
    substituted = [a.replace("%s", rel.as_posix()).replace("%S", rel.parent.as_posix()) for a in args]
    proc = subprocess.run([autocastgen, *substituted], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout
    expected_path = case.resolve().with_name(case.name + ".expected")
    script = Path(os.path.relpath(Path(__file__).resolve(), root)).as_posix()
    refresh = f"(cd {root} && {sys.executable} {script} --autocastgen {autocastgen} --update {rel.as_posix()})"
    ok = True
    if proc.returncode != expected_exit:
        print(f"FAIL {rel}: exit status {proc.returncode}, expected {expected_exit}")
        print(output.decode("utf-8", errors="replace"), end="")
        ok = False
    if update:
        if ok:
            if not expected_path.exists() or expected_path.read_bytes() != output:
                expected_path.write_bytes(output)
                print(f"updated {rel.as_posix()}.expected")
        return ok
    if not expected_path.exists():
        print(f"FAIL {rel}: no {expected_path.name}; create it with:\n  {refresh}")
        return False
    expected = expected_path.read_bytes()
    if expected != output:
        diff = difflib.unified_diff(
            expected.decode("utf-8", errors="replace").splitlines(keepends=True),
            output.decode("utf-8", errors="replace").splitlines(keepends=True),
            fromfile=f"{rel}.expected", tofile=f"{rel} (actual output)")
        print(f"FAIL {rel}: output differs from {expected_path.name}")
        sys.stdout.writelines(diff)
        if not expected.endswith(b"\n") or not output.endswith(b"\n"):
            print("\n(no newline at end of one of them)")
        print(f"If the new output is right, refresh the expected file with:\n  {refresh}")
        ok = False
    if ok:
        print(f"PASS {rel}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True, help="path of the autocastgen binary")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]),
                        help="repository root (commands run there; default: two levels above this script)")
    parser.add_argument("--update", action="store_true", help="rewrite the .expected files")
    parser.add_argument("cases", nargs="+", help="case files, or directories of them")
    options = parser.parse_args()
    root = Path(options.root).resolve()
    autocastgen = str(Path(options.autocastgen).resolve())
    failed = 0
    cases = collect(options.cases)
    if not cases:
        print("no cases found")
        return 1
    for case in cases:
        try:
            if not run_case(case, root, autocastgen, options.update):
                failed += 1
        except CaseError as e:
            print(f"FAIL {e}")
            failed += 1
    if len(cases) > 1:
        print(f"{len(cases) - failed} of {len(cases)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
