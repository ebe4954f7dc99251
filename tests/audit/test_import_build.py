#!/usr/bin/env python3
"""The importer on this build's own compile database, whose torch files use GCC precompiled headers
(CMake's target_precompile_headers: `-include .../cmake_pch.hxx` with a `.gch` beside it; Note
[precompiled headers in compile commands]): `import FILE -p BUILD_DIR` of a generated file built
with them gives back its policy. One Clang run (about 7 CPU seconds: the precompiled headers are
parsed from source)."""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True)
    parser.add_argument("--build-dir", required=True, type=Path)
    parser.add_argument("--manifest", required=True, type=Path, help="the manifest of a library generated with add_autocast_ops")
    parser.add_argument("--policy", required=True, help="the policy it was generated from")
    options = parser.parse_args()
    source = options.manifest.with_name(options.manifest.name.replace(".manifest.json", ".cpp"))

    # The premise: the build compiles that file with a GCC precompiled header that exists.
    database = json.loads((options.build_dir / "compile_commands.json").read_text())
    entry = next((e for e in database if Path(e["file"]) == source), None)
    if entry is None:
        print(f"FAIL: {source} is not in {options.build_dir}/compile_commands.json")
        return 1
    words = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    headers = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-include"]
    if not headers or not Path(headers[0] + ".gch").exists():
        print(f"FAIL: the build compiles {source.name} without a GCC precompiled header (-include X with X.gch "
              f"beside it), which this test needs; its command: {' '.join(words)}")
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([options.autocastgen, "import", str(source), "-p", str(options.build_dir), "-o", tmp],
                             capture_output=True, text=True)
        if out.returncode != 0 or out.stderr:
            print(f"FAIL: import -p {options.build_dir} (status {out.returncode}):\n{out.stdout}{out.stderr}")
            return 1
        imported = Path(tmp) / "cpu.yaml"
        diff = subprocess.run([options.autocastgen, "audit", "diff", options.policy, str(imported), "--fail-on",
                               "added,removed,changed"], capture_output=True, text=True)
        if diff.returncode != 0:
            print(f"FAIL: the imported policy differs from {options.policy}:\n{diff.stdout}{diff.stderr}")
            return 1
    print(f"{source.name}, compiled with {headers[0]}.gch, imports through -p {options.build_dir} to {options.policy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
