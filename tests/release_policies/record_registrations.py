#!/usr/bin/env python3
"""Record which overloads the running torch registers on its autocast keys: registrations/<release>.json.

Run it with the python of the release to record (a venv from `scripts/torch-releases venv X.Y`, or a
throwaway one with just that torch), from anywhere:
  <python> tests/release_policies/record_registrations.py
Recorded once per release; check_release.py then compares cpu.yaml, cuda.yaml and generic.yaml
resolved for that release with the record, so releases without a venv stay covered.  An overload
counts when the key has a kernel for it that is not a fallthrough.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

# The keys the shipped policies stand for (docs/policies.md): cpu.yaml, cuda.yaml, and the keys
# that register the device-neutral list of generic.yaml.
KEYS = ["AutocastCPU", "AutocastCUDA", "AutocastXPU", "AutocastMTIA", "AutocastMAIA", "AutocastPrivateUse1"]


def key_exists(key: str) -> bool:
    try:
        torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", key)
        return True
    except Exception:  # a DispatchKey this build does not have
        return False


def registered(key: str) -> list[str]:
    found = []
    for qualified in torch._C._dispatch_get_all_op_names():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
            continue
        lines = [line for line in torch._C._dispatch_dump(qualified).splitlines() if line.startswith(key + ":")]
        if lines and all("fallthrough" in line for line in lines):
            continue
        found.append(qualified.removeprefix("aten::"))
    return sorted(found)


def main() -> int:
    version = torch.__version__.split("+")[0]
    release = ".".join(version.split(".")[:2])
    record = {"torch": version, "keys": {key: registered(key) for key in KEYS if key_exists(key)}}
    out = Path(__file__).resolve().parent / "registrations" / f"{release}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    counts = ", ".join(f"{key} {len(ops)}" for key, ops in record["keys"].items())
    print(f"wrote {out}: torch {version}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
