#!/usr/bin/env python3
"""A library built with add_autocast_ops(SHARDS n) registers exactly the AutocastCPU kernels of the
same policy built unsharded: each library is loaded in its own process (two would override each
other's kernels), and the kernels on AutocastCPU registered from its generated files are listed.
Both lists must equal the manifest's ops, and in the sharded library shard k must register the
k-th contiguous group of the manifest's order (Note [shards] in codegen/emit/torch_target.h).

  check_shards.py --build-dir B --library LIB DIR MANIFEST SHARDS [--library ...]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# Runs in the child: loads one library, prints {op: file it was registered from} for AutocastCPU.
CHILD = r"""
import json, re, sys, torch
torch.ops.load_library(sys.argv[1])
found = {}
for op in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"):
    name = op if "::" in op else "aten::" + op
    for line in torch._C._dispatch_dump(name).splitlines():
        match = re.match(r"AutocastCPU: registered at (.*):\d+ ", line)
        if match:
            found[name] = match.group(1)
print(json.dumps(found))
"""


def registered(library: str, generated_dir: Path, build_dir: Path) -> dict[str, str]:
    """Op -> generated file name, for the kernels the library registered from its generated files."""
    out = subprocess.run([sys.executable, "-c", CHILD, library], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"loading {library} failed:\n{out.stdout}{out.stderr}")
    ours = {}
    for op, where in json.loads(out.stdout.splitlines()[-1]).items():
        # A relative __FILE__ (ccache with CCACHE_BASEDIR) is relative to the build directory.
        path = (build_dir / where).resolve()
        if path.parent == generated_dir.resolve():
            ours[op] = path.name
    return ours


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, required=True)
    parser.add_argument("--library", nargs=4, action="append", required=True, metavar=("LIB", "DIR", "MANIFEST", "SHARDS"))
    options = parser.parse_args()
    failures = []
    sets = []
    for library, generated, manifest, shards in options.library:
        shards = int(shards)
        with open(manifest) as f:
            data = json.load(f)
        ops = list(dict.fromkeys(e["op"] if "::" in e["op"] else f"aten::{e['op']}" for e in data["ops"]))
        ours = registered(library, Path(generated), options.build_dir)
        sets.append(set(ours))
        if set(ours) != set(ops):
            failures.append(f"{library}: registered from its generated files {sorted(ours)}, the manifest lists {ops}")
            continue
        stem = Path(manifest).name.removesuffix(".manifest.json")
        names = [f"{stem}.cpp"] + [f"{stem}.shard{k}.cpp" for k in range(2, shards + 1)]
        # Contiguous groups balanced by count, the larger ones first.
        expected, start = {}, 0
        for k, name in enumerate(names):
            size = len(ops) // shards + (1 if k < len(ops) % shards else 0)
            expected.update({op: name for op in ops[start:start + size]})
            start += size
        if ours != expected:
            failures.append(f"{library}: kernels registered from {ours}, expected {expected}")
        print(f"{library}: {len(ours)} AutocastCPU kernels from {len(set(ours.values()))} generated file(s)")
    if len(sets) > 1 and any(s != sets[0] for s in sets):
        failures.append(f"the libraries register different AutocastCPU kernels: {[sorted(s) for s in sets]}")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
