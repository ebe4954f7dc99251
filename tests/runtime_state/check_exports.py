#!/usr/bin/env python3
"""The runtime library exports the runtime and nothing of the generator or of the policy core it
links for runtime policies: no symbol of autocastgen's model/schema/policy/emit/audit/import/cli
namespaces, of yaml-cpp or of fmt among its dynamic symbols (issue 13: the runtime no longer links
the generator; the policy core is linked in and kept private)."""
from __future__ import annotations

import re
import subprocess
import sys

FOREIGN = re.compile(r"^(autocastgen::(model|schema|policy|emit|audit|import|cli)::|YAML::|fmt::)")
# What the library must export for generated wrappers and users (a few of each header).
REQUIRED = [
    "autocastgen::torch::wrapper_trace()",
    "autocastgen::torch::is_eligible(",
    "autocastgen::register_runtime_policy(",
    "autocastgen::AutocastScope::AutocastScope(",
    "autocastgen::cached_cast(",
    "autocastgen::stats::thread_counters(",
    "autocastgen::stats::StatsScope::StatsScope(",
    "autocastgen::stats::observe_outputs(",
    "autocastgen::stats::FiniteWatch::FiniteWatch(",
]


def main() -> int:
    library = sys.argv[1]
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", library], capture_output=True, text=True, check=True).stdout
    names = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    foreign = sorted(n for n in names if FOREIGN.match(n))
    missing = [r for r in REQUIRED if not any(n.startswith(r) for n in names)]
    for name in foreign[:40]:
        print(f"FAIL exported: {name}")
    if len(foreign) > 40:
        print(f"FAIL ... and {len(foreign) - 40} more")
    for name in missing:
        print(f"FAIL not exported: {name}")
    if foreign or missing:
        return 1
    print(f"{len(names)} dynamic symbols, none of the generator, the policy core, yaml-cpp or fmt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
