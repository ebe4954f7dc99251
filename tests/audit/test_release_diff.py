#!/usr/bin/env python3
"""`audit diff --schemas A --schemas B` across every pair of supported releases (1.13 to 2.15): one
release-gated policy read under two releases differs exactly by the entries whose gates admit one
release and not the other, each flagged as absent from the other side's schemas when the op is.

The releases come from the cache that `scripts/torch-releases fetch` fills (outside the clone)."""
from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "data" / "policies" / "cross_release.yaml"


def release_key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def expected_ops(release: str) -> set[str]:
    """The ops the policy lists for `release`, from its gates alone."""
    listed = set()
    for entries in yaml.safe_load(POLICY.read_text())["lists"].values():
        for entry in entries:
            entry = entry if isinstance(entry, dict) else {"op": entry}
            since, until = entry.get("since"), entry.get("until")
            if since and release_key(release) < release_key(str(since)):
                continue
            if until and release_key(release) >= release_key(str(until)):
                continue
            listed.add(entry["op"])
    return listed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocastgen", required=True)
    options = parser.parse_args()

    releases = subprocess.run([str(ROOT / "scripts" / "torch-releases"), "list", "--codegen"],
                              capture_output=True, text=True, check=True).stdout.split()
    schemas = {}
    for release in releases:
        folder = subprocess.run([str(ROOT / "scripts" / "torch-releases"), "path", release], capture_output=True, text=True)
        path = Path(folder.stdout.strip()) / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml"
        if folder.returncode != 0 or not path.exists():
            print(f"torch {release} is not in the release cache: run scripts/torch-releases fetch\n{folder.stderr}")
            return 1
        schemas[release] = path

    failures = 0
    for a, b in itertools.combinations(releases, 2):
        proc = subprocess.run([options.autocastgen, "audit", "diff", str(POLICY), str(POLICY), "--schemas", str(schemas[a]),
                               "--schemas", str(schemas[b]), "--format", "json"], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"FAIL {a} -> {b}: exit {proc.returncode}\n{proc.stderr}")
            failures += 1
            continue
        diff = json.loads(proc.stdout)
        added = {e["op"] for e in diff["added"]}
        removed = {e["op"] for e in diff["removed"]}
        want_added = expected_ops(b) - expected_ops(a)
        want_removed = expected_ops(a) - expected_ops(b)
        problems = []
        if added != want_added:
            problems.append(f"added {sorted(added)}, expected {sorted(want_added)}")
        if removed != want_removed:
            problems.append(f"removed {sorted(removed)}, expected {sorted(want_removed)}")
        if diff["changed"]:
            problems.append(f"changed {diff['changed']}")
        if problems:
            print(f"FAIL {a} -> {b}: " + "; ".join(problems))
            failures += 1
    pairs = len(releases) * (len(releases) - 1) // 2
    print(f"{pairs - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
