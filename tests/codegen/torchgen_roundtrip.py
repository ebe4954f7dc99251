#!/usr/bin/env python3
"""Round trip against torchgen: `autocastgen schema` must print, for every `func:` entry of a
native_functions.yaml, exactly the canonical text and SchemaKind that torchgen gives it.

torchgen's own FunctionSchema.parse checks that printing a parsed schema gives back its input, so
its str() is the canonical form; kind() is its classification. Lines are
`<canonical schema>\\t<functional|inplace|out|mutable|scratch>`, in file order.
"""
from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
from pathlib import Path


def torchgen_lines(path: str) -> list[str]:
    import yaml
    from torchgen.model import FunctionSchema

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as f:
        entries = yaml.load(f, Loader=loader)
    lines = []
    for entry in entries:
        schema = FunctionSchema.parse(entry["func"])
        lines.append(f"{schema}\t{schema.kind().name}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--schemas", help="a native_functions.yaml, compared with the importable torchgen")
    source.add_argument("--release", help="a release in the cache of scripts/torch-releases: its native_functions.yaml, "
                                          "compared with its own torchgen")
    parser.add_argument("--max-diff-lines", type=int, default=60)
    options = parser.parse_args()
    if options.release:
        root = Path(__file__).resolve().parents[2]
        found = subprocess.run([sys.executable, str(root / "scripts" / "torch-releases"), "path", "--cached", options.release],
                               capture_output=True, text=True)
        if found.returncode != 0:
            print(f"FAIL: {found.stderr.strip()}")
            return 1
        folder = found.stdout.strip()
        sys.path.insert(0, folder)  # that release's torchgen, ahead of the installed one
        options.schemas = str(Path(folder) / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml")

    expected = torchgen_lines(options.schemas)
    proc = subprocess.run([options.autocastgen, "schema", "--schemas", options.schemas], capture_output=True)
    if proc.returncode != 0:
        print(f"FAIL: autocastgen schema exited with {proc.returncode}")
        print(proc.stderr.decode("utf-8", errors="replace"))
        return 1
    actual = proc.stdout.decode("utf-8").split("\n")
    if actual and actual[-1] == "":
        actual.pop()
    else:
        print("FAIL: autocastgen's output does not end with a newline")
        return 1
    if not expected:
        print("FAIL: torchgen found no entries; nothing was compared")
        return 1

    if actual == expected:
        print(f"OK: {len(expected)} schemas, canonical text and kind identical to torchgen's")
        return 0
    mismatched = sum(1 for a, e in zip(actual, expected) if a != e) + abs(len(actual) - len(expected))
    print(f"FAIL: {mismatched} of {len(expected)} lines differ (torchgen: {len(expected)} lines, "
          f"autocastgen: {len(actual)} lines)")
    diff = list(difflib.unified_diff(expected, actual, fromfile="torchgen", tofile="autocastgen schema", lineterm="",
                                     n=1))
    for line in diff[:options.max_diff_lines]:
        print(line)
    if len(diff) > options.max_diff_lines:
        print(f"... ({len(diff) - options.max_diff_lines} more diff lines)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
